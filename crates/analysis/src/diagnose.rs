//! Diagnosis: the symptom → regime → confirm-with → first-response table of the benchmarking
//! method, as rules over a matrix's rows or a sweep's points.
//!
//! | symptom | regime | rule |
//! |---|---|---|
//! | TTFT grows with input at low concurrency | prefill cost | [`Rule::PrefillCost`] |
//! | high TPOT at concurrency 1, judged against the bandwidth prediction | memory-bound or inefficient decode | [`Rule::DecodeSpeed`] |
//! | p99 TTFT spikes while p50 is healthy | queueing or interference | [`Rule::TailLatency`] |
//! | TTFT p50 far above the idle prefill at load | queueing in a saturated server | [`Rule::ServerQueueing`] |
//! | throughput up but per-user TPOT worse | batching trade-off | [`Rule::BatchingTradeOff`] |
//! | warm prefix = cold prefix | prefix-cache miss or eviction | [`Rule::PrefixCacheMiss`] |
//! | throughput far below prediction | non-memory bottleneck | [`Rule::ThroughputBelowPrediction`] |
//! | TTFT cliff, re-prefill gaps, KV demand over capacity | preemption / KV exhaustion | [`Rule::KvExhaustion`] |
//!
//! Each [`Finding`] carries the figures that triggered it, a confidence, how to confirm it and
//! the next single-variable experiment. [`interpretation_markdown`] renders the whole
//! [`Diagnosis`] as `interpretation.md`.

mod figures;
mod markdown;
mod rules;
mod view;

pub use figures::{
    PlannedWorkload, RowFigures, ServerCounters, Stat, TargetFacts, SINGLE_STREAM_CONCURRENCY,
};
pub use markdown::interpretation_markdown;
pub use rules::thresholds;
pub use view::{ExperimentView, GroupView, RunView, SweepView};

use serde::Serialize;
use servebench_roofline::Deployment;

use crate::bandwidth::{bandwidth_check, BandwidthCheck};

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
}

impl Rule {
    /// Every rule, in the order they are reported.
    pub const ALL: [Rule; 8] = [
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

/// The GPU and model the predictions are for, and where that came from.
#[derive(Debug, Clone)]
pub struct KnownTarget {
    /// The deployment.
    pub deployment: Deployment,
    /// `the simulator's configuration` or `--gpu h100 --model-preset llama-3.1-8b`.
    pub source: String,
}

/// The diagnosis of one experiment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnosis {
    /// The experiment's title.
    pub title: String,
    /// `matrix`, `sweep` or `single`.
    pub kind: String,
    /// Numbers from a shortened run.
    pub quick: bool,
    /// The figures of every group, in order.
    pub rows: Vec<RowFigures>,
    /// Findings, most consequential first.
    pub findings: Vec<Finding>,
    /// What each rule examined.
    pub checks: Vec<RuleCheck>,
    /// Measured TPOT against the roofline, per group (empty without a known target).
    pub bandwidth: Vec<(String, BandwidthCheck)>,
    /// Where the predictions come from, or why there are none.
    pub target_note: String,
    /// Caveats.
    pub notes: Vec<String>,
}

/// Runs every rule over the experiment's groups.
pub fn diagnose(view: &ExperimentView<'_>, target: Option<&KnownTarget>) -> Diagnosis {
    let groups = view.groups();
    let mut notes = Vec::new();
    let mut rows = Vec::new();
    let mut records = Vec::new();
    for g in &groups {
        match RowFigures::from_group(g) {
            Some(f) => {
                rows.push(f);
                records.push(g.runs.iter().map(|r| r.records).collect::<Vec<_>>());
            }
            None => notes.push(format!(
                "{} completed no request and was left out of the diagnosis",
                g.label
            )),
        }
    }
    if view.quick {
        notes.push("quick run: few requests per row, so tail percentiles are rough and the confidence of every finding is lower than stated".into());
    }
    let deployment = target.map(|t| &t.deployment);
    let bandwidth: Vec<(String, BandwidthCheck)> = match deployment {
        Some(d) => rows
            .iter()
            .filter_map(|r| bandwidth_check(r, d).map(|c| (r.label.clone(), c)))
            .collect(),
        None => Vec::new(),
    };
    let target_note = match target {
        Some(t) => format!(
            "predictions for {} on {} (tp {}) from {}",
            t.deployment.model().id,
            t.deployment.gpu().id,
            t.deployment.tp(),
            t.source
        ),
        None => "no GPU and model known (not a simulator run, and no --gpu/--model-preset given): TPOT and throughput are not judged against the bandwidth prediction".into(),
    };
    let ctx = rules::Ctx {
        rows: &rows,
        records: &records,
        deployment,
    };
    let (findings, checks) = rules::run_all(&ctx);
    Diagnosis {
        title: view.title.clone(),
        kind: view.kind.clone(),
        quick: view.quick,
        rows,
        findings,
        checks,
        bandwidth,
        target_note,
        notes,
    }
}
