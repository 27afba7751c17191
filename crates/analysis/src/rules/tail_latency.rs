//! Tail latency: p99 TTFT far above a healthy p50.

use std::collections::BTreeSet;

use servebench_metrics::RequestRecord;

use super::context::Ctx;
use super::finding::{Confidence, Finding, Rule, RuleCheck};
use super::wording::{halved_load, ms, ratio};
use crate::explained::format_quantity;
use crate::thresholds::{
    BURST_MIN_SAMPLES, BURST_SHARE, BURST_SLOWEST_DIVISOR, BURST_WINDOW_DIVISOR,
    CLIENT_QUEUE_MIN_MS, TAIL_HIGH_RATIO, TAIL_HIGH_SAMPLES, TAIL_MEDIUM_SAMPLES,
    TAIL_MIN_DELTA_MS, TAIL_MIN_SAMPLES, TAIL_RATIO, WAITING_MIN_REQUESTS,
};

/// p99 TTFT far above a healthy p50.
pub(super) fn tail_latency(ctx: &Ctx<'_>, kv_rows: &BTreeSet<usize>) -> (RuleCheck, Vec<Finding>) {
    let mut c = RuleCheck::new(Rule::TailLatency);
    let mut findings = Vec::new();
    for (i, row) in ctx.rows.iter().enumerate() {
        let (Some(p50), Some(p99)) = (row.ttft.p50, row.ttft.p99) else {
            continue;
        };
        if row.ttft.n < TAIL_MIN_SAMPLES {
            continue;
        }
        c.examined.push(row.id.clone());
        if kv_rows.contains(&i) || p99 < TAIL_RATIO * p50 || p99 - p50 < TAIL_MIN_DELTA_MS {
            continue;
        }
        let mut evidence = vec![format!(
            "TTFT p99 {} against p50 {} ({}), over {} requests",
            ms(p99),
            ms(p50),
            ratio(p99 / p50),
            row.ttft.n
        )];
        if let Some(idle) = ctx.idle_prefill_ms(
            row,
            row.mean_input_tokens - row.mean_cached_tokens.unwrap_or(0.0),
        ) {
            evidence.push(format!(
                "an idle engine prefills the mean prompt in {}: the p99 request waited ≈{} for others",
                ms(idle),
                ms((p99 - idle).max(0.0))
            ));
        }
        if let (Some(i50), Some(i99)) = (row.itl.p50, row.itl.p99) {
            if i99 >= TAIL_RATIO * i50 {
                evidence.push(format!(
                    "ITL p99 {} against p50 {}: prefill chunks share steps with decodes (interference)",
                    ms(i99),
                    ms(i50)
                ));
            }
        }
        if let Some(w) = row
            .server
            .max_waiting
            .filter(|w| *w >= WAITING_MIN_REQUESTS)
        {
            evidence.push(format!(
                "the server's waiting queue reached {} requests",
                format_quantity(w, "")
            ));
        }
        if let Some(q99) = row.queue.p99.filter(|q| *q >= CLIENT_QUEUE_MIN_MS) {
            evidence.push(format!(
                "client-side queue p99 {} on top (requests waiting for a concurrency slot)",
                ms(q99)
            ));
        }
        let burst = ctx.records[i].first().and_then(|recs| startup_burst(recs));
        if let Some((share, n)) = burst {
            evidence.push(format!(
                "{:.0} % of the {n} slowest requests (top 5 % TTFT) arrived in the first tenth of the run: a start-up burst, as when every closed-loop user starts at once",
                share * 100.0
            ));
        }
        let confidence = if row.ttft.n >= TAIL_HIGH_SAMPLES && p99 >= TAIL_HIGH_RATIO * p50 {
            Confidence::High
        } else if row.ttft.n >= TAIL_MEDIUM_SAMPLES {
            Confidence::Medium
        } else {
            Confidence::Low
        };
        let load = halved_load(row);
        findings.push(Finding {
            rule: Rule::TailLatency,
            regime: "queueing or interference".into(),
            rows: vec![row.id.clone()],
            summary: format!(
                "{}: most requests start fast, but the slowest 1 % wait {} for a first token",
                row.label,
                ratio(p99 / p50)
            ),
            evidence,
            confidence,
            confidence_reason: match confidence {
                Confidence::High => "a wide, well-sampled gap between p50 and p99".into(),
                Confidence::Medium => "a clear gap, but p99 rests on few samples".into(),
                Confidence::Low => "p99 rests on fewer than 50 samples".into(),
            },
            confirm_with: "the server's waiting queue (vllm:num_requests_waiting) and queue-time histogram during the run, and the arrival times of the slowest requests".into(),
            first_response: "keep the load below the knee (admission control, more replicas); bound prefill interference with a smaller --max-num-batched-tokens; smooth bursts".into(),
            next_experiment: if burst.is_some() {
                format!(
                    "re-run {} with only --num-prompts ×4: a start-up burst weighs less in p99 of a longer run, steady-state queueing does not",
                    row.id
                )
            } else {
                format!(
                    "re-run {} with only {load}: queueing makes p99 TTFT fall sharply while p50 barely moves",
                    row.id
                )
            },
        });
    }
    (c, findings)
}

/// Share of the slowest 5 % of requests (by TTFT) that arrived in the first tenth of the run,
/// when it is at least half: `(share, how many slow requests)`.
fn startup_burst(records: &[RequestRecord]) -> Option<(f64, usize)> {
    let mut ok: Vec<(&RequestRecord, u64)> = records
        .iter()
        .filter(|r| r.is_success())
        .filter_map(|r| r.ttft_ns().map(|t| (r, t)))
        .collect();
    if ok.len() < BURST_MIN_SAMPLES {
        return None;
    }
    let start = ok.iter().map(|(r, _)| r.intended).min()?;
    let end = ok.iter().map(|(r, _)| r.intended).max()?;
    if end <= start {
        // Everything arrived at once: the burst is the whole run, not its start.
        return None;
    }
    let cut = start + (end - start) / BURST_WINDOW_DIVISOR;
    ok.sort_by_key(|(_, t)| std::cmp::Reverse(*t));
    let n = (ok.len() / BURST_SLOWEST_DIVISOR).max(1);
    let early = ok[..n].iter().filter(|(r, _)| r.intended <= cut).count();
    let share = early as f64 / n as f64;
    (share >= BURST_SHARE).then_some((share, n))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::testing::{batched, fired, record, row, run, stat};
    use super::*;
    use crate::figures::RowFigures;

    fn tail(p50: f64, p99: f64, n: u64) -> RowFigures {
        let mut r = batched("D", 4.0);
        r.ttft = stat(p50, p99, n);
        r
    }

    fn findings(r: RowFigures, kv: &BTreeSet<usize>) -> Vec<Finding> {
        run(&[r], None, |ctx| tail_latency(ctx, kv)).1
    }

    #[test]
    fn a_p99_far_above_a_healthy_p50_fires() {
        let f = findings(tail(20.0, 200.0, 100), &BTreeSet::new());
        assert_eq!(fired(&f), vec![vec!["D".to_string()]]);
        assert_eq!(f[0].confidence, Confidence::Medium);
        assert!(f[0].next_experiment.contains("the offered load halved"));
        let f = findings(tail(20.0, 200.0, TAIL_HIGH_SAMPLES), &BTreeSet::new());
        assert_eq!(f[0].confidence, Confidence::High);
        let f = findings(tail(20.0, 200.0, TAIL_MEDIUM_SAMPLES - 1), &BTreeSet::new());
        assert_eq!(f[0].confidence, Confidence::Low);
    }

    #[test]
    fn ratio_delta_and_samples_are_boundaries() {
        let none = BTreeSet::new();
        // p50 30 ms: TAIL_RATIO × is 90 ms, 60 ms above (over TAIL_MIN_DELTA_MS).
        assert_eq!(findings(tail(30.0, 90.0, 100), &none).len(), 1);
        assert!(findings(tail(30.0, 89.9, 100), &none).is_empty());
        // p50 10 ms: 3× is only 20 ms above; the delta needs TAIL_MIN_DELTA_MS.
        assert!(findings(tail(10.0, 10.0 + TAIL_MIN_DELTA_MS - 0.1, 100), &none).is_empty());
        assert_eq!(
            findings(tail(10.0, 10.0 + TAIL_MIN_DELTA_MS, 100), &none).len(),
            1
        );
        assert!(findings(tail(20.0, 200.0, TAIL_MIN_SAMPLES - 1), &none).is_empty());
    }

    #[test]
    fn healthy_rows_and_rows_with_an_unhealthy_p50_stay_silent() {
        assert!(findings(row("A"), &BTreeSet::new()).is_empty());
        assert!(findings(tail(20.0, 200.0, 100), &BTreeSet::from([0])).is_empty());
    }

    #[test]
    fn a_start_up_burst_is_told_from_steady_queueing() {
        let n = 2 * BURST_MIN_SAMPLES as u64;
        // The two slowest (top 5 % of 40) arrive first, at 0 and 100 ms of 3.9 s.
        let burst: Vec<RequestRecord> = (0..n)
            .map(|i| record(i, i * 100, if i < 2 { 900 } else { 20 }))
            .collect();
        assert_eq!(startup_burst(&burst), Some((1.0, 2)));
        let late: Vec<RequestRecord> = (0..n)
            .map(|i| record(i, i * 100, if i >= n - 2 { 900 } else { 20 }))
            .collect();
        assert_eq!(startup_burst(&late), None);
        assert_eq!(startup_burst(&burst[..BURST_MIN_SAMPLES - 1]), None);
        let at_once: Vec<RequestRecord> = (0..n).map(|i| record(i, 0, 20 + i)).collect();
        assert_eq!(startup_burst(&at_once), None);
    }
}
