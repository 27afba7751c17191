//! Prefill cost: TTFT growing with the prompt at low concurrency.

use super::context::Ctx;
use super::finding::{Confidence, Finding, Rule, RuleCheck};
use super::wording::{ms, ratio, tokens};
use crate::explained::format_quantity;
use crate::figures::RowFigures;
use crate::thresholds::{
    PREFILL_INPUT_RATIO, PREFILL_MIN_DELTA_MS, PREFILL_SLOW_RATIO, PREFILL_TTFT_RATIO,
    PREFILL_WELL_SAMPLED,
};

/// TTFT growing with the prompt at low concurrency.
pub(super) fn prefill_cost(ctx: &Ctx<'_>) -> (RuleCheck, Vec<Finding>) {
    let mut c = RuleCheck::new(Rule::PrefillCost);
    let singles: Vec<&RowFigures> = ctx
        .rows
        .iter()
        .filter(|r| r.is_single_stream() && r.ttft.p50.is_some())
        .collect();
    c.examined = singles.iter().map(|r| r.id.clone()).collect();
    let uncached = |r: &RowFigures| r.mean_input_tokens - r.mean_cached_tokens.unwrap_or(0.0);
    let short = singles
        .iter()
        .min_by(|a, b| uncached(a).total_cmp(&uncached(b)));
    let long = singles
        .iter()
        .max_by(|a, b| uncached(a).total_cmp(&uncached(b)));
    let (Some(short), Some(long)) = (short, long) else {
        c.note = Some("no single-stream group".into());
        return (c, Vec::new());
    };
    let (Some(ts), Some(tl)) = (short.ttft.p50, long.ttft.p50) else {
        return (c, Vec::new());
    };
    let (is, il) = (uncached(short), uncached(long));
    if is <= 0.0
        || il < PREFILL_INPUT_RATIO * is
        || tl < PREFILL_TTFT_RATIO * ts
        || tl - ts < PREFILL_MIN_DELTA_MS
    {
        if singles.len() < 2 {
            c.note = Some("needs two single-stream groups with different prompt lengths".into());
        }
        return (c, Vec::new());
    }
    let slope_us = (tl - ts) / (il - is) * 1e3;
    let mut evidence = vec![
        format!(
            "{}: TTFT p50 {} for {} of uncached prompt",
            short.label,
            ms(ts),
            tokens(is)
        ),
        format!(
            "{}: TTFT p50 {} for {} of uncached prompt",
            long.label,
            ms(tl),
            tokens(il)
        ),
        format!("≈{slope_us:.1} µs per prompt token between them"),
    ];
    let predicted = ctx.idle_prefill_ms(long, il);
    let slow = predicted.is_some_and(|p| tl > PREFILL_SLOW_RATIO * p);
    if let Some(p) = predicted {
        evidence.push(format!(
            "the roofline prefills {} in {} on an idle engine: measured is {}",
            tokens(il),
            ms(p),
            ratio(tl / p)
        ));
    }
    let sampled = short.ttft.n >= PREFILL_WELL_SAMPLED && long.ttft.n >= PREFILL_WELL_SAMPLED;
    let confidence = match (predicted, sampled) {
        (Some(_), true) => Confidence::High,
        (None, true) | (Some(_), false) => Confidence::Medium,
        (None, false) => Confidence::Low,
    };
    let half = (long.mean_input_tokens / 2.0).round();
    let finding = Finding {
        rule: Rule::PrefillCost,
        regime: if slow {
            "prefill slower than the roofline (inefficient prefill)".into()
        } else {
            "prefill cost".into()
        },
        rows: vec![short.id.clone(), long.id.clone()],
        summary: format!(
            "at concurrency 1, TTFT grows with the prompt: {} → {} from {} to {} tokens; long prompts pay for prefill compute",
            ms(ts),
            ms(tl),
            format_quantity(is.round(), ""),
            format_quantity(il.round(), "")
        ),
        evidence,
        confidence,
        confidence_reason: match confidence {
            Confidence::High => "measured on both rows and checked against the roofline".into(),
            Confidence::Medium => "measured, but without a prediction or with few samples".into(),
            Confidence::Low => "few samples and no prediction".into(),
        },
        confirm_with: "TTFT against prompt length at concurrency 1 is a straight line whose slope is the per-token prefill cost; vllm:request_prefill_time_seconds on the server".into(),
        first_response: if slow {
            "prefill runs slower than the compute allows: check chunked-prefill settings, prompt tokenisation on the server, and GPU clocks".into()
        } else {
            "shorten or cache prompts (prefix caching for shared system prompts), cap the input length, or buy compute (FP8, tensor parallelism)".into()
        },
        next_experiment: format!(
            "re-run {} with only --random-input-len halved to {}: if prefill cost is the cause, TTFT falls by ≈{}",
            long.id,
            format_quantity(half, ""),
            ms(slope_us * half / 1e3)
        ),
    };
    (c, vec![finding])
}
