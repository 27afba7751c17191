//! vLLM's result JSON (`--save-result`): the same keys, in the same order, with the same
//! meaning as `vllm bench serve` 0.32/0.33 writes them.

use serde_json::Value;
use servebench_metrics::{stats, vllm as vllm_metrics, RequestRecord};

use crate::pyjson::OrderedObject;

const NS: f64 = 1e9;

/// A goodput SLO as vLLM takes it (`--goodput ttft:500`): metric name and milliseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct GoodputSlo {
    pub metric: String,
    pub ms: f64,
}

/// Everything besides the records that vLLM's result JSON holds.
#[derive(Debug, Clone)]
pub struct VllmRunInfo {
    /// `%Y%m%d-%H%M%S`, local time.
    pub date: String,
    pub backend: String,
    pub label: Option<String>,
    pub model_id: String,
    pub tokenizer_id: String,
    pub num_prompts: usize,
    pub metadata: Vec<(String, String)>,
    pub request_rate: f64,
    pub burstiness: f64,
    pub max_concurrency: Option<usize>,
    /// (strategy, start rps, end rps)
    pub ramp_up: Option<(String, u64, u64)>,
    pub duration_s: f64,
    /// `--percentile-metrics`, in the given order.
    pub percentile_metrics: Vec<String>,
    /// `--metric-percentiles`.
    pub percentiles: Vec<f64>,
    pub goodput: Vec<GoodputSlo>,
    /// `--save-detailed`.
    pub detailed: bool,
}

fn secs(ns: u64) -> f64 {
    ns as f64 / NS
}

/// vLLM's name for a percentile key: `99` for 99.0, `99.9` for 99.9.
pub fn percentile_word(p: f64) -> String {
    if p.fract() == 0.0 {
        format!("{}", p as i64)
    } else {
        format!("{p}")
    }
}

/// Per-request values vLLM reads from a record (seconds; a failed request has 0 / empty).
struct Row {
    ok: bool,
    ttft: f64,
    itl: Vec<f64>,
    latency: f64,
    output_len: u64,
}

fn row(r: &RequestRecord) -> Row {
    if !r.is_success() {
        return Row {
            ok: false,
            ttft: 0.0,
            itl: Vec::new(),
            latency: 0.0,
            output_len: 0,
        };
    }
    let first = r.first_token.unwrap_or(r.sent);
    let end = r.end.unwrap_or(first);
    let itl = r
        .events
        .windows(2)
        .map(|w| secs(w[1].t.saturating_sub(w[0].t)))
        .collect();
    Row {
        ok: true,
        ttft: secs(first.saturating_sub(r.sent)),
        itl,
        latency: secs(end.saturating_sub(r.sent)),
        output_len: r.output_tokens,
    }
}

/// numpy's `mean/median/std/percentile` of `xs or 0`, in ms.
fn ms_stats(xs: &[f64], percentiles: &[f64]) -> (f64, f64, f64, Vec<(f64, f64)>) {
    let zero = [0.0];
    let xs = if xs.is_empty() { &zero[..] } else { xs };
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    (
        stats::mean(xs).unwrap_or(0.0) * 1000.0,
        stats::percentile_sorted(&sorted, 50.0).unwrap_or(0.0) * 1000.0,
        stats::std_dev(xs).unwrap_or(0.0) * 1000.0,
        percentiles
            .iter()
            .map(|&p| {
                (
                    p,
                    stats::percentile_sorted(&sorted, p).unwrap_or(0.0) * 1000.0,
                )
            })
            .collect(),
    )
}

/// Build vLLM's result object from the run's records (all of them, failed included, in
/// request order).
pub fn vllm_result(info: &VllmRunInfo, records: &[RequestRecord]) -> OrderedObject {
    let rows: Vec<Row> = records.iter().map(row).collect();
    let completed = rows.iter().filter(|r| r.ok).count();
    let failed = rows.len() - completed;
    let total_input: u64 = records
        .iter()
        .filter(|r| r.is_success())
        .map(|r| r.input_tokens)
        .sum();
    let total_output: u64 = rows.iter().map(|r| r.output_len).sum();
    let dur = if info.duration_s > 0.0 {
        info.duration_s
    } else {
        f64::MIN_POSITIVE
    };

    let ttfts: Vec<f64> = rows.iter().filter(|r| r.ok).map(|r| r.ttft).collect();
    let e2els: Vec<f64> = rows.iter().filter(|r| r.ok).map(|r| r.latency).collect();
    let itls: Vec<f64> = rows
        .iter()
        .filter(|r| r.ok)
        .flat_map(|r| r.itl.iter().copied())
        .collect();
    let all_tpots: Vec<f64> = rows
        .iter()
        .filter(|r| r.ok)
        .map(|r| {
            if r.output_len > 1 {
                (r.latency - r.ttft) / (r.output_len - 1) as f64
            } else {
                0.0
            }
        })
        .collect();
    let tpots: Vec<f64> = rows
        .iter()
        .filter(|r| r.ok && r.output_len > 1)
        .map(|r| (r.latency - r.ttft) / (r.output_len - 1) as f64)
        .collect();
    let queue: Vec<f64> = records
        .iter()
        .filter(|r| r.is_success())
        .map(|r| secs(r.sent.saturating_sub(r.intended)))
        .collect();

    let good = if info.goodput.is_empty() {
        None
    } else {
        let mut n = 0usize;
        let ok_rows: Vec<&Row> = rows.iter().filter(|r| r.ok).collect();
        for (i, r) in ok_rows.iter().enumerate() {
            let meets = info.goodput.iter().all(|slo| {
                let limit = slo.ms / 1000.0;
                match slo.metric.as_str() {
                    "ttft" => r.ttft <= limit,
                    "tpot" => all_tpots[i] <= limit,
                    "e2el" => r.latency <= limit,
                    "itl" => r.itl.iter().all(|x| *x <= limit),
                    _ => true,
                }
            });
            if meets {
                n += 1;
            }
        }
        Some(n as f64 / dur)
    };

    let mut o = OrderedObject::new();
    o.insert("date", info.date.clone());
    o.insert("endpoint_type", info.backend.clone());
    o.insert("backend", info.backend.clone());
    o.insert(
        "label",
        info.label.clone().map(Value::String).unwrap_or(Value::Null),
    );
    o.insert("model_id", info.model_id.clone());
    o.insert("tokenizer_id", info.tokenizer_id.clone());
    o.insert("num_prompts", info.num_prompts);
    for (k, v) in &info.metadata {
        o.insert(k.clone(), v.clone());
    }
    o.insert(
        "request_rate",
        if info.request_rate.is_finite() {
            Value::from(info.request_rate)
        } else {
            Value::from("inf")
        },
    );
    o.insert("burstiness", info.burstiness);
    o.insert(
        "max_concurrency",
        info.max_concurrency.map(Value::from).unwrap_or(Value::Null),
    );
    if let Some((strategy, start, end)) = &info.ramp_up {
        o.insert("ramp_up_strategy", strategy.clone());
        o.insert("ramp_up_start_rps", *start);
        o.insert("ramp_up_end_rps", *end);
    }
    o.insert("duration", info.duration_s);
    o.insert("completed", completed);
    o.insert("failed", failed);
    o.insert("total_input_tokens", total_input);
    o.insert("total_output_tokens", total_output);
    o.insert("request_throughput", completed as f64 / dur);
    o.insert(
        "request_goodput",
        good.map(Value::from).unwrap_or(Value::Null),
    );
    o.insert("output_throughput", total_output as f64 / dur);
    o.insert(
        "total_token_throughput",
        (total_input + total_output) as f64 / dur,
    );
    o.insert(
        "input_lens",
        records.iter().map(|r| r.input_tokens).collect::<Vec<_>>(),
    );
    o.insert(
        "output_lens",
        rows.iter().map(|r| r.output_len).collect::<Vec<_>>(),
    );
    o.insert("ttfts", rows.iter().map(|r| r.ttft).collect::<Vec<_>>());
    o.insert(
        "itls",
        Value::Array(rows.iter().map(|r| Value::from(r.itl.clone())).collect()),
    );
    o.insert(
        "latencies",
        rows.iter().map(|r| r.latency).collect::<Vec<_>>(),
    );
    o.insert(
        "start_times",
        records.iter().map(|r| secs(r.sent)).collect::<Vec<_>>(),
    );
    o.insert(
        "queue_times",
        records
            .iter()
            .map(|r| secs(r.sent.saturating_sub(r.intended)))
            .collect::<Vec<_>>(),
    );
    o.insert(
        "generated_texts",
        records
            .iter()
            .map(|r| r.text.clone().unwrap_or_default())
            .collect::<Vec<_>>(),
    );
    o.insert(
        "errors",
        records
            .iter()
            .map(|r| {
                r.failure
                    .as_ref()
                    .map(|f| f.message.clone())
                    .unwrap_or_default()
            })
            .collect::<Vec<_>>(),
    );
    o.insert(
        "max_output_tokens_per_s",
        vllm_metrics::max_output_tokens_per_s(records),
    );
    o.insert(
        "max_concurrent_requests",
        vllm_metrics::max_concurrent_requests(records),
    );
    o.insert("rtfx", 0.0);

    let user_ttft: Vec<f64> = records
        .iter()
        .filter(|r| r.is_success())
        .map(|r| secs(r.first_token.unwrap_or(r.sent).saturating_sub(r.intended)))
        .collect();
    let user_e2el: Vec<f64> = records
        .iter()
        .filter(|r| r.is_success())
        .map(|r| secs(r.end.unwrap_or(r.sent).saturating_sub(r.intended)))
        .collect();
    for metric in &info.percentile_metrics {
        let values: &[f64] = match metric.as_str() {
            "ttft" => &ttfts,
            "tpot" => &tpots,
            "itl" => &itls,
            "e2el" => &e2els,
            "queue" | "client_queue_time" => &queue,
            "user_ttft" => &user_ttft,
            "user_e2el" | "e2el_including_client_queue" => &user_e2el,
            _ => continue,
        };
        let (mean, median, std, pcts) = ms_stats(values, &info.percentiles);
        o.insert(format!("mean_{metric}_ms"), mean);
        o.insert(format!("median_{metric}_ms"), median);
        o.insert(format!("std_{metric}_ms"), std);
        for (p, v) in pcts {
            o.insert(format!("p{}_{metric}_ms", percentile_word(p)), v);
        }
    }

    if !info.detailed {
        for k in [
            "input_lens",
            "output_lens",
            "start_times",
            "ttfts",
            "itls",
            "generated_texts",
            "errors",
        ] {
            o.remove(k);
        }
    }
    o
}

/// The metric names `--percentile-metrics` accepts.
pub const PERCENTILE_METRICS: &[&str] = &[
    "ttft",
    "tpot",
    "itl",
    "e2el",
    "queue",
    "user_ttft",
    "user_e2el",
    "client_queue_time",
    "e2el_including_client_queue",
];
