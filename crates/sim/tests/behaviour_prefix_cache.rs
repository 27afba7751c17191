//! docs/simulator.md §10.4: a warm shared prefix lowers TTFT; hit accounting matches the
//! requests' `cached_tokens`; a reset restores the cold figure; usage returns to ≈ 0.
#![allow(clippy::unwrap_used)]

mod behaviour_support;

use behaviour_support::{assert_near, config, random_tokens, request, Setup};
use servebench_sim::virtual_time::{RequestTrace, VirtualArrival, VirtualDriver};

/// Sends one request of `shared ++ unique` at concurrency 1 and runs it to completion.
fn send(driver: &mut VirtualDriver, id: u64, shared: &[u32], unique: u32) -> RequestTrace {
    let mut prompt = shared.to_vec();
    prompt.extend(random_tokens(1_000 + id, unique));
    let at = driver.now_ns();
    driver.submit(VirtualArrival {
        intended_ns: at,
        request: request(id, prompt, 16),
    });
    driver.run_until_idle().unwrap();
    driver.traces().last().unwrap().clone()
}

fn ttft_s(t: &RequestTrace) -> f64 {
    (t.token_times_ns[0] - t.sent_ns) as f64 * 1e-9
}

fn cold_and_warm(shared_len: u32, unique: u32, cold: f64, warm: f64) {
    let mut driver = VirtualDriver::new(config(&Setup::default()), Some(1)).unwrap();
    let shared = random_tokens(42, shared_len);
    let first = send(&mut driver, 0, &shared, unique);
    assert_eq!(first.cached_tokens, 0);
    assert_near(
        &format!("cold TTFT, {shared_len} + {unique}"),
        ttft_s(&first),
        cold,
        0.2,
    );
    let mut warm_ttfts = Vec::new();
    for id in 1..6 {
        let t = send(&mut driver, id, &shared, unique);
        assert_eq!(
            t.cached_tokens, shared_len,
            "warm requests hit the whole shared prefix"
        );
        warm_ttfts.push(ttft_s(&t));
    }
    let warm_ttft = behaviour_support::mean(&warm_ttfts);
    eprintln!(
        "{shared_len} + {unique}: cold {:.1} ms, warm {:.1} ms",
        ttft_s(&first) * 1e3,
        warm_ttft * 1e3
    );
    assert!(
        warm_ttft < ttft_s(&first) / 3.0,
        "a warm prefix must cut TTFT"
    );
    assert_near(
        &format!("warm TTFT, {shared_len} + {unique}"),
        warm_ttft,
        warm,
        0.2,
    );

    // Hits / queries equals Σ cached_tokens / Σ prompt tokens exactly.
    let m = driver.core().metrics();
    let cached: u64 = driver
        .traces()
        .iter()
        .map(|t| u64::from(t.cached_tokens))
        .sum();
    let prompt: u64 = driver
        .traces()
        .iter()
        .map(|t| u64::from(t.prompt_tokens))
        .sum();
    assert_eq!(m.prefix_cache_hits_total, cached);
    assert_eq!(m.prefix_cache_queries_total, prompt);
    // Free cached blocks count as free: usage is back to 0 though the cache is full.
    assert!(driver.core().kv_cache_usage().abs() < 1e-9);
    assert!(m.kv_cache_usage_perc.abs() < 1e-9);

    // A reset restores the cold figure.
    assert!(driver.reset_prefix_cache());
    let after = send(&mut driver, 100, &shared, unique);
    assert_eq!(after.cached_tokens, 0);
    assert_near("TTFT after a reset", ttft_s(&after), ttft_s(&first), 0.01);
}

#[test]
fn a_warm_2048_token_prefix_lowers_ttft() {
    cold_and_warm(2048, 128, 0.056, 0.0085);
}

#[test]
fn a_warm_3840_token_prefix_lowers_ttft() {
    cold_and_warm(3840, 256, 0.106, 0.011);
}

#[test]
fn reset_is_refused_while_a_request_holds_blocks() {
    let mut driver = VirtualDriver::new(config(&Setup::default()), None).unwrap();
    driver.submit(VirtualArrival {
        intended_ns: 0,
        request: request(1, random_tokens(1, 100), 50),
    });
    // Admit it and run a few steps, then try.
    for _ in 0..3 {
        driver.step().unwrap();
    }
    assert!(driver.core().num_running() == 1);
    assert!(!driver.reset_prefix_cache());
    driver.run_until_idle().unwrap();
    assert!(driver.reset_prefix_cache());
}
