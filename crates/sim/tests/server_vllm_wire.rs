//! The simulator on the wire as vLLM (issue 26 item 10, issue 27 item 7), over real sockets on
//! 127.0.0.1:0: `stop` ends the text before the stop string with `finish_reason` "stop", `n`
//! choices, JSON bodies on 404 and 405, and slow request bodies that cannot hold every
//! connection slot.
#![allow(clippy::unwrap_used)]

mod server_common;

use std::time::Duration;

use serde_json::{json, Value};
use servebench_sim::SimArgs;
use server_common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

/// Exact steps, no natural stops: outputs are `max_tokens` long unless a stop ends them.
const SPEC: &str = "--jitter-sigma 0 --eos-len-median 0 --max-model-len 4096";

/// The content of a stream's chunks, joined, and the last `finish_reason` seen.
fn streamed_text(r: &Response, choice: u64) -> (String, Option<String>) {
    let mut text = String::new();
    let mut finish = None;
    for ev in r.json_events() {
        let Some(c) = ev["choices"].as_array().and_then(|cs| cs.first()) else {
            continue;
        };
        if c["index"] != choice {
            continue;
        }
        text.push_str(c["text"].as_str().unwrap_or(""));
        text.push_str(c["delta"]["content"].as_str().unwrap_or(""));
        if let Some(f) = c["finish_reason"].as_str() {
            finish = Some(f.to_owned());
        }
    }
    (text, finish)
}

/// Where a stop string ends a filler text, as vLLM finds it: the text before its first
/// occurrence, and the tokens taken up to the one completing it (every filler token is one
/// space-led word).
fn expected_cut(full: &str, stop: &str) -> (String, u64) {
    let at = full.find(stop).unwrap();
    let end = at + stop.len();
    let mut offset = 0;
    let mut tokens = 0;
    for word in full.split_inclusive_leading_space() {
        offset += word.len();
        tokens += 1;
        if offset >= end {
            break;
        }
    }
    (full[..at].to_owned(), tokens)
}

trait SplitWords {
    fn split_inclusive_leading_space(&self) -> Vec<&str>;
}

impl SplitWords for str {
    /// `" a b c"` → `[" a", " b", " c"]`.
    fn split_inclusive_leading_space(&self) -> Vec<&str> {
        let mut out = Vec::new();
        let mut start = 0;
        for (i, ch) in self.char_indices().skip(1) {
            if ch == ' ' {
                out.push(&self[start..i]);
                start = i;
            }
        }
        out.push(&self[start..]);
        out
    }
}

#[tokio::test]
async fn issue_26_a_stop_string_ends_the_stream_before_it_with_finish_reason_stop() {
    let sim = start(SPEC).await;
    let base = json!({"prompt": "The stop test prompt", "max_tokens": 40, "ignore_eos": true});
    // The same prompt draws the same filler words: read them once without a stop.
    let full = post(sim.addr, "/v1/completions", &base.to_string())
        .await
        .json();
    let full = full["choices"][0]["text"].as_str().unwrap().to_owned();
    let words = full.split_inclusive_leading_space();
    assert_eq!(words.len(), 40, "{full:?}");
    // A stop string made of two words from the middle of the output: it occurs for sure.
    let stop = format!("{}{}", words[10], words[11]);
    let (want_text, want_tokens) = expected_cut(&full, &stop);
    assert!(want_tokens <= 12, "the stop string ends by the 12th token");

    let mut req = base.clone();
    req["stop"] = json!(["never-in-filler-\u{1F600}", stop]);
    req["stream"] = json!(true);
    req["stream_options"] = json!({"include_usage": true});
    let r = post(sim.addr, "/v1/completions", &req.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.done(), "the stream ends with [DONE]");
    let (text, finish) = streamed_text(&r, 0);
    assert_eq!(text, want_text);
    assert!(!text.contains(stop.as_str()));
    assert_eq!(finish.as_deref(), Some("stop"));
    let usage = r.json_events().last().unwrap()["usage"].clone();
    assert_eq!(usage["completion_tokens"], want_tokens, "{usage}");

    // Non-streaming, and a plain string instead of a list.
    let mut req = base.clone();
    req["stop"] = json!(stop);
    let body = post(sim.addr, "/v1/completions", &req.to_string())
        .await
        .json();
    assert_eq!(body["choices"][0]["text"], want_text.as_str());
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(body["usage"]["completion_tokens"], want_tokens);

    // Chat streams stop the same way.
    let chat = json!({"messages": [{"role": "user", "content": "stop test"}], "max_tokens": 40, "ignore_eos": true});
    let full = post(sim.addr, "/v1/chat/completions", &chat.to_string())
        .await
        .json();
    let full = full["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let stop = full.split_inclusive_leading_space()[7].to_owned();
    let (want_text, want_tokens) = expected_cut(&full, &stop);
    let mut req = chat.clone();
    req["stop"] = json!([stop]);
    req["stream"] = json!(true);
    req["stream_options"] = json!({"include_usage": true});
    let r = post(sim.addr, "/v1/chat/completions", &req.to_string()).await;
    assert!(r.done());
    let (text, finish) = streamed_text(&r, 0);
    assert_eq!(text, want_text);
    assert_eq!(finish.as_deref(), Some("stop"));
    assert_eq!(
        r.json_events().last().unwrap()["usage"]["completion_tokens"],
        want_tokens
    );

    // The engine freed every stopped request and counted it as a stop, not an abort.
    let page = wait_metrics(sim.addr, "stopped requests to leave", |p| {
        metric(p, "vllm:num_requests_running", &[]) == Some(0.0)
            && metric(
                p,
                "vllm:request_success_total",
                &[r#"finished_reason="stop""#],
            ) == Some(3.0)
    })
    .await;
    assert_eq!(
        metric(
            &page,
            "vllm:request_success_total",
            &[r#"finished_reason="abort""#]
        ),
        Some(0.0)
    );
}

#[tokio::test]
async fn issue_26_n_2_returns_two_choices_with_summed_usage() {
    let sim = start(SPEC).await;
    let req = json!({"prompt": "two choices", "max_tokens": 8, "ignore_eos": true, "n": 2});
    let body = post(sim.addr, "/v1/completions", &req.to_string())
        .await
        .json();
    let choices = body["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 2, "{body}");
    assert_eq!(
        (choices[0]["index"].clone(), choices[1]["index"].clone()),
        (json!(0), json!(1))
    );
    assert_ne!(
        choices[0]["text"], choices[1]["text"],
        "each choice samples its own text"
    );
    assert_eq!(body["usage"]["completion_tokens"], 16);
    assert_eq!(
        body["usage"]["prompt_tokens"],
        body["usage"]["total_tokens"].as_u64().unwrap() - 16
    );

    let mut req = req.clone();
    req["stream"] = json!(true);
    req["stream_options"] = json!({"include_usage": true});
    let r = post(sim.addr, "/v1/chat/completions", &{
        let mut chat = req.clone();
        chat.as_object_mut().unwrap().remove("prompt");
        chat["messages"] = json!([{"role": "user", "content": "two choices"}]);
        chat.to_string()
    })
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.done());
    for index in 0..2 {
        let (text, finish) = streamed_text(&r, index);
        assert_eq!(
            text.split_inclusive_leading_space().len(),
            8,
            "{index}: {text:?}"
        );
        assert_eq!(finish.as_deref(), Some("length"));
    }
    let last = r.json_events().last().unwrap().clone();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["completion_tokens"], 16);
    // Every event carries exactly one choice, and one id for the whole response.
    let ids: std::collections::HashSet<String> = r
        .json_events()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 1);
}

#[tokio::test]
async fn issue_26_unknown_paths_and_methods_have_json_bodies() {
    let sim = start(SPEC).await;
    let r = get(sim.addr, "/v1/no-such-endpoint").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.json(), json!({"detail": "Not Found"}));
    let r = get(sim.addr, "/v1/completions").await;
    assert_eq!(r.status, 405);
    assert_eq!(r.json(), json!({"detail": "Method Not Allowed"}));
    // Errors the OpenAI layer raises keep vLLM's error object.
    let r = post(
        sim.addr,
        "/v1/completions",
        &json!({"model": "nope", "prompt": "x"}).to_string(),
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"]["type"], "NotFoundError");
    assert_eq!(r.json()["error"]["code"], 404);
}

/// Opens a connection that sends a complete head, then its body a byte every 200 ms (never
/// stalling long enough for the header timeout); returns what it read and when it was closed.
async fn trickle(addr: std::net::SocketAddr) -> (Vec<u8>, Instant) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = stream.into_split();
    wr.write_all(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{",
    )
    .await
    .unwrap();
    let writer = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if wr.write_all(b" ").await.is_err() {
                break;
            }
        }
    });
    let mut got = Vec::new();
    let mut tmp = [0u8; 1024];
    loop {
        match rd.read(&mut tmp).await {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&tmp[..n]),
        }
    }
    writer.abort();
    (got, Instant::now())
}

#[tokio::test]
async fn issue_27_slow_bodies_are_cut_off_and_free_their_slots() {
    let sim = start(&format!("{SPEC} --max-connections 2 --body-timeout-secs 1")).await;
    let opened = Instant::now();
    let a = tokio::spawn(trickle(sim.addr));
    let b = tokio::spawn(trickle(sim.addr));
    // Let the server accept both before probing.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = get(sim.addr, "/health").await;
    assert_eq!(r.status, 503, "both slots are held by the slow bodies");

    // 1 s body timeout; 8 s is a generous bound for a loaded CI machine.
    for slow in [a, b] {
        let (got, closed) = timeout(Duration::from_secs(8), slow)
            .await
            .expect("a slow body still held its connection after 8 s")
            .unwrap();
        let after = closed - opened;
        assert!(
            after >= Duration::from_millis(900),
            "closed after {after:?}"
        );
        // The 408 may be lost to a reset (the client kept sending); if it came, it is JSON.
        let text = String::from_utf8_lossy(&got);
        if !got.is_empty() {
            assert!(text.starts_with("HTTP/1.1 408"), "{text}");
            assert!(text.contains("\"code\":408"), "{text}");
            assert!(text.to_lowercase().contains("connection: close"), "{text}");
        }
    }

    // With the slots free, a normal client is served (the release is asynchronous: retry).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = post(
            sim.addr,
            "/v1/completions",
            &json!({"prompt": "hi", "max_tokens": 2}).to_string(),
        )
        .await;
        if r.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "never served: {}", r.status);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn issue_27_a_slow_body_gets_a_408_json_body() {
    let sim = start(&format!("{SPEC} --body-timeout-secs 1")).await;
    let mut slow = TcpStream::connect(sim.addr).await.unwrap();
    let opened = Instant::now();
    slow.write_all(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 8\r\n\r\n{",
    )
    .await
    .unwrap();
    // Three more bytes, each well within the stall timeout, then nothing: only the body
    // timeout can end it, and no unread bytes are left to turn the close into a reset.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        slow.write_all(b" ").await.unwrap();
    }
    let mut got = Vec::new();
    let closed = timeout(Duration::from_secs(8), slow.read_to_end(&mut got)).await;
    assert!(closed.is_ok(), "still open after 8 s");
    assert!(opened.elapsed() >= Duration::from_millis(900));
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    let body: Value = serde_json::from_str(text.split_once("\r\n\r\n").unwrap().1).unwrap();
    assert_eq!(body["error"]["code"], 408);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--body-timeout-secs"));
}

#[tokio::test]
async fn issue_27_an_idle_keep_alive_connection_is_closed_after_the_header_timeout() {
    let sim = start(&format!("{SPEC} --header-timeout-secs 1")).await;
    let mut conn = TcpStream::connect(sim.addr).await.unwrap();
    conn.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut tmp = [0u8; 1024];
    let n = conn.read(&mut tmp).await.unwrap();
    assert!(String::from_utf8_lossy(&tmp[..n]).starts_with("HTTP/1.1 200"));
    let idle_from = Instant::now();
    let closed = timeout(Duration::from_secs(8), async {
        loop {
            match conn.read(&mut tmp).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "an idle keep-alive connection was open after 8 s"
    );
    assert!(idle_from.elapsed() >= Duration::from_millis(900));
}

#[test]
fn issue_27_body_timeout_flag_is_bounded() {
    assert_eq!(SimArgs::default().body_timeout_secs, 30.0);
    assert_eq!(
        SimArgs::parse_spec("--body-timeout-secs 2.5")
            .unwrap()
            .body_timeout_secs,
        2.5
    );
    for bad in ["0", "-1", "nan", "inf", "1e30"] {
        assert!(
            SimArgs::parse_spec(&format!("--body-timeout-secs {bad}")).is_err(),
            "{bad}"
        );
    }
}
