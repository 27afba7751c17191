//! Server queueing: the median request itself waits far longer than prefill needs, with the
//! KV cache not to blame.

use std::collections::BTreeSet;

use servebench_metrics::RequestRecord;

use super::context::Ctx;
use super::finding::{Confidence, Finding, Rule, RuleCheck};
use super::wording::{halved_load, ms, ratio, tokens};
use crate::explained::format_quantity;
use crate::thresholds::{
    QUEUEING_WELL_SAMPLED, SEQ_LIMIT_MARGIN, TTFT_CLIFF_RATIO, TTFT_GROWTH_MIN_MS,
    TTFT_GROWTH_MIN_SAMPLES, TTFT_GROWTH_PARTS, TTFT_GROWTH_RATIO, WAITING_MIN_REQUESTS,
};

/// TTFT p50 itself far above what prefill needs, with the KV cache not to blame: requests
/// wait in the server's queue because it runs as many as it will (saturation, `max_num_seqs`).
pub(super) fn server_queueing(
    ctx: &Ctx<'_>,
    kv_rows: &BTreeSet<usize>,
) -> (RuleCheck, Vec<Finding>, BTreeSet<usize>) {
    let mut c = RuleCheck::new(Rule::ServerQueueing);
    let mut findings = Vec::new();
    let mut fired = BTreeSet::new();
    for (i, row) in ctx.rows.iter().enumerate() {
        let Some(p50) = row.ttft.p50 else {
            continue;
        };
        c.examined.push(row.id.clone());
        if kv_rows.contains(&i) {
            continue;
        }
        let uncached = row.mean_input_tokens - row.mean_cached_tokens.unwrap_or(0.0);
        let lighter = ctx
            .rows
            .iter()
            .filter(|o| o.id != row.id && o.same_workload(row) && o.concurrency < row.concurrency)
            .filter_map(|o| o.ttft.p50.map(|p| (o, p)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        let seqs = row.target.max_num_seqs;
        let capped = seqs.filter(|s| row.concurrency > *s as f64 * SEQ_LIMIT_MARGIN);
        let mut evidence = Vec::new();
        let cliff = match (ctx.idle_prefill_ms(row, uncached), lighter) {
            (Some(idle), _) if p50 >= TTFT_CLIFF_RATIO * idle => {
                evidence.push(format!(
                    "TTFT p50 {} is {} the {} an idle engine needs to prefill {}",
                    ms(p50),
                    ratio(p50 / idle),
                    ms(idle),
                    tokens(uncached)
                ));
                true
            }
            (None, Some((o, lp))) if p50 >= TTFT_CLIFF_RATIO * lp => {
                evidence.push(format!(
                    "TTFT p50 {} is {} that of {} ({}) with the same workload at lower concurrency",
                    ms(p50),
                    ratio(p50 / lp),
                    o.label,
                    ms(lp)
                ));
                true
            }
            _ => false,
        };
        // Three ways to tell queueing from the brief wait of a batch of prefills: more
        // requests than the server runs at once; an open loop the server fell behind; or a
        // median beyond what prefilling every request in flight at once would take.
        let fell_behind = ctx.records[i]
            .first()
            .and_then(|recs| growing_ttft(recs))
            .filter(|_| row.planned.request_rate.is_some_and(f64::is_finite));
        let all_at_once = ctx.idle_prefill_ms(row, uncached * row.concurrency.max(1.0));
        let beyond_batch = all_at_once.filter(|t| p50 >= TTFT_CLIFF_RATIO * t);
        if let Some((early, late)) = fell_behind {
            evidence.push(format!(
                "TTFT p50 grew from {} for the first quarter of arrivals to {} for the last: the server fell behind the offered {} req/s and its queue grew all run (it served {} req/s)",
                ms(early),
                ms(late),
                format_quantity(row.planned.request_rate.unwrap_or(0.0), ""),
                format_quantity(row.request_throughput, "")
            ));
        }
        if let Some(t) = beyond_batch {
            evidence.push(format!(
                "prefilling all {} requests in flight at once would take {}",
                format_quantity(row.concurrency.round(), ""),
                ms(t)
            ));
        }
        if !(cliff && capped.is_some()) && fell_behind.is_none() && beyond_batch.is_none() {
            continue;
        }
        fired.insert(i);
        evidence.push(format!(
            "{} requests in flight on average{}",
            format_quantity(row.concurrency, ""),
            match (seqs, capped) {
                (Some(s), Some(_)) => format!(
                    ", but the server runs at most {s} at once (max_num_seqs): the rest wait"
                ),
                (Some(s), None) => format!(" (max_num_seqs {s})"),
                (None, _) => String::new(),
            }
        ));
        if let Some(t) = row.tpot.mean {
            evidence.push(format!(
                "mean TPOT stays {}: the requests that run are served normally; the time is lost before they start",
                ms(t)
            ));
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
        let load = halved_load(row);
        findings.push(Finding {
            rule: Rule::ServerQueueing,
            regime: match capped {
                Some(_) => "queueing behind the server's sequence limit".into(),
                None => "queueing in a saturated server".into(),
            },
            rows: vec![row.id.clone()],
            summary: format!(
                "{}: even the median request waits {} for its first token; the server is past saturation for this load",
                row.label,
                ms(p50)
            ),
            evidence,
            confidence: if row.ttft.n >= QUEUEING_WELL_SAMPLED {
                Confidence::High
            } else {
                Confidence::Medium
            },
            confidence_reason: "the median itself, not a tail, is far above the prefill time".into(),
            confirm_with: "vllm:num_requests_waiting staying high and vllm:request_queue_time_seconds carrying most of TTFT".into(),
            first_response: match (capped, seqs) {
                (Some(_), Some(s)) => format!(
                    "raise --max-num-seqs (now {s}) if the KV cache holds the extra sequences, or cap the offered load at what {s} sequences serve"
                ),
                _ => "keep the offered load below saturation (admission control) or add replicas".into(),
            },
            next_experiment: match (capped, seqs) {
                (Some(_), Some(s)) => format!(
                    "re-run {} with only --max-num-seqs raised from {s} to {}: TTFT p50 should fall towards the prefill time",
                    row.id,
                    format_quantity(row.concurrency.ceil(), "")
                ),
                _ => format!(
                    "re-run {} with only {load}: TTFT p50 should fall back towards the prefill time",
                    row.id
                ),
            },
        });
    }
    (c, findings, fired)
}

/// Median TTFT (ms) of the first and the last quarter of arrivals, when the last is at least
/// [`TTFT_GROWTH_RATIO`] times the first and [`TTFT_GROWTH_MIN_MS`] above it: a queue that
/// grows for the whole run.
fn growing_ttft(records: &[RequestRecord]) -> Option<(f64, f64)> {
    let mut ok: Vec<(u64, f64)> = records
        .iter()
        .filter(|r| r.is_success())
        .filter_map(|r| r.ttft_ns().map(|t| (r.intended, t as f64 / 1e6)))
        .collect();
    if ok.len() < TTFT_GROWTH_MIN_SAMPLES {
        return None;
    }
    ok.sort_by_key(|(intended, _)| *intended);
    let q = ok.len() / TTFT_GROWTH_PARTS;
    let median = |part: &[(u64, f64)]| {
        let v: Vec<f64> = part.iter().map(|(_, t)| *t).collect();
        servebench_metrics::stats::median(&v)
    };
    let early = median(&ok[..q])?;
    let late = median(&ok[ok.len() - q..])?;
    (late >= TTFT_GROWTH_RATIO * early && late - early >= TTFT_GROWTH_MIN_MS)
        .then_some((early, late))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::testing::{batched, fired, record, row, run, stat};
    use super::*;

    /// A light row (TTFT p50 20 ms) and the same workload at `concurrency` on a server that
    /// runs at most 4 sequences, with a TTFT p50 of 200 ms (the cliff).
    fn capped_at(concurrency: f64) -> Vec<crate::figures::RowFigures> {
        let mut heavy = batched("D", concurrency);
        heavy.ttft = stat(TTFT_CLIFF_RATIO * 20.0, 400.0, 100);
        heavy.target.max_num_seqs = Some(4);
        vec![row("A"), heavy]
    }

    #[test]
    fn a_cliff_behind_the_sequence_limit_fires() {
        let rows = capped_at(8.0);
        let (c, f, fired_rows) = run(&rows, None, |ctx| server_queueing(ctx, &BTreeSet::new()));
        assert_eq!(fired(&f), vec![vec!["D".to_string()]]);
        assert_eq!(f[0].regime, "queueing behind the server's sequence limit");
        assert_eq!(f[0].confidence, Confidence::High);
        assert!(f[0]
            .next_experiment
            .contains("--max-num-seqs raised from 4 to 8"));
        assert_eq!(fired_rows.into_iter().collect::<Vec<_>>(), vec![1]);
        assert_eq!(c.examined, vec!["A".to_string(), "D".to_string()]);
    }

    #[test]
    fn concurrency_within_the_margin_of_the_limit_is_not_capped() {
        let at = |concurrency: f64| {
            let rows = capped_at(concurrency);
            run(&rows, None, |ctx| server_queueing(ctx, &BTreeSet::new())).1
        };
        assert!(at(4.0 * SEQ_LIMIT_MARGIN).is_empty());
        assert_eq!(at(4.0 * SEQ_LIMIT_MARGIN + 0.01).len(), 1);
    }

    #[test]
    fn healthy_rows_and_rows_left_to_kv_exhaustion_stay_silent() {
        assert!(run(&[row("A")], None, |ctx| server_queueing(
            ctx,
            &BTreeSet::new()
        ))
        .1
        .is_empty());
        let rows = capped_at(8.0);
        let kv = BTreeSet::from([1]);
        assert!(run(&rows, None, |ctx| server_queueing(ctx, &kv))
            .1
            .is_empty());
    }

    fn arrivals(early_ms: u64, late_ms: u64, n: u64) -> Vec<RequestRecord> {
        (0..n)
            .map(|i| {
                let ttft = if i < n / 2 { early_ms } else { late_ms };
                record(i, i * 100, ttft)
            })
            .collect()
    }

    #[test]
    fn growing_ttft_compares_the_first_and_last_quarter() {
        let n = TTFT_GROWTH_MIN_SAMPLES as u64;
        assert_eq!(growing_ttft(&arrivals(50, 200, n)), Some((50.0, 200.0)));
        // Exactly TTFT_GROWTH_RATIO times and TTFT_GROWTH_MIN_MS above: still growing.
        assert_eq!(growing_ttft(&arrivals(50, 150, n)), Some((50.0, 150.0)));
        assert_eq!(growing_ttft(&arrivals(50, 149, n)), None);
        assert_eq!(
            growing_ttft(&arrivals(10, 90, n)),
            None,
            "9× but only 80 ms"
        );
        assert_eq!(growing_ttft(&arrivals(50, 200, n - 1)), None, "too few");
    }

    #[test]
    fn an_open_loop_that_fell_behind_fires_from_its_records() {
        let mut d = batched("D", 3.0);
        d.planned.request_rate = Some(10.0);
        let recs = arrivals(50, 400, 40);
        let rows = [d];
        let records = vec![vec![recs.as_slice()]];
        let ctx = Ctx {
            rows: &rows,
            records: &records,
            deployment: None,
        };
        let (_, f, _) = server_queueing(&ctx, &BTreeSet::new());
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].regime, "queueing in a saturated server");
        assert!(
            f[0].evidence[0].contains("fell behind the offered 10 req/s"),
            "{:?}",
            f[0].evidence
        );
    }
}
