//! The simulator as a reasoning model (`--reasoning-tokens`, `--reasoning-fraction`) over real
//! sockets on 127.0.0.1:0: chat streams open with `reasoning_content` deltas, usage counts
//! them, non-streaming chat returns them beside the answer, completions are unchanged.
#![allow(clippy::unwrap_used)]

mod server_common;

use serde_json::{json, Value};
use server_common::*;

const BASE: &str = "--jitter-sigma 0 --eos-len-median 0 --max-model-len 4096";

fn chat(max_tokens: u32, stream: bool) -> String {
    json!({"messages": [{"role": "user", "content": "Why is the sky blue?"}],
           "max_tokens": max_tokens, "ignore_eos": true, "stream": stream,
           "stream_options": {"include_usage": true}})
    .to_string()
}

/// (reasoning tokens, content tokens) of a chat stream, counted as filler words (one per
/// token; a chunk carries several when the handler fell behind), checking that every
/// reasoning delta comes before the first content delta and that no event mixes both.
fn split(ev: &[Value]) -> (usize, usize) {
    let words = |s: &str| s.split_whitespace().count();
    let (mut reasoning, mut content) = (0, 0);
    for e in ev {
        let d = &e["choices"][0]["delta"];
        if let Some(r) = d["reasoning_content"].as_str().filter(|s| !s.is_empty()) {
            assert_eq!(content, 0, "reasoning after content: {ev:#?}");
            assert!(d.get("content").is_none(), "{e}");
            reasoning += words(r);
        }
        if let Some(c) = d["content"].as_str() {
            content += words(c);
        }
    }
    (reasoning, content)
}

#[tokio::test]
async fn chat_stream_sends_reasoning_first_and_usage_counts_it() {
    let sim = start(&format!("{BASE} --reasoning-tokens 5")).await;
    let r = post(sim.addr, "/v1/chat/completions", &chat(8, true)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.done());
    let ev = r.json_events();
    assert_eq!(split(&ev), (5, 3), "{ev:#?}");
    let usage = &ev.last().unwrap()["usage"];
    assert_eq!(usage["completion_tokens"], 8);
    assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], 5);
    assert_eq!(ev[ev.len() - 2]["choices"][0]["finish_reason"], "length");

    // Shorter than the reasoning: all reasoning, closed by an empty content chunk.
    let r = post(sim.addr, "/v1/chat/completions", &chat(3, true)).await;
    let ev = r.json_events();
    assert_eq!(split(&ev), (3, 0), "{ev:#?}");
    let usage = &ev.last().unwrap()["usage"];
    assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], 3);
    assert_eq!(ev[ev.len() - 2]["choices"][0]["finish_reason"], "length");
}

#[tokio::test]
async fn completions_are_unchanged_by_reasoning() {
    let sim = start(&format!("{BASE} --reasoning-tokens 5")).await;
    let body = json!({"prompt": "Hello", "max_tokens": 8, "ignore_eos": true, "stream": true,
                      "stream_options": {"include_usage": true}});
    let r = post(sim.addr, "/v1/completions", &body.to_string()).await;
    let ev = r.json_events();
    assert_eq!(ev.len(), 9, "{ev:#?}");
    assert!(ev[0]["choices"][0]["text"].as_str().is_some());
    let usage = &ev.last().unwrap()["usage"];
    assert_eq!(usage["completion_tokens"], 8);
    assert!(usage.get("completion_tokens_details").is_none(), "{usage}");
}

#[tokio::test]
async fn non_streaming_chat_returns_reasoning_content_beside_the_answer() {
    let sim = start(&format!("{BASE} --reasoning-tokens 4")).await;
    let v = post(sim.addr, "/v1/chat/completions", &chat(10, false))
        .await
        .json();
    let msg = &v["choices"][0]["message"];
    let words = |s: &Value| s.as_str().unwrap().split_whitespace().count();
    assert_eq!(words(&msg["reasoning_content"]), 4, "{v}");
    assert_eq!(words(&msg["content"]), 6, "{v}");
    assert_eq!(
        v["usage"]["completion_tokens_details"]["reasoning_tokens"],
        4
    );
}

#[tokio::test]
async fn reasoning_fraction_is_a_share_of_each_responses_output() {
    // Natural stops on, so responses differ in length: the share follows each one's length.
    let sim = start(
        "--jitter-sigma 0 --eos-len-median 12 --eos-len-sigma 0.6 --max-model-len 4096 \
         --reasoning-fraction 0.25",
    )
    .await;
    let mut lengths = Vec::new();
    for i in 0..6 {
        let body = json!({"messages": [{"role": "user", "content": format!("question {i}")}],
                          "max_tokens": 64, "stream": true,
                          "stream_options": {"include_usage": true}});
        let r = post(sim.addr, "/v1/chat/completions", &body.to_string()).await;
        let ev = r.json_events();
        let usage = &ev.last().unwrap()["usage"];
        let n = usage["completion_tokens"].as_u64().unwrap();
        let want = (n as f64 * 0.25).round() as u64;
        assert_eq!(
            usage["completion_tokens_details"]["reasoning_tokens"], want,
            "{usage}"
        );
        assert_eq!(split(&ev), (want as usize, (n - want) as usize), "{ev:#?}");
        lengths.push(n);
    }
    lengths.dedup();
    assert!(
        lengths.len() > 1,
        "natural stops gave one length: {lengths:?}"
    );
}

#[tokio::test]
async fn reasoning_flags_are_validated() {
    let err = servebench_sim::SimArgs::parse_spec("--reasoning-tokens 4 --reasoning-fraction 0.5")
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot be used with"), "{err}");
    for bad in ["1.5", "-0.1", "NaN"] {
        let args = servebench_sim::SimArgs::parse_spec(&format!("--reasoning-fraction {bad}"));
        let err = match args {
            Ok(a) => a.resolve().unwrap_err().to_string(),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("--reasoning-fraction"), "{bad}: {err}");
    }
}
