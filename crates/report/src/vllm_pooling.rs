//! vLLM's result of a pooling run (`--backend openai-embeddings`, `vllm-rerank`): the keys
//! `vllm bench serve` writes when its task is pooling (vllm/benchmarks/serve.py,
//! `calculate_metrics_for_embeddings` and the pooling branch of `benchmark`): requests, input
//! tokens, request and input-token throughput and the E2EL statistics; no TTFT, TPOT, ITL or
//! output keys.
//!
//! vLLM's client takes a pooling request's latency when the response head arrives (it does
//! not time the body); the record's `first_token` is that point, so the E2EL written here is
//! vLLM's. servebench's own E2EL (the native result) runs to the end of the answer.

use std::fmt::Write as _;

use servebench_metrics::units::ns_to_s;
use servebench_metrics::{vllm as vllm_metrics, RequestRecord};

use crate::pyjson::{OrderedObject, PyValue};
use crate::terminal::{header, latency_lines, line, line2, num};
use crate::vllm::{ms_stats, percentile_word, VllmRunInfo};

/// vLLM's rule for a pooling task: the backend's name says embeddings or rerank.
pub fn is_pooling_backend(backend: &str) -> bool {
    backend.contains("embeddings") || backend.contains("rerank")
}

/// The statistics blocks a pooling result can hold (vLLM computes only E2EL for pooling).
const POOLING_BLOCKS: &[&str] = &["e2el"];

/// vLLM's result object of a pooling run, from all its records (failed included).
pub fn pooling_result(info: &VllmRunInfo, records: &[RequestRecord]) -> OrderedObject {
    let records = vllm_metrics::views(records);
    let ok: Vec<&RequestRecord> = records.iter().filter(|r| r.is_success()).collect();
    let completed = ok.len();
    let total_input: u64 = ok.iter().map(|r| r.input_tokens).sum();
    let dur = if info.duration_s > 0.0 {
        info.duration_s
    } else {
        f64::MIN_POSITIVE
    };
    // vLLM's pooling latency: the response head (see the module note).
    let latency = |r: &RequestRecord| r.ttft_ns().map(ns_to_s).unwrap_or(0.0);
    let e2els: Vec<f64> = ok.iter().map(|r| latency(r)).collect();

    let mut o = super::vllm::opening_keys(info);
    o.insert("completed", completed);
    o.insert("total_input_tokens", total_input);
    o.insert("request_throughput", completed as f64 / dur);
    o.insert("total_token_throughput", total_input as f64 / dur);
    if info.detailed {
        o.insert(
            "input_lens",
            records
                .iter()
                .map(|r| if r.is_success() { r.input_tokens } else { 0 })
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
    }
    if !info.rps_change_events.is_empty() {
        let events: Vec<PyValue> = info
            .rps_change_events
            .iter()
            .map(|(rps, ts)| {
                let mut e = OrderedObject::new();
                e.insert("rps", *rps);
                e.insert("timestamp", ts.clone());
                PyValue::Object(e)
            })
            .collect();
        o.insert("rps_change_events", PyValue::List(events));
    }
    for metric in POOLING_BLOCKS {
        if !info.percentile_metrics.iter().any(|m| m == metric) {
            continue;
        }
        let (mean, median, std, pcts) = ms_stats(&e2els, &info.percentiles);
        o.insert(format!("mean_{metric}_ms"), mean);
        o.insert(format!("median_{metric}_ms"), median);
        o.insert(format!("std_{metric}_ms"), std);
        for (p, v) in pcts {
            o.insert(format!("p{}_{metric}_ms", percentile_word(p)), v);
        }
    }
    o
}

/// vLLM's "Serving Benchmark Result" block of a pooling run: no generated tokens, no output
/// throughput, only the E2EL statistics. `failed` is counted by the caller (vLLM prints it
/// but does not write it for pooling).
pub fn pooling_block(o: &OrderedObject, failed: usize, percentiles: &[f64]) -> String {
    let mut out = String::new();
    header(&mut out, " Serving Benchmark Result ", '=');
    line(&mut out, "Successful requests:", num(o, "completed") as u64);
    line(&mut out, "Failed requests:", failed);
    if let Some(c) = o.get("max_concurrency").and_then(PyValue::as_u64) {
        line(&mut out, "Maximum request concurrency:", c);
    }
    if let Some(r) = o.get("request_rate").and_then(PyValue::as_f64) {
        line2(&mut out, "Request rate configured (RPS):", r);
    }
    line2(&mut out, "Benchmark duration (s):", num(o, "duration"));
    line(
        &mut out,
        "Total input tokens:",
        num(o, "total_input_tokens") as u64,
    );
    line2(
        &mut out,
        "Request throughput (req/s):",
        num(o, "request_throughput"),
    );
    line2(
        &mut out,
        "Total token throughput (tok/s):",
        num(o, "total_token_throughput"),
    );
    for metric in POOLING_BLOCKS {
        latency_lines(&mut out, o, metric, percentiles);
    }
    let _ = writeln!(out, "{}", "=".repeat(50));
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use servebench_metrics::CountSource;

    fn record(id: u64, head: u64, end: u64, input: u64) -> RequestRecord {
        RequestRecord {
            phases: None,
            id,
            intended: 0,
            released: 0,
            sent: 0,
            started: None,
            first_token: Some(head),
            end: Some(end),
            done: Some(end),
            waited_for_slot: false,
            events: Vec::new(),
            bare_events: Vec::new(),
            input_tokens: input,
            input_source: CountSource::Usage,
            output_tokens: 0,
            output_source: CountSource::Usage,
            intended_input_tokens: input,
            max_tokens: None,
            cached_tokens: None,
            finish_reason: None,
            text: None,
            failure: None,
            resent: 0,
            answer_checked: false,
            output_split: None,
            session_id: None,
            turn: None,
            stamp_clock: None,
            lora: None,
            images: None,
            served_by: None,
        }
    }

    fn info() -> VllmRunInfo {
        VllmRunInfo {
            date: "20260101-000000".into(),
            backend: "openai-embeddings".into(),
            label: None,
            model_id: "m".into(),
            tokenizer_id: "t".into(),
            num_prompts: 2,
            metadata: Vec::new(),
            request_rate: f64::INFINITY,
            burstiness: 1.0,
            max_concurrency: None,
            ramp_up: None,
            rps_change_events: Vec::new(),
            spec_decode: None,
            duration_s: 2.0,
            percentile_metrics: vec!["e2el".into()],
            percentiles: vec![99.0],
            goodput: Vec::new(),
            detailed: false,
        }
    }

    #[test]
    fn pooling_keys_are_vllms() {
        let recs = [
            record(0, 10_000_000, 12_000_000, 7),
            record(1, 30_000_000, 31_000_000, 5),
        ];
        let o = crate::vllm_result(&info(), &recs);
        let keys: Vec<&str> = o.keys().collect();
        assert_eq!(
            keys,
            [
                "date",
                "endpoint_type",
                "backend",
                "label",
                "model_id",
                "tokenizer_id",
                "num_prompts",
                "request_rate",
                "burstiness",
                "max_concurrency",
                "duration",
                "completed",
                "total_input_tokens",
                "request_throughput",
                "total_token_throughput",
                "mean_e2el_ms",
                "median_e2el_ms",
                "std_e2el_ms",
                "p99_e2el_ms",
            ]
        );
        assert_eq!(num(&o, "total_input_tokens"), 12.0);
        assert_eq!(num(&o, "total_token_throughput"), 6.0);
        // vLLM's pooling latency is the response head: 10 and 30 ms.
        assert_eq!(num(&o, "mean_e2el_ms"), 20.0);
        let block = pooling_block(&o, 1, &[99.0]);
        assert!(
            block.contains("Failed requests:                         1"),
            "{block}"
        );
        assert!(
            !block.contains("TTFT") && !block.contains("generated"),
            "{block}"
        );
    }
}
