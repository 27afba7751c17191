//! GPU and model catalog, FLOP/byte counts, bandwidth math and the step-time model
//! (docs/simulator.md §3–§5). Pure functions: no I/O beyond reading catalog and config files.
//!
//! - [`Catalog`]: the embedded `catalog.toml` (every GPU and model of §5), user additions
//!   ([`Catalog::merge_file`]), lookups by id or alias; [`ModelSpec::from_hf_config`] and
//!   [`GpuSpec::from_spec_str`] for shapes and GPUs the catalog lacks.
//! - [`ModelSpec`]: the quantities of §3.1 (`P_attn`, `N_lin`, `N_total`, `W_res`, `W_step`
//!   with MoE `E_eff`, KV bytes per token).
//! - [`Deployment`]: GPU × model × dtype × tp with efficiencies and overheads;
//!   [`Deployment::step_time`] is §3.2–3.3 and is what the simulator calls every step.
//! - [`kv_capacity`]: §4's KV-cache sizing; [`scheduler_defaults`]: §2.5.
//! - Predictions: [`Deployment::bandwidth_floor`], [`Deployment::decode_tpot`],
//!   [`Deployment::prefill_time`], [`Deployment::compute_bound_batch`].
//!
//! The catalog's `usable_gib` values are the ones that reproduce §4's capacity table block for
//! block: 80 GB parts need a usable size in [79.1996, 79.2003) GiB, so 79.2 (not 79.19).
//!
//! ```
//! use servebench_roofline::{kv_capacity, Catalog, Deployment, Dtype, KvDtype, KvSizing, SeqWork};
//!
//! let catalog = Catalog::builtin();
//! let d = Deployment::new(
//!     catalog.gpu("h100")?.clone(),
//!     catalog.model("meta-llama/Llama-3.1-8B-Instruct")?.clone(),
//!     Dtype::Bf16,
//!     KvDtype::Auto,
//!     1,
//! )?;
//! let step = d.step_time(&[SeqWork { new_tokens: 1, context: 1024, samples: true }]);
//! assert!((step.total * 1e3 - 6.95).abs() < 0.01);
//! let kv = kv_capacity(&d, &KvSizing::server_defaults(&d))?;
//! assert_eq!(kv.num_gpu_blocks, 27_978);
//! # Ok::<(), servebench_roofline::RooflineError>(())
//! ```

mod calibration;
mod capacity;
mod catalog;
mod deployment;
mod dtype;
mod error;
mod gpu;
mod hf_config;
mod model;
mod predict;
mod scheduler;
mod vision;

pub use calibration::{
    CalibrationFactors, CalibrationProfile, CalibrationTarget, FitNotes, CALIBRATION_SCHEMA,
};
pub use capacity::{
    kv_capacity, kv_capacity_with_rule, largest_fitting_max_model_len, KvBudgetRule, KvCapacity,
    KvSizing, NON_TORCH_BYTES_SINGLE, NON_TORCH_BYTES_TP,
};
pub use catalog::{Catalog, BUILTIN_CATALOG};
pub use deployment::{
    Deployment, DeploymentBuilder, Efficiency, Overheads, DEFAULT_ALLREDUCE_LATENCY_US,
    DEFAULT_LAYER_OVERHEAD_US, DEFAULT_REQ_OVERHEAD_US, DEFAULT_SOFTROOF_P,
    DEFAULT_STEP_OVERHEAD_US, SMALL_MODEL_CPU_FLOOR_US, SMALL_MODEL_PARAMS,
};
pub use dtype::{BatchClass, Dtype, KvDtype};
pub use error::RooflineError;
pub use gpu::{
    GpuSpec, GIB, LARGE_CLASS_MIN_GIB, SPEC_DEFAULT_LINK_GBPS, SPEC_DEFAULT_MBU,
    SPEC_DEFAULT_MFU_BF16,
};
pub use model::ModelSpec;
pub use predict::{BandwidthFloor, PrefillEstimate, RooflineInputs, MAX_SEARCH_BATCH};
pub use scheduler::{
    class_defaults, resolve_scheduler_limits, scheduler_defaults, UNCHUNKED_MIN_BUDGET,
};
pub use vision::{VisionSpec, QWEN_MAX_PIXELS, QWEN_MIN_PIXELS};

use serde::Serialize;

/// The work of one planned request in a step (docs/simulator.md §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SeqWork {
    /// New tokens computed in this step (`q_i`).
    pub new_tokens: u32,
    /// Tokens whose KV already exists (`c_i`).
    pub context: u32,
    /// Does this request sample a token at the end of the step?
    pub samples: bool,
}

/// A step's duration and its parts, in seconds; FLOPs and bytes are per GPU.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct StepTime {
    /// Step duration before jitter: `t_ovh + t_req + t_gpu + t_ar` when serial; with async
    /// scheduling `max(max(t_fixed, t_cpu_floor) + t_req, L·t_layer + t_gpu + t_ar)`.
    pub total: f64,
    /// Compute time `FLOPs / (peak_flops · MFU)`.
    pub t_c: f64,
    /// Memory time `Bytes / (peak_BW · MBU)`.
    pub t_m: f64,
    /// Soft roofline of `t_c` and `t_m`.
    pub t_gpu: f64,
    /// Tensor-parallel all-reduce time (0 at tp 1).
    pub t_ar: f64,
    /// `max(t_fixed + L·t_layer, t_cpu_floor)`.
    pub t_ovh: f64,
    /// `n_req · t_req`.
    pub t_req: f64,
    /// FLOPs of the step on one GPU.
    pub flops: f64,
    /// Bytes moved by one GPU.
    pub bytes: f64,
}
