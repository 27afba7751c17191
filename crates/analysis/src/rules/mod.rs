//! The diagnosis rules, one per file. Each reads the groups' figures (and, for predictions,
//! the deployment) and returns what it examined and the findings it supports, with the figures
//! that triggered them. Their thresholds live in [`crate::thresholds`].

use std::collections::BTreeSet;

mod batching_trade_off;
mod client_overload;
mod context;
mod decode_speed;
mod finding;
mod kv_exhaustion;
mod prefill_cost;
mod prefix_cache_miss;
mod server_queueing;
mod tail_latency;
mod throughput_below_prediction;
mod wording;

#[cfg(test)]
mod testing;

pub(crate) use context::Ctx;
pub use finding::{Confidence, Finding, Rule, RuleCheck};

/// Runs every rule; findings come in [`Rule::ALL`] order. Client overload comes first: it
/// says the group's figures describe a queue, not the load offered. KV exhaustion and server queueing
/// run first because the rules after them leave the rows they explain alone.
pub(crate) fn run_all(ctx: &Ctx<'_>) -> (Vec<Finding>, Vec<RuleCheck>) {
    let (kv_check, kv_findings, kv_rows) = kv_exhaustion::kv_exhaustion(ctx);
    let (queue_check, queue_findings, queued_rows) =
        server_queueing::server_queueing(ctx, &kv_rows);
    let unhealthy_p50: BTreeSet<usize> = kv_rows.union(&queued_rows).copied().collect();
    let results = [
        client_overload::client_overload(ctx),
        (kv_check, kv_findings),
        (queue_check, queue_findings),
        decode_speed::decode_speed(ctx),
        throughput_below_prediction::throughput_below_prediction(ctx, &kv_rows),
        prefix_cache_miss::prefix_cache_miss(ctx),
        tail_latency::tail_latency(ctx, &unhealthy_p50),
        batching_trade_off::batching_trade_off(ctx),
        prefill_cost::prefill_cost(ctx),
    ];
    let mut findings = Vec::new();
    let mut checks = Vec::new();
    for (mut check, mut f) in results {
        check.findings = f.len();
        findings.append(&mut f);
        checks.push(check);
    }
    (findings, checks)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::testing::{batched, row, run, stat};
    use super::*;

    #[test]
    fn checks_come_in_the_reported_order_and_count_their_findings() {
        let mut d = batched("D", 8.0);
        d.server.preemptions = Some(3.0);
        d.ttft = stat(20.0, 200.0, 100);
        let (findings, checks) = run(&[row("A"), d], None, run_all);
        let order: Vec<Rule> = checks.iter().map(|c| c.rule).collect();
        assert_eq!(order, Rule::ALL);
        assert_eq!(findings[0].rule, Rule::KvExhaustion); // no records: no overload check
                                                          // The tail of a row KV exhaustion explains is left to it.
        assert!(findings.iter().all(|f| f.rule != Rule::TailLatency));
        let total: usize = checks.iter().map(|c| c.findings).sum();
        assert_eq!(total, findings.len());
    }
}
