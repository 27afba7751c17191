//! The figures `vllm bench serve` reports, computed with vLLM's own definitions (from
//! `vllm/benchmarks/serve.py`, `calculate_metrics`) so the vLLM-compatible result file means
//! what vLLM's does. servebench's own, exact figures live in [`crate::summary`].
//!
//! vLLM counts only successful requests here; a request's `start_time` is servebench's
//! `sent`, its `latency` is `end − sent`, and its token times are `start + ttft + Σ itl`,
//! i.e. exactly the token-event times.

use crate::record::RequestRecord;
use crate::units::{ns_f64_to_s, ns_to_s, NS_PER_S};

/// vLLM's `max_output_tokens_per_s`: the busiest *aligned* one-second bucket.
///
/// Buckets start at the earliest `sent` of the successful requests; every token event
/// (one per token-bearing event, as vLLM counts one per chunk) adds 1 to bucket
/// `floor((t − start) / 1 s)`, for `ceil((max_end − start) / 1 s) + 1` buckets, where
/// `max_end` is the latest request end. 0 when no request succeeded.
///
/// Unlike servebench's sliding-window peak, a burst straddling a bucket boundary is split.
pub fn max_output_tokens_per_s(records: &[RequestRecord]) -> f64 {
    let ok: Vec<&RequestRecord> = records.iter().filter(|r| r.is_success()).collect();
    let Some(start) = ok.iter().map(|r| r.sent).min() else {
        return 0.0;
    };
    let max_end = ok
        .iter()
        .filter_map(|r| r.end_ns())
        .max()
        .unwrap_or(start)
        .max(start);
    let span = max_end - start;
    let buckets = span.div_ceil(NS_PER_S) + 1;
    let Ok(buckets) = usize::try_from(buckets) else {
        return 0.0;
    };
    let mut counts = vec![0u64; buckets];
    for r in &ok {
        for e in &r.events {
            let Some(offset) = e.t.checked_sub(start) else {
                continue;
            };
            let b = (offset / NS_PER_S) as usize;
            if let Some(c) = counts.get_mut(b) {
                *c += 1;
            }
        }
    }
    counts.into_iter().max().unwrap_or(0) as f64
}

/// vLLM's `max_concurrent_requests`: the exact peak of concurrently open successful
/// requests, from a sweep over half-open `[sent, sent + latency)` = `[sent, end)` intervals,
/// departures sorted before arrivals at equal times (vLLM's tie rule).
pub fn max_concurrent_requests(records: &[RequestRecord]) -> u64 {
    let mut events: Vec<(u64, i64)> = Vec::with_capacity(records.len() * 2);
    for r in records.iter().filter(|r| r.is_success()) {
        let Some(end) = r.end_ns() else { continue };
        events.push((r.sent, 1));
        events.push((end, -1));
    }
    events.sort_unstable();
    let mut current = 0i64;
    let mut peak = 0i64;
    for (_, delta) in events {
        current += delta;
        peak = peak.max(current);
    }
    u64::try_from(peak).unwrap_or(0)
}

/// The per-request vectors vLLM's result file and statistics use, in seconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VllmVectors {
    /// TTFT of each successful request, in record order.
    pub ttfts_s: Vec<f64>,
    /// ITLs of each successful request.
    pub itls_s: Vec<Vec<f64>>,
    /// E2EL (`latency`) of each successful request.
    pub latencies_s: Vec<f64>,
    /// TPOT of each successful request with more than one output token (vLLM's `tpots`, the
    /// list its TPOT statistics use).
    pub tpots_s: Vec<f64>,
    /// TPOT of every successful request, 0 for one output token (vLLM's `all_tpots`, the
    /// list its goodput uses).
    pub all_tpots_s: Vec<f64>,
    /// Output tokens of each successful request.
    pub output_lens: Vec<u64>,
    /// Input tokens of each successful request.
    pub input_lens: Vec<u64>,
}

impl VllmVectors {
    /// Every ITL of every successful request, pooled (vLLM's `itls` statistics list).
    pub fn pooled_itls_s(&self) -> Vec<f64> {
        self.itls_s.iter().flatten().copied().collect()
    }
}

/// The vectors of the successful requests, in the order given.
pub fn vectors(records: &[RequestRecord]) -> VllmVectors {
    let mut v = VllmVectors::default();
    for r in records.iter().filter(|r| r.is_success()) {
        let (Some(ttft), Some(e2el)) = (r.ttft_ns(), r.e2el_ns()) else {
            continue;
        };
        v.ttfts_s.push(ns_to_s(ttft));
        v.latencies_s.push(ns_to_s(e2el));
        v.itls_s.push(r.itls_ns().map(ns_to_s).collect());
        let tpot = r.tpot_ns().map(ns_f64_to_s);
        if let Some(t) = tpot {
            v.tpots_s.push(t);
        }
        v.all_tpots_s.push(tpot.unwrap_or(0.0));
        v.output_lens.push(r.output_tokens);
        v.input_lens.push(r.input_tokens);
    }
    v
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::derived::tests::record;
    use crate::record::{Failure, FailureKind};

    #[test]
    fn aligned_buckets_split_a_burst() {
        // Starts at 0; tokens at 0.9 s ×3 and 1.1 s ×3: the sliding window would see 6.
        let a = record(0, 0, &[900, 900, 900], 3);
        let b = record(1, 0, &[1100, 1100, 1100], 3);
        assert_eq!(max_output_tokens_per_s(&[a, b]), 3.0);
    }

    #[test]
    fn buckets_count_events_not_usage_tokens() {
        let r = record(0, 0, &[100, 200], 50);
        assert_eq!(max_output_tokens_per_s(&[r]), 2.0);
        assert_eq!(max_output_tokens_per_s(&[]), 0.0);
    }

    #[test]
    fn concurrency_sweep_is_half_open_and_ignores_failures() {
        // [0, 100) and [100, 200) touch but do not overlap; [50, 150) overlaps both.
        let a = record(0, 0, &[100], 1);
        let b = record(1, 100, &[200], 1);
        assert_eq!(max_concurrent_requests(&[a.clone(), b.clone()]), 1);
        let c = record(2, 50, &[150], 1);
        assert_eq!(
            max_concurrent_requests(&[a.clone(), b.clone(), c.clone()]),
            2
        );
        let mut failed = record(3, 60, &[140], 1);
        failed.failure = Some(Failure {
            kind: FailureKind::Truncated,
            status: None,
            message: "reset".into(),
        });
        assert_eq!(max_concurrent_requests(&[a, b, c, failed]), 2);
    }

    #[test]
    fn vectors_follow_vllm_lists() {
        let a = record(0, 0, &[100, 150, 250], 3);
        let b = record(1, 0, &[300], 1);
        let v = vectors(&[a, b]);
        assert_eq!(v.ttfts_s, vec![0.1, 0.3]);
        assert_eq!(v.latencies_s, vec![0.25, 0.3]);
        assert_eq!(v.itls_s, vec![vec![0.05, 0.1], vec![]]);
        assert_eq!(v.tpots_s, vec![0.075]);
        assert_eq!(v.all_tpots_s, vec![0.075, 0.0]);
        assert_eq!(v.pooled_itls_s(), vec![0.05, 0.1]);
        assert_eq!(v.output_lens, vec![3, 1]);
    }
}
