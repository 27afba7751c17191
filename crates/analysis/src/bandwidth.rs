//! Measured TPOT against the roofline: is decode at the memory-bandwidth limit, slower (an
//! inefficiency or a non-memory bottleneck), or impossibly fast (a measurement or
//! configuration error)?
//!
//! A single-stream row is compared with one decode step at the row's mean context
//! ([`Deployment::decode_tpot`]). A batched row is compared with the average step of its
//! steady state: `B` decodes plus the prefill tokens new arrivals bring per step
//! (`B · prompt / output`), because in continuous batching every decode step also carries
//! other requests' prefill chunks. The floor is the step's bytes at peak bandwidth: no step
//! that moves them can be faster.

use serde::Serialize;
use servebench_metrics::result::SimConfig;
use servebench_roofline::{Catalog, Deployment, Dtype, KvDtype, SeqWork, StepTime};

use crate::error::AnalysisError;
use crate::figures::RowFigures;
pub use crate::thresholds::{AT_LIMIT_PCT, FAR_ABOVE_PCT};

/// Where a measured TPOT sits against the roofline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BandwidthRegime {
    /// Faster than the bytes allow at peak bandwidth.
    BelowFloor,
    /// Between the floor and 10 % under the prediction.
    FasterThanPredicted,
    /// Within ±10 % of the prediction.
    AtLimit,
    /// 10–50 % above the prediction.
    Above,
    /// More than 50 % above the prediction.
    FarAbove,
}

impl BandwidthRegime {
    /// Short name for tables.
    pub fn as_str(self) -> &'static str {
        match self {
            BandwidthRegime::BelowFloor => "below the floor",
            BandwidthRegime::FasterThanPredicted => "faster than predicted",
            BandwidthRegime::AtLimit => "at the bandwidth limit",
            BandwidthRegime::Above => "above the prediction",
            BandwidthRegime::FarAbove => "far above the prediction",
        }
    }

    fn classify(measured: f64, predicted: f64, floor: f64) -> BandwidthRegime {
        let gap = (measured - predicted) / predicted * 100.0;
        if measured < floor {
            BandwidthRegime::BelowFloor
        } else if gap < -AT_LIMIT_PCT {
            BandwidthRegime::FasterThanPredicted
        } else if gap <= AT_LIMIT_PCT {
            BandwidthRegime::AtLimit
        } else if gap <= FAR_ABOVE_PCT {
            BandwidthRegime::Above
        } else {
            BandwidthRegime::FarAbove
        }
    }
}

/// Measured TPOT beside the roofline prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BandwidthCheck {
    /// Measured mean TPOT, ms.
    pub measured_tpot_ms: f64,
    /// The roofline's step time for the same work, ms.
    pub predicted_tpot_ms: f64,
    /// The step's bytes at peak bandwidth, ms: nothing that moves them is faster.
    pub floor_ms: f64,
    /// `(measured − predicted) / predicted`, %.
    pub gap_pct: f64,
    /// The regime the gap points to.
    pub regime: BandwidthRegime,
    /// What the gap points to, in a sentence.
    pub verdict: String,
    /// Context of the decode step (prompt + half the output), tokens.
    pub context_tokens: u32,
    /// Requests decoding together (1 for a single stream).
    pub batch: u32,
    /// Prefill tokens sharing the average step (0 for a single stream).
    pub prefill_tokens_per_step: u32,
}

/// Checks a group's measured TPOT against the deployment; `None` without a measured TPOT.
/// Single-stream groups are checked at batch 1; others at the mean number of requests
/// decoding together, capped by the server's `max_num_seqs` when it is known.
pub fn bandwidth_check(row: &RowFigures, deployment: &Deployment) -> Option<BandwidthCheck> {
    let measured = row.tpot.mean.filter(|v| *v > 0.0)?;
    let context = to_tokens(row.mean_decode_context());
    if row.is_single_stream() {
        return Some(bandwidth_check_at(measured, context, 1, 0, deployment));
    }
    let mut batch = row.decoding_concurrency().round().max(1.0);
    if let Some(limit) = row.target.max_num_seqs {
        batch = batch.min(limit as f64);
    }
    let batch = to_tokens(batch);
    let uncached = row.mean_input_tokens - row.mean_cached_tokens.unwrap_or(0.0);
    let per_step = f64::from(batch) * uncached.max(0.0) / row.mean_output_tokens.max(1.0);
    let budget = row.target.max_num_batched_tokens.map_or(u32::MAX, |b| {
        u32::try_from(b).unwrap_or(u32::MAX).saturating_sub(batch)
    });
    let prefill = to_tokens(per_step).min(budget);
    Some(bandwidth_check_at(
        measured, context, batch, prefill, deployment,
    ))
}

/// Checks a measured TPOT against the step of `batch` decodes at `context` plus
/// `prefill_tokens` of prefill sharing the step.
pub fn bandwidth_check_at(
    measured_tpot_ms: f64,
    context: u32,
    batch: u32,
    prefill_tokens: u32,
    deployment: &Deployment,
) -> BandwidthCheck {
    let batch = batch.max(1);
    let step = mixed_step(deployment, context, batch, prefill_tokens);
    let predicted = step.total * 1e3;
    let floor = step.bytes / deployment.peak_bandwidth() * 1e3;
    let gap_pct = (measured_tpot_ms - predicted) / predicted * 100.0;
    let regime = BandwidthRegime::classify(measured_tpot_ms, predicted, floor);
    BandwidthCheck {
        measured_tpot_ms,
        predicted_tpot_ms: predicted,
        floor_ms: floor,
        gap_pct,
        regime,
        verdict: verdict(regime, gap_pct, batch),
        context_tokens: context,
        batch,
        prefill_tokens_per_step: prefill_tokens,
    }
}

/// The roofline time of a step with `batch` decodes at `context` and `prefill_tokens` of a
/// new prompt.
pub fn mixed_step(
    deployment: &Deployment,
    context: u32,
    batch: u32,
    prefill_tokens: u32,
) -> StepTime {
    if prefill_tokens == 0 {
        return deployment.decode_tpot(context, batch.max(1));
    }
    let mut plan = vec![
        SeqWork {
            new_tokens: 1,
            context,
            samples: true,
        };
        batch.max(1) as usize
    ];
    plan.push(SeqWork {
        new_tokens: prefill_tokens,
        context: 0,
        samples: false,
    });
    deployment.step_time(&plan)
}

fn to_tokens(v: f64) -> u32 {
    if v.is_finite() && v > 0.0 {
        v.round().min(f64::from(u32::MAX)) as u32
    } else {
        0
    }
}

fn verdict(regime: BandwidthRegime, gap_pct: f64, batch: u32) -> String {
    let gap = format!("{gap_pct:+.0} %");
    match regime {
        BandwidthRegime::BelowFloor => {
            "below the bandwidth floor: a measurement or configuration error (another GPU, model, dtype or tensor-parallel degree than assumed; speculative decoding; TPOT from too few tokens)".to_string()
        }
        BandwidthRegime::FasterThanPredicted => format!(
            "{gap} faster than predicted yet above the floor: the GPU streams weights more efficiently than the catalog's MBU; calibrate the efficiency factors"
        ),
        BandwidthRegime::AtLimit if batch == 1 => {
            format!("{gap}: at the memory-bandwidth limit; only more bandwidth (another GPU, FP8 weights, tensor parallelism) makes one stream faster")
        }
        BandwidthRegime::AtLimit => format!(
            "{gap}: steps of {batch} decodes plus prefill run at the roofline's pace; per-user TPOT is the price of the batch"
        ),
        BandwidthRegime::Above if batch == 1 => format!(
            "{gap}: above the bandwidth prediction; overheads (scheduling, sampling, detokenisation) or modest inefficiency"
        ),
        BandwidthRegime::Above => format!(
            "{gap}: steps take longer than the roofline's; scheduling overhead or interference beyond the modelled prefill share"
        ),
        BandwidthRegime::FarAbove => format!(
            "{gap}: far above the prediction; inefficient decode or a non-memory bottleneck (CPU, scheduler, network, another tenant)"
        ),
    }
}

/// A markdown section: one line per checked group, with the deployment the predictions are for.
pub fn bandwidth_section_markdown(
    checks: &[(String, BandwidthCheck)],
    deployment: &Deployment,
    source: &str,
) -> String {
    let i = deployment.inputs();
    let mut out = format!(
        "Predictions for {} on {} ({} weights, KV cache {}, tp {}), from {source}. Single-stream rows are compared with one decode step at the row's mean context (prompt + half the output); batched rows with their average step (B decodes plus the prefill tokens arrivals bring per step). Within ±{AT_LIMIT_PCT:.0} % is the bandwidth limit.\n\n",
        i.model, i.gpu, i.dtype, i.kv_dtype, i.tp,
    );
    if checks.is_empty() {
        out.push_str("No row measured a TPOT (every request produced at most one token).\n");
        return out;
    }
    out.push_str(
        "| row | batch | context | measured TPOT | predicted | floor | gap | points to |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---|\n");
    for (label, c) in checks {
        let batch = if c.prefill_tokens_per_step > 0 {
            format!("{} + {} prefill tok", c.batch, c.prefill_tokens_per_step)
        } else {
            c.batch.to_string()
        };
        out.push_str(&format!(
            "| {label} | {batch} | {} | {:.2} ms | {:.2} ms | {:.2} ms | {:+.1} % | {} |\n",
            c.context_tokens,
            c.measured_tpot_ms,
            c.predicted_tpot_ms,
            c.floor_ms,
            c.gap_pct,
            c.verdict
        ));
    }
    out
}

/// Rebuilds the simulator's deployment from its `sim_config` (a result's
/// `metadata.target.sim_config`): catalog GPU and model, dtypes, tensor parallelism and the
/// efficiency and overhead settings it ran with, so the prediction is the simulator's own.
pub fn deployment_from_sim_config(
    config: &SimConfig,
    catalog: &Catalog,
) -> Result<Deployment, AnalysisError> {
    let text = |key: &str, v: &Option<String>| {
        v.clone().ok_or_else(|| {
            AnalysisError::Result(format!("the simulator configuration has no '{key}'"))
        })
    };
    let gpu = catalog.gpu(&text("gpu", &config.gpu)?)?.clone();
    let model = catalog.model(&text("model", &config.model)?)?.clone();
    let dtype: Dtype = config.dtype.as_deref().unwrap_or("bf16").parse()?;
    let kv_dtype: KvDtype = config.kv_cache_dtype.as_deref().unwrap_or("auto").parse()?;
    let tp = config.tensor_parallel_size.unwrap_or(1);
    let eff = |key: &str| config.section_f64("efficiency", key);
    let ovh = |key: &str| config.section_f64("overheads", key);
    Ok(Deployment::builder(gpu, model)
        .dtype(dtype)
        .kv_dtype(kv_dtype)
        .tensor_parallel(tp)
        .mfu(eff("mfu"))
        .mfu_fp8(eff("mfu_fp8"))
        .mbu(eff("mbu"))
        .softroof_p(eff("softroof_p"))
        .step_overhead_us(ovh("step_overhead_us"))
        .layer_overhead_us(ovh("layer_overhead_us"))
        .req_overhead_us(ovh("req_overhead_us"))
        .cpu_floor_us(ovh("cpu_floor_us"))
        .allreduce_latency_us(ovh("allreduce_latency_us"))
        .link_gbps(ovh("link_gbps"))
        .async_scheduling(config.async_scheduling.unwrap_or(false))
        .build()?)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn h100_8b() -> Deployment {
        let c = Catalog::builtin();
        Deployment::new(
            c.gpu("h100").unwrap().clone(),
            c.model("llama-3.1-8b").unwrap().clone(),
            Dtype::Bf16,
            KvDtype::Auto,
            1,
        )
        .unwrap()
    }

    #[test]
    fn single_stream_prediction_is_the_decode_step_of_simulator_md() {
        // docs/simulator.md §3.5: 6.95 ms at context 1024, floor W_step/peak_BW = 4.48 ms (+ KV).
        let c = bandwidth_check_at(6.95, 1024, 1, 0, &h100_8b());
        assert!((c.predicted_tpot_ms - 6.95).abs() < 0.01, "{c:?}");
        assert!(c.floor_ms > 4.48 && c.floor_ms < 4.56, "{c:?}");
        assert_eq!(c.regime, BandwidthRegime::AtLimit);
        assert!(c.verdict.contains("bandwidth limit"));
    }

    #[test]
    fn the_gap_names_its_regime() {
        let d = h100_8b();
        let at = |ms: f64| bandwidth_check_at(ms, 1024, 1, 0, &d).regime;
        assert_eq!(at(7.5), BandwidthRegime::AtLimit);
        assert_eq!(at(8.5), BandwidthRegime::Above);
        assert_eq!(at(14.0), BandwidthRegime::FarAbove);
        assert_eq!(at(5.5), BandwidthRegime::FasterThanPredicted);
        assert_eq!(at(3.0), BandwidthRegime::BelowFloor);
        let far = bandwidth_check_at(14.0, 1024, 1, 0, &d);
        assert!((far.gap_pct - (14.0 / 6.95 - 1.0) * 100.0).abs() < 0.5);
        assert!(far.verdict.contains("non-memory bottleneck"));
        assert!(bandwidth_check_at(3.0, 1024, 1, 0, &d)
            .verdict
            .contains("configuration error"));
    }

    #[test]
    fn batched_steps_carry_the_prefill_share() {
        let d = h100_8b();
        let pure = bandwidth_check_at(10.0, 2048, 64, 0, &d);
        let mixed = bandwidth_check_at(10.0, 2048, 64, 128, &d);
        assert!(mixed.predicted_tpot_ms > pure.predicted_tpot_ms);
        assert_eq!(mixed.prefill_tokens_per_step, 128);
        let md = bandwidth_section_markdown(&[("D".into(), mixed)], &d, "the test");
        assert!(md.contains("| D | 64 + 128 prefill tok | 2048 |"), "{md}");
    }

    #[test]
    fn simulator_config_rebuilds_its_deployment() {
        let cfg: SimConfig = serde_json::from_value(serde_json::json!({
            "gpu": "h100", "model": "llama-3.1-8b", "dtype": "bf16", "kv_cache_dtype": "auto",
            "tensor_parallel_size": 1,
            "efficiency": {"mbu": 0.39, "mfu": 0.6, "mfu_fp8": 0.42, "softroof_p": 1.5},
            "overheads": {"step_overhead_us": 126.0, "layer_overhead_us": 32.0, "req_overhead_us": 4.0,
                          "cpu_floor_us": 0.0, "allreduce_latency_us": 5.0, "link_gbps": 360.0},
            "async_scheduling": false
        }))
        .unwrap();
        let d = deployment_from_sim_config(&cfg, &Catalog::builtin()).unwrap();
        // Half the catalog's MBU doubles the weight-streaming part of the step.
        let slow = d.decode_tpot(1024, 1).total;
        let normal = h100_8b().decode_tpot(1024, 1).total;
        assert!(slow > normal * 1.7, "{slow} vs {normal}");
        let only_gpu: SimConfig =
            serde_json::from_value(serde_json::json!({"gpu": "h100"})).unwrap();
        let err = deployment_from_sim_config(&only_gpu, &Catalog::builtin()).unwrap_err();
        assert!(err.to_string().contains("'model'"), "{err}");
    }
}
