//! docs/simulator.md §10.3: closed loop, 1024 in / 256 out. Throughput rises then flattens with
//! concurrency while TPOT worsens; at 512 the KV cache runs out (preemptions, a TTFT jump,
//! lower throughput); `max_num_seqs 8` keeps TPOT low but queues everyone else.
#![allow(clippy::unwrap_used)]

mod behaviour_support;

use behaviour_support::{assert_near, closed_loop, config, Setup, Summary};
use servebench_sim::virtual_time::{run_virtual, VirtualRun, VirtualWorkload};

/// Requests per closed-loop run: several rounds of the concurrency, so ramp-up and drain are
/// a small part of the run.
fn requests_for(concurrency: u64) -> u64 {
    (4 * concurrency).max(16)
}

fn run(setup: &Setup, concurrency: u64, requests: u64) -> VirtualRun {
    let workload = VirtualWorkload {
        arrivals: closed_loop(requests, 1024, 256),
        max_concurrency: Some(concurrency as usize),
    };
    run_virtual(config(setup), workload).unwrap()
}

#[test]
fn throughput_rises_then_flattens_while_tpot_worsens() {
    // concurrency, output tok/s, mean TPOT (s)
    let table = [
        (1, 142.0, 0.0070),
        (4, 530.0, 0.0072),
        (16, 1700.0, 0.0086),
        (64, 3700.0, 0.0156),
        (128, 4600.0, 0.025),
        (256, 5200.0, 0.044),
    ];
    let setup = Setup::default();
    let mut prev: Option<Summary> = None;
    for (c, tput, tpot) in table {
        let r = run(&setup, c, requests_for(c));
        let s = Summary::of(&r);
        eprintln!(
            "c={c}: {:.0} tok/s, mean TPOT {:.2} ms, ITL p99 {:.1} ms, TTFT p50 {:.1} ms, \
             preemptions {}",
            s.throughput(),
            s.mean_tpot() * 1e3,
            s.itl_p99() * 1e3,
            s.ttft_p50() * 1e3,
            s.preemptions
        );
        assert_eq!(s.preemptions, 0, "no preemption below the KV limit");
        assert_near(
            &format!("throughput at concurrency {c}"),
            s.throughput(),
            tput,
            0.2,
        );
        assert_near(
            &format!("mean TPOT at concurrency {c}"),
            s.mean_tpot(),
            tpot,
            0.2,
        );
        if c >= 64 {
            assert_near(
                &format!("ITL p99 at concurrency {c}"),
                s.itl_p99(),
                0.2,
                0.2,
            );
        }
        if let Some(p) = &prev {
            assert!(
                s.throughput() > p.throughput(),
                "throughput must rise with concurrency"
            );
            assert!(
                s.mean_tpot() > p.mean_tpot(),
                "TPOT must worsen with concurrency"
            );
        }
        prev = Some(s);
    }
}

#[test]
fn at_512_the_kv_cache_runs_out() {
    let setup = Setup::default();
    let at_256 = Summary::of(&run(&setup, 256, requests_for(256)));
    let r = run(&setup, 512, requests_for(512));
    let s = Summary::of(&r);
    eprintln!(
        "c=512: {:.0} tok/s, mean TPOT {:.2} ms, TTFT p50 {:.2} s, preemptions {}",
        s.throughput(),
        s.mean_tpot() * 1e3,
        s.ttft_p50(),
        s.preemptions
    );
    assert!(
        s.preemptions > 0,
        "512 × 1280 tokens exceed the 448k-token cache"
    );
    assert_eq!(r.metrics.num_preemptions_total, s.preemptions);
    assert!(
        s.ttft_p50() > 1.0,
        "TTFT p50 jumps to seconds ({} s)",
        s.ttft_p50()
    );
    assert!(
        s.throughput() < at_256.throughput(),
        "throughput falls past the KV limit"
    );
    assert_near("throughput at concurrency 512", s.throughput(), 4700.0, 0.2);
}

#[test]
fn max_num_seqs_8_keeps_tpot_but_queues_the_rest() {
    let setup = Setup {
        max_num_seqs: 8,
        ..Setup::default()
    };
    let workload = VirtualWorkload {
        arrivals: closed_loop(requests_for(64), 1024, 256),
        max_concurrency: Some(64),
    };
    let mut driver =
        servebench_sim::virtual_time::VirtualDriver::new(config(&setup), workload.max_concurrency)
            .unwrap();
    for a in workload.arrivals {
        driver.submit(a);
    }
    // Sample the waiting gauge while the client keeps 64 requests in flight (before the drain).
    let mut waiting = Vec::new();
    while driver.step().unwrap() {
        let core = driver.core();
        if driver.now_ns() > 5_000_000_000 && driver.num_pending() > 0 {
            waiting.push(core.metrics().num_requests_waiting as f64);
            assert!(core.num_running() <= 8);
        }
    }
    let r = driver.finish();
    let s = Summary::of(&r);
    let mean_waiting = behaviour_support::mean(&waiting);
    eprintln!(
        "max_num_seqs 8, c=64: {:.0} tok/s, mean TPOT {:.2} ms, TTFT p50 {:.2} s, waiting {:.1}",
        s.throughput(),
        s.mean_tpot() * 1e3,
        s.ttft_p50(),
        mean_waiting
    );
    assert_near("TPOT with max_num_seqs 8", s.mean_tpot(), 0.0074, 0.2);
    assert_near("TTFT p50 with max_num_seqs 8", s.ttft_p50(), 15.0, 0.2);
    // §10.3 states ≈ 0.76k tok/s, which §2–4 do not give: with 8 seats always full, each
    // cycle of 8 requests costs 255 decode steps at batch 8 (≈ 7.4 ms) plus 8 prefill steps
    // (≈ 25 ms each), 2048 tokens in ≈ 2.09 s ≈ 0.98k tok/s. Little's law on the section's own
    // TTFT p50 (15 s) and TPOT (7.4 ms) agrees: 64 / (15 + 255 · 0.0074) s × 256 ≈ 0.97k tok/s.
    // So the test holds the self-consistent figure and the direction (far below the
    // unconstrained 3.7k at concurrency 64).
    let littles_law = 64.0 / (15.0 + 255.0 * 0.0074) * 256.0;
    assert_near(
        "throughput with max_num_seqs 8",
        s.throughput(),
        littles_law,
        0.2,
    );
    assert!(s.throughput() < 0.4 * 3700.0);
    assert_near("waiting gauge with max_num_seqs 8", mean_waiting, 56.0, 0.2);
}
