//! Server telemetry: `/metrics` scraped once a second during a run, so queue depth, KV-cache use
//! and preemptions sit beside the client's own numbers (vLLM, SGLang, TGI and llama.cpp names).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::clock::RunClock;
use crate::target::Target;

/// Gauges read at each scrape, by what they mean; the first name present wins.
const RUNNING: &[&str] = &[
    "vllm:num_requests_running",
    "sglang:num_running_reqs",
    "tgi_batch_current_size",
    "llamacpp:requests_processing",
];
const WAITING: &[&str] = &[
    "vllm:num_requests_waiting",
    "sglang:num_queue_reqs",
    "tgi_queue_size",
    "llamacpp:requests_deferred",
];
const KV_USAGE: &[&str] = &[
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "sglang:token_usage",
    "llamacpp:kv_cache_usage_ratio",
];
/// Counters whose increase over the run is reported.
const COUNTERS: &[&str] = &[
    "vllm:num_preemptions_total",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "sglang:prompt_tokens_total",
    "sglang:generation_tokens_total",
    "llamacpp:prompt_tokens_total",
    "llamacpp:tokens_predicted_total",
    "tgi_request_count",
];

pub use servebench_metrics::result::{ServerTelemetry, TelemetrySample};

/// Parse Prometheus text exposition into `name → sum over label sets`.
pub fn parse_prometheus(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, rest) = match line.find(['{', ' ']) {
            Some(i) => (&line[..i], &line[i..]),
            None => continue,
        };
        let rest = if rest.starts_with('{') {
            match rest.rfind('}') {
                Some(j) => &rest[j + 1..],
                None => continue,
            }
        } else {
            rest
        };
        let Some(value) = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        else {
            continue;
        };
        *out.entry(name.to_owned()).or_insert(0.0) += value;
    }
    out
}

fn first_of(m: &BTreeMap<String, f64>, names: &[&str]) -> Option<f64> {
    names.iter().find_map(|n| m.get(*n).copied())
}

/// A background scraper; `finish` stops it and returns what it saw.
#[derive(Debug)]
pub struct Scraper {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<ServerTelemetry>,
}

impl Scraper {
    /// Start scraping `target`'s `/metrics` every `every`. A server without `/metrics` costs one
    /// failed request per interval and yields empty telemetry.
    pub fn start(target: Target, clock: RunClock, every: Duration) -> Self {
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut t = ServerTelemetry::default();
            let mut first: Option<BTreeMap<String, f64>> = None;
            let mut last: Option<BTreeMap<String, f64>> = None;
            let mut ticker = tokio::time::interval(every);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                // A stop still takes one last scrape, so counters cover the whole run.
                let last_round = tokio::select! {
                    _ = &mut stopped => true,
                    _ = ticker.tick() => false,
                };
                match crate::probe::get_text(&target, "/metrics", every.max(Duration::from_secs(2)))
                    .await
                {
                    Ok(text) => {
                        let m = parse_prometheus(&text);
                        t.samples.push(TelemetrySample {
                            t: clock.now_ns(),
                            running: first_of(&m, RUNNING),
                            waiting: first_of(&m, WAITING),
                            kv_usage: first_of(&m, KV_USAGE),
                        });
                        if first.is_none() {
                            first = Some(m.clone());
                        }
                        last = Some(m);
                    }
                    Err(_) => t.failed_scrapes += 1,
                }
                if last_round {
                    break;
                }
            }
            if let (Some(a), Some(b)) = (first, last) {
                for name in COUNTERS {
                    if let (Some(x), Some(y)) = (a.get(*name), b.get(*name)) {
                        t.counter_increase.insert((*name).to_owned(), y - x);
                    }
                }
            }
            let max = |f: fn(&TelemetrySample) -> Option<f64>| {
                t.samples.iter().filter_map(f).reduce(f64::max)
            };
            t.max_waiting = max(|s| s.waiting);
            t.max_kv_usage = max(|s| s.kv_usage);
            t
        });
        Scraper { stop, task }
    }

    /// Scrape once more, stop, and return the telemetry.
    pub async fn finish(self) -> ServerTelemetry {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_labels_comments_and_sums_label_sets() {
        let text = "# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n\
                    vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n\
                    vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 2\n\
                    llamacpp:requests_deferred 4 1700000000\n\
                    weird_line_without_value\n";
        let m = parse_prometheus(text);
        assert_eq!(m["vllm:num_requests_running"], 5.0);
        assert_eq!(m["llamacpp:requests_deferred"], 4.0);
        assert!(!m.contains_key("weird_line_without_value"));
        assert_eq!(first_of(&m, RUNNING), Some(5.0));
        assert_eq!(first_of(&m, WAITING), Some(4.0));
    }

    #[test]
    fn label_values_with_braces_and_spaces_do_not_confuse_the_parser() {
        let m = parse_prometheus("x{a=\"b c\",d=\"{}\"} 7\n");
        assert_eq!(m["x"], 7.0);
    }
}
