//! `servebench compare`: a real configuration difference (max-num-seqs 8 against the
//! default, same workload, virtual time) is significant; two seeds of one configuration are
//! not; gates set the exit code; experiment directories are compared row by row.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::{self, bin, text as show};
use serde_json::Value;

fn tempdir(name: &str) -> PathBuf {
    common::tempdir("compare", name)
}

/// 200 requests at 8 req/s (512 → 128 tokens) in virtual time into `dir`.
fn virtual_run(dir: &Path, seed: &str, sim: Option<&str>) {
    let mut cmd = bin();
    cmd.args([
        "run",
        "--virtual-time",
        "--num-prompts",
        "200",
        "--request-rate",
        "8",
    ])
    .args([
        "--random-input-len",
        "512",
        "--random-output-len",
        "128",
        "--seed",
        seed,
    ])
    .arg("--output-dir")
    .arg(dir);
    if let Some(spec) = sim {
        cmd.args(["--sim", spec]);
    }
    let out = cmd.output().expect("spawn servebench");
    assert!(out.status.success(), "{}", show(&out));
}

fn compare_json(a: &Path, b: &Path, extra: &[&str]) -> (Output, Value) {
    let out = bin()
        .arg("compare")
        .arg(a)
        .arg(b)
        .arg("--json")
        .args(extra)
        .output()
        .expect("spawn");
    let doc = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out, doc)
}

fn test_of<'a>(doc: &'a Value, metric: &str) -> &'a Value {
    doc["pairs"][0]["tests"]
        .as_array()
        .and_then(|t| t.iter().find(|x| x["metric"] == metric))
        .unwrap_or_else(|| panic!("no test of {metric} in {doc}"))
}

fn axis<'a>(doc: &'a Value, metric: &str) -> &'a Value {
    doc["pairs"][0]["axes"]
        .as_array()
        .and_then(|t| t.iter().find(|x| x["metric"] == metric))
        .unwrap_or_else(|| panic!("no axis {metric} in {doc}"))
}

#[test]
fn a_smaller_batch_is_a_significant_difference_and_a_reseed_is_not() {
    let dir = tempdir("sig");
    let (base, reseed, small) = (dir.join("base"), dir.join("reseed"), dir.join("seqs8"));
    virtual_run(&base, "1", None);
    virtual_run(&reseed, "2", None);
    virtual_run(
        &small,
        "1",
        Some("llama-3.1-8b --gpu h100 --max-num-seqs 8"),
    );

    // max-num-seqs 8 queues requests the default batches at once: TTFT rises sharply.
    let (out, doc) = compare_json(&base, &small, &[]);
    assert!(out.status.success(), "{}", show(&out));
    let ttft = test_of(&doc, "ttft");
    assert_eq!(ttft["significant"], true, "{ttft}");
    assert!(
        ttft["result"]["p_value"].as_f64().expect("p") < 1e-6,
        "{ttft}"
    );
    assert!(
        ttft["p_b_greater"].as_f64().expect("P(B>A)") > 0.8,
        "{ttft}"
    );
    assert_eq!(test_of(&doc, "e2el")["significant"], true);
    let p99 = axis(&doc, "p99_ttft_ms");
    assert!(p99["ratio"].as_f64().expect("ratio") > 5.0, "{p99}");
    assert_eq!(p99["significant"], true);
    // Per-GPU throughput appears because the simulator's tensor-parallel size is known.
    assert_eq!(doc["pairs"][0]["gpus_a"], 1);
    assert!(axis(&doc, "output_throughput_per_gpu")["a"]
        .as_f64()
        .is_some());

    // Two seeds of one configuration: no latency metric differs at alpha 0.01.
    let (out, doc) = compare_json(&base, &reseed, &[]);
    assert!(out.status.success(), "{}", show(&out));
    for metric in ["ttft", "tpot", "itl", "e2el"] {
        let t = test_of(&doc, metric);
        assert_eq!(t["significant"], false, "{metric}: {t}");
        assert_eq!(t["result"]["n1"], 200, "{t}");
    }

    // Gates: a 10 % p99 TTFT rise trips on the smaller batch (exit 1), not on the reseed.
    let gate = ["--fail-if", "p99_ttft_ms>+10%"];
    let (out, doc) = compare_json(&base, &small, &gate);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert_eq!(doc["gate_failed"], true);
    assert_eq!(doc["pairs"][0]["gates"][0]["failed"], true);
    let (out, doc) = compare_json(&base, &reseed, &gate);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(doc["gate_failed"], false);

    // The text view names the tests and the gate verdict.
    let out = bin()
        .arg("compare")
        .arg(&base)
        .arg(&small)
        .args([
            "--fail-if",
            "p99_ttft_ms>+10%,output_throughput<-50%",
            "--alpha",
            "0.05",
        ])
        .output()
        .expect("spawn");
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("significant (α=0.05)"), "{text}");
    assert!(text.contains("TTFT p99 (ms)"), "{text}");
    assert!(text.contains("FAIL: p99_ttft_ms"), "{text}");
    assert!(text.contains("ok: output_throughput"), "{text}");
    assert!(text.contains("gates: 1 of 2 failed"), "{text}");

    // Errors exit 2: an unknown gate metric, a bad alpha, a missing file.
    let (out, _) = compare_json(&base, &small, &["--fail-if", "p99_nonsense_ms>+1%"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no figure 'p99_nonsense_ms'"));
    let (out, _) = compare_json(&base, &small, &["--alpha", "2"]);
    assert_eq!(out.status.code(), Some(2));
    let (out, _) = compare_json(&base, &dir.join("missing"), &[]);
    assert_eq!(out.status.code(), Some(2));
}

fn write_experiment(dir: &Path, rows: &[(&str, &Path)]) {
    let rows: Vec<Value> = rows
        .iter()
        .map(|(id, run_dir)| {
            let name = std::fs::read_dir(run_dir)
                .expect("run dir")
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .find(|n| n.ends_with(".servebench.json"))
                .expect("result file");
            let rel = run_dir.strip_prefix(dir).expect("inside the experiment");
            serde_json::json!({"id": id, "name": id, "hypothesis": "",
                               "runs": [format!("{}/{name}", rel.display())]})
        })
        .collect();
    let doc = serde_json::json!({"schema": "servebench.experiment/v1", "kind": "matrix",
                                 "quick": false, "title": "t", "rows": rows, "sweep": null});
    std::fs::write(dir.join("experiment.json"), doc.to_string()).expect("write");
}

#[test]
fn experiment_directories_are_compared_row_by_row() {
    let root = tempdir("rows");
    let (x, y) = (root.join("x"), root.join("y"));
    virtual_run(&x.join("rows/A"), "1", None);
    virtual_run(&x.join("rows/B"), "2", None);
    virtual_run(&y.join("rows/A"), "3", None);
    virtual_run(&y.join("rows/C"), "4", None);
    write_experiment(&x, &[("A", &x.join("rows/A")), ("B", &x.join("rows/B"))]);
    write_experiment(&y, &[("A", &y.join("rows/A")), ("C", &y.join("rows/C"))]);
    let (out, doc) = compare_json(&x, &y, &["--gpus-a", "2", "--gpus-b", "4"]);
    assert!(out.status.success(), "{}", show(&out));
    let pairs = doc["pairs"].as_array().expect("pairs");
    assert_eq!(pairs.len(), 1, "only row A is on both sides");
    assert_eq!(pairs[0]["label"], "A");
    assert_eq!(pairs[0]["gpus_a"], 2);
    assert_eq!(pairs[0]["gpus_b"], 4);
    let unmatched: Vec<&str> = doc["unmatched"]
        .as_array()
        .expect("unmatched")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(unmatched, ["B (only in A)", "C (only in B)"]);
    // Per-GPU throughput divides by the given counts.
    let total = axis(&doc, "output_throughput");
    let per_gpu = axis(&doc, "output_throughput_per_gpu");
    let (ta, pa) = (
        total["a"].as_f64().expect("a"),
        per_gpu["a"].as_f64().expect("a"),
    );
    let (tb, pb) = (
        total["b"].as_f64().expect("b"),
        per_gpu["b"].as_f64().expect("b"),
    );
    assert!((pa - ta / 2.0).abs() < 1e-9 && (pb - tb / 4.0).abs() < 1e-9);
}
