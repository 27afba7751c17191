//! Overload: did the client send at the rate the run offered, or did requests pile up in the
//! client queue?
//!
//! When the server (or a concurrency cap) cannot keep up with an open-loop arrival rate,
//! requests wait on the client side, the rate actually sent falls to what the server
//! sustains, and the queue time grows for as long as the run lasts. Latencies measured from
//! the send then describe a server running at its own pace, not at the offered load, so such
//! a point can never be an operating point or a capacity figure.

use serde::{Deserialize, Serialize};

use crate::record::RequestRecord;
use crate::stats;

/// How far the achieved rate may fall short of the scheduled rate before the run counts as
/// overloaded: 5 %. The same tolerance bounds the growth of the queue: a client that sends
/// at `(1 − t)` of the schedule accumulates `1/(1 − t) − 1` seconds of queue per second of
/// schedule, so [`QUEUE_GROWTH_LIMIT`] follows from it.
pub const OVERLOAD_TOLERANCE: f64 = 0.05;

/// Largest slope of queue time against intended send time (seconds per second) of a run
/// that keeps up: `1 / (1 − OVERLOAD_TOLERANCE) − 1` ≈ 0.053.
pub const QUEUE_GROWTH_LIMIT: f64 = 1.0 / (1.0 - OVERLOAD_TOLERANCE) - 1.0;

const NS_PER_S: f64 = 1e9;
const NS_PER_MS: f64 = 1e6;

/// Offered against achieved arrival rate, and the client queue that the difference built.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LoadVerdict {
    /// The request rate the run asked for, req/s; `None` = unlimited.
    pub offered_rate: Option<f64>,
    /// The rate of the schedule itself: `(n − 1) / (last intended − first intended)`. It is
    /// the reference the achieved rate is held to, because a random (Poisson, gamma) schedule
    /// of finite length never has exactly the offered rate. `None` with fewer than two
    /// requests or when every request was due at once (an unlimited rate).
    pub scheduled_rate: Option<f64>,
    /// Requests actually sent per second over the sending window:
    /// `(n − 1) / (last sent − first sent)`; `None` with fewer than two requests.
    pub achieved_rate: Option<f64>,
    /// 99th percentile of client queue time (`sent − intended`), ms.
    pub queue_p99_ms: Option<f64>,
    /// Longest client queue time, ms.
    pub queue_max_ms: Option<f64>,
    /// Least-squares slope of queue time against intended send time, seconds of queue per
    /// second of schedule; `None` with fewer than three requests or no spread in intended
    /// times.
    pub queue_growth: Option<f64>,
    /// The achieved rate fell short of the scheduled one by more than
    /// [`OVERLOAD_TOLERANCE`], the queue grew faster than [`QUEUE_GROWTH_LIMIT`], or the
    /// server fell behind the arrivals ([`ServerBacklog::behind`]).
    pub overloaded: bool,
    /// Whether the server kept up with an open loop's arrivals; absent for an unlimited rate
    /// and for runs with fewer than [`MIN_BACKLOG_REQUESTS`] completed requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerBacklog>,
}

/// Completed requests needed before a server backlog is judged (a tenth of them at each end).
pub const MIN_BACKLOG_REQUESTS: usize = 20;

/// How far TTFT must rise from the start of the run to its end, besides growing faster than
/// [`QUEUE_GROWTH_LIMIT`], before the server counts as behind: it at least doubles and
/// rises by this much. A server at a steady operating point warms up by tens or hundreds of
/// milliseconds; one that cannot keep up adds the run's whole excess of arrivals.
pub const BACKLOG_MIN_RISE_MS: f64 = 1_000.0;

/// The server's side of an open loop: a server that cannot keep up with the arrivals queues
/// them itself (the client sent every request on time), so TTFT from the send grows through
/// the run and the last answers come long after the last arrival.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ServerBacklog {
    /// Least-squares slope of TTFT (from the send) against intended send time: seconds of
    /// TTFT gained per second of schedule.
    pub ttft_growth: f64,
    /// Mean TTFT of the first tenth of completed requests (by intended time), ms.
    pub ttft_start_ms: f64,
    /// Mean TTFT of the last tenth, ms.
    pub ttft_end_ms: f64,
    /// First to last intended send time, s.
    pub arrival_span_s: f64,
    /// First intended send time to the last answer's end, s: how long serving the arrivals
    /// took.
    pub serve_span_s: f64,
    /// TTFT grew faster than [`QUEUE_GROWTH_LIMIT`] and rose from start to end by more than
    /// [`BACKLOG_MIN_RISE_MS`] and at least twofold.
    pub behind: bool,
}

impl std::fmt::Display for ServerBacklog {
    /// `the server fell behind the arrivals: TTFT rose from 0.2 s to 3296.1 s (+0.91 s per s);
    /// serving 3600 s of arrivals took 10228 s`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the server fell behind the arrivals: TTFT rose from {:.1} s to {:.1} s ({:+.2} s per s); serving {:.0} s of arrivals took {:.0} s",
            self.ttft_start_ms / 1e3,
            self.ttft_end_ms / 1e3,
            self.ttft_growth,
            self.arrival_span_s,
            self.serve_span_s
        )
    }
}

/// The server backlog of an open-loop run (see [`ServerBacklog`]).
fn server_backlog(records: &[RequestRecord]) -> Option<ServerBacklog> {
    let mut done: Vec<(u64, f64, u64)> = records
        .iter()
        .filter(|r| r.failure.is_none())
        .filter_map(|r| {
            let ttft = r.ttft_ns()? as f64 / NS_PER_S;
            Some((r.intended, ttft, r.end.or(r.done)?))
        })
        .collect();
    if done.len() < MIN_BACKLOG_REQUESTS {
        return None;
    }
    done.sort_unstable_by_key(|d| d.0);
    let first = done.first()?.0;
    let last = done.last()?.0;
    let tenth = done.len() / 10;
    let mean_ms =
        |part: &[(u64, f64, u64)]| part.iter().map(|d| d.1).sum::<f64>() / part.len() as f64 * 1e3;
    let ttft_start_ms = mean_ms(&done[..tenth]);
    let ttft_end_ms = mean_ms(&done[done.len() - tenth..]);
    let ttft_growth = slope(done.iter().map(|d| (d.0 as f64 / NS_PER_S, d.1)))?;
    let last_end = done.iter().map(|d| d.2).max()?;
    let rise = ttft_end_ms - ttft_start_ms;
    Some(ServerBacklog {
        ttft_growth,
        ttft_start_ms,
        ttft_end_ms,
        arrival_span_s: (last - first) as f64 / NS_PER_S,
        serve_span_s: last_end.saturating_sub(first) as f64 / NS_PER_S,
        behind: ttft_growth > QUEUE_GROWTH_LIMIT
            && rise > BACKLOG_MIN_RISE_MS
            && ttft_end_ms > 2.0 * ttft_start_ms,
    })
}

impl LoadVerdict {
    /// The rate the achieved one is judged against: the schedule's own when it has one,
    /// else the offered rate.
    pub fn reference_rate(&self) -> Option<f64> {
        self.scheduled_rate.or(self.offered_rate)
    }

    /// `achieved / reference`, when both are known.
    pub fn achieved_share(&self) -> Option<f64> {
        let reference = self.reference_rate()?;
        let achieved = self.achieved_rate?;
        (reference > 0.0).then(|| achieved / reference)
    }
}

/// Judge a run's load. `offered_rate` is the rate asked for (`None` = unlimited: a run that
/// asks for saturation cannot fall short of it, so it is never overloaded by rate; its queue
/// has no schedule to grow against either). Every record counts, failed or not: a failed
/// request was sent all the same.
pub fn load_verdict(offered_rate: Option<f64>, records: &[RequestRecord]) -> LoadVerdict {
    let offered_rate = offered_rate.filter(|r| r.is_finite() && *r > 0.0);
    let scheduled_rate = rate_over(records.iter().map(|r| r.intended));
    let achieved_rate = rate_over(records.iter().map(|r| r.sent));

    let mut queue_ms: Vec<f64> = records
        .iter()
        .filter_map(RequestRecord::queue_ns)
        .map(|q| q as f64 / NS_PER_MS)
        .collect();
    queue_ms.sort_unstable_by(f64::total_cmp);
    let queue_p99_ms = stats::percentile_sorted(&queue_ms, 99.0);
    let queue_max_ms = queue_ms.last().copied();
    let queue_growth = queue_growth(records);

    let mut verdict = LoadVerdict {
        offered_rate,
        scheduled_rate,
        achieved_rate,
        queue_p99_ms,
        queue_max_ms,
        queue_growth,
        overloaded: false,
        server: offered_rate.and_then(|_| server_backlog(records)),
    };
    // An unlimited rate has no schedule to fall behind, whatever the records say.
    let short = offered_rate.is_some()
        && verdict
            .achieved_share()
            .is_some_and(|s| s < 1.0 - OVERLOAD_TOLERANCE);
    let growing = offered_rate.is_some() && queue_growth.is_some_and(|g| g > QUEUE_GROWTH_LIMIT);
    let behind = verdict.server.is_some_and(|b| b.behind);
    verdict.overloaded = short || growing || behind;
    verdict
}

/// `(n − 1) / (max − min)` per second; `None` for fewer than two points or no spread.
fn rate_over(times: impl Iterator<Item = u64>) -> Option<f64> {
    let (n, lo, hi) = times.fold((0u64, u64::MAX, 0u64), |(n, lo, hi), t| {
        (n + 1, lo.min(t), hi.max(t))
    });
    if n < 2 || hi <= lo {
        return None;
    }
    Some((n - 1) as f64 / ((hi - lo) as f64 / NS_PER_S))
}

/// Least-squares slope of queue time (s) against intended time (s).
fn queue_growth(records: &[RequestRecord]) -> Option<f64> {
    slope(records.iter().filter_map(|r| {
        Some((
            r.intended as f64 / NS_PER_S,
            r.queue_ns()? as f64 / NS_PER_S,
        ))
    }))
}

/// Least-squares slope of `y` against `x`; `None` for fewer than three points or no spread.
fn slope(points: impl Iterator<Item = (f64, f64)>) -> Option<f64> {
    let points: Vec<(f64, f64)> = points.collect();
    if points.len() < 3 {
        return None;
    }
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;
    use crate::derived::tests::record;

    const MS: u64 = 1_000_000;

    /// Requests due at `intended_ms`, each holding its slot for `service_ms` once sent,
    /// behind a concurrency cap of `cap`: sent when due or when a slot frees, whichever is
    /// later (the dispatcher's rule).
    pub(crate) fn capped_run(
        intended_ms: &[u64],
        service_ms: u64,
        cap: usize,
    ) -> Vec<RequestRecord> {
        let mut slots_free_at = vec![0u64; cap.max(1)];
        intended_ms
            .iter()
            .enumerate()
            .map(|(i, &due)| {
                let slot = (0..slots_free_at.len())
                    .min_by_key(|&s| slots_free_at[s])
                    .unwrap_or(0);
                let sent = due.max(slots_free_at[slot]);
                slots_free_at[slot] = sent + service_ms;
                let end = sent + service_ms;
                let mut r = record(i as u64, sent, &[sent + service_ms / 10, end], 2);
                r.intended = due * MS;
                r.waited_for_slot = sent > due;
                r
            })
            .collect()
    }

    #[test]
    fn row_d_shape_cap_8_slow_requests_at_16_per_s_is_overloaded() {
        // 100 requests at 16 req/s; each takes 8.5 s and only 8 fit at once, so the client
        // sends ≈ 0.94 req/s and the rest wait, up to ≈ 100 s.
        let due: Vec<u64> = (0..100).map(|i| i * 1000 / 16).collect();
        let records = capped_run(&due, 8_500, 8);
        let v = load_verdict(Some(16.0), &records);
        assert!(v.overloaded, "{v:?}");
        assert!((v.scheduled_rate.unwrap() - 16.0).abs() < 0.01);
        let achieved = v.achieved_rate.unwrap();
        assert!((0.9..1.0).contains(&achieved), "{achieved}");
        assert!(v.queue_max_ms.unwrap() > 90_000.0, "{v:?}");
        assert!(v.queue_growth.unwrap() > 10.0, "{v:?}");
        assert!(v.achieved_share().unwrap() < 0.1);
    }

    #[test]
    fn an_unsaturated_run_is_not_overloaded() {
        // 1 req/s with a Poisson-like jittered schedule, 0.5 s requests, cap 8: every
        // request goes out when due (plus a millisecond of dispatch).
        let due: Vec<u64> = (0..120u64).map(|i| i * 1000 + (i * 7919) % 900).collect();
        let mut records = capped_run(&due, 500, 8);
        for r in &mut records {
            r.released += MS;
            r.sent += MS;
        }
        let v = load_verdict(Some(1.0), &records);
        assert!(!v.overloaded, "{v:?}");
        assert!((v.achieved_share().unwrap() - 1.0).abs() < 0.01);
        assert!(v.queue_growth.unwrap().abs() < 1e-6);
        assert!((v.queue_max_ms.unwrap() - 1.0).abs() < 1e-9);
    }

    /// A client that sends each request `lag_pct` % of its due time late: it runs at
    /// `1 / (1 + lag)` of the schedule and its queue grows `lag` seconds per second.
    fn falling_behind(lag_pct: u64) -> Vec<RequestRecord> {
        (0..200u64)
            .map(|i| {
                let due = i * 1000;
                let sent = due + due * lag_pct / 100;
                let mut r = record(i, sent, &[sent + 100], 1);
                r.intended = due * MS;
                r
            })
            .collect()
    }

    #[test]
    fn the_tolerance_draws_one_line_for_both_rules() {
        let within = load_verdict(Some(1.0), &falling_behind(4));
        assert!(within.achieved_share().unwrap() > 1.0 - OVERLOAD_TOLERANCE);
        assert!(within.queue_growth.unwrap() < QUEUE_GROWTH_LIMIT);
        assert!(!within.overloaded, "{within:?}");
        let beyond = load_verdict(Some(1.0), &falling_behind(6));
        assert!(beyond.achieved_share().unwrap() < 1.0 - OVERLOAD_TOLERANCE);
        assert!((beyond.queue_growth.unwrap() - 0.06).abs() < 1e-9);
        assert!(beyond.overloaded, "{beyond:?}");
    }

    /// Requests sent exactly on schedule (1 per 100 ms), whose TTFT is `ttft_ms(i)`: the
    /// client keeps up whatever the server does.
    fn on_time(n: u64, ttft_ms: impl Fn(u64) -> u64) -> Vec<RequestRecord> {
        (0..n)
            .map(|i| {
                let sent = i * 100;
                let first = sent + ttft_ms(i);
                let mut r = record(i, sent, &[first, first + 50], 2);
                r.intended = sent * MS;
                r
            })
            .collect()
    }

    /// The README's 70B what-if in miniature: every request sent on time, but the server
    /// queues them, so TTFT grows through the run. The client rules see nothing; the
    /// server's backlog makes the run overloaded, with the figures that show it.
    #[test]
    fn a_server_that_falls_behind_an_on_time_client_is_overloaded() {
        // 10 req/s offered, the server serves 5: each request waits 0.1 s longer.
        let records = on_time(300, |i| 200 + i * 100);
        let v = load_verdict(Some(10.0), &records);
        assert!(
            v.achieved_share().unwrap() > 0.99,
            "the client kept up: {v:?}"
        );
        assert!(v.queue_growth.unwrap().abs() < 1e-9);
        let b = v.server.expect("backlog judged");
        assert!(b.behind, "{b:?}");
        assert!((b.ttft_growth - 1.0).abs() < 1e-6, "{b:?}");
        assert!(
            b.ttft_end_ms > 25_000.0 && b.ttft_start_ms < 3_000.0,
            "{b:?}"
        );
        assert!(b.serve_span_s > b.arrival_span_s * 1.9, "{b:?}");
        assert!(v.overloaded);
        let text = b.to_string();
        assert!(
            text.contains("the server fell behind the arrivals"),
            "{text}"
        );
    }

    /// A server at a steady operating point: TTFT varies and warms up a little, never grows.
    #[test]
    fn a_server_that_keeps_up_is_not_behind() {
        let records = on_time(300, |i| {
            150 + (i * 7919) % 120 + if i < 10 { 0 } else { 40 }
        });
        let v = load_verdict(Some(10.0), &records);
        let b = v.server.expect("backlog judged");
        assert!(!b.behind, "{b:?}");
        assert!(!v.overloaded, "{v:?}");
        // Slow but steady (TTFT 5 s throughout) is not a backlog either.
        let slow = load_verdict(Some(10.0), &on_time(300, |i| 5_000 + i % 7));
        assert!(!slow.overloaded, "{slow:?}");
        // Closed loops and unlimited rates have no arrivals to fall behind.
        assert!(load_verdict(None, &on_time(300, |i| 200 + i * 100))
            .server
            .is_none());
        // Too few requests to tell.
        assert!(load_verdict(Some(10.0), &on_time(10, |i| i * 1000))
            .server
            .is_none());
    }

    #[test]
    fn unlimited_rate_and_tiny_runs_are_never_overloaded() {
        // Every request due at 0 behind a cap: a saturation test, not an overload.
        let records = capped_run(&[0; 40], 8_500, 8);
        let v = load_verdict(None, &records);
        assert_eq!(v.scheduled_rate, None);
        assert_eq!(v.queue_growth, None);
        assert!(!v.overloaded);
        let v = load_verdict(Some(4.0), &[]);
        assert_eq!(
            (v.achieved_rate, v.queue_max_ms, v.overloaded),
            (None, None, false)
        );
        let one = capped_run(&[0], 100, 1);
        assert!(!load_verdict(Some(4.0), &one).overloaded);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod props {
    use super::tests::capped_run;
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_client_that_keeps_its_schedule_is_never_overloaded(
            gaps_ms in prop::collection::vec(1u64..2000, 2..300),
            lag_ms in 0u64..50,
        ) {
            let mut due = Vec::with_capacity(gaps_ms.len());
            let mut t = 0;
            for g in gaps_ms {
                t += g;
                due.push(t);
            }
            // Gaps of at least 1 ms and 10 ms requests: at most 10 in flight, so nobody waits
            // for one of 16 slots; every send is late by the same lag.
            let mut records = capped_run(&due, 10, 16);
            prop_assert!(records.iter().all(|r| !r.waited_for_slot));
            for r in &mut records {
                r.sent += lag_ms * 1_000_000;
            }
            let v = load_verdict(Some(1.0), &records);
            prop_assert!(!v.overloaded, "{:?}", v);
            prop_assert!(v.queue_growth.is_none_or(|g| g.abs() < 1e-9), "{:?}", v);
        }
    }
}
