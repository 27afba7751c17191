//! The loop of `sweep serve`: server combinations in turn, each server started and stopped
//! once, benchmark combinations measured against it, results laid out as vLLM lays them out.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::{Map, Value};
use servebench_analysis::frontier::{parse_slos, Slo};

use super::bench_cmd::{BenchCmd, BenchKind};
use super::decision;
use super::interrupt::{Interrupt, Interrupted};
use super::params::{linked, parse_link_vars, ParamItem, ParamSweep};
use super::SweepServeArgs;
use crate::server_proc::{
    logged, resolve_self, shell_words, split_words, Lifecycle, ServerProcess, TAIL_LINES,
};

/// Everything the flags resolve to.
pub struct Plan {
    serve_cmd: Vec<String>,
    bench: BenchCmd,
    after_bench: Option<Vec<String>>,
    serve_params: ParamSweep,
    bench_params: ParamSweep,
    links: Vec<(String, String)>,
    pub experiment_dir: PathBuf,
    slos: Vec<Slo>,
    alpha: f64,
    lifecycle: Lifecycle,
    exe: String,
}

impl Plan {
    pub fn from_args(args: &SweepServeArgs) -> Result<Plan> {
        let serve_cmd = resolve_self(split_words(&args.serve_cmd).context("--serve-cmd")?);
        if serve_cmd.is_empty() {
            bail!("--serve-cmd is empty");
        }
        let bench_words = split_words(&args.bench_cmd).context("--bench-cmd")?;
        if bench_words.is_empty() {
            bail!("--bench-cmd is empty");
        }
        let after_bench = match &args.after_bench_cmd {
            Some(c) => Some(split_words(c).context("--after-bench-cmd")?),
            None => None,
        };
        let read = |p: &Option<PathBuf>, flag: &str| -> Result<ParamSweep> {
            match p {
                Some(p) => ParamSweep::read(p).with_context(|| flag.to_owned()),
                None => Ok(ParamSweep::unchanged()),
            }
        };
        let mut serve_params = read(&args.serve_params, "--serve-params")?;
        if !args.vary.is_empty() {
            let varies = args
                .vary
                .iter()
                .map(|v| super::vary::parse_vary(v))
                .collect::<Result<Vec<_>>>()?;
            let base = super::vary::baseline(args.baseline.as_deref(), &serve_params)?;
            serve_params = super::vary::design(&base, &varies);
        } else if args.baseline.is_some() {
            bail!("--baseline goes with --vary knob=v1,v2,...");
        }
        let bench_params = read(&args.bench_params, "--bench-params")?;
        let links = parse_link_vars(&args.link_vars)?;
        let name = args
            .experiment_name
            .clone()
            .unwrap_or_else(|| chrono::Local::now().format("%Y%m%d_%H%M%S").to_string());
        let experiment_dir = args.output_dir.join(name);
        if args.resume && !experiment_dir.exists() {
            bail!(
                "--resume: there is no experiment at {} to resume",
                experiment_dir.display()
            );
        }
        if !args.resume && !args.dry_run && experiment_dir.exists() {
            bail!(
                "{} exists: pass --resume to continue it, or another --experiment-name",
                experiment_dir.display()
            );
        }
        let slo_text: Vec<String> = args.slo.iter().map(|s| s.replace(',', " ")).collect();
        let slos = if slo_text.join(" ").trim().is_empty() {
            Vec::new()
        } else {
            parse_slos(&slo_text.join(" ")).context("--slo")?
        };
        let exe = std::env::current_exe()
            .context("cannot locate the servebench binary")?
            .display()
            .to_string();
        let bench = BenchCmd::new(bench_words);
        if let Some(w) = bench
            .check_flags()
            .map_err(anyhow::Error::msg)
            .context("--bench-cmd")?
        {
            eprintln!("{w} (in --bench-cmd)");
        }
        let api_key = bench.api_key();
        Ok(Plan {
            serve_cmd,
            bench,
            after_bench,
            serve_params,
            bench_params,
            links,
            experiment_dir,
            slos,
            alpha: args.alpha,
            lifecycle: Lifecycle {
                ready_timeout: Duration::from_secs(args.server_ready_timeout),
                grace: Duration::from_secs_f64(args.server_stop_timeout),
                echo: args.show_stdout,
                api_key,
            },
            exe,
        })
    }

    fn benches_for<'a>(&'a self, serve: &'a ParamItem) -> impl Iterator<Item = &'a ParamItem> {
        self.bench_params
            .0
            .iter()
            .filter(move |b| linked(serve, b, &self.links))
    }

    /// vLLM's directory of a combination: `SERVE-<name>` and `BENCH-<name>` parts.
    fn comb_dir(&self, serve: &ParamItem, bench: &ParamItem) -> PathBuf {
        let mut parts: Vec<String> = Vec::new();
        if !serve.is_empty() {
            parts.extend(["SERVE-".to_owned(), serve.name()]);
        }
        if !bench.is_empty() {
            parts.extend(["BENCH-".to_owned(), bench.name()]);
        }
        self.experiment_dir.join(sanitize(&parts.join("-")))
    }

    fn server_log(&self, serve: &ParamItem) -> PathBuf {
        let name = if serve.is_empty() {
            "default".to_owned()
        } else {
            serve.name()
        };
        self.experiment_dir
            .join(sanitize(&format!("SERVE-{name}-server.log")))
    }
}

/// vLLM's file-name cleaning: no directory separators, no `..`.
fn sanitize(name: &str) -> String {
    name.replace('/', "_").replace("..", "__")
}

/// One server combination's server, as recorded.
#[derive(Debug, Clone, Serialize)]
struct ServerRecord {
    serve: Map<String, Value>,
    command: Vec<String>,
    pid: u32,
    port: u16,
    log: String,
}

/// One server × benchmark combination, as recorded in `sweep_serve.json`.
#[derive(Debug, Clone, Serialize)]
pub struct CombRecord {
    pub serve_name: String,
    pub bench_name: String,
    pub serve: Map<String, Value>,
    pub bench: Map<String, Value>,
    pub dir: String,
    /// `ok`, `resumed` (results found), `failed`, or `interrupted` (by a signal; its finished
    /// runs kept, no `summary.json`, so `--resume` measures it again).
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_log: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_tail: Option<String>,
    /// The measured runs' results (vLLM's JSON with the run number and parameters).
    #[serde(skip)]
    pub runs: Vec<Value>,
    /// The same runs' servebench results with their per-request records, when every run has
    /// one (`servebench run` as the benchmark); empty otherwise.
    #[serde(skip)]
    pub details: Vec<servebench_report::RunData>,
}

#[derive(Default)]
struct State {
    combs: Vec<CombRecord>,
    servers: Vec<ServerRecord>,
}

impl CombRecord {
    fn new(plan: &Plan, serve: &ParamItem, bench: &ParamItem) -> CombRecord {
        CombRecord {
            serve_name: serve.name(),
            bench_name: bench.name(),
            serve: serve.to_json(),
            bench: bench.to_json(),
            dir: plan.comb_dir(serve, bench).display().to_string(),
            status: "failed",
            server_pid: None,
            port: None,
            server_log: None,
            error: None,
            log_tail: None,
            runs: Vec::new(),
            details: Vec::new(),
        }
    }
}

/// Runs the sweep (or prints it with `--dry-run`).
pub async fn run(
    plan: &Plan,
    args: &SweepServeArgs,
    command_line: &[String],
    interrupt: &Interrupt,
) -> Result<ExitCode> {
    if !args.dry_run {
        std::fs::create_dir_all(&plan.experiment_dir)
            .with_context(|| format!("cannot create {}", plan.experiment_dir.display()))?;
    }
    if !args.vary.is_empty() {
        println!(
            "One knob at a time: every server combination is the baseline with one knob changed"
        );
        for s in &plan.serve_params.0 {
            println!("  {}: {}", s.name(), s.as_text(", "));
        }
    }
    let mut state = State::default();
    let mut stopped: Option<anyhow::Error> = None;
    let mut interrupted: Option<&'static str> = None;
    for serve in &plan.serve_params.0 {
        if let Some(s) = interrupt.signalled() {
            interrupted = Some(s.cause);
            break;
        }
        let server_cmd = serve.apply_to(&plan.serve_cmd);
        println!("[BEGIN SERVER]");
        println!("Server overrides: {}", serve.as_text(", "));
        println!(
            "Server command: {}",
            shell_words(&crate::redact_argv(&server_cmd))
        );
        if args.dry_run {
            print_dry_run(plan, args, serve);
            println!("[END SERVER]");
            continue;
        }
        let needs_server = plan
            .benches_for(serve)
            .any(|b| !plan.comb_dir(serve, b).join("summary.json").exists());
        if !needs_server {
            println!("Every result of this server combination exists: not started.");
            for b in plan.benches_for(serve) {
                let mut rec = CombRecord::new(plan, serve, b);
                rec.runs = load_summary(&plan.comb_dir(serve, b))?;
                rec.details = super::details::load(&plan.comb_dir(serve, b), &rec.runs);
                rec.status = "resumed";
                state.combs.push(rec);
            }
            println!("[END SERVER]");
            continue;
        }
        let log = plan.server_log(serve);
        // A signal while the server loads drops the start, which kills the server's group.
        let started = tokio::select! {
            r = ServerProcess::start(&server_cmd, &log, &plan.lifecycle) => r,
            s = interrupt.wait() => {
                for b in plan.benches_for(serve) {
                    let mut rec = CombRecord::new(plan, serve, b);
                    rec.status = "interrupted";
                    rec.error = Some(format!("interrupted by {} before the server was ready", s.cause));
                    rec.server_log = Some(log.display().to_string());
                    state.combs.push(rec);
                }
                println!("[END SERVER]");
                interrupted = Some(s.cause);
                break;
            }
        };
        let mut server = match started {
            Ok(s) => s,
            Err(e) => {
                let text = format!("{e:#}");
                println!("[FAILED SERVER COMBINATION] {}: {text}", serve.name());
                write_json(
                    &plan.experiment_dir.join(sanitize(&format!(
                        "SERVE-{}-failure.json",
                        display_name(serve)
                    ))),
                    &serde_json::json!({
                        "error": text,
                        "serve_overrides": serve.to_json(),
                        "server_log": log.display().to_string(),
                    }),
                )?;
                for b in plan.benches_for(serve) {
                    let mut rec = CombRecord::new(plan, serve, b);
                    rec.error = Some(text.clone());
                    rec.log_tail = Some(logged::tail(&log, TAIL_LINES));
                    rec.server_log = Some(log.display().to_string());
                    state.combs.push(rec);
                }
                println!("[END SERVER]");
                if !args.continue_on_error {
                    stopped = Some(e);
                    break;
                }
                continue;
            }
        };
        state.servers.push(ServerRecord {
            serve: serve.to_json(),
            command: crate::redact_argv(&server.addressed.argv),
            pid: server.pid(),
            port: server.addressed.port,
            log: log.display().to_string(),
        });
        for bench in plan.benches_for(serve) {
            let mut rec = CombRecord::new(plan, serve, bench);
            rec.server_pid = Some(server.pid());
            rec.port = Some(server.addressed.port);
            rec.server_log = Some(log.display().to_string());
            match run_comb(plan, args, &mut server, serve, bench, interrupt).await {
                Err(e) if e.is::<Interrupted>() => {
                    let Ok(i) = e.downcast::<Interrupted>() else {
                        unreachable!("checked just above")
                    };
                    println!("[INTERRUPTED COMBINATION] {}: {i}", rec.dir);
                    rec.status = "interrupted";
                    rec.error = Some(format!(
                        "{i} after {} of {} run(s)",
                        i.done.len(),
                        args.num_runs
                    ));
                    rec.runs = i.done;
                    state.combs.push(rec);
                    interrupted = Some(i.cause);
                    break;
                }
                Ok((runs, resumed)) => {
                    rec.status = if resumed { "resumed" } else { "ok" };
                    rec.details = super::details::load(&plan.comb_dir(serve, bench), &runs);
                    rec.runs = runs;
                    state.combs.push(rec);
                }
                Err(e) => {
                    let text = format!("{e:#}");
                    println!("[FAILED COMBINATION] {}: {text}", rec.dir);
                    rec.error = Some(text);
                    rec.log_tail = Some(server.log_tail());
                    state.combs.push(rec);
                    if !args.continue_on_error {
                        stopped = Some(e);
                        break;
                    }
                }
            }
        }
        server.stop().await;
        println!("[END SERVER]");
        write_records(plan, &state, command_line)?;
        if stopped.is_some() || interrupted.is_some() {
            break;
        }
    }
    if args.dry_run {
        println!(
            "Experiment will be saved at: {}",
            plan.experiment_dir.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    write_records(plan, &state, command_line)?;
    if let Some(cause) = interrupted {
        eprintln!(
            "Interrupted by {cause}: the server was stopped; what was done is recorded in {}; `--resume` continues it",
            plan.experiment_dir.join("sweep_serve.json").display()
        );
        return Ok(ExitCode::from(crate::run::EXIT_INTERRUPTED));
    }
    let failed = state.combs.iter().filter(|c| c.status == "failed").count();
    if let Some(e) = stopped {
        return Err(e.context(format!(
            "the sweep stopped at a failed combination (results so far in {}; --continue-on-error goes on past one, --resume continues)",
            plan.experiment_dir.display()
        )));
    }
    if failed > 0 {
        eprintln!("{failed} combination(s) failed; see sweep_serve.json and the failure files");
    }
    println!(
        "Experiment has been saved at: {}",
        plan.experiment_dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn display_name(serve: &ParamItem) -> String {
    if serve.is_empty() {
        "default".to_owned()
    } else {
        serve.name()
    }
}

fn print_dry_run(plan: &Plan, args: &SweepServeArgs, serve: &ParamItem) {
    for bench in plan.benches_for(serve) {
        let dir = plan.comb_dir(serve, bench);
        let applied = bench.apply_to(&plan.bench.words);
        for r in 0..args.num_runs {
            let out = dir.join(format!("run={r}.json"));
            let argv = plan.bench.argv(
                &applied,
                &plan.exe,
                "http://127.0.0.1:{port}",
                None,
                &out,
                args.warmup_num_prompts,
            );
            println!("[BEGIN BENCHMARK]");
            println!("Benchmark overrides: {}", bench.as_text(", "));
            println!("Run Number: {r}");
            println!(
                "Benchmark command: {}",
                shell_words(&crate::redact_argv(&argv))
            );
            println!("Output file: {}", out.display());
            println!("[END BENCHMARK]");
        }
    }
}

fn load_summary(dir: &Path) -> Result<Vec<Value>> {
    let p = dir.join("summary.json");
    let text =
        std::fs::read_to_string(&p).with_context(|| format!("cannot read {}", p.display()))?;
    let v: Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", p.display()))?;
    match v {
        Value::Array(a) => Ok(a),
        _ => bail!("{}: expected a list of run results", p.display()),
    }
}

fn write_json(path: &Path, v: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(v)?;
    std::fs::write(path, text + "\n").with_context(|| format!("cannot write {}", path.display()))
}

/// One combination: `--num-runs` measured runs, their results with the parameters added, and
/// `summary.json`. Returns the runs and whether they were all found already.
async fn run_comb(
    plan: &Plan,
    args: &SweepServeArgs,
    server: &mut ServerProcess,
    serve: &ParamItem,
    bench: &ParamItem,
    interrupt: &Interrupt,
) -> Result<(Vec<Value>, bool)> {
    let dir = plan.comb_dir(serve, bench);
    if dir.join("summary.json").exists() {
        println!("Found existing results in {}: skipped.", dir.display());
        return Ok((load_summary(&dir)?, true));
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    if plan.bench.kind == BenchKind::External && args.warmup_num_prompts > 0 {
        let mut warm = bench.clone();
        warm.set("num_prompts", Value::from(args.warmup_num_prompts));
        let out = dir.join("warmup.json");
        if let Err(e) = run_one(plan, args, server, serve, &warm, -1, &out, 0, interrupt).await {
            if e.is::<Interrupted>() {
                return Err(e);
            }
            if server.exited().is_some() || !args.continue_on_error {
                return Err(e.context("warm-up run"));
            }
            println!("[FAILED BENCHMARK] warm-up: {e:#}");
        }
    }
    // A servebench run warms up inside its own process, outside its measured window.
    let warmups = match plan.bench.kind {
        BenchKind::Run => args.warmup_num_prompts,
        _ => 0,
    };
    let mut runs = Vec::new();
    let mut last_error = None;
    for r in 0..args.num_runs {
        let out = dir.join(format!("run={r}.json"));
        match run_one(
            plan, args, server, serve, bench, r as i64, &out, warmups, interrupt,
        )
        .await
        {
            Ok(v) => runs.push(v),
            Err(e) if e.is::<Interrupted>() => {
                let Ok(mut i) = e.downcast::<Interrupted>() else {
                    unreachable!("checked just above")
                };
                i.done = runs;
                return Err(i.into());
            }
            Err(e) => {
                write_json(
                    &dir.join(format!("run={r}.failure.json")),
                    &serde_json::json!({
                        "run_number": r,
                        "error": format!("{e:#}"),
                        "serve_overrides": serve.to_json(),
                        "bench_overrides": bench.to_json(),
                    }),
                )?;
                // Without its server the combination cannot go on; without
                // --continue-on-error the sweep stops at its first failure.
                if server.exited().is_some() || !args.continue_on_error {
                    return Err(e);
                }
                println!("[FAILED BENCHMARK] run={r}: {e:#}");
                last_error = Some(e);
            }
        }
    }
    if runs.is_empty() {
        return Err(last_error.unwrap_or_else(|| anyhow::anyhow!("no measured run succeeded")));
    }
    write_json(&dir.join("summary.json"), &Value::Array(runs.clone()))?;
    Ok((runs, false))
}

/// A result file with the run number and both combinations' parameters added (as vLLM adds
/// them).
fn with_params(mut v: Value, serve: &ParamItem, bench: &ParamItem, run: i64) -> Value {
    if let Value::Object(m) = &mut v {
        m.insert("run_number".to_owned(), Value::from(run));
        for (k, val) in serve.0.iter().chain(bench.0.iter()) {
            m.insert(k.clone(), val.clone());
        }
    }
    v
}

#[allow(clippy::too_many_arguments)]
async fn run_one(
    plan: &Plan,
    args: &SweepServeArgs,
    server: &mut ServerProcess,
    serve: &ParamItem,
    bench: &ParamItem,
    run: i64,
    out: &Path,
    warmups: usize,
    interrupt: &Interrupt,
) -> Result<Value> {
    let applied = bench.apply_to(&plan.bench.words);
    let argv = plan.bench.argv(
        &applied,
        &plan.exe,
        &server.base_url(),
        Some(server.addressed.port),
        out,
        warmups,
    );
    println!("[BEGIN BENCHMARK]");
    println!("Benchmark overrides: {}", bench.as_text(", "));
    println!("Run Number: {run}");
    println!(
        "Benchmark command: {}",
        shell_words(&crate::redact_argv(&argv))
    );
    println!("Output file: {}", out.display());
    if out.exists() {
        println!("Found existing results.");
        println!("[SKIPPED BENCHMARK]");
        let v = read_result(out)?;
        return Ok(with_params(v, serve, bench, run));
    }
    if let Some(status) = server.exited() {
        bail!(
            "the server had exited ({status}) before the run; last lines of {}:\n{}",
            server.log.display(),
            server.log_tail()
        );
    }
    if let Some(s) = interrupt.signalled() {
        println!("[INTERRUPTED BENCHMARK] not started");
        return Err(Interrupted {
            cause: s.cause,
            done: Vec::new(),
        }
        .into());
    }
    let dir = out.parent().unwrap_or(Path::new("."));
    let bench_log = dir.join("bench.log");
    let started = std::time::SystemTime::now();
    // In a group of its own, the benchmark hears a terminal's Ctrl-C only through us: once.
    let mut child = KillOnDrop(logged::spawn(&argv, &bench_log, args.show_stdout, true)?);
    let mut server_exit = None;
    let mut passed_on: Option<std::time::Instant> = None;
    let status = loop {
        if let Some(s) = child.0.try_wait().context("waiting for the benchmark")? {
            break s;
        }
        if let Some(s) = interrupt.signalled() {
            let pid = nix::unistd::Pid::from_raw(child.0.id() as i32);
            match passed_on {
                None => {
                    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
                    passed_on = Some(std::time::Instant::now());
                }
                // A run given SIGINT finishes within its grace for requests in flight; a
                // second signal, or a run that does not stop, is killed.
                Some(at) if s.force || at.elapsed() > BENCH_STOP_GRACE => {
                    let _ = child.0.kill();
                }
                Some(_) => {}
            }
        }
        if server_exit.is_none() {
            server_exit = server.exited();
            if let Some(st) = server_exit {
                eprintln!(
                    "The server exited during the run ({st}); the run's remaining requests are recorded as failures."
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    if let (Some(s), Some(_)) = (interrupt.signalled(), passed_on) {
        // What the run measured before the signal stays for inspection, under names
        // --resume does not take for a finished run.
        if out.exists() {
            let _ = std::fs::rename(out, out.with_extension("partial.json"));
        }
        if plan.bench.kind == BenchKind::Run && run >= 0 {
            let _ = super::details::adopt(dir, run, started, "partial");
        }
        println!("[INTERRUPTED BENCHMARK]");
        return Err(Interrupted {
            cause: s.cause,
            done: Vec::new(),
        }
        .into());
    }
    if let Some(st) = server_exit.or_else(|| server.exited()) {
        // The partial result stays for inspection, under a name --resume does not take for
        // a finished run.
        if out.exists() {
            let _ = std::fs::rename(out, out.with_extension("partial.json"));
        }
        bail!(
            "the server exited during the run ({st}); last lines of {}:\n{}",
            server.log.display(),
            server.log_tail()
        );
    }
    after_bench(plan, args, server, dir).await?;
    if !status.success() {
        if out.exists() {
            let _ = std::fs::rename(out, out.with_extension("partial.json"));
        }
        bail!(
            "the benchmark exited with {status}; last lines of {}:\n{}",
            bench_log.display(),
            logged::tail(&bench_log, TAIL_LINES)
        );
    }
    let v = match plan.bench.kind {
        BenchKind::Frontier => {
            let v = serde_json::json!({
                "results_dir": out.with_extension("").display().to_string(),
            });
            write_json(out, &v)?;
            v
        }
        _ => read_result(out)?,
    };
    if plan.bench.kind == BenchKind::Run && run >= 0 {
        super::details::adopt(dir, run, started, "")?;
    }
    let v = with_params(v, serve, bench, run);
    write_json(out, &v)?;
    println!("[END BENCHMARK]");
    Ok(v)
}

/// How long a benchmark given SIGINT may take to write its results before it is killed
/// (`servebench run` waits up to 5 s for requests in flight).
const BENCH_STOP_GRACE: Duration = Duration::from_secs(30);

/// A benchmark process that does not outlive an interrupted sweep.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Between runs: the user's `--after-bench-cmd`, else a prefix-cache reset.
async fn after_bench(
    plan: &Plan,
    args: &SweepServeArgs,
    server: &ServerProcess,
    dir: &Path,
) -> Result<()> {
    match &plan.after_bench {
        Some(cmd) => {
            let log = dir.join("after_bench.log");
            let mut child = logged::spawn(cmd, &log, args.show_stdout, false)?;
            let status = tokio::task::spawn_blocking(move || child.wait())
                .await
                .context("waiting for --after-bench-cmd")?
                .context("waiting for --after-bench-cmd")?;
            if !status.success() {
                bail!(
                    "--after-bench-cmd exited with {status}; last lines of {}:\n{}",
                    log.display(),
                    logged::tail(&log, TAIL_LINES)
                );
            }
        }
        None => server.reset_prefix_cache().await,
    }
    Ok(())
}

fn read_result(p: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(p)
        .with_context(|| format!("the benchmark wrote no result at {}", p.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not JSON", p.display()))
}

/// `summary.csv` (vLLM's table of every run), `sweep_serve.json` (combinations, servers,
/// failures) and `decision.md`.
fn write_records(plan: &Plan, state: &State, command_line: &[String]) -> Result<()> {
    let all: Vec<&Value> = state.combs.iter().flat_map(|c| c.runs.iter()).collect();
    std::fs::write(plan.experiment_dir.join("summary.csv"), summary_csv(&all))
        .context("writing summary.csv")?;
    write_json(
        &plan.experiment_dir.join("sweep_serve.json"),
        &serde_json::json!({
            "command_line": crate::redact_argv(command_line),
            "serve_cmd": crate::redact_argv(&plan.serve_cmd),
            "bench_cmd": crate::redact_argv(&plan.bench.words),
            "servers": state.servers,
            "combinations": state.combs,
        }),
    )?;
    std::fs::write(
        plan.experiment_dir.join("decision.md"),
        decision::render(&state.combs, &plan.slos, plan.alpha),
    )
    .context("writing decision.md")
}

/// Every run as one row, columns the union of their scalar fields in first-seen order, with
/// a leading row index (as pandas writes it).
fn summary_csv(rows: &[&Value]) -> String {
    let mut cols: Vec<&str> = Vec::new();
    for r in rows {
        if let Value::Object(m) = r {
            for (k, v) in m {
                if !v.is_array() && !v.is_object() && !cols.contains(&k.as_str()) {
                    cols.push(k);
                }
            }
        }
    }
    let field = |s: String| {
        if s.contains([',', '"', '\n']) {
            format!("\"{}\"", s.replace('"', "\"\""))
        } else {
            s
        }
    };
    let mut out = String::new();
    out.push_str(
        &std::iter::once(String::new())
            .chain(cols.iter().map(|c| field((*c).to_owned())))
            .collect::<Vec<_>>()
            .join(","),
    );
    out.push('\n');
    for (i, r) in rows.iter().enumerate() {
        let mut line = vec![i.to_string()];
        for c in &cols {
            line.push(match r.get(*c) {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => field(s.clone()),
                Some(v) => field(v.to_string()),
            });
        }
        out.push_str(&line.join(","));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_csv_unions_columns_and_quotes_fields() {
        let a = serde_json::json!({"x": 1, "name": "a,b"});
        let b = serde_json::json!({"x": 2, "y": true, "list": [1]});
        assert_eq!(
            summary_csv(&[&a, &b]),
            ",name,x,y\n0,\"a,b\",1,\n1,,2,true\n"
        );
    }

    #[test]
    fn names_are_cleaned_as_vllm_cleans_them() {
        assert_eq!(sanitize("SERVE--a/b-..x"), "SERVE--a_b-__x");
    }
}
