//! A fleet behind the real-time HTTP server: both replicas serve, responses name them, the
//! pool's rate limit answers 429, and `/metrics` carries pool and replica labels. Time is
//! scaled ×20 so the test takes well under a second; nothing here depends on timing.
#![allow(clippy::unwrap_used)]

mod server_common;

use server_common::*;

const BODY: &str = r#"{"prompt":"hello fleet","max_tokens":4,"ignore_eos":true}"#;

#[tokio::test]
async fn two_replicas_both_serve_and_metrics_are_labelled() {
    let sim = start("--replicas 2 --time-scale 20 --port 0").await;
    let mut replicas = Vec::new();
    for _ in 0..4 {
        let r = post(sim.addr, "/v1/completions", BODY).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-servebench-pool"), Some("default"));
        replicas.push(r.header("x-servebench-replica").unwrap().to_owned());
    }
    assert_eq!(replicas, ["0", "1", "0", "1"]);
    let stream = post(
        sim.addr,
        "/v1/completions",
        r#"{"prompt":"hello fleet","max_tokens":4,"ignore_eos":true,"stream":true}"#,
    )
    .await;
    assert!(stream.done());
    assert_eq!(stream.header("x-servebench-replica"), Some("0"));

    let page = wait_metrics(sim.addr, "five requests", |p| {
        metric(
            p,
            "vllm:request_success_total",
            &[r#"replica="0""#, r#"finished_reason="length""#],
        ) == Some(3.0)
            && metric(
                p,
                "vllm:request_success_total",
                &[r#"replica="1""#, r#"finished_reason="length""#],
            ) == Some(2.0)
    })
    .await;
    assert_eq!(
        metric(
            &page,
            "vllm:generation_tokens_total",
            &[r#"pool="default""#, r#"replica="1""#]
        ),
        Some(8.0)
    );
    // One HELP line per metric even with two engines.
    assert_eq!(
        page.matches("# HELP vllm:generation_tokens_total ").count(),
        1
    );
}

#[tokio::test]
async fn a_single_engine_page_has_no_fleet_labels() {
    let sim = start("--time-scale 20 --port 0").await;
    let r = post(sim.addr, "/v1/completions", BODY).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-servebench-pool"), None);
    assert!(!metrics(sim.addr).await.contains("pool="));
}

#[tokio::test]
async fn above_the_rate_limit_the_pool_answers_429() {
    // A bucket of 2 refilled at one request per 100 s: the third request at once is refused.
    let sim =
        start("--replicas 1 --rate-limit 0.01 --rate-limit-burst 2 --time-scale 20 --port 0").await;
    let codes: Vec<u16> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(post(sim.addr, "/v1/completions", BODY).await.status);
        }
        v
    };
    assert_eq!(codes, [200, 200, 429]);
}

#[tokio::test]
async fn pooling_requests_go_through_the_router_and_name_their_replica() {
    let sim = start("--replicas 2 --time-scale 20 --port 0 --served-model-name test-model").await;
    let embed = r#"{"model":"test-model","input":["one text","another text"]}"#;
    let rerank = r#"{"model":"test-model","query":"q","documents":["a","b","c"]}"#;
    let mut replicas = Vec::new();
    for (path, body) in [
        ("/v1/embeddings", embed),
        ("/v1/rerank", rerank),
        ("/v1/embeddings", embed),
        ("/rerank", rerank),
    ] {
        let r = post(sim.addr, path, body).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert_eq!(r.header("x-servebench-pool"), Some("default"), "{path}");
        replicas.push(r.header("x-servebench-replica").unwrap().to_owned());
    }
    // Round-robin per HTTP request: all inputs of one request stay on one replica.
    assert_eq!(replicas, ["0", "1", "0", "1"]);
    let page = wait_metrics(sim.addr, "both replicas' pooling inputs", |p| {
        metric(p, "vllm:prompt_tokens_total", &[r#"replica="1""#]).is_some_and(|v| v > 0.0)
    })
    .await;
    assert!(
        metric(&page, "vllm:prompt_tokens_total", &[r#"replica="0""#]).is_some_and(|v| v > 0.0)
    );
}

#[tokio::test]
async fn a_pool_rate_limit_refuses_pooling_requests_too() {
    let sim =
        start(
        "--replicas 1 --rate-limit 0.01 --rate-limit-burst 1 --time-scale 20 --port 0 --served-model-name test-model",
    )
    .await;
    let embed = r#"{"model":"test-model","input":"one text"}"#;
    let first = post(sim.addr, "/v1/embeddings", embed).await;
    assert_eq!(first.status, 200, "{}", first.text());
    let second = post(sim.addr, "/v1/embeddings", embed).await;
    assert_eq!(second.status, 429, "{}", second.text());
}

#[tokio::test]
async fn a_single_engine_pooling_answer_names_no_pool() {
    let sim = start("--time-scale 20 --port 0 --served-model-name test-model").await;
    let r = post(
        sim.addr,
        "/v1/embeddings",
        r#"{"model":"test-model","input":"one text"}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-servebench-pool"), None);
}
