//! Metrics over time (`--slice-duration S`): every statistic of a run computed again per time
//! window, from the same records as the whole-run summary (docs/live-and-slices.md).
//!
//! A sample belongs to the window in which the client observed it: a TTFT at its first token,
//! each inter-token gap at the later of its two tokens, an E2EL and a TPOT at the request's
//! last token, a completion or a failure at its `done` time, output tokens at the events that
//! carried them, a request start at its `sent` time. That is also what a live view sees at
//! that moment, so a live figure and the saved window agree. Requests in flight are the
//! time-weighted mean and the instantaneous maximum over `[sent, end-or-done)` intervals, as in
//! the per-second [`crate::TimeSeries`]. Server telemetry samples fall in the window of their
//! scrape time.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::record::RequestRecord;
use crate::result::ServerTelemetry;
use crate::stats::{mean, percentile_sorted};
use crate::units::{ns_f64_to_ms, ns_to_ms, ns_to_s};

/// The percentile bands every window keeps when none are asked for.
pub const DEFAULT_SLICE_PERCENTILES: [f64; 4] = [50.0, 90.0, 95.0, 99.0];

/// Most windows one run is cut into: a narrower width given for a longer run is widened to
/// fit (the result's `width_s` is the width used).
pub const MAX_SLICE_WINDOWS: usize = 10_000;

/// How to slice.
#[derive(Debug, Clone, PartialEq)]
pub struct SliceOptions {
    /// Window width, ns (> 0).
    pub width_ns: u64,
    /// Start of window 0, ns from the run start; default: the earliest `intended`.
    pub origin_ns: Option<u64>,
    /// End of the last window; default: the latest `end`/`done`.
    pub end_ns: Option<u64>,
    /// Percentiles kept per window, in %.
    pub percentiles: Vec<f64>,
}

impl SliceOptions {
    /// Windows of `width_s` seconds with the default percentile bands.
    pub fn every(width_s: f64) -> SliceOptions {
        SliceOptions {
            width_ns: crate::units::s_to_ns(width_s).max(1),
            origin_ns: None,
            end_ns: None,
            percentiles: DEFAULT_SLICE_PERCENTILES.to_vec(),
        }
    }
}

/// One percentile of a window's sample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SlicePercentile {
    /// In % (99).
    pub p: f64,
    /// NumPy's linear percentile, ms.
    pub value: f64,
}

/// A latency metric within one window, ms. Empty (`n` = 0, no values) without samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SliceStat {
    pub n: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub percentiles: Vec<SlicePercentile>,
}

impl SliceStat {
    /// From samples in ms.
    pub fn from_ms(mut samples: Vec<f64>, percentiles: &[f64]) -> SliceStat {
        samples.retain(|v| v.is_finite());
        if samples.is_empty() {
            return SliceStat::default();
        }
        let m = mean(&samples);
        samples.sort_unstable_by(f64::total_cmp);
        SliceStat {
            n: samples.len() as u64,
            mean: m,
            min: samples.first().copied(),
            max: samples.last().copied(),
            percentiles: percentiles
                .iter()
                .filter_map(|&p| {
                    percentile_sorted(&samples, p).map(|value| SlicePercentile { p, value })
                })
                .collect(),
        }
    }

    /// The value of percentile `p`, when kept.
    pub fn percentile(&self, p: f64) -> Option<f64> {
        self.percentiles.iter().find(|x| x.p == p).map(|x| x.value)
    }
}

/// What the server's `/metrics` said within one window (only when it was scraped then).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SliceServer {
    /// Scrapes in the window.
    pub samples: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_mean: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_mean: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_max: Option<f64>,
    /// KV cache usage, 0–1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_usage_mean: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_usage_max: Option<f64>,
    /// Increase of the preemption counter from the previous scrape to the window's last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemptions: Option<f64>,
}

/// One time window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Slice {
    /// Window start, s since the slices' origin.
    pub start_s: f64,
    /// Window end (the last window ends with the run, so it may be shorter).
    pub end_s: f64,
    /// Requests whose first byte went out in the window.
    pub started: u64,
    /// Requests that completed successfully in the window (by `done`).
    pub completed: u64,
    /// Requests that failed in the window (by `done`).
    pub failed: u64,
    /// Those failures by kind.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failures_by_kind: BTreeMap<String, u64>,
    /// Output tokens received in the window (each event weighted by its token share).
    pub output_tokens: f64,
    /// Output tokens / window length.
    pub output_throughput: f64,
    /// Completed requests / window length.
    pub request_throughput: f64,
    /// Time-averaged requests in flight.
    pub in_flight_mean: f64,
    /// Most requests in flight at any instant of the window.
    pub in_flight_max: u64,
    pub ttft: SliceStat,
    pub tpot: SliceStat,
    pub itl: SliceStat,
    pub e2el: SliceStat,
    /// Server telemetry scraped in the window (absent when none was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<SliceServer>,
}

impl Slice {
    /// The latency metric `ttft`, `tpot`, `itl` or `e2el`.
    pub fn metric(&self, name: &str) -> Option<&SliceStat> {
        Some(match name {
            "ttft" => &self.ttft,
            "tpot" => &self.tpot,
            "itl" => &self.itl,
            "e2el" => &self.e2el,
            _ => return None,
        })
    }
}

/// A run cut into windows (the result's `slices`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Slices {
    /// Window width, s.
    pub width_s: f64,
    /// Start of window 0, ns from the run start (the records' clock).
    pub origin_ns: u64,
    /// The percentiles each window keeps.
    pub percentiles: Vec<f64>,
    pub windows: Vec<Slice>,
}

impl Slices {
    /// The latency metrics a window holds, in report order.
    pub const METRICS: [&'static str; 4] = ["ttft", "tpot", "itl", "e2el"];
}

/// A slice width for a run of `duration_s` when none was given: about 30 windows, rounded to
/// 1, 2 or 5 × 10^k seconds (at least 1 s, or the whole run when it is shorter).
pub fn auto_width_s(duration_s: f64) -> f64 {
    if !(duration_s.is_finite() && duration_s > 0.0) {
        return 1.0;
    }
    let raw = (duration_s / 30.0).max(1.0);
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|w| *w >= raw)
        .unwrap_or(10.0 * mag)
}

/// Cut `records` (and the server's telemetry, when scraped) into windows.
pub fn slices(
    records: &[RequestRecord],
    telemetry: Option<&ServerTelemetry>,
    opts: &SliceOptions,
) -> Slices {
    let origin = opts
        .origin_ns
        .or_else(|| records.iter().map(|r| r.intended).min())
        .unwrap_or(0);
    let latest = records
        .iter()
        .filter_map(|r| match (r.done, r.end) {
            (Some(d), Some(e)) => Some(d.max(e)),
            (d, e) => d.or(e),
        })
        .max();
    let end = opts.end_ns.or(latest).unwrap_or(origin).max(origin);
    // A width far below the run's length would cost memory without end: past
    // MAX_SLICE_WINDOWS the windows widen, and `width_s` says by how much.
    let width = opts
        .width_ns
        .max(1)
        .max((end - origin).div_ceil(MAX_SLICE_WINDOWS as u64));
    let len = (end - origin).div_ceil(width).max(1) as usize;
    let mut out = Slices {
        width_s: ns_to_s(width),
        origin_ns: origin,
        percentiles: opts.percentiles.clone(),
        windows: Vec::with_capacity(len),
    };
    if records.is_empty() && telemetry.is_none_or(|t| t.samples.is_empty()) {
        return out;
    }
    let index = |t: u64| -> Option<usize> {
        let i = (t.checked_sub(origin)? / width) as usize;
        // A stamp at the very end of the run belongs to the last window.
        Some(i.min(len - 1))
    };

    let mut w: Vec<Slice> = (0..len)
        .map(|i| Slice {
            start_s: ns_to_s(i as u64 * width),
            end_s: ns_to_s(
                ((i as u64 + 1) * width)
                    .min(end - origin)
                    .max(i as u64 * width),
            ),
            ..Slice::default()
        })
        .collect();
    let mut ttft: Vec<Vec<f64>> = vec![Vec::new(); len];
    let mut tpot: Vec<Vec<f64>> = vec![Vec::new(); len];
    let mut itl: Vec<Vec<f64>> = vec![Vec::new(); len];
    let mut e2el: Vec<Vec<f64>> = vec![Vec::new(); len];

    for r in records {
        if let Some(i) = index(r.sent) {
            w[i].started += 1;
        }
        let stop = r.done.or(r.end).unwrap_or(r.sent);
        if !r.is_success() {
            if let Some(i) = index(stop) {
                w[i].failed += 1;
                let kind = r
                    .failure
                    .as_ref()
                    .map_or("empty_output", |f| f.kind.as_str());
                *w[i].failures_by_kind.entry(kind.to_owned()).or_insert(0) += 1;
            }
            continue;
        }
        if let Some(i) = index(r.done.or(r.end_ns()).unwrap_or(stop)) {
            w[i].completed += 1;
        }
        let share = r.tokens_per_event();
        for e in &r.events {
            if let Some(i) = index(e.t) {
                w[i].output_tokens += share;
            }
        }
        if let (Some(v), Some(i)) = (r.ttft_ns(), r.first_token.and_then(index)) {
            ttft[i].push(ns_to_ms(v));
        }
        if let Some(i) = r.end_ns().and_then(index) {
            if let Some(v) = r.e2el_ns() {
                e2el[i].push(ns_to_ms(v));
            }
            if let Some(v) = r.tpot_ns() {
                tpot[i].push(ns_f64_to_ms(v));
            }
        }
        for pair in r.events.windows(2) {
            if let Some(i) = index(pair[1].t) {
                itl[i].push(ns_to_ms(pair[1].t.saturating_sub(pair[0].t)));
            }
        }
    }

    let (occ_mean, occ_max) = occupancy(records, origin, width, len);
    let p = &opts.percentiles;
    for (i, s) in w.iter_mut().enumerate() {
        let secs = s.end_s - s.start_s;
        if secs > 0.0 {
            s.output_throughput = s.output_tokens / secs;
            s.request_throughput = s.completed as f64 / secs;
            s.in_flight_mean = occ_mean[i] / secs;
        }
        s.in_flight_max = occ_max[i];
        s.ttft = SliceStat::from_ms(std::mem::take(&mut ttft[i]), p);
        s.tpot = SliceStat::from_ms(std::mem::take(&mut tpot[i]), p);
        s.itl = SliceStat::from_ms(std::mem::take(&mut itl[i]), p);
        s.e2el = SliceStat::from_ms(std::mem::take(&mut e2el[i]), p);
    }
    if let Some(t) = telemetry {
        server_windows(t, &mut w, index);
    }
    out.windows = w;
    out
}

/// Per window: seconds of request occupancy (Σ of each in-flight interval's overlap with the
/// window) and the instantaneous maximum of requests in flight.
pub(crate) fn occupancy(
    records: &[RequestRecord],
    origin: u64,
    width: u64,
    len: usize,
) -> (Vec<f64>, Vec<u64>) {
    let mut busy = vec![0.0f64; len];
    let mut max = vec![0u64; len];
    if len == 0 {
        return (busy, max);
    }
    for (s, e) in records.iter().filter_map(RequestRecord::in_flight_ns) {
        let (s, e) = (s.max(origin), e.max(origin));
        let mut t = s;
        while t < e {
            let b = ((t - origin) / width) as usize;
            if b >= len {
                break;
            }
            let stop = e.min(origin + (b as u64 + 1) * width);
            busy[b] += ns_to_s(stop - t);
            t = stop;
        }
    }
    // Departures before arrivals at one instant (half-open intervals).
    let mut ev: Vec<(u64, i64)> = records
        .iter()
        .filter_map(RequestRecord::in_flight_ns)
        .flat_map(|(s, e)| [(s, 1), (e, -1)])
        .collect();
    ev.sort_unstable();
    let (mut cur, mut k) = (0i64, 0);
    for (b, slot) in max.iter_mut().enumerate() {
        let bucket_end = origin + (b as u64 + 1) * width;
        let mut m = cur;
        while k < ev.len() && ev[k].0 < bucket_end {
            cur += ev[k].1;
            m = m.max(cur);
            k += 1;
        }
        *slot = u64::try_from(m).unwrap_or(0);
    }
    (busy, max)
}

fn server_windows(t: &ServerTelemetry, w: &mut [Slice], index: impl Fn(u64) -> Option<usize>) {
    #[derive(Default)]
    struct Acc {
        n: u64,
        running: Vec<f64>,
        waiting: Vec<f64>,
        kv: Vec<f64>,
        preempt_last: Option<f64>,
    }
    let mut acc: Vec<Acc> = (0..w.len()).map(|_| Acc::default()).collect();
    let mut samples: Vec<_> = t.samples.iter().collect();
    samples.sort_by_key(|s| s.t);
    let mut preempt_before: Vec<Option<f64>> = vec![None; w.len()];
    let mut prev_preempt: Option<f64> = None;
    for s in samples {
        let Some(i) = index(s.t) else {
            prev_preempt = s.preemptions.or(prev_preempt);
            continue;
        };
        let a = &mut acc[i];
        if a.n == 0 {
            preempt_before[i] = prev_preempt;
        }
        a.n += 1;
        a.running.extend(s.running);
        a.waiting.extend(s.waiting);
        a.kv.extend(s.kv_usage);
        if s.preemptions.is_some() {
            a.preempt_last = s.preemptions;
            prev_preempt = s.preemptions;
        }
    }
    let max = |v: &[f64]| v.iter().copied().reduce(f64::max);
    for ((slot, a), before) in w.iter_mut().zip(acc).zip(preempt_before) {
        if a.n == 0 {
            continue;
        }
        slot.server = Some(SliceServer {
            samples: a.n,
            running_mean: mean(&a.running),
            waiting_mean: mean(&a.waiting),
            waiting_max: max(&a.waiting),
            kv_usage_mean: mean(&a.kv),
            kv_usage_max: max(&a.kv),
            preemptions: match (before, a.preempt_last) {
                (Some(b), Some(l)) => Some((l - b).max(0.0)),
                _ => None,
            },
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::derived::tests::record;
    use crate::record::{Failure, FailureKind};
    use crate::result::TelemetrySample;
    use crate::summary::{summarize, SummaryOptions};

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    fn opts(width_s: f64) -> SliceOptions {
        SliceOptions {
            percentiles: vec![50.0, 99.0],
            ..SliceOptions::every(width_s)
        }
    }

    /// Four requests over 4 s in 2 s windows: each sample lands where it was observed.
    #[test]
    fn samples_fall_in_the_window_where_they_were_observed() {
        let records = vec![
            // Sent at 0, first token at 100 ms, tokens every 100 ms to 400 ms.
            record(0, 0, &[100, 200, 300, 400], 4),
            // Sent at 1.5 s, first token at 2.5 s (window 1), last at 2.7 s.
            record(1, 1500, &[2500, 2600, 2700], 3),
            // Sent at 2.2 s, TTFT 300 ms, ends at 3.9 s.
            record(2, 2200, &[2500, 3900], 2),
        ];
        let mut failed = record(3, 3000, &[], 0);
        failed.done = Some(3500 * MS);
        failed.failure = Some(Failure {
            kind: FailureKind::Timeout,
            status: None,
            message: "t".into(),
        });
        let mut all = records.clone();
        all.push(failed);
        let s = slices(&all, None, &opts(2.0));
        assert_eq!(s.origin_ns, 0);
        assert_eq!(s.width_s, 2.0);
        assert_eq!(s.windows.len(), 2);
        let (a, b) = (&s.windows[0], &s.windows[1]);
        // The run ends at the last `done` (3.901 s): so does the last window.
        assert_eq!(
            (a.start_s, a.end_s, b.start_s, b.end_s),
            (0.0, 2.0, 2.0, 3.901)
        );
        // Starts by `sent`.
        assert_eq!((a.started, b.started), (2, 2));
        // Completions by done (last token + 1 ms), failures by done.
        assert_eq!((a.completed, b.completed), (1, 2));
        assert_eq!((a.failed, b.failed), (0, 1));
        assert_eq!(b.failures_by_kind.get("timeout"), Some(&1));
        // TTFT at the first token: 100 ms in window 0; 1000 and 300 ms in window 1.
        assert_eq!(a.ttft.n, 1);
        assert_eq!(a.ttft.percentile(50.0), Some(100.0));
        assert_eq!(b.ttft.n, 2);
        assert_eq!(b.ttft.min, Some(300.0));
        assert_eq!(b.ttft.max, Some(1000.0));
        assert_eq!(b.ttft.percentile(50.0), Some(650.0));
        // ITL at the later token: three 100 ms gaps in window 0; 100, 100 and 1400 in 1.
        assert_eq!(a.itl.n, 3);
        assert_eq!(b.itl.n, 3);
        assert_eq!(b.itl.max, Some(1400.0));
        // E2EL at the last token: 400 ms in 0; 1200 and 1700 ms in 1.
        assert_eq!(a.e2el.percentile(50.0), Some(400.0));
        assert_eq!(b.e2el.percentile(50.0), Some(1450.0));
        // Output tokens by event time; throughput per second of the window.
        assert_eq!(a.output_tokens, 4.0);
        assert_eq!(b.output_tokens, 5.0);
        assert!((b.output_throughput - 5.0 / 1.901).abs() < 1e-9);
        assert_eq!(a.request_throughput, 0.5);
        // In flight over [sent, end): 0.4 s + 0.5 s of occupancy in window 0.
        assert!(
            (a.in_flight_mean - 0.45).abs() < 1e-12,
            "{}",
            a.in_flight_mean
        );
        assert_eq!(a.in_flight_max, 1);
        // Request 1 ends (2.7 s) before the failed one starts (3 s): at most 2 at once.
        assert_eq!(b.in_flight_max, 2);
        // No telemetry: no server block.
        assert!(a.server.is_none());
    }

    /// One-second windows agree with the summary's per-second series and totals.
    #[test]
    fn one_second_windows_agree_with_the_whole_run_summary() {
        let records: Vec<RequestRecord> = (0..40)
            .map(|i| {
                let sent = i * 137;
                let times: Vec<u64> = (1..=5).map(|k| sent + 80 + k * 31 + i % 7).collect();
                record(i, sent, &times, 5 + i % 3)
            })
            .collect();
        let sum = summarize(&records, &SummaryOptions::default());
        let s = slices(&records, None, &SliceOptions::every(1.0));
        let ts = &sum.time_series;
        assert_eq!(s.windows.len(), ts.in_flight_max.len());
        for (i, w) in s.windows.iter().enumerate() {
            assert_eq!(w.in_flight_max, ts.in_flight_max[i], "window {i}");
            let secs = w.end_s - w.start_s;
            assert!((w.in_flight_mean * secs - ts.in_flight_mean[i]).abs() < 1e-9);
            assert!((w.output_tokens - ts.output_tokens[i]).abs() < 1e-9);
        }
        let total = |f: fn(&Slice) -> u64| s.windows.iter().map(f).sum::<u64>();
        assert_eq!(total(|w| w.completed), sum.completed);
        assert_eq!(total(|w| w.ttft.n), sum.ttft.n);
        assert_eq!(total(|w| w.itl.n), sum.itl.n);
        assert_eq!(total(|w| w.tpot.n), sum.tpot.n);
        assert_eq!(total(|w| w.started), 40);
        // One window over the whole run: its percentiles are the summary's.
        let whole = slices(&records, None, &SliceOptions::every(1_000.0));
        assert_eq!(whole.windows.len(), 1);
        assert_eq!(
            whole.windows[0].ttft.percentile(99.0),
            sum.ttft.percentile(99.0).map(|p| p.value)
        );
        assert_eq!(
            whole.windows[0].itl.percentile(50.0),
            sum.itl.percentile(50.0).map(|p| p.value)
        );
    }

    #[test]
    fn server_telemetry_is_averaged_per_window_with_preemptions_as_increases() {
        let records = vec![record(0, 0, &[500, 3500], 2)];
        let sample = |t: u64, running: f64, kv: f64, pre: f64| TelemetrySample {
            t,
            running: Some(running),
            waiting: Some(running / 2.0),
            kv_usage: Some(kv),
            preemptions: Some(pre),
        };
        let t = ServerTelemetry {
            samples: vec![
                sample(S / 2, 2.0, 0.1, 1.0),
                sample(S, 4.0, 0.3, 3.0),
                sample(3 * S, 6.0, 0.5, 7.0),
            ],
            ..ServerTelemetry::default()
        };
        let s = slices(&records, Some(&t), &opts(2.0));
        let a = s.windows[0].server.as_ref().unwrap();
        assert_eq!(a.samples, 2);
        assert_eq!(a.running_mean, Some(3.0));
        assert_eq!(a.kv_usage_max, Some(0.3));
        assert!((a.kv_usage_mean.unwrap() - 0.2).abs() < 1e-12);
        // The first window has no scrape before it to count from.
        assert_eq!(a.preemptions, None);
        let b = s.windows[1].server.as_ref().unwrap();
        assert_eq!(b.waiting_max, Some(3.0));
        assert_eq!(b.preemptions, Some(4.0));
    }

    #[test]
    fn the_last_window_ends_with_the_run_and_rates_use_its_length() {
        // One request, 2.5 s long, in 2 s windows: the second window is 0.5 s.
        let s = slices(&[record(0, 0, &[1000, 2500], 2)], None, &opts(2.0));
        assert_eq!(s.windows.len(), 2);
        assert_eq!(s.windows[1].end_s, 2.501);
        assert!((s.windows[1].output_throughput - 1.0 / 0.501).abs() < 1e-9);
        assert!(slices(&[], None, &opts(2.0)).windows.is_empty());
    }

    #[test]
    fn a_width_too_narrow_for_the_run_is_widened_to_the_most_windows() {
        // 1 µs windows over a 2.5 s run would be 2.5 million.
        let s = slices(&[record(0, 0, &[1000, 2500], 2)], None, &opts(1e-6));
        assert_eq!(s.windows.len(), MAX_SLICE_WINDOWS);
        assert!((s.width_s - 2.501 / MAX_SLICE_WINDOWS as f64).abs() < 1e-9);
        assert_eq!(s.windows.iter().map(|w| w.completed).sum::<u64>(), 1);
    }

    #[test]
    fn automatic_widths_give_about_thirty_round_windows() {
        assert_eq!(auto_width_s(10.0), 1.0);
        assert_eq!(auto_width_s(60.0), 2.0);
        assert_eq!(auto_width_s(100.0), 5.0);
        assert_eq!(auto_width_s(600.0), 20.0);
        assert_eq!(auto_width_s(3600.0), 200.0);
        assert_eq!(auto_width_s(0.0), 1.0);
    }
}
