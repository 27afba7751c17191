use servebench_roofline::{Catalog, Deployment, Dtype, KvDtype, GIB};

use super::*;

fn deployment(gpu: &str, model: &str, dtype: Dtype, kv: KvDtype, tp: u32) -> Deployment {
    let c = Catalog::builtin();
    Deployment::new(
        c.gpu(gpu).unwrap().clone(),
        c.model(model).unwrap().clone(),
        dtype,
        kv,
        tp,
    )
    .unwrap()
}

fn llama_h100() -> Deployment {
    deployment("h100", "llama-3.1-8b", Dtype::Bf16, KvDtype::Auto, 1)
}

fn close(actual: f64, expected: f64, rel_tol: f64) -> bool {
    (actual - expected).abs() <= rel_tol * expected.abs()
}

#[test]
fn worked_example_of_simulator_section_3_5() {
    let d = llama_h100();
    let p = predict(&d, &PredictOptions::defaults(&d)).unwrap();

    // Weights: W_res = 14.96 GiB, W_step = 15.009e9 B.
    assert!((p.weights.resident.value / GIB - 14.96).abs() < 0.005);
    assert!(close(p.weights.read_per_step.value, 15.009e9, 1e-4));
    assert!(close(
        p.weights.embedding_table.value,
        2.0 * 525_336_576.0,
        1e-12
    ));

    // The bandwidth floor: 4.48 ms without the input embedding table, 4.79 ms with it.
    assert!(
        (p.bandwidth.floor.value * 1e3 - 4.48).abs() < 0.005,
        "{}",
        p.bandwidth.floor.value
    );
    assert!(
        (p.bandwidth.floor_with_embeddings.value * 1e3 - 4.79).abs() < 0.005,
        "{}",
        p.bandwidth.floor_with_embeddings.value
    );
    // t_ovh + t_req + W_step/(BW·MBU) = 1.150 + 0.004 + 5.744 ≈ 6.9 ms.
    assert!((p.bandwidth.predicted_tpot.value * 1e3 - 6.898).abs() < 0.01);

    // Single-stream decode at context 1024: t_c 26.2 µs, t_m 5.796 ms, TPOT 6.95 ms, 144 tok/s.
    assert_eq!(p.decode.context, 1024);
    assert!((p.decode.step.t_c * 1e6 - 26.2).abs() < 0.1);
    assert!((p.decode.step.t_m * 1e3 - 5.796).abs() < 0.001);
    assert!(close(p.decode.step.flops, 15.55e9, 1e-3));
    assert!(close(p.decode.step.bytes, 15.144e9, 1e-3));
    assert!(
        (p.decode.tpot.value * 1e3 - 6.95).abs() < 0.005,
        "{}",
        p.decode.tpot.value
    );
    assert!((p.decode.tokens_per_s.value - 144.0).abs() < 0.5);

    // Prefill of 2048 tokens on an idle engine: one step, TTFT 52.5 ms.
    let p2048 = p
        .prefill
        .prompts
        .iter()
        .find(|x| x.prompt_len == 2048)
        .unwrap();
    assert_eq!(p2048.chunks, vec![2048]);
    assert!(
        (p2048.ttft.value * 1e3 - 52.5).abs() < 0.05,
        "{}",
        p2048.ttft.value
    );

    // KV: 131,072 B per token; 27,978 blocks, 447,648 tokens, 3.4× at 131,072.
    assert_eq!(p.kv.bytes_per_token.value, 131_072.0);
    let cap = p.kv.capacity.as_ref().unwrap();
    assert_eq!(cap.blocks.value, 27_978.0);
    assert_eq!(cap.tokens.value, 447_648.0);
    assert_eq!(cap.max_model_len, 131_072);
    assert!((cap.max_concurrency.value - 3.4).abs() < 0.05);
    assert!(p.kv.error.is_none());
    assert_eq!(p.max_num_batched_tokens, 8192);
    assert_eq!(p.max_num_seqs, 1024);
}

#[test]
fn idle_engine_ttft_matches_section_10() {
    // docs/simulator.md §10.1: 8.3, 15.8, 27.5, 52.5, 105.8, 224 ms for 128 … 8k tokens.
    let d = llama_h100();
    let p = predict(&d, &PredictOptions::defaults(&d)).unwrap();
    let expected_ms = [8.3, 15.8, 27.5, 52.5, 105.8, 224.0];
    assert_eq!(p.prefill.prompts.len(), expected_ms.len());
    for (x, ms) in p.prefill.prompts.iter().zip(expected_ms) {
        assert!(
            close(x.ttft.value * 1e3, ms, 0.01),
            "{} tokens: {} ms vs {ms}",
            x.prompt_len,
            x.ttft.value * 1e3
        );
        assert!(close(
            x.tokens_per_s.value,
            f64::from(x.prompt_len) / x.ttft.value,
            1e-12
        ));
    }
}

#[test]
fn long_prompts_are_chunked_by_the_budget() {
    let d = llama_h100();
    let mut o = PredictOptions::defaults(&d);
    o.prompt_lens = vec![16_384, 8192];
    let p = predict(&d, &o).unwrap();
    assert_eq!(p.prefill.prompts[0].chunks, vec![8192, 8192]);
    assert!((p.prefill.prompts[0].ttft.value * 1e3 - 508.0).abs() < 10.0);
    // A 2048-token budget cuts 8k into 4 steps, paying weights and overheads 4× (≈ 232 ms).
    o.sizing.max_num_batched_tokens = 2048;
    o.sizing.max_num_seqs = 256;
    let p = predict(&d, &o).unwrap();
    assert_eq!(p.prefill.prompts[1].chunks, vec![2048; 4]);
    assert!((p.prefill.prompts[1].ttft.value * 1e3 - 232.0).abs() < 5.0);
}

#[test]
fn decode_batch_table_matches_section_3_5() {
    let d = llama_h100();
    let p = predict(&d, &PredictOptions::defaults(&d)).unwrap();
    let expected_ms = [
        (1, 6.95),
        (8, 7.36),
        (32, 8.85),
        (64, 10.9),
        (128, 15.1),
        (256, 23.7),
        (512, 40.8),
    ];
    for (batch, ms) in expected_ms {
        let row = p.decode_batches.iter().find(|r| r.batch == batch).unwrap();
        assert!(
            close(row.step_s * 1e3, ms, 0.01),
            "batch {batch}: {}",
            row.step_s
        );
        assert!(close(
            row.tokens_per_s,
            f64::from(batch) / row.step_s,
            1e-12
        ));
    }
}

#[test]
fn compute_bound_batch_is_where_t_c_overtakes_t_m() {
    // Below ≈ 500 tokens of context a request's FLOPs outweigh its KV reads, so a large
    // enough batch turns compute-bound.
    let d = llama_h100();
    let mut o = PredictOptions::defaults(&d);
    o.context = 256;
    let p = predict(&d, &o).unwrap();
    let b = p.compute_bound_batch.as_ref().unwrap().value as u32;
    let at = d.decode_tpot(256, b);
    let before = d.decode_tpot(256, b - 1);
    assert!(at.t_c >= at.t_m && before.t_c < before.t_m, "B = {b}");
    // The batch table agrees with the threshold.
    for row in &p.decode_batches {
        assert_eq!(row.compute_bound, row.batch >= b, "batch {}", row.batch);
    }
}

#[test]
fn decode_at_context_1024_never_turns_compute_bound() {
    // Each request at context 1024 adds 1025·131,072 B of KV reads (51 µs at 2.6 TB/s) but
    // only 15.5 GFLOP (26 µs at 594 TFLOP/s): the batch never crosses the ridge.
    let d = llama_h100();
    let p = predict(&d, &PredictOptions::defaults(&d)).unwrap();
    assert!(p.compute_bound_batch.is_none());
    let note = p
        .notes
        .iter()
        .find(|n| n.contains("never turns compute-bound"))
        .unwrap();
    assert!(note.contains("51.") && note.contains("26.2 µs"), "{note}");
    assert!(p.decode_batches.iter().all(|r| !r.compute_bound));
    // Weight streaming alone (5.74 ms) is matched by the FLOPs of 220 requests (26.2 µs each).
    let ridge = p.weights_ridge_batch.as_ref().unwrap();
    assert_eq!(ridge.value, (5.744e-3_f64 / 26.19e-6).ceil());
}

#[test]
fn capacity_follows_gpu_memory_utilization() {
    // docs/simulator.md §4: 11,758 blocks at 0.5 and 3,648 at 0.3 on H100.
    let d = llama_h100();
    let mut o = PredictOptions::defaults(&d);
    for (gmu, blocks) in [(0.5, 11_758.0), (0.3, 3_648.0)] {
        o.sizing.gpu_memory_utilization = gmu;
        let p = predict(&d, &o).unwrap();
        let cap = p.kv.capacity.unwrap();
        assert_eq!(cap.blocks.value, blocks, "gmu {gmu}");
        assert_eq!(cap.gpu_memory_utilization, gmu);
        // 3,648 blocks cannot hold one 131,072-token request.
        assert_eq!(p.kv.error.is_some(), gmu < 0.4, "{:?}", p.kv.error);
    }
}

#[test]
fn small_gpu_reports_the_largest_fitting_max_model_len() {
    // L4: 2,072 blocks, "needs --max-model-len ≤ 33152".
    let d = deployment("l4", "llama-3.1-8b", Dtype::Bf16, KvDtype::Auto, 1);
    let p = predict(&d, &PredictOptions::defaults(&d)).unwrap();
    let cap = p.kv.capacity.as_ref().unwrap();
    assert_eq!(cap.blocks.value, 2_072.0);
    assert_eq!(cap.largest_fitting_max_model_len, 33_137);
    let err = p.kv.error.as_deref().unwrap();
    assert!(err.contains("131072") && err.contains("33137"), "{err}");
    assert_eq!(p.max_num_batched_tokens, 2048);
}

#[test]
fn no_memory_left_is_reported_not_fatal() {
    // 70B in BF16 does not fit one H100.
    let d = deployment("h100", "llama-3.1-70b", Dtype::Bf16, KvDtype::Auto, 1);
    let p = predict(&d, &PredictOptions::defaults(&d)).unwrap();
    assert!(p.kv.capacity.is_none());
    assert!(p.kv.error.as_deref().unwrap().contains("no memory left"));
    // The bandwidth figures still exist: 70B weights at 3.35 TB/s take ~40 ms.
    assert!(p.bandwidth.floor.value > 0.035);
}

#[test]
fn tensor_parallel_and_fp8_change_the_per_gpu_figures() {
    let d = deployment("h100", "llama-3.1-70b", Dtype::Fp8, KvDtype::Fp8, 2);
    let p = predict(&d, &PredictOptions::defaults(&d)).unwrap();
    assert_eq!(p.tensor_parallel_size, 2);
    // §4: 29,132 blocks, 466,112 tokens.
    let cap = p.kv.capacity.as_ref().unwrap();
    assert_eq!(cap.blocks.value, 29_132.0);
    assert_eq!(cap.tokens.value, 466_112.0);
    // KV per token: 320 KiB at 2 bytes → 160 KiB in FP8, 80 KiB on each of 2 GPUs.
    assert_eq!(p.kv.bytes_per_token.value, 160.0 * 1024.0);
    assert_eq!(p.kv.bytes_per_token_per_gpu.value, 80.0 * 1024.0);
    // Resident weights per GPU: half of 70.55 GB.
    assert!((p.weights.resident.value / 1e9 - 35.3).abs() < 0.1);
    assert!(p.notes.iter().any(|n| n.contains("one of 2 GPUs")));
    assert!(p.decode.tpot.inputs.iter().any(|i| i.name == "t_ar"));
}

#[test]
fn moe_reads_only_the_active_experts_at_batch_one() {
    let d = deployment("h100", "qwen3-30b-a3b", Dtype::Bf16, KvDtype::Auto, 1);
    let p = predict(&d, &PredictOptions::defaults(&d)).unwrap();
    // 56.9 GiB resident, but a one-token step reads attention, routers, 8 of 128 experts and
    // the LM head: a few GB.
    assert!((p.weights.resident.value / GIB - 56.9).abs() < 0.05);
    assert!(p.weights.read_per_step.value < 10e9);
    assert!(p.weights.read_per_step.formula.contains("E_eff"));
    assert_eq!(p.kv.capacity.as_ref().unwrap().blocks.value, 8_886.0);
}

#[test]
fn every_figure_carries_its_formula_and_inputs() {
    let d = llama_h100();
    let p = predict(&d, &PredictOptions::defaults(&d)).unwrap();
    let figures = [
        &p.weights.resident,
        &p.weights.read_per_step,
        &p.bandwidth.floor,
        &p.bandwidth.floor_with_embeddings,
        &p.bandwidth.predicted_tpot,
        &p.decode.tpot,
        &p.prefill.tokens_per_s,
        &p.kv.bytes_per_token,
        &p.kv.capacity.as_ref().unwrap().blocks,
        &p.kv.capacity.as_ref().unwrap().max_concurrency,
    ];
    for f in figures {
        assert!(!f.formula.is_empty() && !f.inputs.is_empty(), "{f:?}");
    }
    // The floor's inputs reproduce its value.
    let get = |name: &str| {
        p.bandwidth
            .floor
            .inputs
            .iter()
            .find(|i| i.name == name)
            .unwrap()
            .value
    };
    assert!(close(
        get("W_step") / get("peak_BW"),
        p.bandwidth.floor.value,
        1e-12
    ));
    // The decode explanation names the parts that sum to the TPOT.
    let parts: f64 = ["t_ovh", "n_req·t_req", "t_gpu = (t_c^p + t_m^p)^(1/p)"]
        .iter()
        .map(|n| {
            p.decode
                .tpot
                .inputs
                .iter()
                .find(|i| &i.name == n)
                .unwrap()
                .value
        })
        .sum();
    assert!(close(parts, p.decode.tpot.value, 1e-12));
}

#[test]
fn the_report_serializes_with_its_mode() {
    let d = llama_h100();
    let p = predict(&d, &PredictOptions::defaults(&d)).unwrap();
    let json = serde_json::to_value(PredictReport::Catalog(Box::new(p))).unwrap();
    assert_eq!(json["mode"], "catalog");
    assert_eq!(json["kv"]["capacity"]["blocks"]["value"], 27_978.0);
    assert_eq!(json["bandwidth"]["floor"]["formula"], "W_step / peak_BW");
    assert_eq!(json["dtype"], "bf16");
}

#[test]
fn invalid_options_are_rejected() {
    let d = llama_h100();
    let mut o = PredictOptions::defaults(&d);
    o.prompt_lens = vec![128, 0];
    assert!(predict(&d, &o)
        .unwrap_err()
        .to_string()
        .contains("prompt lengths"));
    let mut o = PredictOptions::defaults(&d);
    o.max_model_len = 0;
    assert!(predict(&d, &o).is_err());
}
