//! Decode speed: single-stream TPOT against the bandwidth prediction.

use super::context::Ctx;
use super::finding::{Confidence, Finding, Rule, RuleCheck};
use super::wording::ms;
use crate::bandwidth::{bandwidth_check, BandwidthRegime};
use crate::explained::format_quantity;
use crate::figures::RowFigures;
use crate::thresholds::DECODE_WELL_SAMPLED;

/// TPOT of single-stream groups against the bandwidth prediction.
pub(super) fn decode_speed(ctx: &Ctx<'_>) -> (RuleCheck, Vec<Finding>) {
    let mut c = RuleCheck::new(Rule::DecodeSpeed);
    let mut findings = Vec::new();
    let Some(d) = ctx.deployment else {
        c.note = Some("no GPU and model known: nothing to judge TPOT against".into());
        return (c, findings);
    };
    let singles: Vec<&RowFigures> = ctx.rows.iter().filter(|r| r.is_single_stream()).collect();
    if singles.is_empty() {
        c.note = Some("no single-stream group (concurrency 1)".into());
    }
    for row in singles {
        c.examined.push(row.id.clone());
        let Some(b) = bandwidth_check(row, d) else {
            continue;
        };
        let enough = row.tpot.n >= DECODE_WELL_SAMPLED;
        let head = format!(
            "{}: mean TPOT {} against a predicted {} (floor {}) at context {}, gap {:+.0} %",
            row.label,
            ms(b.measured_tpot_ms),
            ms(b.predicted_tpot_ms),
            ms(b.floor_ms),
            b.context_tokens,
            b.gap_pct
        );
        let (regime, confidence, reason, first, next) = match b.regime {
            BandwidthRegime::AtLimit => continue,
            BandwidthRegime::BelowFloor => (
                "measurement or configuration error (faster than the hardware allows)",
                if enough { Confidence::High } else { Confidence::Medium },
                "no decode step can move these bytes faster than peak bandwidth",
                "check what the server really runs (GPU, model, dtype, tensor parallelism, speculative decoding) against the assumed target".to_string(),
                format!(
                    "re-run {} with only --random-output-len doubled to {}: a real decode keeps its TPOT, a shortcut (cached or speculative output) changes it",
                    row.id,
                    format_quantity((row.mean_output_tokens * 2.0).round(), "")
                ),
            ),
            BandwidthRegime::FasterThanPredicted => (
                "decode faster than the catalog's efficiency (uncalibrated MBU)",
                Confidence::Low,
                "above the floor, so possible; the catalog's MBU is likely conservative for this GPU",
                "calibrate the GPU's MBU from this TPOT before trusting other predictions".to_string(),
                format!(
                    "re-run {} with only --random-input-len doubled to {}: the TPOT increase measures the KV bytes per token and pins the MBU",
                    row.id,
                    format_quantity((row.mean_input_tokens * 2.0).round(), "")
                ),
            ),
            BandwidthRegime::Above | BandwidthRegime::FarAbove => (
                if b.regime == BandwidthRegime::FarAbove {
                    "inefficient decode or a non-memory bottleneck"
                } else {
                    "decode somewhat slower than the bandwidth limit"
                },
                match (b.regime == BandwidthRegime::FarAbove, enough) {
                    (true, true) => Confidence::High,
                    (true, false) | (false, true) => Confidence::Medium,
                    (false, false) => Confidence::Low,
                },
                if b.regime == BandwidthRegime::FarAbove {
                    "the gap is far beyond the roofline model's ±20 %"
                } else {
                    "the gap is within what overheads and model error can explain"
                },
                "profile one stream: CUDA graphs and async scheduling on, detokenisation and streaming cost, CPU frequency, another tenant on the GPU".to_string(),
                format!(
                    "re-run {} with only --max-concurrency 4: a memory-bound decode keeps TPOT within ≈10 % (4 streams share one weight read); a per-request cost (CPU, sampling) raises it",
                    row.id
                ),
            ),
        };
        findings.push(Finding {
            rule: Rule::DecodeSpeed,
            regime: regime.into(),
            rows: vec![row.id.clone()],
            summary: format!("{}: {}", row.label, b.verdict),
            evidence: vec![
                head,
                format!(
                    "TPOT p50 {}, p99 {} over {} requests",
                    row.tpot.p50.map_or("–".into(), ms),
                    row.tpot.p99.map_or("–".into(), ms),
                    row.tpot.n
                ),
            ],
            confidence,
            confidence_reason: reason.into(),
            confirm_with: "the server's per-step time (vllm iteration timing, sim:step_duration_seconds) at batch 1, and GPU memory-bandwidth utilisation from the profiler".into(),
            first_response: first,
            next_experiment: next,
        });
    }
    (c, findings)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::testing::{fired, h100_8b, row, run, stat};
    use super::*;

    fn at_tpot(tpot_ms: f64, n: u64) -> RowFigures {
        let mut a = row("A");
        a.tpot = stat(tpot_ms, tpot_ms, n);
        a
    }

    fn predicted() -> f64 {
        bandwidth_check(&row("A"), &h100_8b())
            .unwrap()
            .predicted_tpot_ms
    }

    #[test]
    fn tpot_far_above_the_prediction_fires() {
        let d = h100_8b();
        let (c, f) = run(&[at_tpot(2.0 * predicted(), 100)], Some(&d), decode_speed);
        assert_eq!(fired(&f), vec![vec!["A".to_string()]]);
        assert_eq!(f[0].regime, "inefficient decode or a non-memory bottleneck");
        assert_eq!(f[0].confidence, Confidence::High);
        assert_eq!(c.examined, vec!["A".to_string()]);
    }

    #[test]
    fn tpot_at_the_prediction_stays_silent() {
        let d = h100_8b();
        assert!(run(&[at_tpot(predicted(), 100)], Some(&d), decode_speed)
            .1
            .is_empty());
    }

    #[test]
    fn faster_than_the_bytes_allow_is_a_measurement_error() {
        let d = h100_8b();
        let (_, f) = run(&[at_tpot(0.5, 100)], Some(&d), decode_speed);
        assert!(f[0]
            .regime
            .starts_with("measurement or configuration error"));
    }

    #[test]
    fn confidence_needs_enough_samples() {
        let d = h100_8b();
        let far = 2.0 * predicted();
        let (_, f) = run(&[at_tpot(far, DECODE_WELL_SAMPLED)], Some(&d), decode_speed);
        assert_eq!(f[0].confidence, Confidence::High);
        let (_, f) = run(
            &[at_tpot(far, DECODE_WELL_SAMPLED - 1)],
            Some(&d),
            decode_speed,
        );
        assert_eq!(f[0].confidence, Confidence::Medium);
    }

    #[test]
    fn without_a_deployment_it_says_why() {
        let (c, f) = run(&[at_tpot(100.0, 100)], None, decode_speed);
        assert!(f.is_empty());
        assert!(c.note.unwrap().starts_with("no GPU and model known"));
    }
}
