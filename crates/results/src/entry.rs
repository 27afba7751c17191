//! One result file as a database entry: who measured what, when, against which target and
//! versions, the verdict, the headline figures, and the configuration key runs of the same
//! configuration share (what `results trend` follows).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{json, Value};
use servebench_metrics::result::RunResult;
use servebench_metrics::RunSummary;

use crate::hash::hex64;
use crate::{Result, ResultsError};

/// What produced a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// `servebench run` (and anything else that wrote a result on its own).
    Run,
    /// A row of `servebench matrix`.
    MatrixRow,
    /// A point of `servebench sweep`.
    SweepPoint,
}

impl Kind {
    /// `run`, `matrix-row`, `sweep-point`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Run => "run",
            Kind::MatrixRow => "matrix-row",
            Kind::SweepPoint => "sweep-point",
        }
    }

    /// The kind stored as [`Kind::as_str`].
    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "run" => Some(Kind::Run),
            "matrix-row" => Some(Kind::MatrixRow),
            "sweep-point" => Some(Kind::SweepPoint),
            _ => None,
        }
    }
}

/// Where a run sits in an experiment (a matrix row, a sweep point), when it does.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Context {
    pub kind: Kind,
    /// The experiment directory, absolute.
    pub experiment: Option<String>,
    /// The matrix row's id, or the swept row's.
    pub row: Option<String>,
    /// The sweep point's value.
    pub point: Option<f64>,
    /// The swept variable (`request_rate`, `max_concurrency`).
    pub variable: Option<String>,
}

impl Context {
    /// A run on its own.
    pub fn run() -> Context {
        Context {
            kind: Kind::Run,
            experiment: None,
            row: None,
            point: None,
            variable: None,
        }
    }
}

/// One result file's entry.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Entry {
    /// The `*.servebench.json`, absolute (the entry's identity).
    pub path: String,
    /// Where the run's time zero sat on the wall clock, s since the Unix epoch (the clock
    /// anchor; else the local start time in `metadata.date`; else the file's time).
    pub started_unix: Option<f64>,
    /// `metadata.date` as written (`%Y%m%d-%H%M%S`, local).
    pub date: String,
    pub context: Context,
    /// 16 hex digits naming the configuration (see [`config_of`]).
    pub config: String,
    /// The configuration the key hashes, as JSON.
    pub config_text: String,
    pub model: String,
    pub backend: String,
    pub label: Option<String>,
    /// `server` or `simulator`.
    pub target_kind: String,
    /// The server's base URL, or the simulator's spec and clock.
    pub target: String,
    /// The server's `/version`, or the simulator's.
    pub server_version: Option<String>,
    pub servebench_version: String,
    pub simulated: bool,
    pub dataset: String,
    /// Offered rate as written (`4.0`, `inf`).
    pub request_rate: String,
    pub max_concurrency: Option<u64>,
    pub num_prompts: u64,
    pub input_len: u64,
    pub output_len: u64,
    /// `valid`, `not_enough_data`, `not_steady` (absent from results before verdicts).
    pub verdict: Option<String>,
    /// The verdict's line, reasons included.
    pub verdict_text: Option<String>,
    pub interrupted: bool,
    pub completed: u64,
    pub failed: u64,
    pub duration_s: f64,
    pub host: String,
    pub command_line: String,
    /// Every headline figure under the names `compare --fail-if` uses.
    pub figures: BTreeMap<String, f64>,
}

impl Entry {
    /// Reads `path` (a `*.servebench.json`) into an entry.
    pub fn read(path: &Path, context: Context) -> Result<Entry> {
        let text = std::fs::read_to_string(path).map_err(|source| ResultsError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let result: RunResult = serde_json::from_str(&text).map_err(|e| ResultsError::Parse {
            path: path.to_path_buf(),
            message: format!("not a servebench result: {e}"),
        })?;
        if let Some(other) = result.schema_mismatch() {
            return Err(ResultsError::Parse {
                path: path.to_path_buf(),
                message: format!("schema '{other}' is not a servebench result"),
            });
        }
        let abs = absolute(path);
        let mtime = std::fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs_f64());
        Ok(Entry::from_result(&abs, &result, context, mtime))
    }

    /// The entry of `result`, stored at `path`; `file_time` (s since the epoch) dates it when
    /// the result itself does not.
    pub fn from_result(
        path: &Path,
        result: &RunResult,
        context: Context,
        file_time: Option<f64>,
    ) -> Entry {
        let md = &result.metadata;
        let plan = result.plan.clone().unwrap_or_default();
        let (config, config_text) = config_of(result);
        let target = &md.target;
        let target_text = match (&target.base_url, &target.sim_spec) {
            (Some(url), _) => url.clone(),
            (None, Some(spec)) => format!(
                "sim {spec}{}",
                target
                    .clock
                    .as_deref()
                    .map(|c| format!(" ({c} clock)"))
                    .unwrap_or_default()
            ),
            (None, None) => String::new(),
        };
        let started_unix = md
            .clock_anchor
            .as_ref()
            .filter(|a| a.unix_ns > 0)
            .map(|a| a.unix_ns as f64 / 1e9)
            .or_else(|| local_date_unix(&md.date))
            .or(file_time);
        let verdict = result.validity.as_ref().map(|v| &v.verdict);
        Entry {
            path: path.to_string_lossy().into_owned(),
            started_unix,
            date: md.date.clone(),
            context,
            config,
            config_text,
            model: md.model_id.clone(),
            backend: md.backend.clone(),
            label: md.label.clone(),
            target_kind: target.kind.clone(),
            target: target_text,
            server_version: target.server_version_text().map(str::to_owned),
            servebench_version: result.servebench_version.clone(),
            simulated: result.simulated,
            dataset: plan.dataset_name.clone(),
            request_rate: plan.request_rate.0.clone(),
            max_concurrency: plan.max_concurrency,
            num_prompts: plan.num_prompts,
            input_len: plan.random_input_len,
            output_len: plan.random_output_len,
            verdict: verdict.map(|v| v.status.as_str().to_owned()),
            verdict_text: verdict.map(|v| v.to_string()),
            interrupted: result.interrupted,
            completed: result.summary.completed,
            failed: result.summary.failed,
            duration_s: result.summary.duration_s,
            host: md.host.clone(),
            command_line: md.command_line.join(" "),
            figures: figures(
                &result.summary,
                target
                    .sim_config
                    .as_ref()
                    .and_then(|c| c.tensor_parallel_size),
            ),
        }
    }
}

/// `path` made absolute (canonical when it exists), so one file is one entry whatever the
/// directory it was named from.
pub fn absolute(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| {
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            std::env::current_dir()
                .map(|d| d.join(path))
                .unwrap_or_else(|_| path.to_path_buf())
        }
    })
}

/// `%Y%m%d-%H%M%S` local time as seconds since the epoch.
fn local_date_unix(date: &str) -> Option<f64> {
    use chrono::TimeZone;
    let naive = chrono::NaiveDateTime::parse_from_str(date, "%Y%m%d-%H%M%S").ok()?;
    chrono::Local
        .from_local_datetime(&naive)
        .earliest()
        .map(|t| t.timestamp() as f64)
}

/// The configuration of a run and its key: the model, backend and label, the target (a
/// server's URL, or the simulator's spec and clock) and the workload as planned (dataset,
/// lengths, prefix, request count, rate, burstiness, concurrency, ramp, duration, goodput
/// SLOs), and for a split run the shard (`--shard I/N`, or the merged result of N). Left out: what changes from one run of a configuration to the next (date, seed,
/// host, command-line spelling, `--metadata` notes, versions: a new server version is what a
/// trend compares) and what only changes which figures are printed.
pub fn config_of(result: &RunResult) -> (String, String) {
    let md = &result.metadata;
    let t = &md.target;
    let p = result.plan.clone().unwrap_or_default();
    let target = if t.is_simulator() {
        json!({"kind": "simulator", "sim_spec": t.sim_spec, "clock": t.clock})
    } else {
        json!({"kind": t.kind, "base_url": t.base_url})
    };
    let workload = json!({
        "dataset_name": p.dataset_name,
        "dataset_path": p.dataset_path,
        "num_prompts": p.num_prompts,
        "request_rate": p.request_rate.0,
        "burstiness": p.burstiness,
        "max_concurrency": p.max_concurrency,
        "ramp_up": p.ramp_up,
        "duration_s": p.duration_s,
        "random_input_len": p.random_input_len,
        "random_output_len": p.random_output_len,
        "random_range_ratio": p.random_range_ratio,
        "random_prefix_len": p.random_prefix_len,
        "random_prefix_mode": p.random_prefix_mode,
        "goodput": p.goodput,
    });
    let mut config = json!({
        "model": md.model_id,
        "backend": md.backend,
        "label": md.label,
        "target": target,
        "workload": workload,
    });
    // One shard of a split run carries part of the load: its own configuration, apart from
    // the merged result's and from runs that were never split.
    if let (Some(sh), Value::Object(o)) = (&md.shard, &mut config) {
        o.insert(
            "shard".into(),
            json!({"index": sh.index, "count": sh.count}),
        );
    }
    let text = canonical(&config);
    (hex64(text.as_bytes()), text)
}

/// JSON with every object's keys sorted, whatever order the map type keeps.
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| {
                    format!(
                        "{}:{}",
                        Value::String((*k).clone()),
                        canonical(&m[k.as_str()])
                    )
                })
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

/// Every headline figure of a summary under the names `compare --fail-if` gates use:
/// `request_throughput`, `output_throughput`, `prompt_throughput`, `total_token_throughput`,
/// `goodput_*`, `peak_*`, `completed`, `failed`, `duration`, `{mean,median,std,pNN}_{metric}_ms`
/// for every latency metric, `*_per_gpu` when the GPU count is known, and the energy figures
/// (`avg_power_w`, `energy_j`, `joules_per_output_token`, `output_tokens_per_joule`).
pub fn figures(s: &RunSummary, gpus: Option<u32>) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let mut put = |name: String, v: Option<f64>| {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            out.insert(name, v);
        }
    };
    put("request_throughput".into(), Some(s.request_throughput));
    put("output_throughput".into(), Some(s.output_throughput));
    put("prompt_throughput".into(), Some(s.prompt_throughput));
    put(
        "total_token_throughput".into(),
        Some(s.total_token_throughput),
    );
    if let Some(g) = &s.goodput {
        put("goodput_requests_per_s".into(), Some(g.requests_per_s));
        put(
            "goodput_output_tokens_per_s".into(),
            Some(g.output_tokens_per_s),
        );
    }
    put(
        "peak_output_tokens_per_s".into(),
        Some(s.peak_output_tokens_per_s),
    );
    put("peak_concurrency".into(), Some(s.peak_concurrency as f64));
    put("completed".into(), Some(s.completed as f64));
    put("failed".into(), Some(s.failed as f64));
    put("duration".into(), Some(s.duration_s));
    for metric in RunSummary::METRICS {
        let Some(m) = s.metric(metric) else { continue };
        put(format!("mean_{metric}_ms"), m.mean);
        put(format!("median_{metric}_ms"), m.median);
        put(format!("std_{metric}_ms"), m.std);
        for p in &m.percentiles {
            put(format!("p{}_{metric}_ms", p.p), Some(p.value));
        }
    }
    if let Some(g) = gpus.filter(|g| *g > 0).map(f64::from) {
        for (name, v) in [
            ("request_throughput", s.request_throughput),
            ("output_throughput", s.output_throughput),
            ("prompt_throughput", s.prompt_throughput),
            ("total_token_throughput", s.total_token_throughput),
        ] {
            put(format!("{name}_per_gpu"), Some(v / g));
        }
    }
    if let Some(e) = &s.energy {
        put("avg_power_w".into(), Some(e.avg_power_w));
        put("energy_j".into(), Some(e.energy_j));
        put("joules_per_output_token".into(), e.joules_per_output_token);
        put("output_tokens_per_joule".into(), e.output_tokens_per_joule);
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use servebench_metrics::result::{PlanSection, RequestRate, RunMetadata, TargetInfo};
    use servebench_metrics::{summarize, SummaryOptions};

    fn result(seed: u64, rate: &str, label: Option<&str>) -> RunResult {
        RunResult {
            schema: servebench_metrics::result::RESULT_SCHEMA.into(),
            servebench_version: "0.1.0".into(),
            simulated: false,
            metadata: RunMetadata {
                date: "20250102-030405".into(),
                backend: "vllm".into(),
                label: label.map(str::to_owned),
                model_id: "m".into(),
                seed,
                target: TargetInfo::server("http://h:8000"),
                ..RunMetadata::default()
            },
            plan: Some(PlanSection {
                dataset_name: "random".into(),
                num_prompts: 100,
                request_rate: RequestRate(rate.into()),
                random_input_len: 1024,
                random_output_len: 128,
                ..PlanSection::default()
            }),
            summary: summarize(&[], &SummaryOptions::default()),
            client_health: None,
            server_telemetry: None,
            records_path: None,
            validity: None,
            interrupted: false,
            interrupted_reason: None,
            prefix_hit: None,
            by_turn: Vec::new(),
            by_lora: Vec::new(),
            gpu_telemetry: None,
            stopped_early: None,
            agents: None,
            slices: None,
        }
    }

    /// Two runs of one configuration share a key whatever their seed; another rate or label
    /// is another configuration. The key is stable across versions (a fixed hash).
    #[test]
    fn the_configuration_key_ignores_what_changes_between_runs() {
        let (a, text) = config_of(&result(1, "4.0", None));
        let (b, _) = config_of(&result(2, "4.0", None));
        let (c, _) = config_of(&result(1, "8.0", None));
        let (d, _) = config_of(&result(1, "4.0", Some("x")));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
        assert_eq!(a.len(), 16);
        assert!(
            text.starts_with("{\"backend\":\"vllm\",\"label\":null,\"model\":\"m\""),
            "{text}"
        );
    }

    #[test]
    fn figures_carry_the_gate_names() {
        let r = result(1, "4.0", None);
        let f = figures(&r.summary, Some(2));
        for name in [
            "output_throughput",
            "completed",
            "duration",
            "output_throughput_per_gpu",
        ] {
            assert!(f.contains_key(name), "{name} in {f:?}");
        }
        let e = Entry::from_result(Path::new("/r/a.servebench.json"), &r, Context::run(), None);
        assert_eq!(e.target, "http://h:8000");
        assert!(e.started_unix.is_some());
        assert_eq!(e.request_rate, "4.0");
    }
}
