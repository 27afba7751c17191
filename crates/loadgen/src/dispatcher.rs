//! The dispatcher: releases each request at its absolute intended time (no drift), behind an
//! optional concurrency cap that queues — never drops — and records the wait.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use servebench_metrics::RequestRecord;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use crate::client::{BackendClient, Prepared};
use crate::clock::RunClock;
use crate::collector::{collect, JsonlSink, Progress};
use crate::health::{process_cpu_times, CpuTimes};
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
}

/// What a measured run produced.
#[derive(Debug)]
pub struct LoadOutcome {
    /// One record per dispatched request, sorted by id.
    pub records: Vec<RequestRecord>,
    /// Wall-clock time at the run start (metadata only).
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
}

/// Run `requests` on `client` following `spec`. Records stream into `sink` as they finish.
pub async fn run_load(
    client: Arc<BackendClient>,
    requests: Vec<Prepared>,
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
    let (tx, rx) = mpsc::unbounded_channel();
    let collector = tokio::spawn(collect(rx, sink, spec.progress.clone()));
    let semaphore = spec
        .max_concurrency
        .map(|n| Arc::new(Semaphore::new(n.max(1))));

    let cpu_before = process_cpu_times();
    let started_at = SystemTime::now();
    let clock = RunClock::start_now();
    let total = requests.len();
    let scraper = spec
        .scrape_every
        .map(|every| Scraper::start(client.target().clone(), clock, every));

    // Requests that found every slot taken wait here, in arrival order (FIFO), for a slot.
    let queued = Arc::new(AtomicUsize::new(0));
    let (queue_tx, mut queue_rx) = mpsc::unbounded_channel::<(Prepared, u64)>();
    let releaser = semaphore.clone().map(|sem| {
        let (client, tx, stop, queued) = (
            Arc::clone(&client),
            tx.clone(),
            stop.clone(),
            Arc::clone(&queued),
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
                spawn_request(
                    &client,
                    &tx,
                    &stop,
                    clock,
                    prepared,
                    intended,
                    Some(permit),
                    true,
                );
            }
        })
    });
    for (prepared, intended) in requests.into_iter().zip(spec.schedule.iter().copied()) {
        if stop.dispatch_stopped() {
            break;
        }
        let deadline = clock.instant_at(intended);
        if deadline > tokio::time::Instant::now() {
            tokio::select! {
                biased;
                _ = stop.dispatch_stop() => break,
                _ = tokio::time::sleep_until(deadline) => {}
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
                &client, &tx, &stop, clock, prepared, intended, permit, false,
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
    let (mut records, write_error) = collector
        .await
        .map_err(|e| LoadgenError::Internal(format!("the collector task failed: {e}")))?;
    records.sort_by_key(|r| r.id);
    let duration_ns = records
        .iter()
        .map(|r| r.end.max(r.done).unwrap_or(r.sent))
        .max()
        .unwrap_or(0);
    let cpu = process_cpu_times().since(&cpu_before);
    let telemetry = match scraper {
        Some(s) => Some(s.finish().await),
        None => None,
    };
    Ok(LoadOutcome {
        telemetry,
        not_dispatched: total.saturating_sub(records.len()),
        records,
        started_at,
        duration_ns,
        cpu,
        write_error,
    })
}

/// Start one request: `released` is now; the permit (if any) is held until it ends.
#[allow(clippy::too_many_arguments)]
fn spawn_request(
    client: &Arc<BackendClient>,
    tx: &mpsc::UnboundedSender<RequestRecord>,
    stop: &StopSignal,
    clock: RunClock,
    prepared: Prepared,
    intended: u64,
    permit: Option<OwnedSemaphorePermit>,
    waited: bool,
) {
    let (client, tx, stop) = (Arc::clone(client), tx.clone(), stop.clone());
    let released = clock.now_ns();
    tokio::spawn(async move {
        let record = client
            .execute(&clock, &prepared, intended, released, waited, &stop)
            .await;
        drop(permit);
        let _ = tx.send(record);
    });
}

/// Send `count` unrecorded requests (warm-up), `max_concurrency` at a time.
pub async fn warm_up(
    client: Arc<BackendClient>,
    prepared: Prepared,
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

/// Grace period helper for callers wiring Ctrl-C: stop dispatching now, cancel later.
pub fn grace_period_default() -> Duration {
    Duration::from_secs(10)
}
