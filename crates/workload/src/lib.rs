//! servebench workload: what to send and when, computed up front with no runtime.
//!
//! - Datasets turn into [`RequestSpec`]s: [`random`] (vLLM's random dataset, with
//!   prompts of exact token length and a shared or per-request prefix), [`sharegpt`]
//!   and [`custom`] (files, with vLLM's selection rules), and [`trace`] replay.
//! - [`synth`] builds text of an exact token count under a [`Tokenizer`].
//! - [`arrival`] computes intended send offsets from a rate, burstiness and ramp.
//!
//! Everything is deterministic in the seed.
//!
//! [`Tokenizer`]: servebench_tokenizer::Tokenizer

mod arrival;
pub mod custom;
mod error;
pub mod random;
mod request;
mod rng;
mod selection;
pub mod sharegpt;
mod synth;
pub mod trace;

pub use arrival::{ArrivalConfig, RampUp, RampUpStrategy};
pub use custom::{sample_custom, sample_custom_checked, CustomConfig, CustomRequests};
pub use error::WorkloadError;
pub use random::{sample_random, PrefixMode, RandomConfig};
pub use request::{cycle, RequestSpec};
pub use sharegpt::{sample_sharegpt, ShareGptConfig};
pub use trace::{read_trace, TraceEntry, TraceFormat};

use servebench_tokenizer::Tokenizer;

/// A dataset choice, as `--dataset-name` and its options select it.
#[derive(Debug, Clone, PartialEq)]
pub enum DatasetConfig {
    /// `--dataset-name random`.
    Random(RandomConfig),
    /// `--dataset-name sharegpt`.
    ShareGpt(ShareGptConfig),
    /// `--dataset-name custom`.
    Custom(CustomConfig),
}

/// Builds the requests of a dataset under `tok`.
pub fn sample_dataset(
    cfg: &DatasetConfig,
    tok: &Tokenizer,
) -> Result<Vec<RequestSpec>, WorkloadError> {
    match cfg {
        DatasetConfig::Random(c) => sample_random(c, tok),
        DatasetConfig::ShareGpt(c) => sample_sharegpt(c, tok),
        DatasetConfig::Custom(c) => sample_custom(c, tok),
    }
}
