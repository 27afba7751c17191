//! The files servebench writes and reads back, as types: a run's `*.servebench.json`
//! ([`RunResult`]) and an experiment directory's `experiment.json` ([`ExperimentFile`]) and
//! `environment.json` ([`EnvironmentFile`]).
//!
//! Writers build these values and readers deserialize into them, so a renamed field is a
//! compile error in every reader instead of a silent `null` at run time.

mod environment;
mod experiment;
mod gpu;
mod prefix_hit;
mod run;
mod sim;
mod telemetry;

pub use environment::{EnvironmentFile, HostInfo};
pub use experiment::{
    ExperimentFile, PointEntry, ProbeEntry, RowEntry, SearchEntry, SearchPointEntry, SweepEntry,
};
pub use gpu::{GpuSample, GpuSeries, GpuTelemetry, NO_GPU_TELEMETRY};
pub use prefix_hit::PrefixHitCheck;
pub use run::{
    ClientHealth, ClockAnchor, MeasuredHealth, PlanSection, RequestRate, RunMetadata, RunResult,
    ServerReply, ShardInfo, StoppedEarly, TargetInfo,
};
pub use sim::{FleetConfig, FleetPool, SimConfig};
pub use telemetry::{ServerTelemetry, TelemetrySample};

/// Schema id of a run's `*.servebench.json`.
pub const RESULT_SCHEMA: &str = "servebench.result/v1";
/// Schema id of `experiment.json`.
pub const EXPERIMENT_SCHEMA: &str = "servebench.experiment/v1";
/// Schema id of `environment.json`.
pub const ENVIRONMENT_SCHEMA: &str = "servebench.environment/v1";

/// Pretty JSON with every object's keys in sorted order, the layout result files have always
/// had (serde_json's map is ordered by key), independent of struct field order.
pub fn to_sorted_json_pretty<T: serde::Serialize>(value: &T) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec_pretty(&serde_json::to_value(value)?)
}
