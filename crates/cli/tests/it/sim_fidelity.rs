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
