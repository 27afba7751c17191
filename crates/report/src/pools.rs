//! The per-pool block of a run against a simulated fleet.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use servebench_metrics::per_pool::PoolSummary;
use servebench_metrics::summary::MetricSummary;

fn pct(m: &MetricSummary, p: f64) -> String {
    m.percentile(p)
        .map_or_else(|| "-".to_owned(), |s| format!("{:.2}", s.value))
}

/// One line per pool (requests, TTFT p50/p99, TPOT p99, replicas); empty without pools.
pub fn pool_block(pools: &BTreeMap<String, PoolSummary>) -> String {
    if pools.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<12} {:>6} {:>6} {:>13} {:>13} {:>13}  replicas",
        "Pool", "ok", "failed", "TTFT p50 ms", "TTFT p99 ms", "TPOT p99 ms"
    );
    for (name, p) in pools {
        let replicas = p
            .replicas
            .iter()
            .map(|(r, n)| format!("{r}:{n}"))
            .collect::<Vec<_>>()
            .join(" ");
        let limited = if p.rate_limited > 0 {
            format!(" (429: {})", p.rate_limited)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "{:<12} {:>6} {:>6} {:>13} {:>13} {:>13}  {replicas}{limited}",
            name,
            p.completed,
            p.failed,
            pct(&p.ttft, 50.0),
            pct(&p.ttft, 99.0),
            pct(&p.tpot, 99.0),
        );
    }
    out
}
