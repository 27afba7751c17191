//! Simulated fleets through `servebench run --virtual-time`: the load-shaping example (a tenth
//! long documents among short chats, on four GPUs mixed vs three chat + one long-prefill pool),
//! records naming their pool and replica, the per-pool summary, 429s from a pool's rate
//! limit, and fleet specs refused before the run.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use serde_json::Value;

use crate::common::{ok, servebench, tempdir, text};

/// The load-shaping example's four GPUs, mixed.
pub(crate) const MIXED: &str = "llama-3.1-8b --gpu h100 --replicas 4";
/// The same four GPUs as three chat replicas and one long-prefill replica.
pub(crate) const SPLIT: &str = "llama-3.1-8b --pool 'chat=--gpu h100 --replicas 3' --pool 'long=--gpu h100 --replicas 1' --route 'prompt_tokens>=4096 -> long'";

/// The load-shaping example's trace (a tenth long documents among short chats).
pub(crate) fn example() -> String {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/load-shaping/mixed.jsonl"
    ))
    .to_string_lossy()
    .into_owned()
}

/// Runs the example trace against `sim` in virtual time: (records, result file).
fn run(dir: &Path, sim: &str, extra: &[&str]) -> (Vec<Value>, Value) {
    let out = dir.join("out");
    let trace = example();
    let mut args = vec![
        "run",
        "--virtual-time",
        "--disable-tqdm",
        "--output-dir",
        out.to_str().unwrap(),
        "--dataset-name",
        "timed_trace",
        "--dataset-path",
        &trace,
        "--sim",
        sim,
    ];
    args.extend_from_slice(extra);
    ok(&servebench(&args));
    let files: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let find = |suffix: &str| {
        files
            .iter()
            .find(|p| p.to_string_lossy().ends_with(suffix))
            .unwrap_or_else(|| panic!("no {suffix} in {}", out.display()))
            .clone()
    };
    let records = std::fs::read_to_string(find(".requests.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let result =
        serde_json::from_str(&std::fs::read_to_string(find(".servebench.json")).unwrap()).unwrap();
    std::fs::remove_dir_all(&out).unwrap();
    (records, result)
}

/// p99 (nearest rank) of the chats' TTFT in ms: chats are the prompts under 4096 tokens.
fn chat_p99_ttft_ms(records: &[Value]) -> f64 {
    let mut v: Vec<f64> = records
        .iter()
        .filter(|r| r["input_tokens"].as_u64().unwrap() < 4096)
        .filter_map(|r| Some((r["first_token"].as_u64()? - r["intended"].as_u64()?) as f64 / 1e6))
        .collect();
    assert!(v.len() > 500, "{} chats", v.len());
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * 0.99).ceil() as usize).min(v.len()) - 1]
}

#[test]
fn the_split_fleet_lowers_the_chats_p99_ttft_at_equal_gpu_count() {
    let dir = tempdir("fleet", "shaping");
    let (mixed, mixed_result) = run(&dir, MIXED, &[]);
    let (split, split_result) = run(&dir, SPLIT, &[]);
    let gpus = |r: &Value| r["metadata"]["target"]["sim_config"]["fleet"]["gpus"].as_u64();
    assert_eq!(gpus(&mixed_result), Some(4));
    assert_eq!(gpus(&split_result), Some(4));
    let (m, s) = (chat_p99_ttft_ms(&mixed), chat_p99_ttft_ms(&split));
    // Mixed, a chat that lands behind a 12–20k-token prefill waits for it (hundreds of ms);
    // split, chats never meet one. The example's README shows the figures.
    assert!(
        s * 3.0 < m,
        "chats' p99 TTFT: split {s:.1} ms vs mixed {m:.1} ms"
    );
    // Every record names its pool and replica; long documents all went to `long`.
    for r in &split {
        let pool = r["served_by"]["pool"].as_str().unwrap();
        let long = r["input_tokens"].as_u64().unwrap() >= 4096;
        assert_eq!(pool, if long { "long" } else { "chat" });
        assert!(r["served_by"]["replica"].as_str().is_some());
    }
    let per_pool = &split_result["summary"]["per_pool"];
    assert_eq!(
        per_pool["chat"]["completed"].as_u64().unwrap()
            + per_pool["long"]["completed"].as_u64().unwrap(),
        split.len() as u64
    );
    let replicas = per_pool["chat"]["replicas"].as_object().unwrap();
    assert_eq!(replicas.len(), 3);
}

#[test]
fn a_single_engine_run_names_no_pool() {
    let dir = tempdir("fleet", "single");
    let (records, result) = run(&dir, "llama-3.1-8b", &["--num-prompts", "20"]);
    assert!(records.iter().all(|r| r.get("served_by").is_none()));
    assert!(result["summary"].get("per_pool").is_none());
}

#[test]
fn a_pool_rate_limit_shows_as_429s() {
    let dir = tempdir("fleet", "limit");
    let (records, result) = run(&dir, "llama-3.1-8b --replicas 2 --rate-limit 5", &[]);
    let limited = records
        .iter()
        .filter(|r| r["failure"]["status"].as_u64() == Some(429))
        .count();
    // The trace offers ~10.6 req/s for 60 s; a bucket of one at 5 req/s admits at most 300.
    assert!(limited > 300, "{limited} refused");
    assert_eq!(
        result["summary"]["per_pool"]["default"]["rate_limited"].as_u64(),
        Some(limited as u64)
    );
}

#[test]
fn bad_fleets_are_refused_before_the_run() {
    for (sim, says) in [
        ("llama-3.1-8b --pool 'chat=--gpu nosuch'", "pool 'chat'"),
        (
            "llama-3.1-8b --pool 'chat=--replicas 3' --route 'prompt_tokens>=999999 -> chat'",
            "can never match",
        ),
        (
            "llama-3.1-8b --pool 'chat=--max-model-len 2048' --pool 'long=' --route 'prompt_tokens>=4096 -> long'",
            "could reach no pool",
        ),
        ("llama-3.1-8b --pool 'a=' --route 'prompt_tokens>1 -> b'", "pool 'b'"),
    ] {
        let o = servebench(&["run", "--virtual-time", "--num-prompts", "2", "--sim", sim]);
        assert!(!o.status.success(), "{sim}");
        let t = text(&o);
        assert!(t.contains(says), "{sim}: {t}");
    }
}

#[test]
fn over_http_the_client_records_the_replica_that_answered() {
    let _guard = crate::common::exclusive();
    let dir = tempdir("fleet", "http");
    let out = dir.join("out");
    ok(&servebench(&[
        "run",
        "--disable-tqdm",
        "--output-dir",
        out.to_str().unwrap(),
        "--sim",
        "llama-3.1-8b --replicas 2 --time-scale 20",
        "--num-prompts",
        "8",
        "--random-input-len",
        "32",
        "--random-output-len",
        "4",
        "--max-concurrency",
        "2",
    ]));
    let file = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".requests.jsonl"))
        .unwrap();
    let records: Vec<Value> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    std::fs::remove_dir_all(&out).unwrap();
    let mut replicas: Vec<&str> = records
        .iter()
        .map(|r| {
            assert_eq!(r["served_by"]["pool"], "default");
            r["served_by"]["replica"].as_str().unwrap()
        })
        .collect();
    replicas.sort_unstable();
    replicas.dedup();
    assert_eq!(replicas, ["0", "1"]);
}

#[test]
fn plan_compares_fleet_layouts_on_one_workload() {
    let dir = tempdir("fleet", "plan");
    let trace = example();
    let out_dir = dir.join("out");
    let o = servebench(&[
        "plan",
        "--fleet",
        MIXED,
        "--fleet",
        SPLIT,
        "--dataset-name",
        "timed_trace",
        "--dataset-path",
        &trace,
        "--trace-duration",
        "20",
        "--output-dir",
        out_dir.to_str().unwrap(),
    ]);
    let t = ok(&o);
    assert!(
        t.contains("layout 1: llama-3.1-8b --gpu h100 --replicas 4 (4 GPUs)"),
        "{t}"
    );
    assert!(t.contains("(4 GPUs)"), "{t}");
    let row = |layout: &str, pool: &str| {
        t.lines()
            .find(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.first() == Some(&layout) && w.get(1) == Some(&pool)
            })
            .unwrap_or_else(|| panic!("no row {layout} {pool} in\n{t}"))
            .to_owned()
    };
    let p99 = |l: String| -> f64 { l.split_whitespace().nth(3).unwrap().parse().unwrap() };
    let (mixed, chat) = (p99(row("1", "(all)")), p99(row("2", "chat")));
    assert!(chat < mixed, "{t}");
    assert!(out_dir.join("layout-2").is_dir());
    std::fs::remove_dir_all(&out_dir).unwrap();

    let one = servebench(&["plan", "--fleet", MIXED, "--num-prompts", "2"]);
    assert!(!one.status.success());
    assert!(
        text(&one).contains("at least two --fleet layouts"),
        "{}",
        text(&one)
    );
}

/// The fleet commands of the README, the guide and the example run as written (from the
/// repository root, results in a scratch directory).
#[test]
fn the_documented_fleet_commands_run_as_written() {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let mut commands = Vec::new();
    let example = std::fs::read_to_string(root.join("examples/load-shaping/README.md")).unwrap();
    for body in [crate::common::documented_text(), example] {
        for l in body.lines() {
            let fleet_run = l.starts_with("servebench run --sim ") && l.contains("load-shaping");
            if fleet_run || l.starts_with("servebench plan --fleet") {
                commands.push(servebench_sim::args::split_shell_words(l).unwrap());
            }
        }
    }
    assert!(commands.len() >= 5, "{commands:?}");
    let dir = tempdir("fleet", "docs");
    for c in &commands {
        let out = crate::common::bin()
            .current_dir(root)
            .args(&c[1..])
            .args(["--disable-tqdm", "--output-dir"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{c:?}\n{}", text(&out));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
