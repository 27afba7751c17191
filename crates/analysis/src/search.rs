//! Finding the operating point instead of drawing the whole curve: the highest load (request
//! rate or concurrency) that still meets a latency contract, by bracketing (doubling from a
//! start value until a point fails) and then bisection between the highest passing and the
//! lowest failing load, each point judged with a confidence bound from its repeats; and the
//! over-saturation test that lets a point be written off as soon as its queue grows without
//! bound.

use serde::{Deserialize, Serialize};
use servebench_metrics::RequestRecord;

use crate::frontier::LoadKind;

/// Where the search stands and what to measure next.
#[derive(Debug, Clone, PartialEq)]
pub struct Search {
    kind: LoadKind,
    start: f64,
    cap: f64,
    tolerance: f64,
    pass: Option<f64>,
    fail: Option<f64>,
    /// The lowest load tried downwards before giving up (the start halved ten times).
    floor: f64,
}

impl Search {
    /// A search starting at `start`, never above `cap`, that stops once the highest passing
    /// and lowest failing loads are within `tolerance` (relative, e.g. 0.05) of each other
    /// (one step apart for concurrency).
    pub fn new(kind: LoadKind, start: f64, cap: f64, tolerance: f64) -> Search {
        let start = match kind {
            LoadKind::Concurrency => start.round().max(1.0),
            LoadKind::RequestRate => start,
        };
        Search {
            kind,
            start,
            cap: cap.max(start),
            tolerance,
            pass: None,
            fail: None,
            floor: match kind {
                LoadKind::Concurrency => 1.0,
                LoadKind::RequestRate => start / 1024.0,
            },
        }
    }

    fn step(&self, v: f64) -> f64 {
        match self.kind {
            LoadKind::Concurrency => v.round().max(1.0),
            LoadKind::RequestRate => (v * 1000.0).round() / 1000.0,
        }
    }

    /// The next load to measure, or `None` when the search is over.
    pub fn next(&self) -> Option<f64> {
        match (self.pass, self.fail) {
            (None, None) => Some(self.start),
            // Even the lightest load tried fails: bracket downwards.
            (None, Some(f)) => {
                let v = self.step(f / 2.0);
                (v >= self.floor && v < f).then_some(v)
            }
            // Everything passed so far: double, up to the cap.
            (Some(p), None) => {
                let v = self.step((p * 2.0).min(self.cap));
                (v > p).then_some(v)
            }
            (Some(p), Some(f)) => {
                if self.converged(p, f) {
                    return None;
                }
                let v = self.step((p + f) / 2.0);
                (v > p && v < f).then_some(v)
            }
        }
    }

    fn converged(&self, p: f64, f: f64) -> bool {
        match self.kind {
            LoadKind::Concurrency => f - p <= 1.0,
            LoadKind::RequestRate => f - p <= self.tolerance * p,
        }
    }

    /// Records the verdict on `load`.
    pub fn record(&mut self, load: f64, passed: bool) {
        if passed {
            self.pass = Some(self.pass.map_or(load, |p| p.max(load)));
        } else {
            self.fail = Some(self.fail.map_or(load, |f| f.min(load)));
        }
    }

    /// The highest passing load and the lowest failing one.
    pub fn bracket(&self) -> (Option<f64>, Option<f64>) {
        (self.pass, self.fail)
    }

    /// Whether the highest passing load is the cap (the contract holds everywhere searched).
    pub fn capped(&self) -> bool {
        self.fail.is_none() && self.pass.is_some_and(|p| p >= self.cap)
    }
}

/// Two-sided 95 % Student-t quantiles for 1–30 degrees of freedom.
const T95: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

/// Mean and 95 % confidence interval of the mean of repeated measurements.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MeanInterval {
    pub mean: f64,
    /// Lower bound (the mean itself with one run).
    pub low: f64,
    /// Upper bound (the mean itself with one run).
    pub high: f64,
    /// Runs.
    pub n: usize,
}

impl MeanInterval {
    /// From the finite values of `xs`; `None` when there is none.
    pub fn of(xs: &[f64]) -> Option<MeanInterval> {
        let v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
        let n = v.len();
        if n == 0 {
            return None;
        }
        let mean = v.iter().sum::<f64>() / n as f64;
        if n == 1 {
            return Some(MeanInterval {
                mean,
                low: mean,
                high: mean,
                n,
            });
        }
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
        let t = T95.get(n - 2).copied().unwrap_or(1.96);
        let half = t * (var / n as f64).sqrt();
        Some(MeanInterval {
            mean,
            low: mean - half,
            high: mean + half,
            n,
        })
    }
}

/// The over-saturation test, evaluated on what is known at regular check times during a run:
/// the run so far is cut into `windows` equal spans of send time, and at each check the point
/// is over-saturated when, over the spans so far (at least `min_windows`):
/// - requests in flight at the end of each span rise with a least-squares slope > 0 and a fit
///   R² ≥ `min_r2` (linear growth), and the last span holds at least `min_growth` × the first
///   plus 2 requests;
/// - queue time seen by users, as the age of the oldest request still waiting for its first
///   token at the end of each span (TTFT from the intended send, known while it grows), rises
///   the same way, the last span's at least `min_growth` × the first's;
/// - neither levels off: the slope over the second half of the spans is at least
///   `min_late_slope` × the slope over the first half.
///
/// A server that keeps up settles into a steady in-flight count and flat TTFT, failing the
/// first two conditions; one warming up flattens, failing the last.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SaturationTest {
    pub windows: usize,
    pub min_windows: usize,
    pub min_r2: f64,
    pub min_growth: f64,
    pub min_late_slope: f64,
}

impl Default for SaturationTest {
    fn default() -> Self {
        SaturationTest {
            windows: 10,
            min_windows: 5,
            min_r2: 0.8,
            min_growth: 2.0,
            min_late_slope: 0.5,
        }
    }
}

/// An over-saturated point: when the test fired and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverSaturation {
    /// Seconds into the run (from the first send) when the test fired.
    pub at_s: f64,
    /// Seconds the whole schedule spans.
    pub span_s: f64,
    /// One sentence.
    pub reason: String,
}

fn fit(ys: &[f64]) -> (f64, f64) {
    let n = ys.len() as f64;
    let mx = (n - 1.0) / 2.0;
    let my = ys.iter().sum::<f64>() / n;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (i, y) in ys.iter().enumerate() {
        let dx = i as f64 - mx;
        sxy += dx * (y - my);
        sxx += dx * dx;
        syy += (y - my).powi(2);
    }
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let r2 = if sxx > 0.0 && syy > 0.0 {
        sxy * sxy / (sxx * syy)
    } else {
        0.0
    };
    (slope, r2)
}

/// What was known about one request at some instant: when it was meant to go out, and its
/// first token and end if they had happened by then (`None` while still awaited).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub intended: u64,
    pub first_token: Option<u64>,
    pub done: Option<u64>,
}

impl From<&RequestRecord> for Sample {
    fn from(r: &RequestRecord) -> Self {
        Sample {
            intended: r.intended,
            first_token: r.first_token,
            done: r.done.or(r.end),
        }
    }
}

impl SaturationTest {
    /// The first check at which `records` show unbounded queue growth, or `None`.
    pub fn check(&self, records: &[RequestRecord]) -> Option<OverSaturation> {
        let samples: Vec<Sample> = records.iter().map(Sample::from).collect();
        let start = samples.iter().map(|r| r.intended).min()?;
        let end = samples.iter().map(|r| r.intended).max()?;
        if samples.len() < 4 * self.windows || end <= start {
            return None;
        }
        let width = (end - start) as f64 / self.windows as f64;
        let edge = |k: usize| start + (width * (k + 1) as f64) as u64;
        for k in self.min_windows..=self.windows {
            if let Some(reason) = self.fires(&samples, &edge, k) {
                return Some(OverSaturation {
                    at_s: (edge(k - 1) - start) as f64 / 1e9,
                    span_s: (end - start) as f64 / 1e9,
                    reason,
                });
            }
        }
        None
    }

    /// Whether the test fires on the first `k` spans, knowing only what happened by the end of
    /// span `k`.
    pub(crate) fn fires(
        &self,
        samples: &[Sample],
        edge: &dyn Fn(usize) -> u64,
        k: usize,
    ) -> Option<String> {
        let mut in_flight = Vec::with_capacity(k);
        let mut queue = Vec::with_capacity(k);
        for w in 0..k {
            let at = edge(w);
            let flying = samples
                .iter()
                .filter(|r| r.intended <= at && r.done.is_none_or(|d| d > at));
            in_flight.push(flying.clone().count() as f64);
            // The oldest request still waiting for its first token, known at `at`.
            let oldest = flying
                .filter(|r| r.first_token.is_none_or(|t| t > at))
                .map(|r| at.saturating_sub(r.intended))
                .max()
                .unwrap_or(0);
            queue.push(oldest as f64 / 1e6);
        }
        let grows = |ys: &[f64], extra: f64| {
            let (slope, r2) = fit(ys);
            let half = ys.len() / 2;
            let (early, _) = fit(&ys[..=half]);
            let (late, _) = fit(&ys[half..]);
            let first = ys[0];
            let last = ys[ys.len() - 1];
            slope > 0.0
                && r2 >= self.min_r2
                && last >= self.min_growth * first + extra
                && late >= self.min_late_slope * early
        };
        if grows(&in_flight, 2.0) && grows(&queue, 0.0) {
            Some(format!(
                "over-saturated: in flight rose linearly from {:.0} to {:.0} and the oldest wait for a first token from {:.0} to {:.0} ms over {k} spans without levelling (R² {:.2} and {:.2})",
                in_flight[0],
                in_flight[k - 1],
                queue[0],
                queue[k - 1],
                fit(&in_flight).1,
                fit(&queue).1,
            ))
        } else {
            None
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use servebench_metrics::CountSource;

    fn rec(id: u64, intended_ms: u64, ttft_ms: u64, dur_ms: u64) -> RequestRecord {
        let ms = 1_000_000;
        let first = (intended_ms + ttft_ms) * ms;
        let done = first + dur_ms * ms;
        RequestRecord {
            phases: None,
            id,
            intended: intended_ms * ms,
            released: intended_ms * ms,
            sent: intended_ms * ms,
            started: None,
            bare_events: Vec::new(),
            first_token: Some(first),
            end: Some(done),
            done: Some(done),
            waited_for_slot: false,
            events: Vec::new(),
            input_tokens: 16,
            input_source: CountSource::Usage,
            output_tokens: 4,
            output_source: CountSource::Usage,
            intended_input_tokens: 16,
            max_tokens: Some(4),
            cached_tokens: None,
            finish_reason: None,
            text: None,
            failure: None,
            resent: 0,
            answer_checked: false,
            output_split: None,
            session_id: None,
            turn: None,
            stamp_clock: None,
            images: None,
            lora: None,
            served_by: None,
        }
    }

    #[test]
    fn doubling_then_bisection_converges_on_the_crossing() {
        // Passes up to 13.3 req/s.
        let mut s = Search::new(LoadKind::RequestRate, 1.0, 1000.0, 0.05);
        let mut tried = Vec::new();
        while let Some(v) = s.next() {
            tried.push(v);
            s.record(v, v <= 13.3);
            assert!(tried.len() < 30, "{tried:?}");
        }
        let (p, f) = s.bracket();
        let (p, f) = (p.unwrap(), f.unwrap());
        assert!(
            p <= 13.3 && f > 13.3 && f - p <= 0.05 * p,
            "{p} {f} {tried:?}"
        );
        assert_eq!(&tried[..5], &[1.0, 2.0, 4.0, 8.0, 16.0]);
    }

    #[test]
    fn a_failing_start_brackets_downwards_and_the_cap_ends_a_passing_search() {
        let mut s = Search::new(LoadKind::Concurrency, 32.0, 64.0, 0.05);
        let mut tried = Vec::new();
        while let Some(v) = s.next() {
            tried.push(v);
            s.record(v, v <= 5.0);
        }
        assert_eq!(s.bracket(), (Some(5.0), Some(6.0)), "{tried:?}");
        let mut s = Search::new(LoadKind::Concurrency, 8.0, 20.0, 0.05);
        while let Some(v) = s.next() {
            s.record(v, true);
        }
        assert!(s.capped());
        assert_eq!(s.bracket(), (Some(20.0), None));
    }

    #[test]
    fn mean_intervals_widen_with_spread() {
        let one = MeanInterval::of(&[10.0]).unwrap();
        assert_eq!((one.low, one.high), (10.0, 10.0));
        let three = MeanInterval::of(&[9.0, 10.0, 11.0]).unwrap();
        assert!((three.mean - 10.0).abs() < 1e-12);
        assert!((three.high - 10.0 - 4.303 / 3f64.sqrt()).abs() < 1e-9);
        assert!(MeanInterval::of(&[f64::NAN]).is_none());
    }

    #[test]
    fn a_growing_queue_is_over_saturated_and_a_steady_one_is_not() {
        // 10 req/s against a server that serves 5 req/s: every request waits behind the
        // backlog, which grows by 5 a second.
        let over: Vec<RequestRecord> = (0..200)
            .map(|i| {
                let arrive = i * 100;
                let served_at = i * 200;
                rec(i, arrive, served_at - arrive + 50, 100)
            })
            .collect();
        let s = SaturationTest::default()
            .check(&over)
            .expect("over-saturated");
        assert!(s.at_s < s.span_s, "{s:?}");
        assert!(s.reason.contains("rose linearly"), "{}", s.reason);
        // The same arrivals served with a steady 80 ms TTFT.
        let steady: Vec<RequestRecord> = (0..200).map(|i| rec(i, i * 100, 80, 300)).collect();
        assert_eq!(SaturationTest::default().check(&steady), None);
        // Too few requests to judge.
        assert_eq!(SaturationTest::default().check(&over[..10]), None);
    }
}
