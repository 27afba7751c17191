//! servebench metrics
//! `RequestRecord` → `RunSummary`: exact percentiles with confidence intervals, throughputs,
//! goodput, client health and time series, as METRICS.md defines them.
//!
//! - [`record`]: the per-request record (shared with the collector).
//! - [`derived`]: per-request metrics (TTFT, ITL, TPOT, queue, dispatch lag, stalls).
//! - [`stats`]: NumPy-exact mean/median/std/percentile and percentile CIs.
//! - [`summary`]: one run's [`RunSummary`].
//! - [`vllm`]: the figures and vectors `vllm bench serve` reports, by vLLM's definitions.
//! - [`repeat`]: repeated runs, mean ± std per figure.
//! - [`io`]: reading records back from JSONL.

pub mod derived;
pub mod io;
pub mod record;
pub mod repeat;
pub mod stats;
pub mod summary;
pub mod vllm;

pub use io::{read_jsonl, read_jsonl_counted, JsonlRecords, MetricsError};
pub use record::{CountSource, Failure, FailureKind, RequestRecord, TokenEvent};
pub use repeat::{aggregate, RepeatFigure, RepeatSummary};
pub use stats::PercentileStat;
pub use summary::{
    summarize, GoodputSummary, MetricSummary, RunSummary, Slo, SloMetric, SummaryOptions,
    TimeSeries,
};
