//! The simulator's HTTP server measured through the same client code `servebench run` uses:
//! every inter-token gap a client sees is one engine step, within 1.5 ms of the step time the
//! cost model gives for that step.
//!
//! A test binary of its own (not a module of `tests/it`): its bound reads wall-clock gaps, so it
//! must not share the CPU with other tests; cargo runs test binaries one at a time.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use servebench_loadgen::{
    run_load, ApiKind, BackendClient, ClientOptions, LoadSpec, StopSignal, Target,
};
use servebench_roofline::SeqWork;
use servebench_sim::args::SimArgs;

const PROMPT_TOKENS: u32 = 256;
const OUTPUT_TOKENS: u64 = 64;

/// Median and 90th percentile of |measured gap − engine step| in ms for one single-stream request.
async fn one_attempt() -> (f64, f64) {
    let sim = SimArgs::parse_spec("llama-3.1-8b --gpu h100 --jitter-sigma 0 --precise-timing")
        .unwrap()
        .resolve()
        .unwrap();
    let deployment = sim.engine.deployment.clone();
    let tokenizer = sim.tokenizer.clone();
    let (addr, guard) = servebench_sim::spawn_in_process(sim).await.unwrap();
    let target = Target {
        base_url: format!("http://{addr}"),
        endpoint: "/v1/completions".into(),
        api: ApiKind::Completions,
        model: "llama-3.1-8b".into(),
        headers: vec![],
        api_key: None,
        extra_body: serde_json::Map::new(),
        ignore_eos: true,
        transport: Default::default(),
    };
    let client = Arc::new(BackendClient::new(target, ClientOptions::default()).unwrap());
    // A prompt of exactly PROMPT_TOKENS tokens under the simulator's tokenizer.
    let words: Vec<String> = tokenizer
        .filler_words()
        .into_iter()
        .map(|(w, _)| w)
        .collect();
    let prompt: String = (0..PROMPT_TOKENS as usize)
        .map(|i| words[i % words.len()].as_str())
        .collect();
    assert_eq!(tokenizer.count(&prompt), PROMPT_TOKENS as usize);
    let prepared = vec![client.prepare(0, &prompt, u64::from(PROMPT_TOKENS), Some(OUTPUT_TOKENS))];
    let spec = LoadSpec {
        schedule: vec![0],
        max_concurrency: Some(1),
        progress: None,
        scrape_every: None,
        start_at: None,
    };
    let out = run_load(client, prepared, spec, None, StopSignal::never())
        .await
        .unwrap();
    guard.shutdown().await.unwrap();
    let r = &out.records[0];
    assert!(r.failure.is_none(), "{:?}", r.failure);
    assert_eq!(
        r.events.len() as u64,
        OUTPUT_TOKENS,
        "one event per engine step"
    );
    // Gap k ends with the step that decodes on top of prompt + k + 1 computed tokens.
    let mut errors: Vec<f64> = r
        .events
        .windows(2)
        .enumerate()
        .map(|(k, w)| {
            let measured = (w[1].t - w[0].t) as f64 / 1e6;
            let step = deployment.step_time(&[SeqWork {
                new_tokens: 1,
                context: PROMPT_TOKENS + k as u32 + 1,
                samples: true,
            }]);
            (measured - step.total * 1e3).abs()
        })
        .collect();
    errors.sort_by(f64::total_cmp);
    (errors[errors.len() / 2], errors[errors.len() * 9 / 10])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn itl_seen_by_the_run_client_matches_engine_step_times() {
    // Timing on a shared 2-core machine: up to three attempts, so one descheduled burst does
    // not fail the test; a real offset (a wrong step time, a merged chunk) fails all three.
    let mut seen = Vec::new();
    for _ in 0..3 {
        let (median, p90) = one_attempt().await;
        eprintln!("ITL error vs engine step: median {median:.3} ms, p90 {p90:.3} ms");
        if median <= 1.5 && p90 <= 1.5 {
            return;
        }
        seen.push((median, p90));
    }
    panic!("ITL error (median, p90) in ms over three attempts: {seen:?}");
}
