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
