//! The terminal summary: vLLM's layout line for line, then servebench's own lines.

use std::fmt::Write as _;

use serde_json::Value;

use crate::pyjson::OrderedObject;
use crate::vllm::percentile_word;

fn num(o: &OrderedObject, k: &str) -> f64 {
    o.get(k).and_then(Value::as_f64).unwrap_or(0.0)
}

fn line(out: &mut String, label: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "{label:<40} {value:<10}");
}

fn line2(out: &mut String, label: &str, value: f64) {
    let _ = writeln!(out, "{label:<40} {:<10}", format!("{value:.2}"));
}

fn header(out: &mut String, title: &str, fill: char) {
    let width = 50usize;
    let t = title.chars().count();
    let left = width.saturating_sub(t) / 2;
    let right = width.saturating_sub(t + left);
    let _ = writeln!(
        out,
        "{}{}{}",
        fill.to_string().repeat(left),
        title,
        fill.to_string().repeat(right)
    );
}

/// Display names of the percentile metrics, as vLLM prints them.
fn metric_titles(metric: &str) -> (&str, &str) {
    match metric {
        "ttft" => ("TTFT", "Time to First Token"),
        "tpot" => ("TPOT", "Time per Output Token (excl. 1st token)"),
        "itl" => ("ITL", "Inter-token Latency"),
        "e2el" => ("E2EL", "End-to-end Latency"),
        "queue" | "client_queue_time" => ("Client Queue Time", "Client-side Queueing"),
        "user_ttft" => ("User TTFT", "User TTFT (incl. client queue)"),
        "user_e2el" | "e2el_including_client_queue" => {
            ("E2EL incl. Client Queue", "Queue-inclusive End-to-end Latency")
        }
        other => (other, other),
    }
}

/// Render vLLM's "Serving Benchmark Result" block from its result object.
pub fn vllm_block(
    o: &OrderedObject,
    percentile_metrics: &[String],
    percentiles: &[f64],
    has_goodput: bool,
) -> String {
    let mut out = String::new();
    header(&mut out, " Serving Benchmark Result ", '=');
    line(&mut out, "Successful requests:", num(o, "completed") as u64);
    line(&mut out, "Failed requests:", num(o, "failed") as u64);
    if let Some(c) = o.get("max_concurrency").and_then(Value::as_u64) {
        line(&mut out, "Maximum request concurrency:", c);
    }
    if let Some(r) = o.get("request_rate").and_then(Value::as_f64) {
        line2(&mut out, "Request rate configured (RPS):", r);
    }
    line2(&mut out, "Benchmark duration (s):", num(o, "duration"));
    line(&mut out, "Total input tokens:", num(o, "total_input_tokens") as u64);
    line(&mut out, "Total generated tokens:", num(o, "total_output_tokens") as u64);
    line2(&mut out, "Request throughput (req/s):", num(o, "request_throughput"));
    if has_goodput {
        line2(&mut out, "Request goodput (req/s):", num(o, "request_goodput"));
    }
    line2(&mut out, "Output token throughput (tok/s):", num(o, "output_throughput"));
    line2(&mut out, "Peak output token throughput (tok/s):", num(o, "max_output_tokens_per_s"));
    line2(&mut out, "Peak concurrent requests:", num(o, "max_concurrent_requests"));
    line2(&mut out, "Total token throughput (tok/s):", num(o, "total_token_throughput"));
    for metric in percentile_metrics {
        if o.get(&format!("mean_{metric}_ms")).is_none() {
            continue;
        }
        let (name, title) = metric_titles(metric);
        header(&mut out, title, '-');
        line2(&mut out, &format!("Mean {name} (ms):"), num(o, &format!("mean_{metric}_ms")));
        line2(&mut out, &format!("Median {name} (ms):"), num(o, &format!("median_{metric}_ms")));
        for p in percentiles {
            let w = percentile_word(*p);
            line2(&mut out, &format!("P{w} {name} (ms):"), num(o, &format!("p{w}_{metric}_ms")));
        }
    }
    out.push_str(&"=".repeat(50));
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_centered_like_python_format() {
        let mut s = String::new();
        header(&mut s, " Serving Benchmark Result ", '=');
        assert_eq!(s, "============ Serving Benchmark Result ============\n");
        let mut s = String::new();
        header(&mut s, "Time to First Token", '-');
        assert_eq!(s, "---------------Time to First Token----------------\n");
    }
}
