//! Batching trade-off: the same workload at higher concurrency buys throughput with per-user
//! TPOT.

use std::collections::BTreeSet;

use super::context::Ctx;
use super::finding::{Confidence, Finding, Rule, RuleCheck};
use super::wording::{ms, ratio, tok_s};
use crate::explained::format_quantity;
use crate::figures::RowFigures;
use crate::thresholds::{
    TRADEOFF_CONCURRENCY_RATIO, TRADEOFF_MIN_BASE_CONCURRENCY, TRADEOFF_THROUGHPUT_RATIO,
    TRADEOFF_TPOT_RATIO, TRADEOFF_WELL_SAMPLED,
};

/// Same workload at higher concurrency: more throughput, worse TPOT.
pub(super) fn batching_trade_off(ctx: &Ctx<'_>) -> (RuleCheck, Vec<Finding>) {
    let mut c = RuleCheck::new(Rule::BatchingTradeOff);
    let mut findings = Vec::new();
    let mut used = BTreeSet::new();
    for (bi, base) in ctx.rows.iter().enumerate() {
        if used.contains(&bi) || base.tpot.mean.is_none() {
            continue;
        }
        // The lightest group of this workload is the baseline; others are compared with it.
        let class: Vec<usize> = (0..ctx.rows.len())
            .filter(|&j| ctx.rows[j].same_workload(base) && ctx.rows[j].tpot.mean.is_some())
            .collect();
        used.extend(class.iter().copied());
        let Some(&lightest) = class
            .iter()
            .min_by(|&&a, &&b| ctx.rows[a].concurrency.total_cmp(&ctx.rows[b].concurrency))
        else {
            continue;
        };
        if class.len() < 2 {
            continue;
        }
        let base = &ctx.rows[lightest];
        c.examined
            .extend(class.iter().map(|&j| ctx.rows[j].id.clone()));
        let (Some(base_tpot), true) = (base.tpot.mean, base.output_throughput > 0.0) else {
            continue;
        };
        let mut heavier: Vec<&RowFigures> = class
            .iter()
            .map(|&j| &ctx.rows[j])
            .filter(|r| {
                r.concurrency
                    >= TRADEOFF_CONCURRENCY_RATIO
                        * base.concurrency.max(TRADEOFF_MIN_BASE_CONCURRENCY)
            })
            .filter(|r| r.output_throughput >= TRADEOFF_THROUGHPUT_RATIO * base.output_throughput)
            .filter(|r| {
                r.tpot
                    .mean
                    .is_some_and(|t| t >= TRADEOFF_TPOT_RATIO * base_tpot)
            })
            .collect();
        if heavier.is_empty() {
            continue;
        }
        heavier.sort_by(|a, b| a.concurrency.total_cmp(&b.concurrency));
        let evidence: Vec<String> = heavier
            .iter()
            .map(|r| {
                let t = r.tpot.mean.unwrap_or(base_tpot);
                format!(
                    "{} → {}: concurrency {} → {}, output throughput {} → {} ({}), mean TPOT {} → {} ({})",
                    base.label,
                    r.label,
                    format_quantity(base.concurrency, ""),
                    format_quantity(r.concurrency, ""),
                    tok_s(base.output_throughput),
                    tok_s(r.output_throughput),
                    ratio(r.output_throughput / base.output_throughput),
                    ms(base_tpot),
                    ms(t),
                    ratio(t / base_tpot),
                )
            })
            .collect();
        let top = heavier[heavier.len() - 1];
        let sampled = base.tpot.n >= TRADEOFF_WELL_SAMPLED && top.tpot.n >= TRADEOFF_WELL_SAMPLED;
        let mut rows = vec![base.id.clone()];
        rows.extend(heavier.iter().map(|r| r.id.clone()));
        findings.push(Finding {
            rule: Rule::BatchingTradeOff,
            regime: "batching trade-off".into(),
            rows,
            summary: format!(
                "the same workload at higher concurrency buys {} the throughput for {} the per-user TPOT ({} against {})",
                ratio(top.output_throughput / base.output_throughput),
                ratio(top.tpot.mean.unwrap_or(base_tpot) / base_tpot),
                top.label,
                base.label
            ),
            evidence,
            confidence: if sampled { Confidence::High } else { Confidence::Medium },
            confidence_reason: if sampled {
                "both sides measured directly on the same workload".into()
            } else {
                "measured directly, but on fewer than 20 requests".into()
            },
            confirm_with: "a concurrency sweep on this workload: throughput flattening while TPOT keeps rising marks the knee".into(),
            first_response: "choose the operating point on the frontier: cap concurrency (or --max-num-seqs) where per-user TPOT still meets its SLO".into(),
            next_experiment: format!(
                "sweep only the concurrency from {} to {} on this workload (servebench sweep over max_concurrency) and take the highest point whose TPOT meets the contract",
                format_quantity(base.concurrency.round().max(1.0), ""),
                format_quantity(top.concurrency.round(), "")
            ),
        });
    }
    if c.examined.is_empty() {
        c.note = Some("no two groups share a workload at different concurrency".into());
    }
    (c, findings)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::testing::{batched, fired, row, run, stat};
    use super::*;

    /// The baseline row A (concurrency 1, 140 tok/s, TPOT 7 ms) and the same workload at
    /// `concurrency` with `throughput` and `tpot`.
    fn pair(concurrency: f64, throughput: f64, tpot: f64) -> Vec<RowFigures> {
        let mut b = batched("D", concurrency);
        b.output_throughput = throughput;
        b.tpot = stat(tpot, tpot, 100);
        vec![row("A"), b]
    }

    #[test]
    fn more_throughput_for_worse_tpot_fires() {
        let (c, f) = run(&pair(8.0, 700.0, 14.0), None, batching_trade_off);
        assert_eq!(fired(&f), vec![vec!["A".to_string(), "D".to_string()]]);
        assert_eq!(f[0].confidence, Confidence::High);
        assert!(
            f[0].summary
                .contains("buys 5× the throughput for 2× the per-user TPOT"),
            "{}",
            f[0].summary
        );
        assert_eq!(c.examined, vec!["A".to_string(), "D".to_string()]);
    }

    #[test]
    fn each_ratio_is_a_boundary() {
        let fires = |c: f64, t: f64, tpot: f64| {
            !run(&pair(c, t, tpot), None, batching_trade_off)
                .1
                .is_empty()
        };
        let (c, t, tpot) = (
            TRADEOFF_CONCURRENCY_RATIO,
            TRADEOFF_THROUGHPUT_RATIO * 140.0,
            TRADEOFF_TPOT_RATIO * 7.0,
        );
        assert!(fires(c, t, tpot));
        assert!(!fires(c - 0.01, t, tpot));
        assert!(!fires(c, t - 0.01, tpot));
        assert!(!fires(c, t, tpot - 0.01));
    }

    #[test]
    fn a_lone_workload_is_not_examined() {
        let (c, f) = run(&[row("A")], None, batching_trade_off);
        assert!(f.is_empty());
        assert_eq!(
            c.note.as_deref(),
            Some("no two groups share a workload at different concurrency")
        );
    }

    #[test]
    fn few_tpot_samples_lower_the_confidence() {
        let mut rows = pair(8.0, 700.0, 14.0);
        rows[1].tpot.n = TRADEOFF_WELL_SAMPLED - 1;
        let (_, f) = run(&rows, None, batching_trade_off);
        assert_eq!(f[0].confidence, Confidence::Medium);
    }
}
