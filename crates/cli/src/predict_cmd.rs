//! `servebench predict`: what a GPU and model should deliver, from the roofline model alone
//! (bandwidth floor, TPOT, TTFT, KV capacity), each figure with its formula on request.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use servebench_analysis::predict::{
    predict as predict_deployment, predict_raw, PredictOptions, PredictReport, Prediction,
    RawHardware, RawPrediction, DEFAULT_DECODE_BATCHES,
};
use servebench_analysis::{format_quantity, Explained};
use servebench_roofline::{
    resolve_scheduler_limits, CalibrationProfile, Catalog, Deployment, Dtype, KvDtype, KvSizing,
    ModelSpec, SPEC_DEFAULT_MBU,
};

/// GPU used when `--gpu` is not given (the simulator's default).
const DEFAULT_GPU: &str = "h100";
/// Model used when neither `--model` nor `--hf-config` is given (the simulator's default).
const DEFAULT_MODEL: &str = "llama-3.1-8b";

/// Arguments of `servebench predict`.
#[derive(Debug, Clone, Args)]
pub struct PredictArgs {
    /// GPU id or alias from the catalog [default: h100].
    #[arg(long)]
    pub gpu: Option<String>,
    /// Model id or Hugging Face name from the catalog [default: llama-3.1-8b].
    #[arg(long, conflicts_with = "hf_config")]
    pub model: Option<String>,
    /// Weight and activation type: bf16 or fp8.
    #[arg(long, default_value = "bf16")]
    pub dtype: Dtype,
    /// KV-cache type: auto (2 bytes) or fp8.
    #[arg(long, default_value = "auto")]
    pub kv_cache_dtype: KvDtype,
    /// Tensor-parallel degree: per-GPU figures are for one of these GPUs.
    #[arg(long, alias = "tp", default_value_t = 1)]
    pub tensor_parallel_size: u32,
    /// Fraction of GPU memory the server may use (sizes the KV cache).
    #[arg(long, default_value_t = 0.9)]
    pub gpu_memory_utilization: f64,
    /// Longest request the server accepts [default: the model's maximum].
    #[arg(long)]
    pub max_model_len: Option<u32>,
    /// Step token budget, also the prefill chunk [default: by GPU class, 8192 or 2048].
    #[arg(long)]
    pub max_num_batched_tokens: Option<u32>,
    /// Sequences per step [default: by GPU class, 1024 or 256].
    #[arg(long)]
    pub max_num_seqs: Option<u32>,
    /// Tokens per KV block.
    #[arg(long, default_value_t = 16)]
    pub block_size: u32,
    /// Context (tokens in the KV cache) of the decode predictions.
    #[arg(long, default_value_t = 1024)]
    pub context: u32,
    /// Prompt lengths whose idle-engine TTFT is predicted.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "128,512,1024,2048,4096,8192"
    )]
    pub prompt_lens: Vec<u32>,
    /// TOML file adding or overriding catalog GPUs and models.
    #[arg(long, value_name = "FILE")]
    pub catalog: Option<PathBuf>,
    /// A Hugging Face config.json describing the model instead of a catalog entry.
    #[arg(long, value_name = "FILE")]
    pub hf_config: Option<PathBuf>,
    /// Peak memory bandwidth in GB/s: overrides the GPU's, or with --params stands for
    /// hardware outside the catalog.
    #[arg(long, value_name = "GB/S")]
    pub bandwidth_gbs: Option<f64>,
    /// Parameter count (e.g. 8e9): predicts weight bytes and the bandwidth floor from the
    /// size alone, without a model shape.
    #[arg(long, conflicts_with_all = ["model", "hf_config"])]
    pub params: Option<f64>,
    /// Bytes per parameter with --params [default: from --dtype, 2 for bf16].
    #[arg(long, requires = "params")]
    pub bytes_per_param: Option<f64>,
    /// Show each figure's formula and inputs.
    #[arg(long)]
    pub explain: bool,
    /// Print JSON (formulas and inputs included) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// A calibration profile (`servebench sim calibrate`) for this model, GPU,
    /// tensor-parallel size and dtype: its fitted efficiencies and overheads replace the
    /// catalog's.
    #[arg(long, value_name = "FILE", conflicts_with = "params")]
    pub calibration: Option<PathBuf>,
}

/// Runs `servebench predict`.
pub fn predict(args: PredictArgs) -> Result<ExitCode> {
    let report = build_report(&args)?;
    let text = if args.json {
        let mut s = serde_json::to_string_pretty(&report).context("serializing the prediction")?;
        s.push('\n');
        s
    } else {
        match &report {
            PredictReport::Catalog(p) => render_catalog(p, args.explain),
            PredictReport::Raw(p) => render_raw(p, args.explain),
        }
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("writing the prediction")?;
    Ok(ExitCode::SUCCESS)
}

/// Resolves the arguments into a deployment (or raw hardware) and predicts.
pub fn build_report(args: &PredictArgs) -> Result<PredictReport> {
    let mut catalog = Catalog::builtin();
    if let Some(path) = &args.catalog {
        catalog
            .merge_file(path)
            .with_context(|| format!("loading the catalog {}", path.display()))?;
    }
    if let Some(bw) = args.bandwidth_gbs {
        if !(bw.is_finite() && bw > 0.0) {
            bail!("--bandwidth-gbs must be a positive number of GB/s, got {bw}");
        }
    }
    if let Some(params) = args.params {
        return raw_report(args, &catalog, params);
    }

    let mut gpu = catalog
        .gpu(args.gpu.as_deref().unwrap_or(DEFAULT_GPU))?
        .clone();
    if let Some(bw) = args.bandwidth_gbs {
        gpu.mem_bw_tbps = bw / 1000.0;
    }
    let model = match &args.hf_config {
        Some(path) => ModelSpec::from_hf_config(path)?,
        None => catalog
            .model(args.model.as_deref().unwrap_or(DEFAULT_MODEL))?
            .clone(),
    };
    let builder = Deployment::builder(gpu, model)
        .dtype(args.dtype)
        .kv_dtype(args.kv_cache_dtype)
        .tensor_parallel(args.tensor_parallel_size);
    let builder = match &args.calibration {
        Some(path) => CalibrationProfile::load(path)?
            .apply_checked(builder)
            .with_context(|| format!("--calibration {}", path.display()))?,
        None => builder,
    };
    let deployment = builder.build()?;
    let max_model_len = args
        .max_model_len
        .unwrap_or(deployment.model().max_position_embeddings);
    let (max_num_batched_tokens, max_num_seqs) = resolve_scheduler_limits(
        deployment.gpu(),
        true,
        max_model_len,
        args.max_num_batched_tokens,
        args.max_num_seqs,
    )?;
    if args.block_size == 0 {
        bail!("--block-size must be at least 1");
    }
    let options = PredictOptions {
        context: args.context,
        prompt_lens: args.prompt_lens.clone(),
        decode_batches: DEFAULT_DECODE_BATCHES.to_vec(),
        sizing: KvSizing {
            gpu_memory_utilization: args.gpu_memory_utilization,
            block_size: args.block_size,
            max_num_batched_tokens,
            max_num_seqs,
            num_gpu_blocks_override: None,
            gpu_memory_gib_override: None,
        },
        max_model_len,
    };
    let mut prediction = predict_deployment(&deployment, &options)?;
    if let Some(bw) = args.bandwidth_gbs {
        prediction.notes.push(format!(
            "peak bandwidth set to {} by --bandwidth-gbs instead of the catalog's figure",
            format_quantity(bw * 1e9, "B/s")
        ));
    }
    Ok(PredictReport::Catalog(Box::new(prediction)))
}

fn raw_report(args: &PredictArgs, catalog: &Catalog, params: f64) -> Result<PredictReport> {
    let gpu = args.gpu.as_deref().map(|g| catalog.gpu(g)).transpose()?;
    let (source, peak_bandwidth) = match (args.bandwidth_gbs, gpu) {
        (Some(bw), _) => ("--bandwidth-gbs".to_string(), bw * 1e9),
        (None, Some(g)) => (g.id.clone(), g.mem_bw_tbps * 1e12),
        (None, None) => {
            bail!("--params needs a bandwidth: give --bandwidth-gbs, or a catalog --gpu")
        }
    };
    let (mbu, mbu_assumed) = match gpu {
        Some(g) => (g.mbu, false),
        None => (SPEC_DEFAULT_MBU, true),
    };
    let hardware = RawHardware {
        source,
        peak_bandwidth,
        mbu,
        mbu_assumed,
        params,
        bytes_per_param: args
            .bytes_per_param
            .unwrap_or_else(|| args.dtype.weight_bytes()),
        tensor_parallel_size: args.tensor_parallel_size,
    };
    Ok(PredictReport::Raw(Box::new(predict_raw(&hardware)?)))
}

/// One labelled figure, with its formula and inputs below when explaining.
fn row(out: &mut String, label: &str, e: &Explained, extra: &str, explain: bool) {
    let _ = writeln!(out, "  {label:<38}{}{extra}", e.display());
    if explain {
        out.push_str(&e.explanation("      "));
    }
}

fn render_catalog(p: &Prediction, explain: bool) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} on {}{} ({} weights, {} KV cache) — roofline prediction",
        p.model,
        if p.tensor_parallel_size > 1 {
            format!("{}× ", p.tensor_parallel_size)
        } else {
            String::new()
        },
        p.gpu,
        p.dtype,
        p.kv_dtype
    );
    let _ = writeln!(
        o,
        "Shapes are reliable; absolute figures carry about ±20 % until calibrated. Step times are those `servebench sim` charges."
    );

    let _ = writeln!(o, "\nWeights (per GPU)");
    row(&mut o, "resident (W_res)", &p.weights.resident, "", explain);
    row(
        &mut o,
        "read per decode step (W_step)",
        &p.weights.read_per_step,
        "",
        explain,
    );

    let b = &p.bandwidth;
    let _ = writeln!(o, "\nBandwidth floor of a batch-1 decode step");
    row(
        &mut o,
        "W_step / peak BW",
        &b.floor,
        &format!(
            "  ({} max; embedding table not read)",
            b.max_tokens_per_s.display()
        ),
        explain,
    );
    row(
        &mut o,
        "with the embedding table",
        &b.floor_with_embeddings,
        "  (naive \"model size / bandwidth\")",
        explain,
    );
    row(
        &mut o,
        "bandwidth prediction of TPOT",
        &b.predicted_tpot,
        "  (overheads + W_step at MBU)",
        explain,
    );

    let d = &p.decode;
    let _ = writeln!(o, "\nDecode at context {}", d.context);
    row(&mut o, "single-stream TPOT", &d.tpot, "", explain);
    row(
        &mut o,
        "single-stream decode rate",
        &d.tokens_per_s,
        "",
        explain,
    );
    match &p.compute_bound_batch {
        Some(e) => row(&mut o, "compute-bound from batch", e, "", explain),
        None => {
            let _ = writeln!(
                o,
                "  {:<38}never (KV reads outgrow FLOPs)",
                "compute-bound from batch"
            );
        }
    }
    if let Some(e) = &p.weights_ridge_batch {
        row(
            &mut o,
            "FLOPs match weight streaming at batch",
            e,
            "  (KV reads ignored)",
            explain,
        );
    }
    let _ = writeln!(
        o,
        "  {:>6}  {:>10}  {:>12}  regime",
        "batch", "step", "tok/s"
    );
    for r in &p.decode_batches {
        let _ = writeln!(
            o,
            "  {:>6}  {:>10}  {:>12}  {}",
            r.batch,
            format_quantity(r.step_s, "s"),
            format_quantity(r.tokens_per_s, ""),
            if r.compute_bound { "compute" } else { "memory" }
        );
    }

    let _ = writeln!(
        o,
        "\nPrefill on an idle engine (chunks of max_num_batched_tokens = {})",
        p.max_num_batched_tokens
    );
    row(
        &mut o,
        "prefill rate, full budget",
        &p.prefill.tokens_per_s,
        "",
        explain,
    );
    let _ = writeln!(
        o,
        "  {:>8}  {:>6}  {:>10}  {:>14}",
        "prompt", "steps", "TTFT", "prefill tok/s"
    );
    for x in &p.prefill.prompts {
        let _ = writeln!(
            o,
            "  {:>8}  {:>6}  {:>10}  {:>14}{}",
            x.prompt_len,
            x.chunks.len(),
            x.ttft.display(),
            format_quantity(x.tokens_per_s.value, ""),
            if x.exceeds_max_model_len {
                "  (longer than max_model_len)"
            } else {
                ""
            }
        );
        if explain {
            o.push_str(&x.ttft.explanation("      "));
        }
    }

    let kv = &p.kv;
    let _ = writeln!(o, "\nKV cache");
    row(
        &mut o,
        "bytes per token (whole model)",
        &kv.bytes_per_token,
        "",
        explain,
    );
    if p.tensor_parallel_size > 1 {
        row(
            &mut o,
            "bytes per token per GPU",
            &kv.bytes_per_token_per_gpu,
            "",
            explain,
        );
    }
    if let Some(c) = &kv.capacity {
        let _ = writeln!(
            o,
            "  at gpu_memory_utilization {}, block size {}:",
            c.gpu_memory_utilization, c.detail.block_size
        );
        row(
            &mut o,
            "memory left for KV (per GPU)",
            &c.available,
            "",
            explain,
        );
        row(&mut o, "blocks", &c.blocks, "", explain);
        row(&mut o, "tokens (GPU KV cache size)", &c.tokens, "", explain);
        row(
            &mut o,
            &format!("max concurrency at {} tokens", c.max_model_len),
            &c.max_concurrency,
            "",
            explain,
        );
        let _ = writeln!(
            o,
            "  {:<38}{}",
            "largest max_model_len that fits",
            format_quantity(f64::from(c.largest_fitting_max_model_len), "tokens")
        );
    }
    if let Some(e) = &kv.error {
        let _ = writeln!(o, "  warning: {e}");
    }

    if !p.notes.is_empty() {
        let _ = writeln!(o, "\nNotes");
        for n in &p.notes {
            let _ = writeln!(o, "  - {n}");
        }
    }
    o
}

fn render_raw(p: &RawPrediction, explain: bool) -> String {
    let h = &p.hardware;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Bandwidth estimate: {} parameters × {} B on {} ({}){}",
        format_quantity(h.params, ""),
        h.bytes_per_param,
        format_quantity(h.peak_bandwidth, "B/s"),
        h.source,
        if h.tensor_parallel_size > 1 {
            format!(", split over {} GPUs", h.tensor_parallel_size)
        } else {
            String::new()
        }
    );
    row(&mut o, "weights per GPU (W)", &p.weights, "", explain);
    row(
        &mut o,
        "bandwidth floor (W / peak BW)",
        &p.floor,
        &format!("  ({} max)", p.max_tokens_per_s.display()),
        explain,
    );
    row(
        &mut o,
        &format!("expected TPOT at MBU {}", h.mbu),
        &p.expected_tpot,
        &format!("  ({})", p.expected_tokens_per_s.display()),
        explain,
    );
    let _ = writeln!(o, "\nNotes");
    for n in &p.notes {
        let _ = writeln!(o, "  - {n}");
    }
    o
}
