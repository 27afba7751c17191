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

mod diagnosis;
mod markdown;

pub use crate::figures::{
    PlannedWorkload, RowFigures, ServerCounters, Stat, TargetFacts, SINGLE_STREAM_CONCURRENCY,
};
pub use crate::rules::{Confidence, Finding, Rule, RuleCheck};
pub use crate::thresholds;
pub use crate::view::{ExperimentView, GroupView, RunView, SweepView};
pub use diagnosis::{diagnose, Diagnosis, KnownTarget};
pub use markdown::interpretation_markdown;
