//! The `servebench` binary: clap definitions, validation into plans, wiring of the library
//! crates, progress and exit codes. No measurement logic lives here.

// Flag doc comments are clap's help text, where `<DIR>`-style placeholders are the convention;
// rustdoc would read them as HTML tags.
#![allow(rustdoc::invalid_html_tags)]

mod batch_run;
mod calibrate_cmd;
mod compare_cmd;
mod decide_cmd;
mod diagnose_cmd;
mod engine_args;
mod experiment;
mod fleet_compare;
mod k8s_cmd;
mod latency_cmd;
pub mod matrix;
mod merge_cmd;
mod plan_cmd;
mod predict_cmd;
mod reference_cmd;
mod report_cmd;
mod results_cmd;
pub mod results_index;
mod run;
mod server_proc;
mod short_help;
mod significance;
mod sim_cmd;
mod sim_fidelity_cmd;
mod sweep_cmd;
mod sweep_search;
mod sweep_serve;
mod throughput_cmd;
mod trace_cmd;
mod users_cmd;
mod vllm_argv;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Benchmark LLM inference servers: vLLM-compatible load, exact metrics, and a simulated
/// engine to run everything without a GPU.
#[derive(Debug, Parser)]
#[command(name = "servebench", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    // The three commands that stand in for vLLM's take its argument rules (vllm_argv.rs): a
    // flag given twice keeps its last value, as argparse does.
    /// Benchmark one workload against a server (flags of `vllm bench serve`). Without
    /// --base-url/--host it starts the simulator in-process.
    #[command(args_override_self = true, mut_args = short_help::only(short_help::RUN))]
    Run {
        #[command(flatten)]
        args: Box<run::args::RunArgs>,
        #[command(flatten)]
        engine_only: vllm_argv::EngineOnlyFlags,
    },
    /// The latency of one batch released at once, repeated (flags and JSON of `vllm bench
    /// latency`); --batch-size 1,8,64 sweeps batch sizes beside the roofline's prediction.
    /// Without --base-url/--host it runs the simulator in virtual time.
    #[command(args_override_self = true)]
    Latency {
        #[command(flatten)]
        args: Box<latency_cmd::LatencyArgs>,
        #[command(flatten)]
        engine_only: vllm_argv::EngineOnlyFlags,
    },
    /// Every request released at once, timed to the last one (flags and JSON of `vllm bench
    /// throughput`). Without --base-url/--host it runs the simulator in virtual time.
    #[command(args_override_self = true)]
    Throughput {
        #[command(flatten)]
        args: Box<throughput_cmd::ThroughputArgs>,
        #[command(flatten)]
        engine_only: vllm_argv::EngineOnlyFlags,
    },
    /// Serve the simulated inference engine (an OpenAI-compatible server); `sim fidelity`
    /// checks it against published GPU figures, `sim calibrate` fits it to measured runs.
    #[command(mut_args = short_help::only(short_help::SIM))]
    Sim(Box<sim_cmd::SimCmd>),
    /// Bandwidth math for a GPU and model: weights, TPOT floor, prefill, KV capacity.
    Predict(Box<predict_cmd::PredictArgs>),
    /// GPUs needed for a daily volume, from a measured or given per-GPU throughput; with
    /// --fleet, simulated fleet layouts compared on one workload.
    #[command(mut_args = short_help::only(short_help::PLAN))]
    Plan(Box<plan_cmd::PlanArgs>),
    /// Run a workload matrix (a TOML file, or the default rows A–E) into one experiment
    /// directory with a report. Without --base-url it runs against the simulator in-process.
    Matrix(Box<matrix::MatrixArgs>),
    /// Sweep one row over request rates or concurrencies: the throughput–latency frontier,
    /// its knee, and the highest point meeting the SLOs.
    Sweep(Box<sweep_cmd::SweepArgs>),
    /// Re-render report.html, report.md and summary.csv from an experiment directory, or a
    /// one-row report from a single *.servebench.json.
    Report(Box<report_cmd::ReportArgs>),
    /// Compare two results (run files or experiment directories, row by row) on every axis,
    /// with significance tests and --fail-if gates (exit 1 when one trips).
    Compare(Box<compare_cmd::CompareArgs>),
    /// Diagnose a matrix or sweep: which regime each symptom points to (prefill cost,
    /// bandwidth-bound decode, queueing, batching, prefix-cache misses, KV exhaustion), with
    /// evidence, confidence and the next experiment; writes interpretation.md.
    Diagnose(Box<diagnose_cmd::DiagnoseArgs>),
    /// Decide between configurations (one or more sweep/matrix directories) against a latency
    /// contract: accepted and rejected with their figures, cost, versions; writes decision.md.
    Decide(Box<decide_cmd::DecideArgs>),
    /// The most concurrent users of an agent workload (--dataset-name agentic) that still meet
    /// each SLO tier: probes of `run --num-users N`, doubled then bisected per tier.
    Users(Box<users_cmd::UsersArgs>),
    /// Look at a production trace before replaying it: `trace inspect FILE` shows its
    /// arrival rate and burstiness, length percentiles and ideal prefix reuse.
    Trace(Box<trace_cmd::TraceArgs>),
    /// Join the shards of one split run (`run --shard I/N`, one per process or pod) into the
    /// run's result files, computed from all records as one run.
    Merge(Box<merge_cmd::MergeArgs>),
    /// Kubernetes: `k8s job` prints an Indexed Job manifest whose pods each send one shard of
    /// one schedule, starting together (docs/kubernetes.md).
    K8s(Box<k8s_cmd::K8sArgs>),
    /// The results database every run, matrix row and sweep point is indexed in: `ls`,
    /// `show`, `trend` (a regression gate: exit 1), `compare`, `export` (llm-d report v0.2,
    /// PyTorch benchmark records), `import DIR`.
    Results(Box<results_cmd::ResultsArgs>),
    /// Print the command reference (every command's --help) as the guide's Markdown page:
    /// `servebench reference > docs/command-reference.md`.
    Reference,
    /// Write a man page per command into DIR (servebench.1, servebench-run.1, ...).
    Man(reference_cmd::ManArgs),
    /// Print a shell completion script: `servebench completions bash > servebench.bash`.
    Completions(reference_cmd::CompletionsArgs),
}

/// Exit codes: 0 ok, 1 a threshold was missed, 2 an error.
pub fn main() -> ExitCode {
    init_tracing();
    let argv: Vec<String> = std::env::args().collect();
    // `argv` stays as the user wrote it: the recorded command line keeps their spelling.
    let words = match vllm_rules(&argv) {
        Ok(n) => {
            if let Some(w) = n.warning {
                eprintln!("{w}");
            }
            n.words
        }
        Err(msg) => {
            eprintln!("error: {msg}");
            return ExitCode::from(2);
        }
    };
    let refused = match words.get(1).map(String::as_str) {
        Some("run") => run::args::check_unsupported(&words[2..]),
        Some("latency") => latency_cmd::check_unsupported(&words[2..]),
        Some("throughput") => throughput_cmd::check_unsupported(&words[2..]),
        // `plan --fleet` describes its workload with `run`'s flags.
        Some("plan") => run::args::check_unsupported(&words[2..]),
        _ => Ok(()),
    };
    if let Err(msg) = refused {
        eprintln!("error: {msg}");
        return ExitCode::from(2);
    }
    let cli = Cli::parse_from(&words);
    if let Command::Run { engine_only, .. }
    | Command::Latency { engine_only, .. }
    | Command::Throughput { engine_only, .. } = &cli.command
    {
        if let Some(note) = engine_only.notice() {
            eprintln!("{note}");
        }
    }
    if let Command::Run { args, .. } = &cli.command {
        if let Some(p) = args.realtime_priority {
            if let Err(msg) = servebench_loadgen::realtime::enable(p) {
                eprintln!("error: {msg}");
                return ExitCode::from(2);
            }
            // `block_on` polls the run (and its dispatch loop) on this thread.
            servebench_loadgen::realtime::apply_to_current_thread();
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_start(servebench_loadgen::realtime::apply_to_current_thread)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Run { args, .. } => run::run(*args, redact_argv(&argv)).await,
            Command::Latency { args, .. } => latency_cmd::latency(*args).await,
            Command::Throughput { args, .. } => throughput_cmd::throughput(*args).await,
            Command::Sim(args) => sim_cmd::sim(*args).await,
            Command::Predict(args) => predict_cmd::predict(*args),
            Command::Plan(args) if !args.compare.fleet.is_empty() => {
                fleet_compare::compare(args.compare, &redact_argv(&argv)[2..]).await
            }
            Command::Plan(args) => plan_cmd::plan(*args),
            Command::Matrix(args) => matrix::matrix(*args, redact_argv(&argv)).await,
            Command::Sweep(args) => sweep_cmd::sweep(*args, redact_argv(&argv)).await,
            Command::Report(args) => report_cmd::report(*args),
            Command::Compare(args) => compare_cmd::run(*args),
            Command::Diagnose(args) => diagnose_cmd::diagnose(*args),
            Command::Decide(args) => decide_cmd::decide(*args),
            Command::Users(args) => users_cmd::users(*args, redact_argv(&argv)).await,
            Command::Trace(args) => trace_cmd::trace(*args),
            Command::Merge(args) => merge_cmd::merge(*args, redact_argv(&argv)),
            Command::K8s(args) => k8s_cmd::k8s(*args),
            Command::Results(args) => results_cmd::results(*args),
            Command::Reference => reference_cmd::reference(),
            Command::Man(args) => reference_cmd::man(&args),
            Command::Completions(args) => reference_cmd::completions(&args),
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {}", error_text(&e));
            ExitCode::from(run::error_exit(&e))
        }
    }
}

/// A command line with vLLM's argument rules applied (`words`, for clap) and the warning for
/// flags given twice.
pub(crate) struct VllmWords {
    pub words: Vec<String>,
    pub warning: Option<String>,
}

/// `argv` (the binary's name first) with vLLM's argument rules applied to the commands that
/// stand in for vLLM's (`run`, `latency`, `throughput`; see vllm_argv.rs); other commands as
/// given. Err: an ambiguous abbreviation.
pub(crate) fn vllm_rules(argv: &[String]) -> Result<VllmWords, String> {
    let refused: &[(&str, &str)] = match argv.get(1).map(String::as_str) {
        Some("run") => run::args::UNSUPPORTED_VLLM_FLAGS,
        Some("latency") => latency_cmd::UNSUPPORTED_VLLM_FLAGS,
        Some("throughput") => throughput_cmd::UNSUPPORTED_VLLM_FLAGS,
        _ => {
            return Ok(VllmWords {
                words: argv.to_vec(),
                warning: None,
            })
        }
    };
    let Some(spec) = argv.get(1).and_then(|c| vllm_argv::spec_of_subcommand(c)) else {
        return Err("the command's flags are not defined".to_owned());
    };
    let names: Vec<&str> = refused.iter().map(|(f, _)| *f).collect();
    let n = spec
        .with_refused(&names)
        .normalise(&argv[2..])
        .map_err(|e| e.to_string())?;
    let mut words = argv[..2].to_vec();
    words.extend(n.args());
    Ok(VllmWords {
        words,
        warning: n.duplicate_warning(),
    })
}

/// Parses a recorded or built command line as `main` does (vLLM's rules for the commands that
/// take them), without printing.
pub(crate) fn try_parse_cli(argv: &[String]) -> anyhow::Result<Cli> {
    let words = vllm_rules(argv).map_err(anyhow::Error::msg)?.words;
    Ok(Cli::try_parse_from(&words)?)
}

/// An error and its causes on one line, each cause once: a cause a message already quotes
/// (`"cannot read X: {source}"` with the same `source` chained) is not repeated.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let m = cause.to_string();
        if text.contains(&m) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&m);
    }
    // Errors quote servers and files: shown with their control characters escaped.
    servebench_wire::printable::printable_lines(&text).into_owned()
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .map(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            .unwrap_or(false)
    })
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SERVEBENCH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    // Colour codes only for a terminal: a log redirected to a file stays plain text.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
}

/// The command line as recorded in results: secrets (`--api-key` values, auth headers,
/// credentials and key parameters in URLs) masked.
pub fn redact_argv(argv: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut hide_next = false;
    for a in argv {
        if hide_next {
            out.push("***".to_owned());
            hide_next = false;
            continue;
        }
        if a == "--api-key" {
            hide_next = true;
            out.push(a.clone());
        } else if a.starts_with("--api-key=") {
            out.push("--api-key=***".to_owned());
        } else if a.to_ascii_lowercase().starts_with("authorization=")
            || a.to_ascii_lowercase().contains("api-key=")
        {
            let key = a.split('=').next().unwrap_or_default();
            out.push(format!("{key}=***"));
        } else if a.contains("://") {
            out.push(servebench_loadgen::target::redact_url(a));
        } else {
            out.push(a.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_keys_are_masked_in_the_recorded_command_line() {
        let argv: Vec<String> = [
            "servebench",
            "run",
            "--api-key",
            "sk-secret",
            "--header",
            "Authorization=Bearer sk-2",
            "--api-key=sk-3",
            "--base-url",
            "http://user:sk-4@127.0.0.1:8000",
            "--base-url=http://u:sk-5@h:1/?api_key=sk-6",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let joined = redact_argv(&argv).join(" ");
        assert!(!joined.contains("sk-"), "{joined}");
    }

    #[test]
    fn an_io_error_prints_its_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file (os error 2)");
        let e = anyhow::Error::new(io).context("cannot read x.json: No such file (os error 2)");
        let e = e.context("--tokenizer x.json");
        assert_eq!(
            error_text(&e),
            "--tokenizer x.json: cannot read x.json: No such file (os error 2)"
        );
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
