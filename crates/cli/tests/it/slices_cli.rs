//! `run --slice-duration`: the windows saved in the result file and the CSV, from the same
//! records as the summary, and drawn by `servebench report`.

use std::path::{Path, PathBuf};

use crate::common::{self, bin, ok, read_json};

fn only(dir: &Path, suffix: &str) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    assert_eq!(found.len(), 1, "one *{suffix} in {}", dir.display());
    found[0].clone()
}

#[test]
fn a_sliced_run_saves_windows_that_add_up_to_its_summary_and_the_report_draws_them() {
    let dir = common::tempdir("slices", "run");
    let out = bin()
        .args([
            "run",
            "--virtual-time",
            "--num-prompts",
            "120",
            "--request-rate",
            "20",
            "--random-input-len",
            "64",
            "--random-output-len",
            "16",
            "--slice-duration",
            "1.5",
            "--output-dir",
        ])
        .arg(&dir)
        .output()
        .expect("spawn servebench");
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("metrics per window:"), "{stderr}");

    let result = read_json(&only(&dir, ".servebench.json"));
    let s = &result["slices"];
    assert_eq!(s["width_s"], 1.5);
    let windows = s["windows"].as_array().expect("windows");
    assert!(windows.len() >= 4, "{} windows", windows.len());
    let sum = |f: &dyn Fn(&serde_json::Value) -> u64| windows.iter().map(f).sum::<u64>();
    let summary = &result["summary"];
    assert_eq!(
        sum(&|w| w["completed"].as_u64().unwrap_or(0)),
        summary["completed"].as_u64().unwrap_or(0)
    );
    assert_eq!(sum(&|w| w["started"].as_u64().unwrap_or(0)), 120);
    for m in ["ttft", "itl", "tpot", "e2el"] {
        assert_eq!(
            sum(&|w| w[m]["n"].as_u64().unwrap_or(0)),
            summary[m]["n"].as_u64().unwrap_or(0),
            "{m}"
        );
    }
    // The CSV has the same windows, figure for figure.
    let csv = std::fs::read_to_string(only(&dir, ".slices.csv")).expect("csv");
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 1 + windows.len());
    let header: Vec<&str> = lines[0].split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    for (line, w) in lines[1..].iter().zip(windows) {
        let cells: Vec<&str> = line.split(',').collect();
        assert_eq!(cells.len(), header.len());
        assert_eq!(cells[col("completed")], w["completed"].to_string());
        let p99 = w["ttft"]["percentiles"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["p"] == 99.0))
            .map(|p| p["value"].as_f64().expect("value"));
        assert_eq!(
            cells[col("ttft_p99_ms")].parse::<f64>().ok(),
            p99,
            "window {w}"
        );
    }

    let report = bin()
        .args(["report", "--print", "none"])
        .arg(only(&dir, ".servebench.json"))
        .output()
        .expect("spawn servebench");
    ok(&report);
    let html = std::fs::read_to_string(only(&dir, ".report.html")).expect("html");
    assert!(html.contains("(as saved)"), "the saved slices are drawn");
    for id in [
        "slices-ttft-",
        "slices-itl-",
        "slices-throughput-",
        "slices-load-",
    ] {
        assert!(html.contains(id), "{id}");
    }
    assert!(html.contains("class=\"series band\""));
}
