//! Embeddings and rerank runs end to end against the simulator, in virtual time and over
//! HTTP (the simulator in-process on 127.0.0.1:0): the vLLM result holds exactly the keys
//! `vllm bench serve` writes for a pooling run, the token counts are the dataset's, and the
//! terminal report has no generation figures.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::common::{self, bin, read_json, text};

/// The keys of vLLM's result file for a pooling task without `--save-detailed`
/// (vllm/benchmarks/serve.py: `main_async`'s setup keys, then the pooling branch of
/// `benchmark` and its E2EL block), with `--metric-percentiles 99`.
pub const VLLM_POOLING_KEYS: &[&str] = &[
    "date",
    "endpoint_type",
    "backend",
    "label",
    "model_id",
    "tokenizer_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "duration",
    "completed",
    "total_input_tokens",
    "request_throughput",
    "total_token_throughput",
    "mean_e2el_ms",
    "median_e2el_ms",
    "std_e2el_ms",
    "p99_e2el_ms",
];

fn tempdir(name: &str) -> PathBuf {
    common::tempdir("pooling", name)
}

fn run_in(dir: &Path, args: &[&str]) -> Output {
    bin()
        .current_dir(dir)
        .args([
            "run",
            "--disable-tqdm",
            "--save-result",
            "--result-filename",
        ])
        .arg(dir.join("vllm.json"))
        .args(args)
        .output()
        .expect("spawn servebench")
}

fn vllm(dir: &Path, out: &Output) -> Value {
    assert!(out.status.success(), "{}", text(out));
    read_json(&dir.join("vllm.json"))
}

fn records(dir: &Path) -> Vec<Value> {
    let path = std::fs::read_dir(dir.join("results/runs"))
        .expect("output dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".requests.jsonl"))
        .expect("a records file");
    std::fs::read_to_string(&path)
        .expect("records")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a record"))
        .collect()
}

fn assert_vllm_keys(v: &Value) {
    let keys: Vec<&str> = v
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    let mut want = VLLM_POOLING_KEYS.to_vec();
    let mut got = keys.clone();
    want.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, want, "keys of the vLLM result");
}

fn assert_pooling_report(out: &Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("End-to-end Latency"), "{stdout}");
    for absent in ["TTFT", "TPOT", "ITL", "generated tokens", "Output token"] {
        assert!(
            !stdout.contains(absent),
            "{absent} in a pooling report:\n{stdout}"
        );
    }
}

/// Per-request records: prompt tokens from the server's usage equal to the dataset's, no
/// output tokens.
fn assert_records(dir: &Path, requests: usize, source: &str) -> u64 {
    let recs = records(dir);
    assert_eq!(recs.len(), requests);
    let mut total = 0;
    for r in &recs {
        assert!(r["failure"].is_null(), "{r}");
        assert_eq!(r["output_tokens"], 0, "{r}");
        assert_eq!(r["input_source"], source, "{r}");
        assert_eq!(r["input_tokens"], r["intended_input_tokens"], "{r}");
        total += r["input_tokens"].as_u64().expect("input tokens");
    }
    total
}

fn embeddings(dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "--backend",
        "openai-embeddings",
        "--num-prompts",
        "20",
        "--random-batch-size",
        "4",
        "--random-input-len",
        "64",
        "--metric-percentiles",
        "99",
    ];
    args.extend_from_slice(extra);
    run_in(dir, &args)
}

#[test]
fn embeddings_in_virtual_time_write_vllms_pooling_keys() {
    let dir = tempdir("embed-virtual");
    let out = embeddings(&dir, &["--virtual-time", "--request-rate", "50"]);
    let v = vllm(&dir, &out);
    assert_vllm_keys(&v);
    assert_eq!(v["backend"], "openai-embeddings");
    // 20 inputs of 64 tokens in requests of 4.
    assert_eq!(v["completed"], 5);
    assert_eq!(v["total_input_tokens"], 20 * 64);
    assert!(v["mean_e2el_ms"].as_f64().expect("e2el") > 0.0, "{v}");
    assert_eq!(assert_records(&dir, 5, "usage"), 20 * 64);
    assert_pooling_report(&out);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn embeddings_over_http_write_vllms_pooling_keys() {
    let dir = tempdir("embed-http");
    let out = embeddings(&dir, &["--request-rate", "inf"]);
    let v = vllm(&dir, &out);
    assert_vllm_keys(&v);
    assert_eq!(v["completed"], 5);
    assert_eq!(v["total_input_tokens"], 20 * 64);
    assert_eq!(assert_records(&dir, 5, "usage"), 20 * 64);
    assert_pooling_report(&out);
    std::fs::remove_dir_all(dir).ok();
}

fn rerank(dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "--backend",
        "vllm-rerank",
        "--dataset-name",
        "random-rerank",
        "--num-prompts",
        "6",
        "--random-batch-size",
        "3",
        "--random-input-len",
        "64",
        "--metric-percentiles",
        "99",
    ];
    args.extend_from_slice(extra);
    run_in(dir, &args)
}

/// vLLM's random-rerank shapes: a query of 64/2 − 1 = 31 tokens, documents of 64 − 31 − 1 =
/// 32, each pair counted with its separator: 64 tokens per document.
const RERANK_TOKENS: u64 = 6 * 64;

#[test]
fn rerank_in_virtual_time_counts_every_pair() {
    let dir = tempdir("rerank-virtual");
    let out = rerank(&dir, &["--virtual-time"]);
    let v = vllm(&dir, &out);
    assert_vllm_keys(&v);
    assert_eq!(v["completed"], 2);
    assert_eq!(v["total_input_tokens"], RERANK_TOKENS);
    assert_pooling_report(&out);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn rerank_over_http_on_both_paths() {
    for (name, path) in [("v1", "/v1/rerank"), ("tei", "/rerank")] {
        let dir = tempdir(&format!("rerank-http-{name}"));
        let out = rerank(&dir, &["--endpoint", path]);
        let v = vllm(&dir, &out);
        assert_vllm_keys(&v);
        assert_eq!(v["completed"], 2, "{path}");
        assert_eq!(v["total_input_tokens"], RERANK_TOKENS, "{path}");
        assert_eq!(assert_records(&dir, 2, "usage"), RERANK_TOKENS);
        std::fs::remove_dir_all(dir).ok();
    }
}

#[test]
fn a_pooling_backend_on_a_generation_endpoint_is_refused() {
    let out = common::servebench(&[
        "run",
        "--base-url",
        "http://127.0.0.1:9",
        "--backend",
        "openai-embeddings",
        "--endpoint",
        "/v1/completions",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("embeddings endpoint"),
        "{}",
        text(&out)
    );
}

/// A second llama-server on the real-engine tests' GGUF, serving `/v1/embeddings`
/// (`--embeddings`, mean pooling: the model is generative and has no pooling of its own).
/// Killed on drop.
struct EmbeddingServer {
    child: std::process::Child,
    url: String,
}

impl Drop for EmbeddingServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The embedding server, or `None` (after a notice) when `scripts/real-engine.sh env` has not
/// named the engine's binary and model.
fn embedding_server() -> Option<EmbeddingServer> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let (Some(bin), Some(model)) = (var("REAL_ENGINE_BIN"), var("REAL_ENGINE_MODEL_PATH")) else {
        let required = std::env::var("SERVEBENCH_REQUIRE_REAL_ENGINE").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "SERVEBENCH_REQUIRE_REAL_ENGINE=1 but REAL_ENGINE_BIN/REAL_ENGINE_MODEL_PATH are unset"
        );
        eprintln!("embeddings against llama-server: skipped, REAL_ENGINE_BIN is unset (see scripts/real-engine.sh)");
        return None;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = std::process::Command::new(bin)
        .args(["-m", &model, "--alias", "embedder", "--host", "127.0.0.1"])
        .args([
            "--port",
            &port.to_string(),
            "--embeddings",
            "--pooling",
            "mean",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start llama-server --embeddings");
    let server = EmbeddingServer {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    // The model is small and on local disk: start-up takes seconds; 120 s is CI's bound.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            use std::io::{Read, Write};
            let _ = s.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
            let mut head = String::new();
            let _ = s.read_to_string(&mut head);
            if head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200") {
                return Some(server);
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "llama-server --embeddings not healthy after 120 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

#[test]
fn embeddings_against_llama_server_write_vllms_pooling_keys() {
    let _lock = common::exclusive();
    let Some(server) = embedding_server() else {
        return;
    };
    let dir = tempdir("embed-llama");
    let mut args = vec![
        "--base-url",
        &server.url,
        "--model",
        "embedder",
        "--backend",
        "openai-embeddings",
        "--num-prompts",
        "8",
        "--random-batch-size",
        "4",
        "--random-input-len",
        "32",
        "--metric-percentiles",
        "99",
    ];
    let tokenizer = std::env::var("REAL_ENGINE_TOKENIZER").unwrap_or_default();
    if !tokenizer.is_empty() {
        args.extend(["--tokenizer", tokenizer.as_str()]);
    }
    let out = run_in(&dir, &args);
    let v = vllm(&dir, &out);
    assert_vllm_keys(&v);
    assert_eq!(v["completed"], 2, "{v}");
    // llama-server counts what it tokenized (a BOS per input, maybe), never less.
    let total = v["total_input_tokens"].as_u64().expect("input tokens");
    assert!((8 * 32..=8 * 34).contains(&total), "{v}");
    for r in records(&dir) {
        assert!(r["failure"].is_null(), "{r}");
        assert_eq!(r["input_source"], "usage", "{r}");
    }
    drop(server);
    std::fs::remove_dir_all(dir).ok();
}

/// The guide's virtual-time embeddings and rerank examples run as written (fewer prompts).
#[test]
fn readme_pooling_examples_run_as_written() {
    let lines = crate::common::documented_lines();
    let commands: Vec<Vec<&str>> = lines
        .iter()
        .filter(|l| {
            l.starts_with("servebench run --virtual-time --backend openai-embeddings")
                || l.starts_with("servebench run --virtual-time --backend vllm-rerank")
        })
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(commands.len(), 2, "the guide's pooling examples");
    for (k, c) in commands.iter().enumerate() {
        let dir = tempdir(&format!("readme-{k}"));
        let mut args: Vec<&str> = c[1..].to_vec();
        if let Some(i) = args.iter().position(|w| *w == "--num-prompts") {
            args[i + 1] = "32";
        }
        let out = bin()
            .current_dir(&dir)
            .args(&args)
            .arg("--disable-tqdm")
            .output()
            .expect("spawn servebench");
        assert!(out.status.success(), "{args:?}\n{}", text(&out));
        assert_pooling_report(&out);
        std::fs::remove_dir_all(dir).ok();
    }
}
