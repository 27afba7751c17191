//! `servebench report`: re-rendering an experiment directory built from real virtual-time
//! runs (experiment.json written by hand), and a single result file as a one-row report.

use crate::common::{self, bin, ok};
use std::path::{Path, PathBuf};

fn tempdir(name: &str) -> PathBuf {
    common::tempdir("report", name)
}

/// One virtual-time run into `dir` (40 requests, 32 output tokens); returns its result
/// file's name.
fn virtual_run(dir: &Path, seed: &str, input_len: &str, rate: &str) -> String {
    let out = bin()
        .args([
            "run",
            "--virtual-time",
            "--num-prompts",
            "40",
            "--seed",
            seed,
        ])
        .args(["--request-rate", rate, "--random-input-len", input_len])
        .args(["--random-output-len", "32"])
        .arg("--output-dir")
        .arg(dir)
        .output()
        .expect("spawn servebench");
    ok(&out);
    std::fs::read_dir(dir)
        .expect("run dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.ends_with(".servebench.json"))
        .expect("a result file")
}

/// A matrix directory with rows A (one run) and B (two repeats) and a two-point sweep of C.
fn experiment(dir: &Path) {
    let a = virtual_run(&dir.join("rows/A"), "1", "256", "4");
    let b1 = virtual_run(&dir.join("rows/B/repeat-1"), "2", "1024", "4");
    let b2 = virtual_run(&dir.join("rows/B/repeat-2"), "3", "1024", "4");
    let p0 = virtual_run(&dir.join("points/0"), "4", "256", "4");
    let p1 = virtual_run(&dir.join("points/1"), "5", "256", "inf");
    let manifest = serde_json::json!({
        "schema": "servebench.experiment/v1",
        "kind": "matrix",
        "quick": true,
        "title": "Hand-built experiment",
        "rows": [
            {"id": "A", "name": "baseline", "hypothesis": "short prompts answer fast", "runs": [format!("rows/A/{a}")]},
            {"id": "B", "name": "long prompt", "hypothesis": "long prompts raise TTFT",
             "runs": [format!("rows/B/repeat-1/{b1}"), format!("rows/B/repeat-2/{b2}")]}
        ],
        "sweep": {"row": "C", "variable": "request_rate", "slos": ["ttft:p99:1000"],
                  "points": [{"value": 4, "runs": [format!("points/0/{p0}")]},
                             {"value": "inf", "runs": [format!("points/1/{p1}")]}],
                  "stopped_early": false, "stop_reason": ""}
    });
    std::fs::write(
        dir.join("experiment.json"),
        serde_json::to_string_pretty(&manifest).expect("json"),
    )
    .expect("write experiment.json");
    std::fs::write(
        dir.join("interpretation.md"),
        "Row B is **prefill-bound**.\n",
    )
    .expect("write");
}

#[test]
fn report_re_renders_an_experiment_directory() {
    let dir = tempdir("matrix");
    experiment(&dir);
    let out = bin().arg("report").arg(&dir).output().expect("spawn");
    let table = ok(&out);
    assert!(table.contains("== Hand-built experiment =="), "{table}");
    let row_b = table
        .lines()
        .find(|l| l.starts_with("B "))
        .expect("row B line");
    assert!(row_b.contains(" ± "), "repeats show a spread: {row_b}");
    assert!(table.contains("-- sweep of request_rate over row C --"));
    assert!(
        table.contains("unlimited"),
        "an 'inf' point is read as unlimited: {table}"
    );
    assert!(
        table.contains("headline: "),
        "SLOs give a headline: {table}"
    );

    let md = std::fs::read_to_string(dir.join("report.md")).expect("report.md");
    assert!(
        md.contains("| A | baseline | short prompts answer fast |"),
        "{md}"
    );
    assert!(md.contains("numbers from a quick run"));
    assert!(md.contains("## Interpretation"));
    assert!(md.contains("Target: servebench's simulated engine"));

    let csv = std::fs::read_to_string(dir.join("summary.csv")).expect("summary.csv");
    assert_eq!(csv.lines().count(), 1 + 5, "header and five runs:\n{csv}");
    assert!(csv
        .lines()
        .nth(1)
        .is_some_and(|l| l.contains(",A,baseline,")));

    let html = std::fs::read_to_string(dir.join("report.html")).expect("report.html");
    for id in [
        "frontier-ttft-p99",
        "cdf-ttft-A",
        "cdf-itl-B",
        "ts-output-point-1",
        "rows-table",
        "sweep-table",
    ] {
        assert!(html.contains(&format!("id=\"{id}")), "{id} missing");
    }
    assert!(html.contains("<strong>prefill-bound</strong>"));
}

#[test]
fn report_of_a_single_result_file_is_a_one_row_report() {
    let dir = tempdir("single");
    let name = virtual_run(&dir, "0", "256", "4");
    let stem = name.trim_end_matches(".servebench.json");
    let out = bin()
        .args(["report", "--print", "markdown"])
        .arg(dir.join(&name))
        .output()
        .expect("spawn");
    let md = ok(&out);
    assert!(md.contains(&format!("# servebench run {stem}")), "{md}");
    assert_eq!(
        md.lines().filter(|l| l.starts_with("| run |")).count(),
        1,
        "{md}"
    );
    for suffix in ["report.html", "report.md", "summary.csv"] {
        let p = dir.join(format!("{stem}.{suffix}"));
        assert!(p.exists(), "{} not written", p.display());
    }
    let csv = std::fs::read_to_string(dir.join(format!("{stem}.summary.csv"))).expect("csv");
    assert_eq!(csv.lines().count(), 2);

    // A run directory holding one result reads the same; --no-write writes nothing more.
    let other = tempdir("single-out");
    let out = bin()
        .args(["report", "--no-write", "--print", "csv"])
        .arg(&dir)
        .arg("--output-dir")
        .arg(&other)
        .output()
        .expect("spawn");
    assert_eq!(ok(&out), csv);
    assert_eq!(std::fs::read_dir(&other).expect("dir").count(), 0);
}

#[test]
fn report_errors_exit_2_with_a_clear_message() {
    let dir = tempdir("errors");
    let out = bin()
        .arg("report")
        .arg(dir.join("missing"))
        .output()
        .expect("spawn");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));

    let out = bin().arg("report").arg(&dir).output().expect("spawn");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("neither experiment.json"));

    std::fs::write(
        dir.join("experiment.json"),
        r#"{"kind": "matrix", "rows": [{"id": "A", "runs": ["rows/A/x.servebench.json"]}]}"#,
    )
    .expect("write");
    let out = bin().arg("report").arg(&dir).output().expect("spawn");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("loading row A") && err.contains("x.servebench.json"),
        "{err}"
    );
}

/// The files of a directory, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// `report RECORDS.jsonl --no-write` prints the rebuilt report and writes nothing, anywhere
/// near the records (before, it wrote the rebuilt results beside them).
#[test]
fn report_of_records_with_no_write_writes_nothing() {
    let dir = tempdir("no-write");
    let name = virtual_run(&dir, "3", "64", "8");
    std::fs::remove_file(dir.join(&name)).expect("remove the result");
    let records = dir.join(name.replace(".servebench.json", ".requests.jsonl"));
    let before = listing(&dir);
    let out = bin()
        .arg("report")
        .arg(&records)
        .arg("--no-write")
        .output()
        .expect("spawn servebench");
    let table = ok(&out);
    assert!(table.contains("rebuilt"), "{table}");
    assert_eq!(listing(&dir), before, "nothing written beside the records");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("not found"), "{err}");
}
