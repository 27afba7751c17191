//! The report model: everything an experiment report shows, already loaded and computed.
//!
//! This model is loader-free: the CLI reads an experiment directory (or a single result file)
//! into an [`ExperimentReport`], and the renderers in [`crate::render`] only format it. Figures
//! that need judgement (the knee of a sweep, its headline) arrive here precomputed by the
//! analysis layer.

use serde::{Deserialize, Serialize};
use servebench_metrics::result::{PlanSection, RunMetadata, ServerTelemetry};
use servebench_metrics::validity::RunValidity;
use servebench_metrics::{RequestRecord, RunSummary};

/// What kind of experiment produced the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExperimentKind {
    /// A workload matrix (rows A–F or a user's own).
    Matrix,
    /// A sweep of one variable over one row.
    Sweep,
    /// A single run's result file shown as a one-row report.
    Single,
}

impl ExperimentKind {
    /// The name used in `experiment.json` (`matrix`, `sweep`, `single`).
    pub fn as_str(self) -> &'static str {
        match self {
            ExperimentKind::Matrix => "matrix",
            ExperimentKind::Sweep => "sweep",
            ExperimentKind::Single => "single",
        }
    }
}

/// One run: its summary, its per-request records and its result-file metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunData {
    /// Where the run's `*.servebench.json` lives, relative to the experiment directory
    /// (shown in tables and used as a stable run label in CSV).
    pub path: String,
    /// The run's summary, as saved.
    pub summary: RunSummary,
    /// The run's per-request records (may be empty when the JSONL was not found).
    pub records: Vec<RequestRecord>,
    /// The result file's `metadata` (date, command line, target, ...).
    pub metadata: RunMetadata,
    /// The result file's `plan` (the workload as planned), when it has one.
    #[serde(default)]
    pub plan: Option<PlanSection>,
    /// The result file's `server_telemetry`, when the server was scraped.
    #[serde(default)]
    pub telemetry: Option<ServerTelemetry>,
    /// The result file's validity verdict and offered against achieved load, when it has one.
    #[serde(default)]
    pub validity: Option<RunValidity>,
    /// The result file's prefix hit check, for `--prefix-hit-rate` runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_hit: Option<servebench_metrics::result::PrefixHitCheck>,
    /// The result file's `gpu_telemetry`, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<servebench_metrics::result::GpuTelemetry>,
    /// The result file's `agents` section, for agent runs (`--dataset-name agentic`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<servebench_metrics::AgentStats>,
    /// The result file's metrics per time window (`--slice-duration`), when it has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slices: Option<servebench_metrics::Slices>,
}

/// One workload row of a matrix (or the sole row of a single-run report).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RowReport {
    /// Row id (`A`, `B`, ...).
    pub id: String,
    /// Short name of the row.
    pub name: String,
    /// The question the row answers.
    pub hypothesis: String,
    /// The row's runs (one, or one per `--repeat`).
    pub runs: Vec<RunData>,
}

/// One point of a sweep: the swept variable's value and the runs made at it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepPointReport {
    /// Value of the swept variable (req/s or concurrency).
    pub value: f64,
    /// The runs at this value (one, or one per `--repeat`).
    pub runs: Vec<RunData>,
}

/// A sweep over one row, with its analysed frontier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepReport {
    /// The swept row's id.
    pub row: String,
    /// The swept variable (`request_rate` or `max_concurrency`).
    pub variable: String,
    /// SLOs of the contract, as given (`ttft:p99:500`, ...).
    pub slos: Vec<String>,
    /// The latency percentile of the frontier and knee (`ttft:p99`); `None` means the first
    /// SLO's percentile, or p99 TTFT without SLOs.
    #[serde(default)]
    pub latency_metric: Option<String>,
    /// The points, in sweep order.
    pub points: Vec<SweepPointReport>,
    /// Index into `points` of the frontier's knee, when one was found.
    pub knee: Option<usize>,
    /// One-sentence answer ("X output tok/s at p99 TTFT < Y ms"), when computed.
    pub headline: Option<String>,
    /// Why the sweep stopped early, if it did.
    pub stop_reason: Option<String>,
    /// `--search`: the loads measured in search order and the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<servebench_metrics::result::SearchEntry>,
    /// GPUs serving the target (`--gpus`), for output tok/s per GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
}

/// A whole experiment, ready to render.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExperimentReport {
    /// Report title.
    pub title: String,
    /// Matrix, sweep or single run.
    pub kind: ExperimentKind,
    /// Numbers from a quick (shortened) run: shown as a warning everywhere.
    pub quick: bool,
    /// Workload rows, in order.
    pub rows: Vec<RowReport>,
    /// The sweep, for a sweep experiment.
    pub sweep: Option<SweepReport>,
    /// Things the reader should know, shown near the top.
    pub notes: Vec<String>,
    /// Extra sections `(heading, markdown body)` appended to the report (interpretation, decision).
    pub extra_sections: Vec<(String, String)>,
}

impl ExperimentReport {
    /// An empty report with a title and kind.
    pub fn new(title: impl Into<String>, kind: ExperimentKind) -> Self {
        ExperimentReport {
            title: title.into(),
            kind,
            quick: false,
            rows: Vec::new(),
            sweep: None,
            notes: Vec::new(),
            extra_sections: Vec::new(),
        }
    }
}
