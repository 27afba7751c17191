//! `servebench run`: validate flags into a plan, drive the load, render the results.

pub mod agents_plan;
pub mod agents_run;
pub mod agents_virtual;
pub mod args;
pub mod dataset;
pub mod executor;
mod gpu_telemetry;
pub mod http_run;
pub mod lora;
pub mod options;
pub mod output;
pub mod output_check;
pub mod overrides;
pub mod plan;
pub mod pooling;
pub mod prefix_hit;
pub mod random_mm;
pub mod saturation_stop;
pub mod scale_out;
pub mod sessions_run;
pub mod sessions_virtual;
pub mod target;
pub mod timeline;
pub mod trace_replay;
pub mod transport_plan;
pub mod virtual_fleet;
pub mod virtual_run;
pub mod vllm_extras;
pub mod vllm_probe;

use std::process::ExitCode;
use std::sync::Mutex;
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

/// Exit code of a run stopped by Ctrl-C or SIGTERM (as shells report SIGINT).
pub const EXIT_INTERRUPTED: u8 = 130;
/// Exit code of a run stopped because its records could not be written (disk full).
pub const EXIT_OUTPUT_FAILED: u8 = 3;

/// Why measuring stopped early, once something stopped it: every output says so.
static INTERRUPTION: Mutex<Option<Interruption>> = Mutex::new(None);
/// Wakes the stop task when the run itself must stop (its records cannot be written).
static STOP_NOW: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// What stopped a run before its schedule ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interruption {
    pub reason: String,
    /// The process exit code it maps to.
    pub exit: u8,
}

/// The interruption of this process's measurement, if one happened.
pub fn interruption() -> Option<Interruption> {
    INTERRUPTION.lock().ok().and_then(|g| g.clone())
}

fn set_interruption(reason: String, exit: u8) {
    if let Ok(mut g) = INTERRUPTION.lock() {
        // The first cause is the one that stopped the run.
        g.get_or_insert(Interruption { reason, exit });
    }
}

/// Marks the result this process writes as interrupted, for a reason found outside the
/// measurement (`merge` of a shard that was interrupted).
pub fn mark_interrupted(reason: String) {
    set_interruption(reason, EXIT_INTERRUPTED);
}

/// Stop measuring because the run's output cannot be written: no new requests, in-flight
/// ones cancelled after the usual grace.
pub fn stop_for_output_failure(reason: String) {
    set_interruption(reason, EXIT_OUTPUT_FAILED);
    STOP_NOW.notify_one();
}

/// The exit code of a finished run: an interruption overrides the run's own code.
/// The context of an error writing a run's results after it was measured (a full disk):
/// such a run exits [`EXIT_OUTPUT_FAILED`], as one whose records could not be written.
#[derive(Debug, Clone, Copy)]
pub struct OutputFailed;

impl std::fmt::Display for OutputFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("writing the results failed")
    }
}

/// The exit code of an error that ended a command: [`EXIT_OUTPUT_FAILED`] for results that
/// could not be written, 2 for anything else.
pub fn error_exit(e: &anyhow::Error) -> u8 {
    if e.downcast_ref::<OutputFailed>().is_some() {
        EXIT_OUTPUT_FAILED
    } else {
        2
    }
}

pub fn final_exit(exit: ExitCode) -> ExitCode {
    match interruption() {
        Some(i) => ExitCode::from(i.exit),
        None => exit,
    }
}

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
    /// The run stopped itself as over-saturated (`--stop-when-saturated`).
    pub stopped_early: Option<servebench_metrics::result::StoppedEarly>,
}

/// `servebench run`: validate the flags into a plan, resolve the target (starting a
/// simulator when none is given), wire Ctrl-C, measure, report.
pub async fn run(args: RunArgs, command_line: Vec<String>) -> Result<ExitCode> {
    crate::results_index::configure(&args.db);
    let plan = RunPlan::from_args(&args)?;
    let (target, _guard) = resolve_target(&plan.target).await?;
    let stop = interrupt_on_ctrl_c();
    if plan.repeat <= 1 {
        let out = execute(&plan, &target, command_line, &stop, true).await?;
        return Ok(final_exit(out.exit));
    }
    repeat(&plan, &target, command_line, &stop)
        .await
        .map(final_exit)
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

/// Set once the first measured request may go out: before that an interrupt has nothing to
/// keep. A process-wide flag because the signal task and the phases before the load (building
/// the workload, model discovery, warm-up) share nothing else.
static MEASURING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Measured requests go out from now on: an interrupt stops dispatch and keeps what they give.
pub fn measuring_begins() {
    MEASURING.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Ctrl-C or SIGTERM (or a records file that cannot be written) stops dispatching; a second
/// signal or the grace period cancels what is in flight. The cause is kept for the outputs
/// and the exit code.
pub fn interrupt_on_ctrl_c() -> StopSignal {
    let (handle, stop) = stop_pair();
    tokio::spawn(async move {
        let cause = tokio::select! {
            r = tokio::signal::ctrl_c() => match r {
                Ok(()) => Some("SIGINT (Ctrl-C)".to_owned()),
                // No signal handling possible: only an output failure can stop the run.
                Err(_) => {
                    STOP_NOW.notified().await;
                    None
                }
            },
            _ = sigterm() => Some("SIGTERM".to_owned()),
            _ = STOP_NOW.notified() => None,
        };
        match cause {
            // Building the workload, discovery, warm-up: CPU-bound or network work that
            // checks no stop signal, and nothing measured to keep, so the process ends now
            // (an interrupt must never wait for a 10^9-prompt dataset to be built).
            Some(signal) if !MEASURING.load(std::sync::atomic::Ordering::SeqCst) => {
                eprintln!(
                    "\nInterrupted by {signal} before any request was measured: nothing to keep"
                );
                std::process::exit(i32::from(EXIT_INTERRUPTED));
            }
            Some(signal) => {
                set_interruption(format!("interrupted by {signal}"), EXIT_INTERRUPTED);
                eprintln!(
                    "\nInterrupted: no new requests; waiting up to {} s for those in flight (Ctrl-C again to stop now)",
                    GRACE.as_secs()
                );
            }
            None => {
                let reason = interruption().map(|i| i.reason).unwrap_or_default();
                eprintln!(
                    "\nStopping: {reason}; no new requests; waiting up to {} s for those in flight",
                    GRACE.as_secs()
                );
            }
        }
        handle.stop_dispatch();
        tokio::select! {
            _ = tokio::time::sleep(GRACE) => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        handle.cancel();
    });
    stop
}

/// Resolves on SIGTERM (never where there is no such signal).
async fn sigterm() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut s) = signal(SignalKind::terminate()) {
            s.recv().await;
            return;
        }
    }
    std::future::pending::<()>().await;
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

/// Measure one workload against `target` and write its results, then index them in the
/// results database (a failure to index only warns). `print` shows the terminal report and
/// progress notes.
pub async fn execute(
    plan: &RunPlan,
    target: &RunTarget,
    command_line: Vec<String>,
    stop: &StopSignal,
    print: bool,
) -> Result<RunOutcome> {
    let out = measure(plan, target, command_line, stop, print).await?;
    crate::results_index::run_written(&out.native_path);
    Ok(out)
}

/// Measure one workload against `target` and write its results.
async fn measure(
    plan: &RunPlan,
    target: &RunTarget,
    command_line: Vec<String>,
    stop: &StopSignal,
    print: bool,
) -> Result<RunOutcome> {
    // A run that could not keep its results must not send a single request.
    output_check::check_outputs(plan)?;
    if let plan::DatasetChoice::Agentic(agents) = &plan.dataset {
        if plan.stop_when_saturated {
            eprintln!("note: --stop-when-saturated does not watch agent runs; this one goes to the end of its sessions");
        }
        return agents_run::execute(plan, agents, target, command_line, stop, print).await;
    }
    if let Some(mt) = plan.multi_turn {
        if plan.stop_when_saturated {
            eprintln!("note: --stop-when-saturated does not watch --multi-turn runs; this one goes to the end of its schedule");
        }
        return sessions_run::execute(plan, mt, target, command_line, stop, print).await;
    }
    let tokenizer = load_tokenizer(plan.tokenizer.as_deref(), print)?;
    if let Some(t) = trace_replay::build(plan, &tokenizer, target.is_virtual())? {
        let work = Workload {
            requests: t.requests,
            schedule: t.schedule,
            tokenizer,
            expected: Vec::new(),
            trace_blocks: t.blocks,
            trace_prompts: t.prompts,
            shard: None,
        };
        return match target {
            RunTarget::Http(t) => t.measure(plan, work, command_line, stop, print).await,
            RunTarget::Virtual(t) => t.measure(plan, work, command_line, stop, print).await,
        };
    }
    let (requests, expected) = dataset::build_checked(plan, &tokenizer, target.is_virtual())?;
    let (requests, expected) = match &plan.pooling {
        Some(p) => (
            pooling::batch(plan, p, requests, &tokenizer, target.is_virtual())?,
            Vec::new(),
        ),
        None => (requests, expected),
    };
    let requests = random_mm::count_image_tokens(plan, target, requests)?;
    if requests.is_empty() {
        bail!("the dataset produced no requests");
    }
    let schedule = dataset::schedule(plan, requests.len())?;
    let requests = dataset::cycle_to(requests, schedule.len());
    let expected = dataset::cycle_expected(expected, schedule.len());
    let (requests, schedule, expected, shard) = match plan.scale_out.shard {
        None => (requests, schedule, expected, None),
        Some(s) => {
            let info = servebench_metrics::result::ShardInfo {
                index: Some(s.index),
                count: s.count,
                plan_hash: scale_out::plan_hash(&requests, &schedule),
                schedule_requests: schedule.len() as u64,
                ..Default::default()
            };
            let w = scale_out::select(s, requests, schedule, expected);
            if w.requests.is_empty() {
                bail!(
                    "shard {s} has no requests: the schedule has only {} (use fewer shards)",
                    info.schedule_requests
                );
            }
            (w.requests, w.schedule, w.expected, Some(info))
        }
    };
    let work = Workload {
        requests,
        schedule,
        tokenizer,
        expected,
        shard,
        trace_blocks: None,
        trace_prompts: None,
    };
    match target {
        RunTarget::Http(t) => t.measure(plan, work, command_line, stop, print).await,
        RunTarget::Virtual(t) => t.measure(plan, work, command_line, stop, print).await,
    }
}
