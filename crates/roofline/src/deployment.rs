//! A resolved deployment and the step-time model (SIMULATOR.md §3.2–3.3).

use serde::Serialize;

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
    softroof_p: Option<f64>,
    step_overhead_us: Option<f64>,
    layer_overhead_us: Option<f64>,
    req_overhead_us: Option<f64>,
    cpu_floor_us: Option<f64>,
    allreduce_latency_us: Option<f64>,
    link_gbps: Option<f64>,
    async_scheduling: bool,
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

    option_setters!(
        /// Whole-model BF16 MFU (default: the GPU's).
        mfu,
        /// Whole-model FP8 MFU (default: the GPU's, else 0.7 × the BF16 MFU in effect).
        mfu_fp8,
        /// Memory-bandwidth utilisation (default: the GPU's).
        mbu,
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
        };
        for (name, v) in [
            ("mfu", efficiency.mfu),
            ("mfu_fp8", efficiency.mfu_fp8),
            ("mbu", efficiency.mbu),
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
        };
        for (name, v) in [
            ("step_overhead_us", overheads.step_overhead_us),
            ("layer_overhead_us", overheads.layer_overhead_us),
            ("req_overhead_us", overheads.req_overhead_us),
            ("cpu_floor_us", overheads.cpu_floor_us),
            ("allreduce_latency_us", overheads.allreduce_latency_us),
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
        })
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
            2.0 * layers * ovh.allreduce_latency_us * 1e-6,
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
        t_fixed: ovh.step_overhead_us * 1e-6,
        t_layers: layers * ovh.layer_overhead_us * 1e-6,
        t_req: ovh.req_overhead_us * 1e-6,
        t_cpu_floor: ovh.cpu_floor_us * 1e-6,
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
            softroof_p: None,
            step_overhead_us: None,
            layer_overhead_us: None,
            req_overhead_us: None,
            cpu_floor_us: None,
            allreduce_latency_us: None,
            link_gbps: None,
            async_scheduling: false,
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
        let tokens = w.tokens as f64;
        let flops = c.flops_per_token * tokens
            + c.flops_per_sample * w.samples as f64
            + c.attn_flops * w.attn;
        let bytes =
            self.weights_per_step_bytes(w.tokens) + c.kv_bytes_per_token * w.kv_tokens as f64;
        let t_c = flops / c.flops_rate;
        let t_m = bytes / c.bytes_rate;
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
        // q·(c + (q+1)/2) = q·(2c + q + 1)/2, exact in integers before the halving.
        self.attn += (q * (2 * c + q + 1)) as f64 * 0.5 * count as f64;
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
