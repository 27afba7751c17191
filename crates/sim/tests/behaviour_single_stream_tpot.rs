//! docs/simulator.md §10.2: single-stream TPOT sits at the bandwidth prediction, never below the
//! weight-streaming floor, and creeps up with context.
#![allow(clippy::unwrap_used)]

mod behaviour_support;

use behaviour_support::{assert_near, config, random_tokens, request, Setup};
use servebench_sim::virtual_time::{run_virtual, VirtualArrival, VirtualWorkload};

fn single_stream_tpot(prompt: u32, output: u32) -> f64 {
    let workload = VirtualWorkload {
        arrivals: vec![VirtualArrival {
            intended_ns: 0,
            request: request(1, random_tokens(7, prompt), output),
        }],
        max_concurrency: Some(1),
    };
    let run = run_virtual(config(&Setup::default()), workload).unwrap();
    let t = &run.traces[0];
    assert_eq!(t.completion_tokens, output);
    assert_eq!(t.token_times_ns.len(), output as usize);
    t.tpot_ns().unwrap() * 1e-9
}

#[test]
fn single_stream_tpot_sits_at_the_bandwidth_prediction() {
    let d = behaviour_support::deployment();
    let tpot = single_stream_tpot(256, 1024);
    eprintln!("TPOT 256/1024: {:.3} ms", tpot * 1e3);
    assert_near("TPOT, 256 in / 1024 out", tpot, 0.00694, 0.2);
    // t_ovh + t_req + W_step / (BW · MBU): the bandwidth prediction.
    let predicted = d.t_ovh() + 4e-6 + d.weights_per_step_bytes(1) / d.effective_bandwidth();
    assert_near(
        "TPOT against the bandwidth prediction",
        tpot,
        predicted,
        0.02,
    );
    let floor = d.weights_per_step_bytes(1) / d.peak_bandwidth();
    assert!(
        tpot > floor,
        "TPOT {tpot} below the bandwidth floor {floor}"
    );
    assert_near("bandwidth floor", floor, 0.00448, 0.05);
}

#[test]
fn single_stream_tpot_creeps_up_with_context() {
    let short = single_stream_tpot(256, 1024);
    let long = single_stream_tpot(8192, 1024);
    eprintln!("TPOT 8k/1024: {:.3} ms", long * 1e3);
    assert!(
        long > short,
        "TPOT must grow with context ({long} vs {short})"
    );
    assert_near("TPOT at 8k context", long, 0.0073, 0.2);
}
