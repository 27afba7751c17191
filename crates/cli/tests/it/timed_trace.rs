//! `servebench run --dataset-name timed_trace` (vLLM's timed trace, widened to Mooncake, Azure
//! and BurstGPT) and `--dataset-name burstgpt`, in virtual time against the simulator: exact
//! intended times, exact prompt lengths, the trace's prefix reuse in the simulator's cache,
//! windows, refused flag combinations and format detection.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{ok, servebench, tempdir, text};

fn example(name: &str) -> String {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/traces"
    ))
    .join(name)
    .to_string_lossy()
    .into_owned()
}

/// Runs `servebench run --virtual-time` with `args` in `dir` and returns its records, by id.
fn virtual_run(dir: &Path, args: &[&str]) -> Vec<Value> {
    let out = dir.join("out");
    let mut all = vec![
        "run",
        "--virtual-time",
        "--disable-tqdm",
        "--output-dir",
        out.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    ok(&servebench(&all));
    records(&out)
}

fn records(out: &Path) -> Vec<Value> {
    let file = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".requests.jsonl"))
        .unwrap_or_else(|| panic!("no records in {}", out.display()));
    let mut recs: Vec<Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    recs.sort_by_key(|r| r["id"].as_u64().unwrap());
    std::fs::remove_dir_all(out).unwrap();
    recs
}

/// (timestamp, input, output, hash ids) of each JSON line, in file order.
fn rows(path: &str, ts: &str, input: &str) -> Vec<(f64, u64, Vec<u64>)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let ids = v["hash_ids"]
                .as_array()
                .map(|a| a.iter().map(|x| x.as_u64().unwrap()).collect())
                .unwrap_or_default();
            (v[ts].as_f64().unwrap(), v[input].as_u64().unwrap(), ids)
        })
        .collect()
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

#[test]
fn intended_times_are_the_scaled_offsets_to_the_ns_and_lengths_are_exact() {
    let dir = tempdir("timed", "exact");
    let file = example("vllm-timed-trace.jsonl");
    let recs = virtual_run(
        &dir,
        &[
            "--dataset-name",
            "timed_trace",
            "--dataset-path",
            &file,
            "--timed-trace-sec-multiplier",
            "0.37",
        ],
    );
    let trace = rows(&file, "timestamp", "input_length");
    assert_eq!(recs.len(), trace.len());
    let t0 = trace[0].0;
    for (r, (t, input, _)) in recs.iter().zip(&trace) {
        let want = ((t - t0) * 0.37 * 1e9).round() as u64;
        assert_eq!(r["intended"].as_u64().unwrap(), want, "{r}");
        assert_eq!(r["input_tokens"].as_u64().unwrap(), *input, "{r}");
        assert_eq!(r["intended_input_tokens"].as_u64().unwrap(), *input, "{r}");
    }
}

#[test]
fn custom_labels_and_num_prompts_cap_the_entries() {
    let dir = tempdir("timed", "labels");
    let file = write(
        &dir,
        "t.jsonl",
        &(0..12)
            .map(|i| {
                format!(
                    "{{\"at\": {}, \"in\": {}, \"out\": 3}}\n",
                    100 + i * 3,
                    20 + i
                )
            })
            .collect::<String>(),
    );
    let recs = virtual_run(
        &dir,
        &[
            "--dataset-name",
            "timed_trace",
            "--dataset-path",
            file.to_str().unwrap(),
            "--timed-trace-label-timestamp",
            "at",
            "--timed-trace-label-input-length",
            "in",
            "--timed-trace-label-output-length",
            "out",
            "--num-prompts",
            "5",
        ],
    );
    assert_eq!(recs.len(), 5);
    for (i, r) in recs.iter().enumerate() {
        assert_eq!(r["intended"].as_u64().unwrap(), i as u64 * 3_000_000_000);
        assert_eq!(r["input_tokens"].as_u64().unwrap(), 20 + i as u64);
        assert_eq!(r["output_tokens"].as_u64().unwrap(), 3);
    }
}

/// A Mooncake-shaped trace whose entries reuse each other's leading blocks, spaced so each
/// request has finished before the next arrives, no prompt entirely made of cached blocks.
fn reuse_trace() -> String {
    let mut next_id = 1000u64;
    // Five shared prefixes of 1 to 3 blocks.
    let prefixes: Vec<Vec<u64>> = (0..5u64)
        .map(|g| {
            (0..g % 3 + 1)
                .map(|_| {
                    next_id += 1;
                    next_id
                })
                .collect()
        })
        .collect();
    let mut out = String::new();
    for i in 0..60u64 {
        let group = (i * 7 % 5) as usize;
        let mut ids = prefixes[group].clone();
        for _ in 0..(i % 3) {
            next_id += 1;
            ids.push(next_id);
        }
        let input = ids.len() as u64 * 512 + 37 + (i * 13) % 400;
        out.push_str(&format!(
            "{{\"timestamp\": {}, \"input_length\": {input}, \"output_length\": 4, \"hash_ids\": {ids:?}}}\n",
            i * 2000
        ));
    }
    out
}

#[test]
fn the_simulators_cached_tokens_match_the_traces_ideal_reuse() {
    let dir = tempdir("timed", "reuse");
    let file = write(&dir, "reuse.jsonl", &reuse_trace());
    let file = file.to_str().unwrap();
    let recs = virtual_run(
        &dir,
        &[
            "--dataset-name",
            "timed_trace",
            "--dataset-path",
            file,
            "--trace-format",
            "mooncake",
            "--sim",
            "llama-3.1-8b --num-gpu-blocks-override 40000",
        ],
    );
    let inspected: Value = serde_json::from_str(&ok(&servebench(&[
        "trace",
        "inspect",
        "--json",
        "--block-size",
        "512",
        file,
    ])))
    .unwrap();
    let ideal = inspected["prefix_reuse"]["reused_tokens"].as_u64().unwrap() as f64;
    assert!(ideal > 10_000.0, "{inspected}");
    let cached: u64 = recs
        .iter()
        .map(|r| r["cached_tokens"].as_u64().unwrap_or(0))
        .sum();
    let diff = (cached as f64 - ideal).abs() / ideal;
    assert!(diff <= 0.01, "cached {cached} vs ideal {ideal}");
    // Mooncake's defaults: ms timestamps, 512-token blocks.
    assert_eq!(recs[1]["intended"].as_u64().unwrap(), 2_000_000_000);
}

#[test]
fn a_window_is_rebased_to_its_start_and_an_empty_one_names_the_span() {
    let dir = tempdir("timed", "window");
    let file = example("vllm-timed-trace.jsonl");
    // Replay clock = trace seconds; [0.9, 2.5) keeps the rows at 0.9, 1.5 and 2.2.
    let recs = virtual_run(
        &dir,
        &[
            "--dataset-name",
            "timed_trace",
            "--dataset-path",
            &file,
            "--trace-start",
            "0.9",
            "--trace-duration",
            "1.6",
        ],
    );
    let intended: Vec<u64> = recs
        .iter()
        .map(|r| r["intended"].as_u64().unwrap())
        .collect();
    assert_eq!(intended, [0, 600_000_000, 1_300_000_000]);
    assert_eq!(recs[0]["input_tokens"].as_u64().unwrap(), 90);

    let o = servebench(&[
        "run",
        "--virtual-time",
        "--dataset-name",
        "timed_trace",
        "--dataset-path",
        &file,
        "--trace-start",
        "100",
        "--trace-duration",
        "60",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("[100 s, 160 s)"), "{err}");
    assert!(err.contains("0 s to 3.300 s"), "{err}");
}

#[test]
fn rates_with_a_self_timed_trace_are_refused_and_no_self_timed_takes_them() {
    let file = example("vllm-timed-trace.jsonl");
    let base = [
        "run",
        "--virtual-time",
        "--dataset-name",
        "timed_trace",
        "--dataset-path",
        &file,
    ];
    for extra in [
        &["--request-rate", "4"][..],
        &["--burstiness", "0.5"][..],
        &["--self-timed", "--request-rate", "4"][..],
    ] {
        let o = servebench(&[&base[..], extra].concat());
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("self-timed trace"), "{err}");
        assert!(err.contains("--no-self-timed"), "{err}");
    }
    let o = servebench(&[
        "run",
        "--virtual-time",
        "--self-timed",
        "--num-prompts",
        "2",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("timed_trace only"));

    // Lengths from the trace, arrivals from the rate: Poisson, not the trace's clock.
    let dir = tempdir("timed", "rate");
    let recs = virtual_run(
        &dir,
        &[&base[2..], &["--no-self-timed", "--request-rate", "50"][..]].concat(),
    );
    let trace = rows(&file, "timestamp", "input_length");
    assert_eq!(recs.len(), trace.len());
    for (r, (_, input, _)) in recs.iter().zip(&trace) {
        assert_eq!(r["input_tokens"].as_u64().unwrap(), *input);
    }
    assert!(recs[recs.len() - 1]["intended"].as_u64().unwrap() < 1_500_000_000);
}

#[test]
fn every_format_is_detected_or_forced() {
    let dir = tempdir("timed", "formats");
    for (name, force, inputs) in [
        ("azure-2023.csv", None, vec![480, 318, 110, 34, 145]),
        ("azure-2024.csv", None, vec![374, 698, 1024, 215, 440]),
        ("burstgpt.csv", None, vec![472, 108, 230, 417, 64, 310]),
        (
            "mooncake.jsonl",
            Some("mooncake"),
            vec![1200, 1100, 600, 1536, 520],
        ),
    ] {
        let file = example(name);
        let mut args = vec!["--dataset-name", "timed_trace", "--dataset-path", &file];
        if let Some(f) = force {
            args.extend(["--trace-format", f]);
        }
        let recs = virtual_run(&dir, &args);
        let got: Vec<u64> = recs
            .iter()
            .map(|r| r["input_tokens"].as_u64().unwrap())
            .collect();
        assert_eq!(got, inputs, "{name}");
    }
    // BurstGPT seconds: rows at 5, 45, 46 s.
    let recs = virtual_run(
        &dir,
        &[
            "--dataset-name",
            "timed_trace",
            "--dataset-path",
            &example("burstgpt.csv"),
            "--num-prompts",
            "3",
        ],
    );
    let intended: Vec<u64> = recs
        .iter()
        .map(|r| r["intended"].as_u64().unwrap())
        .collect();
    assert_eq!(intended, [0, 40_000_000_000, 41_000_000_000]);
}

#[test]
fn backwards_timestamps_are_sorted_with_a_warning_and_bad_lines_are_named() {
    let dir = tempdir("timed", "bad");
    let file = write(
        &dir,
        "back.jsonl",
        "{\"timestamp\": 2, \"input_length\": 30, \"output_length\": 2}\n\
         {\"timestamp\": 1, \"input_length\": 20, \"output_length\": 2}\n\
         {\"timestamp\": 3, \"input_length\": 40, \"output_length\": 2}\n",
    );
    let out = dir.join("out");
    let o = servebench(&[
        "run",
        "--virtual-time",
        "--disable-tqdm",
        "--output-dir",
        out.to_str().unwrap(),
        "--dataset-name",
        "timed_trace",
        "--dataset-path",
        file.to_str().unwrap(),
    ]);
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("2 of 3 entries were out of time order"),
        "{err}"
    );
    let recs = records(&out);
    let inputs: Vec<u64> = recs
        .iter()
        .map(|r| r["input_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(inputs, [20, 30, 40]);

    let bad = write(
        &dir,
        "bad.jsonl",
        "{\"timestamp\": 1, \"input_length\": 20, \"output_length\": 2}\n\
         {\"timestamp\": 2, \"input_length\": \"many\", \"output_length\": 2}\n",
    );
    let o = servebench(&[
        "run",
        "--virtual-time",
        "--dataset-name",
        "timed_trace",
        "--dataset-path",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.jsonl:2:"), "{err}");
    assert!(err.contains("input_length"), "{err}");
}

#[test]
fn burstgpt_dataset_keeps_gpt4_rows_with_answers_at_the_request_rate() {
    let dir = tempdir("timed", "burstgpt");
    let recs = virtual_run(
        &dir,
        &[
            "--dataset-name",
            "burstgpt",
            "--dataset-path",
            &example("burstgpt.csv"),
            "--num-prompts",
            "8",
            "--request-rate",
            "4",
        ],
    );
    assert_eq!(recs.len(), 8);
    for r in &recs {
        let pair = (
            r["input_tokens"].as_u64().unwrap(),
            r["max_tokens"].as_u64().unwrap(),
        );
        assert!(
            [(108, 20), (64, 32), (310, 54)].contains(&pair),
            "{pair:?} is not a GPT-4 row with an answer"
        );
    }
}

/// The documented trace-replay commands (README and guide) run as written from the workspace root.
#[test]
fn readme_trace_replay_examples_run_as_written() {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let lines = crate::common::documented_lines();
    let commands: Vec<Vec<&str>> = lines
        .iter()
        .filter(|l| {
            l.starts_with("servebench run --dataset-name timed_trace --virtual-time")
                || l.starts_with("servebench run --dataset-name burstgpt --virtual-time")
        })
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(commands.len() >= 5, "{commands:?}");
    let dir = tempdir("timed", "readme");
    for c in &commands {
        let o = crate::common::bin()
            .current_dir(root)
            .args(&c[1..])
            .args(["--disable-tqdm", "--output-dir"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{c:?}\n{}", text(&o));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Over HTTP against the in-process simulator, prompts are built while the run goes: every
/// request still has the trace's exact length and intended time, and shared chunks hit the
/// simulator's prefix cache.
#[test]
fn a_real_time_replay_builds_prompts_on_the_fly_with_exact_lengths() {
    let dir = tempdir("timed", "http");
    let out = dir.join("out");
    let file = example("vllm-timed-trace.jsonl");
    ok(&servebench(&[
        "run",
        "--disable-tqdm",
        "--output-dir",
        out.to_str().unwrap(),
        "--dataset-name",
        "timed_trace",
        "--dataset-path",
        &file,
        "--timed-trace-sec-multiplier",
        "0.1",
    ]));
    let recs = records(&out);
    let trace = rows(&file, "timestamp", "input_length");
    assert_eq!(recs.len(), trace.len());
    let t0 = trace[0].0;
    for (r, (t, input, _)) in recs.iter().zip(&trace) {
        assert!(r["failure"].is_null(), "{r}");
        assert_eq!(
            r["intended"].as_u64().unwrap(),
            ((t - t0) * 0.1 * 1e9).round() as u64
        );
        assert_eq!(r["input_tokens"].as_u64().unwrap(), *input, "{r}");
    }
    let cached: u64 = recs
        .iter()
        .map(|r| r["cached_tokens"].as_u64().unwrap_or(0))
        .sum();
    assert!(cached > 0, "no shared chunk hit the prefix cache");
}

/// `trace inspect --trace-format vllm` reads seconds and counts vLLM's 16-token chunks.
#[test]
fn inspect_reads_vllm_timed_traces_with_16_token_chunks() {
    let file = example("vllm-timed-trace.jsonl");
    let j: Value = serde_json::from_str(&ok(&servebench(&[
        "trace",
        "inspect",
        "--json",
        "--trace-format",
        "vllm",
        &file,
    ])))
    .unwrap();
    assert_eq!(j["format"], "vllm");
    assert!((j["span_s"].as_f64().unwrap() - 3.3).abs() < 1e-9, "{j}");
    assert_eq!(j["prefix_reuse"]["block_size"], 16);
    // Full 16-token blocks already seen: 2 + 4 + 4 + 2 + 3 of them.
    assert_eq!(j["prefix_reuse"]["reused_tokens"], 15 * 16);
}

/// One detector serves `trace inspect` and `run`: vLLM's timed trace (decimal seconds) is
/// read in seconds by both, without `--trace-format`. Before, `inspect` took it for Mooncake
/// (milliseconds): span 0.003 s and 2,121 req/s where `run` replayed 3.3 s.
#[test]
fn inspect_and_run_read_a_vllm_timed_trace_alike_without_a_format_flag() {
    let file = example("vllm-timed-trace.jsonl");
    let j: Value =
        serde_json::from_str(&ok(&servebench(&["trace", "inspect", "--json", &file]))).unwrap();
    assert_eq!(j["format"], "vllm", "{j}");
    assert!((j["span_s"].as_f64().unwrap() - 3.3).abs() < 1e-9, "{j}");
    let dir = tempdir("timed", "one-detector");
    let recs = virtual_run(
        &dir,
        &["--dataset-name", "timed_trace", "--dataset-path", &file],
    );
    let last = recs
        .iter()
        .map(|r| r["intended"].as_u64().unwrap())
        .max()
        .unwrap();
    assert_eq!(last, 3_300_000_000, "run replays the same 3.3 s");
    // Integer timestamps are Mooncake's milliseconds, for both.
    let mooncake = example("mooncake.jsonl");
    let j: Value =
        serde_json::from_str(&ok(&servebench(&["trace", "inspect", "--json", &mooncake]))).unwrap();
    assert_eq!(j["format"], "mooncake", "{j}");
    let span_ns = (j["span_s"].as_f64().unwrap() * 1e9).round() as u64;
    let recs = virtual_run(
        &dir,
        &["--dataset-name", "timed_trace", "--dataset-path", &mooncake],
    );
    let last = recs
        .iter()
        .map(|r| r["intended"].as_u64().unwrap())
        .max()
        .unwrap();
    assert_eq!(
        last, span_ns,
        "run replays mooncake.jsonl in ms as inspect reads it"
    );
}

/// A self-timed trace is an open loop on the trace's clock: its verdict holds the client to
/// the trace's mean rate (before: "offered unlimited (every request due at once)", untrue of
/// a trace whose requests arrive over time).
#[test]
fn a_self_timed_trace_is_judged_at_the_traces_own_rate() {
    let dir = tempdir("timed", "self-timed-load");
    let file = example("mooncake.jsonl");
    let o = servebench(&[
        "run",
        "--virtual-time",
        "--dataset-name",
        "timed_trace",
        "--dataset-path",
        &file,
        "--trace-format",
        "mooncake",
        "--timed-trace-sec-multiplier",
        "0.0005",
        "--output-dir",
        dir.to_str().unwrap(),
    ]);
    let out = ok(&o);
    assert!(!out.contains("every request due at once"), "{out}");
    let load = out
        .lines()
        .find(|l| l.starts_with("Load: offered "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(load.contains("req/s, achieved"), "{load}");
}
