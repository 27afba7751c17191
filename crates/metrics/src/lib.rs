//! servebench metrics
//! `RequestRecord` → `RunSummary`: exact percentiles with confidence intervals, throughputs,
//! goodput, client health and time series, as docs/metrics.md defines them.
//!
//! - `record`: the per-request record (shared with the collector).
//! - `derived`: per-request metrics (TTFT, ITL, TPOT, queue, dispatch lag, stalls).
//! - `reasoning`: time to first answer token and the reasoning share of output.
//! - [`stats`]: NumPy-exact mean/median/std/percentile and percentile CIs.
//! - [`summary`]: one run's [`RunSummary`].
//! - [`steady_state`]: MSER-5 warm-up detection on the per-second series.
//! - [`validity`]: per-run verdicts (VALID / NOT ENOUGH DATA / NOT STEADY) and overload.
//! - [`vllm`]: the figures and vectors `vllm bench serve` reports, by vLLM's definitions.
//! - [`repeat`]: repeated runs, mean ± std per figure.
//! - `io`: reading records back from JSONL.
//! - [`energy`](mod@energy): GPU energy over the measured window, from the power readings.
//! - [`units`]: ns/ms/s conversions, used across the workspace.
//! - [`slices`](mod@slices): every statistic per time window (`--slice-duration`).
//! - [`result`]: the result files (`*.servebench.json`, `experiment.json`) as types.

pub mod connections;
mod derived;
pub mod energy;
mod io;
pub mod lora;
pub mod per_pool;
pub mod phases;
mod reasoning;
mod record;
pub mod repeat;
pub mod result;
pub mod sessions_metrics;
pub mod slices;
pub mod stats;
mod steady_state;
pub mod summary;
pub mod turns;
pub mod units;
pub mod validity;
pub mod vllm;

pub use connections::{ConnectionSummary, ConnectionTiming};
pub use energy::{energy, EnergySummary};
pub use io::{read_jsonl, read_jsonl_counted, JsonlRecords, MetricsError};
pub use lora::{by_lora, LoraStats};
pub use phases::{phase_summary, PhaseStat, PhaseSummary};
pub use reasoning::ReasoningSummary;
pub use record::ServedBy;
pub use record::{
    CountSource, Failure, FailureKind, ImageUsage, OutputSplit, RequestPhases, RequestRecord,
    StampClock, TokenEvent,
};
pub use repeat::{aggregate, RepeatFigure, RepeatSummary};
pub use sessions_metrics::{agent_stats, AgentNode, AgentStats};
pub use slices::{slices, SliceOptions, SliceStat, Slices};
pub use stats::PercentileStat;
pub use steady_state::{
    mser5, steady_state, SteadyState, SteadyStateMode, Truncation, MSER_TRUSTED_LEN,
};
pub use summary::{
    summarize, AnswerCheckSummary, GoodputSummary, MetricSummary, RunSummary, Slo, SloMetric,
    SummaryOptions, TimeSeries,
};
pub use turns::{by_turn, TurnStats};
pub use validity::{
    judge, load_verdict, run_facts, FactsOptions, LoadVerdict, Needed, Reason, RunFacts,
    RunValidity, Thresholds, Verdict, VerdictStatus,
};
