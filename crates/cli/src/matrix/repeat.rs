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
        let (mut plan, command_line) = plan_for(k, &dir)?;
        plan.report.progress_label = Some(if repeat > 1 {
            format!("{label} run {}/{repeat}", k + 1)
        } else {
            label.to_owned()
        });
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

/// The headline figures of a finished row or point, for the line that announces it: output
/// throughput and p99 E2EL (the median when p99 was not asked for), means over the repeats,
/// then failures if any. `no requests completed` when nothing completed.
pub fn headline(summaries: &[RunSummary]) -> String {
    let n = summaries.len().max(1) as f64;
    let completed: u64 = summaries.iter().map(|s| s.completed).sum();
    let failed: u64 = summaries.iter().map(|s| s.failed).sum();
    let mut out = if completed == 0 {
        "no requests completed".to_owned()
    } else {
        let tok_s = summaries.iter().map(|s| s.output_throughput).sum::<f64>() / n;
        let p99: Option<Vec<f64>> = summaries
            .iter()
            .map(|s| s.e2el.percentile(99.0).map(|p| p.value))
            .collect();
        let median: Option<Vec<f64>> = summaries.iter().map(|s| s.e2el.median).collect();
        let latency = match (p99, median) {
            (Some(v), _) => format!(", p99 E2EL {:.1} ms", v.iter().sum::<f64>() / n),
            (None, Some(v)) => format!(", median E2EL {:.1} ms", v.iter().sum::<f64>() / n),
            _ => String::new(),
        };
        format!("{tok_s:.0} output tok/s{latency}")
    };
    if failed > 0 {
        out.push_str(&format!(", {failed} failed"));
    }
    out
}

/// Prints a row's or point's completion line and keeps it for the live view of the next
/// ones (their verdicts so far).
pub fn announce(line: String) {
    eprintln!("{line}");
    servebench_loadgen::note_finished(line);
}

/// The line printed when a row or point finishes: `Point 2: concurrency 16 — 1429 output
/// tok/s, p99 E2EL 1409.8 ms, NOT ENOUGH DATA (12.3 s)`. `verdict` is the validity verdict
/// (`-` when unknown); the time is the wall time of its runs, warm-ups included.
pub fn completion_line(
    name: &str,
    summaries: &[RunSummary],
    verdict: &str,
    took: std::time::Duration,
) -> String {
    format!(
        "{name} — {}, {verdict} ({:.1} s)",
        headline(summaries),
        took.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_metrics::{summarize, MetricSummary, SummaryOptions};

    fn empty() -> RunSummary {
        summarize(&[], &SummaryOptions::default())
    }

    #[test]
    fn a_completion_line_names_throughput_p99_failures_verdict_and_time() {
        let mut s = RunSummary {
            completed: 10,
            failed: 2,
            output_throughput: 1429.4,
            e2el: MetricSummary::from_ms(vec![1000.0, 1409.8], &[99.0]),
            ..empty()
        };
        s.e2el.percentiles[0].value = 1409.8;
        let line = completion_line(
            "Point 2: concurrency 16",
            &[s],
            "NOT ENOUGH DATA",
            std::time::Duration::from_millis(12_340),
        );
        assert_eq!(
            line,
            "Point 2: concurrency 16 — 1429 output tok/s, p99 E2EL 1409.8 ms, 2 failed, NOT ENOUGH DATA (12.3 s)"
        );
        let none = RunSummary {
            failed: 3,
            ..empty()
        };
        assert_eq!(
            completion_line("Row C", &[none], "-", std::time::Duration::from_secs(1)),
            "Row C — no requests completed, 3 failed, - (1.0 s)"
        );
    }
}
