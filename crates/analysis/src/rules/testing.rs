//! Hand-made figures for the rules' unit tests: a healthy single-stream row to bend into
//! each symptom, a deployment to predict with, and records with chosen arrival and TTFT.

#![allow(clippy::unwrap_used)]

use servebench_metrics::{CountSource, RequestRecord, TokenEvent};
use servebench_roofline::{Catalog, Deployment, Dtype, KvDtype};

use super::context::Ctx;
use super::finding::Finding;
use crate::figures::{PlannedWorkload, RowFigures, ServerCounters, Stat, TargetFacts};

/// A latency statistic with the given p50 and p99 (mean = p50), over `n` samples.
pub fn stat(p50: f64, p99: f64, n: u64) -> Stat {
    Stat {
        mean: Some(p50),
        p50: Some(p50),
        p90: Some(p99),
        p95: Some(p99),
        p99: Some(p99),
        n,
    }
}

/// A healthy row at concurrency 1: 256 prompt and 128 output tokens, 20 ms TTFT, 7 ms TPOT,
/// 100 requests, no server facts.
pub fn row(id: &str) -> RowFigures {
    RowFigures {
        id: id.into(),
        label: id.into(),
        load: None,
        runs: 1,
        completed: 100,
        failed: 0,
        mean_input_tokens: 256.0,
        mean_output_tokens: 128.0,
        mean_cached_tokens: None,
        concurrency: 1.0,
        peak_concurrency: 1,
        output_throughput: 140.0,
        request_throughput: 1.0,
        goodput_tokens_per_s: None,
        ttft: stat(20.0, 30.0, 100),
        tpot: stat(7.0, 8.0, 100),
        itl: stat(7.0, 8.0, 12_700),
        e2el: stat(909.0, 1_000.0, 100),
        queue: Stat::default(),
        longest_stall_ms: None,
        total_stalls: 0,
        planned: PlannedWorkload {
            request_rate: None,
            max_concurrency: Some(1),
            shared_prefix_tokens: 0,
        },
        target: TargetFacts::default(),
        server: ServerCounters::default(),
    }
}

/// The same row at `concurrency` requests in flight (no client cap).
pub fn batched(id: &str, concurrency: f64) -> RowFigures {
    let mut r = row(id);
    r.concurrency = concurrency;
    r.peak_concurrency = concurrency.ceil() as u64;
    r.planned.max_concurrency = None;
    r
}

/// Llama 3.1 8B in BF16 on one H100: docs/simulator.md's reference deployment.
pub fn h100_8b() -> Deployment {
    let c = Catalog::builtin();
    Deployment::new(
        c.gpu("h100").unwrap().clone(),
        c.model("llama-3.1-8b").unwrap().clone(),
        Dtype::Bf16,
        KvDtype::Auto,
        1,
    )
    .unwrap()
}

const MS: u64 = 1_000_000;

/// A completed request that arrived (and was sent) at `arrival_ms` and got its first token
/// `ttft_ms` later, followed by one more token 10 ms after.
pub fn record(id: u64, arrival_ms: u64, ttft_ms: u64) -> RequestRecord {
    let first = (arrival_ms + ttft_ms) * MS;
    let events = vec![
        TokenEvent { t: first, chars: 4 },
        TokenEvent {
            t: first + 10 * MS,
            chars: 4,
        },
    ];
    RequestRecord {
        phases: None,
        images: None,
        id,
        intended: arrival_ms * MS,
        released: arrival_ms * MS,
        sent: arrival_ms * MS,
        started: None,
        bare_events: Vec::new(),
        first_token: Some(first),
        end: Some(first + 10 * MS),
        done: Some(first + 11 * MS),
        waited_for_slot: false,
        events,
        input_tokens: 256,
        input_source: CountSource::Usage,
        output_tokens: 2,
        output_source: CountSource::Usage,
        intended_input_tokens: 256,
        max_tokens: None,
        cached_tokens: None,
        finish_reason: None,
        text: None,
        failure: None,
        resent: 0,
        answer_checked: false,
        output_split: None,
        session_id: None,
        turn: None,
        stamp_clock: None,
        lora: None,
        served_by: None,
    }
}

/// Runs `rule` over `rows` (without records) and an optional deployment.
pub fn run<T>(
    rows: &[RowFigures],
    deployment: Option<&Deployment>,
    rule: impl Fn(&Ctx<'_>) -> T,
) -> T {
    let records: Vec<Vec<&[RequestRecord]>> = rows.iter().map(|_| Vec::new()).collect();
    let ctx = Ctx {
        rows,
        records: &records,
        deployment,
    };
    rule(&ctx)
}

/// The rows the findings concern, one list per finding.
pub fn fired(findings: &[Finding]) -> Vec<Vec<String>> {
    findings.iter().map(|f| f.rows.clone()).collect()
}
