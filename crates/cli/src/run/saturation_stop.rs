//! `--stop-when-saturated`: the live over-saturation test
//! (`servebench_analysis::saturation_watch`) watching a run, and stopping it the way Ctrl-C
//! does (no new requests, those in flight cancelled) once the point is clearly
//! over-saturated. Records measured until then stay; the result says why and when.
//!
//! Over HTTP the watch learns of each request as it ends (a thin wrapper around the backend,
//! off the receive path) and judges every second of the schedule on a task of its own. In
//! virtual time it judges on the virtual clock between engine steps, so the stop is as
//! deterministic as the rest of the run.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};

use servebench_analysis::saturation_watch::{known_at, LiveWatch};
use servebench_analysis::search::{OverSaturation, Sample};
use servebench_loadgen::{stop_pair, Backend, RunClock, StopSignal, Target};
use servebench_metrics::result::StoppedEarly;
use servebench_metrics::{Failure, FailureKind, RequestRecord};
use servebench_sim::virtual_time::VirtualDriver;
use servebench_sim::SimError;

use super::plan::RunPlan;

/// The watch a plan asks for, if any; a schedule with no spread in time (everything intended
/// at once) has no growth over time to judge.
pub fn watch_for(plan: &RunPlan, schedule: &[u64]) -> Option<LiveWatch> {
    (plan.stop_when_saturated && span_of(schedule) > 0).then(LiveWatch::default)
}

fn span_of(schedule: &[u64]) -> u64 {
    match (schedule.iter().min(), schedule.iter().max()) {
        (Some(a), Some(b)) => b - a,
        _ => 0,
    }
}

/// What the result records of a fired test.
pub fn stopped_early(o: &OverSaturation) -> StoppedEarly {
    StoppedEarly {
        reason: o.reason.clone(),
        at_s: o.at_s,
        span_s: o.span_s,
    }
}

/// What the watch and the backend wrapper share during a real-time run.
#[derive(Debug, Default)]
struct Shared {
    /// The run's clock, known from the first request sent.
    clock: OnceLock<RunClock>,
    /// Each request that ended, as the client knows it.
    finished: Mutex<Vec<Sample>>,
    fired: Mutex<Option<OverSaturation>>,
}

/// A backend that tells the watch of every request that ended.
pub struct Watched<B> {
    inner: Arc<B>,
    shared: Arc<Shared>,
}

impl<B: Backend> Backend for Watched<B> {
    type Request = B::Request;

    async fn execute(
        &self,
        clock: &RunClock,
        request: &B::Request,
        intended: u64,
        released: u64,
        waited_for_slot: bool,
        stop: &StopSignal,
    ) -> RequestRecord {
        let _ = self.shared.clock.set(*clock);
        let record = self
            .inner
            .execute(clock, request, intended, released, waited_for_slot, stop)
            .await;
        if let Ok(mut f) = self.shared.finished.lock() {
            f.push(Sample::from(&record));
        }
        record
    }

    fn telemetry_target(&self) -> Option<&Target> {
        self.inner.telemetry_target()
    }
}

/// A real-time run's watch: its own stop signal (the caller's Ctrl-C passed through, plus
/// the watch's own stop) and the task judging the run.
pub struct RealTimeWatch {
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl RealTimeWatch {
    /// Starts watching a run of `schedule` interrupted by `outer`: returns the watch, the
    /// backend to run with and the stop signal to run under.
    pub fn start<B: Backend>(
        watch: LiveWatch,
        schedule: &[u64],
        client: Arc<B>,
        outer: &StopSignal,
    ) -> (RealTimeWatch, Arc<Watched<B>>, StopSignal) {
        let shared = Arc::new(Shared::default());
        let (handle, inner) = stop_pair();
        let schedule: Arc<[u64]> = schedule.into();
        let span = span_of(&schedule);
        let (outer, state) = (outer.clone(), Arc::clone(&shared));
        let task = tokio::spawn(async move {
            let period = std::time::Duration::from_nanos(watch.period_for(span));
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tokio::select! {
                    biased;
                    _ = outer.dispatch_stop() => {
                        handle.stop_dispatch();
                        outer.cancelled().await;
                        handle.cancel();
                        return;
                    }
                    _ = tick.tick() => {}
                }
                let Some(now) = state.clock.get().map(RunClock::now_ns) else {
                    continue;
                };
                let finished = match state.finished.lock() {
                    Ok(f) => f.clone(),
                    Err(_) => return,
                };
                let schedule = Arc::clone(&schedule);
                // The judgement walks every request so far: off the runtime's workers.
                let verdict = tokio::task::spawn_blocking(move || {
                    watch.check_at(&known_at(&schedule, &finished, now), now, span, false)
                })
                .await
                .ok()
                .flatten();
                if let Some(o) = verdict {
                    eprintln!(
                        "\nStopping: {}; no new requests, those in flight cancelled",
                        stopped_early(&o).describe()
                    );
                    if let Ok(mut f) = state.fired.lock() {
                        *f = Some(o);
                    }
                    handle.stop_dispatch();
                    handle.cancel();
                    return;
                }
            }
        });
        let backend = Arc::new(Watched {
            inner: client,
            shared: Arc::clone(&shared),
        });
        (RealTimeWatch { shared, task }, backend, inner)
    }

    /// Ends the watch once the run is over: what it found, if it fired.
    pub fn finish(self) -> Option<StoppedEarly> {
        self.task.abort();
        let fired = self.shared.fired.lock().ok()?.clone()?;
        Some(stopped_early(&fired))
    }
}

impl Drop for RealTimeWatch {
    /// A run that failed never reaches `finish`; its watch must not tick on.
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Where a virtual run stopped itself.
#[derive(Debug, Clone)]
pub struct VirtualStop {
    /// On the run's clock (the measured arrivals' time zero).
    pub at_ns: u64,
    pub over: OverSaturation,
    /// Ids of the measured requests the client had not sent yet.
    pub unsent: HashSet<u64>,
}

/// Steps `driver` until idle, judging every `watch.period_ns` of virtual time on what was
/// known then; stops stepping as soon as the test fires. The measured requests are the
/// driver's traces from `skip` on, their times `offset` after the run's time zero.
pub fn drive_virtual(
    driver: &mut VirtualDriver,
    offset: u64,
    skip: usize,
    span_ns: u64,
    watch: &LiveWatch,
) -> Result<Option<VirtualStop>, SimError> {
    let period = watch.period_for(span_ns);
    let mut next = offset + period;
    loop {
        while driver.now_ns() < next {
            if !driver.step()? {
                return Ok(None);
            }
        }
        let now = next - offset;
        let known: Vec<Sample> = driver
            .traces()
            .iter()
            .skip(skip)
            .filter(|t| t.intended_ns <= next)
            .map(|t| Sample {
                intended: t.intended_ns - offset,
                first_token: t
                    .token_times_ns
                    .first()
                    .filter(|f| **f <= next)
                    .map(|f| f - offset),
                done: t.end_ns.filter(|e| *e <= next).map(|e| e - offset),
            })
            .collect();
        if let Some(over) = watch.check_at(&known, now, span_ns, true) {
            // The client sends in intended order, so what it still holds is the last
            // `num_pending` of the measured arrivals in that order.
            let mut order: Vec<(u64, usize)> = driver
                .traces()
                .iter()
                .skip(skip)
                .enumerate()
                .map(|(i, t)| (t.intended_ns, i))
                .collect();
            order.sort_unstable();
            let unsent = order
                .iter()
                .rev()
                .take(driver.num_pending())
                .filter_map(|(_, i)| driver.traces().get(skip + i).map(|t| t.id))
                .collect();
            return Ok(Some(VirtualStop {
                at_ns: now,
                over,
                unsent,
            }));
        }
        next += period;
    }
}

/// The records of a virtual run stopped where `stop` says, as a real run stopped then has them:
/// requests not sent by then are no requests; those in flight are cancelled, keeping the
/// tokens they had received.
pub fn cut_virtual(records: Vec<RequestRecord>, stop: &VirtualStop) -> Vec<RequestRecord> {
    let at_ns = stop.at_ns;
    records
        .into_iter()
        .filter(|r| r.intended <= at_ns && r.sent <= at_ns && !stop.unsent.contains(&r.id))
        .map(|mut r| {
            if r.done.is_some_and(|d| d <= at_ns) {
                return r;
            }
            r.events.retain(|e| e.t <= at_ns);
            r.bare_events.retain(|t| *t <= at_ns);
            r.first_token = r.first_token.filter(|t| *t <= at_ns);
            r.end = r.events.last().map(|e| e.t);
            r.done = Some(at_ns);
            r.output_tokens = r.events.len() as u64;
            r.output_split = None;
            r.finish_reason = None;
            r.failure = Some(Failure {
                kind: FailureKind::Cancelled,
                status: None,
                message: "cancelled: still in flight when the run stopped early (over-saturated)"
                    .into(),
            });
            r
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {

    use super::*;

    fn record(id: u64, intended: u64, sent: u64, tokens: &[u64]) -> RequestRecord {
        RequestRecord {
            intended,
            max_tokens: Some(4),
            finish_reason: Some("length".into()),
            ..RequestRecord::streamed(id, sent, tokens, 16)
        }
    }

    /// Stopped at 100: a request done by then stays as it was; one in flight is cancelled
    /// with the tokens it had; one not yet due, or due but still held by the client, is no
    /// request at all.
    #[test]
    fn a_virtual_stop_keeps_what_a_real_stop_would_have() {
        let stop = VirtualStop {
            at_ns: 100,
            over: OverSaturation {
                at_s: 0.0,
                span_s: 0.0,
                reason: String::new(),
            },
            unsent: [3].into_iter().collect(),
        };
        let done = record(0, 0, 0, &[10, 20, 30, 40]);
        let cut = cut_virtual(
            vec![
                done.clone(),
                record(1, 50, 50, &[90, 95, 110, 120]),
                record(2, 150, 150, &[160, 170, 180, 190]),
                record(3, 60, 0, &[]),
            ],
            &stop,
        );
        assert_eq!(cut.len(), 2);
        assert_eq!(cut[0], done);
        let flying = &cut[1];
        assert_eq!(flying.id, 1);
        assert_eq!(
            flying.failure.as_ref().map(|f| f.kind),
            Some(FailureKind::Cancelled)
        );
        assert_eq!((flying.done, flying.end), (Some(100), Some(95)));
        assert_eq!((flying.events.len(), flying.output_tokens), (2, 2));
        assert_eq!(flying.finish_reason, None);
    }
}
