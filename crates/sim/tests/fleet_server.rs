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
