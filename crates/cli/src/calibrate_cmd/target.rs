//! Which deployment a result measured: from its simulator spec, or, for a real server whose
//! metadata cannot say, from `--model/--gpu/--tp/--dtype`.

use anyhow::{bail, Context, Result};
use servebench_metrics::RequestRecord;
use servebench_report::RunData;
use servebench_roofline::{
    resolve_scheduler_limits, Catalog, Deployment, Dtype, GpuSpec, ModelSpec,
};
use servebench_sim::args::SimArgs;

use super::CalibrateArgs;

/// A run's deployment, with the settings the step reconstruction needs.
#[derive(Debug, Clone)]
pub struct RunTarget {
    pub model_id: String,
    pub gpu_id: String,
    pub tp: u32,
    pub dtype: Dtype,
    /// The deployment with the catalog's factors (no efficiency or overhead overrides).
    pub deployment: Deployment,
    /// Step token budget.
    pub budget: u32,
    /// Events closer than this are one step end.
    pub tolerance_ns: u64,
}

/// Resolves a loaded run's deployment.
pub fn resolve(run: &RunData, args: &CalibrateArgs) -> Result<RunTarget> {
    let t = &run.metadata.target;
    let virtual_clock = t.clock.as_deref() == Some("virtual");
    let tolerance_ns = if virtual_clock {
        0
    } else {
        real_time_tolerance(&run.records)
    };
    if let Some(spec) = &t.sim_spec {
        let a = SimArgs::parse_spec(spec)?;
        if a.async_scheduling {
            bail!("the simulator ran with --async-scheduling, whose overlapping steps the fit does not model");
        }
        let mut catalog = Catalog::builtin();
        if let Some(path) = &a.catalog {
            catalog.merge_file(path)?;
        }
        let gpu = match &a.gpu_spec {
            Some(s) => GpuSpec::from_spec_str(s)?,
            None => catalog.gpu(&a.gpu)?.clone(),
        };
        let model = match &a.hf_config {
            Some(p) => ModelSpec::from_hf_config(p)?,
            None => catalog.model(&a.model)?.clone(),
        };
        let deployment = Deployment::builder(gpu, model)
            .dtype(a.dtype)
            .kv_dtype(a.kv_cache_dtype)
            .tensor_parallel(a.tensor_parallel_size)
            .softroof_p(a.softroof_p)
            .allreduce_latency_us(a.allreduce_latency_us)
            .link_gbps(a.link_gbps)
            .build()?;
        let recorded = t
            .sim_config
            .as_ref()
            .and_then(|c| c.max_num_batched_tokens)
            .and_then(|b| u32::try_from(b).ok());
        let budget = match recorded {
            Some(b) => b,
            None => {
                resolve_scheduler_limits(
                    deployment.gpu(),
                    a.chunked_prefill(),
                    deployment.model().max_position_embeddings,
                    a.max_num_batched_tokens,
                    a.max_num_seqs,
                )?
                .0
            }
        };
        return Ok(target(deployment, budget, tolerance_ns));
    }

    // A real server: the flags say what the metadata cannot.
    let mut catalog = Catalog::builtin();
    if let Some(path) = &args.catalog {
        catalog
            .merge_file(path)
            .with_context(|| format!("loading the catalog {}", path.display()))?;
    }
    let server = t.base_url.as_deref().unwrap_or("a server");
    let Some(gpu) = &args.gpu else {
        bail!(
            "the run measured {server}, and its metadata does not say which GPU served it: give --gpu ID \
             (a catalog id; --catalog FILE adds one), and --tp/--dtype if not 1/bf16"
        );
    };
    let gpu = catalog.gpu(gpu)?.clone();
    let model = match (&args.hf_config, &args.model) {
        (Some(p), _) => ModelSpec::from_hf_config(p)?,
        (None, Some(m)) => catalog.model(m)?.clone(),
        (None, None) => catalog
            .model(&run.metadata.model_id)
            .with_context(|| {
                format!(
                "the run's model '{}' is not in the catalog: give --model ID or --hf-config FILE",
                run.metadata.model_id
            )
            })?
            .clone(),
    };
    let deployment = Deployment::builder(gpu, model)
        .dtype(args.dtype.unwrap_or_default())
        .kv_dtype(args.kv_cache_dtype.unwrap_or_default())
        .tensor_parallel(args.tp.unwrap_or(1))
        .build()?;
    let budget = resolve_scheduler_limits(
        deployment.gpu(),
        true,
        deployment.model().max_position_embeddings,
        args.max_num_batched_tokens,
        None,
    )?
    .0;
    Ok(target(deployment, budget, tolerance_ns))
}

fn target(deployment: Deployment, budget: u32, tolerance_ns: u64) -> RunTarget {
    RunTarget {
        model_id: deployment.model().id.clone(),
        gpu_id: deployment.gpu().id.clone(),
        tp: deployment.tp(),
        dtype: deployment.dtype(),
        deployment,
        budget,
        tolerance_ns,
    }
}

/// A fifth of the median inter-token gap, within 20 µs–2 ms: events of one step reach the
/// client within network jitter of each other, far less than a step apart.
fn real_time_tolerance(records: &[RequestRecord]) -> u64 {
    let mut gaps: Vec<u64> = records
        .iter()
        .flat_map(|r| r.events.windows(2).map(|w| w[1].t.saturating_sub(w[0].t)))
        .filter(|&g| g > 0)
        .collect();
    if gaps.is_empty() {
        return 20_000;
    }
    let mid = gaps.len() / 2;
    let median = *gaps.select_nth_unstable(mid).1;
    (median / 5).clamp(20_000, 2_000_000)
}

/// Refuses runs of different deployments, naming the files and what differs.
pub fn check_same(runs: &[(&str, &RunTarget)]) -> Result<()> {
    let Some((first_label, first)) = runs.first() else {
        return Ok(());
    };
    for (label, t) in &runs[1..] {
        let mut diffs = Vec::new();
        if !t.model_id.eq_ignore_ascii_case(&first.model_id) {
            diffs.push(format!("model {} vs {}", first.model_id, t.model_id));
        }
        if !t.gpu_id.eq_ignore_ascii_case(&first.gpu_id) {
            diffs.push(format!("GPU {} vs {}", first.gpu_id, t.gpu_id));
        }
        if t.tp != first.tp {
            diffs.push(format!("tensor-parallel size {} vs {}", first.tp, t.tp));
        }
        if t.dtype != first.dtype {
            diffs.push(format!("dtype {} vs {}", first.dtype, t.dtype));
        }
        if !diffs.is_empty() {
            bail!(
                "cannot calibrate one profile from different deployments: {first_label} and {label} differ in {}",
                diffs.join(", ")
            );
        }
    }
    Ok(())
}
