//! `servebench trace inspect` on small cuts of the public traces: text, `--json`, `--html`,
//! and exit 2 with file and line on bad input. Expected figures were computed
//! independently from the fixture files (Python's statistics module and the ideal-reuse
//! definition in docs/traces.md).

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{ok, servebench, tempdir, text};

fn fixture(name: &str) -> String {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../workload/tests/fixtures/traces"
    ))
    .join(name)
    .to_string_lossy()
    .into_owned()
}

fn json_of(args: &[&str]) -> Value {
    serde_json::from_str(&ok(&servebench(args))).unwrap()
}

fn close(v: &Value, want: f64) -> bool {
    v.as_f64()
        .is_some_and(|x| (x - want).abs() < 1e-6 * want.abs().max(1.0))
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

#[test]
fn mooncake_cut_json_has_rate_lengths_and_ideal_reuse() {
    let file = fixture("mooncake-head.jsonl");
    let j = json_of(&["trace", "inspect", "--json", &file]);
    assert_eq!(j["format"], "mooncake");
    assert_eq!(j["requests"], 80);
    assert_eq!(j["out_of_order"], 0);
    assert!(close(&j["span_s"], 22.009), "{j}");
    assert!(
        close(&j["arrivals"]["mean_per_s"], 3.589440683356809),
        "{j}"
    );
    assert!(
        close(&j["arrivals"]["interarrival_cv"], 0.956920838395069),
        "{j}"
    );
    // Seconds 0 and 17 both hold 8 arrivals; the first is reported.
    assert_eq!(j["arrivals"]["peak_per_s"], 8);
    assert_eq!(j["arrivals"]["peak_second"], 0);
    assert!(close(&j["input_tokens"]["p50"], 13843.5), "{j}");
    assert!(close(&j["input_tokens"]["p90"], 36982.7), "{j}");
    assert!(close(&j["input_tokens"]["p99"], 51294.39), "{j}");
    assert_eq!(j["input_tokens"]["max"], 56397);
    let r = &j["prefix_reuse"];
    assert_eq!(r["block_size"], 512);
    assert_eq!(r["reused_tokens"], 48640);
    assert_eq!(r["prompt_tokens"], 1057484);
    assert!(close(&r["ratio"], 48640.0 / 1057484.0), "{j}");

    // With 16-token blocks every id stands for 16 tokens, and an id that was a trailing
    // partial 512-token block becomes a full one: 95 + 1 reused blocks.
    let j = json_of(&["trace", "inspect", "--json", "--block-size", "16", &file]);
    assert_eq!(j["prefix_reuse"]["block_size"], 16);
    assert_eq!(j["prefix_reuse"]["reused_tokens"], 96 * 16);
}

#[test]
fn azure_cut_text_names_every_figure_and_has_no_reuse_line() {
    let file = fixture("azure-code-head.csv");
    let out = ok(&servebench(&["trace", "inspect", &file]));
    for want in [
        "(azure)",
        "requests        40",
        "span            34.284 s",
        "arrival rate    mean 1.138 req/s, peak 10 req/s (1-s bucket at +33 s)",
        "input tokens    p50 1631.0",
        "output tokens   p50 12.5",
    ] {
        assert!(out.contains(want), "missing {want:?}:\n{out}");
    }
    assert!(!out.contains("prefix reuse"), "{out}");
    let j = json_of(&["trace", "inspect", "--json", &file]);
    assert!(j["prefix_reuse"].is_null(), "{j}");
    assert_eq!(j["input_tokens"]["max"], 7436);
}

#[test]
fn html_page_holds_the_figures_and_three_inline_plots() {
    let dir = tempdir("trace", "html");
    let page = dir.join("trace.html");
    let out = servebench(&[
        "trace",
        "inspect",
        &fixture("mooncake-head.jsonl"),
        "--html",
        page.to_str().unwrap(),
    ]);
    ok(&out);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>"));
    for id in ["arrival-rate", "input-lengths", "output-lengths"] {
        assert!(html.contains(&format!("<svg id=\"{id}\"")), "{id}");
    }
    assert!(html.contains("4.60 %"), "reuse on the page");
    assert!(!html.contains("<script") && !html.contains("src="));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn out_of_order_entries_are_counted_and_sorted() {
    let dir = tempdir("trace", "order");
    let f = write(
        &dir,
        "late.jsonl",
        "{\"timestamp\": 1000, \"input_length\": 10, \"output_length\": 1}\n\
         {\"timestamp\": 0, \"input_length\": 20, \"output_length\": 2}\n\
         {\"timestamp\": 3000, \"input_length\": 30, \"output_length\": 3}\n\
         {\"timestamp\": 2000, \"input_length\": 40, \"output_length\": 4}\n",
    );
    let out = servebench(&["trace", "inspect", "--json", f.to_str().unwrap()]);
    let j: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(j["out_of_order"], 2);
    assert!(close(&j["span_s"], 3.0), "{j}");
    assert!(close(&j["arrivals"]["interarrival_cv"], 0.0), "{j}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("2 of 4 entries"), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_files_exit_2_naming_file_line_and_field() {
    let dir = tempdir("trace", "bad");
    let cases = [
        (
            "bad.jsonl",
            "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n\
             {\"timestamp\": 9, \"input_length\": 5, \"output_length\": \"x\"}\n",
            vec!["bad.jsonl:2:", "output_length"],
        ),
        (
            "bad.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n\
             2023-11-16 18:17:03.9799600,4808,10\n\
             2023-11-16 18:17:04.0319600,many,8\n",
            vec!["bad.csv:3:", "ContextTokens"],
        ),
        ("empty.jsonl", "", vec!["empty.jsonl", "empty trace"]),
        (
            "header.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n",
            vec!["header.csv", "empty trace"],
        ),
        (
            "what.txt",
            "hello\n",
            vec!["what.txt:1:", "unknown trace format"],
        ),
    ];
    for (name, body, wants) in cases {
        let f = write(&dir, name, body);
        let out = servebench(&["trace", "inspect", f.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{name}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        for w in wants {
            assert!(err.contains(w), "{name}: want {w:?} in {err}");
        }
        assert!(!err.contains("panicked"), "{err}");
    }
    let out = servebench(&[
        "trace",
        "inspect",
        &dir.join("missing.jsonl").to_string_lossy(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The documented `trace inspect` examples, run as written from the repository root (the
/// `--html` page goes to a scratch directory instead of the root).
#[test]
fn readme_trace_inspect_examples_run_as_written() {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let docs = crate::common::documented_text();
    let commands: Vec<Vec<String>> = crate::common::documented_lines()
        .iter()
        .filter(|l| l.starts_with("servebench trace inspect "))
        .map(|l| servebench_sim::args::split_shell_words(l).unwrap())
        .collect();
    assert!(commands.len() >= 3, "{commands:?}");
    let dir = tempdir("trace", "readme");
    for c in &commands {
        let args: Vec<String> = c[1..]
            .iter()
            .map(|w| {
                if w.ends_with(".html") {
                    dir.join(w).to_string_lossy().into_owned()
                } else {
                    w.clone()
                }
            })
            .collect();
        let out = crate::common::bin()
            .current_dir(root)
            .args(&args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{c:?}\n{}", text(&out));
        if c == &commands[0] {
            // The guide shows this command's output: it must be what the command prints.
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                assert!(docs.contains(line), "the docs lack {line:?}");
            }
        }
    }
    assert!(dir.join("trace.html").is_file());
    let _ = std::fs::remove_dir_all(&dir);
}
