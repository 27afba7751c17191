//! After the load: summaries, the terminal report and the result files.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;
use servebench_loadgen::telemetry::ServerTelemetry;
use servebench_loadgen::{
    BackendClient, JsonlSink, LoadOutcome, Prepared, RunClock, StopSignal, Target,
};
use servebench_metrics::result::{
    to_sorted_json_pretty, ClientHealth, ClockAnchor, MeasuredHealth, PlanSection, RunMetadata,
    RunResult, ServerReply, ShardInfo, SimConfig, TargetInfo, RESULT_SCHEMA,
};
use servebench_metrics::summary::{summarize, Slo, SummaryOptions};
use servebench_metrics::validity::{run_facts, FactsOptions, RunValidity};
use servebench_metrics::vllm::SpecDecodeStats;
use servebench_metrics::{RequestRecord, RunSummary, SteadyStateMode};
use servebench_report::{to_python_json, vllm_result, VllmRunInfo};
use servebench_tokenizer::Tokenizer;

use super::args::{RunArgs, SteadyStateArg};
use super::options::python_float;
use super::target::SimInfo;

/// vLLM's result file name and servebench's file stem.
pub struct FileNames {
    pub date: String,
    pub stem: String,
    pub vllm_path: PathBuf,
    /// The vLLM file name is servebench's (from the stem), not the user's `--result-filename`.
    vllm_from_stem: bool,
}

/// How long each probe of the server after a run waits at most.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest model name put into a file name: with the rest of the stem it stays far
/// below the 255 bytes a file name may have.
const MAX_NAME_IN_FILE: usize = 96;

/// A model name as part of a file name, as vLLM builds it (the part after the last `/`) for
/// every name a model has on a hub; a server's id can be anything, so any other character
/// (a control character, a path separator, a space) becomes `_` and the name is cut to
/// [`MAX_NAME_IN_FILE`] characters.
fn file_safe(name: &str) -> String {
    name.chars()
        .take(MAX_NAME_IN_FILE)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// How many suffixed names (`-2`, `-3`, …) are tried before giving up on a free one.
const NAME_TRIES: usize = 10_000;

/// `name` with `-n` before its extension (`a.json` → `a-2.json`); `name` itself for n = 1.
fn suffixed(name: &str, n: usize) -> String {
    if n == 1 {
        return name.to_owned();
    }
    match name.rsplit_once('.') {
        Some((base, ext)) if !base.is_empty() => format!("{base}-{n}.{ext}"),
        _ => format!("{name}-{n}"),
    }
}

/// Creates `path` only if nothing is there (`O_EXCL`): the one atomic way for two processes
/// writing into one directory to never take the same name.
fn create_new(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
}

impl FileNames {
    pub fn new(args: &RunArgs, model_id: &str, ramp_up: Option<&(String, u64, u64)>) -> Self {
        let date = chrono::Local::now().format("%Y%m%d-%H%M%S").to_string();
        let base_model = file_safe(model_id.rsplit('/').next().unwrap_or(model_id));
        let label = args
            .label
            .clone()
            .unwrap_or_else(|| args.backend.as_str().to_owned());
        let conc = args
            .max_concurrency
            .map(|c| format!("-concurrency{c}"))
            .unwrap_or_default();
        // Each shard's files are its own; `servebench merge` writes the run's.
        let shard = args
            .shard
            .as_deref()
            .and_then(|s| s.parse::<super::scale_out::Shard>().ok())
            .map(|s| format!("-{}", s.file_tag()))
            .unwrap_or_default();
        let stem = match ramp_up {
            Some((s, a, b)) => {
                format!("{label}-ramp-up-{s}-{a}qps-{b}qps{conc}-{base_model}-{date}{shard}")
            }
            None => format!(
                "{label}-{}qps{conc}-{base_model}-{date}{shard}",
                python_float(args.request_rate)
            ),
        };
        let vllm_from_stem = args.result_filename.is_none();
        let file = match &args.result_filename {
            // Shards writing into one directory must not overwrite each other's file.
            Some(name) if !shard.is_empty() => match name.rsplit_once('.') {
                Some((base, ext)) => format!("{base}{shard}.{ext}"),
                None => format!("{name}{shard}"),
            },
            Some(name) => name.clone(),
            None => format!("{stem}.json"),
        };
        let vllm_path = match &args.result_dir {
            Some(d) => d.join(file),
            None => PathBuf::from(file),
        };
        FileNames {
            date,
            stem,
            vllm_path,
            vllm_from_stem,
        }
    }

    /// Claims a stem no other run in `dir` holds, by creating its records file exclusively:
    /// two runs started in the same second with the same flags get `STEM` and `STEM-2`, and a
    /// name whose result files are already there is skipped, so no result is overwritten.
    /// The vLLM file name follows the stem when it is servebench's own.
    pub fn claim(&mut self, dir: &Path) -> Result<(PathBuf, std::fs::File)> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create --output-dir {}", dir.display()))?;
        let base = self.stem.clone();
        for n in 1..=NAME_TRIES {
            // Not `suffixed`: a stem (`…-0.5qps-…`) has dots but no extension.
            let stem = if n == 1 {
                base.clone()
            } else {
                format!("{base}-{n}")
            };
            let jsonl = dir.join(format!("{stem}.requests.jsonl"));
            let native = dir.join(format!("{stem}.servebench.json"));
            let vllm = self.vllm_path.with_file_name(format!("{stem}.json"));
            if native.exists() || (self.vllm_from_stem && vllm.exists()) {
                continue;
            }
            match create_new(&jsonl) {
                Ok(file) => {
                    self.stem = stem;
                    if self.vllm_from_stem {
                        self.vllm_path = vllm;
                    }
                    return Ok((jsonl, file));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).with_context(|| format!("creating {}", jsonl.display())),
            }
        }
        bail!(
            "{} already holds {NAME_TRIES} runs named {base}: choose another --output-dir",
            dir.display()
        )
    }
}

/// What the server says about itself (for metadata).
#[derive(Debug, Default)]
pub struct ServerInfo {
    pub version: Option<ServerReply>,
    pub models: Option<ServerReply>,
    pub sim: Option<SimInfo>,
}

impl ServerInfo {
    /// Result metadata about the target; the simulator's own configuration when it was one.
    pub fn target_info(&self, base_url: &str) -> Result<TargetInfo> {
        let mut target = match &self.sim {
            Some(sim) => TargetInfo::simulator("real", &sim.spec, sim_config(&sim.config)?),
            None => TargetInfo::server(base_url),
        };
        target.server_version = Some(self.version.clone());
        target.server_models = Some(self.models.clone());
        Ok(target)
    }

    /// Asks `/version` and `/v1/models` at once, each for at most 5 s (less when
    /// `timeout`, the user's `--request-timeout`, is shorter): a server that never answers
    /// delays the end of a run by one wait, not one per probe.
    pub async fn fetch(target: &Target, sim: Option<SimInfo>, timeout: Option<Duration>) -> Self {
        let t = probe_timeout(timeout);
        let get = |path: &'static str| async move {
            servebench_loadgen::probe::get_json(target, path, t)
                .await
                .ok()
                .map(ServerReply)
        };
        let (version, models) = tokio::join!(get("/version"), get("/v1/models"));
        ServerInfo {
            version,
            models,
            sim,
        }
    }
}

/// The simulator's configuration (as the simulator reports it) in a result's terms.
pub fn sim_config(config: &Value) -> Result<SimConfig> {
    serde_json::from_value(config.clone()).context("reading the simulator's configuration")
}

/// Makes a write error on the records file stop a run over the network: no new requests,
/// and the records already measured stay on disk.
pub fn stopping_on_write_error(sink: JsonlSink) -> JsonlSink {
    sink.on_write_error(Arc::new(|e| {
        super::stop_for_output_failure(format!("writing the per-request records failed: {e}"))
    }))
}

/// The ready check and the warm-ups of a conversation run (multi-turn sessions, agents): the
/// opening turn of the first session, sent on its own.
pub async fn ready_and_warm_up(
    plan: &super::plan::RunPlan,
    client: &Arc<BackendClient>,
    first: Prepared,
    stop: &StopSignal,
    print: bool,
) -> Result<()> {
    if let Some(timeout) = plan.ready_check_timeout {
        ready_check(client, &first, timeout, stop).await?;
    }
    let warmups = plan.traffic.num_warmups;
    if warmups > 0 {
        let ok = servebench_loadgen::warm_up(
            Arc::clone(client),
            first,
            warmups,
            plan.traffic.max_concurrency,
            stop,
        )
        .await;
        if print {
            eprintln!("Warm-up completed ({ok}/{warmups} succeeded).");
        }
    }
    Ok(())
}

/// Send the first request until it succeeds or the timeout passes (vLLM's ready check).
pub async fn ready_check(
    client: &BackendClient,
    p: &Prepared,
    timeout: Duration,
    stop: &StopSignal,
) -> Result<()> {
    eprintln!(
        "Waiting up to {} s for the endpoint to answer a test request...",
        timeout.as_secs()
    );
    let deadline = tokio::time::Instant::now() + timeout;
    let clock = RunClock::start_now();
    loop {
        let r = client.execute(&clock, p, 0, 0, false, stop).await;
        match &r.failure {
            // An answer that fails its check still shows the endpoint is up: the check is
            // judged on the measured requests, not here.
            None => {
                eprintln!("Initial test run completed.");
                return Ok(());
            }
            Some(f) if f.kind == servebench_metrics::FailureKind::InvalidOutput => {
                eprintln!("Initial test run completed (its answer failed the answer checks).");
                return Ok(());
            }
            Some(f) if tokio::time::Instant::now() + Duration::from_secs(1) >= deadline => {
                bail!(
                    "the endpoint was not ready within {} s: {}",
                    timeout.as_secs(),
                    f.message
                )
            }
            Some(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

/// Shared inputs of the result writers.
pub struct Finish<'a> {
    pub args: &'a RunArgs,
    pub model_id: String,
    pub tokenizer: &'a Tokenizer,
    pub names: FileNames,
    pub jsonl_path: PathBuf,
    pub ramp_up: Option<(String, u64, u64)>,
    pub percentile_metrics: Vec<String>,
    pub percentiles: Vec<f64>,
    pub goodput: Vec<Slo>,
    pub metadata: Vec<(String, String)>,
    pub command_line: Vec<String>,
    /// Print the terminal report and file notes.
    pub print: bool,
    /// The share of a split schedule the run sent (`--shard`), or the shards a merged
    /// result joins.
    pub shard: Option<ShardInfo>,
    /// A merged result's client health and clock anchor (it has no load of its own).
    pub merged: Option<(ClientHealth, ClockAnchor)>,
    /// The run's new connections (TLS or HTTP/2 runs only).
    pub connections: Option<servebench_metrics::ConnectionSummary>,
    /// The run stopped itself as over-saturated (`--stop-when-saturated`).
    pub stopped_early: Option<servebench_metrics::result::StoppedEarly>,
    /// `--probe-request-rate`: what the probes beside the run measured.
    pub probes: Option<super::vllm_probe::ProbeStats>,
    /// An agent run's agents as they ran (`--dataset-name agentic`).
    pub agent_nodes: Option<Vec<servebench_metrics::AgentNode>>,
}

impl<'a> Finish<'a> {
    /// Read the reporting flags, create `--output-dir` and open the per-request records file
    /// (records go there as they finish).
    pub fn open(
        args: &'a RunArgs,
        model_id: String,
        tokenizer: &'a Tokenizer,
        command_line: Vec<String>,
        print: bool,
    ) -> Result<(Self, JsonlSink)> {
        let ramp_up = super::options::check_ramp_up(args)?;
        let mut names = FileNames::new(args, &model_id, ramp_up.as_ref());
        let (jsonl_path, file) = names.claim(&args.output_dir)?;
        let sink = JsonlSink::from_file(&jsonl_path, file);
        let finish = Finish {
            args,
            model_id,
            tokenizer,
            names,
            jsonl_path,
            ramp_up,
            percentile_metrics: super::options::percentile_metrics(
                args.percentile_metrics.as_deref(),
            )?,
            percentiles: super::options::metric_percentiles(&args.metric_percentiles)?,
            goodput: super::options::goodput(&args.goodput)?,
            metadata: super::options::key_values("--metadata", &args.metadata)?,
            command_line,
            print,
            shard: None,
            merged: None,
            connections: None,
            stopped_early: None,
            probes: None,
            agent_nodes: None,
        };
        Ok((finish, sink))
    }
}

/// Python's `datetime.isoformat()` of a local time: microseconds only when not zero.
fn py_isoformat(t: std::time::SystemTime) -> String {
    let local = chrono::DateTime::<chrono::Local>::from(t).naive_local();
    let micros = local.and_utc().timestamp_subsec_micros();
    let base = local.format("%Y-%m-%dT%H:%M:%S").to_string();
    if micros == 0 {
        base
    } else {
        format!("{base}.{micros:06}")
    }
}

/// vLLM's `rps_change_events` for a ramp-up run: each request's ramp rate as vLLM's
/// `_get_current_request_rate` gives it (progress `i / max(n − 1, 1)`, `n` the request count;
/// a `--duration` run ramps with time, `t / duration`), stamped at the request's intended
/// time on the wall clock of the run start.
fn rps_change_events(
    f: &Finish<'_>,
    records: &[RequestRecord],
    started_at: std::time::SystemTime,
) -> Vec<(u64, String)> {
    let Some((strategy, start, end)) = &f.ramp_up else {
        return Vec::new();
    };
    let ramp = servebench_workload::RampUp {
        strategy: if strategy == "exponential" {
            servebench_workload::RampUpStrategy::Exponential
        } else {
            servebench_workload::RampUpStrategy::Linear
        },
        start_rps: *start as f64,
        end_rps: *end as f64,
    };
    let mut by_id: Vec<&RequestRecord> = records.iter().collect();
    by_id.sort_by_key(|r| r.id);
    let n = f.args.num_prompts.max(by_id.len());
    let requests: Vec<(f64, u64)> = by_id
        .iter()
        .map(|r| {
            let progress = match f.args.duration.filter(|d| *d > 0.0) {
                Some(d) => (r.intended as f64 / 1e9 / d).min(1.0),
                None => r.id as f64 / n.saturating_sub(1).max(1) as f64,
            };
            (ramp.rate_at(progress), r.intended)
        })
        .collect();
    servebench_metrics::vllm::rps_change_events(*start, &requests)
        .into_iter()
        .map(|c| {
            let at = started_at + Duration::from_nanos(c.at_ns);
            (c.rps, py_isoformat(at))
        })
        .collect()
}

/// Summaries, terminal output and files for a finished run; returns the exit code.
#[allow(clippy::too_many_arguments)]
pub fn write_results(
    f: &Finish<'_>,
    records: &[RequestRecord],
    duration_ns: u64,
    load: Option<&LoadOutcome>,
    telemetry: Option<&ServerTelemetry>,
    spec_decode: Option<SpecDecodeStats>,
    target: TargetInfo,
    simulated: bool,
) -> Result<super::RunOutcome> {
    let args = f.args;
    let mut pcts = vec![50.0, 90.0, 95.0, 99.0];
    for p in &f.percentiles {
        if !pcts.contains(p) {
            pcts.push(*p);
        }
    }
    let slice_percentiles = pcts.clone();
    let mut summary: RunSummary = summarize(
        records,
        &SummaryOptions {
            duration_ns: Some(duration_ns),
            percentiles: pcts,
            goodput: f.goodput.to_vec(),
            ..SummaryOptions::default()
        },
    );
    let pooling = servebench_report::vllm_pooling::is_pooling_backend(args.backend.as_str());
    if pooling {
        super::pooling::clear_generation_metrics(&mut summary);
    }
    summary.connections = f.connections.clone();
    // Energy over the window throughputs are divided by: the run's time zero to its last end.
    summary.energy = load
        .and_then(|o| o.gpu.as_ref())
        .and_then(|g| servebench_metrics::energy(g, 0, duration_ns, summary.total_output_tokens));
    let info = VllmRunInfo {
        date: f.names.date.clone(),
        backend: args.backend.as_str().to_owned(),
        label: args.label.clone(),
        model_id: f.model_id.clone(),
        tokenizer_id: args
            .tokenizer
            .clone()
            .unwrap_or_else(|| f.tokenizer.name().to_owned()),
        num_prompts: args.num_prompts,
        metadata: f.metadata.to_vec(),
        request_rate: args.request_rate,
        burstiness: args.burstiness,
        max_concurrency: args.max_concurrency,
        ramp_up: f.ramp_up.clone(),
        rps_change_events: rps_change_events(
            f,
            records,
            load.map(|o| o.started_at)
                .unwrap_or_else(std::time::SystemTime::now),
        ),
        spec_decode,
        duration_s: duration_ns as f64 / 1e9,
        percentile_metrics: f.percentile_metrics.to_vec(),
        percentiles: f.percentiles.to_vec(),
        goodput: f.goodput.to_vec(),
        detailed: args.save_detailed,
    };
    let mut vllm = vllm_result(&info, records);
    if let Some(p) = &f.probes {
        p.insert_into(&mut vllm);
    }
    let health = match (load, &f.merged) {
        // A schedule with a rate (a finite one, a ramp, a trace's own clock) is what a late
        // release falls behind; all due at once, it is only the burst's length.
        (Some(o), _) => client_health(o, &summary, offered_rate(f, records).is_some()),
        (None, Some((h, _))) => h.clone(),
        (None, None) => ClientHealth::virtual_time(),
    };
    let validity = run_validity(f, records, &summary, &health);
    let prefix_hit = super::prefix_hit::check(args, records, telemetry);
    let by_turn = servebench_metrics::by_turn(records);
    let by_lora = servebench_metrics::by_lora(records, duration_ns);
    let agents = f
        .agent_nodes
        .as_ref()
        .map(|nodes| servebench_metrics::agent_stats(nodes, records));
    let slices = args.slice_duration.map(|width_s| {
        servebench_metrics::slices(
            records,
            telemetry,
            &servebench_metrics::SliceOptions {
                origin_ns: Some(summary.time_series.origin_ns),
                percentiles: slice_percentiles,
                ..servebench_metrics::SliceOptions::every(width_s)
            },
        )
    });

    if f.print {
        let mut stdout = std::io::stdout().lock();
        let block = if pooling {
            let failed = records.iter().filter(|r| !r.is_success()).count();
            servebench_report::vllm_pooling::pooling_block(&vllm, failed, &f.percentiles)
        } else {
            servebench_report::terminal::vllm_block(&vllm, &f.percentiles, !f.goodput.is_empty())
        };
        let extras = servebench_report::terminal::servebench_block(&summary, &health, simulated);
        let verdict = servebench_report::verdict::verdict_block(&validity);
        let turns = servebench_report::render::turn_block(&by_turn)
            + &servebench_report::render::lora_block(&by_lora)
            + &agents
                .as_ref()
                .map(servebench_report::render::agent_block)
                .unwrap_or_default();
        let pools = servebench_report::pools::pool_block(&summary.per_pool);
        let probes = f.probes.as_ref().map(|p| p.block()).unwrap_or_default();
        let _ = write!(stdout, "{block}{probes}{extras}{turns}{pools}{verdict}");
        if let Some(e) = &summary.energy {
            let _ = writeln!(stdout, "Energy: {}", e.describe());
        }
        if let Some(p) = &prefix_hit {
            let _ = writeln!(stdout, "Prefix hit rate: {}", p.describe());
            if let Some(w) = &p.warning {
                let _ = writeln!(stdout, "WARNING: {w}");
            }
        }
        if let Some(g) = load.and_then(|o| o.gpu.as_ref()) {
            eprintln!("{}", super::gpu_telemetry::describe(g));
        }
        if load.is_none() && f.merged.is_none() {
            // A virtual-time what-if costs seconds, so its absurd answers must be loud.
            if let Some(w) =
                servebench_metrics::validity::absurd_latency_warning(&summary, &validity)
            {
                let _ = writeln!(stdout, "\n{w}");
            }
        }
        if let Some(i) = super::interruption() {
            let _ = writeln!(
                stdout,
                "INTERRUPTED: {}; the figures cover only the requests measured before it",
                i.reason
            );
        }
        if let Some(s) = &f.stopped_early {
            let _ = writeln!(
                stdout,
                "STOPPED EARLY: {} at {:.1} s of {:.1} s; the figures cover only the requests measured before it",
                s.reason, s.at_s, s.span_s
            );
        }
        let _ = stdout.flush();
    }

    let mut vllm_path = None;
    if args.save_result || args.append_result {
        let written = save_vllm(
            &f.names.vllm_path,
            &to_python_json(&vllm),
            args.append_result,
        )
        .context(super::OutputFailed)?;
        if f.print {
            eprintln!("vLLM-compatible result: {}", written.display());
        }
        vllm_path = Some(written);
    }
    // vLLM writes its plots beside the result file, saved or not.
    for p in super::timeline::write_plots(&args.vllm, &f.names.vllm_path, records)
        .context(super::OutputFailed)?
    {
        if f.print {
            eprintln!("vLLM plot: {}", p.display());
        }
    }
    let native_path = args
        .output_dir
        .join(format!("{}.servebench.json", f.names.stem));
    let native = RunResult {
        schema: RESULT_SCHEMA.to_owned(),
        servebench_version: env!("CARGO_PKG_VERSION").to_owned(),
        simulated,
        metadata: RunMetadata {
            date: f.names.date.clone(),
            command_line: f.command_line.clone(),
            backend: args.backend.as_str().to_owned(),
            label: args.label.clone(),
            model_id: f.model_id.clone(),
            tokenizer: f.tokenizer.name().to_owned(),
            seed: args.seed,
            host: hostname(),
            user_metadata: f.metadata.iter().cloned().collect(),
            target,
            clock_anchor: load
                .map(|o| clock_anchor(o, args))
                .or_else(|| f.merged.as_ref().map(|(_, a)| a.clone())),
            shard: f.shard.clone(),
        },
        plan: Some(plan_section(f)),
        summary,
        client_health: Some(health),
        server_telemetry: telemetry.cloned(),
        records_path: f
            .jsonl_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned()),
        validity: Some(validity),
        interrupted: super::interruption().is_some(),
        interrupted_reason: super::interruption().map(|i| i.reason),
        prefix_hit,
        by_turn,
        by_lora,
        gpu_telemetry: load.and_then(|o| o.gpu.clone()),
        stopped_early: f.stopped_early.clone(),
        agents,
        slices,
    };
    let text = to_sorted_json_pretty(&native).context("serializing the servebench result")?;
    // The stem was claimed with the records file, so a file here is another run's: kept.
    let mut file = create_new(&native_path)
        .with_context(|| {
            format!(
                "creating {} (an existing result is never overwritten)",
                native_path.display()
            )
        })
        .context(super::OutputFailed)?;
    if let Err(e) = file.write_all(&text) {
        // A half-written result is worse than none: nothing is left behind.
        drop(file);
        let _ = std::fs::remove_file(&native_path);
        return Err(e)
            .with_context(|| format!("writing {}", native_path.display()))
            .context(super::OutputFailed);
    }
    let slices_path = match &native.slices {
        Some(s) => {
            let path = args.output_dir.join(format!("{}.slices.csv", f.names.stem));
            std::fs::write(&path, servebench_report::render::render_slices_csv(s))
                .with_context(|| format!("writing {}", path.display()))
                .context(super::OutputFailed)?;
            Some(path)
        }
        None => None,
    };
    if f.print {
        eprintln!("servebench result: {}", native_path.display());
        eprintln!("per-request records: {}", f.jsonl_path.display());
        if let (Some(p), Some(s)) = (&slices_path, &native.slices) {
            eprintln!("metrics per window: {}", p.display());
            if args
                .slice_duration
                .is_some_and(|w| s.width_s > w * (1.0 + 1e-9))
            {
                eprintln!(
                    "note: windows of {} s, not the --slice-duration asked for: a run is cut into at most {} windows",
                    s.width_s,
                    servebench_metrics::slices::MAX_SLICE_WINDOWS
                );
            }
        }
    }

    let summary = native.summary;
    let mut exit = ExitCode::SUCCESS;
    // A run that stopped itself early did what it was asked: its requests were cancelled.
    if summary.completed == 0 && native.stopped_early.is_none() {
        let reasons: Vec<String> = summary
            .failures_by_kind
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        let first = records
            .iter()
            .find_map(|r| r.failure.as_ref())
            .map(|f| f.message.clone());
        match (records.is_empty(), first) {
            (true, _) => match super::interruption() {
                Some(i) => eprintln!(
                    "error: no request was sent before the run stopped ({})",
                    i.reason
                ),
                None => eprintln!("error: no request was sent"),
            },
            (false, Some(first)) => eprintln!(
                "error: every request failed ({}); first error: {first}",
                reasons.join(", ")
            ),
            (false, None) => eprintln!(
                "error: no request completed with output ({} requests)",
                records.len()
            ),
        }
        exit = ExitCode::from(2);
    }
    Ok(super::RunOutcome {
        summary,
        vllm,
        native_path,
        jsonl_path: f.jsonl_path.clone(),
        vllm_path,
        exit,
        stopped_early: native.stopped_early,
    })
}

/// The verdict on a finished run: samples behind the requested percentiles, offered against
/// achieved rate, client health and the warm-up, judged with the default thresholds.
fn run_validity(
    f: &Finish<'_>,
    records: &[RequestRecord],
    summary: &RunSummary,
    health: &ClientHealth,
) -> RunValidity {
    let args = f.args;
    let offered_rate = offered_rate(f, records);
    let client_cpu_share = health
        .measured()
        .filter(|m| m.cpus > 0)
        .map(|m| m.cpu_percent / 100.0 / m.cpus as f64);
    let opts = FactsOptions {
        metrics: f.percentile_metrics.clone(),
        percentiles: f.percentiles.clone(),
        offered_rate,
        client_cpu_share,
        output_length_fixed: args.ignore_eos
            || args.dataset_name == super::args::DatasetName::Random,
        steady_state: match args.steady_state {
            SteadyStateArg::Auto => SteadyStateMode::Auto,
            SteadyStateArg::Off => SteadyStateMode::Off,
        },
    };
    RunValidity::from_facts(&run_facts(records, summary, &opts))
}

/// Where the run's time zero sat on the wall clock.
fn clock_anchor(load: &LoadOutcome, args: &RunArgs) -> ClockAnchor {
    ClockAnchor {
        unix_ns: super::scale_out::unix_ns(load.started_at),
        source: CLOCK_SOURCE.to_owned(),
        start_at: args.start_at.clone(),
    }
}

/// Records' offsets come from the OS monotonic clock; the anchor from the realtime clock,
/// read at the run's time zero (or fixed in advance by `--start-at`).
pub const CLOCK_SOURCE: &str = "offsets: CLOCK_MONOTONIC; anchor: CLOCK_REALTIME";

/// Writes vLLM's result file and returns where it went. `--append-result` appends, as vLLM
/// does; otherwise an existing file is never clobbered: the result goes to the first free
/// `NAME-2.json`, `NAME-3.json`, … and a note says so (vLLM would overwrite it).
fn save_vllm(path: &Path, bytes: &[u8], append: bool) -> Result<PathBuf> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    if append {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        if file.metadata().map(|m| m.len() > 0).unwrap_or(false) {
            file.write_all(b"\n")
                .with_context(|| format!("writing {}", path.display()))?;
        }
        file.write_all(bytes)
            .with_context(|| format!("writing {}", path.display()))?;
        return Ok(path.to_owned());
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    for n in 1..=NAME_TRIES {
        let candidate = path.with_file_name(suffixed(&name, n));
        match create_new(&candidate) {
            Ok(mut file) => {
                if n > 1 {
                    eprintln!(
                        "note: {} already exists and is kept; this run's vLLM-compatible result is {}",
                        path.display(),
                        candidate.display()
                    );
                }
                if let Err(e) = file.write_all(bytes) {
                    // A half-written result is worse than none: nothing is left behind.
                    drop(file);
                    let _ = std::fs::remove_file(&candidate);
                    return Err(e).with_context(|| format!("writing {}", candidate.display()));
                }
                return Ok(candidate);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("creating {}", candidate.display())),
        }
    }
    bail!(
        "{} and {NAME_TRIES} suffixed names are taken",
        path.display()
    )
}

fn hostname() -> String {
    std::fs::read_to_string("/etc/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// The `plan` section: the workload as the flags asked for it.
fn plan_section(f: &Finish<'_>) -> PlanSection {
    let args = f.args;
    PlanSection {
        dataset_name: args.dataset_name.as_str().to_owned(),
        dataset_path: args
            .dataset_path
            .as_ref()
            .map(|p| p.to_string_lossy().into_owned()),
        num_prompts: args.num_prompts as u64,
        request_rate: servebench_metrics::result::RequestRate(python_float(args.request_rate)),
        burstiness: args.burstiness,
        max_concurrency: args.max_concurrency.map(|c| c as u64),
        ramp_up: f.ramp_up.clone(),
        duration_s: args.duration,
        random_input_len: args.input_len.unwrap_or(args.random_input_len),
        random_output_len: args
            .output_len
            .map(|v| v.max(0) as u64)
            .unwrap_or(args.random_output_len),
        random_range_ratio: args.random_range_ratio,
        random_prefix_len: args.random_prefix_len,
        random_prefix_mode: match args.random_prefix_mode {
            super::args::PrefixModeArg::Shared => "shared",
            super::args::PrefixModeArg::PerRequest => "per-request",
        }
        .to_owned(),
        num_warmups: args.num_warmups as u64,
        percentile_metrics: f.percentile_metrics.clone(),
        metric_percentiles: f.percentiles.clone(),
        goodput: f
            .goodput
            .iter()
            .map(|g| format!("{}:{}", g.metric.as_str(), g.threshold_ms))
            .collect(),
    }
}

/// The rate the run offered, req/s; `None` when every request was due at once. A ramp has
/// no single rate; its peak is the reference the sends are held to. A self-timed trace is an
/// open loop on the trace's own clock: its mean rate is the offered one.
fn offered_rate(f: &Finish<'_>, records: &[RequestRecord]) -> Option<f64> {
    let args = f.args;
    let self_timed =
        args.dataset_name == super::args::DatasetName::TimedTrace && !args.no_self_timed;
    match &f.ramp_up {
        Some((_, a, b)) => Some((*a).max(*b) as f64),
        None if self_timed => trace_rate(records),
        None => Some(args.request_rate).filter(|r| r.is_finite() && *r > 0.0),
    }
}

/// How long a probe of the server around a run waits: [`PROBE_TIMEOUT`], or the user's
/// shorter `--request-timeout`, so a server that never answers ends the run in time.
pub fn probe_timeout(request_timeout: Option<Duration>) -> Duration {
    request_timeout.map_or(PROBE_TIMEOUT, |t| t.min(PROBE_TIMEOUT))
}

/// The mean arrival rate of a trace's schedule, `(n − 1) / (last intended − first intended)`
/// per second; `None` with fewer than two arrivals or none spread in time.
fn trace_rate(records: &[RequestRecord]) -> Option<f64> {
    let first = records.iter().map(|r| r.intended).min()?;
    let last = records.iter().map(|r| r.intended).max()?;
    (records.len() >= 2 && last > first)
        .then(|| (records.len() - 1) as f64 / ((last - first) as f64 / 1e9))
}

/// Client health of a real run: dispatch lag, CPU, and whether the client limited the run.
/// `paced`: the run had a finite request rate; at an unlimited one every request is due at
/// once, so a late release is the burst's own length, not a client that fell behind.
pub fn client_health(outcome: &LoadOutcome, summary: &RunSummary, paced: bool) -> ClientHealth {
    let lag = &summary.dispatch_lag;
    let lag_p = |p: f64| lag.percentile(p).map(|s| s.value);
    let wall = outcome.duration_ns as f64 / 1e9;
    let cpu = outcome.cpu.total();
    let cpus = servebench_loadgen::health::available_cpus();
    let cpu_pct = if wall > 0.0 { 100.0 * cpu / wall } else { 0.0 };
    let lagging = paced && lag_p(99.0).map(|l| l > 10.0).unwrap_or(false);
    let mut health = MeasuredHealth {
        dispatch_lag_p50_ms: lag_p(50.0),
        dispatch_lag_p99_ms: lag_p(99.0),
        dispatch_lag_max_ms: lag.max,
        cpu_user_s: outcome.cpu.user_s,
        cpu_system_s: outcome.cpu.system_s,
        cpu_percent: cpu_pct,
        cpus: cpus as u64,
        client_limited: lagging,
        not_dispatched: outcome.not_dispatched as u64,
        resent: outcome.resent,
        load_average: servebench_loadgen::health::load_average(),
    };
    health.client_limited |= health.cpu_saturated();
    ClientHealth::Measured(health)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("servebench-names-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    /// Two runs with the same flags in the same second get two stems, and the vLLM name
    /// follows each stem.
    #[test]
    fn a_second_claim_of_the_same_name_gets_a_suffix() {
        let dir = scratch("claim");
        let args = RunArgs::from_flags(&["--save-result"]).unwrap();
        let mut a = FileNames::new(&args, "org/model", None);
        let mut b = FileNames {
            date: a.date.clone(),
            stem: a.stem.clone(),
            vllm_path: a.vllm_path.clone(),
            vllm_from_stem: true,
        };
        let (ja, _) = a.claim(&dir).unwrap();
        let (jb, _) = b.claim(&dir).unwrap();
        assert_ne!(ja, jb);
        assert_eq!(b.stem, format!("{}-2", a.stem));
        assert_eq!(
            b.vllm_path.file_name().unwrap().to_string_lossy(),
            format!("{}.json", b.stem)
        );
        // A stem whose result is already there is skipped even without its records file.
        std::fs::write(dir.join(format!("{}-3.servebench.json", a.stem)), "{}").unwrap();
        let mut c = FileNames {
            date: a.date.clone(),
            stem: a.stem.clone(),
            vllm_path: a.vllm_path.clone(),
            vllm_from_stem: true,
        };
        c.claim(&dir).unwrap();
        assert_eq!(c.stem, format!("{}-4", a.stem));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The user's own `--result-filename` is never clobbered: the next free name is used.
    #[test]
    fn an_existing_vllm_result_is_kept() {
        let dir = scratch("vllm");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bench.json");
        std::fs::write(&path, "old").unwrap();
        let written = save_vllm(&path, b"new", false).unwrap();
        assert_eq!(written, dir.join("bench-2.json"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
        assert_eq!(std::fs::read_to_string(&written).unwrap(), "new");
        // --append-result appends to the named file, as vLLM does.
        let appended = save_vllm(&path, b"more", true).unwrap();
        assert_eq!(appended, path);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old\nmore");
        assert_eq!(suffixed("noext", 3), "noext-3");
        assert_eq!(file_safe("Llama-3.1-8B_v0+x"), "Llama-3.1-8B_v0+x");
        assert_eq!(file_safe("a\u{1b}[2J b"), "a__2J_b");
        assert_eq!(file_safe(&"m".repeat(5000)).len(), MAX_NAME_IN_FILE);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
