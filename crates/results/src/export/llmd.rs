//! The llm-d benchmark report, schema v0.2 (llm-d/llm-d-benchmark,
//! `llmdbenchmark/analysis/benchmark_report/br_v0_2_json_schema.json`, kept as this crate's
//! test fixture `tests/fixtures/llmd_br_v0_2_schema.json`): one report per run.
//!
//! - `run`: `uid` (hash of the result file and its date), `eid` (hash of the experiment
//!   directory, for a matrix row or sweep point), `cid` (hash of the target), `pid` (the client
//!   host), the start, end and ISO-8601 duration of the measured window;
//! - `scenario.stack`: the target as one component, an `inference_engine` for servebench's
//!   simulator (its GPU and tensor-parallel size are known) or a `generic` component for a
//!   server (its engine and GPUs are not; `tool` is the client backend, `tool_version` the
//!   server's `/version`);
//! - `scenario.load`: servebench as the workload generator, the lengths, rate and concurrency
//!   as planned, the command line's flags as `native.args` and the plan as `native.config`;
//! - `results.request_performance.aggregate`: request counts, input and output lengths, TTFT,
//!   TPOT, ITL, NTPOT (end-to-end latency per output token) and request latency with every
//!   percentile the schema has (p0.1 … p99.9, from the records; from the summary's
//!   percentiles when the records file is gone), and the throughputs;
//! - `results.observability`: GPU power (mean over the measured window), utilization and
//!   memory, and the server's KV-cache use, running and waiting requests, when they were read;
//!   the energy figures under `energy` (the schema leaves `observability` open to more keys).

use serde_json::{json, Map, Value};
use servebench_metrics::result::{GpuSample, RunResult};
use servebench_metrics::{MetricSummary, RequestRecord};

use super::ExportRun;
use crate::entry::config_of;
use crate::hash::hex128;

/// The schema version written.
pub const VERSION: &str = "0.2";

/// The percentiles a `Statistics` object holds, with their keys.
const PERCENTILES: [(f64, &str); 11] = [
    (0.1, "p0p1"),
    (1.0, "p1"),
    (5.0, "p5"),
    (10.0, "p10"),
    (25.0, "p25"),
    (50.0, "p50"),
    (75.0, "p75"),
    (90.0, "p90"),
    (95.0, "p95"),
    (99.0, "p99"),
    (99.9, "p99p9"),
];

/// A `Statistics` object of `samples` (none finite: `None`).
fn statistics(samples: &[f64], units: &str) -> Option<Value> {
    let mut xs: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
    if xs.is_empty() {
        return None;
    }
    xs.sort_unstable_by(f64::total_cmp);
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let std = (xs.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
    let mut o = Map::new();
    o.insert("units".into(), json!(units));
    o.insert("mean".into(), json!(mean));
    o.insert("stddev".into(), json!(std));
    o.insert("min".into(), json!(xs[0]));
    o.insert("max".into(), json!(xs[xs.len() - 1]));
    for (p, key) in PERCENTILES {
        if let Some(v) = servebench_metrics::stats::percentile_sorted(&xs, p) {
            o.insert(key.into(), json!(v));
        }
    }
    Some(Value::Object(o))
}

/// A `Statistics` object of a summary's figures (the records are gone): its mean, spread,
/// extremes and the percentiles it has that the schema names.
fn summary_statistics(m: &MetricSummary, units: &str) -> Option<Value> {
    let mean = m.mean?;
    let mut o = Map::new();
    o.insert("units".into(), json!(units));
    o.insert("mean".into(), json!(mean));
    if let Some(s) = m.std {
        o.insert("stddev".into(), json!(s));
    }
    if let Some(v) = m.min {
        o.insert("min".into(), json!(v));
    }
    if let Some(v) = m.max {
        o.insert("max".into(), json!(v));
    }
    if let Some(v) = m.median {
        o.insert("p50".into(), json!(v));
    }
    for ps in &m.percentiles {
        if let Some((_, key)) = PERCENTILES.iter().find(|(p, _)| *p == ps.p) {
            o.insert((*key).into(), json!(ps.value));
        }
    }
    Some(Value::Object(o))
}

/// A `Statistics` object with only a mean (a throughput over the whole window).
fn mean_only(mean: f64, units: &str) -> Option<Value> {
    mean.is_finite()
        .then(|| json!({"units": units, "mean": mean}))
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The per-request samples of the latency figures, ms.
fn latency_samples(records: &[RequestRecord]) -> [(&'static str, Vec<f64>); 5] {
    let ok: Vec<&RequestRecord> = records.iter().filter(|r| r.is_success()).collect();
    [
        (
            "time_to_first_token",
            ok.iter().filter_map(|r| r.ttft_ns()).map(ms).collect(),
        ),
        (
            "normalized_time_per_output_token",
            ok.iter()
                .filter(|r| r.output_tokens > 0)
                .filter_map(|r| Some(ms(r.e2el_ns()?) / r.output_tokens as f64))
                .collect(),
        ),
        (
            "time_per_output_token",
            ok.iter()
                .filter_map(|r| r.tpot_ns())
                .map(|ns| ns / 1e6)
                .collect(),
        ),
        (
            "inter_token_latency",
            ok.iter().flat_map(|r| r.itls_ns()).map(ms).collect(),
        ),
        (
            "request_latency",
            ok.iter().filter_map(|r| r.e2el_ns()).map(ms).collect(),
        ),
    ]
}

fn aggregate(run: &ExportRun) -> Value {
    let r = &run.result;
    let s = &r.summary;
    let mut requests = Map::new();
    requests.insert("total".into(), json!(s.completed + s.failed));
    requests.insert("failures".into(), json!(s.failed));
    if let Some(n) = r
        .client_health
        .as_ref()
        .and_then(|h| h.measured())
        .map(|m| m.not_dispatched)
        .filter(|n| *n > 0)
    {
        requests.insert("incomplete".into(), json!(n));
    }
    let mut latency = Map::new();
    match &run.records {
        Some(records) => {
            let ok: Vec<&RequestRecord> = records.iter().filter(|r| r.is_success()).collect();
            let lengths = |f: fn(&RequestRecord) -> u64| -> Vec<f64> {
                ok.iter().map(|r| f(r) as f64).collect()
            };
            if let Some(v) = statistics(&lengths(|r| r.input_tokens), "count") {
                requests.insert("input_length".into(), v);
            }
            if let Some(v) = statistics(&lengths(|r| r.output_tokens), "count") {
                requests.insert("output_length".into(), v);
            }
            for (key, samples) in latency_samples(records) {
                if let Some(v) = statistics(&samples, "ms") {
                    latency.insert(key.into(), v);
                }
            }
        }
        None => {
            let per_request =
                |total: u64| (s.completed > 0).then(|| total as f64 / s.completed as f64);
            if let Some(m) = per_request(s.total_input_tokens) {
                requests.insert("input_length".into(), json!({"units": "count", "mean": m}));
            }
            if let Some(m) = per_request(s.total_output_tokens) {
                requests.insert("output_length".into(), json!({"units": "count", "mean": m}));
            }
            for (key, m) in [
                ("time_to_first_token", &s.ttft),
                ("time_per_output_token", &s.tpot),
                ("inter_token_latency", &s.itl),
                ("request_latency", &s.e2el),
            ] {
                if let Some(v) = summary_statistics(m, "ms") {
                    latency.insert(key.into(), v);
                }
            }
        }
    }
    let mut throughput = Map::new();
    for (key, v, units) in [
        ("input_token_rate", s.prompt_throughput, "tokens/s"),
        ("output_token_rate", s.output_throughput, "tokens/s"),
        ("total_token_rate", s.total_token_throughput, "tokens/s"),
        ("request_rate", s.request_throughput, "queries/s"),
    ] {
        if let Some(v) = mean_only(v, units) {
            throughput.insert(key.into(), v);
        }
    }
    json!({
        "requests": Value::Object(requests),
        "latency": Value::Object(latency),
        "throughput": Value::Object(throughput),
    })
}

/// The label of the target's component in `scenario.stack`.
fn component_label(r: &RunResult) -> String {
    if r.metadata.target.is_simulator() {
        "servebench-sim".to_owned()
    } else {
        "inference-server".to_owned()
    }
}

fn target_text(r: &RunResult) -> String {
    let t = &r.metadata.target;
    t.base_url
        .clone()
        .or_else(|| t.sim_spec.clone())
        .unwrap_or_default()
}

fn stack(r: &RunResult) -> Value {
    let md = &r.metadata;
    let t = &md.target;
    let label = component_label(r);
    let metadata = json!({
        "schema_version": "0.0.1",
        "label": label,
        "cfg_id": hex128(target_text(r).as_bytes()),
        "description": if t.is_simulator() {
            format!("servebench's simulated engine: {}", t.sim_spec.as_deref().unwrap_or(""))
        } else {
            format!("the server measured at {}", t.base_url.as_deref().unwrap_or("?"))
        },
    });
    let version = t.server_version_text().unwrap_or("unknown").to_owned();
    let standardized = match (&t.sim_config, t.is_simulator()) {
        (Some(c), true) => {
            let tp = c.tensor_parallel_size.unwrap_or(1).max(1);
            json!({
                "kind": "inference_engine",
                "tool": "servebench-sim",
                "tool_version": c.version.clone().unwrap_or_else(|| r.servebench_version.clone()),
                "role": "replica",
                "replicas": 1,
                "model": {"name": md.model_id},
                "accelerator": {
                    "model": c.gpu.clone().unwrap_or_else(|| "unknown".into()),
                    "count": tp,
                    "parallelism": {"tp": tp, "dp": 1, "dp_local": 1, "workers": 1, "ep": 1, "pp": 1},
                },
            })
        }
        _ => json!({
            "kind": "generic",
            "tool": if md.backend.is_empty() { "unknown".to_owned() } else { md.backend.clone() },
            "tool_version": version,
            "model": {"name": md.model_id},
            "base_url": t.base_url,
        }),
    };
    let native = json!({
        "args": Value::Null,
        "envars": Value::Null,
        "config": {
            "base_url": t.base_url,
            "sim_spec": t.sim_spec,
            "sim_config": t.sim_config,
            "server_version": t.server_version,
            "server_models": t.server_models,
        },
    });
    json!([{"metadata": metadata, "standardized": standardized, "native": native}])
}

/// A sequence length as planned: fixed, or uniform over vLLM's `[L·(1−r), L·(1+r)]`.
fn sequence_length(value: u64, range_ratio: f64) -> Value {
    if range_ratio > 0.0 && value > 0 {
        let lo = (value as f64 * (1.0 - range_ratio)).floor().max(0.0) as u64;
        let hi = ((value as f64 * (1.0 + range_ratio)).ceil() as u64).max(1);
        json!({"distribution": "uniform", "value": value, "min": lo, "max": hi})
    } else {
        json!({"distribution": "fixed", "value": value})
    }
}

/// The command line's flags as `{flag: value}` (a switch maps to null, as in llm-d's
/// examples; a flag given twice keeps its last value).
fn flags(command_line: &[String]) -> Map<String, Value> {
    let mut out = Map::new();
    let mut i = 0;
    while i < command_line.len() {
        let w = &command_line[i];
        if let Some(name) = w.strip_prefix("--") {
            if let Some((k, v)) = name.split_once('=') {
                out.insert(format!("--{k}"), json!(v));
            } else if command_line
                .get(i + 1)
                .is_some_and(|n| !n.starts_with("--"))
            {
                out.insert(w.clone(), json!(command_line[i + 1]));
                i += 1;
            } else {
                out.insert(w.clone(), Value::Null);
            }
        }
        i += 1;
    }
    out
}

fn load(r: &RunResult) -> Value {
    let p = r.plan.clone().unwrap_or_default();
    let s = &r.summary;
    let random = p.dataset_name.starts_with("random");
    let mean_len = |total: u64| {
        if s.completed > 0 {
            (total as f64 / s.completed as f64).round() as u64
        } else {
            0
        }
    };
    let (input, output) = if random {
        (
            sequence_length(p.random_input_len, p.random_range_ratio),
            sequence_length(p.random_output_len, p.random_range_ratio),
        )
    } else {
        (
            json!({"distribution": "other", "value": mean_len(s.total_input_tokens)}),
            json!({"distribution": "other", "value": mean_len(s.total_output_tokens)}),
        )
    };
    let mut st = Map::new();
    st.insert("tool".into(), json!("servebench"));
    st.insert("tool_version".into(), json!(r.servebench_version));
    st.insert(
        "parallelism".into(),
        json!(r.metadata.shard.as_ref().map_or(1, |sh| sh.count.max(1))),
    );
    st.insert(
        "source".into(),
        json!(if random { "random" } else { "sampled" }),
    );
    st.insert("stage".into(), json!(0));
    st.insert("input_seq_len".into(), input);
    st.insert("output_seq_len".into(), output);
    if p.random_prefix_len > 0 && p.shared_prefix_tokens() > 0 {
        st.insert(
            "prefix".into(),
            json!({
                "prefix_len": {"distribution": "fixed", "value": p.random_prefix_len},
                "num_groups": 1,
                "num_users_per_group": 1,
                "num_prefixes": 1,
            }),
        );
    }
    if !r.by_turn.is_empty() {
        st.insert("multi_turn".into(), json!({"enabled": true}));
    }
    if let Some(rate) = p
        .request_rate
        .per_second()
        .filter(|v| v.is_finite() && *v > 0.0)
    {
        st.insert("rate_qps".into(), json!(rate));
    }
    if let Some(c) = p.max_concurrency.filter(|c| *c >= 1) {
        st.insert("concurrency".into(), json!(c));
    }
    let (cfg, _) = config_of(r);
    json!({
        "metadata": {
            "schema_version": "0.0.1",
            "cfg_id": cfg,
            "description": format!(
                "{} {} prompts, {}",
                p.dataset_name,
                p.num_prompts,
                match p.max_concurrency {
                    Some(c) => format!("rate {} req/s, at most {c} in flight", p.request_rate.0),
                    None => format!("rate {} req/s", p.request_rate.0),
                }
            ),
        },
        "standardized": Value::Object(st),
        "native": {
            "args": Value::Object(flags(&r.metadata.command_line)),
            "envars": Value::Null,
            "config": serde_json::to_value(&p).unwrap_or(Value::Null),
        },
    })
}

/// GPU readings inside the measured window, all GPUs pooled.
fn gpu_readings(r: &RunResult, f: fn(&GpuSample) -> Option<f64>) -> Vec<f64> {
    let end = (r.summary.duration_s * 1e9) as u64;
    r.gpu_telemetry
        .iter()
        .flat_map(|g| &g.gpus)
        .flat_map(|g| &g.samples)
        .filter(|s| s.t <= end)
        .filter_map(f)
        .collect()
}

fn observability(r: &RunResult) -> Option<Value> {
    let mut agg = Map::new();
    if let Some(e) = &r.summary.energy {
        agg.insert(
            "power_consumption".into(),
            json!({"units": "Watts", "mean": e.avg_power_w}),
        );
    }
    if let Some(v) = statistics(&gpu_readings(r, |s| s.util_percent), "percent") {
        agg.insert("gpu_utilization".into(), v);
    }
    if let Some(v) = statistics(&gpu_readings(r, |s| s.memory_used_mib), "MiB") {
        agg.insert("gpu_memory_usage".into(), v);
    }
    if let Some(t) = &r.server_telemetry {
        let of = |f: fn(&servebench_metrics::result::TelemetrySample) -> Option<f64>| {
            t.samples.iter().filter_map(f).collect::<Vec<f64>>()
        };
        let kv: Vec<f64> = of(|s| s.kv_usage).iter().map(|v| v * 100.0).collect();
        if let Some(v) = statistics(&kv, "percent") {
            agg.insert("kv_cache_usage".into(), v);
        }
        if let Some(v) = statistics(&of(|s| s.running), "count") {
            agg.insert("running_requests".into(), v);
        }
        if let Some(v) = statistics(&of(|s| s.waiting), "count") {
            agg.insert("waiting_requests".into(), v);
        }
    }
    if agg.is_empty() {
        return None;
    }
    let mut o = Map::new();
    o.insert(
        "components".into(),
        json!([{"component_label": component_label(r), "aggregate": Value::Object(agg)}]),
    );
    if let Some(e) = &r.summary.energy {
        o.insert(
            "energy".into(),
            serde_json::to_value(e).unwrap_or(Value::Null),
        );
    }
    Some(Value::Object(o))
}

/// RFC 3339 (UTC) of ns since the epoch.
fn rfc3339(unix_ns: u64) -> Option<String> {
    let secs = i64::try_from(unix_ns / 1_000_000_000).ok()?;
    let nanos = (unix_ns % 1_000_000_000) as u32;
    chrono::DateTime::from_timestamp(secs, nanos)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

fn run_section(run: &ExportRun) -> Value {
    let r = &run.result;
    let md = &r.metadata;
    let id_text = format!("{}|{}", run.path.display(), md.date);
    let mut o = Map::new();
    o.insert("uid".into(), json!(hex128(id_text.as_bytes())));
    o.insert(
        "eid".into(),
        json!(run
            .context
            .experiment
            .as_ref()
            .map(|e| hex128(e.as_bytes()))),
    );
    o.insert(
        "cid".into(),
        json!((!target_text(r).is_empty()).then(|| hex128(target_text(r).as_bytes()))),
    );
    o.insert(
        "pid".into(),
        json!((!md.host.is_empty()).then(|| md.host.clone())),
    );
    let duration = format!("PT{}S", r.summary.duration_s);
    let start = md.clock_anchor.as_ref().filter(|a| a.unix_ns > 0);
    o.insert(
        "time".into(),
        json!({
            "start": start.and_then(|a| rfc3339(a.unix_ns)),
            "end": start.and_then(|a| rfc3339(a.unix_ns + (r.summary.duration_s * 1e9) as u64)),
            "duration": duration,
        }),
    );
    o.insert(
        "description".into(),
        json!(format!(
            "servebench {}{}: {}",
            run.context.kind.as_str(),
            md.label
                .as_deref()
                .map(|l| format!(" ({l})"))
                .unwrap_or_default(),
            run.path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        )),
    );
    let mut keywords = vec![
        "servebench".to_owned(),
        run.context.kind.as_str().to_owned(),
    ];
    if let Some(row) = &run.context.row {
        keywords.push(format!("row-{row}"));
    }
    o.insert("keywords".into(), json!(keywords));
    Value::Object(o)
}

/// The llm-d benchmark report (v0.2) of one run.
pub fn report(run: &ExportRun) -> Value {
    let r = &run.result;
    let mut results = Map::new();
    results.insert(
        "request_performance".into(),
        json!({"aggregate": aggregate(run)}),
    );
    if let Some(o) = observability(r) {
        results.insert("observability".into(), o);
    }
    json!({
        "version": VERSION,
        "run": run_section(run),
        "scenario": {"stack": stack(r), "load": load(r)},
        "results": Value::Object(results),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_become_flag_maps() {
        let words: Vec<String> = [
            "servebench",
            "run",
            "--num-prompts",
            "10",
            "--save-result",
            "--seed=3",
            "--virtual-time",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let f = flags(&words);
        assert_eq!(f["--num-prompts"], json!("10"));
        assert_eq!(f["--save-result"], Value::Null);
        assert_eq!(f["--seed"], json!("3"));
        assert_eq!(f["--virtual-time"], Value::Null);
    }

    #[test]
    fn statistics_have_every_percentile_key() {
        let xs: Vec<f64> = (1..=1000).map(f64::from).collect();
        let s = statistics(&xs, "ms").unwrap_or(Value::Null);
        for (_, key) in PERCENTILES {
            assert!(s.get(key).is_some(), "{key} in {s}");
        }
        assert_eq!(s["units"], "ms");
        assert_eq!(statistics(&[f64::NAN], "ms"), None);
        assert_eq!(
            sequence_length(100, 0.5),
            json!({"distribution": "uniform", "value": 100, "min": 50, "max": 150})
        );
    }
}
