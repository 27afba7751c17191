//! `servebench run`'s vLLM-format output against `vllm bench serve`'s definitions
//! (vllm/benchmarks/serve.py, lib/endpoint_request_func.py), end to end: a scripted server
//! whose chunks, model list and `/metrics` are known, and virtual-time runs of the simulator.
//! Each expected value is worked out from vLLM's rules in the comment above it.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use servebench_testserver::{Script, ScriptedServer};

use crate::common::{bin, read_json, tempdir, text};

/// A word-level tokenizer: loads in milliseconds.
const TOKENIZER_JSON: &str = r#"{
  "version": "1.0", "truncation": null, "padding": null,
  "added_tokens": [{"id": 0, "content": "[UNK]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
  "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
  "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "the": 1, "time": 2, "of": 3, "river": 4, "stone": 5}, "unk_token": "[UNK]"}
}"#;

const SPEC_BEFORE: &str = "\
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine=\"0\",model_name=\"served-name\"} 10.0
vllm:spec_decode_num_draft_tokens_total{engine=\"0\",model_name=\"served-name\"} 30.0
vllm:spec_decode_num_accepted_tokens_total{engine=\"0\",model_name=\"served-name\"} 12.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",model_name=\"served-name\",position=\"0\"} 8.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",model_name=\"served-name\",position=\"1\"} 4.0
";

const SPEC_AFTER: &str = "\
vllm:spec_decode_num_drafts_total{engine=\"0\",model_name=\"served-name\"} 50.0
vllm:spec_decode_num_draft_tokens_total{engine=\"0\",model_name=\"served-name\"} 150.0
vllm:spec_decode_num_accepted_tokens_total{engine=\"0\",model_name=\"served-name\"} 72.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",model_name=\"served-name\",position=\"0\"} 44.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",model_name=\"served-name\",position=\"1\"} 28.0
";

fn run_in(dir: &Path, args: &[&str]) -> Output {
    bin()
        .current_dir(dir)
        .arg("run")
        .args(args)
        .output()
        .expect("spawn servebench")
}

fn only_file(dir: &Path, suffix: &str) -> PathBuf {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    assert_eq!(v.len(), 1, "{suffix} files: {v:?}");
    v.remove(0)
}

/// A chat run without `--model` against a server whose first model is `served-name` with root
/// `/models/org/Real-Model-7B`, 4 tokens per answer, and spec-decode counters that move.
#[test]
fn chat_run_matches_vllms_client_on_events_clock_model_and_spec_decode_regression_issue_12() {
    let _exclusive = crate::common::exclusive();
    let dir = tempdir("parity", "chat");
    std::fs::create_dir_all(dir.join("tok")).expect("dir");
    let tok = dir.join("tok").join("tokenizer.json");
    std::fs::write(&tok, TOKENIZER_JSON).expect("tokenizer");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let server = rt
        .block_on(ScriptedServer::start(
            Script::new()
                .tokens(4)
                .first_token_delay(Duration::from_millis(30))
                .inter_token_interval(Duration::from_millis(10))
                .model("served-name")
                .model_root("/models/org/Real-Model-7B")
                .metrics(SPEC_BEFORE, SPEC_AFTER),
        ))
        .expect("start");
    let url = server.base_url();
    let tok = tok.to_string_lossy().into_owned();
    let out = run_in(
        &dir,
        &[
            "--base-url",
            &url,
            "--backend",
            "openai-chat",
            "--tokenizer",
            &tok,
            "--num-prompts",
            "3",
            "--max-concurrency",
            "1",
            "--random-input-len",
            "4",
            "--random-output-len",
            "4",
            "--ready-check-timeout-sec",
            "0",
            "--save-result",
            "--save-detailed",
            "--disable-tqdm",
            "--output-dir",
            "out",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    drop(server);

    // vLLM: `model_id` is the root of the first model, and the file is named after its last
    // path part.
    let vllm_path = only_file(&dir, ".json");
    let name = vllm_path
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    assert!(
        name.starts_with("openai-chat-infqps-concurrency1-Real-Model-7B-"),
        "{name}"
    );
    let vllm_text = std::fs::read_to_string(&vllm_path).expect("vllm result");
    let v: serde_json::Value = serde_json::from_str(&vllm_text).expect("json");
    assert_eq!(v["model_id"], "/models/org/Real-Model-7B");
    assert_eq!(v["completed"], 3);

    // Token events: the server sends a role-only chunk, then 4 content chunks (the last with
    // the finish_reason), then a usage chunk with no choices. vLLM's chat client counts every
    // chunk with choices: 5 events, so 4 ITLs; the role chunk goes out with the first
    // token, so the first ITL is 0. servebench's own rule: 4 events, 3 ITLs.
    let itls = v["itls"].as_array().expect("itls");
    assert_eq!(itls.len(), 3);
    for l in itls {
        let l = l.as_array().expect("list");
        assert_eq!(l.len(), 4, "{l:?}");
        assert_eq!(l[0].as_f64(), Some(0.0), "{l:?}");
    }
    let native = read_json(&only_file(&dir.join("out"), ".servebench.json"));
    assert_eq!(
        native["summary"]["itl"]["n"], 9,
        "{}",
        native["summary"]["itl"]
    );

    // Clock start: vLLM's `start_times` are the records' `started` (before the pool hands out
    // a connection), never after servebench's `sent` (the first byte written).
    let records_text =
        std::fs::read_to_string(only_file(&dir.join("out"), ".requests.jsonl")).expect("records");
    let records: Vec<serde_json::Value> = records_text
        .lines()
        .map(|l| serde_json::from_str(l).expect("record"))
        .collect();
    let mut records = records;
    records.sort_by_key(|r| r["id"].as_u64());
    let starts = v["start_times"].as_array().expect("start_times");
    for (r, s) in records.iter().zip(starts) {
        let started = r["started"].as_u64().expect("started kept");
        let sent = r["sent"].as_u64().expect("sent");
        assert!(started <= sent, "{r}");
        assert_eq!(s.as_f64(), Some(started as f64 / 1e9));
        assert_eq!(r["bare_events"].as_array().map(Vec::len), Some(1), "{r}");
        assert_eq!(r["events"].as_array().map(Vec::len), Some(4), "{r}");
    }

    // Spec decode, from the deltas of the scripted /metrics: 40 drafts, 120 draft tokens, 60
    // accepted; rate 60/120 = 50 %, length 1 + 60/40 = 2.5, per position 36/40 and 24/40.
    assert!(
        vllm_text.contains(
            r#""rtfx": 0.0, "spec_decode_acceptance_rate": 50.0, "spec_decode_acceptance_length": 2.5, "spec_decode_num_drafts": 40, "spec_decode_draft_tokens": 120, "spec_decode_accepted_tokens": 60, "spec_decode_per_position_acceptance_rates": [0.9, 0.6], "mean_ttft_ms""#
        ),
        "{vllm_text}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Speculative Decoding"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Under a linear ramp from 1 to 4 req/s over 20 requests, request `i` has rate
/// `1 + 3·i/19`; its integer part reaches 2 at `i = 7`, 3 at `i = 13` and 4 at `i = 19`, so
/// vLLM writes four events, 1 to 4, the first at the run start.
#[test]
fn ramp_up_writes_rps_change_events_regression_issue_12() {
    let dir = tempdir("parity", "ramp");
    let out = run_in(
        &dir,
        &[
            "--virtual-time",
            "--num-prompts",
            "20",
            "--random-input-len",
            "16",
            "--random-output-len",
            "4",
            "--ramp-up-strategy",
            "linear",
            "--ramp-up-start-rps",
            "1",
            "--ramp-up-end-rps",
            "4",
            "--percentile-metrics",
            "itl,ttft,client_queue_time",
            "--save-result",
            "--result-filename",
            "r.json",
            "--disable-tqdm",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let v = read_json(&dir.join("r.json"));
    let events = v["rps_change_events"]
        .as_array()
        .expect("rps_change_events");
    let rps: Vec<u64> = events.iter().filter_map(|e| e["rps"].as_u64()).collect();
    assert_eq!(rps, [1, 2, 3, 4]);
    let stamps: Vec<&str> = events
        .iter()
        .map(|e| e["timestamp"].as_str().expect("timestamp"))
        .collect();
    for s in &stamps {
        // Python's datetime.isoformat(): 2026-11-24T14:35:12[.123456]
        assert!(s.len() == 19 || s.len() == 26, "{s}");
        assert_eq!(&s[10..11], "T", "{s}");
    }
    assert!(stamps.windows(2).all(|w| w[0] <= w[1]), "{stamps:?}");
    // Statistics in vLLM's order; no client_queue_time without --max-concurrency.
    let text = std::fs::read_to_string(dir.join("r.json")).expect("file");
    let ttft = text.find("\"mean_ttft_ms\"").expect("ttft");
    let itl = text.find("\"mean_itl_ms\"").expect("itl");
    assert!(ttft < itl);
    assert!(!text.contains("client_queue_time_ms"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--burstiness inf` is `float("inf")` in vLLM, and Python's json writes it as `Infinity`.
#[test]
fn infinite_burstiness_is_written_as_python_writes_it_regression_issue_12() {
    let dir = tempdir("parity", "burstiness");
    let out = run_in(
        &dir,
        &[
            "--virtual-time",
            "--num-prompts",
            "5",
            "--random-input-len",
            "16",
            "--random-output-len",
            "4",
            "--request-rate",
            "10",
            "--burstiness",
            "inf",
            "--save-result",
            "--result-filename",
            "r.json",
            "--disable-tqdm",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let text = std::fs::read_to_string(dir.join("r.json")).expect("file");
    assert!(
        text.contains(r#""request_rate": 10.0, "burstiness": Infinity, "max_concurrency": null"#),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The simulator's chat stream opens with a role-only chunk written with the first token, so
/// in virtual time as over HTTP vLLM's client sees 8 tokens + the role chunk = 9 events: 8 ITLs,
/// the first 0, and a TTFT equal to servebench's own.
#[test]
fn virtual_chat_counts_the_role_chunk_as_vllm_does_regression_issue_12() {
    let dir = tempdir("parity", "virtual-chat");
    let out = run_in(
        &dir,
        &[
            "--virtual-time",
            "--backend",
            "openai-chat",
            "--num-prompts",
            "4",
            "--random-input-len",
            "16",
            "--random-output-len",
            "8",
            "--save-result",
            "--save-detailed",
            "--result-filename",
            "r.json",
            "--disable-tqdm",
            "--output-dir",
            "out",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let v = read_json(&dir.join("r.json"));
    for l in v["itls"].as_array().expect("itls") {
        let l = l.as_array().expect("list");
        assert_eq!(l.len(), 8, "{l:?}");
        assert_eq!(l[0].as_f64(), Some(0.0));
    }
    let native = read_json(&only_file(&dir.join("out"), ".servebench.json"));
    assert_eq!(native["summary"]["itl"]["n"], 4 * 7);
    let native_ttft = native["summary"]["ttft"]["mean"].as_f64().expect("ttft");
    let vllm_ttft = v["mean_ttft_ms"].as_f64().expect("ttft");
    assert!(
        (native_ttft - vllm_ttft).abs() < 1e-9,
        "{native_ttft} {vllm_ttft}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
