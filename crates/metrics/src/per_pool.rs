//! Latency per pool of a simulated fleet (records carrying `served_by`): the figures a
//! load-shaping decision compares, e.g. the chats' p99 TTFT on their own pool.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::summary::MetricSummary;
use crate::units::{ns_f64_to_ms, ns_to_ms};
use crate::RequestRecord;

/// One pool's share of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolSummary {
    /// Requests that completed with output.
    pub completed: u64,
    /// Requests that did not (rate-limited ones included).
    pub failed: u64,
    /// Requests the pool's rate limit answered 429.
    pub rate_limited: u64,
    /// Requests per replica label.
    pub replicas: BTreeMap<String, u64>,
    pub ttft: MetricSummary,
    pub tpot: MetricSummary,
    pub e2el: MetricSummary,
}

/// Per-pool summaries, empty when no record names a pool.
pub fn per_pool(records: &[RequestRecord], percentiles: &[f64]) -> BTreeMap<String, PoolSummary> {
    // The pool block always shows p50 and p99, whatever else was asked for.
    let mut ps = percentiles.to_vec();
    for q in [50.0, 99.0] {
        if !ps.contains(&q) {
            ps.push(q);
        }
    }
    ps.sort_by(f64::total_cmp);
    let percentiles = ps.as_slice();
    let mut by_pool: BTreeMap<&str, Vec<&RequestRecord>> = BTreeMap::new();
    for r in records {
        if let Some(s) = &r.served_by {
            by_pool.entry(s.pool.as_str()).or_default().push(r);
        }
    }
    by_pool
        .into_iter()
        .map(|(name, recs)| {
            let ok: Vec<&&RequestRecord> = recs.iter().filter(|r| r.is_success()).collect();
            let mut replicas = BTreeMap::new();
            for r in &recs {
                if let Some(s) = &r.served_by {
                    if !s.replica.is_empty() {
                        *replicas.entry(s.replica.clone()).or_insert(0) += 1;
                    }
                }
            }
            let ms = |f: fn(&RequestRecord) -> Option<u64>| -> Vec<f64> {
                ok.iter().filter_map(|r| f(r)).map(ns_to_ms).collect()
            };
            let summary = PoolSummary {
                completed: ok.len() as u64,
                failed: (recs.len() - ok.len()) as u64,
                rate_limited: recs
                    .iter()
                    .filter(|r| r.failure.as_ref().is_some_and(|f| f.status == Some(429)))
                    .count() as u64,
                replicas,
                ttft: MetricSummary::from_ms(ms(RequestRecord::ttft_ns), percentiles),
                tpot: MetricSummary::from_ms(
                    ok.iter()
                        .filter_map(|r| r.tpot_ns())
                        .map(ns_f64_to_ms)
                        .collect(),
                    percentiles,
                ),
                e2el: MetricSummary::from_ms(ms(RequestRecord::e2el_ns), percentiles),
            };
            (name.to_owned(), summary)
        })
        .collect()
}
