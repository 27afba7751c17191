//! GPU and model catalog, FLOP/byte counts, bandwidth math and the step-time model
//! (SIMULATOR.md §3–§5). Pure functions: no I/O beyond reading catalog and config files.

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

pub use capacity::{
    kv_capacity, largest_fitting_max_model_len, KvCapacity, KvSizing, NON_TORCH_BYTES_SINGLE,
    NON_TORCH_BYTES_TP,
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

use serde::Serialize;

/// The work of one planned request in a step (SIMULATOR.md §3.2).
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
    /// Step duration before jitter.
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
