//! Borrowed views of an experiment's results: what the diagnosis and the decision read.
//!
//! The caller loads an experiment directory (a matrix or a sweep) and lends its runs here;
//! nothing in this crate reads files.

use servebench_metrics::result::{PlanSection, RunMetadata, ServerTelemetry};
use servebench_metrics::{RequestRecord, RunSummary};

/// One measured run.
#[derive(Debug, Clone, Copy)]
pub struct RunView<'a> {
    /// Where the run's result file lives, relative to the experiment directory.
    pub path: &'a str,
    /// The run's summary.
    pub summary: &'a RunSummary,
    /// Its per-request records (may be empty when they were not kept).
    pub records: &'a [RequestRecord],
    /// The result file's `metadata` (command line, target, ...).
    pub metadata: &'a RunMetadata,
    /// The result file's `plan` (dataset lengths, rate, concurrency, prefix), when known.
    pub plan: Option<&'a PlanSection>,
    /// The result file's `server_telemetry` (scraped gauges, counter increases), when the
    /// server exposed metrics.
    pub telemetry: Option<&'a ServerTelemetry>,
}

/// A workload row of a matrix, or one load level of a sweep: runs of one configuration under
/// one workload (one, or one per `--repeat`). Groups are never pooled into one percentile.
#[derive(Debug, Clone)]
pub struct GroupView<'a> {
    /// Row id (`A`), or the swept row's id and the load (`D@8`).
    pub id: String,
    /// How a reader recognises it (`A (interactive baseline)`, `D at request_rate 8`).
    pub label: String,
    /// The question the row answers, when given.
    pub hypothesis: String,
    /// The swept variable's value for a sweep point.
    pub load: Option<f64>,
    /// The runs.
    pub runs: Vec<RunView<'a>>,
}

/// A sweep's own description.
#[derive(Debug, Clone)]
pub struct SweepView<'a> {
    /// The swept row's id.
    pub row: String,
    /// `request_rate` or `max_concurrency`.
    pub variable: String,
    /// The contract stored with the sweep (`ttft:p99:500`, ...).
    pub slos: Vec<String>,
    /// The load levels, in sweep order.
    pub points: Vec<GroupView<'a>>,
    /// Whether the sweep stopped before its last planned load.
    pub stopped_early: bool,
    /// Why it stopped, when it says.
    pub stop_reason: Option<String>,
}

/// A matrix or a sweep.
#[derive(Debug, Clone)]
pub struct ExperimentView<'a> {
    /// The experiment's title.
    pub title: String,
    /// `matrix`, `sweep` or `single`.
    pub kind: String,
    /// Numbers from a shortened (`--quick`) run.
    pub quick: bool,
    /// Workload rows (for a sweep, rows that are not also its points).
    pub rows: Vec<GroupView<'a>>,
    /// The sweep, for a sweep experiment.
    pub sweep: Option<SweepView<'a>>,
}

impl<'a> ExperimentView<'a> {
    /// Every group to analyse: the rows, then the sweep's points. A row whose runs are all
    /// also a sweep point's is left out, so no run is counted twice.
    pub fn groups(&self) -> Vec<&GroupView<'a>> {
        let point_paths: Vec<&str> = self
            .sweep
            .iter()
            .flat_map(|s| s.points.iter())
            .flat_map(|p| p.runs.iter().map(|r| r.path))
            .collect();
        let mut out: Vec<&GroupView<'a>> = self
            .rows
            .iter()
            .filter(|g| !g.runs.is_empty() && !g.runs.iter().all(|r| point_paths.contains(&r.path)))
            .collect();
        if let Some(s) = &self.sweep {
            out.extend(s.points.iter().filter(|p| !p.runs.is_empty()));
        }
        out
    }

    /// The first run's metadata, for facts shared by the whole experiment (the target).
    pub fn first_metadata(&self) -> Option<&'a RunMetadata> {
        self.groups()
            .into_iter()
            .flat_map(|g| g.runs.iter())
            .map(|r| r.metadata)
            .next()
    }
}
