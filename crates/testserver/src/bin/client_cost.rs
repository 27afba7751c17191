//! `client-cost`: what a `servebench run` costs the user who runs it, measured on the whole
//! process. The scripted server runs in this process; each `servebench run` is a child whose
//! CPU time (user + system) and peak resident memory come from `wait4`'s resource usage, so
//! start-up, prompt building, the result files and the summary all count, as they do for the
//! user. A short run of `--baseline-requests` is measured first and subtracted, so the CPU per
//! token is the cost of the tokens themselves (docs/benchmarks.md, "Whole process").
//!
//! `cargo build --release -p servebench-cli -p servebench-testserver`, then
//! `target/release/client-cost --requests 2000,20000`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use clap::Parser;
use servebench_testserver::{Script, ScriptedServer};

mod support;

use support::{context, Result};

/// Measure a `servebench run` as a whole process against the scripted zero-delay server.
#[derive(Debug, Clone, Parser)]
#[command(name = "client-cost")]
struct CostArgs {
    /// The servebench binary [default: `servebench` beside this one].
    #[arg(long, value_name = "PATH")]
    servebench: Option<PathBuf>,
    /// Request counts to measure, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "2000,20000",
        value_name = "N,..."
    )]
    requests: Vec<u64>,
    /// Concurrent streams (`--max-concurrency`).
    #[arg(long, default_value_t = 64, value_name = "N")]
    streams: u64,
    /// Prompt tokens per request (`--random-input-len`).
    #[arg(long, default_value_t = 100, value_name = "N")]
    input_len: u64,
    /// Output tokens per request (`--random-output-len`, with `--ignore-eos`).
    #[arg(long, default_value_t = 1000, value_name = "N")]
    output_len: u64,
    /// The short run whose cost is subtracted as start-up.
    #[arg(long, default_value_t = 8, value_name = "N")]
    baseline_requests: u64,
    /// Runs of each size (alternating sizes, so neighbours' load spreads over all of them).
    #[arg(long, default_value_t = 1, value_name = "N")]
    repeat: u32,
    /// Extra flags passed to every `servebench run` (one string, split on whitespace).
    #[arg(
        long,
        default_value = "",
        value_name = "FLAGS",
        allow_hyphen_values = true
    )]
    extra: String,
}

/// What one child process cost.
#[derive(Debug, Clone, Copy, PartialEq)]
struct ProcessCost {
    wall_s: f64,
    cpu_s: f64,
    peak_rss_bytes: u64,
    output_tokens: u64,
    /// The run's own output throughput (its result file: vLLM's `output_throughput`).
    output_tok_s: f64,
    /// Requests recorded as completed and as failed (vLLM's `completed`, `failed`).
    completed: u64,
    failed: u64,
}

/// Cost per token of the tokens a run adds over the baseline run.
fn cpu_s_per_million(run: &ProcessCost, baseline: &ProcessCost) -> Option<f64> {
    let tokens = run.output_tokens.checked_sub(baseline.output_tokens)?;
    if tokens == 0 {
        return None;
    }
    Some((run.cpu_s - baseline.cpu_s).max(0.0) / tokens as f64 * 1e6)
}

fn main() -> ExitCode {
    let args = CostArgs::parse();
    support::exit(measure_all(&args).map(|()| ExitCode::SUCCESS))
}

fn measure_all(args: &CostArgs) -> Result<()> {
    let servebench = match &args.servebench {
        Some(p) => p.clone(),
        None => context(std::env::current_exe(), || {
            "locating client-cost".to_owned()
        })?
        .with_file_name("servebench"),
    };
    if !servebench.is_file() {
        return Err(format!(
            "{} not found: build it with `cargo build --release -p servebench-cli` or pass --servebench",
            servebench.display()
        ));
    }
    let runtime = context(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build(),
        || "cannot start the async runtime".to_owned(),
    )?;
    let server = context(
        runtime.block_on(ScriptedServer::start(
            Script::new().tokens_from_request(args.output_len),
        )),
        || "cannot start the scripted server".to_owned(),
    )?;
    let url = server.base_url();
    let scratch =
        std::env::temp_dir().join(format!("servebench-client-cost-{}", std::process::id()));
    context(std::fs::create_dir_all(&scratch), || {
        format!("creating {}", scratch.display())
    })?;
    println!(
        "client-cost: {} streams, {} prompt / {} output tokens, baseline {} requests, against {url}",
        args.streams, args.input_len, args.output_len, args.baseline_requests
    );
    println!(
        "{:>8} {:>12} {:>10} {:>16} {:>12} {:>8} {:>10}",
        "requests", "output tok/s", "CPU-s", "CPU-s / M tok", "peak RSS MB", "wall s", "ok/failed"
    );
    for round in 0..args.repeat {
        let baseline = run_once(
            &servebench,
            &url,
            &scratch,
            args,
            args.baseline_requests,
            round,
        )?;
        print_row(args.baseline_requests, &baseline, None);
        for &n in &args.requests {
            let cost = run_once(&servebench, &url, &scratch, args, n, round)?;
            print_row(n, &cost, cpu_s_per_million(&cost, &baseline));
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    runtime.block_on(server.shutdown());
    Ok(())
}

fn print_row(n: u64, c: &ProcessCost, per_million: Option<f64>) {
    let per_million = per_million.map_or_else(|| "(baseline)".to_owned(), |v| format!("{v:.3}"));
    println!(
        "{n:>8} {:>12.0} {:>10.3} {per_million:>16} {:>12.1} {:>8.2} {:>10}",
        c.output_tok_s,
        c.cpu_s,
        c.peak_rss_bytes as f64 / 1e6,
        c.wall_s,
        format!("{}/{}", c.completed, c.failed)
    );
}

fn run_once(
    servebench: &Path,
    url: &str,
    scratch: &Path,
    args: &CostArgs,
    requests: u64,
    round: u32,
) -> Result<ProcessCost> {
    let dir = scratch.join(format!("r{round}-n{requests}"));
    let result_file = "result.json";
    let mut cmd = Command::new(servebench);
    cmd.args(["run", "--base-url", url, "--model", "scripted-model"])
        .args(["--dataset-name", "random", "--ignore-eos"])
        .arg(format!("--random-input-len={}", args.input_len))
        .arg(format!("--random-output-len={}", args.output_len))
        .arg(format!("--num-prompts={requests}"))
        .arg(format!("--max-concurrency={}", args.streams))
        .args(["--save-result", "--result-filename", result_file])
        .arg("--result-dir")
        .arg(&dir)
        .arg("--output-dir")
        .arg(&dir)
        .args(args.extra.split_whitespace())
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let child = context(cmd.spawn(), || format!("starting {}", servebench.display()))?;
    let pid = child.id();
    let mut stderr = child.stderr;
    // Read stderr on a thread so a chatty child never blocks on a full pipe.
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(s) = stderr.as_mut() {
            let _ = std::io::Read::read_to_string(s, &mut text);
        }
        text
    });
    let (status, usage) = wait_with_usage(pid)?;
    let wall_s = started.elapsed().as_secs_f64();
    let stderr = reader.join().unwrap_or_default();
    if status != 0 {
        return Err(format!(
            "servebench run --num-prompts {requests} exited with status {status}: {}",
            stderr.lines().last().unwrap_or("")
        ));
    }
    let path = dir.join(result_file);
    let text = context(std::fs::read_to_string(&path), || {
        format!("reading {}", path.display())
    })?;
    let result: serde_json::Value = context(serde_json::from_str(&text), || {
        format!("parsing {}", path.display())
    })?;
    let number = |key: &str| {
        result
            .get(key)
            .and_then(serde_json::Value::as_f64)
            .ok_or_else(|| format!("{} has no number `{key}`", path.display()))
    };
    let cost = ProcessCost {
        wall_s,
        cpu_s: usage.cpu_s,
        peak_rss_bytes: usage.peak_rss_bytes,
        output_tokens: number("total_output_tokens")? as u64,
        output_tok_s: number("output_throughput")?,
        completed: number("completed")? as u64,
        failed: number("failed")? as u64,
    };
    // Large runs leave hundreds of MB of records: gone before the next run.
    let _ = std::fs::remove_dir_all(&dir);
    Ok(cost)
}

struct Usage {
    cpu_s: f64,
    peak_rss_bytes: u64,
}

/// Wait for `pid` and take its own resource usage (not the sum over every child so far, as
/// `getrusage(RUSAGE_CHILDREN)` would give).
#[allow(unsafe_code)]
fn wait_with_usage(pid: u32) -> Result<(i32, Usage)> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| format!("pid {pid} out of range"))?;
    let mut status: libc::c_int = 0;
    // SAFETY: `rusage` is plain old data that wait4 fills in; zeroed is a valid value of it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: pid is our own child, and both pointers point to live locals.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("waiting for servebench: {err}"));
        }
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    Ok((
        code,
        Usage {
            cpu_s: secs(usage.ru_utime) + secs(usage.ru_stime),
            // Linux reports ru_maxrss in KiB.
            peak_rss_bytes: u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(cpu_s: f64, output_tokens: u64) -> ProcessCost {
        ProcessCost {
            wall_s: 1.0,
            cpu_s,
            peak_rss_bytes: 0,
            output_tokens,
            output_tok_s: 0.0,
            completed: 0,
            failed: 0,
        }
    }

    #[test]
    fn start_up_is_subtracted_from_the_cost_per_token() {
        // 0.4 s of start-up for 8,000 tokens; 1.6 s for 2,000,000.
        let per_m = cpu_s_per_million(&cost(1.6, 2_000_000), &cost(0.4, 8_000));
        let expected = 1.2 / 1_992_000.0 * 1e6;
        assert!(
            per_m.is_some_and(|v| (v - expected).abs() < 1e-9),
            "{per_m:?}"
        );
    }

    #[test]
    fn no_tokens_beyond_the_baseline_gives_no_figure() {
        assert_eq!(cpu_s_per_million(&cost(1.0, 8), &cost(0.5, 8)), None);
        assert_eq!(cpu_s_per_million(&cost(1.0, 4), &cost(0.5, 8)), None);
    }

    #[test]
    fn flags_parse_lists_and_defaults() {
        let a = CostArgs::parse_from(["x", "--requests", "10,20"]);
        assert_eq!(a.requests, vec![10, 20]);
        assert_eq!((a.streams, a.input_len, a.output_len), (64, 100, 1000));
        assert!(CostArgs::try_parse_from(["x", "--requests", "ten"]).is_err());
    }
}
