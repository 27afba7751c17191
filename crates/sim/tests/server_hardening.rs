//! The simulator as a server exposed to untrusted clients, over real sockets on 127.0.0.1:0:
//! body cap, header timeout (slowloris), connection cap, out-of-range request fields, and a
//! shutdown that does not wait for idle connections.
#![allow(clippy::unwrap_used)]

mod server_common;

use std::time::Duration;

use serde_json::{json, Value};
use server_common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

/// Fast, exact steps; no natural stops.
const SPEC: &str = "--jitter-sigma 0 --eos-len-median 0 --max-model-len 4096";

const TWENTY_MB: usize = 20 * 1024 * 1024;

/// Sends a request head, then `body` in 1 MiB writes (as HTTP chunks if `chunked`) from another
/// task while this one reads the answer: a server that answers early need not read it all.
async fn send_large(addr: std::net::SocketAddr, body_len: usize, chunked: bool) -> (u16, Value) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut rd, mut wr) = stream.into_split();
    let framing = if chunked {
        "Transfer-Encoding: chunked".to_owned()
    } else {
        format!("Content-Length: {body_len}")
    };
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{framing}\r\n\r\n"
    );
    let writer = tokio::spawn(async move {
        wr.write_all(head.as_bytes()).await?;
        let piece = vec![b' '; 1024 * 1024];
        let mut left = body_len;
        while left > 0 {
            let n = left.min(piece.len());
            if chunked {
                wr.write_all(format!("{n:x}\r\n").as_bytes()).await?;
                wr.write_all(&piece[..n]).await?;
                wr.write_all(b"\r\n").await?;
            } else {
                wr.write_all(&piece[..n]).await?;
            }
            left -= n;
        }
        if chunked {
            wr.write_all(b"0\r\n\r\n").await?;
        }
        Ok::<_, std::io::Error>(wr)
    });
    let mut buf = Vec::new();
    let read = async {
        let mut tmp = [0u8; 8192];
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map(|v| v.trim().parse().unwrap())
                    .expect("a content-length on the error response");
                if buf.len() >= end + 4 + len {
                    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
                    let body =
                        serde_json::from_slice(&buf[end + 4..end + 4 + len]).unwrap_or_else(|e| {
                            panic!("{e}: {}", String::from_utf8_lossy(&buf[end + 4..]))
                        });
                    return (status, body);
                }
            }
            let n = rd.read(&mut tmp).await.unwrap();
            assert!(n > 0, "closed before a full response");
            buf.extend_from_slice(&tmp[..n]);
        }
    };
    let answer = timeout(Duration::from_secs(20), read)
        .await
        .expect("an answer within 20 s");
    writer.abort();
    answer
}

fn assert_413(status: u16, body: &Value) {
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], 413, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--max-body-bytes"),
        "{body}"
    );
}

#[tokio::test]
async fn a_20_mb_body_is_refused_with_a_json_413() {
    let sim = start(SPEC).await;
    let (status, body) = send_large(sim.addr, TWENTY_MB, false).await;
    assert_413(status, &body);
    // Without a declared length the cap holds as the bytes arrive.
    let (status, body) = send_large(sim.addr, TWENTY_MB, true).await;
    assert_413(status, &body);
    // The server still answers afterwards.
    let r = post(
        sim.addr,
        "/v1/completions",
        &json!({"prompt": "hi", "max_tokens": 2}).to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
}

#[tokio::test]
async fn the_body_cap_follows_max_body_bytes() {
    let sim = start(&format!("{SPEC} --max-body-bytes 1000")).await;
    let prompt = "word ".repeat(300);
    let r = post(
        sim.addr,
        "/v1/completions",
        &json!({"prompt": prompt, "max_tokens": 2}).to_string(),
    )
    .await;
    assert_413(r.status, &r.json());
    let r = post(
        sim.addr,
        "/tokenize",
        &json!({"prompt": prompt}).to_string(),
    )
    .await;
    assert_413(r.status, &r.json());
    let r = post(
        sim.addr,
        "/v1/completions",
        &json!({"prompt": "short", "max_tokens": 2}).to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
}

#[tokio::test]
async fn a_slowloris_connection_is_dropped_after_the_header_timeout_while_others_are_served() {
    let sim = start(&format!("{SPEC} --header-timeout-secs 1")).await;
    let mut slow = TcpStream::connect(sim.addr).await.unwrap();
    let opened = Instant::now();
    slow.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();

    // A normal client meanwhile is served as usual.
    let r = post(
        sim.addr,
        "/v1/completions",
        &json!({"prompt": "hello", "max_tokens": 3, "ignore_eos": true}).to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["usage"]["completion_tokens"], 3);

    // The stalled one is closed (EOF or reset, perhaps after a 408) once its time is up.
    let closed = timeout(Duration::from_secs(5), async {
        let mut tmp = [0u8; 1024];
        loop {
            match slow.read(&mut tmp).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "a stalled request head was still open after 5 s"
    );
    let after = opened.elapsed();
    assert!(
        after >= Duration::from_millis(900),
        "closed after {after:?}, before the 1 s header timeout"
    );
}

#[tokio::test]
async fn connections_over_the_cap_get_a_json_503_and_the_slot_frees_on_close() {
    let sim = start(&format!("{SPEC} --max-connections 1")).await;
    let holder = TcpStream::connect(sim.addr).await.unwrap();
    // Let the server accept the first connection before the second arrives.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = get(sim.addr, "/health").await;
    assert_eq!(r.status, 503, "{}", r.text());
    let body = r.json();
    assert_eq!(body["error"]["code"], 503, "{body}");
    assert_eq!(body["error"]["type"], "ServiceUnavailableError", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("connection limit (1"),
        "{body}"
    );

    drop(holder);
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let r = get(sim.addr, "/health").await;
        if r.status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the slot never freed: {}",
            r.status
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn rejected(addr: std::net::SocketAddr, path: &str, body: Value) -> Value {
    let r = post(addr, path, &body.to_string()).await;
    assert_eq!(r.status, 400, "{body}: {}", r.text());
    let v = r.json();
    assert_eq!(v["error"]["type"], "BadRequestError", "{v}");
    assert_eq!(v["error"]["code"], 400, "{v}");
    v
}

#[tokio::test]
async fn negative_temperature_is_a_400() {
    let sim = start(SPEC).await;
    let v = rejected(
        sim.addr,
        "/v1/completions",
        json!({"prompt": "hi", "max_tokens": 2, "temperature": -1}),
    )
    .await;
    assert_eq!(v["error"]["param"], "temperature", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("temperature must be non-negative, got -1"),
        "{v}"
    );
    let v = rejected(
        sim.addr,
        "/v1/chat/completions",
        json!({"messages": [{"role": "user", "content": "hi"}], "top_p": 1.5}),
    )
    .await;
    assert_eq!(v["error"]["param"], "top_p", "{v}");
}

#[tokio::test]
async fn max_tokens_of_two_to_the_32_is_a_400_range_error() {
    let sim = start(SPEC).await;
    for (path, body) in [
        (
            "/v1/completions",
            json!({"prompt": [1, 2], "max_tokens": 4_294_967_296_u64}),
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": i64::MAX}),
        ),
    ] {
        let v = rejected(sim.addr, path, body).await;
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(!msg.contains("non-negative"), "{v}");
        assert!(
            msg.contains("maximum context length is 4096 tokens. However, you requested"),
            "{v}"
        );
        assert_eq!(v["error"]["param"], "max_tokens", "{v}");
    }
    let v = rejected(
        sim.addr,
        "/v1/completions",
        json!({"prompt": "hi", "max_tokens": -1}),
    )
    .await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_tokens must be at least 1, got -1."),
        "{v}"
    );
}

#[tokio::test]
async fn shutdown_does_not_wait_for_idle_connections() {
    let sim = start(SPEC).await;
    let _idle = TcpStream::connect(sim.addr).await.unwrap();
    let mut kept_alive = TcpStream::connect(sim.addr).await.unwrap();
    kept_alive
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut tmp = [0u8; 1024];
    let n = kept_alive.read(&mut tmp).await.unwrap();
    assert!(String::from_utf8_lossy(&tmp[..n]).starts_with("HTTP/1.1 200"));
    // The default header timeout is 10 s; shutting down must not wait for it.
    let done = timeout(Duration::from_secs(3), sim.handle.shutdown()).await;
    assert!(done.is_ok(), "shutdown waited on idle connections");
    done.unwrap().unwrap();
}

#[tokio::test]
async fn a_body_that_stalls_is_given_up_on_after_the_header_timeout() {
    let sim = start(&format!("{SPEC} --header-timeout-secs 1")).await;
    let mut slow = TcpStream::connect(sim.addr).await.unwrap();
    let opened = Instant::now();
    slow.write_all(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"prompt\":",
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    let closed = timeout(Duration::from_secs(5), async {
        let mut tmp = [0u8; 1024];
        loop {
            match slow.read(&mut tmp).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&tmp[..n]),
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "a stalled body was still open after 5 s");
    assert!(opened.elapsed() >= Duration::from_millis(900));
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("\"code\":408"), "{text}");
}
