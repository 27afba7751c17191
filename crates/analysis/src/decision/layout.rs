//! Fleet layouts as decision candidates: how many GPUs a simulated fleet occupies (so cost and
//! capacity are per GPU of the whole layout), a short name for the layout, and each pool's
//! latency at a point (from the records' `served_by`).

use serde::Serialize;
use servebench_metrics::per_pool::per_pool;
use servebench_metrics::result::{FleetConfig, RunMetadata};
use servebench_metrics::RequestRecord;

/// The hardware a simulated candidate occupies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Layout {
    /// `chat 3×h100, long 1×h100; prompt_tokens>=4096 -> long`.
    pub description: String,
    /// GPUs of the whole layout: over pools, engines × tensor-parallel size (a prefill/decode
    /// pool counts its prefill and its decode engines).
    pub gpus: u32,
    /// Several engines behind a router (`--replicas`/`--pool`), not one engine.
    pub fleet: bool,
}

/// The layout a run's simulator had; `None` for a run against a server servebench did not
/// simulate (its GPU count is unknown to the result).
pub fn layout_of(meta: &RunMetadata) -> Option<Layout> {
    let cfg = meta.target.sim_config.as_ref()?;
    match cfg.fleet() {
        Some(f) => Some(Layout {
            description: describe(&f),
            gpus: f.gpu_count(),
            fleet: true,
        }),
        None => {
            let tp = cfg.tensor_parallel_size.unwrap_or(1).max(1);
            let gpu = cfg.gpu.as_deref().unwrap_or("gpu");
            Some(Layout {
                description: if tp > 1 {
                    format!("one engine, TP {tp} × {gpu}")
                } else {
                    format!("one engine on 1 × {gpu}")
                },
                gpus: tp,
                fleet: false,
            })
        }
    }
}

fn describe(f: &FleetConfig) -> String {
    let pools: Vec<String> = f
        .pools
        .iter()
        .map(|p| {
            let gpu = p.gpu.as_deref().unwrap_or("gpu");
            let tp = p.tensor_parallel_size.unwrap_or(1).max(1);
            let per = if tp > 1 {
                format!("TP{tp} {gpu}")
            } else {
                gpu.to_owned()
            };
            match (p.prefill_replicas, p.decode_replicas) {
                (Some(pr), Some(d)) => format!("{} {pr}P+{d}D×{per}", p.name),
                _ => format!("{} {}×{per}", p.name, p.engines()),
            }
        })
        .collect();
    let mut text = pools.join(", ");
    if !f.routes.is_empty() {
        text.push_str("; ");
        text.push_str(&f.routes.join("; "));
    }
    text
}

/// One pool's figures at one point, averaged over the point's runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolFigures {
    /// The pool's name.
    pub pool: String,
    /// Requests it completed (summed over runs).
    pub completed: u64,
    /// Requests it failed, rate-limited ones included (summed over runs).
    pub failed: u64,
    /// p99 TTFT, ms.
    pub ttft_p99_ms: Option<f64>,
    /// p99 TPOT, ms.
    pub tpot_p99_ms: Option<f64>,
}

/// Per-pool figures of a point's runs; empty when no record names a pool.
pub fn pool_figures(runs: &[&[RequestRecord]]) -> Vec<PoolFigures> {
    let per_run: Vec<_> = runs.iter().map(|r| per_pool(r, &[99.0])).collect();
    let mut names: Vec<&String> = per_run.iter().flat_map(|m| m.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let pools: Vec<_> = per_run.iter().filter_map(|m| m.get(name)).collect();
            let mean = |f: &dyn Fn(&servebench_metrics::per_pool::PoolSummary) -> Option<f64>| {
                let v: Vec<f64> = pools.iter().filter_map(|p| f(p)).collect();
                (v.len() == pools.len() && !v.is_empty())
                    .then(|| v.iter().sum::<f64>() / v.len() as f64)
            };
            PoolFigures {
                pool: name.clone(),
                completed: pools.iter().map(|p| p.completed).sum(),
                failed: pools.iter().map(|p| p.failed).sum(),
                ttft_p99_ms: mean(&|p| p.ttft.percentile(99.0).map(|s| s.value)),
                tpot_p99_ms: mean(&|p| p.tpot.percentile(99.0).map(|s| s.value)),
            }
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(sim_config: serde_json::Value) -> RunMetadata {
        let mut m = RunMetadata::default();
        m.target.sim_config = Some(serde_json::from_value(sim_config).unwrap());
        m
    }

    #[test]
    fn a_fleet_counts_every_engine_times_its_tensor_parallel_size() {
        let m = meta(json!({"gpu": "h100", "fleet": {
            "gpus": 7,
            "routes": ["prompt_tokens>=4096 -> long"],
            "pools": [
                {"name": "chat", "gpu": "h100", "tensor_parallel_size": 1, "replicas": 3},
                {"name": "long", "gpu": "h100", "tensor_parallel_size": 2, "replicas": 1,
                 "prefill_replicas": 1, "decode_replicas": 1}
            ]
        }}));
        let l = layout_of(&m).unwrap();
        assert!(l.fleet);
        // 3 chat engines × 1 GPU, plus one prefill and one decode engine × 2 GPUs each.
        assert_eq!(l.gpus, 7);
        assert_eq!(
            l.description,
            "chat 3×h100, long 1P+1D×TP2 h100; prompt_tokens>=4096 -> long"
        );
    }

    #[test]
    fn one_engine_occupies_its_tensor_parallel_size() {
        let l = layout_of(&meta(json!({"gpu": "h100", "tensor_parallel_size": 2}))).unwrap();
        assert_eq!((l.gpus, l.fleet), (2, false));
        assert!(layout_of(&RunMetadata::default()).is_none());
    }
}
