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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::testing::{fired, h100_8b, row, run, stat};
    use super::*;

    /// Row A (256 tokens, TTFT p50 20 ms) and row B with `input` tokens and TTFT p50 `ttft`.
    fn pair(input: f64, ttft: f64) -> Vec<RowFigures> {
        let mut b = row("B");
        b.mean_input_tokens = input;
        b.ttft = stat(ttft, ttft, 100);
        vec![row("A"), b]
    }

    #[test]
    fn ttft_growing_with_the_prompt_fires() {
        let (c, f) = run(&pair(2048.0, 200.0), None, prefill_cost);
        assert_eq!(fired(&f), vec![vec!["A".to_string(), "B".to_string()]]);
        assert_eq!(f[0].regime, "prefill cost");
        assert_eq!(f[0].confidence, Confidence::Medium);
        assert_eq!(c.examined, vec!["A".to_string(), "B".to_string()]);
    }

    #[test]
    fn against_the_roofline_a_slow_prefill_is_named() {
        let d = h100_8b();
        let (_, f) = run(&pair(2048.0, 200.0), Some(&d), prefill_cost);
        assert_eq!(
            f[0].regime,
            "prefill slower than the roofline (inefficient prefill)"
        );
        assert_eq!(f[0].confidence, Confidence::High);
    }

    #[test]
    fn ratios_and_the_minimum_delta_are_boundaries() {
        let fires =
            |input: f64, ttft: f64| !run(&pair(input, ttft), None, prefill_cost).1.is_empty();
        // 20 ms short: twice is 40 ms, exactly PREFILL_MIN_DELTA_MS above.
        assert!(fires(
            PREFILL_INPUT_RATIO * 256.0,
            PREFILL_TTFT_RATIO * 20.0
        ));
        assert!(!fires(PREFILL_INPUT_RATIO * 256.0 - 1.0, 200.0));
        assert!(!fires(2048.0, PREFILL_TTFT_RATIO * 20.0 - 0.1));
    }

    #[test]
    fn the_minimum_delta_holds_on_fast_rows() {
        let mut rows = pair(2048.0, 15.0);
        rows[0].ttft = stat(5.0, 5.0, 100);
        // 3× but only 10 ms apart.
        assert!(run(&rows, None, prefill_cost).1.is_empty());
    }

    #[test]
    fn one_single_stream_row_is_not_enough() {
        let (c, f) = run(&[row("A")], None, prefill_cost);
        assert!(f.is_empty());
        assert_eq!(
            c.note.as_deref(),
            Some("needs two single-stream groups with different prompt lengths")
        );
    }
}
