//! `--engine trtllm` without chunked prefill admits at most TensorRT-LLM's `max_num_tokens`
//! (8192) of prompts into a step once it holds one, whatever `max_model_len` is: 5,000-token
//! prompts at concurrency 50 do not pile into one huge prefill step when `max_model_len` is
//! the model's 131,072 (issue 30: TTFT was +1,682 % and ITL −61 % against NIM's figures).
#![allow(clippy::unwrap_used)]

use servebench_sim::engine::NewRequest;
use servebench_sim::virtual_time::{run_virtual, VirtualArrival, VirtualWorkload};
use servebench_sim::SimArgs;

fn mean_ttft_and_tpot_ms(spec: &str) -> (f64, f64) {
    let sim = SimArgs::parse_spec(spec).unwrap().resolve().unwrap();
    let arrivals = (0..150u64)
        .map(|id| VirtualArrival {
            intended_ns: 0,
            request: NewRequest {
                id,
                prompt: (0..5000u64)
                    .map(|i| 1 + ((id * 7919 + i * 104_729) % 29_000) as u32)
                    .collect(),
                max_tokens: 500,
                min_tokens: 0,
                ignore_eos: true,
                seed: None,
                cache_salt: None,
                arrival_ns: 0,
                lora: None,
            },
        })
        .collect();
    let run = run_virtual(
        sim.engine,
        VirtualWorkload {
            arrivals,
            max_concurrency: Some(50),
        },
    )
    .unwrap();
    let n = run.traces.len() as f64;
    let ttft = run
        .traces
        .iter()
        .map(|t| t.ttft_ns().unwrap() as f64)
        .sum::<f64>()
        / n;
    let tpot = run.traces.iter().map(|t| t.tpot_ns().unwrap()).sum::<f64>() / n;
    (ttft * 1e-6, tpot * 1e-6)
}

#[test]
fn long_prompts_at_concurrency_50_do_not_collapse_with_the_default_max_model_len() {
    let base = "llama-3.1-70b --gpu h100 --tensor-parallel-size 2 --dtype fp8 \
                --kv-cache-dtype fp8 --engine trtllm --jitter-sigma 0";
    let sized = mean_ttft_and_tpot_ms(&format!("{base} --max-model-len 5500"));
    let default = mean_ttft_and_tpot_ms(base);
    eprintln!("TTFT / TPOT: max_model_len 5500 {sized:?} ms, default {default:?} ms");
    // The same engine work either way: one 5,000-token prompt per step.
    assert!(
        (default.0 / sized.0 - 1.0).abs() < 0.1,
        "TTFT {default:?} vs {sized:?}"
    );
    assert!(
        (default.1 / sized.1 - 1.0).abs() < 0.1,
        "TPOT {default:?} vs {sized:?}"
    );
    // An explicit budget is the user's: it holds as many prompts as fit.
    let r = SimArgs::parse_spec(&format!("{base} --max-num-batched-tokens 131072"))
        .unwrap()
        .resolve()
        .unwrap();
    assert_eq!(r.engine.prompt_tokens_per_step_cap, 0);
    let r = SimArgs::parse_spec(base).unwrap().resolve().unwrap();
    assert_eq!(r.engine.prompt_tokens_per_step_cap, 8192);
    assert_eq!(r.engine.max_num_batched_tokens, 131_072);
}
