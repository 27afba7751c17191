//! The over-saturation test while a run is still going: every `period` of the schedule, the
//! run so far (from its first intended send to now) is cut into the test's spans and judged
//! on what is known at that instant, so a point whose queue grows without bound can be
//! stopped instead of measured to the end.
//!
//! A request still in flight whose first token is not known counts as waiting for it: a
//! client that learns of first tokens only when requests end sees at most an older wait than
//! there is, never a younger one. The warm-up ramp of a healthy server (in flight rising
//! from zero while the first requests are served) is told apart by waiting until a share of
//! the schedule has passed, and, when first tokens are not known live (so a ramp of long
//! requests would look like a growing wait), until several of the fastest request's latency
//! have passed.

use crate::search::{OverSaturation, Sample, SaturationTest};

/// When and how the live test runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LiveWatch {
    pub test: SaturationTest,
    /// Schedule time between checks.
    pub period_ns: u64,
    /// No verdict before this share of the schedule has passed.
    pub min_fraction: f64,
    /// No verdict before this many times the fastest finished request's latency (intended
    /// send to end) has passed: a ramp lasts about one latency.
    pub min_latencies: f64,
    /// No verdict before this many requests have finished.
    pub min_finished: usize,
}

impl Default for LiveWatch {
    fn default() -> Self {
        LiveWatch {
            test: SaturationTest::default(),
            period_ns: 1_000_000_000,
            min_fraction: 0.2,
            min_latencies: 3.0,
            min_finished: 10,
        }
    }
}

impl LiveWatch {
    /// Schedule time between checks for a schedule spanning `span_ns`: the period, or a
    /// twentieth of a shorter schedule (at least 10 ms).
    pub fn period_for(&self, span_ns: u64) -> u64 {
        self.period_ns.min(span_ns / 20).max(10_000_000)
    }

    /// The verdict at `now` (ns on the run's clock) on `known` (every request intended by
    /// now, with what was known of it then), for a schedule spanning `span_ns` from its first
    /// intended send; `first_tokens_known` when requests in flight carry their first token as
    /// soon as it came. `None` while the point is not (or not yet clearly) over-saturated.
    pub fn check_at(
        &self,
        known: &[Sample],
        now: u64,
        span_ns: u64,
        first_tokens_known: bool,
    ) -> Option<OverSaturation> {
        let start = known.iter().map(|s| s.intended).min()?;
        let elapsed = now.checked_sub(start).filter(|e| *e > 0)?;
        if (elapsed as f64) < self.min_fraction * span_ns as f64 {
            return None;
        }
        let latencies = known
            .iter()
            .filter_map(|s| s.done.filter(|d| *d <= now).map(|d| d - s.intended));
        let (finished, fastest) = latencies.fold((0usize, u64::MAX), |(n, m), l| (n + 1, m.min(l)));
        if !first_tokens_known
            && (finished < self.min_finished
                || (elapsed as f64) < self.min_latencies * fastest as f64)
        {
            return None;
        }
        let arrived = known.iter().filter(|s| s.intended <= now).count();
        let windows = self.test.windows.max(1);
        if arrived < 4 * windows {
            return None;
        }
        let width = elapsed as f64 / windows as f64;
        let edge = |k: usize| start + (width * (k + 1) as f64) as u64;
        let reason = self.test.fires(known, &edge, windows)?;
        Some(OverSaturation {
            at_s: elapsed as f64 / 1e9,
            span_s: span_ns as f64 / 1e9,
            reason,
        })
    }
}

/// What a client knows at `now` when it learns of requests only as they end: `finished`
/// (ended by now, as measured) plus, for every other entry of `schedule` intended by now, a
/// request in flight with no first token known. Finished requests are matched to schedule
/// entries by their intended time.
pub fn known_at(schedule: &[u64], finished: &[Sample], now: u64) -> Vec<Sample> {
    let mut ended: Vec<u64> = finished.iter().map(|s| s.intended).collect();
    ended.sort_unstable();
    let arrived = schedule.partition_point(|t| *t <= now);
    let mut out: Vec<Sample> = Vec::with_capacity(arrived.max(finished.len()));
    out.extend_from_slice(finished);
    let mut matched = ended.iter().peekable();
    for &t in &schedule[..arrived] {
        while matched.next_if(|e| **e < t).is_some() {}
        if matched.next_if(|e| **e == t).is_none() {
            out.push(Sample {
                intended: t,
                first_token: None,
                done: None,
            });
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// `rate` req/s arrivals over `secs` served FIFO one at a time, each taking `service_ms`
    /// after a 50 ms first token; the samples a client would hold at `now`.
    fn fifo(rate: f64, secs: f64, service_ms: u64, now: u64) -> (Vec<u64>, Vec<Sample>) {
        let n = (rate * secs) as u64;
        let schedule: Vec<u64> = (0..n).map(|i| (i as f64 * 1e9 / rate) as u64).collect();
        let mut free = 0u64;
        let mut finished = Vec::new();
        for &t in &schedule {
            let begin = free.max(t);
            let done = begin + service_ms * MS;
            free = done;
            if done <= now {
                finished.push(Sample {
                    intended: t,
                    first_token: Some(begin + 50 * MS),
                    done: Some(done),
                });
            }
        }
        (schedule, finished)
    }

    fn verdict(rate: f64, service_ms: u64, now_s: f64) -> Option<OverSaturation> {
        let now = (now_s * 1e9) as u64;
        let (schedule, finished) = fifo(rate, 60.0, service_ms, now);
        let span = *schedule.last().unwrap();
        LiveWatch::default().check_at(&known_at(&schedule, &finished, now), now, span, false)
    }

    #[test]
    fn a_growing_queue_fires_mid_run() {
        // 10 req/s against a server that serves 5 req/s.
        let fired = verdict(10.0, 200, 15.0).expect("over-saturated");
        assert!((fired.at_s - 15.0).abs() < 1e-9, "{fired:?}");
        assert!(fired.span_s > 59.0, "{fired:?}");
        assert!(fired.reason.contains("rose linearly"), "{}", fired.reason);
    }

    #[test]
    fn a_steady_queue_never_fires() {
        // 10 req/s served in 80 ms each: in flight stays below one.
        for now in [1.0, 5.0, 12.0, 30.0, 59.0] {
            assert_eq!(verdict(10.0, 80, now), None, "at {now} s");
        }
    }

    #[test]
    fn too_little_data_or_too_early_does_not_fire() {
        // Over-saturated, but only 5 % of the schedule has passed.
        assert_eq!(verdict(10.0, 200, 3.0), None);
        // Nothing known at all.
        assert_eq!(LiveWatch::default().check_at(&[], 10, 100, true), None);
        // Requests so long that none has finished: a ramp looks like growth.
        let schedule: Vec<u64> = (0..600).map(|i| i * 100 * MS).collect();
        let now = 30_000 * MS;
        let known = known_at(&schedule, &[], now);
        assert_eq!(known.len(), 301);
        assert_eq!(
            LiveWatch::default().check_at(&known, now, 60_000 * MS, false),
            None
        );
    }

    #[test]
    fn a_warm_up_ramp_of_long_requests_does_not_fire() {
        // 10 req/s, each request 8 s long with no queueing: in flight ramps up to 80 over
        // the first 8 s and then holds. 12 s in (past 20 % of a 60 s schedule) the fastest
        // request's 8 s latency keeps the watch waiting; later the plateau shows.
        for now in [12.0, 20.0, 40.0] {
            let n = now * 1e9;
            let schedule: Vec<u64> = (0..600).map(|i| i * 100 * MS).collect();
            let finished: Vec<Sample> = schedule
                .iter()
                .filter(|&&t| (t + 8_000 * MS) as f64 <= n)
                .map(|&t| Sample {
                    intended: t,
                    first_token: Some(t + 50 * MS),
                    done: Some(t + 8_000 * MS),
                })
                .collect();
            let known = known_at(&schedule, &finished, n as u64);
            assert_eq!(
                LiveWatch::default().check_at(&known, n as u64, 59_900 * MS, false),
                None,
                "at {now} s"
            );
        }
    }

    #[test]
    fn a_ramp_of_long_requests_with_first_tokens_known_does_not_fire() {
        // The same 8 s requests, their first tokens 50 ms after the send known live: in
        // flight rises, but nobody waits.
        let schedule: Vec<u64> = (0..600).map(|i| i * 100 * MS).collect();
        for now_s in [6u64, 12, 20] {
            let now = now_s * 1000 * MS;
            let known: Vec<Sample> = schedule
                .iter()
                .filter(|&&t| t <= now)
                .map(|&t| Sample {
                    intended: t,
                    first_token: Some(t + 50 * MS).filter(|f| *f <= now),
                    done: Some(t + 8_000 * MS).filter(|d| *d <= now),
                })
                .collect();
            assert_eq!(
                LiveWatch::default().check_at(&known, now, 59_900 * MS, true),
                None,
                "at {now_s} s"
            );
        }
    }

    #[test]
    fn finished_requests_are_matched_to_their_schedule_entries() {
        let schedule = [0, 0, 10, 20, 30];
        let done = |t| Sample {
            intended: t,
            first_token: Some(t + 1),
            done: Some(t + 2),
        };
        let known = known_at(&schedule, &[done(0), done(20)], 25);
        let in_flight: Vec<u64> = known
            .iter()
            .filter(|s| s.done.is_none())
            .map(|s| s.intended)
            .collect();
        assert_eq!(in_flight, vec![0, 10]);
        assert_eq!(known.len(), 4);
    }
}
