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
