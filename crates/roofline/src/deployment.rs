//! A resolved deployment and the step-time model (docs/simulator.md §3.2–3.3).

use serde::Serialize;
use servebench_metrics::units::us_to_s;

use crate::{Dtype, GpuSpec, KvDtype, ModelSpec, RooflineError, SeqWork, StepTime};

/// Default soft-roofline exponent (§3.3).
pub const DEFAULT_SOFTROOF_P: f64 = 1.5;
/// Default fixed per-step overhead, µs (scheduler, input preparation).
pub const DEFAULT_STEP_OVERHEAD_US: f64 = 126.0;
/// Default per-layer overhead, µs (kernel launch / graph replay).
pub const DEFAULT_LAYER_OVERHEAD_US: f64 = 32.0;
/// Default per-planned-request overhead, µs.
pub const DEFAULT_REQ_OVERHEAD_US: f64 = 4.0;
/// CPU floor of a step for small models, µs (HTTP, scheduling, detokenisation).
pub const SMALL_MODEL_CPU_FLOOR_US: f64 = 2500.0;
/// Models with fewer total parameters than this get [`SMALL_MODEL_CPU_FLOOR_US`].
pub const SMALL_MODEL_PARAMS: f64 = 2e9;
/// Default latency of one all-reduce, µs.
pub const DEFAULT_ALLREDUCE_LATENCY_US: f64 = 5.0;

/// Efficiency factors in effect (§3.4).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Efficiency {
    /// Whole-model MFU at BF16.
    pub mfu: f64,
    /// Whole-model MFU at FP8 (used only when the FP8 peak applies).
    pub mfu_fp8: f64,
    /// Memory-bandwidth utilisation.
    pub mbu: f64,
    /// Soft-roofline exponent `p` (∞ = `max`).
    pub softroof_p: f64,
    /// Bandwidth utilisation of KV-cache reads; `None` = `mbu`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mbu_kv: Option<f64>,
}

/// Overheads in effect (§3.3), in µs except the link bandwidth.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Overheads {
    /// `t_fixed`.
    pub step_overhead_us: f64,
    /// `t_layer`.
    pub layer_overhead_us: f64,
    /// `t_req`.
    pub req_overhead_us: f64,
    /// `t_cpu_floor` (resolved: 2500 for models under 2 B parameters unless overridden).
    pub cpu_floor_us: f64,
    /// `α` of one all-reduce.
    pub allreduce_latency_us: f64,
    /// Effective all-reduce bandwidth, GB/s.
    pub link_gbps: f64,
    /// Latency of one tree step of an all-reduce, µs: `2·log2(tp)` steps are added to `α`
    /// (0 = one-shot all-reduce, `α` only).
    #[serde(skip_serializing_if = "is_zero")]
    pub allreduce_step_us: f64,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

/// Per-step constants derived once, so `step_time` is a handful of multiplications.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Coefficients {
    /// `2·N_lin / tp`: FLOPs per new token.
    flops_per_token: f64,
    /// `2·V·d / tp`: FLOPs per sampling row.
    flops_per_sample: f64,
    /// `4·L·H·hd / tp`: attention FLOPs per `q·(c + (q+1)/2)`.
    attn_flops: f64,
    /// Per-GPU weight bytes read per step, dense part (everything but routed experts).
    weight_bytes_fixed: f64,
    /// Per-GPU bytes of one expert across all layers (0 for dense models).
    weight_bytes_per_expert: f64,
    /// `(E, 1 − k/E)` of a MoE model.
    moe: Option<(f64, f64)>,
    /// Per-GPU KV bytes per token.
    kv_bytes_per_token: f64,
    /// `peak_flops · MFU`, FLOP/s.
    flops_rate: f64,
    /// `peak_BW · MBU`, B/s.
    bytes_rate: f64,
    /// `peak_BW · MBU_kv`, B/s, when KV reads have their own efficiency.
    kv_bytes_rate: Option<f64>,
    /// Seconds.
    t_fixed: f64,
    t_layers: f64,
    t_req: f64,
    t_cpu_floor: f64,
    /// `2·L·α` when `tp > 1`, else 0.
    t_ar_latency: f64,
    /// Seconds of all-reduce per token: `2·L · 2·(tp−1)/tp · 2·d / link_BW`.
    t_ar_per_token: f64,
}

/// A resolved GPU × model × dtype × tensor-parallel deployment with its efficiency and
/// overhead parameters: everything `step_time` needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Deployment {
    gpu: GpuSpec,
    model: ModelSpec,
    dtype: Dtype,
    kv_dtype: KvDtype,
    tp: u32,
    efficiency: Efficiency,
    overheads: Overheads,
    async_scheduling: bool,
    coef: Coefficients,
    /// Batch sizes with a captured CUDA graph, ascending; empty = no padding.
    graph_sizes: Vec<u32>,
}

/// Builds a [`Deployment`]; every efficiency and overhead defaults as §3.3–3.4 say. Setters
/// take `impl Into<Option<f64>>`, so a CLI's `Option` passes through unchanged (`None` keeps
/// the default).
#[derive(Debug, Clone)]
pub struct DeploymentBuilder {
    gpu: GpuSpec,
    model: ModelSpec,
    dtype: Dtype,
    kv_dtype: KvDtype,
    tp: u32,
    mfu: Option<f64>,
    mfu_fp8: Option<f64>,
    mbu: Option<f64>,
    mbu_kv: Option<f64>,
    softroof_p: Option<f64>,
    step_overhead_us: Option<f64>,
    layer_overhead_us: Option<f64>,
    req_overhead_us: Option<f64>,
    cpu_floor_us: Option<f64>,
    allreduce_latency_us: Option<f64>,
    link_gbps: Option<f64>,
    allreduce_step_us: Option<f64>,
    async_scheduling: bool,
    graph_sizes: Vec<u32>,
}

macro_rules! option_setters {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(mut self, value: impl Into<Option<f64>>) -> Self {
            if let Some(v) = value.into() {
                self.$name = Some(v);
            }
            self
        }
    )*};
}

impl DeploymentBuilder {
    /// Weight and activation type (default BF16).
    pub fn dtype(mut self, dtype: Dtype) -> Self {
        self.dtype = dtype;
        self
    }

    /// KV-cache type (default `auto`).
    pub fn kv_dtype(mut self, kv_dtype: KvDtype) -> Self {
        self.kv_dtype = kv_dtype;
        self
    }

    /// Tensor-parallel degree (default 1).
    pub fn tensor_parallel(mut self, tp: u32) -> Self {
        self.tp = tp;
        self
    }

    /// Overlap CPU work with the GPU (`--async-scheduling`).
    pub fn async_scheduling(mut self, on: bool) -> Self {
        self.async_scheduling = on;
        self
    }

    /// Batch sizes with a captured CUDA graph: a pure-decode step of `n` sequences runs the
    /// graph of the smallest captured size ≥ `n`, so its linear layers (and all-reduces) work
    /// on the padded batch. Empty (the default) = no padding.
    pub fn cuda_graph_sizes(mut self, sizes: Vec<u32>) -> Self {
        self.graph_sizes = sizes;
        self
    }

    option_setters!(
        /// Whole-model BF16 MFU (default: the GPU's).
        mfu,
        /// Whole-model FP8 MFU (default: the GPU's, else 0.7 × the BF16 MFU in effect).
        mfu_fp8,
        /// Memory-bandwidth utilisation (default: the GPU's).
        mbu,
        /// Bandwidth utilisation of KV-cache reads (default: the GPU's `mbu_kv`, else `mbu`).
        mbu_kv,
        /// Soft-roofline exponent (default 1.5; `f64::INFINITY` = plain `max`).
        softroof_p,
        /// `t_fixed`, µs (default 126).
        step_overhead_us,
        /// `t_layer`, µs (default 32).
        layer_overhead_us,
        /// `t_req`, µs (default 4).
        req_overhead_us,
        /// `t_cpu_floor`, µs (default 2500 for models under 2 B parameters, else 0).
        cpu_floor_us,
        /// All-reduce latency `α`, µs (default 5).
        allreduce_latency_us,
        /// All-reduce bandwidth, GB/s (default: the GPU's `link_gbps`).
        link_gbps,
        /// Latency of one tree step of an all-reduce, µs (default: the GPU's
        /// `allreduce_step_us`, else 0).
        allreduce_step_us,
    );

    /// Validates and resolves the deployment.
    pub fn build(self) -> Result<Deployment, RooflineError> {
        self.gpu.validate()?;
        self.model.validate()?;
        let tp = self.tp;
        let m = &self.model;
        if tp == 0 {
            return Err(RooflineError::Invalid(
                "tensor_parallel_size must be at least 1".into(),
            ));
        }
        // vLLM's rule: query heads split evenly; KV heads split evenly or are replicated.
        if m.num_attention_heads % tp != 0 {
            return Err(RooflineError::Invalid(format!(
                "tensor_parallel_size {tp} does not divide the {} attention heads of {}",
                m.num_attention_heads, m.id
            )));
        }
        let hkv = m.num_key_value_heads;
        if hkv % tp != 0 && tp % hkv != 0 {
            return Err(RooflineError::Invalid(format!(
                "tensor_parallel_size {tp} and the {hkv} KV heads of {} must divide one another",
                m.id
            )));
        }

        let mfu = self.mfu.unwrap_or(self.gpu.mfu_bf16);
        let efficiency = Efficiency {
            mfu,
            mfu_fp8: self.mfu_fp8.or(self.gpu.mfu_fp8).unwrap_or(0.7 * mfu),
            mbu: self.mbu.unwrap_or(self.gpu.mbu),
            softroof_p: self.softroof_p.unwrap_or(DEFAULT_SOFTROOF_P),
            mbu_kv: self.mbu_kv.or(self.gpu.mbu_kv),
        };
        for (name, v) in [
            ("mfu", efficiency.mfu),
            ("mfu_fp8", efficiency.mfu_fp8),
            ("mbu", efficiency.mbu),
            ("mbu_kv", efficiency.mbu_kv.unwrap_or(efficiency.mbu)),
        ] {
            if !(v > 0.0 && v <= 1.0) {
                return Err(RooflineError::Invalid(format!(
                    "{name} must be in (0, 1], got {v}"
                )));
            }
        }
        if efficiency.softroof_p.is_nan() || efficiency.softroof_p < 1.0 {
            return Err(RooflineError::Invalid(format!(
                "softroof_p must be at least 1 (1 = sum, infinity = max), got {}",
                efficiency.softroof_p
            )));
        }

        let overheads = Overheads {
            step_overhead_us: self.step_overhead_us.unwrap_or(DEFAULT_STEP_OVERHEAD_US),
            layer_overhead_us: self.layer_overhead_us.unwrap_or(DEFAULT_LAYER_OVERHEAD_US),
            req_overhead_us: self.req_overhead_us.unwrap_or(DEFAULT_REQ_OVERHEAD_US),
            cpu_floor_us: self
                .cpu_floor_us
                .unwrap_or(if m.n_total() < SMALL_MODEL_PARAMS {
                    SMALL_MODEL_CPU_FLOOR_US
                } else {
                    0.0
                }),
            allreduce_latency_us: self
                .allreduce_latency_us
                .unwrap_or(DEFAULT_ALLREDUCE_LATENCY_US),
            link_gbps: self.link_gbps.unwrap_or(self.gpu.link_gbps),
            allreduce_step_us: self
                .allreduce_step_us
                .or(self.gpu.allreduce_step_us)
                .unwrap_or(0.0),
        };
        for (name, v) in [
            ("step_overhead_us", overheads.step_overhead_us),
            ("layer_overhead_us", overheads.layer_overhead_us),
            ("req_overhead_us", overheads.req_overhead_us),
            ("cpu_floor_us", overheads.cpu_floor_us),
            ("allreduce_latency_us", overheads.allreduce_latency_us),
            ("allreduce_step_us", overheads.allreduce_step_us),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(RooflineError::Invalid(format!(
                    "{name} must be a non-negative number, got {v}"
                )));
            }
        }
        if !(overheads.link_gbps.is_finite() && overheads.link_gbps > 0.0) {
            return Err(RooflineError::Invalid(format!(
                "link_gbps must be positive, got {}",
                overheads.link_gbps
            )));
        }

        let coef = coefficients(
            &self.gpu,
            m,
            self.dtype,
            self.kv_dtype,
            tp,
            &efficiency,
            &overheads,
        );
        Ok(Deployment {
            gpu: self.gpu,
            model: self.model,
            dtype: self.dtype,
            kv_dtype: self.kv_dtype,
            tp,
            efficiency,
            overheads,
            async_scheduling: self.async_scheduling,
            coef,
            graph_sizes: {
                let mut sizes = self.graph_sizes;
                sizes.retain(|&n| n > 0);
                sizes.sort_unstable();
                sizes.dedup();
                sizes
            },
        })
    }
}

impl DeploymentBuilder {
    /// The deployment a builder describes, for checking a calibration profile against it.
    pub(crate) fn target(&self) -> (&GpuSpec, &ModelSpec, Dtype, u32) {
        (&self.gpu, &self.model, self.dtype, self.tp)
    }
}

fn coefficients(
    gpu: &GpuSpec,
    m: &ModelSpec,
    dtype: Dtype,
    kv_dtype: KvDtype,
    tp: u32,
    eff: &Efficiency,
    ovh: &Overheads,
) -> Coefficients {
    let tpf = f64::from(tp);
    let (layers, d) = (f64::from(m.num_hidden_layers), f64::from(m.hidden_size));
    let bw = dtype.weight_bytes();
    let (weight_bytes_fixed, weight_bytes_per_expert, moe) = match m.moe() {
        Some((e, k, fe)) => {
            let e = f64::from(e);
            let router = d * e;
            (
                bw * (layers * (m.p_attn() + router) + m.embedding_params()) / tpf,
                bw * layers * 3.0 * d * f64::from(fe) / tpf,
                Some((e, 1.0 - f64::from(k) / e)),
            )
        }
        None => (
            bw * (m.layer_params() + m.embedding_params()) / tpf,
            0.0,
            None,
        ),
    };
    let fp8_compute = uses_fp8_peak(gpu, dtype);
    let (peak_tflops, mfu) = match (fp8_compute, gpu.fp8_tflops) {
        (true, Some(fp8)) => (fp8, eff.mfu_fp8),
        _ => (gpu.bf16_tflops, eff.mfu),
    };
    let (t_ar_latency, t_ar_per_token) = if tp > 1 {
        let link = ovh.link_gbps * 1e9;
        (
            // A tree all-reduce (NCCL's choice for small messages) goes up and down a tree of
            // depth log2(tp); a one-shot all-reduce has `allreduce_step_us` 0.
            us_to_s(
                2.0 * layers
                    * (ovh.allreduce_latency_us + 2.0 * tpf.log2() * ovh.allreduce_step_us),
            ),
            2.0 * layers * 2.0 * (tpf - 1.0) / tpf * 2.0 * d / link,
        )
    } else {
        (0.0, 0.0)
    };
    Coefficients {
        flops_per_token: 2.0 * m.n_lin() / tpf,
        flops_per_sample: 2.0 * m.embedding_params() / tpf,
        attn_flops: 4.0 * layers * f64::from(m.num_attention_heads) * f64::from(m.head_dim()) / tpf,
        weight_bytes_fixed,
        weight_bytes_per_expert,
        moe,
        kv_bytes_per_token: m.kv_bytes_per_token_per_gpu(kv_dtype, tp),
        flops_rate: peak_tflops * 1e12 * mfu,
        bytes_rate: gpu.mem_bw_tbps * 1e12 * eff.mbu,
        kv_bytes_rate: eff.mbu_kv.map(|m| gpu.mem_bw_tbps * 1e12 * m),
        t_fixed: us_to_s(ovh.step_overhead_us),
        t_layers: us_to_s(layers * ovh.layer_overhead_us),
        t_req: us_to_s(ovh.req_overhead_us),
        t_cpu_floor: us_to_s(ovh.cpu_floor_us),
        t_ar_latency,
        t_ar_per_token,
    }
}

/// The FP8 peak applies only when weights and activations are FP8 and the GPU has FP8 tensor
/// cores; FP8 elsewhere is weight-only (§3.3).
pub(crate) fn uses_fp8_peak(gpu: &GpuSpec, dtype: Dtype) -> bool {
    dtype == Dtype::Fp8 && gpu.has_fp8()
}

impl Deployment {
    /// Starts a builder with every default of §3.3–3.4: BF16, `auto` KV cache, tp 1.
    pub fn builder(gpu: GpuSpec, model: ModelSpec) -> DeploymentBuilder {
        DeploymentBuilder {
            gpu,
            model,
            dtype: Dtype::Bf16,
            kv_dtype: KvDtype::Auto,
            tp: 1,
            mfu: None,
            mfu_fp8: None,
            mbu: None,
            mbu_kv: None,
            softroof_p: None,
            step_overhead_us: None,
            layer_overhead_us: None,
            req_overhead_us: None,
            cpu_floor_us: None,
            allreduce_latency_us: None,
            link_gbps: None,
            allreduce_step_us: None,
            async_scheduling: false,
            graph_sizes: Vec::new(),
        }
    }

    /// A deployment with default efficiencies and overheads.
    pub fn new(
        gpu: GpuSpec,
        model: ModelSpec,
        dtype: Dtype,
        kv_dtype: KvDtype,
        tp: u32,
    ) -> Result<Deployment, RooflineError> {
        Deployment::builder(gpu, model)
            .dtype(dtype)
            .kv_dtype(kv_dtype)
            .tensor_parallel(tp)
            .build()
    }

    /// The GPU (one of `tp` identical ones).
    pub fn gpu(&self) -> &GpuSpec {
        &self.gpu
    }

    /// The model.
    pub fn model(&self) -> &ModelSpec {
        &self.model
    }

    /// Weight and activation type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// KV-cache type.
    pub fn kv_dtype(&self) -> KvDtype {
        self.kv_dtype
    }

    /// Tensor-parallel degree.
    pub fn tp(&self) -> u32 {
        self.tp
    }

    /// Efficiency factors in effect.
    pub fn efficiency(&self) -> &Efficiency {
        &self.efficiency
    }

    /// Overheads in effect.
    pub fn overheads(&self) -> &Overheads {
        &self.overheads
    }

    /// Batch sizes with a captured CUDA graph (ascending; empty = no padding).
    pub fn cuda_graph_sizes(&self) -> &[u32] {
        &self.graph_sizes
    }

    /// Tokens a step of `tokens` tokens over `requests` sequences actually computes: a
    /// pure-decode batch (one token per sequence) no larger than the largest captured graph
    /// is padded up to the next captured size.
    pub fn padded_tokens(&self, tokens: u64, requests: u64) -> u64 {
        if tokens != requests {
            return tokens;
        }
        self.graph_sizes
            .iter()
            .map(|&n| u64::from(n))
            .find(|&n| n >= tokens)
            .unwrap_or(tokens)
    }

    /// Whether CPU work overlaps the GPU.
    pub fn async_scheduling(&self) -> bool {
        self.async_scheduling
    }

    /// Does the FP8 tensor-core peak apply?
    pub fn uses_fp8_peak(&self) -> bool {
        uses_fp8_peak(&self.gpu, self.dtype)
    }

    /// `peak_flops` in effect, FLOP/s (FP8 or BF16 per §3.3).
    pub fn peak_flops(&self) -> f64 {
        match (self.uses_fp8_peak(), self.gpu.fp8_tflops) {
            (true, Some(fp8)) => fp8 * 1e12,
            _ => self.gpu.bf16_tflops * 1e12,
        }
    }

    /// The MFU paired with [`Deployment::peak_flops`].
    pub fn mfu_in_effect(&self) -> f64 {
        if self.uses_fp8_peak() {
            self.efficiency.mfu_fp8
        } else {
            self.efficiency.mfu
        }
    }

    /// `peak_flops · MFU`, FLOP/s per GPU.
    pub fn effective_flops(&self) -> f64 {
        self.coef.flops_rate
    }

    /// Peak memory bandwidth, B/s per GPU.
    pub fn peak_bandwidth(&self) -> f64 {
        self.gpu.mem_bw_tbps * 1e12
    }

    /// `peak_BW · MBU`, B/s per GPU.
    pub fn effective_bandwidth(&self) -> f64 {
        self.coef.bytes_rate
    }

    /// `t_ovh = max(t_fixed + L·t_layer, t_cpu_floor)`, seconds.
    pub fn t_ovh(&self) -> f64 {
        (self.coef.t_fixed + self.coef.t_layers).max(self.coef.t_cpu_floor)
    }

    /// `W_res` per GPU: `N_total·b_w / tp`.
    pub fn weights_resident_bytes(&self) -> f64 {
        self.model.weights_resident_bytes(self.dtype) / f64::from(self.tp)
    }

    /// `W_step` per GPU for a step of `tokens` (MoE-aware): whole-model `W_step / tp`.
    pub fn weights_per_step_bytes(&self, tokens: u64) -> f64 {
        let c = &self.coef;
        match c.moe {
            Some((e, miss)) => {
                let e_eff = e * (1.0 - miss.powf(tokens as f64));
                c.weight_bytes_fixed + e_eff * c.weight_bytes_per_expert
            }
            None => c.weight_bytes_fixed,
        }
    }

    /// KV bytes per token on one GPU (`Hkv_gpu = max(1, Hkv/tp)` heads).
    pub fn kv_bytes_per_token(&self) -> f64 {
        self.coef.kv_bytes_per_token
    }

    /// Time of one engine step for this plan (before jitter). FLOPs and bytes in the result
    /// are per GPU. An empty plan is no step: everything is zero.
    pub fn step_time(&self, plan: &[SeqWork]) -> StepTime {
        let mut totals = StepTotals::default();
        for w in plan {
            totals.add(w.new_tokens, w.context, w.samples, 1);
        }
        self.time_of(&totals)
    }

    /// The step time of aggregated work; `step_time` and the predictions share it.
    pub(crate) fn time_of(&self, w: &StepTotals) -> StepTime {
        if w.requests == 0 {
            return StepTime::default();
        }
        let c = &self.coef;
        // Padding rows of a captured graph run through the linear layers and all-reduces but
        // read no KV and sample nothing.
        let tokens = self.padded_tokens(w.tokens, w.requests) as f64;
        let flops = c.flops_per_token * tokens
            + c.flops_per_sample * w.samples as f64
            + c.attn_flops * w.attn;
        let bytes =
            self.weights_per_step_bytes(w.tokens) + c.kv_bytes_per_token * w.kv_tokens as f64;
        let t_c = flops / c.flops_rate;
        let t_m = match c.kv_bytes_rate {
            // Weights stream through the GEMMs, KV through the attention kernels: each at
            // its own efficiency.
            Some(kv_rate) => {
                self.weights_per_step_bytes(w.tokens) / c.bytes_rate
                    + c.kv_bytes_per_token * w.kv_tokens as f64 / kv_rate
            }
            None => bytes / c.bytes_rate,
        };
        let t_gpu = soft_roofline(t_c, t_m, self.efficiency.softroof_p);
        let t_ar = if self.tp > 1 {
            c.t_ar_latency + c.t_ar_per_token * tokens
        } else {
            0.0
        };
        let t_ovh = (c.t_fixed + c.t_layers).max(c.t_cpu_floor);
        let t_req = c.t_req * w.requests as f64;
        let total = if self.async_scheduling {
            (c.t_fixed.max(c.t_cpu_floor) + t_req).max(c.t_layers + t_gpu + t_ar)
        } else {
            t_ovh + t_req + t_gpu + t_ar
        };
        StepTime {
            total,
            t_c,
            t_m,
            t_gpu,
            t_ar,
            t_ovh,
            t_req,
            flops,
            bytes,
        }
    }
}

/// A plan reduced to the sums the step-time formula needs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct StepTotals {
    /// `T = Σ q_i`.
    pub(crate) tokens: u64,
    /// `n_s`.
    pub(crate) samples: u64,
    /// `Σ q_i·(c_i + (q_i + 1)/2)`.
    pub(crate) attn: f64,
    /// `Σ (c_i + q_i)`: KV tokens read or written.
    pub(crate) kv_tokens: u64,
    /// `n_req`.
    pub(crate) requests: u64,
}

impl StepTotals {
    /// Adds `count` identical requests of `q` new tokens on context `c`.
    pub(crate) fn add(&mut self, q: u32, c: u32, samples: bool, count: u64) {
        let (q, c) = (u64::from(q), u64::from(c));
        self.tokens += q * count;
        if samples {
            self.samples += count;
        }
        // q·(c + (q+1)/2) = q·(2c + q + 1)/2; f64 is exact here up to 2^53 and cannot overflow.
        self.attn += q as f64 * (2 * c + q + 1) as f64 * 0.5 * count as f64;
        self.kv_tokens += (c + q) * count;
        self.requests += count;
    }
}

/// `(t_c^p + t_m^p)^(1/p)`, normalised by the larger term so large `p` cannot overflow;
/// `p = ∞` is `max`.
pub(crate) fn soft_roofline(t_c: f64, t_m: f64, p: f64) -> f64 {
    let hi = t_c.max(t_m);
    if hi <= 0.0 || p.is_infinite() {
        return hi;
    }
    let lo = t_c.min(t_m);
    hi * (1.0 + (lo / hi).powf(p)).powf(1.0 / p)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::Catalog;

    fn deployment(gpu: &str, model: &str) -> DeploymentBuilder {
        let c = Catalog::builtin();
        Deployment::builder(c.gpu(gpu).unwrap().clone(), c.model(model).unwrap().clone())
    }

    fn llama_h100() -> Deployment {
        deployment("h100", "llama-3.1-8b").build().unwrap()
    }

    fn decode(batch: usize, context: u32) -> Vec<SeqWork> {
        vec![
            SeqWork {
                new_tokens: 1,
                context,
                samples: true
            };
            batch
        ]
    }

    fn close(actual: f64, expected: f64, tol: f64) -> bool {
        (actual - expected).abs() <= tol
    }

    #[test]
    fn worked_example_rates_and_overhead() {
        let d = llama_h100();
        assert!(close(d.effective_flops() / 1e12, 593.6, 0.05));
        assert!(close(d.effective_bandwidth() / 1e12, 2.613, 0.0005));
        assert!(close(d.t_ovh() * 1e3, 1.150, 1e-9));
        assert_eq!(d.overheads().cpu_floor_us, 0.0);
        assert!(!d.uses_fp8_peak());
    }

    #[test]
    fn worked_example_single_stream_decode() {
        let d = llama_h100();
        let s = d.step_time(&decode(1, 1024));
        assert!(close(s.flops / 1e9, 15.55, 0.01), "{}", s.flops);
        assert!(close(s.t_c * 1e6, 26.2, 0.05), "{}", s.t_c);
        assert!(close(s.bytes / 1e9, 15.144, 0.001), "{}", s.bytes);
        assert!(close(s.t_m * 1e3, 5.796, 0.001), "{}", s.t_m);
        assert!(close(s.t_gpu * 1e3, 5.797, 0.001), "{}", s.t_gpu);
        assert!(close(s.t_req * 1e6, 4.0, 1e-9));
        assert_eq!(s.t_ar, 0.0);
        assert!(close(s.total * 1e3, 6.95, 0.005), "{}", s.total);
        assert!(close(s.total, s.t_ovh + s.t_req + s.t_gpu, 1e-15));
    }

    #[test]
    fn worked_example_prefill_2048() {
        let d = llama_h100();
        let s = d.step_time(&[SeqWork {
            new_tokens: 2048,
            context: 0,
            samples: true,
        }]);
        assert!(close(s.flops / 1e12, 29.69, 0.005), "{}", s.flops);
        assert!(close(s.t_c * 1e3, 50.01, 0.01), "{}", s.t_c);
        assert!(close(s.bytes / 1e9, 15.278, 0.001), "{}", s.bytes);
        assert!(close(s.t_m * 1e3, 5.85, 0.005), "{}", s.t_m);
        assert!(close(s.t_gpu * 1e3, 51.33, 0.01), "{}", s.t_gpu);
        assert!(close(s.total * 1e3, 52.5, 0.05), "{}", s.total);
    }

    #[test]
    fn worked_example_decode_batches() {
        let d = llama_h100();
        let expected = [
            (1, 6.95),
            (8, 7.36),
            (32, 8.85),
            (64, 10.9),
            (128, 15.1),
            (256, 23.7),
            (512, 40.8),
        ];
        let mut last = 0.0;
        for (batch, ms) in expected {
            let t = d.step_time(&decode(batch, 1024)).total * 1e3;
            // The figures are given to three significant digits.
            assert!(close(t, ms, 0.051), "batch {batch}: {t} ms vs {ms} ms");
            assert!(t > last);
            last = t;
        }
    }

    #[test]
    fn attention_term_is_causal() {
        let d = llama_h100();
        let one = |q, c| {
            d.step_time(&[SeqWork {
                new_tokens: q,
                context: c,
                samples: false,
            }])
        };
        let per_attn = 4.0 * 32.0 * 32.0 * 128.0;
        let base = 2.0 * d.model().n_lin();
        // q = 3 on c = 10: 3·(10 + 2) = 36 query-key pairs.
        assert!(close(one(3, 10).flops, 3.0 * base + 36.0 * per_attn, 1.0));
        // Chunking does not change the total attention work.
        let whole = one(100, 0).flops - 100.0 * base;
        let split = one(40, 0).flops + one(60, 40).flops - 100.0 * base;
        assert!(close(whole, split, 1.0));
        // The LM head is charged per sampling row only.
        let s = d.step_time(&decode(4, 0));
        let n = d.step_time(
            &[SeqWork {
                new_tokens: 1,
                context: 0,
                samples: false,
            }; 4],
        );
        assert!(close(
            s.flops - n.flops,
            4.0 * 2.0 * d.model().embedding_params(),
            1.0
        ));
    }

    #[test]
    fn empty_plan_is_no_step() {
        assert_eq!(llama_h100().step_time(&[]), StepTime::default());
    }

    #[test]
    fn soft_roofline_shapes() {
        assert!(close(soft_roofline(3.0, 4.0, 2.0), 5.0, 1e-12));
        assert_eq!(soft_roofline(3.0, 4.0, f64::INFINITY), 4.0);
        assert!(close(soft_roofline(3.0, 4.0, 1.0), 7.0, 1e-12));
        assert_eq!(soft_roofline(0.0, 0.0, 1.5), 0.0);
        // p = 1.5 at the ridge: 2^(2/3) ≈ 1.587 × either term.
        assert!(close(
            soft_roofline(1.0, 1.0, 1.5),
            2f64.powf(2.0 / 3.0),
            1e-12
        ));
        // Far from the ridge it is the larger term.
        assert!(close(soft_roofline(1e-3, 1.0, 1.5), 1.0, 1e-4));
        // p = ∞ through the builder turns the combiner into max.
        let d = deployment("h100", "llama-3.1-8b")
            .softroof_p(f64::INFINITY)
            .build()
            .unwrap();
        let s = d.step_time(&decode(1, 1024));
        assert_eq!(s.t_gpu, s.t_m);
    }

    #[test]
    fn tensor_parallel_divides_work_and_adds_all_reduce() {
        let one = deployment("h100", "llama-3.1-70b").build().unwrap();
        let two = deployment("h100", "llama-3.1-70b")
            .tensor_parallel(2)
            .build()
            .unwrap();
        let plan = decode(16, 2048);
        let (a, b) = (one.step_time(&plan), two.step_time(&plan));
        assert_eq!(a.t_ar, 0.0);
        assert!(close(b.flops, a.flops / 2.0, 1.0));
        // Weights halve; KV heads halve too (8 → 4).
        assert!(close(b.bytes, a.bytes / 2.0, 1.0));
        // t_ar = 2·L·(α + 2·(tp−1)/tp · 2·T·d / link): 160·(5 µs + 2·16·8192/360e9 s).
        let t_ar = 2.0 * 80.0 * (5e-6 + 2.0 * 0.5 * 2.0 * 16.0 * 8192.0 / 360e9);
        assert!(close(b.t_ar, t_ar, 1e-12), "{} vs {t_ar}", b.t_ar);
        assert!(close(b.total, b.t_ovh + b.t_req + b.t_gpu + b.t_ar, 1e-15));
        // A slower link costs more; the latency term alone is 0.8 ms on 80 layers.
        let pcie = deployment("h100", "llama-3.1-70b")
            .tensor_parallel(2)
            .link_gbps(25.0)
            .build()
            .unwrap();
        assert!(pcie.step_time(&plan).t_ar > b.t_ar);
        assert!(b.t_ar > 2.0 * 80.0 * 5e-6);
        // With 8 KV heads at tp 16 (not allowed: 64 heads / 16 = 4 fine, KV 8 | 16 fine) each
        // GPU keeps one KV head.
        let tp16 = deployment("h100", "llama-3.1-70b")
            .tensor_parallel(16)
            .build()
            .unwrap();
        assert_eq!(tp16.kv_bytes_per_token(), 2.0 * 80.0 * 128.0 * 2.0);
    }

    #[test]
    fn tree_all_reduce_steps_grow_with_log2_of_the_ranks() {
        let plan = decode(1, 16);
        let t_ar = |tp: u32, step: Option<f64>| {
            deployment("h100", "llama-3.1-70b")
                .tensor_parallel(tp)
                .allreduce_step_us(step)
                .build()
                .unwrap()
                .step_time(&plan)
                .t_ar
        };
        // Absent = 0: the one-shot model, unchanged.
        assert_eq!(t_ar(4, None), t_ar(4, Some(0.0)));
        // 2·L all-reduces, each 2·log2(tp) steps of 10 µs more: tp 2 → 2 steps, tp 8 → 6.
        for (tp, steps) in [(2, 2.0), (4, 4.0), (8, 6.0)] {
            let extra = t_ar(tp, Some(10.0)) - t_ar(tp, None);
            let want = 2.0 * 80.0 * steps * 10e-6;
            assert!(close(extra, want, 1e-12), "tp {tp}: {extra} vs {want}");
        }
        let e = deployment("h100", "llama-3.1-70b")
            .allreduce_step_us(-1.0)
            .build()
            .unwrap_err()
            .to_string();
        assert!(e.contains("allreduce_step_us"), "{e}");
    }

    #[test]
    fn tensor_parallel_degree_must_split_heads() {
        let e = deployment("h100", "llama-3.1-8b")
            .tensor_parallel(3)
            .build()
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not divide the 32 attention heads"), "{e}");
        assert!(deployment("h100", "llama-3.1-8b")
            .tensor_parallel(0)
            .build()
            .is_err());
    }

    #[test]
    fn fp8_peak_needs_fp8_weights_and_fp8_tensor_cores() {
        // H100 FP8: FP8 peak and FP8 MFU.
        let d = deployment("h100", "llama-3.1-8b")
            .dtype(Dtype::Fp8)
            .build()
            .unwrap();
        assert!(d.uses_fp8_peak());
        assert!(close(d.effective_flops(), 1978.9e12 * 0.42, 1e3));
        assert!(close(d.weights_resident_bytes(), d.model().n_total(), 1e-3));
        // A100 FP8 is weight-only: BF16 peak and MFU, 1-byte weights.
        let a = deployment("a100-80g", "llama-3.1-8b")
            .dtype(Dtype::Fp8)
            .build()
            .unwrap();
        assert!(!a.uses_fp8_peak());
        assert!(close(a.effective_flops(), 312e12 * 0.52, 1e3));
        let bf = deployment("a100-80g", "llama-3.1-8b").build().unwrap();
        assert!(close(
            a.weights_per_step_bytes(1),
            bf.weights_per_step_bytes(1) / 2.0,
            1.0
        ));
        assert!(a.step_time(&decode(1, 0)).total < bf.step_time(&decode(1, 0)).total);
        // BF16 on an FP8 GPU stays at the BF16 peak.
        let h = deployment("h100", "llama-3.1-8b").build().unwrap();
        assert!(close(h.effective_flops(), 989.4e12 * 0.6, 1e3));
    }

    #[test]
    fn absent_fp8_mfu_defaults_to_seventy_percent_of_bf16() {
        let c = Catalog::builtin();
        let mut gpu = c.gpu("h100").unwrap().clone();
        gpu.mfu_fp8 = None;
        let model = c.model("llama-3.1-8b").unwrap().clone();
        let d = Deployment::builder(gpu.clone(), model.clone())
            .dtype(Dtype::Fp8)
            .build()
            .unwrap();
        assert!(close(d.efficiency().mfu_fp8, 0.42, 1e-12));
        // It follows an overridden BF16 MFU.
        let d = Deployment::builder(gpu, model)
            .dtype(Dtype::Fp8)
            .mfu(0.5)
            .build()
            .unwrap();
        assert!(close(d.efficiency().mfu_fp8, 0.35, 1e-12));
        assert!(close(d.effective_flops(), 1978.9e12 * 0.35, 1e3));
        // An explicit FP8 MFU wins.
        let d = deployment("h100", "llama-3.1-8b")
            .dtype(Dtype::Fp8)
            .mfu_fp8(0.5)
            .build()
            .unwrap();
        assert!(close(d.effective_flops(), 1978.9e12 * 0.5, 1e3));
    }

    #[test]
    fn small_models_get_a_cpu_floor() {
        let d = deployment("a40", "qwen3-0.6b").build().unwrap();
        assert_eq!(d.overheads().cpu_floor_us, 2500.0);
        assert!(close(d.t_ovh(), 2.5e-3, 1e-15));
        let s = d.step_time(&decode(1, 100));
        assert!(close(s.total, 2.5e-3 + 4e-6 + s.t_gpu, 1e-12));
        // An explicit floor overrides the automatic one.
        let d = deployment("a40", "qwen3-0.6b")
            .cpu_floor_us(0.0)
            .build()
            .unwrap();
        assert!(close(d.t_ovh(), (126.0 + 28.0 * 32.0) * 1e-6, 1e-15));
    }

    #[test]
    fn async_scheduling_overlaps_cpu_with_gpu() {
        let serial = llama_h100();
        let overlapped = deployment("h100", "llama-3.1-8b")
            .async_scheduling(true)
            .build()
            .unwrap();
        let plan = decode(8, 1024);
        let (s, a) = (serial.step_time(&plan), overlapped.step_time(&plan));
        assert_eq!(s.t_gpu, a.t_gpu);
        // GPU-bound: max(126 µs + 8·4 µs, 32·32 µs + t_gpu) = 1.024 ms + t_gpu.
        assert!(close(a.total, 1.024e-3 + a.t_gpu, 1e-12));
        assert!(close(s.total - a.total, 126e-6 + 32e-6, 1e-12));
        // CPU-bound (small model with a floor): the floor plus per-request work dominates.
        let small = deployment("h100", "qwen3-0.6b")
            .async_scheduling(true)
            .build()
            .unwrap();
        let t = small.step_time(&decode(4, 10));
        assert!(close(t.total, 2.5e-3 + 16e-6, 1e-12), "{}", t.total);
    }

    #[test]
    fn overrides_change_the_model() {
        let d = deployment("h100", "llama-3.1-8b")
            .mbu(0.5)
            .step_overhead_us(0.0)
            .layer_overhead_us(0.0)
            .req_overhead_us(None)
            .build()
            .unwrap();
        let s = d.step_time(&decode(1, 0));
        assert!(close(s.t_m, s.bytes / (3.35e12 * 0.5), 1e-15));
        assert!(close(s.total, 4e-6 + s.t_gpu, 1e-15));
        for bad in [
            deployment("h100", "llama-3.1-8b").mfu(1.5).build(),
            deployment("h100", "llama-3.1-8b").mbu(0.0).build(),
            deployment("h100", "llama-3.1-8b").softroof_p(0.5).build(),
            deployment("h100", "llama-3.1-8b")
                .step_overhead_us(-1.0)
                .build(),
            deployment("h100", "llama-3.1-8b").link_gbps(0.0).build(),
        ] {
            assert!(bad.is_err());
        }
    }

    #[test]
    fn moe_step_reads_more_experts_as_tokens_grow() {
        let d = deployment("h100", "qwen3-30b-a3b").build().unwrap();
        let small = d.step_time(&decode(1, 0));
        let big = d.step_time(&decode(256, 0));
        let kv = 256.0 * d.kv_bytes_per_token();
        // 256 tokens touch nearly all 128 experts: weight bytes approach W_res − V·d·b_w.
        let w_big = big.bytes - kv;
        let full = d.weights_resident_bytes() - d.model().embedding_bytes(Dtype::Bf16);
        assert!(w_big / full > 0.99 && w_big <= full);
        assert!(small.bytes < 0.25 * full);
        // FLOPs count only the k active experts per token.
        assert!(close(
            small.flops,
            2.0 * d.model().n_lin()
                + 2.0 * d.model().embedding_params()
                + 4.0 * 48.0 * 32.0 * 128.0,
            1.0
        ));
    }

    #[test]
    fn kv_reads_at_their_own_efficiency_speed_up_long_context_decode_only() {
        let base = llama_h100();
        let same = deployment("h100", "llama-3.1-8b")
            .mbu_kv(0.78)
            .build()
            .unwrap();
        let fast = deployment("h100", "llama-3.1-8b")
            .mbu_kv(0.90)
            .build()
            .unwrap();
        // Unset leaves every figure as before; set to the MBU it agrees to rounding.
        assert_eq!(base.efficiency().mbu_kv, None);
        let long = decode(256, 4096);
        let t_base = base.step_time(&long).total;
        assert!(close(same.step_time(&long).total, t_base, 1e-12));
        // Faster KV reads shorten a KV-heavy step, by at most the KV share of its bytes.
        let t_fast = fast.step_time(&long).total;
        let kv_s = 256.0 * 4097.0 * base.kv_bytes_per_token() / base.effective_bandwidth();
        assert!(t_fast < t_base && t_base - t_fast <= kv_s * (1.0 - 0.78 / 0.90) + 1e-9);
        // Weight streaming at batch 1 and context 0 hardly moves.
        let t1 = base.step_time(&decode(1, 0)).total;
        assert!((fast.step_time(&decode(1, 0)).total - t1).abs() < 1e-5 * t1);
        assert!(deployment("h100", "llama-3.1-8b")
            .mbu_kv(1.5)
            .build()
            .is_err());
    }

    #[test]
    fn decode_batches_pad_to_the_next_captured_graph() {
        let d = deployment("h100", "llama-3.1-8b")
            .cuda_graph_sizes(vec![8, 1, 4, 2, 0])
            .build()
            .unwrap();
        assert_eq!(d.cuda_graph_sizes(), &[1, 2, 4, 8]);
        assert_eq!(d.padded_tokens(3, 3), 4);
        assert_eq!(d.padded_tokens(8, 8), 8);
        assert_eq!(d.padded_tokens(9, 9), 9);
        assert_eq!(d.padded_tokens(5, 2), 5);
        // Padding costs FLOPs (and nothing else) on a pure-decode step.
        let plain = llama_h100();
        let (a, b) = (
            plain.step_time(&decode(5, 100)),
            d.step_time(&decode(5, 100)),
        );
        assert!(close(
            b.flops - a.flops,
            3.0 * 2.0 * plain.model().n_lin(),
            1.0
        ));
        assert_eq!(a.bytes, b.bytes);
        assert!(llama_h100().cuda_graph_sizes().is_empty());
    }
}
