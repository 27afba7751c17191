//! Preemption / KV exhaustion: the running requests need more KV cache than the server has,
//! so it preempts and re-prefills them.

use std::collections::BTreeSet;

use super::context::Ctx;
use super::finding::{Confidence, Finding, Rule, RuleCheck};
use super::wording::{ms, ratio, tokens};
use crate::explained::format_quantity;
use crate::thresholds::{KV_USAGE_HIGH, REPREFILL_GAP_FRACTION, TTFT_CLIFF_RATIO};

/// Preemption / KV exhaustion. Returns the indices of the rows it fired on, whose tail and
/// throughput the other rules then leave to it.
pub(super) fn kv_exhaustion(ctx: &Ctx<'_>) -> (RuleCheck, Vec<Finding>, BTreeSet<usize>) {
    let mut c = RuleCheck::new(Rule::KvExhaustion);
    let mut findings = Vec::new();
    let mut fired = BTreeSet::new();
    for (i, row) in ctx.rows.iter().enumerate() {
        c.examined.push(row.id.clone());
        let mut evidence = Vec::new();
        let preemptions = row.server.preemptions.filter(|p| *p > 0.0);
        if let Some(p) = preemptions {
            evidence.push(format!(
                "the server counted {} preemptions (vllm:num_preemptions_total){}",
                format_quantity(p, ""),
                if row.runs > 1 {
                    " over the repeats"
                } else {
                    ""
                }
            ));
        }
        if let Some(kv) = row.server.max_kv_usage.filter(|k| *k >= KV_USAGE_HIGH) {
            evidence.push(format!("KV-cache use peaked at {:.0} %", kv * 100.0));
        }
        let caching_on = row.target.prefix_caching != Some(false);
        let shared = if caching_on {
            row.planned.shared_prefix_tokens as f64
        } else {
            0.0
        };
        let per_request = (row.mean_input_tokens + row.mean_output_tokens - shared).max(1.0);
        let running = match row.target.max_num_seqs {
            Some(s) => (row.peak_concurrency as f64).min(s as f64),
            None => row.peak_concurrency as f64,
        };
        let demand = running * per_request + shared;
        let capacity = ctx.kv_capacity(row);
        let over = capacity.is_some_and(|(cap, _)| demand > cap as f64);
        if let Some((cap, source)) = capacity {
            if over {
                evidence.push(format!(
                    "KV demand {} ({} requests × {} of prompt and output{}) exceeds the KV cache of {} ({source}) by {}",
                    tokens(demand),
                    format_quantity(running, ""),
                    tokens(per_request),
                    if shared > 0.0 { format!(", plus {} shared", tokens(shared)) } else { String::new() },
                    tokens(cap as f64),
                    ratio(demand / cap as f64),
                ));
            }
        }
        let uncached = row.mean_input_tokens - row.mean_cached_tokens.unwrap_or(0.0);
        let idle = ctx.idle_prefill_ms(row, uncached);
        let lighter_p50 = ctx
            .rows
            .iter()
            .filter(|o| o.id != row.id && o.same_workload(row) && o.concurrency < row.concurrency)
            .filter_map(|o| o.ttft.p50.map(|p| (o, p)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        let cliff = match (row.ttft.p50, idle, lighter_p50) {
            (Some(p50), Some(idle), _) if p50 >= TTFT_CLIFF_RATIO * idle => {
                evidence.push(format!(
                    "TTFT p50 {} is {} the {} an idle engine needs to prefill {}",
                    ms(p50),
                    ratio(p50 / idle),
                    ms(idle),
                    tokens(uncached)
                ));
                true
            }
            (Some(p50), None, Some((o, lp))) if p50 >= TTFT_CLIFF_RATIO * lp => {
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
        let reprefill = ctx.idle_prefill_ms(row, row.mean_decode_context());
        let gaps = match (row.total_stalls, row.longest_stall_ms) {
            (n, Some(longest))
                if n > 0 && reprefill.is_none_or(|r| longest >= REPREFILL_GAP_FRACTION * r) =>
            {
                evidence.push(format!(
                    "{n} stalls; the longest inter-token gap is {}{}, the signature of a preempted request re-prefilling",
                    ms(longest),
                    reprefill
                        .map(|r| format!(" (re-prefilling {} takes {})", tokens(row.mean_decode_context()), ms(r)))
                        .unwrap_or_default()
                ));
                true
            }
            _ => false,
        };
        let (confidence, reason) = if preemptions.is_some() {
            (Confidence::High, "the server's own preemption counter")
        } else if over && (cliff || gaps) {
            (
                Confidence::High,
                "KV demand over capacity and its symptoms in the latencies agree",
            )
        } else if over {
            (
                Confidence::Medium,
                "KV demand exceeds capacity, but the latencies show no cliff yet",
            )
        } else if cliff && gaps && capacity.is_none() {
            (
                Confidence::Medium,
                "a TTFT cliff and re-prefill gaps, without the KV capacity to check against",
            )
        } else {
            continue;
        };
        fired.insert(i);
        let fit = capacity.map(|(cap, _)| ((cap as f64 - shared).max(0.0) / per_request).floor());
        let next = match fit {
            Some(n) if n >= 1.0 => format!(
                "re-run {} with only the concurrency lowered to {} (--max-concurrency {}, what {} KV tokens hold at {} per request): preemptions and the TTFT cliff should vanish",
                row.id,
                format_quantity(n, ""),
                format_quantity(n, ""),
                format_quantity(capacity.map_or(0.0, |c| c.0 as f64), ""),
                tokens(per_request),
            ),
            _ => format!(
                "re-run {} with only --gpu-memory-utilization raised (or --max-model-len lowered): not one request fits the cache now",
                row.id
            ),
        };
        let gmu = row
            .target
            .gpu_memory_utilization
            .map(|g| format!(" (now {g})"))
            .unwrap_or_default();
        findings.push(Finding {
            rule: Rule::KvExhaustion,
            regime: "KV-cache exhaustion and preemption".into(),
            rows: vec![row.id.clone()],
            summary: format!(
                "{}: the running requests need more KV cache than the server has, so it preempts and re-prefills them; TTFT and stalls pay for it",
                row.label
            ),
            evidence,
            confidence,
            confidence_reason: reason.into(),
            confirm_with: "vllm:num_preemptions_total rising and vllm:kv_cache_usage_perc near 1.0 during the run; the server log's \"GPU KV cache size\" against the demand".into(),
            first_response: format!(
                "give the KV cache room or ask less of it: raise --gpu-memory-utilization{gmu}, cap --max-num-seqs{}, use an FP8 KV cache, or add GPUs (tensor parallelism)",
                fit.filter(|n| *n >= 1.0).map(|n| format!(" at {}", format_quantity(n, ""))).unwrap_or_default()
            ),
            next_experiment: next,
        });
    }
    if ctx.rows.is_empty() {
        c.note = Some("no group completed a request".into());
    }
    (c, findings, fired)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::testing::{batched, fired, row, run, stat};
    use super::*;

    #[test]
    fn the_servers_preemption_counter_is_direct_evidence() {
        let mut a = row("A");
        a.server.preemptions = Some(5.0);
        let (c, f, rows) = run(&[a], None, kv_exhaustion);
        assert_eq!(fired(&f), vec![vec!["A".to_string()]]);
        assert_eq!(f[0].confidence, Confidence::High);
        assert!(
            f[0].evidence[0].contains("5 preemptions"),
            "{:?}",
            f[0].evidence
        );
        assert_eq!(rows.into_iter().collect::<Vec<_>>(), vec![0]);
        assert_eq!(c.examined, vec!["A".to_string()]);
    }

    #[test]
    fn a_healthy_row_stays_silent() {
        let (c, f, rows) = run(&[row("A")], None, kv_exhaustion);
        assert!(f.is_empty() && rows.is_empty());
        assert_eq!(c.note, None);
        let (c, _, _) = run(&[], None, kv_exhaustion);
        assert_eq!(c.note.as_deref(), Some("no group completed a request"));
    }

    #[test]
    fn kv_demand_fires_only_above_the_capacity() {
        // Two running requests of 256 + 128 tokens need 768 KV tokens.
        let at = |capacity: u64| {
            let mut d = batched("D", 2.0);
            d.target.kv_cache_tokens = Some(capacity);
            run(&[d], None, kv_exhaustion).1
        };
        assert!(at(768).is_empty());
        let f = at(767);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].confidence, Confidence::Medium);
        assert!(
            f[0].evidence[0].starts_with("KV demand 768 tokens"),
            "{:?}",
            f[0].evidence
        );
        assert!(
            f[0].next_experiment.contains("--max-concurrency 1"),
            "{}",
            f[0].next_experiment
        );
    }

    #[test]
    fn a_ttft_cliff_with_re_prefill_gaps_fires_without_a_capacity() {
        let light = row("A");
        let heavy = |p50: f64| {
            let mut h = batched("D", 8.0);
            h.ttft = stat(p50, p50 * 2.0, 100);
            h.total_stalls = 3;
            h.longest_stall_ms = Some(500.0);
            h
        };
        // The light row's TTFT p50 is 20 ms: the cliff starts at TTFT_CLIFF_RATIO times it.
        let cliff = TTFT_CLIFF_RATIO * 20.0;
        let (_, f, _) = run(&[light.clone(), heavy(cliff)], None, kv_exhaustion);
        assert_eq!(fired(&f), vec![vec!["D".to_string()]]);
        assert_eq!(f[0].confidence, Confidence::Medium);
        let (_, f, _) = run(&[light, heavy(cliff - 0.1)], None, kv_exhaustion);
        assert!(f.is_empty());
    }

    #[test]
    fn high_kv_use_alone_is_evidence_but_no_finding() {
        let mut a = row("A");
        a.server.max_kv_usage = Some(KV_USAGE_HIGH);
        assert!(run(&[a], None, kv_exhaustion).1.is_empty());
    }
}
