//! The simulator serving https with HTTP/2, measured through the client `servebench run`
//! uses: every inter-token gap is one engine step, within the 1.5 ms `sim_itl_client.rs` allows
//! over HTTP/1.1, and TTFT is what the same request gets over HTTP/1.1 on the same TLS server
//! (within 2 ms: the HTTP/2 preface and SETTINGS go first) and never less than the prefill
//! step, so a cold connection's handshake is not in it. Streams share the connection, so
//! records carry user-time stamps (the kernel's receive stamps are per connection); the bounds
//! hold all the same.
//!
//! A test binary of its own (not a module of `tests/it`): its bound reads wall-clock gaps, so it
//! must not share the CPU with other tests; cargo runs test binaries one at a time.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use servebench_loadgen::{
    run_load, ApiKind, BackendClient, ClientOptions, Http2Mode, LoadSpec, StopSignal, Target,
    Transport,
};
use servebench_roofline::SeqWork;
use servebench_sim::args::SimArgs;

const PROMPT_TOKENS: u32 = 256;
const OUTPUT_TOKENS: u64 = 64;

/// A self-signed certificate for 127.0.0.1 in a fresh directory: (dir, cert, key).
fn certificate() -> (std::path::PathBuf, String, String) {
    let dir = std::env::temp_dir().join(format!("servebench-itl-h2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (dir, c.display().to_string(), k.display().to_string())
}

/// One single-stream request over `http2`: median and 90th percentile of |measured gap − engine
/// step| in ms, its TTFT and the prefill step's time in ms; `None` when the simulator merged
/// steps (its handler fell behind).
async fn one_attempt(cert: &str, key: &str, http2: Http2Mode) -> Option<(f64, f64, f64, f64)> {
    let spec = format!(
        "llama-3.1-8b --gpu h100 --jitter-sigma 0 --precise-timing --tls-cert {cert} --tls-key {key}"
    );
    let sim = SimArgs::parse_spec(&spec).unwrap().resolve().unwrap();
    let deployment = sim.engine.deployment.clone();
    let tokenizer = sim.tokenizer.clone();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(servebench_sim::serve(listener, sim, async move {
        let _ = stopped.await;
    }));
    let target = Target {
        base_url: format!("https://{addr}"),
        endpoint: "/v1/completions".into(),
        api: ApiKind::Completions,
        model: "llama-3.1-8b".into(),
        headers: vec![],
        api_key: None,
        extra_body: serde_json::Map::new(),
        ignore_eos: true,
        transport: Transport {
            http2,
            ca_cert: Some(cert.into()),
            ..Transport::default()
        },
    };
    let client = Arc::new(BackendClient::new(target, ClientOptions::default()).unwrap());
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
    let out = run_load(
        Arc::clone(&client),
        prepared,
        spec,
        None,
        StopSignal::never(),
    )
    .await
    .unwrap();
    drop(stop);
    server.await.unwrap().unwrap();
    let protocol = if http2 == Http2Mode::On {
        "h2"
    } else {
        "http/1.1"
    };
    assert_eq!(client.connections().snapshot()[0].protocol, protocol);
    let r = &out.records[0];
    assert!(r.failure.is_none(), "{:?}", r.failure);
    if r.events.len() as u64 != OUTPUT_TOKENS {
        eprintln!("{} events for {OUTPUT_TOKENS} steps", r.events.len());
        return None;
    }
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
    let ttft = (r.events[0].t - r.sent) as f64 / 1e6;
    let prefill = deployment.step_time(&[SeqWork {
        new_tokens: PROMPT_TOKENS,
        context: 0,
        samples: true,
    }]);
    Some((
        errors[errors.len() / 2],
        errors[errors.len() * 9 / 10],
        ttft,
        prefill.total * 1e3,
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn itl_over_h2_matches_engine_step_times() {
    let (dir, cert, key) = certificate();
    // Timing on a shared 2-core machine: up to three attempts, so one descheduled burst does
    // not fail the test; a real offset (a wrong step time, a merged chunk) fails all three.
    let mut seen = Vec::new();
    for _ in 0..3 {
        let h1 = one_attempt(&cert, &key, Http2Mode::Off).await;
        let h2 = one_attempt(&cert, &key, Http2Mode::On).await;
        if let (Some((_, _, ttft_h1, _)), Some((median, p90, ttft_h2, prefill))) = (h1, h2) {
            eprintln!(
                "over h2: ITL error vs engine step median {median:.3} ms, p90 {p90:.3} ms; \
                 TTFT {ttft_h2:.3} ms (http/1.1: {ttft_h1:.3} ms, prefill step {prefill:.3} ms)"
            );
            if median <= 1.5
                && p90 <= 1.5
                && (ttft_h2 - ttft_h1).abs() <= 2.0
                && ttft_h2 >= prefill - 0.05
            {
                let _ = std::fs::remove_dir_all(&dir);
                return;
            }
        }
        seen.push((h1, h2));
    }
    let _ = std::fs::remove_dir_all(&dir);
    panic!(
        "(ITL median, ITL p90, TTFT, prefill step) in ms, http/1.1 then h2, over three attempts \
         (None: merged steps): {seen:?}"
    );
}
