//! Speculative decoding in the simulator (docs/simulator.md §16, issue 28 item 4): drafts are
//! verified in the next step, a prefix of them is accepted at the configured rates, vLLM's
//! `vllm:spec_decode_*` counters on `/metrics` measure the acceptance, and at batch 1 the time
//! per output token falls.
#![allow(clippy::unwrap_used)]

mod server_common;

use serde_json::json;
use servebench_sim::engine::NewRequest;
use servebench_sim::virtual_time::{run_virtual, VirtualArrival, VirtualRun, VirtualWorkload};
use servebench_sim::SimArgs;
use server_common::*;

const BASE: &str = "llama-3.1-8b --gpu h100 --jitter-sigma 0 --max-model-len 8192";

fn prompt(key: u64, n: u32) -> Vec<u32> {
    (0..n)
        .map(|i| 1 + ((key * 7919 + u64::from(i) * 104_729) % 29_000) as u32)
        .collect()
}

/// `requests` requests of 128 prompt tokens and `output` output tokens at concurrency `conc`.
fn run(spec: &str, requests: u64, output: u32, conc: usize) -> VirtualRun {
    let sim = SimArgs::parse_spec(spec).unwrap().resolve().unwrap();
    let arrivals = (0..requests)
        .map(|id| VirtualArrival {
            intended_ns: 0,
            request: NewRequest {
                id,
                prompt: prompt(id, 128),
                max_tokens: output,
                min_tokens: 0,
                ignore_eos: true,
                seed: None,
                cache_salt: None,
                arrival_ns: 0,
                lora: None,
            },
        })
        .collect();
    run_virtual(
        sim.engine,
        VirtualWorkload {
            arrivals,
            max_concurrency: Some(conc),
        },
    )
    .unwrap()
}

fn mean_tpot_ms(run: &VirtualRun) -> f64 {
    let v: Vec<f64> = run.traces.iter().filter_map(|t| t.tpot_ns()).collect();
    v.iter().sum::<f64>() / v.len() as f64 * 1e-6
}

#[test]
fn three_tokens_at_acceptance_0_7_measure_0_7_and_lower_tpot_at_batch_1() {
    let eagle = format!(
        "{BASE} --speculative-method eagle --num-speculative-tokens 3 --spec-acceptance-rate 0.7"
    );
    let plain = run(BASE, 8, 512, 1);
    let spec = run(&eagle, 8, 512, 1);
    // Every request still gets exactly its tokens.
    for t in &spec.traces {
        assert_eq!(t.completion_tokens, 512);
        assert_eq!(t.token_times_ns.len(), 512);
    }
    let m = spec.metrics.spec_decode.as_ref().unwrap();
    let rate = m.num_accepted_tokens as f64 / m.num_draft_tokens as f64;
    assert!((rate - 0.70).abs() <= 0.02, "acceptance {rate}");
    assert_eq!(m.num_draft_tokens, 3 * m.num_drafts);
    // Per-position rates fall, and position 0 is accepted whenever any is.
    let pos: Vec<f64> = m
        .num_accepted_tokens_per_pos
        .iter()
        .map(|&n| n as f64 / m.num_drafts as f64)
        .collect();
    assert!(pos[0] >= pos[1] && pos[1] >= pos[2], "{pos:?}");
    // Mean acceptance length 1 + 0.7·3 = 3.1 tokens per verification step; the step costs
    // more (4 tokens verified, three EAGLE passes), so TPOT falls by less than 3.1×.
    let (a, b) = (mean_tpot_ms(&plain), mean_tpot_ms(&spec));
    eprintln!(
        "TPOT at batch 1: {a:.3} ms without, {b:.3} ms with EAGLE (k 3, acceptance {rate:.3})"
    );
    assert!(b < a, "speculation must lower TPOT at batch 1: {b} vs {a}");
    assert!(b > a / 3.1, "{b} vs {a}");
    assert!(plain.metrics.spec_decode.is_none());
}

#[test]
fn per_position_rates_are_what_the_counters_measure() {
    let spec = format!("{BASE} --speculative-method ngram --spec-acceptance-rates 0.8,0.5,0.3,0.1");
    let r = run(&spec, 16, 400, 4);
    let m = r.metrics.spec_decode.as_ref().unwrap();
    for (i, want) in [0.8, 0.5, 0.3, 0.1].iter().enumerate() {
        let got = m.num_accepted_tokens_per_pos[i] as f64 / m.num_drafts as f64;
        assert!((got - want).abs() < 0.03, "position {i}: {got} vs {want}");
    }
}

#[test]
fn a_draft_model_costs_more_than_eagle_and_ngram_nothing() {
    // Same acceptance, same k: the n-gram proposer drafts for free, an EAGLE layer costs about
    // one target layer and the LM head per draft token, an 8B draft model a whole 8B pass.
    let common = "--num-speculative-tokens 4 --spec-acceptance-rate 0.6";
    let tpot = |method: &str| {
        mean_tpot_ms(&run(
            &format!("llama-3.1-70b --gpu h100 --tensor-parallel-size 4 --jitter-sigma 0 --max-model-len 8192 {common} {method}"),
            4,
            256,
            1,
        ))
    };
    let ngram = tpot("--speculative-method ngram");
    let eagle = tpot("--speculative-method eagle");
    let draft = tpot("--speculative-method draft_model --speculative-model llama-3.1-8b");
    eprintln!(
        "70B TP 4, k 4 at 0.6: ngram {ngram:.2} ms, eagle {eagle:.2} ms, 8B draft {draft:.2} ms"
    );
    assert!(ngram < eagle && eagle < draft, "{ngram} {eagle} {draft}");
}

#[test]
fn vllm_speculative_config_json_is_accepted_and_flags_override_it() {
    let json = r#"{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 5}"#;
    let r = SimArgs::parse_spec(&format!(
        "{BASE} --speculative-config '{json}' --num-speculative-tokens 2 --spec-acceptance-rate 0.5"
    ))
    .unwrap()
    .resolve()
    .unwrap();
    let s = &r.config_json["speculative_config"];
    assert_eq!(s["method"], "eagle3");
    assert_eq!(s["num_speculative_tokens"], 2);
    assert!((s["acceptance_rate"].as_f64().unwrap() - 0.5).abs() < 1e-9);
    for (bad, says) in [
        ("--speculative-method eagle --num-speculative-tokens 3", "acceptance"),
        ("--speculative-method medusa --num-speculative-tokens 3 --spec-acceptance-rate 0.5", "not ngram"),
        ("--speculative-method eagle --spec-acceptance-rate 0.5", "--num-speculative-tokens"),
        ("--speculative-method ngram --spec-acceptance-rates 0.5,0.7", "cannot rise"),
        ("--speculative-method draft_model --num-speculative-tokens 2 --spec-acceptance-rate 0.5", "--speculative-model"),
        ("--speculative-config '[1]' --spec-acceptance-rate 0.5", "JSON object"),
        ("--speculative-method ngram --spec-acceptance-rate 0.5 --spec-acceptance-rates 0.5", "not both"),
        ("--speculative-method ngram --num-speculative-tokens 3 --spec-acceptance-rate 1.5", "[0, 1]"),
        ("--speculative-method ngram --num-speculative-tokens 2 --spec-acceptance-rates 0.9,0.5,0.2", "3 per-position"),
    ] {
        let err = SimArgs::parse_spec(&format!("{BASE} {bad}"))
            .unwrap()
            .resolve()
            .err()
            .unwrap_or_else(|| panic!("{bad} was accepted"))
            .to_string();
        assert!(err.contains(says), "{bad}: {err}");
    }
}

#[tokio::test]
async fn the_counters_are_on_metrics_under_vllms_names() {
    let sim = start(
        "--jitter-sigma 0 --eos-len-median 0 --max-model-len 4096 --served-model-name m \
         --speculative-method eagle --num-speculative-tokens 3 --spec-acceptance-rate 0.7",
    )
    .await;
    let r = post(
        sim.addr,
        "/v1/completions",
        &json!({"model": "m", "prompt": "one two three", "max_tokens": 200, "ignore_eos": true})
            .to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["usage"]["completion_tokens"], 200);
    let page = wait_metrics(sim.addr, "spec decode counters", |p| {
        metric(p, "vllm:spec_decode_num_drafts_total", &[]).is_some_and(|n| n > 0.0)
    })
    .await;
    let drafts = metric(&page, "vllm:spec_decode_num_drafts_total", &[]).unwrap();
    let draft_tokens = metric(&page, "vllm:spec_decode_num_draft_tokens_total", &[]).unwrap();
    let accepted = metric(&page, "vllm:spec_decode_num_accepted_tokens_total", &[]).unwrap();
    assert_eq!(draft_tokens, 3.0 * drafts);
    // 199 tokens after the first come from `drafts` verification steps of 1 + accepted each
    // (the last step may yield more than the request still needed).
    assert!(
        drafts + accepted >= 199.0 && drafts <= 199.0,
        "{drafts} {accepted}"
    );
    for pos in 0..3 {
        let p = format!("position=\"{pos}\"");
        assert!(
            metric(
                &page,
                "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                &[&p]
            )
            .is_some(),
            "position {pos} missing:\n{page}"
        );
    }
    assert!(page.contains("# TYPE vllm:spec_decode_num_drafts_total counter"));
    // Without speculation vLLM registers none of them.
    let plain = start("--jitter-sigma 0 --max-model-len 4096").await;
    assert!(!metrics(plain.addr).await.contains("spec_decode"));
    sim.handle.shutdown().await.unwrap();
    plain.handle.shutdown().await.unwrap();
}
