//! Prometheus text exposition (format 0.0.4) of the engine's metrics, written the way Python's
//! `prometheus_client` writes vLLM's (docs/simulator.md §6): counter HELP/TYPE lines use the
//! `_total` name, labels are sorted by name, numbers use Python's float spelling, histograms
//! list cumulative `_bucket{le}` lines, then `_count`, then `_sum`.

use std::fmt::Write as _;

use crate::engine::{EngineMetrics, Histogram};
use crate::faults::FaultKind;

/// Static labels of `vllm:cache_config_info`.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheConfigInfo {
    /// Tokens per KV block.
    pub block_size: u32,
    /// `--gpu-memory-utilization`.
    pub gpu_memory_utilization: f64,
    /// KV blocks, the null block included.
    pub num_gpu_blocks: u32,
    /// Whether prefix caching is on (`True`/`False`, as Python prints it).
    pub enable_prefix_caching: bool,
    /// KV-cache dtype (`auto`, `fp8`).
    pub cache_dtype: String,
}

/// State kept by the real-time driver rather than the engine core.
#[derive(Debug, Clone, PartialEq)]
pub struct DriverMetrics {
    /// Lateness of the most recent step end, in seconds.
    pub engine_lag_seconds: f64,
    /// Times the timeline was re-anchored after falling more than `--max-lag-ms` behind.
    pub engine_reanchors_total: u64,
    /// Lateness of every step end, in seconds.
    pub step_lateness: Histogram,
}

/// Buckets of `sim:step_lateness_seconds`: fine below a few ms, where a healthy driver sits.
pub const LATENESS_BUCKETS: [f64; 18] = [
    0.00005, 0.0001, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005,
    0.0075, 0.01, 0.015, 0.02, 0.05, 0.1,
];

impl Default for DriverMetrics {
    fn default() -> Self {
        DriverMetrics {
            engine_lag_seconds: 0.0,
            engine_reanchors_total: 0,
            step_lateness: Histogram::new(LATENESS_BUCKETS.to_vec()),
        }
    }
}

/// Everything one `/metrics` response shows.
#[derive(Debug, Clone, Copy)]
pub struct MetricsView<'a> {
    /// The served model name (`model_name` label).
    pub model_name: &'a str,
    /// The engine core's metrics.
    pub engine: &'a EngineMetrics,
    /// The real-time driver's metrics.
    pub driver: &'a DriverMetrics,
    /// Labels of `vllm:cache_config_info`.
    pub cache: &'a CacheConfigInfo,
    /// Injected faults per kind, in [`FaultKind::ALL`] order.
    pub faults: [u64; 4],
    /// Also write vLLM's deprecated aliases.
    pub compat: bool,
}

/// Formats a float as Python's `repr` does (what `prometheus_client` prints): `1.0`, `0.001`,
/// `1e-05`, `1.5e+16`, `+Inf`, `NaN`.
pub fn python_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    let a = v.abs();
    if a == 0.0 || (1e-4..1e16).contains(&a) {
        let s = format!("{v}");
        if s.contains('.') {
            s
        } else {
            s + ".0"
        }
    } else {
        // Rust writes `1e-5` / `1.5e16`; Python writes `1e-05` / `1.5e+16`.
        let s = format!("{v:e}");
        match s.split_once('e') {
            Some((mantissa, exp)) => {
                let (sign, digits) = match exp.strip_prefix('-') {
                    Some(d) => ('-', d),
                    None => ('+', exp),
                };
                format!("{mantissa}e{sign}{digits:0>2}")
            }
            None => s,
        }
    }
}

/// Escapes a label value as the exposition format requires.
fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Writes series with a fixed base label set; extra labels are merged in sorted order.
struct Encoder {
    out: String,
    base: Vec<(&'static str, String)>,
}

impl Encoder {
    fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, extra: &[(&str, &str)], value: f64) {
        let mut labels: Vec<(&str, &str)> =
            self.base.iter().map(|(k, v)| (*k, v.as_str())).collect();
        labels.extend_from_slice(extra);
        labels.sort_by(|a, b| a.0.cmp(b.0));
        self.out.push_str(name);
        self.out.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            let _ = write!(self.out, "{k}=\"{}\"", escape_label(v));
        }
        self.out.push_str("} ");
        self.out.push_str(&python_float(value));
        self.out.push('\n');
    }

    fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.header(name, "gauge", help);
        self.sample(name, &[], value);
    }

    /// `name` ends in `_total`, as the HELP/TYPE lines of Python's 0.0.4 output do.
    fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.header(name, "counter", help);
        self.sample(name, &[], value as f64);
    }

    fn histogram(&mut self, name: &str, help: &str, h: &Histogram) {
        self.header(name, "histogram", help);
        let bucket = format!("{name}_bucket");
        let mut acc = 0u64;
        for (i, bound) in h.bounds.iter().enumerate() {
            acc += h.counts.get(i).copied().unwrap_or(0);
            let le = python_float(*bound);
            self.sample(&bucket, &[("le", &le)], acc as f64);
        }
        self.sample(&bucket, &[("le", "+Inf")], h.count as f64);
        self.sample(&format!("{name}_count"), &[], h.count as f64);
        self.sample(&format!("{name}_sum"), &[], h.sum);
    }
}

/// Renders the whole `/metrics` page.
pub fn encode(view: &MetricsView<'_>) -> String {
    encode_labelled(view, "0", &[])
}

/// [`encode`] for one engine of a fleet: its `engine` label and extra labels on every series.
pub fn encode_labelled(
    view: &MetricsView<'_>,
    engine: &str,
    extra: &[(&'static str, String)],
) -> String {
    let m = view.engine;
    let mut base = vec![
        ("engine", engine.to_string()),
        ("model_name", view.model_name.to_string()),
    ];
    base.extend_from_slice(extra);
    let mut e = Encoder {
        out: String::with_capacity(32 * 1024),
        base,
    };

    e.gauge(
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        m.num_requests_running as f64,
    );
    e.gauge(
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        m.num_requests_waiting as f64,
    );
    e.gauge(
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        m.kv_cache_usage_perc,
    );
    e.counter(
        "vllm:prefix_cache_queries_total",
        "Prefix cache queries, in terms of number of queried tokens.",
        m.prefix_cache_queries_total,
    );
    e.counter(
        "vllm:prefix_cache_hits_total",
        "Prefix cache hits, in terms of number of cached tokens.",
        m.prefix_cache_hits_total,
    );
    e.counter(
        "vllm:num_preemptions_total",
        "Cumulative number of preemption from the engine.",
        m.num_preemptions_total,
    );
    e.counter(
        "vllm:prompt_tokens_total",
        "Number of prefill tokens processed.",
        m.prompt_tokens_total,
    );
    e.counter(
        "vllm:generation_tokens_total",
        "Number of generation tokens processed.",
        m.generation_tokens_total,
    );
    e.header(
        "vllm:request_success_total",
        "counter",
        "Count of successfully processed requests.",
    );
    for (reason, v) in [
        ("stop", m.request_success_stop),
        ("length", m.request_success_length),
        ("abort", m.request_success_abort),
    ] {
        e.sample(
            "vllm:request_success_total",
            &[("finished_reason", reason)],
            v as f64,
        );
    }
    e.histogram(
        "vllm:iteration_tokens_total",
        "Histogram of number of tokens per engine_step.",
        &m.iteration_tokens,
    );
    e.histogram(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        &m.time_to_first_token,
    );
    e.histogram(
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        &m.inter_token_latency,
    );
    e.histogram(
        "vllm:request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
        &m.request_time_per_output_token,
    );
    e.histogram(
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        &m.e2e_request_latency,
    );
    e.histogram(
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        &m.request_queue_time,
    );
    e.histogram(
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        &m.request_prefill_time,
    );
    e.histogram(
        "vllm:request_decode_time_seconds",
        "Histogram of time spent in DECODE phase for request.",
        &m.request_decode_time,
    );
    e.histogram(
        "vllm:request_inference_time_seconds",
        "Histogram of time spent in RUNNING phase for request.",
        &m.request_inference_time,
    );
    e.histogram(
        "vllm:request_prompt_tokens",
        "Number of prefill tokens processed.",
        &m.request_prompt_tokens,
    );
    e.histogram(
        "vllm:request_generation_tokens",
        "Number of generation tokens processed.",
        &m.request_generation_tokens,
    );
    e.histogram(
        "vllm:request_max_num_generation_tokens",
        "Histogram of maximum number of requested generation tokens.",
        &m.request_max_num_generation_tokens,
    );
    e.histogram(
        "vllm:request_params_max_tokens",
        "Histogram of the max_tokens request parameter.",
        &m.request_params_max_tokens,
    );
    e.histogram(
        "vllm:request_params_n",
        "Histogram of the n request parameter.",
        &m.request_params_n,
    );

    let c = view.cache;
    e.header(
        "vllm:cache_config_info",
        "gauge",
        "Information of the LLMEngine CacheConfig",
    );
    let block_size = c.block_size.to_string();
    let gmu = python_float(c.gpu_memory_utilization);
    let blocks = c.num_gpu_blocks.to_string();
    let prefix = if c.enable_prefix_caching {
        "True"
    } else {
        "False"
    };
    e.sample(
        "vllm:cache_config_info",
        &[
            ("block_size", &block_size),
            ("cache_dtype", &c.cache_dtype),
            ("enable_prefix_caching", prefix),
            ("gpu_memory_utilization", &gmu),
            ("num_gpu_blocks", &blocks),
        ],
        1.0,
    );

    if view.compat {
        e.gauge(
            "vllm:gpu_cache_usage_perc",
            "GPU KV-cache usage. 1 means 100 percent usage (deprecated alias of vllm:kv_cache_usage_perc).",
            m.kv_cache_usage_perc,
        );
        e.counter(
            "vllm:gpu_prefix_cache_queries_total",
            "GPU prefix cache queries, in terms of number of queried tokens (deprecated alias).",
            m.prefix_cache_queries_total,
        );
        e.counter(
            "vllm:gpu_prefix_cache_hits_total",
            "GPU prefix cache hits, in terms of number of cached tokens (deprecated alias).",
            m.prefix_cache_hits_total,
        );
        e.histogram(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds (deprecated alias of vllm:inter_token_latency_seconds).",
            &m.inter_token_latency,
        );
    }

    let d = view.driver;
    e.histogram(
        "sim:step_duration_seconds",
        "Duration of each simulated engine step.",
        &m.step_duration,
    );
    e.histogram(
        "sim:inter_token_latency_fine_seconds",
        "Inter-token latency with buckets fine enough for single-digit milliseconds.",
        &m.inter_token_latency_fine,
    );
    e.histogram(
        "sim:step_scheduled_tokens",
        "Tokens scheduled per engine step.",
        &m.step_scheduled_tokens,
    );
    if let Some(s) = &m.spec_decode {
        // vLLM's SpecDecodingProm (vllm/v1/spec_decode/metrics.py), only with speculation.
        e.counter(
            "vllm:spec_decode_num_drafts_total",
            "Number of spec decoding drafts.",
            s.num_drafts,
        );
        e.counter(
            "vllm:spec_decode_num_draft_tokens_total",
            "Number of draft tokens.",
            s.num_draft_tokens,
        );
        e.counter(
            "vllm:spec_decode_num_accepted_tokens_total",
            "Number of accepted tokens.",
            s.num_accepted_tokens,
        );
        e.header(
            "vllm:spec_decode_num_accepted_tokens_per_pos_total",
            "counter",
            "Accepted tokens per draft position.",
        );
        for (pos, &n) in s.num_accepted_tokens_per_pos.iter().enumerate() {
            let pos = pos.to_string();
            e.sample(
                "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                &[("position", &pos)],
                n as f64,
            );
        }
    }
    e.counter("sim:steps_total", "Engine steps executed.", m.steps_total);
    e.gauge(
        "sim:engine_lag_seconds",
        "How far the last step end was behind its intended time.",
        d.engine_lag_seconds,
    );
    e.histogram(
        "sim:step_lateness_seconds",
        "How far each step end was behind its intended time.",
        &d.step_lateness,
    );
    e.counter(
        "sim:engine_reanchors_total",
        "Times the engine timeline was re-anchored after falling behind by more than --max-lag-ms.",
        d.engine_reanchors_total,
    );
    e.counter(
        "sim:preempted_prefix_queries_total",
        "Prefix cache queries of preempted requests, in tokens.",
        m.preempted_prefix_queries_total,
    );
    e.counter(
        "sim:preempted_prefix_hits_total",
        "Prefix cache hits of preempted requests, in tokens.",
        m.preempted_prefix_hits_total,
    );
    e.header(
        "sim:faults_injected_total",
        "counter",
        "Faults injected by the simulator, by kind.",
    );
    for (kind, v) in FaultKind::ALL.iter().zip(view.faults) {
        e.sample(
            "sim:faults_injected_total",
            &[("kind", kind.as_str())],
            v as f64,
        );
    }
    e.out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn render(compat: bool, engine: &EngineMetrics) -> String {
        let driver = DriverMetrics::default();
        let cache = CacheConfigInfo {
            block_size: 16,
            gpu_memory_utilization: 0.9,
            num_gpu_blocks: 27978,
            enable_prefix_caching: true,
            cache_dtype: "auto".into(),
        };
        encode(&MetricsView {
            model_name: "llama \"8b\"",
            engine,
            driver: &driver,
            cache: &cache,
            faults: [1, 2, 3, 4],
            compat,
        })
    }

    #[test]
    fn floats_are_spelled_as_python_does() {
        assert_eq!(python_float(0.0), "0.0");
        assert_eq!(python_float(1.0), "1.0");
        assert_eq!(python_float(2560.0), "2560.0");
        assert_eq!(python_float(0.001), "0.001");
        assert_eq!(python_float(0.0005), "0.0005");
        assert_eq!(python_float(0.00005), "5e-05");
        assert_eq!(python_float(1e16), "1e+16");
        assert_eq!(python_float(-2.5), "-2.5");
        assert_eq!(python_float(f64::INFINITY), "+Inf");
        assert_eq!(python_float(f64::NAN), "NaN");
    }

    #[test]
    fn series_carry_sorted_labels_and_counter_total_headers() {
        let mut m = EngineMetrics::new(1024);
        m.num_requests_running = 3;
        m.prompt_tokens_total = 120;
        m.request_success_length = 2;
        let text = render(false, &m);
        assert!(text.contains(
            "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n\
             # TYPE vllm:prompt_tokens_total counter\n\
             vllm:prompt_tokens_total{engine=\"0\",model_name=\"llama \\\"8b\\\"\"} 120.0\n"
        ));
        assert!(text.contains(
            "vllm:num_requests_running{engine=\"0\",model_name=\"llama \\\"8b\\\"\"} 3.0\n"
        ));
        assert!(text.contains(
            "vllm:request_success_total{engine=\"0\",finished_reason=\"length\",model_name=\"llama \\\"8b\\\"\"} 2.0\n"
        ));
        assert!(text.contains("vllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\",enable_prefix_caching=\"True\",engine=\"0\",gpu_memory_utilization=\"0.9\",model_name=\"llama \\\"8b\\\"\",num_gpu_blocks=\"27978\"} 1.0\n"));
        assert!(text.contains("sim:faults_injected_total{engine=\"0\",kind=\"malformed\",model_name=\"llama \\\"8b\\\"\"} 4.0\n"));
        assert!(!text.contains("vllm:gpu_cache_usage_perc"));
        // Every sample line belongs to a family announced by a TYPE line.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split('{').next().unwrap();
            let family = name
                .strip_suffix("_bucket")
                .or_else(|| name.strip_suffix("_count"))
                .or_else(|| name.strip_suffix("_sum"))
                .unwrap_or(name);
            assert!(
                text.contains(&format!("# TYPE {family} "))
                    || text.contains(&format!("# TYPE {name} ")),
                "{line}"
            );
        }
    }

    #[test]
    fn histograms_are_cumulative_then_count_then_sum() {
        let mut m = EngineMetrics::new(1024);
        m.time_to_first_token.observe(0.003);
        m.time_to_first_token.observe(0.05);
        m.time_to_first_token.observe(5000.0);
        let text = render(false, &m);
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("vllm:time_to_first_token_seconds"))
            .collect();
        let value = |needle: &str| -> &str {
            lines
                .iter()
                .find(|l| l.contains(needle))
                .unwrap()
                .rsplit(' ')
                .next()
                .unwrap()
        };
        assert_eq!(value("le=\"0.001\""), "0.0");
        assert_eq!(value("le=\"0.005\""), "1.0");
        assert_eq!(value("le=\"0.06\""), "2.0");
        assert_eq!(value("le=\"2560.0\""), "2.0");
        assert_eq!(value("le=\"+Inf\""), "3.0");
        let n = lines.len();
        assert!(lines[n - 2].starts_with("vllm:time_to_first_token_seconds_count{"));
        assert!(lines[n - 1].starts_with("vllm:time_to_first_token_seconds_sum{"));
        assert_eq!(value("_count{"), "3.0");
        assert_eq!(value("_sum{"), "5000.053");
    }

    #[test]
    fn compat_adds_deprecated_aliases() {
        let mut m = EngineMetrics::new(1024);
        m.kv_cache_usage_perc = 0.25;
        m.prefix_cache_hits_total = 32;
        let text = render(true, &m);
        assert!(text.contains(
            "vllm:gpu_cache_usage_perc{engine=\"0\",model_name=\"llama \\\"8b\\\"\"} 0.25\n"
        ));
        assert!(text.contains(
            "vllm:gpu_prefix_cache_hits_total{engine=\"0\",model_name=\"llama \\\"8b\\\"\"} 32.0\n"
        ));
        assert!(text.contains("# TYPE vllm:time_per_output_token_seconds histogram\n"));
    }
}
