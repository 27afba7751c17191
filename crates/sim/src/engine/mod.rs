//! The engine core (SIMULATOR.md §2, §8): one owner of all scheduler, block-pool, RNG and
//! metric state behind plain methods. It never sleeps and never reads a clock; drivers pass
//! engine-clock nanoseconds in.

mod metrics;
mod types;

pub use metrics::{EngineMetrics, Histogram};
pub use types::{FinishReason, Finished, NewRequest, StepOutputs, TokenOutput};

use servebench_roofline::Deployment;

/// Everything the engine core needs, already resolved (catalog lookups, defaults and KV sizing
/// happen before this is built).
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// GPU × model × dtype × tp × efficiency: the step-time function.
    pub deployment: Deployment,
    pub max_num_seqs: u32,
    pub max_num_batched_tokens: u32,
    pub max_model_len: u32,
    pub block_size: u32,
    /// Total blocks including the reserved null block 0.
    pub num_gpu_blocks: u32,
    pub enable_prefix_caching: bool,
    pub enable_chunked_prefill: bool,
    /// 0 = off.
    pub long_prefill_token_threshold: u32,
    /// Fraction of blocks kept free when admitting (0 = off, vLLM's default).
    pub kv_watermark: f64,
    pub full_sequence_must_fit: bool,
    pub seed: u64,
    pub jitter_sigma: f64,
    pub hiccup_prob: f64,
    pub hiccup_ms: f64,
    /// Median natural output length; 0 disables natural stops.
    pub eos_len_median: f64,
    pub eos_len_sigma: f64,
    /// Token ids of the filler words generated tokens are drawn from (SIMULATOR.md §7).
    pub output_vocab: Vec<u32>,
    /// Vocabulary size (prompt token ids must be below it).
    pub vocab_size: u32,
}

/// A planned step: what `plan_step` decided and how long it takes. Opaque to drivers except
/// for its duration.
#[derive(Debug, Clone)]
pub struct StepPlan {
    /// Step duration in ns (jitter and hiccups included, rounded once).
    pub duration_ns: u64,
    /// Tokens scheduled in this step.
    pub scheduled_tokens: u32,
    pub(crate) items: Vec<PlannedItem>,
}

#[derive(Debug, Clone)]
pub(crate) struct PlannedItem {
    pub(crate) slot: usize,
    pub(crate) new_tokens: u32,
    pub(crate) context: u32,
}

/// The simulated engine's state.
#[derive(Debug)]
pub struct EngineCore {
    config: EngineConfig,
    metrics: EngineMetrics,
}

impl EngineCore {
    /// Validates the configuration (budget ≥ 1, at least one `max_model_len` request fits).
    pub fn new(config: EngineConfig) -> Result<Self, crate::SimError> {
        let metrics = EngineMetrics::new(config.max_model_len);
        Ok(EngineCore { config, metrics })
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Queue a request at the tail of `waiting` (seen by the next `plan_step`).
    pub fn add(&mut self, _req: NewRequest) {
        todo!("engine core")
    }

    /// Remove a request wherever it is, freeing its blocks; returns whether it was known.
    /// Its `Finished` (reason `Abort`) is reported by the next `commit_step` or `take_aborted`.
    pub fn abort(&mut self, _id: u64) -> bool {
        todo!("engine core")
    }

    /// Drop every prefix-cache hash; false (nothing changed) while any block is referenced.
    pub fn reset_prefix_cache(&mut self) -> bool {
        todo!("engine core")
    }

    /// No request waiting or running.
    pub fn is_idle(&self) -> bool {
        todo!("engine core")
    }

    pub fn num_running(&self) -> usize {
        todo!("engine core")
    }

    pub fn num_waiting(&self) -> usize {
        todo!("engine core")
    }

    /// Schedule one step starting at `t0_ns`; `None` when idle.
    pub fn plan_step(&mut self, _t0_ns: u64) -> Option<StepPlan> {
        todo!("engine core")
    }

    /// Apply a planned step that ended at `t1_ns`: advance, sample, finish, update metrics.
    pub fn commit_step(&mut self, _plan: StepPlan, _t1_ns: u64) -> StepOutputs {
        todo!("engine core")
    }

    /// Counters, gauges and histograms for `/metrics` (SIMULATOR.md §6).
    pub fn metrics(&self) -> &EngineMetrics {
        &self.metrics
    }
}
