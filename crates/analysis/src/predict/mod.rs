//! What a GPU and model should deliver, from the roofline model alone (docs/simulator.md §3.5):
//! weight bytes, the bandwidth floor, single-stream TPOT, prefill time, KV capacity and the
//! batch where decode turns compute-bound. Every figure is an [`Explained`] carrying its
//! formula and inputs. The step times come from [`Deployment::step_time`] and friends, the
//! very function the simulator charges per step, so prediction and simulation agree by
//! construction.
//!
//! [`predict_raw`] covers hardware outside the catalog from three numbers (bandwidth,
//! parameters, bytes per parameter): weight bytes and the bandwidth floor only.

mod raw;

pub use raw::{predict_raw, RawHardware, RawPrediction};

use serde::Serialize;
use servebench_roofline::{
    kv_capacity, Deployment, Dtype, KvCapacity, KvDtype, KvSizing, SeqWork, StepTime, GIB,
    MAX_SEARCH_BATCH,
};

use crate::{AnalysisError, Explained};

/// Decode batch sizes tabulated by default (docs/simulator.md §3.5's list).
pub const DEFAULT_DECODE_BATCHES: [u32; 8] = [1, 8, 32, 64, 128, 256, 512, 1024];
/// Prompt lengths whose TTFT is predicted by default.
pub const DEFAULT_PROMPT_LENS: [u32; 6] = [128, 512, 1024, 2048, 4096, 8192];
/// Context of the single-stream decode prediction by default.
pub const DEFAULT_CONTEXT: u32 = 1024;

/// What to predict for a catalog deployment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PredictOptions {
    /// Context length of the decode predictions (tokens already in the KV cache).
    pub context: u32,
    /// Prompt lengths whose idle-engine TTFT is predicted.
    pub prompt_lens: Vec<u32>,
    /// Decode batch sizes to tabulate.
    pub decode_batches: Vec<u32>,
    /// KV sizing and scheduler limits (`max_num_batched_tokens` also sets the prefill chunk).
    pub sizing: KvSizing,
    /// The longest request the server accepts (the maximum concurrency is quoted at it).
    pub max_model_len: u32,
}

impl PredictOptions {
    /// vLLM's server defaults for the deployment: gpu_memory_utilization 0.9, block 16, the
    /// GPU class's batch limits, `max_model_len` = the model's maximum, context 1024.
    pub fn defaults(deployment: &Deployment) -> PredictOptions {
        PredictOptions {
            context: DEFAULT_CONTEXT,
            prompt_lens: DEFAULT_PROMPT_LENS.to_vec(),
            decode_batches: DEFAULT_DECODE_BATCHES.to_vec(),
            sizing: KvSizing::server_defaults(deployment),
            max_model_len: deployment.model().max_position_embeddings,
        }
    }
}

/// Predictions for a catalog (or `config.json`) deployment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// GPU id.
    pub gpu: String,
    /// Model id.
    pub model: String,
    /// Weight type.
    pub dtype: Dtype,
    /// KV-cache type.
    pub kv_dtype: KvDtype,
    /// Tensor-parallel degree; per-GPU figures are for one of `tp` GPUs.
    pub tensor_parallel_size: u32,
    /// Whether the GPU's efficiency factors were fitted to measurements.
    pub calibrated: bool,
    /// The step token budget in effect (prefill chunk size).
    pub max_num_batched_tokens: u32,
    /// The sequence limit in effect.
    pub max_num_seqs: u32,
    /// Weight bytes.
    pub weights: WeightFigures,
    /// Bandwidth floor and the bandwidth prediction of TPOT.
    pub bandwidth: BandwidthFigures,
    /// Single-stream decode at [`PredictOptions::context`].
    pub decode: DecodeFigures,
    /// Decode steps at several batch sizes, same context.
    pub decode_batches: Vec<DecodeBatch>,
    /// The smallest decode batch at the context whose step is compute-bound (`t_c ≥ t_m`,
    /// KV reads included); `None` when each request's KV reads cost more time than its
    /// FLOPs, so decode never turns compute-bound (Llama-3.1-8B on H100 beyond ≈ 500 tokens).
    pub compute_bound_batch: Option<Explained>,
    /// The classic ridge point: the smallest batch whose compute time reaches the time to
    /// stream the weights, KV reads ignored. Real decode crosses later, or never.
    pub weights_ridge_batch: Option<Explained>,
    /// Prefill rate and per-prompt TTFT.
    pub prefill: PrefillFigures,
    /// KV bytes and capacity.
    pub kv: KvFigures,
    /// Caveats worth reading beside the numbers.
    pub notes: Vec<String>,
}

/// Weight bytes per GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WeightFigures {
    /// Resident weights `W_res / tp` (bytes held in memory).
    pub resident: Explained,
    /// Weights read by a one-token decode step `W_step / tp`: everything but the input
    /// embedding table, which is gathered row by row.
    pub read_per_step: Explained,
    /// One embedding table `V·d·b_w / tp`.
    pub embedding_table: Explained,
}

/// Bandwidth bounds of a batch-1 decode step, per GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BandwidthFigures {
    /// `W_step / peak_BW`: no decode step can be faster (4.48 ms for Llama-3.1-8B BF16 on H100).
    pub floor: Explained,
    /// `(W_step + V·d·b_w) / peak_BW`: the naive "model size / bandwidth" floor that also
    /// counts the input embedding table (4.79 ms in the same example).
    pub floor_with_embeddings: Explained,
    /// `t_ovh + t_req + W_step / (peak_BW·MBU)`: single-stream TPOT before KV reads.
    pub predicted_tpot: Explained,
    /// Decode tok/s at the floor (`1 / floor`): an upper bound for one stream.
    pub max_tokens_per_s: Explained,
}

/// Single-stream decode at a context.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecodeFigures {
    /// Tokens already in the KV cache.
    pub context: u32,
    /// Expected TPOT: one decode step of one request.
    pub tpot: Explained,
    /// `1 / TPOT`.
    pub tokens_per_s: Explained,
    /// The step's parts.
    pub step: StepTime,
}

/// One row of the decode batch table.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DecodeBatch {
    /// Requests decoding together.
    pub batch: u32,
    /// Step time = TPOT of each request, seconds.
    pub step_s: f64,
    /// `batch / step_s`.
    pub tokens_per_s: f64,
    /// `t_c ≥ t_m`.
    pub compute_bound: bool,
}

/// Prefill on an idle engine.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PrefillFigures {
    /// Prompt tokens per second when every step is a full budget of prefill.
    pub tokens_per_s: Explained,
    /// Per prompt length.
    pub prompts: Vec<PromptFigures>,
}

/// The idle-engine prefill of one prompt length.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PromptFigures {
    /// Prompt tokens.
    pub prompt_len: u32,
    /// Tokens per step (chunks of `max_num_batched_tokens`, the last one smaller).
    pub chunks: Vec<u32>,
    /// Time to first token on an idle engine.
    pub ttft: Explained,
    /// `prompt_len / TTFT`.
    pub tokens_per_s: Explained,
    /// Longer than `max_model_len − 1`: the server would reject it.
    pub exceeds_max_model_len: bool,
}

/// KV-cache bytes and capacity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KvFigures {
    /// `2·L·Hkv·hd·b_kv`, whole model.
    pub bytes_per_token: Explained,
    /// The same on one GPU (`max(1, Hkv/tp)` heads).
    pub bytes_per_token_per_gpu: Explained,
    /// Capacity at the given utilisation, or `None` when no memory is left (see `error`).
    pub capacity: Option<KvCapacityFigures>,
    /// Why there is no capacity, or why `max_model_len` does not fit.
    pub error: Option<String>,
}

/// KV capacity at a `gpu_memory_utilization`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KvCapacityFigures {
    /// The utilisation the capacity is for.
    pub gpu_memory_utilization: f64,
    /// Bytes left for the KV cache per GPU.
    pub available: Explained,
    /// `num_gpu_blocks` (the reserved null block included, as vLLM logs it).
    pub blocks: Explained,
    /// `num_gpu_blocks · block_size` ("GPU KV cache size: N tokens").
    pub tokens: Explained,
    /// The request length the concurrency is quoted at.
    pub max_model_len: u32,
    /// vLLM's "Maximum concurrency for max_model_len tokens per request".
    pub max_concurrency: Explained,
    /// The largest `max_model_len` a lone request can always use.
    pub largest_fitting_max_model_len: u32,
    /// The sizing's details.
    pub detail: KvCapacity,
}

/// Predicts every figure for a catalog deployment.
pub fn predict(
    deployment: &Deployment,
    options: &PredictOptions,
) -> Result<Prediction, AnalysisError> {
    if options.max_model_len == 0 {
        return Err(AnalysisError::Invalid(
            "max_model_len must be at least 1".into(),
        ));
    }
    if let Some(&0) = options.prompt_lens.iter().find(|&&n| n == 0) {
        return Err(AnalysisError::Invalid(
            "prompt lengths must be at least 1 token".into(),
        ));
    }
    if options.sizing.max_num_batched_tokens == 0 || options.sizing.max_num_seqs == 0 {
        return Err(AnalysisError::Invalid(
            "max_num_batched_tokens and max_num_seqs must be at least 1".into(),
        ));
    }
    let inputs = deployment.inputs();
    let mut notes = Vec::new();
    if !deployment.gpu().calibrated {
        notes.push(format!(
            "the MFU/MBU of {} are uncalibrated guesses; expect larger errors than the ±20 % of calibrated GPUs",
            deployment.gpu().id
        ));
    }
    if options.context.saturating_add(1) > options.max_model_len {
        notes.push(format!(
            "context {} is beyond max_model_len {}: the decode figures describe a request the server would not accept",
            options.context, options.max_model_len
        ));
    }
    let weights = weight_figures(deployment);
    let bandwidth = bandwidth_figures(deployment, &weights);
    let decode = decode_figures(deployment, options.context);
    let decode_batches = options
        .decode_batches
        .iter()
        .filter(|&&b| b > 0)
        .map(|&batch| {
            let s = deployment.decode_tpot(options.context, batch);
            DecodeBatch {
                batch,
                step_s: s.total,
                tokens_per_s: f64::from(batch) / s.total,
                compute_bound: s.t_c >= s.t_m,
            }
        })
        .collect();
    let compute_bound_batch = compute_bound_figure(deployment, options.context);
    if compute_bound_batch.is_none() {
        let one = deployment.step_time(&[SeqWork {
            new_tokens: 1,
            context: options.context,
            samples: true,
        }]);
        let kv_s = f64::from(options.context + 1) * deployment.kv_bytes_per_token()
            / deployment.effective_bandwidth();
        notes.push(format!(
            "decode at context {} never turns compute-bound: each request adds {} of KV reads but only {} of compute per step",
            options.context,
            crate::format_quantity(kv_s, "s"),
            crate::format_quantity(one.flops / deployment.effective_flops(), "s"),
        ));
    }
    let weights_ridge_batch = weights_ridge_figure(deployment, options.context);
    let prefill = prefill_figures(deployment, options);
    let kv = kv_figures(deployment, options);
    if deployment.tp() > 1 {
        notes.push(format!(
            "per-GPU figures are for one of {} GPUs; step times include the all-reduces",
            deployment.tp()
        ));
    }
    Ok(Prediction {
        gpu: inputs.gpu,
        model: inputs.model,
        dtype: inputs.dtype,
        kv_dtype: inputs.kv_dtype,
        tensor_parallel_size: inputs.tp,
        calibrated: deployment.gpu().calibrated,
        max_num_batched_tokens: options.sizing.max_num_batched_tokens,
        max_num_seqs: options.sizing.max_num_seqs,
        weights,
        bandwidth,
        decode,
        decode_batches,
        compute_bound_batch,
        weights_ridge_batch,
        prefill,
        kv,
        notes,
    })
}

fn weight_figures(d: &Deployment) -> WeightFigures {
    let i = d.inputs();
    let m = d.model();
    let tp = f64::from(d.tp());
    let b_w = d.dtype().weight_bytes();
    let layers = f64::from(m.num_hidden_layers);
    let resident = Explained::new(i.weights_resident_bytes, "B", "W_res = N_total·b_w / tp")
        .with("N_total", i.n_total, "params")
        .with("b_w", b_w, "B")
        .with("tp", tp, "");
    let read_per_step = match m.moe() {
        Some((e, k, fe)) => Explained::new(
            i.weights_per_step_bytes,
            "B",
            "W_step = b_w·(L·(P_attn + d·E + E_eff·3·d·F_e) + V·d) / tp, E_eff = E·(1 − (1 − k/E)^T) = k at T = 1 token",
        )
        .with("b_w", b_w, "B")
        .with("L", layers, "")
        .with("P_attn", i.p_attn, "params")
        .with("d", f64::from(m.hidden_size), "")
        .with("E", f64::from(e), "")
        .with("k", f64::from(k), "")
        .with("F_e", f64::from(fe), "")
        .with("V·d", i.embedding_params, "params")
        .with("tp", tp, ""),
        None => Explained::new(
            i.weights_per_step_bytes,
            "B",
            "W_step = b_w·(L·(P_attn + P_mlp) + V·d) / tp (all weights but the input embedding table)",
        )
        .with("b_w", b_w, "B")
        .with("L", layers, "")
        .with("P_attn", i.p_attn, "params")
        .with("P_mlp", i.p_mlp_total, "params")
        .with("V·d", i.embedding_params, "params")
        .with("tp", tp, ""),
    };
    let embedding_table = Explained::new(m.embedding_bytes(d.dtype()) / tp, "B", "V·d·b_w / tp")
        .with("V·d", i.embedding_params, "params")
        .with("b_w", b_w, "B")
        .with("tp", tp, "");
    WeightFigures {
        resident,
        read_per_step,
        embedding_table,
    }
}

fn bandwidth_figures(d: &Deployment, w: &WeightFigures) -> BandwidthFigures {
    let f = d.bandwidth_floor();
    let i = d.inputs();
    let floor = Explained::new(f.floor_s, "s", "W_step / peak_BW")
        .with("W_step", f.weights_per_step_bytes, "B")
        .with("peak_BW", f.peak_bandwidth, "B/s");
    let floor_with_embeddings = Explained::new(
        f.floor_with_embeddings_s,
        "s",
        "(W_step + V·d·b_w/tp) / peak_BW (also counts the input embedding table, as \"model size / bandwidth\" does)",
    )
    .with("W_step", f.weights_per_step_bytes, "B")
    .with("V·d·b_w/tp", w.embedding_table.value, "B")
    .with("peak_BW", f.peak_bandwidth, "B/s");
    let predicted_tpot = Explained::new(
        f.predicted_tpot_s,
        "s",
        "t_ovh + t_req + W_step / (peak_BW·MBU), t_ovh = max(t_fixed + L·t_layer, t_cpu_floor)",
    )
    .with("t_fixed", i.t_fixed_s, "s")
    .with("L·t_layer", i.t_layers_s, "s")
    .with("t_cpu_floor", i.t_cpu_floor_s, "s")
    .with("t_ovh", i.t_ovh_s, "s")
    .with("t_req", i.t_req_s, "s")
    .with("W_step", f.weights_per_step_bytes, "B")
    .with("peak_BW", f.peak_bandwidth, "B/s")
    .with("MBU", i.mbu, "");
    let max_tokens_per_s = Explained::new(1.0 / f.floor_s, "tok/s", "1 / (W_step / peak_BW)").with(
        "W_step / peak_BW",
        f.floor_s,
        "s",
    );
    BandwidthFigures {
        floor,
        floor_with_embeddings,
        predicted_tpot,
        max_tokens_per_s,
    }
}

/// Explains a step: the combination formula with every part as an input.
fn explain_step(value: f64, unit: &str, formula: &str, d: &Deployment, s: &StepTime) -> Explained {
    let i = d.inputs();
    let mut e = Explained::new(value, unit, formula)
        .with("FLOPs", s.flops, "FLOP")
        .with("peak·MFU", d.effective_flops(), "FLOP/s")
        .with("t_c = FLOPs / (peak·MFU)", s.t_c, "s")
        .with("Bytes", s.bytes, "B")
        .with("BW·MBU", d.effective_bandwidth(), "B/s")
        .with("t_m = Bytes / (BW·MBU)", s.t_m, "s")
        .with("p", i.softroof_p, "")
        .with("t_gpu = (t_c^p + t_m^p)^(1/p)", s.t_gpu, "s")
        .with("t_ovh", s.t_ovh, "s")
        .with("n_req·t_req", s.t_req, "s");
    if d.tp() > 1 {
        e = e.with("t_ar", s.t_ar, "s");
    }
    e
}

const STEP_FORMULA: &str = "t_step = t_ovh + n_req·t_req + t_gpu + t_ar";

fn decode_figures(d: &Deployment, context: u32) -> DecodeFigures {
    let step = d.decode_tpot(context, 1);
    let formula = format!(
        "{STEP_FORMULA}, one request (q = 1, c = {context}): FLOPs = (2·N_lin + 2·V·d + 4·L·H·hd·(c + 1)) / tp, Bytes = W_step + (c + 1)·kv_bpt_gpu"
    );
    let tpot =
        explain_step(step.total, "s", &formula, d, &step).with("c", f64::from(context), "tokens");
    let tokens_per_s =
        Explained::new(1.0 / step.total, "tok/s", "1 / TPOT").with("TPOT", step.total, "s");
    DecodeFigures {
        context,
        tpot,
        tokens_per_s,
        step,
    }
}

fn compute_bound_figure(d: &Deployment, context: u32) -> Option<Explained> {
    let b = d.compute_bound_batch(context)?;
    let at = d.decode_tpot(context, b);
    let below = d.decode_tpot(context, b.saturating_sub(1).max(1));
    let mut e = Explained::new(
        f64::from(b),
        "requests",
        "smallest decode batch B at context c with t_c(B) ≥ t_m(B)",
    )
    .with("c", f64::from(context), "tokens")
    .with("t_c(B)", at.t_c, "s")
    .with("t_m(B)", at.t_m, "s");
    if b > 1 {
        e = e
            .with("t_c(B − 1)", below.t_c, "s")
            .with("t_m(B − 1)", below.t_m, "s");
    }
    Some(e)
}

/// The smallest batch `B` whose decode FLOPs time `B·t_c(1)` reaches the weight streaming
/// time `W_step(B) / (BW·MBU)`; `None` beyond [`MAX_SEARCH_BATCH`].
fn weights_ridge_figure(d: &Deployment, context: u32) -> Option<Explained> {
    let t_c1 = d.decode_tpot(context, 1).t_c;
    let weights_s = |b: u32| d.weights_per_step_bytes(u64::from(b)) / d.effective_bandwidth();
    let reached = |b: u32| f64::from(b) * t_c1 >= weights_s(b);
    let mut hi = 1u32;
    while !reached(hi) {
        if hi >= MAX_SEARCH_BATCH {
            return None;
        }
        hi *= 2;
    }
    let mut lo = hi / 2;
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if reached(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(
        Explained::new(
            f64::from(hi),
            "requests",
            "smallest B with B·t_c(1) ≥ W_step(B) / (BW·MBU): compute catches up with weight streaming, KV reads ignored",
        )
        .with("c", f64::from(context), "tokens")
        .with("t_c(1)", t_c1, "s")
        .with("W_step(B) / (BW·MBU)", weights_s(hi), "s"),
    )
}

fn prefill_figures(d: &Deployment, o: &PredictOptions) -> PrefillFigures {
    let budget = o.sizing.max_num_batched_tokens;
    let full = d.step_time(&[SeqWork {
        new_tokens: budget,
        context: 0,
        samples: true,
    }]);
    let tokens_per_s = Explained::new(
        f64::from(budget) / full.total,
        "tok/s",
        "max_num_batched_tokens / t_step(one prompt of max_num_batched_tokens tokens, idle engine)",
    )
    .with("max_num_batched_tokens", f64::from(budget), "tokens")
    .with("t_step", full.total, "s");
    let prompts = o
        .prompt_lens
        .iter()
        .map(|&n| {
            let est = d.prefill_time(n, budget);
            let mut ttft = Explained::new(
                est.total_s,
                "s",
                format!(
                    "Σ over ceil(n / max_num_batched_tokens) steps of t_step(chunk on the context of the chunks before it); \
                     the last step samples the first token ({STEP_FORMULA})"
                ),
            )
            .with("n", f64::from(n), "tokens")
            .with("max_num_batched_tokens", f64::from(budget), "tokens")
            .with("steps", est.steps.len() as f64, "");
            if let (Some(first), Some(last)) = (est.steps.first(), est.steps.last()) {
                ttft = ttft
                    .with("t_c (first step)", first.t_c, "s")
                    .with("t_m (first step)", first.t_m, "s")
                    .with("t_step (first)", first.total, "s");
                if est.steps.len() > 1 {
                    ttft = ttft.with("t_step (last)", last.total, "s");
                }
            }
            let rate = Explained::new(f64::from(n) / est.total_s, "tok/s", "n / TTFT")
                .with("n", f64::from(n), "tokens")
                .with("TTFT", est.total_s, "s");
            PromptFigures {
                prompt_len: n,
                chunks: est.chunk_tokens,
                ttft,
                tokens_per_s: rate,
                exceeds_max_model_len: n >= o.max_model_len,
            }
        })
        .collect();
    PrefillFigures {
        tokens_per_s,
        prompts,
    }
}

fn kv_figures(d: &Deployment, o: &PredictOptions) -> KvFigures {
    let m = d.model();
    let layers = f64::from(m.num_hidden_layers);
    let hd = f64::from(m.head_dim());
    let b_kv = d.kv_dtype().bytes();
    let bytes_per_token = Explained::new(
        m.kv_bytes_per_token(d.kv_dtype()),
        "B",
        "kv_bpt = 2·L·Hkv·hd·b_kv",
    )
    .with("L", layers, "")
    .with("Hkv", f64::from(m.num_key_value_heads), "")
    .with("hd", hd, "")
    .with("b_kv", b_kv, "B");
    let bytes_per_token_per_gpu = Explained::new(
        d.kv_bytes_per_token(),
        "B",
        "kv_bpt_gpu = 2·L·max(1, Hkv/tp)·hd·b_kv",
    )
    .with("L", layers, "")
    .with("Hkv_gpu", f64::from(m.kv_heads_per_gpu(d.tp())), "")
    .with("hd", hd, "")
    .with("b_kv", b_kv, "B");
    let (capacity, error) = match kv_capacity(d, &o.sizing) {
        Ok(cap) => {
            let error = cap
                .check_max_model_len(o.max_model_len)
                .err()
                .map(|e| e.to_string());
            (Some(capacity_figures(d, o, &cap)), error)
        }
        Err(e) => (None, Some(e.to_string())),
    };
    KvFigures {
        bytes_per_token,
        bytes_per_token_per_gpu,
        capacity,
        error,
    }
}

fn capacity_figures(d: &Deployment, o: &PredictOptions, cap: &KvCapacity) -> KvCapacityFigures {
    let usable_gib = o
        .sizing
        .gpu_memory_gib_override
        .unwrap_or(d.gpu().usable_gib);
    let m = d.model();
    let available = Explained::new(
        cap.avail_bytes,
        "B",
        "avail = usable·gmu − W_res/tp − act_peak − non_torch, act_peak = max_num_batched_tokens·(4d + 2·F_act)·2 B + max_num_seqs·V·4 B",
    )
    .with("usable", usable_gib * GIB, "B")
    .with("gmu", o.sizing.gpu_memory_utilization, "")
    .with("W_res/tp", cap.weights_bytes, "B")
    .with("max_num_batched_tokens", f64::from(o.sizing.max_num_batched_tokens), "tokens")
    .with("max_num_seqs", f64::from(o.sizing.max_num_seqs), "")
    .with("d", f64::from(m.hidden_size), "")
    .with("F_act", m.f_act(), "")
    .with("V", f64::from(m.vocab_size), "")
    .with("act_peak", cap.activation_bytes, "B")
    .with("non_torch", cap.non_torch_bytes, "B");
    let blocks = if cap.overridden {
        Explained::new(
            f64::from(cap.num_gpu_blocks),
            "blocks",
            "num_gpu_blocks = --num-gpu-blocks-override",
        )
    } else {
        Explained::new(
            f64::from(cap.num_gpu_blocks),
            "blocks",
            "num_gpu_blocks = floor(avail / (block_size·kv_bpt_gpu))",
        )
        .with("avail", cap.avail_bytes, "B")
        .with("block_size", f64::from(cap.block_size), "tokens")
        .with("kv_bpt_gpu", d.kv_bytes_per_token(), "B")
    };
    let tokens = Explained::new(cap.tokens as f64, "tokens", "num_gpu_blocks · block_size")
        .with("num_gpu_blocks", f64::from(cap.num_gpu_blocks), "blocks")
        .with("block_size", f64::from(cap.block_size), "tokens");
    let per_request = u64::from(o.max_model_len).div_ceil(u64::from(cap.block_size.max(1)));
    let max_concurrency = Explained::new(
        cap.max_concurrency_at(o.max_model_len),
        "×",
        "num_gpu_blocks / ceil(max_model_len / block_size) (vLLM's \"Maximum concurrency for max_model_len tokens per request\")",
    )
    .with("num_gpu_blocks", f64::from(cap.num_gpu_blocks), "blocks")
    .with("max_model_len", f64::from(o.max_model_len), "tokens")
    .with("blocks per request", per_request as f64, "blocks");
    KvCapacityFigures {
        gpu_memory_utilization: o.sizing.gpu_memory_utilization,
        available,
        blocks,
        tokens,
        max_model_len: o.max_model_len,
        max_concurrency,
        largest_fitting_max_model_len: cap.largest_fitting_max_model_len(),
        detail: *cap,
    }
}

/// The prediction for either kind of input, as `servebench predict` prints it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum PredictReport {
    /// A catalog GPU and a model shape: every figure.
    Catalog(Box<Prediction>),
    /// Bandwidth and parameter count only.
    Raw(Box<RawPrediction>),
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
