//! Regression: a server that reads each request and closes the connection without answering
//! must receive each request exactly once (the HTTP client used to resend on its own: 5
//! requests became 40 POSTs), and each must be recorded as a failure with its kind.

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use servebench_loadgen::{
    run_load, ApiKind, BackendClient, ClientOptions, LoadSpec, StopSignal, Target,
};
use servebench_metrics::FailureKind;
use tokio::io::AsyncReadExt;

/// Counts the POSTs it reads, then drops the connection without a byte of answer.
async fn silent_closing_server(posts: Arc<AtomicUsize>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let posts = Arc::clone(&posts);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let mut got = Vec::new();
                loop {
                    let n = sock.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                    if String::from_utf8_lossy(&got).contains("\r\n\r\n") {
                        break;
                    }
                }
                posts.fetch_add(
                    String::from_utf8_lossy(&got).matches("POST ").count(),
                    Ordering::SeqCst,
                );
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn a_request_the_server_reads_and_drops_is_sent_exactly_once() {
    let posts = Arc::new(AtomicUsize::new(0));
    let base = silent_closing_server(Arc::clone(&posts)).await;
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
    let n = 5u64;
    let prepared = (0..n).map(|i| client.prepare(i, "p", 4, Some(2))).collect();
    let spec = LoadSpec {
        schedule: vec![0; n as usize],
        max_concurrency: Some(1),
        progress: None,
        scrape_every: None,
        start_at: None,
    };
    let out = run_load(client, prepared, spec, None, StopSignal::never())
        .await
        .unwrap();
    // Let the server count what it read from the last connection.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert_eq!(posts.load(Ordering::SeqCst), n as usize, "POSTs received");
    assert_eq!(out.records.len(), n as usize);
    for r in &out.records {
        let f = r.failure.as_ref().expect("a dropped request is a failure");
        assert_eq!(f.kind, FailureKind::Transport, "{f:?}");
        assert_eq!(r.resent, 0, "a fresh connection is never resent");
    }
}
