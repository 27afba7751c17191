//! The crate's error type.

use std::path::PathBuf;

/// Errors of catalog loading, deployment resolution and KV sizing.
#[derive(Debug, thiserror::Error)]
pub enum RooflineError {
    /// A value or combination of values that cannot describe a deployment.
    #[error("{0}")]
    Invalid(String),
    /// A GPU id or alias that the catalog does not know.
    #[error("unknown GPU '{id}'; known GPUs: {known}")]
    UnknownGpu {
        /// The id that was asked for.
        id: String,
        /// The catalog's GPU ids, comma-separated.
        known: String,
    },
    /// A model id or alias that the catalog does not know.
    #[error("unknown model '{id}'; known models: {known}")]
    UnknownModel {
        /// The id that was asked for.
        id: String,
        /// The catalog's model ids, comma-separated.
        known: String,
    },
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A catalog TOML document is malformed or has an invalid entry.
    #[error("invalid catalog {origin}: {message}")]
    Catalog {
        /// Where the document came from (a path, or "built-in").
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// A Hugging Face `config.json` lacks a key or has a value of the wrong type.
    #[error("invalid model config {}: {message}", path.display())]
    HfConfig {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A `--gpu-spec` string is malformed.
    #[error("invalid GPU spec '{spec}': {message} (expected bf16_tflops,fp8_tflops,tb_per_s,usable_gib; fp8_tflops may be '-' or empty)")]
    GpuSpec {
        /// The string given.
        spec: String,
        /// What is wrong.
        message: String,
    },
    /// The weights and activations leave no memory for the KV cache.
    #[error(
        "no memory left for the KV cache on {gpu}: {usable_gib:.2} GiB × gpu_memory_utilization {gpu_memory_utilization} \
         = {budget_gib:.2} GiB, but weights take {weights_gib:.2} GiB, peak activations {activations_gib:.2} GiB \
         and non-torch memory {non_torch_gib:.2} GiB per GPU; raise gpu_memory_utilization or tensor_parallel_size, \
         use fp8 weights, or lower max_num_batched_tokens / max_num_seqs"
    )]
    NoKvMemory {
        /// The GPU id.
        gpu: String,
        /// Memory the runtime reports per GPU.
        usable_gib: f64,
        /// The fraction vLLM may use.
        gpu_memory_utilization: f64,
        /// `usable_gib · gpu_memory_utilization`.
        budget_gib: f64,
        /// Resident weights per GPU.
        weights_gib: f64,
        /// Peak activations of the profile run.
        activations_gib: f64,
        /// CUDA context, NCCL buffers and other memory outside torch's allocator.
        non_torch_gib: f64,
    },
    /// One request of `max_model_len` tokens does not fit the KV cache.
    #[error(
        "max_model_len {max_model_len} does not fit: one such request needs {needed_blocks} KV blocks of {block_size} tokens \
         but only {allocatable_blocks} are allocatable ({num_gpu_blocks} blocks, one reserved); \
         the largest max_model_len that fits is {largest}; lower --max-model-len or raise gpu_memory_utilization"
    )]
    MaxModelLenTooLarge {
        /// The requested maximum sequence length.
        max_model_len: u32,
        /// Blocks one request of that length needs.
        needed_blocks: u64,
        /// Tokens per block.
        block_size: u32,
        /// Blocks in the cache, the null block included.
        num_gpu_blocks: u32,
        /// Blocks a request can hold (`num_gpu_blocks − 1`).
        allocatable_blocks: u64,
        /// The largest `max_model_len` that would fit.
        largest: u32,
    },
    /// A calibration profile is malformed, or does not describe the deployment it is applied to.
    #[error("calibration {origin}: {message}")]
    Calibration {
        /// Where the profile came from (a path, or "profile").
        origin: String,
        /// What is wrong.
        message: String,
    },
}
