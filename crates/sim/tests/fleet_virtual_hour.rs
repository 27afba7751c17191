//! Performance of the fleet driver: one hour of Poisson traffic at 50 req/s on 8 replicas
//! (Llama-3.1-8B, H100 each, 1k in / 256 out: 180k requests, ≈ 46M output tokens) must
//! simulate in under 60 s on a 2-core machine in a release build.
//!
//! Run with `cargo test --release -p servebench-sim --test fleet_virtual_hour -- --ignored
//! --nocapture`; ignored by default because a debug build takes many minutes.
//! `SERVEBENCH_BENCH_SECS=300` simulates a 5-minute slice instead (the bound scales with it).
#![allow(clippy::unwrap_used)]

mod behaviour_support;

use std::time::Instant;

use behaviour_support::poisson;
use servebench_sim::fleet::run_fleet_virtual;
use servebench_sim::virtual_time::VirtualWorkload;
use servebench_sim::SimArgs;

#[test]
#[ignore = "a release-build benchmark (minutes in a debug build)"]
fn one_hour_at_50_rps_on_8_replicas_simulates_in_under_a_minute() {
    let secs: f64 = std::env::var("SERVEBENCH_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3600.0);
    let rate = 50.0;
    let requests = (secs * rate) as u64;
    let arrivals = poisson(requests, rate, 1024, 256, 11);
    let sim =
        SimArgs::parse_spec("llama-3.1-8b --gpu h100 --replicas 8 --router least-outstanding")
            .unwrap()
            .resolve()
            .unwrap();
    let fleet = sim.fleet.unwrap();
    let started = Instant::now();
    let run = run_fleet_virtual(
        &fleet,
        VirtualWorkload {
            arrivals,
            max_concurrency: None,
        },
        false,
    )
    .unwrap();
    let elapsed = started.elapsed().as_secs_f64();
    let tokens: u64 = run
        .run
        .traces
        .iter()
        .map(|t| u64::from(t.completion_tokens))
        .sum();
    eprintln!(
        "{} requests, {tokens} output tokens, {} steps, {:.0} s of engine time on 8 replicas \
         simulated in {elapsed:.2} s",
        run.run.traces.len(),
        run.run.steps,
        run.run.end_ns as f64 * 1e-9,
    );
    assert_eq!(tokens, requests * 256);
    if !cfg!(debug_assertions) {
        let bound = 60.0 * secs / 3600.0;
        assert!(
            elapsed < bound,
            "{secs} s of traffic took {elapsed:.1} s to simulate (bound {bound:.1} s)"
        );
    }
}
