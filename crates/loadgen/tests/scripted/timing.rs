//! TTFT, ITL, E2EL and TPOT of each record against the server's log of the same request.
//!
//! The log holds the instant right after each event was written, as an offset from the
//! request's arrival. So, per request:
//! - measured TTFT − logged first event = the request's trip to the server plus the first
//!   event's trip back (both over loopback), less any delay of the server in reading its
//!   clock after a write (a preempted thread);
//! - each measured ITL − logged gap = the difference of two events' trips back (and of those
//!   delays).
//!
//! Comparing against the log rather than the script keeps the server's own lateness (timer
//! granularity, scheduling) out of the client's error.

use std::time::Duration;

use servebench_testserver::{Outcome, Script, ScriptedServer};
use std::sync::Arc;

use servebench_loadgen::{warm_up, ApiKind, ClientOptions, StopSignal};
use servebench_metrics::{CountSource, RequestRecord};

use crate::common::*;

/// Most requests in flight at once, from the half-open `[sent, end)` intervals.
fn peak_concurrency(records: &[RequestRecord]) -> usize {
    let mut edges: Vec<(u64, i32)> = records
        .iter()
        .flat_map(|r| [(r.sent, 1), (r.end.unwrap_or(r.sent), -1)])
        .collect();
    edges.sort_unstable();
    let (mut now, mut peak) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        peak = peak.max(now);
    }
    peak as usize
}

/// Id of warm-up requests, apart from the measured ones.
const WARM_UP_ID: u64 = 1_000_000;

/// Error bounds of one scenario, in ms.
struct Bounds {
    /// Any single TTFT or ITL error.
    each: f64,
    /// The median TTFT error and the median absolute ITL error.
    median: f64,
}

/// Checks every record against its log entry; returns (TTFT errors, ITL errors) in ms.
fn check(
    records: &[RequestRecord],
    log: &[servebench_testserver::RequestLog],
    script: &Script,
    tokens_of: impl Fn(&RequestRecord) -> u64,
    bounds: &Bounds,
) {
    let delay = script.first_token_delay.as_nanos() as u64;
    let interval = script.inter_token_interval.as_nanos() as u64;
    let mut ttft_err = Vec::new();
    let mut itl_err = Vec::new();
    for (r, entry) in joined(records, log) {
        let tokens = tokens_of(r);
        assert!(r.is_success(), "record {} failed: {:?}", r.id, r.failure);
        assert_eq!(
            entry.request_id.as_deref(),
            Some(servebench_wire::protocol::request_id(r.id).as_str())
        );
        assert_eq!(
            entry.max_tokens, r.max_tokens,
            "request {} correlated by id and max_tokens",
            r.id
        );
        assert_eq!(entry.outcome, Outcome::Completed);
        assert_eq!(r.output_tokens, tokens);
        assert_eq!(r.output_source, CountSource::Usage);
        assert_eq!(r.events.len() as u64, tokens, "one event per token");
        assert_eq!(entry.events_ns.len() as u64, tokens);

        // The server never writes early: pacing is by absolute deadlines from arrival.
        for (k, t) in entry.events_ns.iter().enumerate() {
            assert!(
                *t >= delay + k as u64 * interval,
                "event {k} of request {} written early",
                r.id
            );
        }

        let first = r.first_token.unwrap();
        let end = r.end.unwrap();
        let ttft = first - r.sent;
        let logged_ttft = entry.events_ns[0];
        assert!(ttft >= delay, "TTFT {ttft} ns below the scripted delay");
        // Usually positive (two trips over loopback), but the server's thread can be
        // preempted between a write and reading the clock, which makes its instant late.
        ttft_err.push((ms(ttft) - ms(logged_ttft)).abs());

        // E2EL − TTFT = Σ ITL, exactly, in integer nanoseconds.
        let e2el = end - r.sent;
        let itls: Vec<u64> = r.events.windows(2).map(|w| w[1].t - w[0].t).collect();
        assert_eq!(first, r.events[0].t);
        assert_eq!(end, r.events.last().unwrap().t);
        assert_eq!(e2el - ttft, itls.iter().sum::<u64>());

        for (k, itl) in itls.iter().enumerate() {
            let logged = entry.events_ns[k + 1] - entry.events_ns[k];
            itl_err.push((ms(*itl) - ms(logged)).abs());
        }

        // TPOT = (E2EL − TTFT) / (output_tokens − 1), against the same from the log.
        if tokens > 1 {
            let tpot = ms(e2el - ttft) / (tokens - 1) as f64;
            let logged_span = entry.events_ns.last().unwrap() - entry.events_ns[0];
            let logged_tpot = ms(logged_span) / (tokens - 1) as f64;
            assert!(
                (tpot - logged_tpot).abs() <= bounds.each / (tokens - 1) as f64 * 2.0,
                "TPOT {tpot:.3} ms vs logged {logged_tpot:.3} ms"
            );
            // The last event is never early, so the span from the logged first event covers
            // at least the scripted span minus the first event's lateness.
            let first_late = entry.events_ns[0] - delay;
            assert!(
                logged_span + first_late >= (tokens - 1) * interval,
                "logged span {logged_span} ns too short"
            );
        }
    }
    let summary = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[v.len() - 1])
    };
    let (ttft_med, ttft_max) = summary(&mut ttft_err);
    let (itl_med, itl_max) = summary(&mut itl_err);
    eprintln!(
        "{} records: TTFT error median {ttft_med:.3} ms max {ttft_max:.3} ms; ITL error median {itl_med:.3} ms max {itl_max:.3} ms ({} gaps)",
        records.len(),
        itl_err.len()
    );
    assert!(ttft_max <= bounds.each, "TTFT error up to {ttft_max:.3} ms");
    assert!(itl_max <= bounds.each, "ITL error up to {itl_max:.3} ms");
    assert!(
        ttft_med <= bounds.median,
        "median TTFT error {ttft_med:.3} ms"
    );
    assert!(itl_med <= bounds.median, "median ITL error {itl_med:.3} ms");
}

async fn sequential(api: ApiKind) {
    let script = Script::new()
        .first_token_delay(Duration::from_millis(40))
        .inter_token_interval(Duration::from_millis(10))
        .tokens(12);
    let server = ScriptedServer::start(script.clone()).await.unwrap();
    let client = client(&server.base_url(), api, ClientOptions::default());
    let reqs = requests(&client, 6, |_| Some(12));
    let out = run(client, reqs, vec![0; 6], Some(1), StopSignal::never()).await;
    let log = settled_log(&server, 6).await;
    // At concurrency 1 the arrival order is the request order.
    let order: Vec<Option<u64>> = log.iter().map(|e| e.record_id()).collect();
    assert_eq!(order, (0..6).map(Some).collect::<Vec<_>>());
    // Bounds: a single loopback trip at concurrency 1 is tens of µs; 15 ms for any one
    // sample absorbs a descheduled thread on a busy machine, 2 ms for the median does not
    // hide a systematic error.
    check(
        &out.records,
        &log,
        &script,
        |_| 12,
        &Bounds {
            each: 15.0,
            median: 2.0,
        },
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_at_concurrency_1_match_the_server_log() {
    let _serial = serial().await;
    sequential(ApiKind::Completions).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_at_concurrency_1_match_the_server_log() {
    let _serial = serial().await;
    sequential(ApiKind::Chat).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_at_concurrency_256_match_the_server_log() {
    let _serial = serial().await;
    let script = Script::new()
        .first_token_delay(Duration::from_millis(100))
        .inter_token_interval(Duration::from_millis(40))
        .tokens_from_request(1);
    let server = ScriptedServer::start(script.clone()).await.unwrap();
    let client = client(
        &server.base_url(),
        ApiKind::Completions,
        ClientOptions::default(),
    );
    // Open the 256 connections first: a cold start would add 256 simultaneous connects to
    // TTFT (rightly, as vLLM's TTFT does), which is not the client's timing error.
    let warm = client.prepare(WARM_UP_ID, "warm up", 2, Some(1));
    let ok = warm_up(
        Arc::clone(&client),
        warm,
        256,
        Some(256),
        &StopSignal::never(),
    )
    .await;
    assert_eq!(ok, 256);
    // Distinct lengths per request make a second, independent join key.
    let reqs = requests(&client, 256, |i| Some(10 + i % 7));
    // Sends 1 ms apart: every stream lasts over 500 ms, so all 256 run at once from 256 ms
    // on, while the sends do not form one burst (in a debug build a burst of 256 sends takes
    // tens of ms of CPU, which would be measured as request transit, not timing error).
    let schedule = (0..256).map(|i| i * MS).collect();
    let out = run(client, reqs, schedule, Some(256), StopSignal::never()).await;
    assert_eq!(out.records.len(), 256);
    let peak = peak_concurrency(&out.records);
    assert_eq!(peak, 256, "all streams overlapped");
    let log = settled_log(&server, 512).await;
    // Bounds: 256 streams on two cores shared by client, server and other work. One sample
    // may see a thread descheduled for tens of ms; the median stays at a few ms.
    check(
        &out.records,
        &log,
        &script,
        |r| r.max_tokens.unwrap(),
        &Bounds {
            each: 60.0,
            median: 5.0,
        },
    );
}
