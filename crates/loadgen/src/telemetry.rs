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
/// The cumulative preemption counter, drawn over time.
const PREEMPTIONS: &[&str] = &["vllm:num_preemptions_total", "sglang:num_preemptions_total"];
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
    for s in prometheus_samples(text) {
        *out.entry(s.name.to_owned()).or_insert(0.0) += s.value;
    }
    out
}

/// One sample line of Prometheus text exposition, its label set kept as written.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PromSample<'a> {
    pub name: &'a str,
    /// Between the braces, empty without labels.
    pub labels: &'a str,
    pub value: f64,
}

impl<'a> PromSample<'a> {
    /// The value of label `key`, unescaped only as far as plain values need.
    pub fn label(&self, key: &str) -> Option<&'a str> {
        let mut rest = self.labels;
        while !rest.is_empty() {
            let eq = rest.find('=')?;
            let name = rest[..eq].trim().trim_start_matches(',').trim();
            let after = rest[eq + 1..].trim_start();
            let body = after.strip_prefix('"')?;
            let end = closing_quote(body)?;
            if name == key {
                return Some(&body[..end]);
            }
            rest = &body[end + 1..];
        }
        None
    }
}

/// The index of the first unescaped `"`.
fn closing_quote(s: &str) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            '"' if !escaped => return Some(i),
            _ => escaped = false,
        }
    }
    None
}

/// Every readable sample line; comments and lines without a number are skipped.
pub fn prometheus_samples(text: &str) -> impl Iterator<Item = PromSample<'_>> {
    text.lines().filter_map(|line| {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        let i = line.find(['{', ' '])?;
        let (name, rest) = (&line[..i], &line[i..]);
        let (labels, rest) = if let Some(inner) = rest.strip_prefix('{') {
            let j = inner.rfind('}')?;
            (&inner[..j], &inner[j + 1..])
        } else {
            ("", rest)
        };
        let value = rest.split_whitespace().next()?.parse::<f64>().ok()?;
        Some(PromSample {
            name,
            labels,
            value,
        })
    })
}

fn first_of(m: &BTreeMap<String, f64>, names: &[&str]) -> Option<f64> {
    names.iter().find_map(|n| m.get(*n).copied())
}

/// A background scraper; `finish` stops it and returns what it saw.
#[derive(Debug)]
pub struct Scraper {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<ServerTelemetry>,
}

impl Scraper {
    /// Start scraping `target`'s `/metrics` every `every`. A server without `/metrics` costs one
    /// failed request per interval and yields empty telemetry.
    pub fn start(target: Target, clock: RunClock, every: Duration) -> Self {
        Self::reporting(target, clock, every, None)
    }

    /// [`Scraper::start`], each sample also shown live.
    pub(crate) fn reporting(
        target: Target,
        clock: RunClock,
        every: Duration,
        live: Option<std::sync::Arc<crate::progress::Live>>,
    ) -> Self {
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut t = ServerTelemetry::default();
            let mut first: Option<BTreeMap<String, f64>> = None;
            let mut last: Option<BTreeMap<String, f64>> = None;
            let mut ticker = tokio::time::interval(every);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                // A stop still takes one last scrape, so counters cover the whole run.
                let last_round = tokio::select! {
                    _ = stopped.wait_for(|s| *s) => true,
                    _ = ticker.tick() => false,
                };
                // A server that has never answered `/metrics` gets no last scrape, and a stop
                // cuts its scrape in flight short: it must not hold the run's end by a timeout.
                let answered = first.is_some();
                if last_round && !answered {
                    break;
                }
                let scrape =
                    crate::probe::get_text(&target, "/metrics", every.max(Duration::from_secs(2)));
                let scraped = if answered || last_round {
                    Some(scrape.await)
                } else {
                    tokio::select! {
                        r = scrape => Some(r),
                        _ = stopped.wait_for(|s| *s) => None,
                    }
                };
                let Some(scraped) = scraped else { break };
                match scraped {
                    Ok(text) => {
                        let m = parse_prometheus(&text);
                        t.samples.push(TelemetrySample {
                            t: clock.now_ns(),
                            running: first_of(&m, RUNNING),
                            waiting: first_of(&m, WAITING),
                            kv_usage: first_of(&m, KV_USAGE),
                            preemptions: first_of(&m, PREEMPTIONS),
                        });
                        if let (Some(l), Some(s)) = (&live, t.samples.last()) {
                            l.scraped(s);
                        }
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
        let _ = self.stop.send(true);
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

    #[test]
    fn labels_are_read_by_name() {
        let text = "DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-x\",note=\"a \\\"q\\\" b\",modelName=\"H100\"} 87\n";
        let s: Vec<_> = prometheus_samples(text).collect();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].name, "DCGM_FI_DEV_GPU_UTIL");
        assert_eq!(s[0].value, 87.0);
        assert_eq!(s[0].label("gpu"), Some("1"));
        assert_eq!(s[0].label("modelName"), Some("H100"));
        assert_eq!(s[0].label("UUID"), Some("GPU-x"));
        assert_eq!(s[0].label("absent"), None);
    }
}
