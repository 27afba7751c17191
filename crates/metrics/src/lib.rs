//! `RequestRecord` → `RunSummary`: exact percentiles with confidence intervals, throughputs,
//! goodput, client health and time series, as METRICS.md defines them.

pub mod record;

pub use record::{CountSource, Failure, FailureKind, RequestRecord, TokenEvent};
