//! The figures `vllm bench serve` reports, computed with vLLM's own definitions (from
//! `vllm/benchmarks/serve.py`, `calculate_metrics`) so the vLLM-compatible result file means
//! what vLLM's does. servebench's own, exact figures live in [`crate::summary`].
//!
//! vLLM's client sees a request differently from servebench in two ways (docs/metrics.md
//! "Two clocks and two event rules"): its clock starts before a pooled connection is taken
//! (`started`, not `sent`), and every event with a non-empty `choices` list is a token event
//! (`bare_events` too). [`view`] turns a record into the record vLLM's client would have
//! kept; every vLLM-format figure is computed from such views, so the derived metrics of
//! [`RequestRecord`] (TTFT, ITL, E2EL, TPOT, queue time) mean vLLM's on a view.
//!
//! vLLM counts only successful requests here; a request's `start_time` is the view's `sent`,
//! its `latency` is `end − sent`, and its token times are `start + ttft + Σ itl`, i.e.
//! exactly the event times.

use std::collections::BTreeMap;

use crate::record::{FailureKind, RequestRecord, TokenEvent};
use crate::units::{ns_f64_to_s, ns_to_s, NS_PER_S};

/// The record vLLM's client would have kept for the same exchange.
///
/// - `sent` is `started` (vLLM's `st`) when the record has it; `started` is cleared.
/// - `events` are the token events and the bare events merged in time order (a bare event
///   carries no characters); `first_token` and `end` follow from them.
/// - A stream that ended normally with no token but with bare events (only a role chunk and
///   a closing chunk) succeeded for vLLM: it received a chunk with choices.
pub fn view(r: &RequestRecord) -> RequestRecord {
    let mut v = r.clone();
    if let Some(st) = r.started {
        v.sent = st;
    }
    v.started = None;
    if !r.bare_events.is_empty() {
        let mut events = Vec::with_capacity(r.events.len() + r.bare_events.len());
        events.extend_from_slice(&r.events);
        events.extend(r.bare_events.iter().map(|&t| TokenEvent { t, chars: 0 }));
        // Stable: at equal receipt times the token event keeps its place first.
        events.sort_by_key(|e| e.t);
        v.first_token = events.first().map(|e| e.t);
        v.end = events.last().map(|e| e.t);
        v.events = events;
        v.bare_events = Vec::new();
        if v.failure
            .as_ref()
            .is_some_and(|f| f.kind == FailureKind::EmptyOutput)
        {
            v.failure = None;
        }
    }
    v
}

/// [`view`] without copying the token events where vLLM sees the record's own: the view's
/// `events` are left empty unless bare events were merged into them. [`view_events`] gives
/// the events that go with it. A run's events are a number per token; copying them for the
/// view doubled the memory of the result.
pub fn view_sharing_events(r: &RequestRecord) -> RequestRecord {
    if !r.bare_events.is_empty() {
        return view(r);
    }
    let mut v = r.clone_without_events();
    if let Some(st) = r.started {
        v.sent = st;
    }
    v.started = None;
    v
}

/// The token events vLLM sees for `original`, whose view `shared` was made by
/// [`view_sharing_events`].
pub fn view_events<'a>(original: &'a RequestRecord, shared: &'a RequestRecord) -> &'a [TokenEvent] {
    if original.bare_events.is_empty() {
        &original.events
    } else {
        &shared.events
    }
}

/// [`view`] of every record, in the given order.
pub fn views(records: &[RequestRecord]) -> Vec<RequestRecord> {
    records.iter().map(view).collect()
}

/// One entry of vLLM's `rps_change_events`: the ramp's integer rate reached `rps` at `at_ns`
/// (ns from the run start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RpsChange {
    pub rps: u64,
    pub at_ns: u64,
}

/// vLLM's `rps_change_events` under `--ramp-up-strategy`: the start rate at the run start,
/// then, as each request is released in order, one entry for every integer rate the ramp
/// passed since the last entry (`int(rate)` of that request), stamped with that request's
/// release time. `requests` are `(rate of the request, its intended time)` in request order.
pub fn rps_change_events(start_rps: u64, requests: &[(f64, u64)]) -> Vec<RpsChange> {
    let mut out = vec![RpsChange {
        rps: start_rps,
        at_ns: 0,
    }];
    let mut last = start_rps;
    for &(rate, at_ns) in requests {
        // Python's int() truncates toward zero; rates are positive.
        let current = if rate.is_finite() && rate > 0.0 {
            rate.trunc() as u64
        } else {
            continue;
        };
        if current > last {
            out.extend((last + 1..=current).map(|rps| RpsChange { rps, at_ns }));
            last = current;
        }
    }
    out
}

/// The counters vLLM's client reads from the server's `/metrics` for speculative decoding
/// (`fetch_spec_decode_metrics` in vllm/benchmarks/serve.py).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecDecodeCounters {
    pub num_drafts: i64,
    pub num_draft_tokens: i64,
    pub num_accepted_tokens: i64,
    pub accepted_per_pos: BTreeMap<i64, i64>,
}

/// Python's `int(float(text))` for a sample value; `None` where Python raises.
fn py_int_of_float(text: &str) -> Option<i64> {
    let v: f64 = text.trim().parse().ok()?;
    v.is_finite().then(|| v.trunc() as i64)
}

impl SpecDecodeCounters {
    /// Read Prometheus text as vLLM's client does: every sample line whose name starts with
    /// `vllm:spec_decode` and ends in `_total` counts (summed over label sets); `None` when
    /// there is no such line (no speculative decoding, or not vLLM). A sample whose value
    /// does not parse is skipped but still marks the metrics as present, as in vLLM.
    pub fn parse(text: &str) -> Option<SpecDecodeCounters> {
        let mut c = SpecDecodeCounters::default();
        let mut found = false;
        for line in text.split('\n') {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || !line.starts_with("vllm:spec_decode") {
                continue;
            }
            let (head, rest) = match line.split_once(char::is_whitespace) {
                Some((h, r)) => (h, r.trim_start()),
                None => (line, line),
            };
            let name = head.split('{').next().unwrap_or(head);
            if !name.ends_with("_total") {
                continue;
            }
            found = true;
            let Some(value) = py_int_of_float(rest) else {
                continue;
            };
            if name.contains("num_drafts") {
                c.num_drafts += value;
            } else if name.contains("num_draft_tokens") {
                c.num_draft_tokens += value;
            } else if name.contains("num_accepted_tokens_per_pos") {
                const LABEL: &str = "position=\"";
                let Some(at) = line.find(LABEL) else { continue };
                let from = at + LABEL.len();
                let Some(len) = line[from..].find('"') else {
                    continue;
                };
                let Ok(pos) = line[from..from + len].trim().parse::<i64>() else {
                    continue;
                };
                *c.accepted_per_pos.entry(pos).or_insert(0) += value;
            } else if name.contains("num_accepted_tokens") {
                c.num_accepted_tokens += value;
            }
        }
        found.then_some(c)
    }
}

/// vLLM's `spec_decode_*` result keys, from the counters before and after the run.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecDecodeStats {
    /// Accepted / drafted tokens, in percent.
    pub acceptance_rate: f64,
    /// `1 + accepted / drafts` (0 without drafts).
    pub acceptance_length: f64,
    pub num_drafts: i64,
    pub draft_tokens: i64,
    pub accepted_tokens: i64,
    /// Accepted tokens at each draft position per draft, by position.
    pub per_position_acceptance_rates: Vec<f64>,
}

impl SpecDecodeStats {
    /// vLLM's rule: the keys exist only when both scrapes found the counters and the run
    /// drafted at least one token.
    pub fn between(
        before: Option<&SpecDecodeCounters>,
        after: Option<&SpecDecodeCounters>,
    ) -> Option<SpecDecodeStats> {
        let (b, a) = (before?, after?);
        let drafts = a.num_drafts - b.num_drafts;
        let draft_tokens = a.num_draft_tokens - b.num_draft_tokens;
        let accepted = a.num_accepted_tokens - b.num_accepted_tokens;
        let mut per_pos = Vec::new();
        if drafts > 0 {
            let positions: std::collections::BTreeSet<i64> = b
                .accepted_per_pos
                .keys()
                .chain(a.accepted_per_pos.keys())
                .copied()
                .collect();
            for pos in positions {
                let before_val = b.accepted_per_pos.get(&pos).copied().unwrap_or(0);
                let after_val = a.accepted_per_pos.get(&pos).copied().unwrap_or(before_val);
                per_pos.push((after_val - before_val) as f64 / drafts as f64);
            }
        }
        if draft_tokens <= 0 {
            return None;
        }
        Some(SpecDecodeStats {
            acceptance_rate: (accepted as f64 / draft_tokens as f64) * 100.0,
            acceptance_length: if drafts > 0 {
                1.0 + accepted as f64 / drafts as f64
            } else {
                0.0
            },
            num_drafts: drafts,
            draft_tokens,
            accepted_tokens: accepted,
            per_position_acceptance_rates: per_pos,
        })
    }
}

/// vLLM's `max_output_tokens_per_s`: the busiest *aligned* one-second bucket.
///
/// Buckets start at the earliest `sent` of the successful requests; every token event
/// (one per token-bearing event, as vLLM counts one per chunk) adds 1 to bucket
/// `floor((t − start) / 1 s)`, for `ceil((max_end − start) / 1 s) + 1` buckets, where
/// `max_end` is the latest request end. 0 when no request succeeded.
///
/// Unlike servebench's sliding-window peak, a burst straddling a bucket boundary is split.
pub fn max_output_tokens_per_s(records: &[RequestRecord]) -> f64 {
    max_output_tokens_per_s_of(records.iter().map(|r| (r, &r.events[..])))
}

/// [`max_output_tokens_per_s`] of records whose token events are given beside them (a view
/// made by [`view_sharing_events`] and its [`view_events`]).
pub fn max_output_tokens_per_s_of<'a, I>(records: I) -> f64
where
    I: Iterator<Item = (&'a RequestRecord, &'a [TokenEvent])> + Clone,
{
    let ok = records.filter(|(r, _)| r.is_success());
    let Some(start) = ok.clone().map(|(r, _)| r.sent).min() else {
        return 0.0;
    };
    let max_end = ok
        .clone()
        .filter_map(|(r, _)| r.end_ns())
        .max()
        .unwrap_or(start)
        .max(start);
    let span = max_end - start;
    let buckets = span.div_ceil(NS_PER_S) + 1;
    let Ok(buckets) = usize::try_from(buckets) else {
        return 0.0;
    };
    let mut counts = vec![0u64; buckets];
    for (_, events) in ok {
        for e in events {
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

    const MS: u64 = 1_000_000;

    /// A chat stream as vLLM's client sees it: the role-only chunk at 10 ms and the closing
    /// chunk at 50 ms are token events; the clock starts at `started` (2 ms), not `sent`.
    /// The view that shares its record's events is the view, once its events are put back;
    /// vLLM's peak throughput and an ITL objective read the same events through it.
    #[test]
    fn a_view_sharing_events_is_the_view() {
        let mut plain = record(0, 5, &[30, 40, 55], 3);
        plain.started = Some(2 * MS);
        let mut chat = record(1, 5, &[30, 40], 2);
        chat.started = Some(2 * MS);
        chat.bare_events = vec![10 * MS, 50 * MS];
        let records = [plain, chat];
        let shared: Vec<RequestRecord> = records.iter().map(view_sharing_events).collect();
        assert!(
            shared[0].events.is_empty(),
            "no copy of a plain record's events"
        );
        for (r, s) in records.iter().zip(&shared) {
            let mut whole = s.clone();
            whole.events = view_events(r, s).to_vec();
            assert_eq!(whole, view(r));
        }
        let views = views(&records);
        assert_eq!(
            max_output_tokens_per_s_of(
                records
                    .iter()
                    .zip(&shared)
                    .map(|(r, s)| (s, view_events(r, s)))
            ),
            max_output_tokens_per_s(&views)
        );
        let itl = crate::Slo::per_request(crate::SloMetric::Itl, 12.0);
        for ((r, s), v) in records.iter().zip(&shared).zip(&views) {
            assert_eq!(
                itl.is_met_by_with_events(s, view_events(r, s)),
                itl.is_met_by(v)
            );
        }
        // 15 ms gaps in the plain record miss a 12 ms ITL objective: the shared view must see them.
        assert!(!itl.is_met_by_with_events(&shared[0], view_events(&records[0], &shared[0])));
    }

    #[test]
    fn view_counts_bare_events_and_starts_the_clock_early() {
        let mut r = record(0, 5, &[30, 40], 2);
        r.started = Some(2 * MS);
        r.bare_events = vec![10 * MS, 50 * MS];
        // servebench's own: TTFT 30 − 5 = 25 ms, one ITL of 10 ms, E2EL 35 ms.
        assert_eq!(r.ttft_ns(), Some(25 * MS));
        assert_eq!(r.itls_ns().collect::<Vec<_>>(), vec![10 * MS]);
        let v = view(&r);
        // vLLM: TTFT = 10 − 2 = 8 ms; ITLs 20, 10, 10 ms; latency 50 − 2 = 48 ms;
        // TPOT = (48 − 8) / (2 − 1) = 40 ms.
        assert_eq!(v.sent, 2 * MS);
        assert_eq!(v.ttft_ns(), Some(8 * MS));
        assert_eq!(
            v.itls_ns().collect::<Vec<_>>(),
            vec![20 * MS, 10 * MS, 10 * MS]
        );
        assert_eq!(v.e2el_ns(), Some(48 * MS));
        assert_eq!(v.tpot_ns(), Some(40.0 * MS as f64));
        // Queue time as vLLM's client_queue_time: started − intended (intended is 5 ms here,
        // later than started, so none).
        assert_eq!(v.queue_ns(), None);
        // The record itself is untouched.
        assert_eq!(r.ttft_ns(), Some(25 * MS));
    }

    #[test]
    fn view_of_an_old_record_is_the_record() {
        let r = record(0, 5, &[30, 40], 2);
        assert_eq!(view(&r), r);
    }

    #[test]
    fn a_stream_of_only_role_and_closing_chunks_succeeds_for_vllm() {
        let mut r = record(0, 0, &[], 0);
        r.failure = Some(Failure {
            kind: FailureKind::EmptyOutput,
            status: None,
            message: "no token".into(),
        });
        r.bare_events = vec![7 * MS, 9 * MS];
        assert!(!r.is_success());
        let v = view(&r);
        assert!(v.is_success());
        assert_eq!(v.ttft_ns(), Some(7 * MS));
        assert_eq!(v.itls_ns().collect::<Vec<_>>(), vec![2 * MS]);
        // Any other failure stays a failure.
        r.failure = Some(Failure {
            kind: FailureKind::Truncated,
            status: None,
            message: "reset".into(),
        });
        assert!(!view(&r).is_success());
    }

    #[test]
    fn bare_events_count_in_vllms_peak_buckets() {
        let mut r = record(0, 0, &[100, 200], 2);
        r.bare_events = vec![50, 300].into_iter().map(|t| t * MS).collect();
        assert_eq!(max_output_tokens_per_s(&[view(&r)]), 4.0);
    }

    /// vLLM's loop: start 1 rps at the run start; rates 1.0, 1.9, 2.5, 4.2 → `int` 1, 1, 2,
    /// 4: 2 at the third request, 3 and 4 at the fourth.
    #[test]
    fn rps_change_events_follow_vllms_integer_steps() {
        let ev = rps_change_events(1, &[(1.0, 0), (1.9, 100), (2.5, 200), (4.2, 300)]);
        let got: Vec<(u64, u64)> = ev.iter().map(|e| (e.rps, e.at_ns)).collect();
        assert_eq!(got, vec![(1, 0), (2, 200), (3, 300), (4, 300)]);
    }

    const METRICS_BEFORE: &str = "\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine=\"0\",model_name=\"m\"} 10.0
vllm:spec_decode_num_draft_tokens_total{engine=\"0\",model_name=\"m\"} 30.0
vllm:spec_decode_num_accepted_tokens_total{engine=\"0\",model_name=\"m\"} 12.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",model_name=\"m\",position=\"0\"} 8.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",model_name=\"m\",position=\"1\"} 4.0
vllm:spec_decode_num_drafts_created 1.7e9
vllm:num_requests_running{model_name=\"m\"} 0.0
";

    #[test]
    fn spec_decode_counters_are_read_as_vllm_reads_them() {
        let c = SpecDecodeCounters::parse(METRICS_BEFORE).unwrap();
        assert_eq!(c.num_drafts, 10);
        assert_eq!(c.num_draft_tokens, 30);
        assert_eq!(c.num_accepted_tokens, 12);
        assert_eq!(c.accepted_per_pos, BTreeMap::from([(0, 8), (1, 4)]));
        // No spec-decode counter at all: None, as vLLM's fetch returns.
        assert_eq!(
            SpecDecodeCounters::parse("vllm:num_requests_running 1\n"),
            None
        );
        // Two engines' samples add up.
        let two = "vllm:spec_decode_num_drafts_total{engine=\"0\"} 2\nvllm:spec_decode_num_drafts_total{engine=\"1\"} 3.9\n";
        assert_eq!(SpecDecodeCounters::parse(two).unwrap().num_drafts, 5);
    }

    /// Deltas: 40 drafts, 120 draft tokens, 60 accepted, positions 0 and 1 accepted 36 and
    /// 24 more. vLLM: rate 60/120·100 = 50 %, length 1 + 60/40 = 2.5, per position 36/40 and
    /// 24/40.
    #[test]
    fn spec_decode_stats_are_vllms_deltas() {
        let before = SpecDecodeCounters::parse(METRICS_BEFORE).unwrap();
        let after = SpecDecodeCounters {
            num_drafts: 50,
            num_draft_tokens: 150,
            num_accepted_tokens: 72,
            accepted_per_pos: BTreeMap::from([(0, 44), (1, 28)]),
        };
        let s = SpecDecodeStats::between(Some(&before), Some(&after)).unwrap();
        assert_eq!(s.num_drafts, 40);
        assert_eq!(s.draft_tokens, 120);
        assert_eq!(s.accepted_tokens, 60);
        assert_eq!(s.acceptance_rate, 50.0);
        assert_eq!(s.acceptance_length, 2.5);
        assert_eq!(s.per_position_acceptance_rates, vec![0.9, 0.6]);
        // Nothing drafted during the run, or a scrape missing: no keys.
        assert_eq!(SpecDecodeStats::between(Some(&before), Some(&before)), None);
        assert_eq!(SpecDecodeStats::between(None, Some(&after)), None);
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
