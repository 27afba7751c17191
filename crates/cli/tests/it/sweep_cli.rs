//! `servebench sweep` end to end in virtual time: the knee between light and heavy loads,
//! the SLO headline, early stop past saturation, `auto` rates and repeats.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::{self, bin, read_json, text};
use serde_json::Value;

fn tempdir(name: &str) -> PathBuf {
    common::tempdir("sweep", name)
}

fn sweep(args: &[&str]) -> Output {
    bin()
        .arg("sweep")
        .arg("--virtual-time")
        .args(args)
        .output()
        .expect("spawn servebench")
}

fn experiment(o: &Output) -> (PathBuf, Value) {
    assert!(o.status.success(), "{}", text(o));
    let out = String::from_utf8_lossy(&o.stdout);
    let dir = PathBuf::from(
        out.lines()
            .rev()
            .find_map(|l| l.strip_prefix("experiment: "))
            .unwrap_or_else(|| panic!("{}", text(o))),
    );
    let exp = read_json(&dir.join("experiment.json"));
    assert_eq!(exp["schema"], "servebench.experiment/v1");
    assert_eq!(exp["kind"], "sweep");
    (dir, exp)
}

/// p99 TTFT (ms) of each point's first run, from its result file.
fn p99_ttft(dir: &Path, exp: &Value) -> Vec<f64> {
    p99_of(dir, exp, "ttft")
}

const ROW: [&str; 6] = [
    "--input-len",
    "1024",
    "--output-len",
    "128",
    "--num-prompts",
    "200",
];
const RATES: &str = "2,4,8,16,32,64,128";

#[test]
fn knee_lies_between_light_and_heavy_loads_and_the_slo_headline_names_the_last_point_meeting_it() {
    let root = tempdir("knee");
    let mut args: Vec<&str> = ROW.to_vec();
    args.extend([
        "--request-rate",
        RATES,
        "--results-dir",
        root.to_str().unwrap(),
    ]);
    let (dir, exp) = experiment(&sweep(&args));
    let s = &exp["sweep"];
    assert_eq!(s["variable"], "request_rate");
    assert_eq!(s["latency_metric"], "ttft:p99");
    let values: Vec<f64> = s["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["value"].as_f64().unwrap())
        .collect();
    assert_eq!(values, [2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0]);
    for p in s["points"].as_array().unwrap() {
        assert!(p["runs"][0].as_str().unwrap().starts_with("points/"), "{p}");
    }
    let knee = s["knee"].as_u64().expect("a knee") as usize;
    let last = values.len() - 1;
    assert!(
        knee > 0 && knee < last,
        "knee at point {knee} of 0..={last}"
    );
    let lat = p99_ttft(&dir, &exp);
    // Under-loaded before the knee, overloaded after it.
    assert!(lat[last] > 3.0 * lat[knee], "{lat:?}");
    assert!(lat[0] < lat[knee], "{lat:?}");

    // An SLO between two neighbouring points, with every heavier point above it: the
    // headline must name the lighter one.
    let j = (0..last)
        .rev()
        .find(|&j| lat[j] < lat[j + 1] && lat[j + 1..].iter().all(|&l| l > lat[j]))
        .expect("a rising tail");
    let j = j.min(knee);
    let threshold = ((lat[j] + lat[j + 1]) / 2.0).round();
    assert!(
        lat[j] < threshold && lat[j + 1] > threshold,
        "{lat:?} {threshold}"
    );
    let slo = format!("ttft:p99:{threshold}");
    let mut args: Vec<&str> = ROW.to_vec();
    args.extend([
        "--request-rate",
        RATES,
        "--no-early-stop",
        "--slo",
        &slo,
        "--results-dir",
        root.to_str().unwrap(),
    ]);
    let o = sweep(&args);
    let (dir2, exp2) = experiment(&o);
    let s2 = &exp2["sweep"];
    assert_eq!(s2["slos"], serde_json::json!([slo]));
    let lat2 = p99_ttft(&dir2, &exp2);
    assert_eq!(lat2, lat, "virtual time is deterministic");
    assert_eq!(s2["best_under_slo"].as_u64(), Some(j as u64), "{s2}");
    let headline = s2["headline"].as_str().expect("headline");
    let rate = values[j];
    assert!(
        headline.contains(&format!("(rate {rate} req/s)")),
        "{headline}"
    );
    assert!(
        headline.contains(&format!("p99 TTFT < {threshold} ms")),
        "{headline}"
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(headline),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn the_sweep_stops_once_a_point_is_past_saturation() {
    let root = tempdir("early");
    let mut args: Vec<&str> = ROW.to_vec();
    args.extend([
        "--max-concurrency",
        "8",
        "--request-rate",
        "4,16,64,256,1024,4096",
        "--results-dir",
        root.to_str().unwrap(),
    ]);
    let (_, exp) = experiment(&sweep(&args));
    let s = &exp["sweep"];
    assert_eq!(s["stopped_early"], true, "{s}");
    let reason = s["stop_reason"].as_str().unwrap();
    assert!(reason.contains("past saturation"), "{reason}");
    let measured = s["points"].as_array().unwrap().len();
    assert!(measured < 6, "{measured} points measured");
    assert_eq!(s["saturation"].as_u64(), Some(measured as u64 - 1));
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn auto_rates_come_from_a_closed_loop_probe() {
    let root = tempdir("auto");
    let args = [
        "--row",
        "A",
        "--num-prompts",
        "60",
        "--request-rate",
        "auto",
        "--max-concurrency",
        "none",
        "--probe-concurrency",
        "16",
        "--points",
        "3",
        "--no-early-stop",
        "--results-dir",
        root.to_str().unwrap(),
    ];
    let (dir, exp) = experiment(&sweep(&args));
    let s = &exp["sweep"];
    let probe = &s["probe"];
    assert_eq!(probe["max_concurrency"], 16);
    let rate = probe["request_throughput"].as_f64().unwrap();
    assert!(dir.join(probe["run"].as_str().unwrap()).is_file());
    let probe_result = read_json(&dir.join(probe["run"].as_str().unwrap()));
    assert_eq!(probe_result["plan"]["max_concurrency"], 16);
    assert_eq!(probe_result["plan"]["request_rate"], "inf");
    let values: Vec<f64> = s["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["value"].as_f64().unwrap())
        .collect();
    assert_eq!(
        values.len(),
        5,
        "3 up to the probe's rate, 2 past it: {values:?}"
    );
    assert!((values[2] - rate).abs() < 0.01, "{values:?} vs {rate}");
    assert!(values.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(exp["rows"][0]["id"], "A");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn repeated_concurrency_sweep_keeps_every_run() {
    let root = tempdir("repeat");
    let args = [
        "--input-len",
        "512",
        "--output-len",
        "32",
        "--num-prompts",
        "40",
        "--max-concurrency",
        "1,4",
        "--repeat",
        "2",
        "--results-dir",
        root.to_str().unwrap(),
    ];
    let o = sweep(&args);
    let (dir, exp) = experiment(&o);
    let s = &exp["sweep"];
    assert_eq!(s["variable"], "max_concurrency");
    for (i, p) in s["points"].as_array().unwrap().iter().enumerate() {
        let runs: Vec<&str> = p["runs"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert_eq!(runs.len(), 2);
        assert!(
            runs[1].starts_with(&format!("points/{i}/repeat-2/")),
            "{runs:?}"
        );
        let rep = read_json(&dir.join(p["repeat_summary"].as_str().unwrap()));
        let f = rep["figures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "output_throughput")
            .unwrap();
        assert_eq!(f["values"].as_array().unwrap().len(), 2);
        assert!(f["std"].as_f64().is_some());
    }
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(" ± "),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn sweeping_needs_exactly_one_list() {
    let root = tempdir("flags");
    let o = sweep(&[
        "--request-rate",
        "4",
        "--results-dir",
        root.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("nothing to sweep"),
        "{}",
        text(&o)
    );
    let o = sweep(&[
        "--request-rate",
        "1,2",
        "--latency-metric",
        "ttft",
        "--results-dir",
        root.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&root);
}

/// p99 of `metric` (ms) of each point's first run, as the sweep judged it (user latency).
fn p99_of(dir: &Path, exp: &Value, metric: &str) -> Vec<f64> {
    exp["sweep"]["points"]
        .as_array()
        .expect("points")
        .iter()
        .map(|p| {
            let r = read_json(&dir.join(p["runs"][0].as_str().expect("run")));
            r["summary"][metric]["percentiles"]
                .as_array()
                .expect("percentiles")
                .iter()
                .find(|q| q["p"] == 99.0)
                .and_then(|q| q["value"].as_f64())
                .expect("p99")
        })
        .collect()
}

/// The guide's concurrency sweep (docs/sweep.md): a closed loop's users send when an answer arrives, so the
/// wait for a free slot is no latency. At concurrency 1 a request takes about 0.9 s end to
/// end; latency rises with concurrency and the sweep names a knee. (Before, every request
/// was intended at time zero and p99 E2EL at concurrency 1 was about 180 s.)
#[test]
fn a_concurrency_sweep_measures_latency_from_the_send_and_finds_a_knee() {
    let dir = tempdir("closed-loop");
    let o = bin()
        .current_dir(&dir)
        .args([
            "sweep",
            "--input-len",
            "1024",
            "--output-len",
            "128",
            "--max-concurrency",
            "1,4,16,64",
            "--latency-metric",
            "e2el:p99",
            "--virtual-time",
        ])
        .output()
        .expect("spawn servebench");
    assert!(o.status.success(), "{}", text(&o));
    let exp_dir = dir.join(
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("experiment: "))
            .unwrap_or_else(|| panic!("{}", text(&o))),
    );
    let exp = read_json(&exp_dir.join("experiment.json"));
    let user = p99_of(&exp_dir, &exp, "user_e2el");
    let server = p99_of(&exp_dir, &exp, "e2el");
    assert!(
        (700.0..1200.0).contains(&user[0]),
        "p99 user E2EL at concurrency 1: {user:?}"
    );
    for (u, s) in user.iter().zip(&server) {
        assert!(
            (u - s).abs() < 1.0,
            "no client queue in a closed loop: {user:?} vs {server:?}"
        );
    }
    assert!(
        user.windows(2).all(|w| w[1] >= w[0]),
        "latency rises with concurrency: {user:?}"
    );
    assert!(
        exp["sweep"]["knee"].is_u64(),
        "a knee is named: {}",
        exp["sweep"]
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("Knee: concurrency"), "{out}");
    let queue_max: f64 = exp["sweep"]["points"]
        .as_array()
        .expect("points")
        .iter()
        .map(|p| {
            read_json(&exp_dir.join(p["runs"][0].as_str().expect("run")))["summary"]["queue"]["max"]
                .as_f64()
                .unwrap_or(0.0)
        })
        .fold(0.0, f64::max);
    assert!(queue_max < 1.0, "client queue max {queue_max} ms");
}

/// Each point announces itself when it starts and, when it ends, prints one line on stderr
/// with its headline figures (output tok/s and p99 E2EL, as in its result), its verdict and
/// how long it took: a long sweep is never silent between points.
#[test]
fn each_point_prints_a_line_with_its_headline_and_verdict_when_it_completes() {
    let root = tempdir("completion-lines");
    let o = sweep(&[
        "--input-len",
        "256",
        "--output-len",
        "32",
        "--num-prompts",
        "40",
        "--max-concurrency",
        "1,8",
        "--no-early-stop",
        "--results-dir",
        root.to_str().unwrap(),
    ]);
    let (dir, exp) = experiment(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    let points = exp["sweep"]["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    for (i, (p, c)) in points.iter().zip([1, 8]).enumerate() {
        let r = read_json(&dir.join(p["runs"][0].as_str().unwrap()));
        let tok_s = r["summary"]["output_throughput"].as_f64().unwrap();
        let p99 = r["summary"]["e2el"]["percentiles"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["p"] == 99.0)
            .and_then(|q| q["value"].as_f64())
            .unwrap();
        let status = r["validity"]["verdict"]["status"].as_str().unwrap();
        let label = match status {
            "valid" => "VALID",
            "not_steady" => "NOT STEADY",
            _ => "NOT ENOUGH DATA",
        };
        let head = format!(
            "Point {i}: concurrency {c} — {tok_s:.0} output tok/s, p99 E2EL {p99:.1} ms, {label} ("
        );
        let done: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with(&format!("Point {i}: concurrency {c} — ")))
            .collect();
        assert_eq!(done.len(), 1, "one completion line per point: {err}");
        assert!(
            done[0].starts_with(&head) && done[0].ends_with(" s)"),
            "{} vs {head}",
            done[0]
        );
        assert!(
            err.contains(&format!("Point {i}: concurrency {c} (40 requests)")),
            "{err}"
        );
    }
    let _ = std::fs::remove_dir_all(&root);
}
