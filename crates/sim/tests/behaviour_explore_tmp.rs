#![allow(clippy::unwrap_used)]
mod behaviour_support;
use behaviour_support::{config, poisson, Setup, Summary};
use servebench_sim::virtual_time::{run_virtual, VirtualWorkload};
#[test]
fn explore() {
    for seed in [1u64, 2, 3, 4, 5, 6] {
        for budget in [512u32, 2048, 8192, 16384] {
            let setup = Setup { max_num_batched_tokens: budget, ..Setup::default() };
            let workload = VirtualWorkload { arrivals: poisson(600, 6.0, 4000, 200, seed), max_concurrency: None };
            let s = Summary::of(&run_virtual(config(&setup), workload).unwrap());
            eprintln!("seed {seed} budget {budget}: TTFT p50 {:.0} ms, ITL p99 {:.1} ms, mean ITL {:.1} ms, {:.0} tok/s, mean TTFT {:.0}",
                s.ttft_p50() * 1e3, s.itl_p99() * 1e3, s.mean_itl() * 1e3, s.throughput(), behaviour_support::mean(&s.ttft)*1e3);
        }
    }
}
