//! What a rule reports: the rule itself, a finding with its evidence and confidence, and what
//! each rule examined.

use serde::Serialize;

/// The rules of the method's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// TTFT grows with input at low concurrency → prefill cost.
    PrefillCost,
    /// TPOT at concurrency 1 against the bandwidth prediction → memory-bound or inefficient
    /// decode (or a measurement error below the floor).
    DecodeSpeed,
    /// p99 TTFT spikes while p50 is healthy → queueing or interference.
    TailLatency,
    /// TTFT p50 far above the idle prefill, without KV exhaustion → requests queue in a
    /// saturated server (often behind `max_num_seqs`).
    ServerQueueing,
    /// Throughput up but per-user TPOT worse → batching trade-off.
    BatchingTradeOff,
    /// Warm prefix = cold prefix → prefix-cache miss or eviction.
    PrefixCacheMiss,
    /// Throughput far below the prediction → non-memory bottleneck.
    ThroughputBelowPrediction,
    /// TTFT cliff, re-prefill gaps, KV demand over capacity → preemption / KV exhaustion.
    KvExhaustion,
    /// Achieved request rate short of the offered one, client queue growing → the offered
    /// load is past what the server (or the concurrency cap) sustains.
    ClientOverload,
}

impl Rule {
    /// Every rule, in the order they are reported.
    pub const ALL: [Rule; 9] = [
        Rule::ClientOverload,
        Rule::KvExhaustion,
        Rule::ServerQueueing,
        Rule::DecodeSpeed,
        Rule::ThroughputBelowPrediction,
        Rule::PrefixCacheMiss,
        Rule::TailLatency,
        Rule::BatchingTradeOff,
        Rule::PrefillCost,
    ];

    /// Stable identifier (`kv_exhaustion`).
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::PrefillCost => "prefill_cost",
            Rule::DecodeSpeed => "decode_speed",
            Rule::TailLatency => "tail_latency",
            Rule::ServerQueueing => "server_queueing",
            Rule::BatchingTradeOff => "batching_trade_off",
            Rule::PrefixCacheMiss => "prefix_cache_miss",
            Rule::ThroughputBelowPrediction => "throughput_below_prediction",
            Rule::KvExhaustion => "kv_exhaustion",
            Rule::ClientOverload => "client_overload",
        }
    }

    /// The symptom the rule looks for, as the method's table words it.
    pub fn symptom(self) -> &'static str {
        match self {
            Rule::PrefillCost => "TTFT grows with input length at low concurrency",
            Rule::DecodeSpeed => "TPOT at concurrency 1 away from the bandwidth prediction",
            Rule::TailLatency => "p99 TTFT spikes while p50 is healthy",
            Rule::ServerQueueing => "TTFT p50 far above the idle prefill under load",
            Rule::BatchingTradeOff => "throughput up but per-user TPOT worse",
            Rule::PrefixCacheMiss => "a warm shared prefix does not get cached",
            Rule::ThroughputBelowPrediction => "throughput far below the roofline prediction",
            Rule::KvExhaustion => "KV demand over capacity, TTFT cliff, re-prefill gaps",
            Rule::ClientOverload => "achieved request rate short of the offered rate",
        }
    }
}

/// How sure a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    /// Circumstantial: one signal, or figures near a threshold.
    Low,
    /// Two signals agree, or one strong signal without a prediction to check it against.
    Medium,
    /// Direct evidence (server counters, cached-token counts) or several agreeing signals.
    High,
}

impl Confidence {
    /// `high`, `medium`, `low`.
    pub fn as_str(self) -> &'static str {
        match self {
            Confidence::Low => "low",
            Confidence::Medium => "medium",
            Confidence::High => "high",
        }
    }
}

/// One diagnosed regime.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// The rule that fired.
    pub rule: Rule,
    /// The regime, named (`KV-cache exhaustion and preemption`).
    pub regime: String,
    /// The groups it concerns.
    pub rows: Vec<String>,
    /// What was seen, in one sentence.
    pub summary: String,
    /// The figures that triggered it.
    pub evidence: Vec<String>,
    /// How sure it is.
    pub confidence: Confidence,
    /// Why that confidence.
    pub confidence_reason: String,
    /// What would confirm it.
    pub confirm_with: String,
    /// What to do first if it holds.
    pub first_response: String,
    /// The next experiment, changing one variable.
    pub next_experiment: String,
}

/// What a rule looked at, fired or not.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuleCheck {
    /// The rule.
    pub rule: Rule,
    /// Groups it examined.
    pub examined: Vec<String>,
    /// Findings it produced.
    pub findings: usize,
    /// Why it could not run or what it saw, when that is worth saying.
    pub note: Option<String>,
}

impl RuleCheck {
    /// A rule that has examined nothing yet.
    pub(crate) fn new(rule: Rule) -> RuleCheck {
        RuleCheck {
            rule,
            examined: Vec::new(),
            findings: 0,
            note: None,
        }
    }
}
