//! `servebench predict` and `servebench plan` through the binary: figures of docs/simulator.md
//! §3.5, the hand-checked capacity example, result files, and error exit codes.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Output;

use crate::common::servebench;
use serde_json::Value;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok_json(args: &[&str]) -> Value {
    let o = servebench(args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// A file in the system temp directory, unique per test, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, contents: &str) -> TempFile {
        let path = std::env::temp_dir().join(format!(
            "servebench-predict-plan-{}-{name}",
            std::process::id()
        ));
        std::fs::write(&path, contents).unwrap();
        TempFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn predict_json_pins_the_worked_example() {
    let v = ok_json(&["predict", "--json"]);
    assert_eq!(v["mode"], "catalog");
    assert_eq!(v["gpu"], "h100");
    assert_eq!(v["model"], "llama-3.1-8b");
    let ms = |p: &str| v.pointer(p).unwrap().as_f64().unwrap() * 1e3;
    assert!((ms("/bandwidth/floor/value") - 4.48).abs() < 0.005);
    assert!((ms("/bandwidth/floor_with_embeddings/value") - 4.79).abs() < 0.005);
    assert!((ms("/decode/tpot/value") - 6.95).abs() < 0.005);
    let ttft_2048 = v["prefill"]["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["prompt_len"] == 2048)
        .unwrap()["ttft"]["value"]
        .as_f64()
        .unwrap();
    assert!((ttft_2048 * 1e3 - 52.5).abs() < 0.05);
    assert_eq!(v["kv"]["bytes_per_token"]["value"], 131_072.0);
    assert_eq!(v["kv"]["capacity"]["blocks"]["value"], 27_978.0);
    assert_eq!(v["kv"]["capacity"]["tokens"]["value"], 447_648.0);
    assert_eq!(v["bandwidth"]["floor"]["formula"], "W_step / peak_BW");
}

#[test]
fn predict_table_names_both_floors() {
    let o = servebench(&["predict", "--gpu", "h100", "--model", "llama-3.1-8b"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for needle in [
        "4.48 ms",
        "4.79 ms",
        "embedding table not read",
        "6.95 ms",
        "144 tok/s",
        "52.5 ms",
        "447,648 tokens",
        "27,978 blocks",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in\n{out}");
    }
    // Formulas appear only with --explain.
    assert!(!out.contains("= W_step / peak_BW"));
    let o = servebench(&["predict", "--explain"]);
    let out = stdout(&o);
    assert!(out.contains("= W_step / peak_BW"), "{out}");
    assert!(out.contains("peak_BW = 3,350 GB/s"), "{out}");
}

#[test]
fn predict_options_change_the_prediction() {
    let v = ok_json(&[
        "predict",
        "--gpu-memory-utilization",
        "0.5",
        "--context",
        "8192",
        "--prompt-lens",
        "100,16384",
        "--json",
    ]);
    assert_eq!(v["kv"]["capacity"]["blocks"]["value"], 11_758.0);
    assert_eq!(v["decode"]["context"], 8192);
    let prompts = v["prefill"]["prompts"].as_array().unwrap();
    assert_eq!(prompts.len(), 2);
    assert_eq!(prompts[1]["chunks"], serde_json::json!([8192, 8192]));
    // FP8 halves the bytes streamed per step.
    let fp8 = ok_json(&["predict", "--dtype", "fp8", "--json"]);
    let bf16 = ok_json(&["predict", "--json"]);
    let w = |v: &Value| v["weights"]["read_per_step"]["value"].as_f64().unwrap();
    assert!((w(&bf16) / w(&fp8) - 2.0).abs() < 1e-9);
}

#[test]
fn predict_raw_bandwidth_and_params() {
    let v = ok_json(&[
        "predict",
        "--bandwidth-gbs",
        "600",
        "--params",
        "8e9",
        "--bytes-per-param",
        "2",
        "--json",
    ]);
    assert_eq!(v["mode"], "raw");
    assert_eq!(v["weights"]["value"], 16e9);
    let floor = v["floor"]["value"].as_f64().unwrap();
    assert!((floor - 16e9 / 600e9).abs() < 1e-12);
    let o = servebench(&["predict", "--bandwidth-gbs", "600", "--params", "8e9"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("26.7 ms"), "{}", stdout(&o));
}

#[test]
fn predict_reads_a_hugging_face_config() {
    let config = TempFile::new(
        "config.json",
        r#"{"_name_or_path": "acme/tiny-7b", "num_hidden_layers": 32, "hidden_size": 4096,
            "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
            "vocab_size": 128256, "max_position_embeddings": 131072}"#,
    );
    let v = ok_json(&["predict", "--hf-config", config.path(), "--json"]);
    assert_eq!(v["model"], "acme/tiny-7b");
    // The shape of Llama-3.1-8B: the same floor.
    let floor = v["bandwidth"]["floor"]["value"].as_f64().unwrap();
    assert!((floor * 1e3 - 4.48).abs() < 0.005);
}

#[test]
fn predict_errors_exit_2_with_a_reason() {
    let o = servebench(&["predict", "--model", "no-such-model"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unknown model 'no-such-model'"),
        "{}",
        stderr(&o)
    );
    let o = servebench(&["predict", "--params", "8e9"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--bandwidth-gbs"), "{}", stderr(&o));
    let o = servebench(&["predict", "--params", "8e9", "--model", "llama-3.1-8b"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn plan_hand_checked_example() {
    // 5,000,000 / 86,400 = 57.9 req/s; ceil(57.9 / 35) = 2 GPUs; × 2 headroom = 4 GPUs.
    let args = [
        "plan",
        "--daily-requests",
        "5000000",
        "--per-gpu-rps",
        "35",
        "--headroom",
        "2",
        "--peak-to-average",
        "1",
    ];
    let o = servebench(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("average rate   = 5,000,000 req/day / 86,400 s = 57.9 req/s"),
        "{out}"
    );
    assert!(out.contains("= ceil(1.65) = 2 GPUs"), "{out}");
    assert!(
        out.contains("with headroom  = ceil(2 × 2) = 4 GPUs"),
        "{out}"
    );
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let v = ok_json(&json_args);
    assert_eq!(v["plan"]["gpus"]["value"], 4.0);
    assert_eq!(v["plan"]["replicas_for_peak"]["value"], 2.0);
}

#[test]
fn plan_from_a_result_file_with_costs() {
    let result = TempFile::new(
        "result.servebench.json",
        r#"{"schema": "servebench.result/v1",
            "summary": {"request_throughput": 70.0, "output_throughput": 14000.0, "completed": 2000}}"#,
    );
    let v = ok_json(&[
        "plan",
        "--daily-requests",
        "5e6",
        "--peak-to-average",
        "1",
        "--from",
        result.path(),
        "--gpus-per-replica",
        "2",
        "--gpu-hourly-cost",
        "2.5",
        "--json",
    ]);
    // 70 req/s per 2-GPU replica: one replica covers 57.9 req/s, × 2 headroom = 4 GPUs.
    assert_eq!(v["plan"]["input"]["per_gpu_rps"], 35.0);
    assert_eq!(v["plan"]["gpus"]["value"], 4.0);
    assert_eq!(v["measured"]["schema"], "servebench.result/v1");
    // $2.50 × 4 × 24 = $240 a day; a loaded replica: $5/h / (14,000 tok/s × 3600) × 1e6.
    assert_eq!(v["plan"]["cost"]["per_day"]["value"], 240.0);
    let unit = v["plan"]["cost"]["per_million_output_tokens_at_capacity"]["value"]
        .as_f64()
        .unwrap();
    assert!((unit - 5.0 / (14_000.0 * 3600.0) * 1e6).abs() < 1e-9);
}

#[test]
fn plan_errors_exit_2() {
    // Neither a rate nor a result file.
    let o = servebench(&["plan", "--daily-requests", "1000"]);
    assert_eq!(o.status.code(), Some(2));
    // A result file that is not a result.
    let bad = TempFile::new("bad.json", r#"{"schema": "something/v2"}"#);
    let o = servebench(&["plan", "--daily-requests", "1000", "--from", bad.path()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unsupported schema 'something/v2'"),
        "{}",
        stderr(&o)
    );
    let o = servebench(&["plan", "--daily-requests", "1000", "--per-gpu-rps", "0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("positive"), "{}", stderr(&o));
}
