//! The dispatcher: releases each request at its absolute intended time (no drift), behind an
//! optional concurrency cap that queues — never drops — and records the wait.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use servebench_metrics::RequestRecord;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use crate::backend::Backend;
use crate::clock::RunClock;
use crate::collector::{collect, Collected, JsonlSink};
use crate::health::{process_cpu_times, CpuTimes};
use crate::precise_wait::PreciseWait;
use crate::progress::{Drawer, Live, Progress};
use crate::stop::StopSignal;
use crate::telemetry::{Scraper, ServerTelemetry};
use crate::LoadgenError;

/// How to drive one measured run.
#[derive(Debug, Clone, Default)]
pub struct LoadSpec {
    /// Intended send offsets (ns from the run start), one per request, non-decreasing.
    pub schedule: Vec<u64>,
    /// Client-side concurrency cap (`--max-concurrency`).
    pub max_concurrency: Option<usize>,
    /// Live progress on stderr, if wanted.
    pub progress: Option<Progress>,
    /// Scrape the server's `/metrics` this often during the run.
    pub scrape_every: Option<Duration>,
    /// The wall-clock instant of the schedule's time zero (`--start-at`): the run sleeps until
    /// then. An instant already past keeps its place, so the first requests are late rather
    /// than the whole schedule shifted (shards that share it share one time zero).
    pub start_at: Option<SystemTime>,
}

/// What a measured run produced.
#[derive(Debug)]
pub struct LoadOutcome {
    /// Records held in memory, sorted by id: one per dispatched request when the run had no
    /// records file; with a file, only those that could not be written to it (the rest are
    /// read back by [`LoadOutcome::take_records`], so memory stays flat during a long run).
    pub records: Vec<RequestRecord>,
    /// The records file and how many whole records it holds (its first lines).
    pub records_file: Option<(PathBuf, usize)>,
    /// Requests that finished (measured), on disk or in memory.
    pub finished: usize,
    /// Resends over every record (see `RequestRecord::resent`).
    pub resent: u64,
    /// Wall-clock time of the run's time zero: the clock anchor of every record's offsets.
    pub started_at: SystemTime,
    /// From the start of the arrival loop to the end of the last request.
    pub duration_ns: u64,
    /// CPU seconds this process used during the run.
    pub cpu: CpuTimes,
    /// Requests that were never sent because the run was interrupted.
    pub not_dispatched: usize,
    /// The first error writing the JSONL file, if any.
    pub write_error: Option<LoadgenError>,
    /// What the server's `/metrics` said during the run (when scraped).
    pub telemetry: Option<ServerTelemetry>,
    /// The run's clock: where its time zero sits on the monotonic clock, so readings taken
    /// beside the run (GPU telemetry) land on the records' time axis.
    pub clock: RunClock,
    /// GPU telemetry read beside the run; the caller that started a sampler fills it in.
    pub gpu: Option<crate::gpu::GpuTelemetry>,
}

/// The monotonic instant of a wall-clock time: read both clocks back to back and carry the
/// difference over (an instant before the monotonic clock's origin is clamped to it).
fn monotonic_instant_of(at: SystemTime) -> tokio::time::Instant {
    let (wall, mono) = (SystemTime::now(), tokio::time::Instant::now());
    match at.duration_since(wall) {
        Ok(ahead) => mono + ahead,
        Err(e) => mono.checked_sub(e.duration()).unwrap_or(mono),
    }
}

/// Where the dispatcher takes each next request from.
enum Source<R> {
    /// Every request built before the run.
    Ready(std::vec::IntoIter<R>),
    /// Requests built while the run goes, in schedule order.
    Feed(mpsc::Receiver<R>),
}

/// Run `requests` on `client` following `spec`. Records stream into `sink` as they finish.
pub async fn run_load<B: Backend>(
    client: Arc<B>,
    requests: Vec<B::Request>,
    spec: LoadSpec,
    sink: Option<JsonlSink>,
    stop: StopSignal,
) -> Result<LoadOutcome, LoadgenError> {
    if spec.schedule.len() != requests.len() {
        return Err(LoadgenError::Config(format!(
            "schedule has {} entries for {} requests",
            spec.schedule.len(),
            requests.len()
        )));
    }
    drive(
        client,
        Source::Ready(requests.into_iter()),
        spec,
        sink,
        stop,
    )
    .await
}

/// [`run_load`] with requests built while the run goes: request `i` (for `spec.schedule[i]`)
/// is the `i`-th one `feed` yields. A bounded channel keeps the producer just ahead of the
/// schedule, so a long workload starts at once and its built requests never pile up. If the
/// feed ends before the schedule does (the producer stopped), the rest are not dispatched.
/// A request that arrives after its intended time is released late, and the lag is recorded.
pub async fn run_load_feed<B: Backend>(
    client: Arc<B>,
    feed: mpsc::Receiver<B::Request>,
    spec: LoadSpec,
    sink: Option<JsonlSink>,
    stop: StopSignal,
) -> Result<LoadOutcome, LoadgenError> {
    drive(client, Source::Feed(feed), spec, sink, stop).await
}

async fn drive<B: Backend>(
    client: Arc<B>,
    mut source: Source<B::Request>,
    spec: LoadSpec,
    sink: Option<JsonlSink>,
    stop: StopSignal,
) -> Result<LoadOutcome, LoadgenError> {
    let (tx, rx) = mpsc::unbounded_channel();
    let live = Arc::new(Live::default());
    let drawer = spec.progress.clone().map(|p| {
        let last = spec.schedule.last().copied().filter(|&t| t > 0);
        Drawer::start(p, Arc::clone(&live), last.map(Duration::from_nanos))
    });
    let collector = tokio::spawn(collect(rx, sink, Arc::clone(&live), drawer));
    let semaphore = spec
        .max_concurrency
        .map(|n| Arc::new(Semaphore::new(n.max(1))));
    let closed_loop = is_closed_loop(&spec.schedule, spec.max_concurrency);

    open_ahead(&*client, &spec, &stop).await;
    let (started_at, clock) = match spec.start_at {
        None => (SystemTime::now(), RunClock::start_now()),
        Some(at) => {
            let start = monotonic_instant_of(at);
            tokio::select! {
                biased;
                _ = stop.dispatch_stop() => {}
                _ = tokio::time::sleep_until(start) => {}
            }
            (at, RunClock::starting_at(start))
        }
    };
    live.begin();
    let cpu_before = process_cpu_times();
    let total = spec.schedule.len();
    let scraper = spec.scrape_every.and_then(|every| {
        client
            .telemetry_target()
            .map(|target| Scraper::start(target.clone(), clock, every))
    });

    // Requests that found every slot taken wait here, in arrival order (FIFO), for a slot.
    let queued = Arc::new(AtomicUsize::new(0));
    let (queue_tx, mut queue_rx) = mpsc::unbounded_channel::<(B::Request, u64)>();
    let releaser = semaphore.clone().map(|sem| {
        let (client, tx, stop, queued, live) = (
            Arc::clone(&client),
            tx.clone(),
            stop.clone(),
            Arc::clone(&queued),
            Arc::clone(&live),
        );
        tokio::spawn(async move {
            while let Some((prepared, intended)) = queue_rx.recv().await {
                let permit = tokio::select! {
                    biased;
                    p = Arc::clone(&sem).acquire_owned() => p.ok(),
                    _ = stop.dispatch_stop() => None,
                };
                queued.fetch_sub(1, Ordering::AcqRel);
                // Interrupted while queued: never sent, so it is no request.
                let Some(permit) = permit else { continue };
                // A closed loop's user sends when a slot frees: its release is the intended time.
                let intended = (!closed_loop).then_some(intended);
                spawn_request(
                    &client,
                    &tx,
                    &stop,
                    &live,
                    clock,
                    prepared,
                    intended,
                    Some(permit),
                    true,
                );
            }
        })
    });
    let mut wait = PreciseWait::new();
    for intended in spec.schedule.iter().copied() {
        if stop.dispatch_stopped() {
            break;
        }
        let prepared = match &mut source {
            Source::Ready(requests) => match requests.next() {
                Some(p) => p,
                None => break,
            },
            Source::Feed(feed) => tokio::select! {
                biased;
                _ = stop.dispatch_stop() => break,
                p = feed.recv() => match p {
                    Some(p) => p,
                    None => break,
                },
            },
        };
        let deadline = clock.instant_at(intended);
        if deadline > tokio::time::Instant::now() {
            tokio::select! {
                biased;
                _ = stop.dispatch_stop() => break,
                _ = wait.until(deadline) => {}
            }
        }
        let direct = match &semaphore {
            None => Some(None),
            // Nobody may overtake a request already queued for a slot.
            Some(sem) if queued.load(Ordering::Acquire) == 0 => {
                Arc::clone(sem).try_acquire_owned().ok().map(Some)
            }
            Some(_) => None,
        };
        match direct {
            Some(permit) => spawn_request(
                &client,
                &tx,
                &stop,
                &live,
                clock,
                prepared,
                Some(intended),
                permit,
                false,
            ),
            None => {
                queued.fetch_add(1, Ordering::AcqRel);
                let _ = queue_tx.send((prepared, intended));
            }
        }
    }
    drop(queue_tx);
    if let Some(r) = releaser {
        let _ = r.await;
    }
    drop(tx);
    outcome(collector, scraper, cpu_before, started_at, clock, |c| {
        total.saturating_sub(c.finished)
    })
    .await
}

/// A closed loop: every request intended at time zero behind a concurrency cap
/// (`--request-rate inf --max-concurrency N`, every concurrency sweep). Its users send when an
/// answer arrives, so a request that waited for a slot is intended when the slot freed: that
/// wait is the loop's definition, not latency (docs/metrics.md, "Open and closed loops").
/// With a finite rate the schedule is the users' arrivals, and a wait for a slot is latency.
pub fn is_closed_loop(schedule: &[u64], max_concurrency: Option<usize>) -> bool {
    max_concurrency.is_some() && schedule.iter().all(|&t| t == 0)
}

/// The outcome of a run once every request has ended (the senders of `collector`'s channel
/// dropped): the collected records sorted by id, CPU since `cpu_before`, the scraped telemetry;
/// `unsent` counts what was never dispatched.
pub(crate) async fn outcome(
    collector: tokio::task::JoinHandle<Collected>,
    scraper: Option<Scraper>,
    cpu_before: CpuTimes,
    started_at: SystemTime,
    clock: RunClock,
    unsent: impl FnOnce(&Collected) -> usize,
) -> Result<LoadOutcome, LoadgenError> {
    let collected = collector
        .await
        .map_err(|e| LoadgenError::Internal(format!("the collector task failed: {e}")))?;
    let not_dispatched = unsent(&collected);
    let mut records = collected.kept;
    records.sort_by_key(|r| r.id);
    let cpu = process_cpu_times().since(&cpu_before);
    let telemetry = match scraper {
        Some(s) => Some(s.finish().await),
        None => None,
    };
    Ok(LoadOutcome {
        telemetry,
        not_dispatched,
        records,
        records_file: collected.path.map(|p| (p, collected.written)),
        finished: collected.finished,
        resent: collected.resent,
        started_at,
        duration_ns: collected.last_end_ns,
        cpu,
        write_error: collected.write_error,
        clock,
        gpu: None,
    })
}

impl LoadOutcome {
    /// Every record of the run, sorted by id: those written to the records file, read back,
    /// and those held in memory. Leaves `records` empty.
    pub fn take_records(&mut self) -> Result<Vec<RequestRecord>, LoadgenError> {
        let mut all = match &self.records_file {
            Some((path, written)) if *written > 0 => {
                let mut read = servebench_metrics::read_jsonl(path).map_err(|e| {
                    LoadgenError::Internal(format!("reading back the records file: {e}"))
                })?;
                if read.len() < *written {
                    return Err(LoadgenError::Internal(format!(
                        "{} holds {} records, {written} were written",
                        path.display(),
                        read.len()
                    )));
                }
                // A write that failed part-way can leave a last line behind the whole ones;
                // that record is among those held in memory.
                read.truncate(*written);
                read
            }
            _ => Vec::new(),
        };
        all.append(&mut self.records);
        all.sort_by_key(|r| r.id);
        Ok(all)
    }
}

/// Requests at most this far after the first one count as released together with it.
const BURST_WINDOW_NS: u64 = 1_000_000;

/// At most this many connections are opened ahead of a run.
const MAX_OPEN_AHEAD: usize = 1024;

/// How many connections the run's first burst needs at once: the requests intended within
/// `BURST_WINDOW_NS` of the first, no more than the concurrency cap lets run, bounded.
fn first_burst(schedule: &[u64], max_concurrency: Option<usize>) -> usize {
    let Some(&first) = schedule.first() else {
        return 0;
    };
    let together = schedule
        .iter()
        .take_while(|&&t| t <= first.saturating_add(BURST_WINDOW_NS))
        .count();
    together
        .min(max_concurrency.unwrap_or(usize::MAX))
        .min(MAX_OPEN_AHEAD)
}

/// Opens the connections of the first burst before time zero, so the burst does not pay
/// connect time at its intended instant (a connect during the run is the client's wait, not
/// TTFT, either way). A start too far ahead is left alone: the connections would idle.
async fn open_ahead<B: Backend>(client: &B, spec: &LoadSpec, stop: &StopSignal) {
    const OPEN_AHEAD_LEAD: Duration = Duration::from_secs(2);
    if let Some(at) = spec.start_at {
        if at.duration_since(SystemTime::now()).unwrap_or_default() > OPEN_AHEAD_LEAD {
            return;
        }
    }
    let n = first_burst(&spec.schedule, spec.max_concurrency);
    if n < 2 || !open_ahead_wanted() {
        return;
    }
    tokio::select! {
        biased;
        _ = stop.dispatch_stop() => {}
        _ = client.open_ahead(n) => {}
    }
}

/// Connections opened ahead unless `SERVEBENCH_OPEN_AHEAD=off` (to compare with a cold burst).
fn open_ahead_wanted() -> bool {
    static WANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WANTED.get_or_init(|| std::env::var_os("SERVEBENCH_OPEN_AHEAD").is_none_or(|v| v != "off"))
}

/// Start one request: `released` is now, and so is its intended time when `intended` is
/// `None` (a closed loop's request that waited for its slot); the permit (if any) is held
/// until it ends.
#[allow(clippy::too_many_arguments)]
fn spawn_request<B: Backend>(
    client: &Arc<B>,
    tx: &mpsc::UnboundedSender<RequestRecord>,
    stop: &StopSignal,
    live: &Live,
    clock: RunClock,
    prepared: B::Request,
    intended: Option<u64>,
    permit: Option<OwnedSemaphorePermit>,
    waited: bool,
) {
    let (client, tx, stop) = (Arc::clone(client), tx.clone(), stop.clone());
    let released = clock.now_ns();
    live.released();
    let intended = intended.unwrap_or(released);
    tokio::spawn(async move {
        let record = client
            .execute(&clock, &prepared, intended, released, waited, &stop)
            .await;
        drop(permit);
        let _ = tx.send(record);
    });
}

/// Send `count` unrecorded requests (warm-up), `max_concurrency` at a time.
pub async fn warm_up<B: Backend>(
    client: Arc<B>,
    prepared: B::Request,
    count: usize,
    max_concurrency: Option<usize>,
    stop: &StopSignal,
) -> usize {
    let clock = RunClock::start_now();
    let sem = Arc::new(Semaphore::new(max_concurrency.unwrap_or(count).max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..count {
        let client = Arc::clone(&client);
        let sem = Arc::clone(&sem);
        let p = prepared.clone();
        let stop = stop.clone();
        tasks.spawn(async move {
            let _permit = sem.acquire_owned().await.ok();
            client
                .execute(&clock, &p, 0, 0, false, &stop)
                .await
                .failure
                .is_none()
        });
    }
    let mut ok = 0;
    while let Some(r) = tasks.join_next().await {
        if matches!(r, Ok(true)) {
            ok += 1;
        }
    }
    ok
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Mutex;

    use servebench_metrics::{CountSource, Failure, FailureKind};

    use super::*;
    use crate::stop::stop_pair;

    const MS: u64 = 1_000_000;

    #[test]
    fn the_first_burst_is_what_is_released_together_at_the_start_within_the_cap() {
        assert_eq!(first_burst(&[], None), 0);
        assert_eq!(first_burst(&[5 * MS], None), 1);
        assert_eq!(first_burst(&[0, 0, 0, MS, MS + 1, 10 * MS], None), 4);
        assert_eq!(first_burst(&[0; 100], Some(8)), 8);
        assert_eq!(first_burst(&[7 * MS; 5000], None), MAX_OPEN_AHEAD);
        // Poisson-like arrivals: one at a time, nothing to open ahead.
        assert_eq!(first_burst(&[0, 3 * MS, 9 * MS], Some(64)), 1);
    }

    /// Answers every request after `service` of (paused) tokio time; cancellation cuts it
    /// short. Remembers when each request was released and how many ran at once.
    struct Dummy {
        service: Duration,
        in_flight: AtomicUsize,
        peak: AtomicUsize,
        released: Mutex<Vec<(u64, u64)>>,
    }

    impl Dummy {
        fn new(service_ms: u64) -> Arc<Self> {
            Arc::new(Dummy {
                service: Duration::from_millis(service_ms),
                in_flight: AtomicUsize::new(0),
                peak: AtomicUsize::new(0),
                released: Mutex::new(Vec::new()),
            })
        }
    }

    impl Backend for Dummy {
        type Request = u64;

        async fn execute(
            &self,
            clock: &RunClock,
            id: &u64,
            intended: u64,
            released: u64,
            waited_for_slot: bool,
            stop: &StopSignal,
        ) -> RequestRecord {
            self.released.lock().unwrap().push((*id, released));
            let now = self.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
            self.peak.fetch_max(now, Ordering::AcqRel);
            let sent = clock.now_ns();
            let cancelled = tokio::select! {
                _ = tokio::time::sleep(self.service) => false,
                _ = stop.cancelled() => true,
            };
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            let end = clock.now_ns();
            RequestRecord {
                phases: None,
                images: None,
                id: *id,
                intended,
                released,
                sent,
                started: None,
                bare_events: Vec::new(),
                first_token: (!cancelled).then_some(end),
                end: (!cancelled).then_some(end),
                done: Some(end),
                waited_for_slot,
                events: Vec::new(),
                input_tokens: 1,
                input_source: CountSource::Dataset,
                output_tokens: u64::from(!cancelled),
                output_source: CountSource::Events,
                intended_input_tokens: 1,
                max_tokens: Some(1),
                cached_tokens: None,
                finish_reason: None,
                text: None,
                failure: cancelled.then(|| Failure {
                    kind: FailureKind::Cancelled,
                    status: None,
                    message: "cancelled".into(),
                }),
                resent: 0,
                answer_checked: false,
                output_split: None,
                session_id: None,
                turn: None,
                stamp_clock: None,
                lora: None,
                served_by: None,
            }
        }
    }

    fn spec(schedule_ms: &[u64], max_concurrency: Option<usize>) -> LoadSpec {
        LoadSpec {
            schedule: schedule_ms.iter().map(|ms| ms * MS).collect(),
            max_concurrency,
            progress: None,
            scrape_every: Some(Duration::from_secs(1)),
            start_at: None,
        }
    }

    /// With a records file, the run holds no written record in memory; `take_records` gives
    /// back every record, sorted by id, identical to what was measured.
    #[tokio::test(start_paused = true)]
    async fn written_records_come_back_from_the_file() {
        let dir = std::env::temp_dir().join(format!("servebench-readback-{}", std::process::id()));
        let path = dir.join("r.requests.jsonl");
        let sink = JsonlSink::create(&path).unwrap();
        let schedule = [0, 1, 2, 3, 4];
        let mut out = run_load(
            Dummy::new(5),
            (0..5).collect(),
            spec(&schedule, None),
            Some(sink),
            StopSignal::never(),
        )
        .await
        .unwrap();
        assert!(out.records.is_empty(), "written records are not kept");
        assert_eq!(out.records_file.as_ref().map(|f| f.1), Some(5));
        assert_eq!(out.finished, 5);
        let all = out.take_records().unwrap();
        let ids: Vec<u64> = all.iter().map(|r| r.id).collect();
        assert_eq!(ids, vec![0, 1, 2, 3, 4]);
        let mut from_file = servebench_metrics::read_jsonl(&path).unwrap();
        from_file.sort_by_key(|r| r.id);
        assert_eq!(all, from_file);
        assert_eq!(
            out.duration_ns,
            all.iter().filter_map(|r| r.end).max().unwrap()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Requests fed while the run goes are released at their intended times, like a ready
    /// list; a feed that ends early leaves the rest undispatched.
    #[tokio::test(start_paused = true)]
    async fn a_fed_run_releases_on_schedule_and_stops_where_the_feed_ends() {
        let (feed_tx, feed_rx) = mpsc::channel(2);
        tokio::spawn(async move {
            for id in 0..4u64 {
                if feed_tx.send(id).await.is_err() {
                    break;
                }
            }
        });
        let d = Dummy::new(5);
        let out = run_load_feed(
            Arc::clone(&d),
            feed_rx,
            spec(&[0, 10, 20, 30, 40, 50], None),
            None,
            StopSignal::never(),
        )
        .await
        .unwrap();
        assert_eq!(out.finished, 4);
        assert_eq!(out.not_dispatched, 2);
        let released = d.released.lock().unwrap().clone();
        assert_eq!(
            released,
            vec![(0, 0), (1, 10 * MS), (2, 20 * MS), (3, 30 * MS)]
        );
        let intended: Vec<u64> = out.records.iter().map(|r| r.intended).collect();
        assert_eq!(intended, vec![0, 10 * MS, 20 * MS, 30 * MS]);
    }

    /// A records file that cannot be written: every record stays in memory instead.
    #[tokio::test(start_paused = true)]
    async fn records_that_cannot_be_written_stay_in_memory() {
        let sink = JsonlSink::create(std::path::Path::new("/dev/full")).unwrap();
        let mut out = run_load(
            Dummy::new(5),
            (0..3).collect(),
            spec(&[0, 1, 2], None),
            Some(sink),
            StopSignal::never(),
        )
        .await
        .unwrap();
        assert!(out.write_error.is_some());
        assert_eq!(out.records.len(), 3);
        assert_eq!(out.take_records().unwrap().len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn arrivals_are_released_at_their_intended_times() {
        let backend = Dummy::new(5);
        let schedule = [0, 10, 250, 1000];
        let out = run_load(
            Arc::clone(&backend),
            (0..4).collect(),
            spec(&schedule, None),
            None,
            StopSignal::never(),
        )
        .await
        .unwrap();
        assert_eq!(out.records.len(), 4);
        for (r, ms) in out.records.iter().zip(schedule) {
            assert_eq!(r.intended, ms * MS);
            // Paused time: released exactly at the deadline, not a tick later.
            assert_eq!(r.released, ms * MS, "request {}", r.id);
            assert!(!r.waited_for_slot);
        }
        assert_eq!(out.duration_ns, 1005 * MS);
        assert_eq!(out.not_dispatched, 0);
        // A backend without a server has nothing to scrape.
        assert!(out.telemetry.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn the_concurrency_cap_queues_in_arrival_order_and_drops_nothing() {
        let backend = Dummy::new(100);
        let out = run_load(
            Arc::clone(&backend),
            (0..5).collect(),
            spec(&[0, 0, 0, 0, 0], Some(2)),
            None,
            StopSignal::never(),
        )
        .await
        .unwrap();
        assert_eq!(out.records.len(), 5);
        assert_eq!(backend.peak.load(Ordering::Acquire), 2);
        let released: Vec<u64> = out.records.iter().map(|r| r.released / MS).collect();
        assert_eq!(released, vec![0, 0, 100, 100, 200]);
        let waited: Vec<bool> = out.records.iter().map(|r| r.waited_for_slot).collect();
        assert_eq!(waited, vec![false, false, true, true, true]);
        // First come, first served: the queue never lets a later arrival overtake.
        let order: Vec<u64> = backend
            .released
            .lock()
            .unwrap()
            .iter()
            .map(|(id, _)| *id)
            .collect();
        assert_eq!(order, vec![0, 1, 2, 3, 4]);
    }

    /// A closed loop (everything intended at 0 behind a cap): a request that waited for a slot
    /// is intended when the slot freed, so no client queue is counted as latency.
    #[tokio::test(start_paused = true)]
    async fn a_closed_loop_intends_each_request_when_its_slot_frees() {
        let out = run_load(
            Dummy::new(100),
            (0..5).collect(),
            spec(&[0, 0, 0, 0, 0], Some(2)),
            None,
            StopSignal::never(),
        )
        .await
        .unwrap();
        let intended: Vec<u64> = out.records.iter().map(|r| r.intended / MS).collect();
        assert_eq!(intended, vec![0, 0, 100, 100, 200]);
        for r in &out.records {
            assert_eq!(r.intended, r.released, "request {}", r.id);
            assert_eq!(r.queue_ns(), Some(0), "request {}", r.id);
        }
    }

    /// An open loop with a cap (a finite rate): the users arrived on schedule, so the wait for
    /// a slot stays in their latency.
    #[tokio::test(start_paused = true)]
    async fn an_open_loop_keeps_the_scheduled_intended_time_behind_a_cap() {
        let out = run_load(
            Dummy::new(100),
            (0..4).collect(),
            spec(&[0, 10, 20, 30], Some(1)),
            None,
            StopSignal::never(),
        )
        .await
        .unwrap();
        let intended: Vec<u64> = out.records.iter().map(|r| r.intended / MS).collect();
        assert_eq!(intended, vec![0, 10, 20, 30]);
        let queue: Vec<u64> = out
            .records
            .iter()
            .map(|r| r.queue_ns().unwrap() / MS)
            .collect();
        assert_eq!(queue, vec![0, 90, 180, 270]);
    }

    #[test]
    fn only_a_capped_all_at_once_schedule_is_a_closed_loop() {
        assert!(is_closed_loop(&[0, 0, 0], Some(4)));
        assert!(!is_closed_loop(&[0, 0, 0], None));
        assert!(!is_closed_loop(&[0, 5, 10], Some(4)));
    }

    #[tokio::test(start_paused = true)]
    async fn stopping_dispatch_keeps_in_flight_requests_and_counts_the_rest() {
        let backend = Dummy::new(50);
        let (handle, stop) = stop_pair();
        let run = tokio::spawn(run_load(
            Arc::clone(&backend),
            (0..4).collect(),
            spec(&[0, 100, 200, 300], None),
            None,
            stop,
        ));
        tokio::time::sleep(Duration::from_millis(120)).await;
        handle.stop_dispatch();
        let out = run.await.unwrap().unwrap();
        assert_eq!(out.records.len(), 2);
        assert!(out.records.iter().all(|r| r.failure.is_none()));
        assert_eq!(out.not_dispatched, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn cancelling_ends_in_flight_requests_as_failed_records() {
        let backend = Dummy::new(10_000);
        let (handle, stop) = stop_pair();
        let run = tokio::spawn(run_load(
            Arc::clone(&backend),
            (0..3).collect(),
            spec(&[0, 0, 0], Some(1)),
            None,
            stop,
        ));
        tokio::time::sleep(Duration::from_millis(30)).await;
        handle.cancel();
        let out = run.await.unwrap().unwrap();
        // The one in flight is a record; the two queued behind the cap were never sent.
        assert_eq!(out.records.len(), 1);
        assert_eq!(
            out.records[0].failure.as_ref().map(|f| f.kind),
            Some(FailureKind::Cancelled)
        );
        assert_eq!(out.not_dispatched, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn warm_up_respects_the_cap_and_counts_successes() {
        let backend = Dummy::new(10);
        let ok = warm_up(Arc::clone(&backend), 7, 5, Some(2), &StopSignal::never()).await;
        assert_eq!(ok, 5);
        assert_eq!(backend.peak.load(Ordering::Acquire), 2);
    }

    #[tokio::test]
    async fn a_schedule_of_the_wrong_length_is_refused() {
        let err = run_load(
            Dummy::new(1),
            vec![0, 1],
            spec(&[0], None),
            None,
            StopSignal::never(),
        )
        .await
        .unwrap_err();
        assert!(
            err.to_string().contains("1 entries for 2 requests"),
            "{err}"
        );
    }
}
