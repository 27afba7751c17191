//! The PyTorch OSS benchmark database records `vllm bench serve` writes beside its result
//! (`<result>.pytorch.json`) when `SAVE_TO_PYTORCH_BENCHMARK_FORMAT` is set: one record per
//! latency figure, as vLLM builds them.
//!
//! vLLM, `vllm/benchmarks/lib/utils.py`, `convert_to_pytorch_benchmark_format(args, metrics,
//! extra_info)`: for each `name, benchmark_values` of `metrics`, the record
//!
//! ```text
//! {"benchmark": {"name": "vLLM benchmark", "extra_info": {"args": vars(args)}},
//!  "model": {"name": args.model},
//!  "metric": {"name": name, "benchmark_values": benchmark_values, "extra_info": extra_info}}
//! ```
//!
//! with `tensor_parallel_size` copied from `extra_info` into the args when the args lack it;
//! `write_to_json` writes the list with `InfEncoder` (an infinite float becomes `"inf"`).
//! `vllm/benchmarks/serve.py`, `save_to_pytorch_benchmark_format(args, results, file_name)`:
//! `metrics` is `{k: [results[k]]}` for the twelve keys of [`METRICS`] present in the result,
//! and `extra_info` every other key of the result but `ttfts`, `itls`, `generated_texts` and
//! `errors`.
//!
//! `results` is the vLLM-compatible result servebench writes with `--save-result`, rebuilt
//! here from the run's records (or, without them, from its summary); `args` are the run's
//! settings under vLLM's argument names.

use serde_json::{json, Map, Value};
use servebench_metrics::result::RunResult;
use servebench_metrics::{RunSummary, Slo, SloMetric};
use servebench_report::pyjson::PyValue;
use servebench_report::{vllm_result, OrderedObject, VllmRunInfo};

use super::ExportRun;

/// The figures vLLM's `save_to_pytorch_benchmark_format` records, in its order.
pub const METRICS: [&str; 12] = [
    "median_ttft_ms",
    "mean_ttft_ms",
    "std_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "std_tpot_ms",
    "p99_tpot_ms",
    "median_itl_ms",
    "mean_itl_ms",
    "std_itl_ms",
    "p99_itl_ms",
];

/// Result keys vLLM leaves out of `extra_info` ("rather big").
pub const IGNORED: [&str; 4] = ["ttfts", "itls", "generated_texts", "errors"];

/// A Python value as vLLM's `InfEncoder` writes it: an infinite float as `"inf"` (`"-inf"`
/// below zero), NaN (which `json.dump` would write as a bare `NaN`, not JSON) as null.
fn to_json(v: &PyValue) -> Value {
    match v {
        PyValue::Null => Value::Null,
        PyValue::Bool(b) => Value::Bool(*b),
        PyValue::Int(i) => i64::try_from(*i)
            .map(Value::from)
            .unwrap_or_else(|_| Value::from(*i as f64)),
        PyValue::Float(f) if f.is_infinite() => {
            Value::String(if *f > 0.0 { "inf" } else { "-inf" }.into())
        }
        PyValue::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .unwrap_or(Value::Null),
        PyValue::Str(s) => Value::String(s.clone()),
        PyValue::List(l) => Value::Array(l.iter().map(to_json).collect()),
        PyValue::Object(o) => object_json(o),
    }
}

fn object_json(o: &OrderedObject) -> Value {
    Value::Object(o.0.iter().map(|(k, v)| (k.clone(), to_json(v))).collect())
}

/// A rate as vLLM's args hold it (a float; `inf` written as `"inf"`).
fn rate_value(r: Option<f64>) -> Value {
    match r {
        Some(v) if v.is_infinite() => Value::String("inf".into()),
        Some(v) => json!(v),
        None => Value::Null,
    }
}

/// The goodput SLOs of the plan (`ttft:500`) as objectives.
fn goodput(plan: &[String]) -> Vec<Slo> {
    plan.iter()
        .filter_map(|g| {
            let (k, v) = g.split_once(':')?;
            Some(Slo::per_request(
                k.parse::<SloMetric>().ok()?,
                v.parse().ok()?,
            ))
        })
        .collect()
}

/// The run's settings under the names of `vllm bench serve`'s arguments (`vars(args)`).
pub fn args(r: &RunResult) -> Map<String, Value> {
    let md = &r.metadata;
    let p = r.plan.clone().unwrap_or_default();
    let mut a = Map::new();
    let mut put = |k: &str, v: Value| {
        a.insert(k.to_owned(), v);
    };
    put("backend", json!(md.backend));
    put("label", json!(md.label));
    put("base_url", json!(md.target.base_url));
    put("model", json!(md.model_id));
    put("tokenizer", json!(md.tokenizer));
    put("dataset_name", json!(p.dataset_name));
    put("dataset_path", json!(p.dataset_path));
    put("num_prompts", json!(p.num_prompts));
    put("request_rate", rate_value(p.request_rate.per_second()));
    put("burstiness", json!(p.burstiness));
    put("max_concurrency", json!(p.max_concurrency));
    put("seed", json!(md.seed));
    put("random_input_len", json!(p.random_input_len));
    put("random_output_len", json!(p.random_output_len));
    put("random_range_ratio", json!(p.random_range_ratio));
    put("random_prefix_len", json!(p.random_prefix_len));
    put(
        "ramp_up_strategy",
        json!(p.ramp_up.as_ref().map(|r| r.0.clone())),
    );
    put("ramp_up_start_rps", json!(p.ramp_up.as_ref().map(|r| r.1)));
    put("ramp_up_end_rps", json!(p.ramp_up.as_ref().map(|r| r.2)));
    put("num_warmups", json!(p.num_warmups));
    put(
        "percentile_metrics",
        json!(if p.percentile_metrics.is_empty() {
            "ttft,tpot,itl".to_owned()
        } else {
            p.percentile_metrics.join(",")
        }),
    );
    put(
        "metric_percentiles",
        json!(if p.metric_percentiles.is_empty() {
            "99".to_owned()
        } else {
            p.metric_percentiles
                .iter()
                .map(|v| format!("{v}"))
                .collect::<Vec<_>>()
                .join(",")
        }),
    );
    put(
        "goodput",
        if p.goodput.is_empty() {
            Value::Null
        } else {
            json!(p.goodput)
        },
    );
    put(
        "metadata",
        if md.user_metadata.is_empty() {
            Value::Null
        } else {
            json!(md
                .user_metadata
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>())
        },
    );
    put("save_result", json!(true));
    if let Some(tp) = md
        .target
        .sim_config
        .as_ref()
        .and_then(|c| c.tensor_parallel_size)
    {
        put("tensor_parallel_size", json!(tp));
    }
    a
}

/// vLLM's result object of the run: rebuilt from the records as `--save-result` writes it,
/// else the figures its summary holds under vLLM's keys.
pub fn vllm_results(run: &ExportRun) -> Map<String, Value> {
    let r = &run.result;
    let md = &r.metadata;
    let p = r.plan.clone().unwrap_or_default();
    if let Some(records) = &run.records {
        let info = VllmRunInfo {
            date: md.date.clone(),
            backend: md.backend.clone(),
            label: md.label.clone(),
            model_id: md.model_id.clone(),
            tokenizer_id: md.tokenizer.clone(),
            num_prompts: p.num_prompts as usize,
            metadata: md
                .user_metadata
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            request_rate: p.request_rate.per_second().unwrap_or(f64::INFINITY),
            burstiness: p.burstiness,
            max_concurrency: p.max_concurrency.map(|c| c as usize),
            ramp_up: p.ramp_up.clone(),
            rps_change_events: Vec::new(),
            spec_decode: None,
            duration_s: r.summary.duration_s,
            percentile_metrics: if p.percentile_metrics.is_empty() {
                vec!["ttft".into(), "tpot".into(), "itl".into()]
            } else {
                p.percentile_metrics.clone()
            },
            percentiles: if p.metric_percentiles.is_empty() {
                vec![99.0]
            } else {
                p.metric_percentiles.clone()
            },
            goodput: goodput(&p.goodput),
            detailed: false,
        };
        if let Value::Object(m) = object_json(&vllm_result(&info, records)) {
            return m;
        }
    }
    summary_results(r)
}

/// vLLM's keys from a summary alone (the records file is gone).
fn summary_results(r: &RunResult) -> Map<String, Value> {
    let s: &RunSummary = &r.summary;
    let md = &r.metadata;
    let p = r.plan.clone().unwrap_or_default();
    let mut o = Map::new();
    let mut put = |k: &str, v: Value| {
        o.insert(k.to_owned(), v);
    };
    put("date", json!(md.date));
    put("endpoint_type", json!(md.backend));
    put("label", json!(md.label));
    put("model_id", json!(md.model_id));
    put("tokenizer_id", json!(md.tokenizer));
    put("num_prompts", json!(p.num_prompts));
    put("request_rate", rate_value(p.request_rate.per_second()));
    put("burstiness", json!(p.burstiness));
    put("max_concurrency", json!(p.max_concurrency));
    put("duration", json!(s.duration_s));
    put("completed", json!(s.completed));
    put("failed", json!(s.failed));
    put("total_input_tokens", json!(s.total_input_tokens));
    put("total_output_tokens", json!(s.total_output_tokens));
    put("request_throughput", json!(s.request_throughput));
    put(
        "request_goodput",
        json!(s.goodput.as_ref().map(|g| g.requests_per_s)),
    );
    put("output_throughput", json!(s.output_throughput));
    put("total_token_throughput", json!(s.total_token_throughput));
    put("max_output_tokens_per_s", json!(s.peak_output_tokens_per_s));
    put("max_concurrent_requests", json!(s.peak_concurrency));
    for metric in ["ttft", "tpot", "itl", "e2el"] {
        let Some(m) = s.metric(metric) else { continue };
        put(&format!("mean_{metric}_ms"), json!(m.mean.unwrap_or(0.0)));
        put(
            &format!("median_{metric}_ms"),
            json!(m.median.unwrap_or(0.0)),
        );
        put(&format!("std_{metric}_ms"), json!(m.std.unwrap_or(0.0)));
        for ps in &m.percentiles {
            put(&format!("p{}_{metric}_ms", ps.p), json!(ps.value));
        }
    }
    o
}

/// The records vLLM would write for this run.
pub fn records(run: &ExportRun) -> Vec<Value> {
    let results = vllm_results(run);
    let mut args = args(&run.result);
    let extra_info: Map<String, Value> = results
        .iter()
        .filter(|(k, _)| !METRICS.contains(&k.as_str()) && !IGNORED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    // vLLM: the tensor-parallel size the results name, when the args lack one.
    let tp_missing = args
        .get("tensor_parallel_size")
        .is_none_or(|v| v.is_null() || v == &json!(0));
    if tp_missing {
        if let Some(tp) = extra_info.get("tensor_parallel_size") {
            args.insert("tensor_parallel_size".into(), tp.clone());
        }
    }
    let model = run.result.metadata.model_id.clone();
    METRICS
        .iter()
        .filter_map(|name| {
            let value = results.get(*name)?;
            Some(json!({
                "benchmark": {
                    "name": "vLLM benchmark",
                    "extra_info": {"args": Value::Object(args.clone())},
                },
                "model": {"name": model},
                "metric": {
                    "name": name,
                    "benchmark_values": [value],
                    "extra_info": Value::Object(extra_info.clone()),
                },
            }))
        })
        .collect()
}
