//! Issue 28: vLLM's argument rules. Command lines from vLLM's recipes, written for argparse
//! (underscores, abbreviations, `--flag=value`, a flag given twice), run as `servebench run`
//! in virtual time; `sweep serve` builds its runs without repeating the user's flags.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::common::{self, bin, exclusive, ok, read_json, text};

fn tempdir(name: &str) -> PathBuf {
    common::tempdir("vllm-argv", name)
}

fn run_in(dir: &Path, args: &[&str]) -> Output {
    bin()
        .current_dir(dir)
        .arg("run")
        .args(args)
        .output()
        .expect("spawn servebench")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The `*.servebench.json` a run wrote under `dir/results/runs`.
fn servebench_result(dir: &Path) -> Value {
    let runs = dir.join("results/runs");
    let file = std::fs::read_dir(&runs)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".servebench.json"))
        .unwrap_or_else(|| panic!("no servebench result in {}", runs.display()));
    read_json(&file)
}

/// vLLM's Llama 3.3 70B recipe, shrunk: abbreviated `--random-input`, `--random-output`,
/// `--num-prompt`, and `--trust-remote-code`, which a client ignores with one line.
#[test]
fn the_recipe_with_abbreviated_flags_runs_issue_28() {
    let dir = tempdir("recipe");
    let out = run_in(
        &dir,
        &[
            "--model",
            "meta-llama/Llama-3.3-70B-Instruct",
            "--dataset-name",
            "random",
            "--random-input",
            "48",
            "--random-output",
            "6",
            "--num-prompt",
            "4",
            "--max-concurrency",
            "8",
            "--trust-remote-code",
            "--virtual-time",
            "--disable-tqdm",
            "--save-result",
            "--result-file=r.json",
        ],
    );
    ok(&out);
    let err = stderr(&out);
    assert_eq!(
        err.lines()
            .filter(|l| l.contains("--trust-remote-code"))
            .count(),
        1,
        "{err}"
    );
    let v = read_json(&dir.join("r.json"));
    assert_eq!(v["num_prompts"], 4);
    assert_eq!(v["completed"], 4);
    assert_eq!(v["max_concurrency"], 8);
    // vLLM's random prompts are exactly --random-input-len tokens at range ratio 0.
    assert_eq!(v["total_input_tokens"], 4 * 48);
    assert_eq!(v["total_output_tokens"], 4 * 6);
    // The recorded command line is the user's, as written.
    let recorded = servebench_result(&dir)["metadata"]["command_line"].to_string();
    assert!(recorded.contains("\"--num-prompt\""), "{recorded}");
    assert!(recorded.contains("\"--result-file=r.json\""), "{recorded}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// vLLM's CI command line, shrunk: underscores in names and `--save-result` twice.
#[test]
fn the_command_line_with_underscores_and_a_repeated_switch_runs_issue_28() {
    let dir = tempdir("underscores");
    let out = run_in(
        &dir,
        &[
            "--backend",
            "vllm",
            "--model",
            "X",
            "--dataset_name",
            "random",
            "--metric_percentiles",
            "90,99",
            "--num_prompts",
            "4",
            "--save-result",
            "--save-result",
            "--result_dir",
            "out",
            "--random_input_len",
            "32",
            "--random-output-len=5",
            "--virtual-time",
            "--disable-tqdm",
        ],
    );
    ok(&out);
    assert!(!stderr(&out).contains("duplicate"), "{}", text(&out));
    let files: Vec<PathBuf> = std::fs::read_dir(dir.join("out"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let v = read_json(&files[0]);
    assert_eq!(v["backend"], "vllm");
    assert_eq!(v["num_prompts"], 4);
    assert_eq!(v["completed"], 4);
    assert_eq!(v["total_input_tokens"], 4 * 32);
    assert_eq!(v["total_output_tokens"], 4 * 5);
    // --metric_percentiles took effect.
    assert!(v["p90_ttft_ms"].is_number(), "{v}");
    assert!(v["p99_ttft_ms"].is_number(), "{v}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A flag that takes one value, given three times under three spellings: the last value, and
/// one warning line.
#[test]
fn a_repeated_flag_keeps_its_last_value_with_one_warning_issue_28() {
    let dir = tempdir("repeated");
    let out = run_in(
        &dir,
        &[
            "--num-prompts",
            "2",
            "--num_prompts",
            "3",
            "--num-prompt=5",
            "--random-input-len",
            "16",
            "--random-output-len",
            "4",
            "--virtual-time",
            "--disable-tqdm",
            "--save-result",
            "--result-filename",
            "r.json",
        ],
    );
    ok(&out);
    let err = stderr(&out);
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("duplicate")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(warnings[0].contains("--num-prompts"), "{err}");
    assert_eq!(read_json(&dir.join("r.json"))["completed"], 5);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_ambiguous_abbreviation_exits_2_naming_the_candidates_issue_28() {
    let dir = tempdir("ambiguous");
    let out = run_in(
        &dir,
        &["--random-in", "8", "--random", "8", "--virtual-time"],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = stderr(&out);
    assert!(
        err.contains("--random is ambiguous:")
            && err.contains("--random-input-len")
            && err.contains("--random-output-len"),
        "{err}"
    );
    // A refused vLLM flag is recognised under its other spellings too.
    let out = run_in(&dir, &["--use_beam_search", "--virtual-time"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        stderr(&out).contains("--use-beam-search is a `vllm bench serve` flag"),
        "{}",
        text(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `vllm bench throughput` and `latency` take the same rules, and --async-engine.
#[test]
fn throughput_and_latency_take_vllms_rules_issue_28() {
    let out = bin()
        .args([
            "throughput",
            "--input_len",
            "8",
            "--output-len=4",
            "--num-prompt",
            "3",
            "--async-engine",
            "--trust-remote-code",
        ])
        .output()
        .unwrap();
    let stdout = ok(&out);
    assert!(
        stdout.contains("Total num output tokens:  12"),
        "{}",
        text(&out)
    );
    let err = stderr(&out);
    let notes: Vec<&str> = err.lines().filter(|l| l.contains("ignored")).collect();
    assert_eq!(notes.len(), 1, "{err}");
    assert!(
        notes[0].contains("--trust-remote-code") && notes[0].contains("--async-engine"),
        "{err}"
    );
    let out = bin()
        .args([
            "latency",
            "--input_len",
            "8",
            "--output-len",
            "4",
            "--batch_size",
            "2",
            "--num-iters-warm",
            "0",
            "--num_iters",
            "1",
        ])
        .output()
        .unwrap();
    ok(&out);
}

/// Issue 28: a bench command that already holds `--save-result`, `--result-dir` and
/// `--percentile-metrics` got them twice from sweep serve, and every run failed while
/// `--dry-run` looked fine. Sweep serve's result file wins; the user's metrics are kept.
#[test]
fn sweep_serve_does_not_repeat_the_bench_commands_result_flags_issue_28() {
    let _x = exclusive();
    let dir = tempdir("sweep-serve");
    let exe = env!("CARGO_BIN_EXE_servebench");
    let serve_cmd = format!("{exe} sim llama-3.1-8b --gpu h100 --port {{port}}");
    let bench_cmd = "vllm bench serve --model llama-3.1-8b --dataset_name random \
                     --random-input 32 --random-output 4 --num-prompt 4 --save-result \
                     --result-dir mine --result_filename mine.json \
                     --percentile-metrics ttft,e2el --metric_percentiles 90,99";
    let out = bin()
        .current_dir(&dir)
        .args([
            "sweep",
            "serve",
            "--serve-cmd",
            &serve_cmd,
            "--bench-cmd",
            bench_cmd,
            "-o",
            "results",
            "-e",
            "exp",
            "--num-runs",
            "2",
            "--server-ready-timeout",
            "120",
        ])
        .output()
        .unwrap();
    let stdout = ok(&out);
    assert!(!stdout.contains("[FAILED BENCHMARK]"), "{}", text(&out));
    let exp = dir.join("results/exp");
    let combs = read_json(&exp.join("sweep_serve.json"))["combinations"].clone();
    let comb = &combs[0];
    assert_eq!(comb["status"], "ok", "{comb}");
    let comb_dir = PathBuf::from(comb["dir"].as_str().unwrap());
    let comb_dir = if comb_dir.is_absolute() {
        comb_dir
    } else {
        dir.join(comb_dir)
    };
    for r in 0..2 {
        let v = read_json(&comb_dir.join(format!("run={r}.json")));
        assert_eq!(v["completed"], 4, "{v}");
        assert_eq!(v["total_input_tokens"], 4 * 32, "{v}");
        // The user's metrics and percentiles, with the ones sweep serve reads added.
        assert!(v["p90_e2el_ms"].is_number(), "{v}");
        assert!(v["p99_itl_ms"].is_number(), "{v}");
    }
    // The user's result file gave way to sweep serve's; no run saw a flag twice.
    assert!(!dir.join("mine").exists());
    let log = std::fs::read_to_string(comb_dir.join("bench.log")).unwrap();
    assert!(!log.contains("duplicate"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}
