//! `servebench sweep serve`: the flags, files and layout of `vllm bench sweep serve` — for
//! every server combination a server started, checked ready, measured under every benchmark
//! combination `--num-runs` times and stopped — plus servebench's own record of each
//! combination (server pid, port, log, failure with the log's tail) and `decision.md`.

mod bench_cmd;
mod decision;
mod details;
mod interrupt;
mod params;
mod runner;
mod vary;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;

/// Arguments of `servebench sweep serve` (vLLM's `bench sweep serve` flags, then ours).
#[derive(Debug, Clone, Args)]
pub struct SweepServeArgs {
    /// The command that runs the server (`vllm serve …`, `llama-server …`, `servebench sim …`);
    /// `{port}` takes a free port, else `--port N` is appended unless it names one.
    #[arg(long, value_name = "CMD")]
    pub serve_cmd: String,
    /// The benchmark command; `vllm bench serve …` runs as `servebench run` with the same
    /// flags, `servebench sweep …` as a frontier per combination.
    #[arg(long, value_name = "CMD")]
    pub bench_cmd: String,
    /// Run this after every benchmark run instead of resetting the server's prefix cache.
    #[arg(long, value_name = "CMD")]
    pub after_bench_cmd: Option<String>,
    /// Show the output of the server and the benchmark (it is kept in log files either way).
    #[arg(long)]
    pub show_stdout: bool,
    /// Seconds the server may take to become ready.
    #[arg(long, default_value_t = 300, value_name = "SECS")]
    pub server_ready_timeout: u64,
    /// JSON file of server parameter combinations (a list of objects, or an object of named
    /// objects); each key becomes `--key-name value`.
    #[arg(long, value_name = "FILE")]
    pub serve_params: Option<PathBuf>,
    /// JSON file of benchmark parameter combinations (same format).
    #[arg(long, value_name = "FILE")]
    pub bench_params: Option<PathBuf>,
    /// Linked variables: only pairs with equal values run
    /// (e.g. max_num_seqs=max_concurrency,max_model_len=random_input_len).
    #[arg(long, default_value = "", value_name = "SERVE=BENCH,...")]
    pub link_vars: String,
    /// The directory experiments go under.
    #[arg(short = 'o', long, default_value = "results", value_name = "DIR")]
    pub output_dir: PathBuf,
    /// The experiment's name: results go to OUTPUT_DIR/NAME [default: the start time].
    #[arg(short = 'e', long, value_name = "NAME")]
    pub experiment_name: Option<String>,
    /// Measured runs per combination.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub num_runs: usize,
    /// Warm-up requests before each measured run, outside its measured window.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub warmup_num_prompts: usize,
    /// Record a failed combination (its server log's tail included) and go on.
    #[arg(long)]
    pub continue_on_error: bool,
    /// Print the commands, run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Continue an experiment: combinations whose results exist are skipped.
    #[arg(long)]
    pub resume: bool,
    /// The latency contract decision.md judges each combination against
    /// (e.g. --slo ttft:p99:500 tpot:p99:50).
    #[arg(long, num_args = 1.., value_name = "METRIC:pNN:MS", help_heading = "servebench")]
    pub slo: Vec<String>,
    /// One knob at a time: the baseline server parameters (a JSON object, or a parameter file
    /// whose first entry is it) [default: the first entry of --serve-params].
    #[arg(long, value_name = "FILE", help_heading = "servebench")]
    pub baseline: Option<PathBuf>,
    /// One knob at a time: measure the baseline with only this knob changed, once per value
    /// (repeatable: --vary max_num_seqs=16,64,256 --vary enable_chunked_prefill=false).
    #[arg(long, value_name = "KNOB=V1,V2,...", help_heading = "servebench")]
    pub vary: Vec<String>,
    /// Seconds between SIGTERM and SIGKILL when a server is stopped.
    #[arg(
        long,
        default_value_t = 10.0,
        value_name = "SECS",
        help_heading = "servebench"
    )]
    pub server_stop_timeout: f64,
    /// Significance level of the tests decision.md judges each change with (as `compare`).
    #[arg(
        long,
        default_value_t = 0.01,
        value_name = "ALPHA",
        help_heading = "servebench"
    )]
    pub alpha: f64,
}

/// `servebench sweep serve`.
pub async fn sweep_serve(args: SweepServeArgs, command_line: Vec<String>) -> Result<ExitCode> {
    if args.num_runs == 0 {
        bail!("--num-runs must be at least 1");
    }
    let max = servebench_metrics::units::MAX_FLAG_SECS;
    if !(args.server_stop_timeout.is_finite() && (0.0..=max).contains(&args.server_stop_timeout)) {
        bail!("--server-stop-timeout must be a number of seconds from 0 to {max} (30 days)");
    }
    if !(args.alpha > 0.0 && args.alpha < 1.0) {
        bail!("--alpha must be in (0, 1), got {}", args.alpha);
    }
    let plan = runner::Plan::from_args(&args)?;
    // The server leads a process group of its own, so a terminal's Ctrl-C does not reach it:
    // the loop passes the signal on to the benchmark, stops the server and writes its records.
    let interrupt = interrupt::Interrupt::watch_signals().context("cannot watch for signals")?;
    runner::run(&plan, &args, &command_line, &interrupt).await
}
