//! `servebench run`: validate flags into a plan, drive the load, render the results.

pub mod args;
pub mod dataset;
pub mod executor;
pub mod http_run;
pub mod options;
pub mod output;
pub mod overrides;
pub mod plan;
pub mod target;
pub mod virtual_run;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use servebench_loadgen::{stop_pair, StopSignal};
use servebench_tokenizer::Tokenizer;

use self::args::RunArgs;
use self::executor::{Executor, Workload};
use self::http_run::HttpTarget;
use self::plan::RunPlan;
use self::target::resolve_target;
use self::virtual_run::VirtualTarget;

/// How long in-flight requests may finish after Ctrl-C before they are cancelled.
const GRACE: Duration = Duration::from_secs(5);

/// Where `execute` sends its load.
pub enum RunTarget {
    /// A server, measured through the HTTP load generator.
    Http(HttpTarget),
    /// The simulator's engine core in virtual time.
    Virtual(VirtualTarget),
}

impl RunTarget {
    pub fn is_virtual(&self) -> bool {
        matches!(self, RunTarget::Virtual(_))
    }
}

/// What one measured run produced.
pub struct RunOutcome {
    pub summary: servebench_metrics::RunSummary,
    pub vllm: servebench_report::OrderedObject,
    /// servebench's own result (`*.servebench.json`).
    pub native_path: std::path::PathBuf,
    pub jsonl_path: std::path::PathBuf,
    pub vllm_path: Option<std::path::PathBuf>,
    pub exit: ExitCode,
}

/// `servebench run`: validate the flags into a plan, resolve the target (starting a
/// simulator when none is given), wire Ctrl-C, measure, report.
pub async fn run(args: RunArgs, command_line: Vec<String>) -> Result<ExitCode> {
    let plan = RunPlan::from_args(&args)?;
    let (target, _guard) = resolve_target(&plan.target).await?;
    let stop = interrupt_on_ctrl_c();
    if plan.repeat <= 1 {
        let out = execute(&plan, &target, command_line, &stop, true).await?;
        return Ok(out.exit);
    }
    repeat(&plan, &target, command_line, &stop).await
}

/// `--repeat N`: the same measurement N times, then mean ± std of every headline figure.
async fn repeat(
    plan: &RunPlan,
    target: &RunTarget,
    command_line: Vec<String>,
    stop: &StopSignal,
) -> Result<ExitCode> {
    let mut summaries = Vec::new();
    let mut exit = ExitCode::SUCCESS;
    let output_dir = &plan.report.output_dir;
    for k in 1..=plan.repeat {
        if stop.dispatch_stopped() {
            break;
        }
        eprintln!("== repeat {k}/{}", plan.repeat);
        let mut p = plan.clone();
        p.report.output_dir = output_dir.join(format!("repeat-{k}"));
        if let Some(f) = &plan.report.result_filename {
            p.report.result_filename = Some(format!("repeat-{k}-{f}"));
        }
        let out = execute(&p, target, command_line.clone(), stop, true).await?;
        if out.exit != ExitCode::SUCCESS {
            exit = out.exit;
        }
        summaries.push(out.summary);
    }
    let agg = servebench_metrics::aggregate(&summaries);
    print!("{}", servebench_report::terminal::repeat_block(&agg));
    let path = output_dir.join("repeat-summary.json");
    std::fs::create_dir_all(output_dir)
        .with_context(|| format!("cannot create --output-dir {}", output_dir.display()))?;
    let text = serde_json::to_vec_pretty(&serde_json::json!({
        "schema": "servebench.repeat/v1",
        "runs": summaries.len(),
        "repeat": agg,
    }))
    .context("serializing the repeat summary")?;
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("repeat summary: {}", path.display());
    Ok(exit)
}

/// Ctrl-C stops dispatching; a second Ctrl-C or the grace period cancels what is in flight.
pub fn interrupt_on_ctrl_c() -> StopSignal {
    let (handle, stop) = stop_pair();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!(
                "\nInterrupted: no new requests; waiting up to {} s for those in flight (Ctrl-C again to stop now)",
                GRACE.as_secs()
            );
            handle.stop_dispatch();
            tokio::select! {
                _ = tokio::time::sleep(GRACE) => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            handle.cancel();
        }
    });
    stop
}

/// The tokenizer the flags ask for (the built-in one when none is given).
pub fn load_tokenizer(spec: Option<&str>, say: bool) -> Result<Tokenizer> {
    Ok(match spec {
        Some(spec) => Tokenizer::load(spec).with_context(|| format!("--tokenizer {spec}"))?,
        None => {
            if say {
                eprintln!(
                    "Tokenizer: built-in {} (no --tokenizer given; prompt lengths are counted with it)",
                    Tokenizer::builtin().name()
                );
            }
            Tokenizer::builtin()
        }
    })
}

/// Measure one workload against `target` and write its results. `print` shows the terminal
/// report and progress notes.
pub async fn execute(
    plan: &RunPlan,
    target: &RunTarget,
    command_line: Vec<String>,
    stop: &StopSignal,
    print: bool,
) -> Result<RunOutcome> {
    let tokenizer = load_tokenizer(plan.tokenizer.as_deref(), print)?;
    let requests = dataset::build(plan, &tokenizer, target.is_virtual())?;
    if requests.is_empty() {
        bail!("the dataset produced no requests");
    }
    let schedule = dataset::schedule(plan, requests.len())?;
    let requests = dataset::cycle_to(requests, schedule.len());
    let work = Workload {
        requests,
        schedule,
        tokenizer,
    };
    match target {
        RunTarget::Http(t) => t.measure(plan, work, command_line, stop, print).await,
        RunTarget::Virtual(t) => t.measure(plan, work, command_line, stop, print).await,
    }
}
