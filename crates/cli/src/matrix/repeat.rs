//! `--repeat N`: the same workload measured N times (each run with its own seed and its own
//! warm-up), its figures aggregated as mean ± std beside the per-run values.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use servebench_loadgen::StopSignal;
use servebench_metrics::repeat::{aggregate, RepeatSummary};
use servebench_metrics::RunSummary;

use crate::run::plan::RunPlan;

use super::bench::Bench;
use super::layout::{relative, run_dir, write_json};

/// What the runs of one row (or sweep point) produced.
#[derive(Debug, Default)]
pub struct Repeated {
    /// Each run's summary, in run order.
    pub summaries: Vec<RunSummary>,
    /// Each run's `*.servebench.json`, relative to the experiment directory.
    pub runs: Vec<String>,
    /// `repeat.json`, relative, when there was more than one run.
    pub repeat_summary: Option<String>,
    /// Some run failed every request.
    pub all_failed_run: bool,
    /// A run stopped itself as over-saturated (`--stop-when-saturated`): its summary is the
    /// last one, and the repeats after it were not run.
    pub stopped_early: Option<servebench_metrics::result::StoppedEarly>,
    /// Repeats skipped because a run stopped early.
    pub skipped: usize,
}

impl Repeated {
    /// Mean ± std of every figure across the runs.
    pub fn aggregate(&self) -> RepeatSummary {
        aggregate(&self.summaries)
    }
}

/// Runs `repeat` measured runs under `base` (`base/repeat-<k>/` when repeating), the plan
/// and recorded command line of run `k` given by `plan_for(k, its directory)`. Stops early
/// (keeping what ran) once `stop` fires, or once a run stopped itself as over-saturated (the
/// load is written off; measuring it again would only spend the time the stop saved).
pub async fn run_repeated(
    bench: &Bench,
    experiment_dir: &Path,
    base: &Path,
    repeat: usize,
    plan_for: impl Fn(usize, &Path) -> Result<(RunPlan, Vec<String>)>,
    stop: &StopSignal,
    label: &str,
) -> Result<Repeated> {
    let mut out = Repeated::default();
    for k in 0..repeat {
        if stop.dispatch_stopped() {
            break;
        }
        let dir: PathBuf = run_dir(base, k, repeat);
        if repeat > 1 {
            eprintln!("  {label}: run {}/{repeat}", k + 1);
        }
        let (plan, command_line) = plan_for(k, &dir)?;
        let outcome = bench.measure(&plan, command_line, stop).await?;
        if outcome.exit != ExitCode::SUCCESS {
            out.all_failed_run = true;
        }
        out.runs
            .push(relative(experiment_dir, &outcome.native_path));
        out.summaries.push(outcome.summary);
        if let Some(s) = outcome.stopped_early {
            out.skipped = repeat - k - 1;
            if out.skipped > 0 {
                eprintln!(
                    "  {label}: {}; the other {} runs are skipped",
                    s.describe(),
                    out.skipped
                );
            }
            out.stopped_early = Some(s);
            break;
        }
    }
    if repeat > 1 && !out.summaries.is_empty() {
        let path = base.join("repeat.json");
        write_json(&path, &out.aggregate())?;
        out.repeat_summary = Some(relative(experiment_dir, &path));
    }
    Ok(out)
}
