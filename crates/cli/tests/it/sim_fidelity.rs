//! `servebench sim fidelity`: runs published points in virtual time, prints the table, writes
//! it between the markers of a document, exits 1 under `--check` when a figure misses its bound,
//! and refuses a fixture naming an unknown source with the file and point.

#![allow(clippy::unwrap_used)]

use crate::common::{servebench, tempdir, text};

const SOURCE: &str = r#"
[[source]]
id = "s"
title = "a test source"
where = "nowhere"
date = "2026-01-01"
method = "fixed lengths"
"#;

/// One small single-stream point; `published` and `tolerance` vary per test.
fn point(id: &str, source: &str, published: &str, tolerance: f64) -> String {
    format!(
        r#"
[[point]]
id = "{id}"
source = "{source}"
engine = "vllm"
engine_version = "test"
model = "llama-3.1-8b"
gpu = "H100"
gpus = 1
tp = 1
weights_dtype = "bf16"
kv_dtype = "bf16"
input_tokens = 256
output_tokens = 32
load = "2 requests, one at a time"
sim = "llama-3.1-8b --gpu h100 --engine vllm"
requests = 2
concurrency = 1
published = {{ {published} }}
tolerance = {tolerance}
"#
    )
}

#[test]
fn fidelity_prints_writes_and_checks_the_table() {
    let dir = tempdir("fidelity", "table");
    // Single-stream decode of Llama-3.1-8B on an H100 is ≈ 7 ms per token (docs/simulator.md
    // §10.2): a published 7 ms passes ±15 %, a published 3.5 ms does not.
    let good = dir.join("good.toml");
    std::fs::write(
        &good,
        format!("{SOURCE}{}", point("close", "s", "itl_mean_ms = 7.0", 0.15)),
    )
    .unwrap();
    let doc = dir.join("doc.md");
    std::fs::write(
        &doc,
        "# T\n\n<!-- fidelity-table:begin -->\nstale\n<!-- fidelity-table:end -->\nafter\n",
    )
    .unwrap();
    let o = servebench(&[
        "sim",
        "fidelity",
        "--points",
        good.to_str().unwrap(),
        "--write-docs",
        doc.to_str().unwrap(),
        "--check",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("| close | vllm | itl_mean_ms | 7.0 |"),
        "{stdout}"
    );
    let written = std::fs::read_to_string(&doc).unwrap();
    assert!(
        !written.contains("stale") && written.contains("| close |"),
        "{written}"
    );
    assert!(
        written.ends_with("<!-- fidelity-table:end -->\nafter\n"),
        "{written}"
    );

    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        format!("{SOURCE}{}", point("far", "s", "itl_mean_ms = 3.5", 0.15)),
    )
    .unwrap();
    let o = servebench(&[
        "sim",
        "fidelity",
        "--points",
        bad.to_str().unwrap(),
        "--check",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let o = servebench(&["sim", "fidelity", "--points", bad.to_str().unwrap()]);
    assert!(
        o.status.success(),
        "without --check a miss is reported, not fatal: {}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_fixture_with_an_unknown_source_is_refused_naming_file_and_point() {
    let dir = tempdir("fidelity", "refused");
    let f = dir.join("points.toml");
    std::fs::write(
        &f,
        format!(
            "{SOURCE}{}",
            point("orphan", "elsewhere", "itl_mean_ms = 7.0", 0.15)
        ),
    )
    .unwrap();
    let o = servebench(&["sim", "fidelity", "--points", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("points.toml") && err.contains("'orphan'") && err.contains("'elsewhere'"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A small TensorRT-LLM point under the id of the source the `trtllm` profile's factors were
/// fitted on, so its held-out run reverts them.
const TRTLLM_SOURCE: &str = r#"
[[source]]
id = "trtllm-perf-overview"
title = "a test stand-in for the TensorRT-LLM source"
where = "nowhere"
date = "2026-01-01"
method = "fixed lengths"

[[point]]
id = "trt-small"
source = "trtllm-perf-overview"
engine = "trtllm"
engine_version = "test"
model = "llama-3.1-8b"
gpu = "H100"
gpus = 1
tp = 1
weights_dtype = "fp8"
kv_dtype = "fp8"
input_tokens = 1024
output_tokens = 64
load = "32 requests at once"
sim = "llama-3.1-8b --gpu h100 --dtype fp8 --kv-cache-dtype fp8 --engine trtllm --max-model-len 1088"
requests = 32
published = { output_tok_s = 5000 }
"#;

#[test]
fn fidelity_reports_held_out_error_beside_in_sample_and_writes_the_baseline() {
    let dir = tempdir("fidelity", "heldout");
    let points = dir.join("points.toml");
    std::fs::write(&points, TRTLLM_SOURCE).unwrap();
    let baseline = dir.join("baseline.json");
    let doc = dir.join("doc.md");
    std::fs::write(
        &doc,
        "# T\n<!-- fidelity-accuracy:begin -->\nstale\n<!-- fidelity-accuracy:end -->\n",
    )
    .unwrap();
    let o = servebench(&[
        "sim",
        "fidelity",
        "--points",
        points.to_str().unwrap(),
        "--json",
        "--write-baseline",
        baseline.to_str().unwrap(),
        "--write-docs",
        doc.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let figure = &json["figures"][0];
    assert_eq!(figure["point"], "trt-small");
    let (in_sample, held_out) = (
        figure["in_sample"].as_f64().unwrap(),
        figure["held_out"].as_f64().unwrap(),
    );
    // Held out, the profile's FP8 GEMMs run at the catalog's MFU instead of 1.3 × it and its
    // KV reads at the whole-model MBU instead of 0.90: the same work takes longer.
    assert!(held_out < in_sample, "{held_out} vs {in_sample}");
    let source = &json["sources"][0];
    assert_eq!(source["source"], "trtllm-perf-overview");
    assert_eq!(source["reverted"].as_array().unwrap().len(), 2, "{source}");
    for key in ["in_sample", "held_out"] {
        let a = &json["overall"][key];
        assert_eq!(a["figures"], 1, "{json}");
        assert!(a["mape_pct"].as_f64().unwrap() > 0.0, "{json}");
        assert!(
            a["within_10pct"].is_u64() && a["within_25pct"].is_u64(),
            "{json}"
        );
    }
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&baseline).unwrap()).unwrap();
    assert_eq!(
        written["overall"]["held_out_mape_pct"],
        json["overall"]["held_out"]["mape_pct"]
    );
    assert_eq!(
        written["sources"]["trtllm-perf-overview"]["figures"], 1,
        "{written}"
    );
    let doc = std::fs::read_to_string(&doc).unwrap();
    assert!(
        !doc.contains("stale")
            && doc.contains("| trtllm-perf-overview | 1 |")
            && doc.contains("held-out MAPE"),
        "{doc}"
    );

    // Without --json the accuracy table follows the figure table.
    let o = servebench(&["sim", "fidelity", "--points", points.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("| trt-small | trtllm | output_tok_s | 5000 |")
            && stdout.contains("| **all** | 1 |")
            && stdout.contains("engine trtllm fp8_mfu_scale: 1.3 → 1"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
