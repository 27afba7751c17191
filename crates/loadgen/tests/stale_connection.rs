//! Regression: a server that closes its connection right after each stream while advertising
//! keep-alive (llama.cpp's llama-server does) must not turn the next request into a failure.

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use servebench_loadgen::{
    run_load, ApiKind, BackendClient, ClientOptions, LoadSpec, StopSignal, Target,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const STREAM: &str = concat!(
    "data: {\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" b\",\"finish_reason\":\"length\"}]}\n\n",
    "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2,\"total_tokens\":6}}\n\n",
    "data: [DONE]\n\n",
);

/// Answers each connection's first request with a complete chunked SSE response that claims
/// keep-alive, then closes the socket after a short pause (so the client pools it first).
async fn closing_server(accepted: Arc<AtomicUsize>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            accepted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let mut got = Vec::new();
                // Read until the end of the headers plus the JSON body (small, one read or two).
                loop {
                    let n = sock.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&got);
                    if let Some(h) = text.find("\r\n\r\n") {
                        let len = text[..h]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if got.len() >= h + 4 + len {
                            break;
                        }
                    }
                }
                let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nKeep-Alive: timeout=5, max=100\r\nTransfer-Encoding: chunked\r\n\r\n";
                let body = format!("{:x}\r\n{STREAM}\r\n0\r\n\r\n", STREAM.len());
                let _ = sock.write_all(head.as_bytes()).await;
                let _ = sock.write_all(body.as_bytes()).await;
                let _ = sock.flush().await;
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                // Dropping the socket closes the connection the client believes is reusable.
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn requests_on_a_closed_keep_alive_connection_are_resent_not_failed() {
    let accepted = Arc::new(AtomicUsize::new(0));
    let base = closing_server(Arc::clone(&accepted)).await;
    let target = Target {
        base_url: base,
        endpoint: "/v1/completions".into(),
        api: ApiKind::Completions,
        model: "m".into(),
        headers: vec![],
        api_key: None,
        extra_body: serde_json::Map::new(),
        ignore_eos: true,
        transport: Default::default(),
    };
    let client = Arc::new(BackendClient::new(target, ClientOptions::default()).unwrap());
    let n = 6u64;
    let prepared = (0..n).map(|i| client.prepare(i, "p", 4, Some(2))).collect();
    // Back to back through one slot: each request takes the pooled connection of the previous
    // one before the server's close is seen.
    let schedule = vec![0; n as usize];
    let spec = LoadSpec {
        schedule,
        max_concurrency: Some(1),
        progress: None,
        scrape_every: None,
        start_at: None,
    };
    let out = run_load(client, prepared, spec, None, StopSignal::never())
        .await
        .unwrap();
    let failures: Vec<_> = out
        .records
        .iter()
        .filter_map(|r| r.failure.as_ref())
        .collect();
    assert!(failures.is_empty(), "{failures:?}");
    assert!(out.records.iter().all(|r| r.output_tokens == 2));
    // Each request is sent at most twice: once, and once more after a stale connection.
    assert!(out.records.iter().all(|r| r.resent <= 1));
    assert!(
        accepted.load(Ordering::SeqCst) >= n as usize,
        "every request needed a fresh connection"
    );
}
