//! Prefix-cache miss: a shared prefix that is recomputed instead of read from the cache.

use super::context::Ctx;
use super::finding::{Confidence, Finding, Rule, RuleCheck};
use super::wording::{ms, tokens};
use crate::explained::format_quantity;
use crate::thresholds::{
    DEFAULT_BLOCK_SIZE, PREFIX_HIT_FRACTION, PREFIX_MIN_REQUESTS, PREFIX_SAME_TTFT,
};

/// Groups with a shared prefix that did not get it from the cache.
pub(super) fn prefix_cache_miss(ctx: &Ctx<'_>) -> (RuleCheck, Vec<Finding>) {
    let mut c = RuleCheck::new(Rule::PrefixCacheMiss);
    let mut findings = Vec::new();
    for row in ctx.rows {
        let block = row.target.block_size.unwrap_or(DEFAULT_BLOCK_SIZE).max(1);
        let shared = row.planned.shared_prefix_tokens;
        if shared < block || row.completed < PREFIX_MIN_REQUESTS {
            continue;
        }
        c.examined.push(row.id.clone());
        let cacheable = (shared / block * block) as f64;
        // The first request of each run finds the cache cold.
        let expected = cacheable * (row.completed as f64 - row.runs as f64) / row.completed as f64;
        let cold_twin = ctx
            .rows
            .iter()
            .filter(|o| o.id != row.id && o.planned.shared_prefix_tokens == 0)
            .filter(|o| o.same_workload(row) && o.ttft.p50.is_some())
            .min_by(|a, b| {
                (a.concurrency - row.concurrency)
                    .abs()
                    .total_cmp(&(b.concurrency - row.concurrency).abs())
            });
        let ttft_same = match (row.ttft.p50, cold_twin.and_then(|t| t.ttft.p50)) {
            (Some(w), Some(k)) => Some((w, k, w >= PREFIX_SAME_TTFT * k)),
            _ => None,
        };
        let mut evidence = vec![format!(
            "the workload shares a {} prefix across requests ({} of it cacheable in {}-token blocks)",
            tokens(shared as f64),
            tokens(cacheable),
            block
        )];
        let (confidence, reason) = match row.mean_cached_tokens {
            Some(cached) if cached < PREFIX_HIT_FRACTION * expected => {
                if let (Some(h), Some(q)) = (
                    row.server.prefix_cache_hits,
                    row.server.prefix_cache_queries,
                ) {
                    evidence.push(format!(
                        "the server's prefix cache hit {} of {} queried tokens ({:.1} %)",
                        format_quantity(h, ""),
                        format_quantity(q, ""),
                        if q > 0.0 { h / q * 100.0 } else { 0.0 }
                    ));
                }
                evidence.push(format!(
                    "the server reported {} cached per request on average, against ≈{} expected ({:.0} % of it)",
                    tokens(cached),
                    tokens(expected),
                    if expected > 0.0 { cached / expected * 100.0 } else { 0.0 }
                ));
                (
                    Confidence::High,
                    "the server's own cached_tokens counts".to_string(),
                )
            }
            Some(_) => continue,
            None => match ttft_same {
                Some((_, _, true)) => (
                    Confidence::Medium,
                    "the server does not report cached_tokens; only TTFT speaks".to_string(),
                ),
                _ => {
                    c.note = Some(format!(
                        "{}: the server reports no cached_tokens and there is no cold row to compare TTFT with",
                        row.id
                    ));
                    continue;
                }
            },
        };
        if let (Some((w, k, _)), Some(twin)) = (ttft_same, cold_twin) {
            evidence.push(format!(
                "TTFT p50 {} warm against {} for the cold {} ({:.0} %)",
                ms(w),
                ms(k),
                twin.label,
                w / k * 100.0
            ));
        }
        let off = row.target.prefix_caching == Some(false);
        if off {
            evidence.push("the server runs with prefix caching off".into());
        }
        findings.push(Finding {
            rule: Rule::PrefixCacheMiss,
            regime: if off {
                "prefix caching disabled".into()
            } else {
                "prefix-cache miss or eviction".into()
            },
            rows: vec![row.id.clone()],
            summary: format!(
                "{}: the shared prefix is recomputed instead of read from the cache, so the warm row gains nothing over a cold one",
                row.label
            ),
            evidence,
            confidence,
            confidence_reason: reason,
            confirm_with: "usage.prompt_tokens_details.cached_tokens per request, and vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total over the run".into(),
            first_response: if off {
                "enable prefix caching on the server (--enable-prefix-caching)".into()
            } else {
                "keep the shared prefix byte-identical and first in the prompt, give the KV cache room to keep it (it is evicted LRU), route requests that share a prefix to one replica".into()
            },
            next_experiment: if off {
                format!(
                    "restart the server with --enable-prefix-caching and re-run {} unchanged: cached_tokens should reach ≈{} per request",
                    row.id,
                    tokens(cacheable)
                )
            } else {
                format!(
                    "re-run {} with only --max-concurrency 1: cached tokens that appear alone but vanish under load mean eviction; none at all means the prefix differs between requests",
                    row.id
                )
            },
        });
    }
    if c.examined.is_empty() {
        c.note = Some("no group shares a prefix across requests".into());
    }
    (c, findings)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::testing::{fired, row, run, stat};
    use super::*;
    use crate::figures::RowFigures;

    /// A warm row sharing a 128-token prefix over 100 requests in one run: 99 of them should
    /// find all 128 tokens cached.
    fn warm(cached: Option<f64>) -> RowFigures {
        let mut w = row("E");
        w.planned.shared_prefix_tokens = 128;
        w.mean_cached_tokens = cached;
        w
    }

    const EXPECTED: f64 = 128.0 * 99.0 / 100.0;

    #[test]
    fn too_few_cached_tokens_fire_with_high_confidence() {
        let (c, f) = run(&[warm(Some(10.0))], None, prefix_cache_miss);
        assert_eq!(fired(&f), vec![vec!["E".to_string()]]);
        assert_eq!(f[0].confidence, Confidence::High);
        assert_eq!(f[0].regime, "prefix-cache miss or eviction");
        assert_eq!(c.examined, vec!["E".to_string()]);
    }

    #[test]
    fn the_hit_fraction_is_the_boundary() {
        let at = |cached: f64| run(&[warm(Some(cached))], None, prefix_cache_miss).1;
        assert!(at(PREFIX_HIT_FRACTION * EXPECTED).is_empty());
        assert_eq!(at(PREFIX_HIT_FRACTION * EXPECTED - 0.01).len(), 1);
        assert!(at(EXPECTED).is_empty());
    }

    #[test]
    fn caching_off_is_named() {
        let mut w = warm(Some(0.0));
        w.target.prefix_caching = Some(false);
        let (_, f) = run(&[w], None, prefix_cache_miss);
        assert_eq!(f[0].regime, "prefix caching disabled");
        assert!(f[0].first_response.contains("--enable-prefix-caching"));
    }

    #[test]
    fn without_cached_counts_a_cold_twin_with_the_same_ttft_speaks() {
        let cold = row("B");
        let at = |warm_p50: f64| {
            let mut w = warm(None);
            w.ttft = stat(warm_p50, warm_p50, 100);
            run(&[w, cold.clone()], None, prefix_cache_miss)
        };
        // The cold row's TTFT p50 is 20 ms.
        let (_, f) = at(PREFIX_SAME_TTFT * 20.0);
        assert_eq!(f[0].confidence, Confidence::Medium);
        let (c, f) = at(PREFIX_SAME_TTFT * 20.0 - 0.1);
        assert!(f.is_empty());
        assert!(c.note.unwrap().contains("no cold row"));
    }

    #[test]
    fn rows_without_a_shared_prefix_are_not_examined() {
        let (c, f) = run(&[row("A")], None, prefix_cache_miss);
        assert!(f.is_empty());
        assert_eq!(
            c.note.as_deref(),
            Some("no group shares a prefix across requests")
        );
        let mut short = warm(Some(0.0));
        short.planned.shared_prefix_tokens = DEFAULT_BLOCK_SIZE - 1;
        assert!(run(&[short], None, prefix_cache_miss).1.is_empty());
    }
}
