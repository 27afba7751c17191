//! servebench workload: what to send and when, computed up front with no runtime.
//!
//! - Datasets turn into [`RequestSpec`]s: [`random`] (vLLM's random dataset, with
//!   prompts of exact token length and a shared or per-request prefix), [`sharegpt`]
//!   and [`custom`] (files, with vLLM's selection rules), [`sonnet`] (poem lines with a
//!   shared prefix), `prefix_repetition` (groups of prompts sharing exact-length
//!   prefixes), [`hf`] (local copies of the Hugging Face datasets vLLM knows by name), and
//!   [`trace`] replay; [`random_mm`] adds synthetic images to the random dataset.
//! - `synth` builds text of an exact token count under a [`Tokenizer`].
//! - `arrival` computes intended send offsets from a rate, burstiness and ramp.
//!
//! Everything is deterministic in the seed.
//!
//! [`Tokenizer`]: servebench_tokenizer::Tokenizer

pub mod agentic;
mod arrival;
pub mod custom;
mod error;
pub mod hf;
mod images;
mod prefix_hit;
mod prefix_repetition;
pub mod random;
pub mod random_mm;
mod request;
mod rng;
mod selection;
pub mod sessions;
pub mod sharegpt;
pub mod sonnet;
mod spec;
pub mod spec_bench;
mod synth;
mod text_file;
pub mod trace;

pub use arrival::{ArrivalConfig, RampUp, RampUpStrategy};
pub use custom::{sample_custom, sample_custom_checked, CustomConfig, CustomRequests};
pub use error::WorkloadError;
pub use hf::{sample_hf, HfConfig};
pub use images::ImageInput;
pub use prefix_repetition::{sample_prefix_repetition, PrefixRepetitionConfig};
pub use random::{sample_random, PrefixMode, RandomConfig};
pub use random_mm::{sample_random_mm, RandomMmConfig};
pub use request::{cycle, RequestSpec};
pub use sessions::{custom_sessions, sharegpt_sessions, Session, SessionSelection, SessionTurn};
pub use sharegpt::{sample_sharegpt, ShareGptConfig};
pub use sonnet::{sample_sonnet, SonnetConfig};
pub use spec_bench::{sample_spec_bench, SpecBenchConfig};
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
    /// `--dataset-name sonnet`.
    Sonnet(SonnetConfig),
    /// `--dataset-name prefix_repetition`.
    PrefixRepetition(PrefixRepetitionConfig),
    /// `--dataset-name hf`.
    Hf(HfConfig),
    /// `--dataset-name timed_trace` (the requests; their arrivals come from the trace).
    TimedTrace(trace::TimedTraceConfig),
    /// `--dataset-name burstgpt`.
    BurstGpt(trace::BurstGptConfig),
    /// `--dataset-name random-mm`.
    RandomMm(RandomMmConfig),
    /// `--dataset-name spec_bench`.
    SpecBench(SpecBenchConfig),
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
        DatasetConfig::Sonnet(c) => sample_sonnet(c, tok),
        DatasetConfig::PrefixRepetition(c) => sample_prefix_repetition(c, tok),
        DatasetConfig::Hf(c) => sample_hf(c, tok),
        DatasetConfig::TimedTrace(c) => trace::sample_timed_trace(c, tok),
        DatasetConfig::BurstGpt(c) => trace::sample_burstgpt(c, tok),
        DatasetConfig::RandomMm(c) => sample_random_mm(c, tok),
        DatasetConfig::SpecBench(c) => sample_spec_bench(c, tok),
    }
}
