//! Pooling requests (`/v1/embeddings`, `/v1/rerank`) through a simulated fleet: each record
//! names the pool and replica that served it, over HTTP (from the response headers) and in
//! virtual time.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use serde_json::Value;

use crate::common::{ok, servebench, tempdir};

fn records(out: &Path) -> Vec<Value> {
    let file = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".requests.jsonl"))
        .unwrap();
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn run_pooling(dir: &Path, backend: &str, virtual_time: bool) -> Vec<Value> {
    let out = dir.join(backend);
    let mut args = vec![
        "run",
        "--disable-tqdm",
        "--sim",
        "llama-3.1-8b --replicas 2 --time-scale 20",
        "--backend",
        backend,
        "--num-prompts",
        "8",
        "--random-input-len",
        "32",
        "--max-concurrency",
        "1",
        "--num-warmups",
        "0",
        "--output-dir",
        out.to_str().unwrap(),
    ];
    if virtual_time {
        args.push("--virtual-time");
    }
    if backend == "vllm-rerank" {
        args.extend([
            "--dataset-name",
            "random-rerank",
            "--random-batch-size",
            "3",
        ]);
    } else {
        args.extend(["--random-batch-size", "2"]);
    }
    ok(&servebench(&args));
    records(&out)
}

fn assert_served_round_robin(records: &[Value], what: &str) {
    assert!(!records.is_empty(), "{what}: no records");
    let replicas: Vec<&str> = records
        .iter()
        .map(|r| {
            assert!(r["failure"].is_null(), "{what}: {r}");
            assert_eq!(r["served_by"]["pool"], "default", "{what}: {r}");
            r["served_by"]["replica"].as_str().unwrap()
        })
        .collect();
    // One request at a time, round-robin: both replicas serve, in turn.
    assert!(
        replicas.contains(&"0") && replicas.contains(&"1"),
        "{what}: {replicas:?}"
    );
}

#[test]
fn pooling_records_name_their_pool_over_http() {
    let _x = crate::common::exclusive();
    let dir = tempdir("fleet-pooling", "http");
    for backend in ["openai-embeddings", "vllm-rerank"] {
        let recs = run_pooling(&dir, backend, false);
        assert_served_round_robin(&recs, backend);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn pooling_records_name_their_pool_in_virtual_time() {
    let dir = tempdir("fleet-pooling", "virtual");
    for backend in ["openai-embeddings", "vllm-rerank"] {
        let recs = run_pooling(&dir, backend, true);
        assert_served_round_robin(&recs, backend);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
