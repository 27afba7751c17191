//! Injected faults (`--fault-*`): each kind at probability 1, checked over real sockets.
#![allow(clippy::unwrap_used)]

mod server_common;

use std::time::Duration;

use serde_json::json;
use server_common::*;

const SPEC: &str = "--jitter-sigma 0 --eos-len-median 0 --max-model-len 4096";

fn stream_body(max_tokens: u32) -> String {
    json!({"prompt": "fault injection", "max_tokens": max_tokens, "ignore_eos": true, "stream": true}).to_string()
}

#[tokio::test]
async fn error_fault_rejects_with_the_configured_status() {
    let sim = start(&format!(
        "{SPEC} --fault-error-rate 1 --fault-error-status 503"
    ))
    .await;
    for _ in 0..3 {
        let r = post(sim.addr, "/v1/completions", &stream_body(4)).await;
        assert_eq!(r.status, 503);
        let e = &r.json()["error"];
        assert_eq!(e["code"], 503);
        assert_eq!(e["type"], "ServiceUnavailableError");
    }
    let page = metrics(sim.addr).await;
    assert_eq!(
        metric(&page, "sim:faults_injected_total", &["kind=\"error\""]),
        Some(3.0)
    );
    assert_eq!(
        metric(&page, "sim:faults_injected_total", &["kind=\"stall\""]),
        Some(0.0)
    );
    // Rejected requests never reach the engine.
    assert_eq!(metric(&page, "vllm:prompt_tokens_total", &[]), Some(0.0));
    // Invalid requests are still reported as such, not as injected errors.
    let r = post(
        sim.addr,
        "/v1/completions",
        &json!({"prompt": ""}).to_string(),
    )
    .await;
    assert_eq!(r.status, 400);
}

#[tokio::test]
async fn stall_fault_holds_chunks_and_merges_what_queued_meanwhile() {
    let stall_ms = 40;
    let sim = start(&format!(
        "{SPEC} --fault-stall-prob 1 --fault-stall-ms {stall_ms}"
    ))
    .await;
    let r = post(sim.addr, "/v1/completions", &stream_body(12)).await;
    assert!(r.done());
    let ev = r.json_events();
    let texts: Vec<&str> = ev
        .iter()
        .map(|e| e["choices"][0]["text"].as_str().unwrap())
        .collect();
    let tokens: usize = texts.iter().map(|t| t.split_whitespace().count()).sum();
    assert_eq!(tokens, 12, "no token is lost: {texts:?}");
    // Decode steps take ≈ 7 ms, so a 40 ms hold lets several steps queue into one chunk.
    assert!(
        ev.len() < 12,
        "tokens queued during a stall are merged: {texts:?}"
    );
    assert!(texts.iter().any(|t| t.split_whitespace().count() > 1));
    let first = r.events[0].at.duration_since(r.sent);
    assert!(
        first >= Duration::from_millis(stall_ms),
        "first chunk held: {first:?}"
    );
    let page = metrics(sim.addr).await;
    let stalls = metric(&page, "sim:faults_injected_total", &["kind=\"stall\""]).unwrap();
    assert_eq!(
        stalls as usize,
        ev.len(),
        "one stall per written chunk at probability 1"
    );
}

#[tokio::test]
async fn disconnect_fault_cuts_the_stream_and_the_engine_aborts() {
    let sim = start(&format!("{SPEC} --fault-disconnect-prob 1")).await;
    let r = post(sim.addr, "/v1/completions", &stream_body(150)).await;
    assert_eq!(r.status, 200);
    assert!(r.truncated, "the connection dies mid-body");
    assert!(!r.done(), "no [DONE] after an injected disconnect");
    assert!(!r.events.is_empty());
    let page = wait_metrics(sim.addr, "the abort", |p| {
        metric(
            p,
            "vllm:request_success_total",
            &["finished_reason=\"abort\""],
        ) == Some(1.0)
    })
    .await;
    assert_eq!(metric(&page, "vllm:num_requests_running", &[]), Some(0.0));
    assert_eq!(
        metric(&page, "sim:faults_injected_total", &["kind=\"disconnect\""]),
        Some(1.0)
    );
}

#[tokio::test]
async fn malformed_fault_truncates_one_chunk_and_the_stream_goes_on() {
    let sim = start(&format!("{SPEC} --fault-malformed-prob 1")).await;
    let n = 20;
    let r = post(sim.addr, "/v1/completions", &stream_body(n)).await;
    assert!(r.done(), "the stream continues to [DONE]");
    let bad: Vec<&Event> = r
        .events
        .iter()
        .filter(|e| {
            e.data != "[DONE]" && serde_json::from_str::<serde_json::Value>(&e.data).is_err()
        })
        .collect();
    let parsed: Vec<&Event> = r
        .events
        .iter()
        .filter(|e| {
            e.data != "[DONE]" && serde_json::from_str::<serde_json::Value>(&e.data).is_ok()
        })
        .collect();
    assert!(!parsed.is_empty());
    assert_eq!(bad.len(), 1, "exactly one malformed chunk: {:?}", r.events);
    // Every other chunk parses; together they hold all tokens but the bad chunk's.
    let good_tokens: usize = parsed
        .iter()
        .filter_map(|e| {
            e.json()["choices"][0]["text"]
                .as_str()
                .map(|t| t.split_whitespace().count())
        })
        .sum();
    assert!((1..n as usize).contains(&good_tokens), "{good_tokens}");
    let page = metrics(sim.addr).await;
    assert_eq!(
        metric(&page, "sim:faults_injected_total", &["kind=\"malformed\""]),
        Some(1.0)
    );
}

#[tokio::test]
async fn fault_draws_do_not_shift_the_engines_output() {
    // The same seeded request produces the same words with and without faults enabled.
    let body = json!({"prompt": "same words", "max_tokens": 8, "ignore_eos": true, "seed": 42})
        .to_string();
    let plain = start("--jitter-sigma 0 --max-model-len 4096 --seed 5").await;
    let a = post(plain.addr, "/v1/completions", &body).await.json();
    let faulty = start(
        "--jitter-sigma 0 --max-model-len 4096 --seed 5 --fault-stall-prob 0.5 --fault-stall-ms 1",
    )
    .await;
    let b = post(faulty.addr, "/v1/completions", &body).await.json();
    assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"]);
}
