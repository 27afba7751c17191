//! Performance of the virtual-time driver: one hour of Poisson traffic at 10 req/s
//! (Llama-3.1-8B, H100, 1k in / 256 out: ≈ 36k requests, ≈ 9.2M output tokens) must simulate
//! in under 30 s of CPU in a release build.
//!
//! Run with `cargo test --release -p servebench-sim --test engine_virtual_hour -- --ignored
//! --nocapture`; ignored by default because a debug build takes minutes.
#![allow(clippy::unwrap_used)]

mod behaviour_support;

use std::time::Instant;

use behaviour_support::{config, poisson, Setup, Summary};
use servebench_sim::virtual_time::{run_virtual, VirtualWorkload};

#[test]
#[ignore = "a release-build benchmark (minutes in a debug build)"]
fn one_hour_at_10_rps_simulates_quickly() {
    let rate = 10.0;
    let requests = (3600.0 * rate) as u64;
    let arrivals = poisson(requests, rate, 1024, 256, 11);
    let workload = VirtualWorkload {
        arrivals,
        max_concurrency: None,
    };
    let cfg = config(&Setup::default());
    let started = Instant::now();
    let run = run_virtual(cfg, workload).unwrap();
    let elapsed = started.elapsed().as_secs_f64();
    let s = Summary::of(&run);
    eprintln!(
        "{} requests, {} output tokens, {} steps, {:.0} s of engine time simulated in {:.2} s \
         (mean TPOT {:.2} ms, TTFT p50 {:.1} ms)",
        run.traces.len(),
        s.output_tokens,
        run.steps,
        run.end_ns as f64 * 1e-9,
        elapsed,
        s.mean_tpot() * 1e3,
        s.ttft_p50() * 1e3,
    );
    assert_eq!(s.output_tokens, requests * 256);
    if !cfg!(debug_assertions) {
        assert!(
            elapsed < 30.0,
            "an hour of traffic took {elapsed:.1} s to simulate"
        );
    }
}
