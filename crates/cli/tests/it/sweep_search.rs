//! `servebench sweep --search` in virtual time: the operating point it finds agrees with a
//! dense sweep's within 10 % while measuring fewer loads, and a load past capacity is written
//! off as over-saturated with the reason recorded.

use std::path::PathBuf;
use std::process::Output;

use serde_json::Value;

use crate::common::{self, bin, read_json, text};

/// The workload: 512 → 128 tokens, 400 requests per load, no warm-up, in virtual time.
const ROW: [&str; 9] = [
    "--input-len",
    "512",
    "--output-len",
    "128",
    "--num-prompts",
    "400",
    "--num-warmups",
    "0",
    "--virtual-time",
];

fn sweep(results: &PathBuf, args: &[&str]) -> Output {
    bin()
        .arg("sweep")
        .args(ROW)
        .args(["--max-concurrency", "none", "--results-dir"])
        .arg(results)
        .args(args)
        .output()
        .expect("spawn servebench")
}

fn experiment(o: &Output) -> Value {
    assert!(o.status.success(), "{}", text(o));
    let out = String::from_utf8_lossy(&o.stdout);
    let dir = out
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("experiment: "))
        .unwrap_or_else(|| panic!("{}", text(o)));
    read_json(&PathBuf::from(dir).join("experiment.json"))
}

#[test]
fn search_finds_the_dense_sweeps_operating_point_in_fewer_runs() {
    let dir = common::tempdir("sweep-search", "agree");
    // The dense answer: every 3 req/s from 40 to 85, the highest rate whose p99 TTFT
    // meets 300 ms (over-saturation is judged the same way in both, so the dense sweep's
    // verdict per point is the SLO's alone, as a plain sweep gives it).
    let rates: Vec<String> = (0..=15).map(|k| format!("{}", 40 + 3 * k)).collect();
    let dense = experiment(&sweep(
        &dir.join("dense"),
        &[
            "--request-rate",
            &rates.join(","),
            "--slo",
            "ttft:p99:300",
            "--no-early-stop",
        ],
    ));
    let points = dense["sweep"]["points"].as_array().expect("points");
    assert_eq!(points.len(), rates.len());
    let best = dense["sweep"]["best_under_slo"]
        .as_u64()
        .expect("a dense point meets the SLO") as usize;
    let dense_answer = points[best]["value"].as_f64().expect("value");
    assert!(
        best + 1 < points.len(),
        "the SLO must break inside the dense range: {dense_answer}"
    );

    let found = experiment(&sweep(
        &dir.join("search"),
        &[
            "--request-rate",
            "5,320",
            "--slo",
            "ttft_p99:300",
            "--search",
        ],
    ));
    let search = &found["sweep"]["search"];
    let answer = search["answer"].as_f64().expect("an answer");
    let tried = search["tried"].as_array().expect("tried").len();
    eprintln!("search {answer} req/s in {tried} loads, dense {dense_answer} req/s");
    assert!(
        (answer - dense_answer).abs() <= 0.1 * dense_answer,
        "search {answer} vs dense {dense_answer}: {search}"
    );
    assert!(
        tried < points.len(),
        "{tried} loads vs {} dense",
        points.len()
    );
    // The answer's sentence names the throughput, the contract and the load.
    let headline = search["headline"].as_str().expect("headline");
    assert!(
        headline.contains("output tok/s") && headline.contains("p99 TTFT < 300 ms"),
        "{headline}"
    );
    assert_eq!(found["sweep"]["headline"], search["headline"]);
    // The points are stored in load order for the report, each found from its search step.
    let values: Vec<f64> = found["sweep"]["points"]
        .as_array()
        .expect("points")
        .iter()
        .filter_map(|p| p["value"].as_f64())
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
    assert_eq!(values.len(), tried);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_load_past_capacity_is_written_off_as_over_saturated() {
    let dir = common::tempdir("sweep-search", "over");
    // Doubling from 40 req/s reaches loads far past what the simulated H100 serves (~50
    // req/s for this shape): the queue grows for the whole run.
    let out = sweep(
        &dir,
        &[
            "--request-rate",
            "40,640",
            "--slo",
            "ttft:p99:60000",
            "--search",
            "--repeat",
            "2",
        ],
    );
    let found = experiment(&out);
    let tried = found["sweep"]["search"]["tried"]
        .as_array()
        .expect("tried")
        .clone();
    let over: Vec<&Value> = tried
        .iter()
        .filter(|t| t["over_saturated"].is_string())
        .collect();
    assert!(!over.is_empty(), "no load over-saturated: {tried:#?}");
    for t in &over {
        assert_eq!(t["passed"], false, "{t}");
        let why = t["over_saturated"].as_str().unwrap_or_default();
        assert!(
            why.contains("in flight rose linearly") && why.contains("the test fired"),
            "{why}"
        );
        assert!(
            t["reason"].as_str().unwrap_or_default().contains(why),
            "{t}"
        );
    }
    // The generous SLO alone would have passed them: over-saturation is what failed them.
    let slo_ok = over.iter().any(|t| {
        t["slo_values"][0][1][2]
            .as_f64()
            .is_some_and(|hi| hi <= 60_000.0)
    });
    assert!(slo_ok, "{over:#?}");
    // Repeats give every SLO value an interval around its mean.
    let first = &tried[0]["slo_values"][0][1];
    let (mean, lo, hi) = (
        first[0].as_f64().unwrap_or(f64::NAN),
        first[1].as_f64().unwrap_or(f64::NAN),
        first[2].as_f64().unwrap_or(f64::NAN),
    );
    assert!(lo <= mean && mean <= hi, "{first}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("FAILS (over-saturated)"), "{stdout}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn search_misuse_is_refused_with_the_flag_named() {
    let dir = common::tempdir("sweep-search", "misuse");
    for (args, want) in [
        (vec!["--request-rate", "1,8", "--search"], "--slo"),
        (
            vec![
                "--request-rate",
                "auto",
                "--search",
                "--slo",
                "ttft:p99:100",
            ],
            "--request-rate LOW,HIGH",
        ),
        (
            vec![
                "--request-rate",
                "1,8",
                "--search",
                "--slo",
                "ttft:p99:100",
                "--search-tolerance",
                "2",
            ],
            "--search-tolerance",
        ),
    ] {
        let out = sweep(&dir, &args);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(want),
            "{want}: {}",
            text(&out)
        );
    }
    std::fs::remove_dir_all(dir).ok();
}
