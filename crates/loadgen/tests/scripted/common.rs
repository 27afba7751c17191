//! Shared helpers: a client aimed at a scripted server, prepared requests, a run.

use std::sync::Arc;
use std::time::Duration;

use servebench_loadgen::{
    run_load, ApiKind, BackendClient, ClientOptions, LoadOutcome, LoadSpec, Prepared, StopSignal,
    Target,
};
use servebench_metrics::RequestRecord;
use servebench_testserver::{RequestLog, ScriptedServer};

pub const MS: u64 = 1_000_000;

pub fn target(base_url: &str, api: ApiKind) -> Target {
    Target {
        base_url: base_url.to_owned(),
        endpoint: match api {
            ApiKind::Completions => "/v1/completions".into(),
            ApiKind::Chat => "/v1/chat/completions".into(),
            ApiKind::Embeddings => "/v1/embeddings".into(),
            ApiKind::Rerank => "/v1/rerank".into(),
            ApiKind::Responses => "/v1/responses".into(),
        },
        api,
        model: "scripted-model".into(),
        headers: vec![],
        api_key: None,
        extra_body: serde_json::Map::new(),
        ignore_eos: true,
        transport: Default::default(),
    }
}

pub fn client(base_url: &str, api: ApiKind, options: ClientOptions) -> Arc<BackendClient> {
    Arc::new(BackendClient::new(target(base_url, api), options).unwrap())
}

/// `n` requests; request `i` asks for `max_tokens(i)`.
pub fn requests(
    client: &BackendClient,
    n: u64,
    max_tokens: impl Fn(u64) -> Option<u64>,
) -> Vec<Prepared> {
    (0..n)
        .map(|i| client.prepare(i, "a short test prompt", 4, max_tokens(i)))
        .collect()
}

pub async fn run(
    client: Arc<BackendClient>,
    requests: Vec<Prepared>,
    schedule: Vec<u64>,
    max_concurrency: Option<usize>,
    stop: StopSignal,
) -> LoadOutcome {
    let spec = LoadSpec {
        schedule,
        max_concurrency,
        progress: None,
        scrape_every: None,
        start_at: None,
    };
    tokio::time::timeout(
        Duration::from_secs(60),
        run_load(client, requests, spec, None, stop),
    )
    .await
    .expect("the run finished within 60 s")
    .expect("the run started")
}

/// The server's log entry for each record, joined through `x-request-id`.
pub fn joined<'a>(
    records: &'a [RequestRecord],
    log: &'a [RequestLog],
) -> Vec<(&'a RequestRecord, &'a RequestLog)> {
    records
        .iter()
        .map(|r| {
            let entry = log
                .iter()
                .find(|e| e.record_id() == Some(r.id))
                .unwrap_or_else(|| {
                    panic!(
                        "no server log entry carries x-request-id servebench-{}",
                        r.id
                    )
                });
            (r, entry)
        })
        .collect()
}

/// Waits for the server to log `n` requests (it logs after its last write, which may be a
/// moment after the client has read it).
pub async fn settled_log(server: &ScriptedServer, n: usize) -> Vec<RequestLog> {
    let log = server.wait_for_log(n, Duration::from_secs(10)).await;
    assert!(
        log.len() >= n,
        "the server logged {} of {n} requests",
        log.len()
    );
    log
}

pub fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Tests of this binary run one at a time: each measures timing, and on two cores a
/// neighbour's 256 streams would be measured as its own lateness.
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SERIAL.lock().await
}
