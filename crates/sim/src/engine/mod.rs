//! The engine core (docs/simulator.md §2, §8): one owner of all scheduler, block-pool, RNG and
//! metric state behind plain methods. It never sleeps and never reads a clock; drivers pass
//! engine-clock nanoseconds in.

mod block_pool;
mod commit;
pub mod hashing;
mod invariants;
mod kv_import;
mod lora;
mod metrics;
mod request;
mod schedule;
mod spec;
mod types;

pub use lora::LoraConfig;
pub use metrics::{EngineMetrics, Histogram};
pub use request::{choice_seed, planned_output_len};
pub use spec::{geometric_rates, SpecDecodeConfig, SpecDecodeMetrics, SpecMethod};
pub use types::{FinishReason, Finished, NewRequest, StepOutputs, TokenOutput};

use std::collections::{HashMap, VecDeque};

use rand_chacha::ChaCha8Rng;
use servebench_roofline::{Deployment, SeqWork};

use block_pool::BlockPool;
use request::{Queue, Request};

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
    /// Without chunked prefill: prompt tokens one step may take once it holds a prompt (a
    /// prompt longer than this still runs, alone); 0 = only the step budget limits them.
    /// TensorRT-LLM's `max_num_tokens` (§13).
    pub prompt_tokens_per_step_cap: u32,
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
    /// Token ids of the filler words generated tokens are drawn from (docs/simulator.md §7).
    pub output_vocab: Vec<u32>,
    /// Vocabulary size (prompt token ids must be below it).
    pub vocab_size: u32,
    /// LoRA adapters (`--max-loras`, `--max-lora-rank`, `--lora-load-ms`).
    pub lora: LoraConfig,
    /// Speculative decoding (`--speculative-config`, `--speculative-method`, …); `None` = off.
    pub spec: Option<SpecDecodeConfig>,
}

impl EngineConfig {
    /// Checks the limits the scheduler relies on: a non-empty plan whenever a queue is
    /// non-empty needs one `max_model_len` request to fit in the KV cache and, without chunked
    /// prefill, in one step's budget.
    pub fn validate(&self) -> Result<(), crate::SimError> {
        let err = |m: String| Err(crate::SimError::Config(m));
        if self.block_size == 0 {
            return err("block_size must be at least 1".into());
        }
        if self.max_num_batched_tokens == 0 {
            return err("max_num_batched_tokens must be at least 1".into());
        }
        if self.max_num_seqs == 0 {
            return err("max_num_seqs must be at least 1".into());
        }
        if self.max_model_len < 2 {
            return err(format!(
                "max_model_len must be at least 2, got {}",
                self.max_model_len
            ));
        }
        let allocatable = u64::from(self.num_gpu_blocks.saturating_sub(1));
        let needed = u64::from(self.max_model_len).div_ceil(u64::from(self.block_size));
        if allocatable < needed {
            let largest = allocatable * u64::from(self.block_size);
            return err(format!(
                "one max_model_len={} request needs {needed} KV blocks but only {allocatable} \
                 are allocatable; the largest max_model_len that fits is {largest}",
                self.max_model_len
            ));
        }
        if !self.enable_chunked_prefill && self.max_num_batched_tokens < self.max_model_len {
            return err(format!(
                "without chunked prefill max_num_batched_tokens ({}) must be at least \
                 max_model_len ({})",
                self.max_num_batched_tokens, self.max_model_len
            ));
        }
        if !(0.0..1.0).contains(&self.kv_watermark) {
            return err(format!(
                "kv_watermark must be in [0, 1), got {}",
                self.kv_watermark
            ));
        }
        if !(self.jitter_sigma >= 0.0 && self.jitter_sigma.is_finite()) {
            return err(format!(
                "jitter sigma must be ≥ 0, got {}",
                self.jitter_sigma
            ));
        }
        if !(0.0..=1.0).contains(&self.hiccup_prob) {
            return err(format!(
                "hiccup probability must be in [0, 1], got {}",
                self.hiccup_prob
            ));
        }
        if !(self.hiccup_ms >= 0.0 && self.hiccup_ms.is_finite()) {
            return err(format!(
                "hiccup duration must be ≥ 0 ms, got {}",
                self.hiccup_ms
            ));
        }
        if !(self.eos_len_median >= 0.0 && self.eos_len_median.is_finite()) {
            return err(format!(
                "eos length median must be ≥ 0, got {}",
                self.eos_len_median
            ));
        }
        if !(self.eos_len_sigma >= 0.0 && self.eos_len_sigma.is_finite()) {
            return err(format!(
                "eos length sigma must be ≥ 0, got {}",
                self.eos_len_sigma
            ));
        }
        if let Some(spec) = &self.spec {
            spec.validate().map_err(crate::SimError::Config)?;
        }
        if self.output_vocab.is_empty() {
            return err("output_vocab must name at least one filler token".into());
        }
        if let Some(&t) = self.output_vocab.iter().find(|&&t| t >= self.vocab_size) {
            return err(format!(
                "filler token id {t} is outside the vocabulary of {}",
                self.vocab_size
            ));
        }
        Ok(())
    }
}

/// A planned step: what `plan_step` decided and how long it takes. Opaque to drivers except
/// for its duration.
#[derive(Debug, Clone)]
pub struct StepPlan {
    /// Step duration in ns (jitter and hiccups included, rounded once).
    pub duration_ns: u64,
    /// Tokens scheduled in this step.
    pub scheduled_tokens: u32,
    /// Engine time the step started at.
    pub t0_ns: u64,
    pub(crate) items: Vec<PlannedItem>,
}

impl StepPlan {
    /// Requests planned in this step.
    pub fn num_requests(&self) -> usize {
        self.items.len()
    }

    /// `(request id, new tokens, context)` of every planned request, in plan order.
    pub fn entries(&self) -> impl Iterator<Item = (u64, u32, u32)> + '_ {
        self.items.iter().map(|i| (i.id, i.new_tokens, i.context))
    }
}

#[derive(Debug, Clone)]
pub(crate) struct PlannedItem {
    pub(crate) slot: usize,
    /// Guards against a slot reused after an abort between plan and commit.
    pub(crate) id: u64,
    pub(crate) new_tokens: u32,
    pub(crate) context: u32,
    /// Draft tokens verified in this step (included in `new_tokens`); 0 without speculation.
    pub(crate) drafts: u32,
}

/// Why `try_add` refused a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddError {
    #[error("request {0} has an empty prompt")]
    EmptyPrompt(u64),
    #[error("request {id}: prompt of {prompt} tokens leaves no room for output within max_model_len {max_model_len}")]
    PromptTooLong {
        id: u64,
        prompt: u32,
        max_model_len: u32,
    },
    #[error("request id {0} is already in the engine")]
    DuplicateId(u64),
}

/// The simulated engine's state.
#[derive(Debug)]
pub struct EngineCore {
    config: EngineConfig,
    metrics: EngineMetrics,
    pool: BlockPool,
    /// Request storage; a request keeps its slot from `add` until it finishes.
    slots: Vec<Option<Request>>,
    free_slots: Vec<usize>,
    /// Id → slot; looked up only, never iterated.
    index: HashMap<u64, usize>,
    waiting: VecDeque<usize>,
    running: Vec<usize>,
    jitter_rng: ChaCha8Rng,
    /// Acceptance draws of speculative decoding.
    spec_rng: ChaCha8Rng,
    /// Aborted requests not yet reported.
    aborted: Vec<Finished>,
    /// Reused per step so planning allocates nothing in steady state.
    work: Vec<SeqWork>,
    spare_items: Vec<PlannedItem>,
    hit_scratch: Vec<u32>,
    /// GPU-resident LoRA adapters, least recently used first.
    lora_resident: Vec<u32>,
}

impl EngineCore {
    /// Validates the configuration (budget ≥ 1, at least one `max_model_len` request fits).
    pub fn new(config: EngineConfig) -> Result<Self, crate::SimError> {
        config.validate()?;
        let mut metrics = EngineMetrics::new(config.max_model_len);
        metrics.spec_decode = config
            .spec
            .as_ref()
            .map(|s| SpecDecodeMetrics::new(s.num_speculative_tokens));
        let spec_rng = hashing::stream_rng(config.seed, hashing::STREAM_SPEC);
        let pool = BlockPool::new(config.num_gpu_blocks);
        let jitter_rng = hashing::stream_rng(config.seed, hashing::STREAM_JITTER);
        Ok(EngineCore {
            config,
            metrics,
            pool,
            slots: Vec::new(),
            free_slots: Vec::new(),
            index: HashMap::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            jitter_rng,
            spec_rng,
            aborted: Vec::new(),
            work: Vec::new(),
            spare_items: Vec::new(),
            hit_scratch: Vec::new(),
            lora_resident: Vec::new(),
        })
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Queue a request at the tail of `waiting` (seen by the next `plan_step`). A request the
    /// engine cannot take (see `try_add`) is dropped with a warning: the server validates first.
    pub fn add(&mut self, req: NewRequest) {
        if let Err(e) = self.try_add(req) {
            tracing::warn!("engine dropped a request: {e}");
        }
    }

    /// `add` that says why a request is refused. `max_tokens` beyond `max_model_len` is
    /// clamped to what fits; 0 counts as 1.
    pub fn try_add(&mut self, mut req: NewRequest) -> Result<(), AddError> {
        let prompt = req.prompt.len() as u64;
        if prompt == 0 {
            return Err(AddError::EmptyPrompt(req.id));
        }
        let mml = u64::from(self.config.max_model_len);
        if prompt >= mml {
            return Err(AddError::PromptTooLong {
                id: req.id,
                prompt: prompt.min(u64::from(u32::MAX)) as u32,
                max_model_len: self.config.max_model_len,
            });
        }
        if self.index.contains_key(&req.id) {
            return Err(AddError::DuplicateId(req.id));
        }
        req.max_tokens = req.max_tokens.clamp(1, (mml - prompt) as u32);
        let max_tokens = req.max_tokens;
        let r = Request::new(
            req,
            self.config.seed,
            self.config.eos_len_median,
            self.config.eos_len_sigma,
        );
        debug_assert_eq!(r.max_tokens, max_tokens);
        let slot = match self.free_slots.pop() {
            Some(s) => {
                self.slots[s] = Some(r);
                s
            }
            None => {
                self.slots.push(Some(r));
                self.slots.len() - 1
            }
        };
        let id = self.slots[slot].as_ref().map_or(0, |r| r.id);
        self.index.insert(id, slot);
        self.waiting.push_back(slot);
        self.refresh_gauges();
        Ok(())
    }

    /// Remove a request wherever it is, freeing its blocks; returns whether it was known.
    /// Its `Finished` (reason `Abort`) is reported by the next `commit_step` or `take_aborted`.
    pub fn abort(&mut self, id: u64) -> bool {
        let Some(slot) = self.index.remove(&id) else {
            return false;
        };
        let Some(mut r) = self.slots[slot].take() else {
            return false;
        };
        match r.queue {
            Queue::Waiting => {
                if let Some(pos) = self.waiting.iter().position(|&s| s == slot) {
                    self.waiting.remove(pos);
                }
            }
            Queue::Running => {
                if let Some(pos) = self.running.iter().position(|&s| s == slot) {
                    self.running.remove(pos);
                }
            }
        }
        self.free_blocks(&mut r);
        self.free_slots.push(slot);
        self.metrics.request_success_abort += 1;
        self.observe_finished_counts(&r);
        self.aborted.push(finished_of(&r, FinishReason::Abort));
        self.refresh_gauges();
        true
    }

    /// Ends a request that its server stopped after `emitted` output tokens (a stop string or
    /// stop token found in its text, as vLLM's frontend finds them and then aborts the request
    /// in its engine core): its blocks are freed as on abort, but it counts as a success with
    /// reason `stop`, its latencies end at its last token and its length is what the client
    /// got. Returns whether it was known. Nothing is reported for it: the server already
    /// answered.
    pub fn stop_early(&mut self, id: u64, emitted: u32) -> bool {
        let Some(slot) = self.index.remove(&id) else {
            return false;
        };
        let Some(mut r) = self.slots[slot].take() else {
            return false;
        };
        match r.queue {
            Queue::Waiting => self.waiting.retain(|&s| s != slot),
            Queue::Running => self.running.retain(|&s| s != slot),
        }
        self.free_blocks(&mut r);
        self.free_slots.push(slot);
        // Tokens sampled after the stop (the engine runs ahead of the server by a step) never
        // reached the client.
        r.output.truncate(emitted as usize);
        let end = r.last_token_ns.unwrap_or(r.arrival_ns);
        self.observe_finished(&r, FinishReason::Stop, end);
        self.refresh_gauges();
        true
    }

    /// Aborted requests not yet reported (the next `commit_step` reports them otherwise).
    pub fn take_aborted(&mut self) -> Vec<Finished> {
        std::mem::take(&mut self.aborted)
    }

    /// Drop every prefix-cache hash; false (nothing changed) while any block is referenced.
    pub fn reset_prefix_cache(&mut self) -> bool {
        self.pool.reset()
    }

    /// No request waiting or running.
    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// `vllm:kv_cache_usage_perc`: `1 − free / (num_gpu_blocks − 1)`, cached free blocks
    /// counting as free.
    pub fn kv_cache_usage(&self) -> f64 {
        self.pool.usage()
    }

    /// Free KV blocks (cached ones included).
    pub fn num_free_blocks(&self) -> u32 {
        self.pool.num_free()
    }

    /// Counters, gauges and histograms for `/metrics` (docs/simulator.md §6).
    pub fn metrics(&self) -> &EngineMetrics {
        &self.metrics
    }

    fn refresh_gauges(&mut self) {
        self.metrics.num_requests_running = self.running.len() as u64;
        self.metrics.num_requests_waiting = self.waiting.len() as u64;
        self.metrics.kv_cache_usage_perc = self.pool.usage();
    }

    /// Returns a request's blocks to the pool, tail first, so its tail is evicted before its
    /// head.
    fn free_blocks(&mut self, r: &mut Request) {
        for &b in r.blocks.iter().rev() {
            self.pool.release(b);
        }
        r.blocks.clear();
    }

    /// Histograms that need no timestamps, shared by finished and aborted requests.
    fn observe_finished_counts(&mut self, r: &Request) {
        let m = &mut self.metrics;
        m.request_prompt_tokens.observe(r.prompt.len() as f64);
        m.request_generation_tokens.observe(r.output.len() as f64);
        m.request_max_num_generation_tokens
            .observe(r.output.len() as f64);
        m.request_params_max_tokens.observe(f64::from(r.max_tokens));
        m.request_params_n.observe(1.0);
    }
}

fn finished_of(r: &Request, reason: FinishReason) -> Finished {
    Finished {
        id: r.id,
        reason,
        prompt_tokens: r.prompt.len() as u32,
        completion_tokens: r.output.len() as u32,
        cached_tokens: r.num_cached,
        preemptions: r.num_preemptions,
    }
}

#[cfg(test)]
mod tests;
