//! The simulator's HTTP surface over real sockets on 127.0.0.1:0: response shapes, usage,
//! prefix-cache hits, errors, metrics, tokenize, reset and disconnect handling.
#![allow(clippy::unwrap_used)]

mod server_common;

use serde_json::{json, Value};
use servebench_tokenizer::Tokenizer;
use server_common::*;

/// Fast, exact steps; no natural stops unless a test wants them.
const SPEC: &str =
    "--jitter-sigma 0 --eos-len-median 0 --max-model-len 4096 --served-model-name test-model";

fn words(text: &str) -> usize {
    text.split(' ').filter(|w| !w.is_empty()).count()
}

#[tokio::test]
async fn completion_non_streaming_reports_usage_and_filler_text() {
    let sim = start(SPEC).await;
    let prompt = "The quick brown fox jumps over the lazy dog";
    let n_prompt = Tokenizer::builtin().count(prompt);
    let r = post(
        sim.addr,
        "/v1/completions",
        &json!({"model": "test-model", "prompt": prompt, "max_tokens": 7, "ignore_eos": true})
            .to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["model"], "test-model");
    let choice = &v["choices"][0];
    assert_eq!(choice["finish_reason"], "length");
    let text = choice["text"].as_str().unwrap();
    assert_eq!(words(text), 7, "{text:?}");
    assert!(text.starts_with(' '));
    assert_eq!(
        Tokenizer::builtin().count(text),
        7,
        "each filler word is one token: {text:?}"
    );
    assert_eq!(v["usage"]["prompt_tokens"], n_prompt);
    assert_eq!(v["usage"]["completion_tokens"], 7);
    assert_eq!(v["usage"]["total_tokens"], n_prompt + 7);
    assert_eq!(v["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
}

#[tokio::test]
async fn completion_stream_has_one_event_per_token_usage_and_done() {
    let sim = start(SPEC).await;
    let r = post(
        sim.addr,
        "/v1/completions",
        &json!({"prompt": [11, 12, 13, 14, 15], "max_tokens": 5, "ignore_eos": true, "stream": true,
                "stream_options": {"include_usage": true}})
        .to_string(),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    assert!(r.done(), "stream ends with [DONE]");
    let ev = r.json_events();
    // 5 tokens in 5 steps (prefill + 4 decodes), one event each, then the usage chunk.
    assert_eq!(ev.len(), 6, "{ev:#?}");
    for (i, e) in ev[..5].iter().enumerate() {
        assert_eq!(e["object"], "text_completion");
        assert_eq!(words(e["choices"][0]["text"].as_str().unwrap()), 1);
        let fin = &e["choices"][0]["finish_reason"];
        if i < 4 {
            assert!(fin.is_null(), "{e}");
        } else {
            assert_eq!(fin, "length");
        }
        assert!(e.get("usage").is_none());
    }
    let usage = &ev[5];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["prompt_tokens"], 5);
    assert_eq!(usage["usage"]["completion_tokens"], 5);
    assert_eq!(usage["usage"]["total_tokens"], 10);
    assert_eq!(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    // Each token step's event arrives in its own write, in order.
    assert!(r.events.windows(2).all(|w| w[0].at <= w[1].at));
}

#[tokio::test]
async fn continuous_usage_stats_ride_on_every_chunk() {
    let sim = start(SPEC).await;
    let r = post(
        sim.addr,
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 3, "ignore_eos": true, "stream": true,
                "stream_options": {"continuous_usage_stats": true}})
        .to_string(),
    )
    .await;
    let ev = r.json_events();
    assert_eq!(ev.len(), 3, "no final usage chunk without include_usage");
    for (i, e) in ev.iter().enumerate() {
        assert_eq!(e["usage"]["completion_tokens"], i + 1);
    }
}

#[tokio::test]
async fn chat_stream_sends_role_with_first_content_and_finish_on_last() {
    let sim = start(SPEC).await;
    let messages =
        json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello!"}]);
    let tok = Tokenizer::builtin();
    let expected_prompt = 1 + 4 * 2 + 3 + tok.count("Be brief.") + tok.count("Hello!");
    let r = post(
        sim.addr,
        "/v1/chat/completions",
        &json!({"model": "test-model", "messages": messages, "max_completion_tokens": 4, "max_tokens": 50,
                "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}})
        .to_string(),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(r.done());
    let ev = r.json_events();
    assert_eq!(ev.len(), 1 + 4 + 1, "{ev:#?}");
    assert_eq!(ev[0]["object"], "chat.completion.chunk");
    assert_eq!(
        ev[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    // The role chunk never goes out before the first token: same HTTP chunk (one write).
    assert_eq!(r.events[0].chunk, r.events[1].chunk);
    assert_ne!(r.events[1].chunk, r.events[2].chunk);
    for e in &ev[1..4] {
        assert!(e["choices"][0]["finish_reason"].is_null());
        assert_eq!(
            words(e["choices"][0]["delta"]["content"].as_str().unwrap()),
            1
        );
    }
    assert_eq!(ev[4]["choices"][0]["finish_reason"], "length");
    assert_eq!(ev[5]["usage"]["prompt_tokens"], expected_prompt);
    assert_eq!(ev[5]["usage"]["completion_tokens"], 4);
}

#[tokio::test]
async fn chat_non_streaming_defaults_and_natural_stops() {
    // Natural stops on: a short median ends requests with `stop` before max_tokens.
    let sim =
        start("--jitter-sigma 0 --eos-len-median 3 --eos-len-sigma 0 --max-model-len 4096").await;
    let r = post(
        sim.addr,
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 40})
            .to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "llama-3.1-8b");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"]["completion_tokens"], 3);
    assert_eq!(
        words(v["choices"][0]["message"]["content"].as_str().unwrap()),
        3
    );
}

#[tokio::test]
async fn repeated_prompt_reports_cached_tokens_and_reset_clears_them() {
    let sim = start(SPEC).await;
    let prompt: Vec<u32> = (1000..1100).collect();
    let body = json!({"prompt": prompt, "max_tokens": 2, "ignore_eos": true}).to_string();
    let cached = |v: &Value| {
        v["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
    };

    let first = post(sim.addr, "/v1/completions", &body).await.json();
    assert_eq!(cached(&first), 0);
    let second = post(sim.addr, "/v1/completions", &body).await.json();
    // 100 tokens: the lookup stops one token short, at whole 16-token blocks.
    assert_eq!(cached(&second), 96);

    let page = metrics(sim.addr).await;
    assert_eq!(
        metric(&page, "vllm:prefix_cache_queries_total", &[]),
        Some(200.0)
    );
    assert_eq!(
        metric(&page, "vllm:prefix_cache_hits_total", &[]),
        Some(96.0)
    );

    let reset = post(sim.addr, "/reset_prefix_cache", "").await;
    assert_eq!(reset.status, 200);
    let third = post(sim.addr, "/v1/completions", &body).await.json();
    assert_eq!(cached(&third), 0, "a reset empties the prefix cache");
}

#[tokio::test]
async fn reset_is_refused_while_blocks_are_in_use() {
    let sim = start(SPEC).await;
    let body =
        json!({"prompt": "a long one", "max_tokens": 3000, "ignore_eos": true, "stream": true})
            .to_string();
    let mut conn = Conn::send(sim.addr, "POST", "/v1/completions", Some(&body)).await;
    let (status, _) = conn.head().await;
    assert_eq!(status, 200);
    conn.next_chunk().await.unwrap().unwrap();
    let r = post(sim.addr, "/reset_prefix_cache", "").await;
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["error"]["code"], 409);
    drop(conn);
    wait_metrics(sim.addr, "the aborted request to leave", |p| {
        metric(p, "vllm:num_requests_running", &[]) == Some(0.0)
    })
    .await;
    assert_eq!(post(sim.addr, "/reset_prefix_cache", "").await.status, 200);
}

#[tokio::test]
async fn disconnect_aborts_and_frees_the_request() {
    let sim = start(SPEC).await;
    let body =
        json!({"prompt": "keep going", "max_tokens": 3000, "ignore_eos": true, "stream": true})
            .to_string();
    let mut conn = Conn::send(sim.addr, "POST", "/v1/completions", Some(&body)).await;
    conn.head().await;
    conn.next_chunk().await.unwrap().unwrap();
    let page = metrics(sim.addr).await;
    assert_eq!(metric(&page, "vllm:num_requests_running", &[]), Some(1.0));
    assert!(metric(&page, "vllm:kv_cache_usage_perc", &[]).unwrap() > 0.0);
    drop(conn);
    let page = wait_metrics(sim.addr, "the abort", |p| {
        metric(
            p,
            "vllm:request_success_total",
            &["finished_reason=\"abort\""],
        ) == Some(1.0)
    })
    .await;
    assert_eq!(metric(&page, "vllm:num_requests_running", &[]), Some(0.0));
    assert_eq!(metric(&page, "vllm:num_requests_waiting", &[]), Some(0.0));
    assert_eq!(metric(&page, "vllm:kv_cache_usage_perc", &[]), Some(0.0));
}

#[tokio::test]
async fn errors_use_vllms_shape() {
    let sim = start(SPEC).await;
    let check = |r: &Response, status: u16, needle: &str| {
        assert_eq!(r.status, status, "{}", r.text());
        let e = &r.json()["error"];
        assert_eq!(e["code"], status);
        assert!(e["message"].as_str().unwrap().contains(needle), "{e}");
        assert!(e.get("param").is_some() && e.get("type").is_some());
    };
    let r = post(
        sim.addr,
        "/v1/completions",
        &json!({"model": "gpt-4", "prompt": "x"}).to_string(),
    )
    .await;
    check(&r, 404, "The model `gpt-4` does not exist.");
    assert_eq!(r.json()["error"]["type"], "NotFoundError");

    let r = post(
        sim.addr,
        "/v1/completions",
        &json!({"prompt": "x", "max_tokens": 5000}).to_string(),
    )
    .await;
    check(&r, 400, "maximum context length is 4096 tokens");
    assert_eq!(r.json()["error"]["type"], "BadRequestError");

    let r = post(
        sim.addr,
        "/v1/completions",
        &json!({"prompt": ""}).to_string(),
    )
    .await;
    check(&r, 400, "cannot be empty");
    let r = post(
        sim.addr,
        "/v1/completions",
        &json!({"prompt": "x", "n": 129}).to_string(),
    )
    .await;
    // n > 1 is served (tests/server_vllm_wire.rs); only beyond the simulator's cap is it a 400.
    check(&r, 400, "n must be at most 128");
    let r = post(
        sim.addr,
        "/v1/chat/completions",
        &json!({"messages": [], "model": "llama-3.1-8b"}).to_string(),
    )
    .await;
    check(&r, 400, "messages");
    let r = post(sim.addr, "/v1/completions", "{not json").await;
    check(&r, 400, "Invalid request body");
    let r = post(
        sim.addr,
        "/v1/completions",
        &json!({"prompt": [300000]}).to_string(),
    )
    .await;
    check(&r, 400, "out of vocabulary");
    // The preset's Hugging Face name is an accepted alias.
    let r = post(
        sim.addr,
        "/v1/completions",
        &json!({"model": "llama-3.1-8b", "prompt": "x", "max_tokens": 1}).to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
}

#[tokio::test]
async fn metrics_count_what_was_served() {
    let sim = start(SPEC).await;
    for (prompt_len, max_tokens) in [(10u32, 3u32), (20, 4), (30, 5)] {
        let prompt: Vec<u32> = (0..prompt_len)
            .map(|i| 5000 + prompt_len * 100 + i)
            .collect();
        let r = post(
            sim.addr,
            "/v1/completions",
            &json!({"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": true, "stream": true}).to_string(),
        )
        .await;
        assert!(r.done());
    }
    let page = metrics(sim.addr).await;
    let m = |name: &str, labels: &[&str]| {
        metric(&page, name, labels).unwrap_or_else(|| panic!("{name} missing"))
    };
    assert_eq!(m("vllm:prompt_tokens_total", &[]), 60.0);
    assert_eq!(m("vllm:generation_tokens_total", &[]), 12.0);
    assert_eq!(
        m(
            "vllm:request_success_total",
            &["finished_reason=\"length\""]
        ),
        3.0
    );
    assert_eq!(
        m("vllm:request_success_total", &["finished_reason=\"stop\""]),
        0.0
    );
    assert_eq!(m("vllm:time_to_first_token_seconds_count", &[]), 3.0);
    assert_eq!(m("vllm:e2e_request_latency_seconds_count", &[]), 3.0);
    assert_eq!(m("vllm:inter_token_latency_seconds_count", &[]), 9.0);
    assert_eq!(m("vllm:num_requests_running", &[]), 0.0);
    assert_eq!(m("vllm:num_preemptions_total", &[]), 0.0);
    assert!(m("sim:steps_total", &[]) >= 12.0);
    assert!(m("sim:step_duration_seconds_count", &[]) >= 12.0);
    assert_eq!(m("sim:faults_injected_total", &["kind=\"error\""]), 0.0);
    assert_eq!(
        m(
            "vllm:cache_config_info",
            &["block_size=\"16\"", "enable_prefix_caching=\"True\""]
        ),
        1.0
    );
    assert!(page.contains("model_name=\"test-model\""));
    assert!(page.contains("engine=\"0\""));
    assert!(page.contains("# TYPE vllm:prompt_tokens_total counter"));
    assert!(page.contains("# TYPE vllm:time_to_first_token_seconds histogram"));
    assert!(
        !page.contains("vllm:gpu_cache_usage_perc"),
        "compat aliases are opt-in"
    );
}

#[tokio::test]
async fn metrics_compat_adds_deprecated_names() {
    let sim = start(&format!("{SPEC} --metrics-compat")).await;
    let page = metrics(sim.addr).await;
    for name in [
        "vllm:gpu_cache_usage_perc",
        "vllm:gpu_prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_hits_total",
        "vllm:time_per_output_token_seconds_count",
    ] {
        assert!(metric(&page, name, &[]).is_some(), "{name}");
    }
}

#[tokio::test]
async fn info_endpoints() {
    let sim = start(SPEC).await;
    let r = get(sim.addr, "/health").await;
    assert_eq!((r.status, r.body.len()), (200, 0));
    let r = get(sim.addr, "/version").await;
    assert_eq!(
        r.json(),
        json!({"version": format!("{}-sim", env!("CARGO_PKG_VERSION"))})
    );
    let v = get(sim.addr, "/v1/models").await.json();
    assert_eq!(v["data"][0]["id"], "test-model");
    assert_eq!(v["data"][0]["max_model_len"], 4096);
    assert!(v["data"][0]["owned_by"].is_string());
    let c = get(sim.addr, "/sim/config").await.json();
    assert_eq!(c["max_model_len"], 4096);
    assert_eq!(c["gpu"], "h100");
    assert_eq!(c["served_model_name"], "test-model");
    assert!(c["derived"]["kv_cache_tokens"].as_u64().unwrap() > 0);
    assert_eq!(get(sim.addr, "/no/such/path").await.status, 404);
}

#[tokio::test]
async fn tokenize_counts_like_the_shared_tokenizer() {
    let sim = start(SPEC).await;
    let tok = Tokenizer::builtin();
    let text = "Simulated engines count tokens exactly like clients do.";
    let v = post(sim.addr, "/tokenize", &json!({"prompt": text}).to_string())
        .await
        .json();
    assert_eq!(v["count"], tok.count(text));
    assert_eq!(v["max_model_len"], 4096);
    let ids: Vec<u32> = serde_json::from_value(v["tokens"].clone()).unwrap();
    assert_eq!(ids, tok.encode(text));
    let v = post(
        sim.addr,
        "/tokenize",
        &json!({"messages": [{"role": "user", "content": text}]}).to_string(),
    )
    .await
    .json();
    assert_eq!(v["count"], 1 + 4 + 3 + tok.count(text));
    let r = post(
        sim.addr,
        "/tokenize",
        &json!({"model": "nope", "prompt": "x"}).to_string(),
    )
    .await;
    assert_eq!(r.status, 404);
}

#[tokio::test]
async fn prompt_tokens_details_can_be_turned_off() {
    let sim = start(&format!("{SPEC} --no-enable-prompt-tokens-details")).await;
    let v = post(
        sim.addr,
        "/v1/completions",
        &json!({"prompt": "x", "max_tokens": 1}).to_string(),
    )
    .await
    .json();
    assert!(v["usage"].get("prompt_tokens_details").is_none(), "{v}");
}

#[tokio::test]
async fn shutdown_handle_stops_the_server() {
    let sim = start(SPEC).await;
    let addr = sim.addr;
    assert_eq!(get(addr, "/health").await.status, 200);
    sim.handle.shutdown().await.unwrap();
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "listener closed"
    );
}
