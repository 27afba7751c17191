//! docs/simulator.md §10.1: at concurrency 1, TTFT grows about linearly with prompt length,
//! slightly super-linearly from attention; long prompts take several chunks.
#![allow(clippy::unwrap_used)]

mod behaviour_support;

use behaviour_support::{assert_near, config, random_tokens, request, Setup};
use servebench_sim::virtual_time::{run_virtual, VirtualArrival, VirtualWorkload};

/// TTFT (s) of one request of `prompt` tokens on an idle engine, and the steps it took.
fn idle_ttft(setup: &Setup, prompt: u32) -> (f64, u64) {
    let workload = VirtualWorkload {
        arrivals: vec![VirtualArrival {
            intended_ns: 0,
            request: request(1, random_tokens(prompt.into(), prompt), 1),
        }],
        max_concurrency: None,
    };
    let run = run_virtual(config(setup), workload).unwrap();
    let t = &run.traces[0];
    (t.token_times_ns[0] as f64 * 1e-9, run.steps)
}

#[test]
fn ttft_grows_about_linearly_with_prompt_length() {
    let setup = Setup::default();
    let table = [
        (128, 0.0083),
        (512, 0.0158),
        (1024, 0.0275),
        (2048, 0.0525),
        (4096, 0.1058),
        (8192, 0.224),
    ];
    let mut prev = 0.0;
    let mut got = Vec::new();
    for (prompt, want) in table {
        let (ttft, steps) = idle_ttft(&setup, prompt);
        eprintln!("TTFT at {prompt} tokens: {:.2} ms", ttft * 1e3);
        assert_eq!(steps, 1, "a prompt within the budget is one step");
        assert!(ttft > prev, "TTFT must grow with the prompt");
        assert_near(&format!("TTFT at {prompt} tokens"), ttft, want, 0.2);
        prev = ttft;
        got.push(ttft);
    }
    // ≈ 26 µs per token between 1k and 8k.
    let slope = (got[5] - got[2]) / (8192.0 - 1024.0);
    assert_near("TTFT slope per token", slope, 26e-6, 0.2);
    // Super-linear from attention: doubling 4k → 8k more than doubles TTFT (≈ 2.1×).
    let ratio = got[5] / got[4];
    assert!(ratio > 2.0, "8k/4k TTFT ratio {ratio} should exceed 2");
    assert_near("8k/4k TTFT ratio", ratio, 2.1, 0.2);
}

#[test]
fn prompts_beyond_the_budget_take_several_chunks() {
    let (ttft, steps) = idle_ttft(&Setup::default(), 16_384);
    eprintln!("TTFT at 16k tokens: {:.1} ms", ttft * 1e3);
    assert_eq!(steps, 2, "16k tokens with an 8192 budget are two chunks");
    assert_near("TTFT at 16k tokens", ttft, 0.508, 0.2);

    let small = Setup {
        max_num_batched_tokens: 2048,
        max_num_seqs: 1024,
        ..Setup::default()
    };
    let (ttft_small, steps) = idle_ttft(&small, 8192);
    eprintln!("TTFT at 8k tokens, budget 2048: {:.1} ms", ttft_small * 1e3);
    assert_eq!(steps, 4, "8k tokens with a 2048 budget are four chunks");
    assert_near("TTFT at 8k tokens, budget 2048", ttft_small, 0.232, 0.2);
    // Overheads and weights are paid four times instead of once.
    let (ttft_one, _) = idle_ttft(&Setup::default(), 8192);
    assert!(ttft_small > ttft_one);
}
