//! The figures the rules read, per group (row or sweep point): measured percentiles averaged
//! over repeats, the workload as planned and as measured, and what the target says about itself.

use serde::Serialize;
use servebench_metrics::result::{PlanSection, RunMetadata, ServerTelemetry};
use servebench_metrics::{MetricSummary, RunSummary};

use crate::view::{GroupView, RunView};

/// Mean and percentiles of one latency metric, ms, averaged over a group's runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Stat {
    /// Mean.
    pub mean: Option<f64>,
    /// Median.
    pub p50: Option<f64>,
    /// 90th percentile.
    pub p90: Option<f64>,
    /// 95th percentile.
    pub p95: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
    /// Samples behind each run's figures, summed over runs.
    pub n: u64,
}

impl Stat {
    fn of(runs: &[&MetricSummary]) -> Stat {
        let avg = |f: &dyn Fn(&MetricSummary) -> Option<f64>| mean_of(runs.iter().map(|m| f(m)));
        let pct = |p: f64| avg(&|m: &MetricSummary| m.percentile(p).map(|s| s.value));
        Stat {
            mean: avg(&|m: &MetricSummary| m.mean),
            p50: avg(&|m: &MetricSummary| m.median),
            p90: pct(90.0),
            p95: pct(95.0),
            p99: pct(99.0),
            n: runs.iter().map(|m| m.n).sum(),
        }
    }
}

fn mean_of(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let v: Vec<f64> = values.flatten().filter(|x| x.is_finite()).collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// What the target says about itself (the simulator's configuration, server counters).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TargetFacts {
    /// The target is servebench's simulated engine.
    pub simulated: bool,
    /// GPU id, when the target tells.
    pub gpu: Option<String>,
    /// Model id, when the target tells.
    pub model: Option<String>,
    /// The scheduler's sequence limit.
    pub max_num_seqs: Option<u64>,
    /// The step token budget (prefill chunk).
    pub max_num_batched_tokens: Option<u64>,
    /// KV-cache capacity in tokens ("GPU KV cache size").
    pub kv_cache_tokens: Option<u64>,
    /// Tokens per KV block.
    pub block_size: Option<u64>,
    /// Whether prefix caching is on.
    pub prefix_caching: Option<bool>,
    /// `gpu_memory_utilization`.
    pub gpu_memory_utilization: Option<f64>,
    /// The server's version string.
    pub server_version: Option<String>,
}

impl TargetFacts {
    /// Reads `metadata.target`.
    pub fn from_metadata(metadata: &RunMetadata) -> TargetFacts {
        let target = &metadata.target;
        let Some(cfg) = &target.sim_config else {
            return TargetFacts {
                simulated: target.kind == "simulator",
                server_version: target.server_version_text().map(str::to_owned),
                ..TargetFacts::default()
            };
        };
        TargetFacts {
            simulated: target.kind == "simulator",
            gpu: cfg.gpu.clone(),
            model: cfg.model.clone(),
            max_num_seqs: cfg.max_num_seqs,
            max_num_batched_tokens: cfg.max_num_batched_tokens,
            kv_cache_tokens: cfg.kv_cache_tokens(),
            block_size: cfg.block_size,
            prefix_caching: cfg.enable_prefix_caching,
            gpu_memory_utilization: cfg.gpu_memory_utilization,
            server_version: target.server_version_text().map(str::to_owned),
        }
    }
}

/// What the server's own counters and gauges said during a group's runs (a result's
/// `server_telemetry`: counter increases summed over runs, gauge maxima over runs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ServerCounters {
    /// `vllm:num_preemptions_total` increase.
    pub preemptions: Option<f64>,
    /// `vllm:prefix_cache_hits_total` increase, tokens.
    pub prefix_cache_hits: Option<f64>,
    /// `vllm:prefix_cache_queries_total` increase, tokens.
    pub prefix_cache_queries: Option<f64>,
    /// Largest KV-cache use seen, 0–1.
    pub max_kv_usage: Option<f64>,
    /// Largest waiting queue seen.
    pub max_waiting: Option<f64>,
}

impl ServerCounters {
    /// Sums and maxima over the runs' telemetry.
    pub fn from_telemetry<'a>(
        telemetry: impl Iterator<Item = Option<&'a ServerTelemetry>>,
    ) -> Self {
        let mut out = ServerCounters::default();
        let add = |slot: &mut Option<f64>, v: Option<f64>| {
            if let Some(v) = v.filter(|v| v.is_finite()) {
                *slot = Some(slot.unwrap_or(0.0) + v);
            }
        };
        let max = |slot: &mut Option<f64>, v: Option<f64>| {
            if let Some(v) = v.filter(|v| v.is_finite()) {
                *slot = Some(slot.map_or(v, |s| s.max(v)));
            }
        };
        for t in telemetry.flatten() {
            add(
                &mut out.preemptions,
                t.increase("vllm:num_preemptions_total"),
            );
            add(
                &mut out.prefix_cache_hits,
                t.increase("vllm:prefix_cache_hits_total"),
            );
            add(
                &mut out.prefix_cache_queries,
                t.increase("vllm:prefix_cache_queries_total"),
            );
            max(&mut out.max_kv_usage, t.max_kv_usage);
            max(&mut out.max_waiting, t.max_waiting);
        }
        out
    }
}

/// The workload a run was planned with, read from its result's `plan`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PlannedWorkload {
    /// Offered request rate; `f64::INFINITY` when unlimited.
    pub request_rate: Option<f64>,
    /// Client-side concurrency cap.
    pub max_concurrency: Option<u64>,
    /// Prompt tokens every request shares (a warm prefix); 0 when none or when each request
    /// gets its own prefix.
    pub shared_prefix_tokens: u64,
}

impl PlannedWorkload {
    /// Reads a result's `plan`.
    pub fn from_plan(plan: Option<&PlanSection>) -> PlannedWorkload {
        let Some(plan) = plan else {
            return PlannedWorkload::default();
        };
        PlannedWorkload {
            request_rate: plan.request_rate.per_second(),
            max_concurrency: plan.max_concurrency,
            shared_prefix_tokens: plan.shared_prefix_tokens(),
        }
    }
}

/// Everything the rules read about one group, averaged over its runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowFigures {
    /// Group id (`A`, `D@8`).
    pub id: String,
    /// Group label for prose.
    pub label: String,
    /// The swept variable's value, for a sweep point.
    pub load: Option<f64>,
    /// Runs averaged.
    pub runs: usize,
    /// Completed requests over all runs.
    pub completed: u64,
    /// Failed requests over all runs.
    pub failed: u64,
    /// Mean prompt tokens per completed request.
    pub mean_input_tokens: f64,
    /// Mean output tokens per completed request.
    pub mean_output_tokens: f64,
    /// Mean prefix-cached prompt tokens per completed request, when the server reported them.
    pub mean_cached_tokens: Option<f64>,
    /// Mean requests in flight (Little's law: completed requests per second × mean E2EL).
    pub concurrency: f64,
    /// Most requests in flight at once (largest over runs).
    pub peak_concurrency: u64,
    /// Output tokens per second.
    pub output_throughput: f64,
    /// Completed requests per second.
    pub request_throughput: f64,
    /// Output tokens per second of requests that met the run's `--goodput` SLOs, when given.
    pub goodput_tokens_per_s: Option<f64>,
    /// Time to first token.
    pub ttft: Stat,
    /// Time per output token.
    pub tpot: Stat,
    /// Inter-token latency.
    pub itl: Stat,
    /// End-to-end latency.
    pub e2el: Stat,
    /// Client-side queue time.
    pub queue: Stat,
    /// Largest inter-token gap of any request, ms.
    pub longest_stall_ms: Option<f64>,
    /// Stalls summed over runs.
    pub total_stalls: u64,
    /// The workload as planned (first run).
    pub planned: PlannedWorkload,
    /// The target's facts (first run).
    pub target: TargetFacts,
    /// The server's counters over the runs.
    pub server: ServerCounters,
}

impl RowFigures {
    /// The figures of a group; `None` when no run completed a request.
    pub fn from_group(group: &GroupView<'_>) -> Option<RowFigures> {
        let mut f = RowFigures::from_runs(&group.runs)?;
        f.id = group.id.clone();
        f.label = group.label.clone();
        f.load = group.load;
        Some(f)
    }

    /// The figures of one run's summary alone (no plan, no target facts): what a report can
    /// compute from a bare [`RunSummary`].
    pub fn from_summary(id: &str, summary: &RunSummary) -> Option<RowFigures> {
        let metadata = RunMetadata::default();
        let run = RunView {
            path: "",
            summary,
            records: &[],
            metadata: &metadata,
            plan: None,
            telemetry: None,
        };
        let mut f = RowFigures::from_runs(&[run])?;
        f.id = id.to_owned();
        f.label = id.to_owned();
        Some(f)
    }

    fn from_runs(runs: &[RunView<'_>]) -> Option<RowFigures> {
        let first = runs.first()?;
        let completed: u64 = runs.iter().map(|r| r.summary.completed).sum();
        if completed == 0 {
            return None;
        }
        let sums: Vec<&RunSummary> = runs.iter().map(|r| r.summary).collect();
        let total = |f: fn(&RunSummary) -> u64| sums.iter().map(|s| f(s)).sum::<u64>() as f64;
        let avg = |f: fn(&RunSummary) -> f64| mean_of(sums.iter().map(|s| Some(f(s))));
        let stat = |f: fn(&RunSummary) -> &MetricSummary| {
            Stat::of(&sums.iter().map(|s| f(s)).collect::<Vec<_>>())
        };
        let cached: Vec<u64> = sums.iter().filter_map(|s| s.total_cached_tokens).collect();
        let e2el = stat(|s| &s.e2el);
        let request_throughput = avg(|s| s.request_throughput).unwrap_or(0.0);
        Some(RowFigures {
            id: String::new(),
            label: String::new(),
            load: None,
            runs: runs.len(),
            completed,
            failed: sums.iter().map(|s| s.failed).sum(),
            mean_input_tokens: total(|s| s.total_input_tokens) / completed as f64,
            mean_output_tokens: total(|s| s.total_output_tokens) / completed as f64,
            mean_cached_tokens: (!cached.is_empty())
                .then(|| cached.iter().sum::<u64>() as f64 / completed as f64),
            concurrency: request_throughput * e2el.mean.unwrap_or(0.0) / 1e3,
            peak_concurrency: sums.iter().map(|s| s.peak_concurrency).max().unwrap_or(0),
            output_throughput: avg(|s| s.output_throughput).unwrap_or(0.0),
            request_throughput,
            goodput_tokens_per_s: mean_of(
                sums.iter()
                    .map(|s| s.goodput.as_ref().map(|g| g.output_tokens_per_s)),
            ),
            ttft: stat(|s| &s.ttft),
            tpot: stat(|s| &s.tpot),
            itl: stat(|s| &s.itl),
            e2el,
            queue: stat(|s| &s.queue),
            longest_stall_ms: sums
                .iter()
                .filter_map(|s| s.longest_stall_ms)
                .max_by(f64::total_cmp),
            total_stalls: sums.iter().map(|s| s.total_stalls).sum(),
            planned: PlannedWorkload::from_plan(first.plan),
            target: TargetFacts::from_metadata(first.metadata),
            server: ServerCounters::from_telemetry(runs.iter().map(|r| r.telemetry)),
        })
    }

    /// Tokens of context a decode step of this workload reads on average: the prompt plus
    /// half the output.
    pub fn mean_decode_context(&self) -> f64 {
        self.mean_input_tokens + self.mean_output_tokens / 2.0
    }

    /// Mean requests decoding at once: the requests in flight times the share of their
    /// latency spent after the first token (the rest wait or prefill).
    pub fn decoding_concurrency(&self) -> f64 {
        match (self.ttft.mean, self.e2el.mean) {
            (Some(t), Some(e)) if e > 0.0 => self.concurrency * (1.0 - t / e).clamp(0.0, 1.0),
            _ => self.concurrency,
        }
    }

    /// One request at a time: a concurrency cap of 1, or at most 1.2 requests in flight on
    /// average.
    pub fn is_single_stream(&self) -> bool {
        self.planned.max_concurrency == Some(1) || self.concurrency <= SINGLE_STREAM_CONCURRENCY
    }

    /// Same prompt and output lengths within 25 %: rows whose latencies may be compared.
    pub fn same_workload(&self, other: &RowFigures) -> bool {
        let close = |a: f64, b: f64| (a - b).abs() <= 0.25 * a.max(b);
        close(self.mean_input_tokens, other.mean_input_tokens)
            && close(self.mean_output_tokens, other.mean_output_tokens)
    }
}

/// Mean requests in flight up to which a group counts as single-stream.
pub const SINGLE_STREAM_CONCURRENCY: f64 = 1.2;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plan(v: serde_json::Value) -> PlanSection {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn plan_reads_rate_strings_and_prefix_modes() {
        let p =
            plan(json!({"request_rate": "inf", "max_concurrency": 8, "random_prefix_len": 512}));
        let w = PlannedWorkload::from_plan(Some(&p));
        assert!(w.request_rate.unwrap().is_infinite());
        assert_eq!(w.max_concurrency, Some(8));
        assert_eq!(w.shared_prefix_tokens, 512);
        let p = plan(
            json!({"request_rate": "inf", "max_concurrency": 8, "random_prefix_len": 512,
                            "random_prefix_mode": "per-request"}),
        );
        assert_eq!(PlannedWorkload::from_plan(Some(&p)).shared_prefix_tokens, 0);
        let p = plan(
            json!({"request_rate": "2.5", "random_prefix_len": 64, "random_prefix_mode": "per_request"}),
        );
        let w = PlannedWorkload::from_plan(Some(&p));
        assert_eq!((w.request_rate, w.shared_prefix_tokens), (Some(2.5), 0));
        let w = PlannedWorkload::from_plan(Some(&plan(json!({"request_rate": 4}))));
        assert_eq!(w.request_rate, Some(4.0));
    }

    #[test]
    fn target_facts_come_from_the_simulator_config() {
        let meta: RunMetadata = serde_json::from_value(json!({
            "target": {"kind": "simulator", "sim_config": {
                "gpu": "h100", "model": "llama-3.1-8b", "max_num_seqs": 8,
                "max_num_batched_tokens": 8192, "kv_capacity": {"tokens": 90000},
                "enable_prefix_caching": false, "version": "0.1.0-sim"}}
        }))
        .unwrap();
        let t = TargetFacts::from_metadata(&meta);
        assert!(t.simulated);
        assert_eq!(t.gpu.as_deref(), Some("h100"));
        assert_eq!(t.max_num_seqs, Some(8));
        assert_eq!(t.kv_cache_tokens, Some(90_000));
        assert_eq!(t.prefix_caching, Some(false));
        assert_eq!(t.server_version.as_deref(), Some("0.1.0-sim"));
        assert_eq!(
            TargetFacts::from_metadata(&RunMetadata::default()),
            TargetFacts::default()
        );
    }

    #[test]
    fn server_counters_sum_increases_and_keep_gauge_maxima() {
        let a: ServerTelemetry = serde_json::from_value(
            json!({"counter_increase": {"vllm:num_preemptions_total": 3.0,
                       "vllm:prefix_cache_hits_total": 100.0}, "max_kv_usage": 0.5}),
        )
        .unwrap();
        let b: ServerTelemetry = serde_json::from_value(
            json!({"counter_increase": {"vllm:num_preemptions_total": 2.0},
                       "max_kv_usage": 0.97, "max_waiting": 4.0}),
        )
        .unwrap();
        let c = ServerCounters::from_telemetry([Some(&a), None, Some(&b)].into_iter());
        assert_eq!(c.preemptions, Some(5.0));
        assert_eq!(c.prefix_cache_hits, Some(100.0));
        assert_eq!(c.prefix_cache_queries, None);
        assert_eq!(c.max_kv_usage, Some(0.97));
        assert_eq!(c.max_waiting, Some(4.0));
    }
}
