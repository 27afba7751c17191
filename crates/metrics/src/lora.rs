//! A run whose requests named LoRA adapters (`--lora-modules`), by adapter: how latency and
//! throughput differ between adapters that share one server.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::record::RequestRecord;
use crate::stats;
use crate::units::{ns_f64_to_ms, ns_to_ms};

/// The requests of one adapter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoraStats {
    /// The adapter's name (the requests' `model`).
    pub adapter: String,
    pub completed: u64,
    pub failed: u64,
    /// Completed requests per second of the whole run.
    pub request_throughput: f64,
    /// Output tokens of completed requests per second of the whole run.
    pub output_throughput: f64,
    /// Latency percentiles of the completed requests, ms.
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub tpot_p50_ms: Option<f64>,
    pub e2el_p50_ms: Option<f64>,
    pub e2el_p99_ms: Option<f64>,
}

/// Figures by adapter over a run of `duration_ns`; empty when no request named one.
pub fn by_lora(records: &[RequestRecord], duration_ns: u64) -> Vec<LoraStats> {
    let mut groups: BTreeMap<&str, Vec<&RequestRecord>> = BTreeMap::new();
    for r in records {
        if let Some(a) = &r.lora {
            groups.entry(a.as_str()).or_default().push(r);
        }
    }
    let secs = (duration_ns as f64 / 1e9).max(f64::MIN_POSITIVE);
    groups
        .into_iter()
        .map(|(adapter, rs)| {
            let ok: Vec<&RequestRecord> = rs.iter().copied().filter(|r| r.is_success()).collect();
            let sorted = |f: &dyn Fn(&RequestRecord) -> Option<f64>| {
                stats::sorted_copy(&ok.iter().filter_map(|r| f(r)).collect::<Vec<f64>>())
            };
            let ttft = sorted(&|r| r.ttft_ns().map(ns_to_ms));
            let tpot = sorted(&|r| r.tpot_ns().map(ns_f64_to_ms));
            let e2el = sorted(&|r| r.e2el_ns().map(ns_to_ms));
            let output: u64 = ok.iter().map(|r| r.output_tokens).sum();
            LoraStats {
                adapter: adapter.to_owned(),
                completed: ok.len() as u64,
                failed: (rs.len() - ok.len()) as u64,
                request_throughput: ok.len() as f64 / secs,
                output_throughput: output as f64 / secs,
                ttft_p50_ms: stats::percentile_sorted(&ttft, 50.0),
                ttft_p99_ms: stats::percentile_sorted(&ttft, 99.0),
                tpot_p50_ms: stats::percentile_sorted(&tpot, 50.0),
                e2el_p50_ms: stats::percentile_sorted(&e2el, 50.0),
                e2el_p99_ms: stats::percentile_sorted(&e2el, 99.0),
            }
        })
        .collect()
}
