//! `servebench matrix` end to end: the real binary against the simulator (virtual time, and
//! once in real time), checking the experiment directory contract, re-runs from plan.toml,
//! repeats and secrets.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use crate::common::{self, bin, read_json, text};
use serde_json::Value;
use servebench_cli::matrix::plan::MatrixPlan;

fn tempdir(name: &str) -> PathBuf {
    common::tempdir("matrix", name)
}

const SECRET: &str = "sk-test-matrix-secret";

fn matrix(args: &[&str]) -> Output {
    bin()
        .arg("matrix")
        .args(args)
        .output()
        .expect("spawn servebench")
}

/// The experiment directory printed on the last stdout line.
fn experiment_dir(o: &Output) -> PathBuf {
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("experiment: "))
        .unwrap_or_else(|| panic!("{}", text(o)));
    PathBuf::from(line)
}

fn all_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

fn assert_no_secret(dir: &Path, secret: &str) {
    for f in all_files(dir) {
        let bytes = std::fs::read(&f).expect("read");
        assert!(
            !String::from_utf8_lossy(&bytes).contains(secret),
            "{} contains the API key",
            f.display()
        );
    }
}

/// Checks the contract of an experiment directory and returns experiment.json.
fn check_experiment(dir: &Path, kind: &str, quick: bool, row_ids: &[&str]) -> Value {
    let exp = read_json(&dir.join("experiment.json"));
    assert_eq!(exp["schema"], "servebench.experiment/v1");
    assert_eq!(exp["kind"], kind);
    assert_eq!(exp["quick"], quick);
    let rows = exp["rows"].as_array().expect("rows");
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().expect("id")).collect();
    assert_eq!(ids, row_ids);
    for r in rows {
        assert!(!r["hypothesis"].as_str().expect("hypothesis").is_empty());
        let runs = r["runs"].as_array().expect("runs");
        assert!(!runs.is_empty(), "row {} has no run", r["id"]);
        for run in runs {
            let rel = run.as_str().expect("run path");
            assert!(
                rel.starts_with(&format!("rows/{}/", r["id"].as_str().unwrap_or_default())),
                "{rel}"
            );
            let result = read_json(&dir.join(rel));
            assert_eq!(result["schema"], "servebench.result/v1");
            let records = dir
                .join(rel)
                .with_file_name(result["records_path"].as_str().expect("records_path"));
            let n = std::fs::read_to_string(&records)
                .expect("records")
                .lines()
                .count() as u64;
            assert_eq!(
                n,
                result["plan"]["num_prompts"].as_u64().expect("num_prompts"),
                "{}",
                records.display()
            );
            assert!(result["summary"]["completed"].as_u64().expect("completed") > 0);
        }
    }
    let env = read_json(&dir.join("environment.json"));
    assert_eq!(env["schema"], "servebench.environment/v1");
    assert_eq!(env["servebench_version"], env!("CARGO_PKG_VERSION"));
    assert!(env["command_line"].as_array().expect("command line").len() > 2);
    assert!(env["host"]["cpus"].as_u64().expect("cpus") >= 1);
    assert_eq!(env["target"]["kind"], "simulator");
    assert_eq!(env["target"]["sim_config"]["gpu"], "h100");
    let plan: MatrixPlan =
        toml::from_str(&std::fs::read_to_string(dir.join("plan.toml")).expect("plan.toml"))
            .expect("plan.toml parses");
    plan.validate().expect("plan.toml is valid");
    exp
}

#[test]
fn quick_virtual_matrix_writes_the_experiment_directory_and_plan_toml_reruns() {
    let root = tempdir("virtual");
    let results = root.join("results");
    let o = matrix(&[
        "--virtual-time",
        "--scale",
        "quick",
        "--results-dir",
        results.to_str().unwrap(),
        "--api-key",
        SECRET,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let dir = experiment_dir(&o);
    // results/<model>/<hardware>/<timestamp>/
    let rel: Vec<String> = dir
        .strip_prefix(&results)
        .expect("under --results-dir")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    assert_eq!(rel[..2], ["llama-3.1-8b", "sim-h100"]);
    assert_eq!(rel.len(), 3);

    let exp = check_experiment(&dir, "matrix", true, &["A", "B", "C", "D", "E"]);
    for report in ["report.html", "report.md", "summary.csv"] {
        assert!(dir.join(report).is_file(), "{report} missing");
    }
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        md.contains("TTFT is one short prefill"),
        "hypotheses in the report: {md}"
    );
    assert!(exp["notes"]
        .as_array()
        .expect("notes")
        .iter()
        .any(|n| n.as_str().unwrap_or_default().contains("Quick run")));
    // Quick: a tenth of row A's 100 requests.
    let a = read_json(&dir.join(exp["rows"][0]["runs"][0].as_str().unwrap()));
    assert_eq!(a["plan"]["num_prompts"], 10);
    // Row E is a warm row: one shared prefix, reused by the cache.
    let e = read_json(&dir.join(exp["rows"][4]["runs"][0].as_str().unwrap()));
    assert_eq!(e["plan"]["random_prefix_len"], 3072);
    assert!(
        e["summary"]["total_cached_tokens"].as_u64().unwrap_or(0) > 0,
        "row E reused no prefix"
    );
    // Row A is cold: nothing cached.
    assert_eq!(a["summary"]["total_cached_tokens"].as_u64().unwrap_or(0), 0);

    let env = read_json(&dir.join("environment.json"));
    assert_eq!(env["target"]["clock"], "virtual");
    let cl: Vec<&str> = env["command_line"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(cl.contains(&"***"), "{cl:?}");
    assert_no_secret(&dir, SECRET);

    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("QUICK RUN"), "{stdout}");
    assert!(
        stdout.contains("how much") || stdout.contains("TTFT is one short prefill"),
        "hypotheses beside the numbers: {stdout}"
    );

    // plan.toml re-runs: the same rows, the same scale.
    let plan = dir.join("plan.toml");
    let again = root.join("again");
    let started = Instant::now();
    let o2 = matrix(&[
        "--matrix",
        plan.to_str().unwrap(),
        "--virtual-time",
        "--rows",
        "A,E",
        "--results-dir",
        again.to_str().unwrap(),
    ]);
    assert!(o2.status.success(), "{}", text(&o2));
    assert!(started.elapsed() < Duration::from_secs(60));
    let dir2 = experiment_dir(&o2);
    check_experiment(&dir2, "matrix", true, &["A", "E"]);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_matrix_file_with_repeats_reports_mean_and_std_with_per_run_values() {
    let root = tempdir("repeat");
    let file = root.join("m.toml");
    std::fs::write(
        &file,
        r#"
title = "two rows"
[target]
virtual_time = true
[defaults]
num_warmups = 0
[[row]]
id = "short"
hypothesis = "short prompts answer fast"
input_len = 128
output_len = 16
request_rate = 20
num_prompts = 30
[[row]]
id = "long"
hypothesis = "long prompts take longer to first token"
input_len = 3000
output_len = 16
max_concurrency = 4
request_rate = "inf"
num_prompts = 30
"#,
    )
    .unwrap();
    let o = matrix(&[
        "--matrix",
        file.to_str().unwrap(),
        "--repeat",
        "2",
        "--results-dir",
        root.join("r").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let dir = experiment_dir(&o);
    let exp = check_experiment(&dir, "matrix", false, &["short", "long"]);
    assert_eq!(exp["title"], "two rows");
    assert_eq!(exp["repeat"], 2);
    for row in exp["rows"].as_array().unwrap() {
        let id = row["id"].as_str().unwrap();
        let runs: Vec<&str> = row["runs"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(runs.len(), 2);
        assert!(
            runs[0].starts_with(&format!("rows/{id}/repeat-1/")),
            "{runs:?}"
        );
        assert!(
            runs[1].starts_with(&format!("rows/{id}/repeat-2/")),
            "{runs:?}"
        );
        // Each repeat has its own seed, so its own prompts.
        let seeds: Vec<u64> = runs
            .iter()
            .map(|r| {
                read_json(&dir.join(r))["metadata"]["seed"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_ne!(seeds[0], seeds[1]);

        let rep = read_json(&dir.join(row["repeat_summary"].as_str().expect("repeat.json")));
        assert_eq!(rep["runs"], 2);
        let ttft = rep["figures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "ttft.mean")
            .expect("ttft.mean");
        let values: Vec<f64> = ttft["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        assert_eq!(values.len(), 2);
        let mean = (values[0] + values[1]) / 2.0;
        assert!((ttft["mean"].as_f64().unwrap() - mean).abs() < 1e-9);
        assert!((ttft["std"].as_f64().unwrap() - (values[0] - values[1]).abs() / 2.0).abs() < 1e-9);
    }
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains(" ± "), "{stdout}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn the_example_matrix_is_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/matrix.toml");
    let plan = MatrixPlan::load(&path).expect("examples/matrix.toml");
    assert_eq!(plan.rows.len(), 3);
}

#[test]
fn bad_matrices_fail_before_anything_runs() {
    let root = tempdir("bad");
    let file = root.join("bad.toml");
    std::fs::write(&file, "[[row]]\nid = \"A\"\nflags = [\"--no-such-flag\"]\n").unwrap();
    let o = matrix(&[
        "--matrix",
        file.to_str().unwrap(),
        "--virtual-time",
        "--results-dir",
        root.join("r").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--no-such-flag"),
        "{}",
        text(&o)
    );
    assert!(
        !root.join("r").exists(),
        "no experiment directory for a matrix that cannot run"
    );

    let o = matrix(&[
        "--virtual-time",
        "--rows",
        "Z",
        "--results-dir",
        root.join("r").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no row \"Z\""),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// The README's quickstart: one command, the whole default matrix in real time against the
/// in-process simulator. Measured at about 90 s on two cores; the bound is generous.
#[test]
fn quick_real_time_matrix_against_the_in_process_simulator() {
    let root = tempdir("realtime");
    let started = Instant::now();
    let o = matrix(&[
        "--scale",
        "quick",
        "--num-warmups",
        "1",
        "--results-dir",
        root.to_str().unwrap(),
        "--api-key",
        SECRET,
    ]);
    let took = started.elapsed();
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        took < Duration::from_secs(300),
        "quick matrix took {took:?}"
    );
    let dir = experiment_dir(&o);
    check_experiment(&dir, "matrix", true, &["A", "B", "C", "D", "E"]);
    let env = read_json(&dir.join("environment.json"));
    assert_eq!(env["target"]["clock"], "real");
    // The server answered /version and /v1/models.
    assert!(
        env["target"]["server_version"].is_object(),
        "{}",
        env["target"]
    );
    assert!(
        env["target"]["server_models"]["data"].is_array(),
        "{}",
        env["target"]
    );
    assert_no_secret(&dir, SECRET);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_trace_adds_row_f_replayed_on_the_traces_own_clock() {
    let root = tempdir("trace");
    let trace = root.join("mooncake.jsonl");
    // 12 requests, one every 250 ms (4 req/s), sharing their first 512-token block.
    let lines: String = (0..12)
        .map(|i| {
            format!(
                "{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": {}, \"hash_ids\": [7, {}]}}\n",
                i * 250,
                700 + 10 * i,
                20 + i,
                100 + i
            )
        })
        .collect();
    std::fs::write(&trace, lines).unwrap();
    let o = matrix(&[
        "--virtual-time",
        "--scale",
        "quick",
        "--trace",
        trace.to_str().unwrap(),
        "--rows",
        "F",
        "--results-dir",
        root.join("r").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let dir = experiment_dir(&o);
    let exp = check_experiment(&dir, "matrix", true, &["F"]);
    let f = read_json(&dir.join(exp["rows"][0]["runs"][0].as_str().unwrap()));
    assert_eq!(f["plan"]["num_prompts"], 12);
    assert_eq!(f["plan"]["dataset_name"], "timed_trace");
    assert_eq!(f["plan"]["request_rate"], "inf");
    // Self-timed: no dataset is prepared; request i is meant at i × 250 ms exactly.
    assert!(!dir.join("rows/F/trace-dataset.jsonl").exists());
    let records = std::fs::read_dir(
        dir.join(exp["rows"][0]["runs"][0].as_str().unwrap())
            .parent()
            .unwrap(),
    )
    .unwrap()
    .map(|e| e.unwrap().path())
    .find(|p| p.to_string_lossy().ends_with(".requests.jsonl"))
    .unwrap();
    let mut intended: Vec<u64> = std::fs::read_to_string(&records)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["intended"]
                .as_u64()
                .unwrap()
        })
        .collect();
    intended.sort_unstable();
    assert_eq!(
        intended,
        (0..12).map(|i| i * 250_000_000).collect::<Vec<u64>>()
    );
    let notes = exp["notes"].to_string();
    assert!(notes.contains("12 requests of trace"), "{notes}");
    assert!(notes.contains("own clock (mean 4.000 req/s"), "{notes}");
    let plan = std::fs::read_to_string(dir.join("plan.toml")).unwrap();
    assert!(plan.contains("mooncake.jsonl"), "{plan}");
    let _ = std::fs::remove_dir_all(&root);
}

/// Every default row is a sound measurement by servebench's own rules, at quick and at full
/// scale: none overloaded or unsteady (before, rows A, B, C and E queued behind their own
/// concurrency cap). What the rows still lack (p99 samples, at quick scale the 60 s) is said
/// per row: on the terminal, in report.md's verdicts and in summary.csv.
#[test]
fn default_rows_are_sound_measurements_and_the_report_gives_their_verdicts() {
    let root = tempdir("verdicts");
    for scale in ["quick", "full"] {
        let results = root.join(scale);
        let o = matrix(&[
            "--virtual-time",
            "--scale",
            scale,
            "--results-dir",
            results.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", text(&o));
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        for id in ["A", "B", "C", "D", "E"] {
            let line = out
                .lines()
                .find(|l| l.starts_with(&format!("{id} verdict: ")))
                .unwrap_or_else(|| panic!("no verdict for row {id}: {out}"));
            assert!(
                line.contains("VALID") || line.contains("NOT ENOUGH DATA"),
                "{scale}: {line}"
            );
            assert!(!line.contains("overloaded"), "{scale}: {line}");
            assert!(!line.contains("NOT STEADY"), "{scale}: {line}");
        }
        let dir = experiment_dir(&o);
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(md.contains("### Verdicts"), "{md}");
        assert!(
            md.contains("- **A**: NOT ENOUGH DATA: p99 TTFT rests on"),
            "{md}"
        );
        let csv = std::fs::read_to_string(dir.join("summary.csv")).unwrap();
        let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
        let col = header
            .iter()
            .position(|c| *c == "verdict")
            .expect("verdict column");
        let over = header
            .iter()
            .position(|c| *c == "overloaded")
            .expect("overloaded column");
        for l in csv.lines().skip(1) {
            let cells: Vec<&str> = l.split(',').collect();
            assert!(
                cells[col] == "valid" || cells[col] == "not_enough_data",
                "{l}"
            );
            assert_eq!(cells[over], "false", "{l}");
        }
    }
    let _ = std::fs::remove_dir_all(&root);
}
