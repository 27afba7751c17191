//! The engine core's public vocabulary: what drivers hand in and what they get back.
//! Times are engine-clock nanoseconds (virtual or real, the core never reads a clock).

use serde::Serialize;

/// Why a request stopped, as vLLM names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// Natural end (the simulated EOS came before `max_tokens`).
    Stop,
    /// `max_tokens` reached (always with `ignore_eos`).
    Length,
    /// Aborted (client disconnect, `abort`).
    Abort,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
        }
    }
}

/// A request handed to the engine.
#[derive(Debug, Clone)]
pub struct NewRequest {
    /// Unique per engine; assigned by the driver.
    pub id: u64,
    pub prompt: Vec<u32>,
    pub max_tokens: u32,
    pub min_tokens: u32,
    pub ignore_eos: bool,
    /// The request's `seed` field; keys its output RNG stream (else a hash of the prompt).
    pub seed: Option<u64>,
    pub cache_salt: Option<String>,
    /// When the request reached the engine (engine clock, ns).
    pub arrival_ns: u64,
    /// The LoRA adapter it runs with (1-based, as the server numbers its adapters).
    pub lora: Option<u32>,
}

/// One token sampled for one request at the end of a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenOutput {
    pub id: u64,
    pub token: u32,
    /// 1-based index of this token in the request's output.
    pub index: u32,
    /// Set on the request's last token.
    pub finish: Option<FinishReason>,
    /// The request's prefix-cache hit at first admission, in tokens: a server that ends a
    /// request itself (a stop string) reports it in usage without waiting for the engine.
    pub cached_tokens: u32,
}

/// A request that left the engine in this step (finished or aborted), with its usage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub id: u64,
    pub reason: FinishReason,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// Prefix-cache hit at first admission, in tokens (`cached_tokens` in usage).
    pub cached_tokens: u32,
    pub preemptions: u32,
}

/// What one committed step produced.
#[derive(Debug, Clone, Default)]
pub struct StepOutputs {
    pub tokens: Vec<TokenOutput>,
    pub finished: Vec<Finished>,
}
