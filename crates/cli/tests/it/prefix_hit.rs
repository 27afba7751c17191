//! `--prefix-hit-rate` end to end against the simulator (whose prefix cache holds every
//! prefix of these small runs): 0 gives no cached token, 0.5 gives the achievable rate, the
//! server's counters agree with the usage figures, and misuse is refused.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::common::{self, bin, read_json, text};

fn tempdir(name: &str) -> PathBuf {
    common::tempdir("prefix-hit", name)
}

fn run_in(dir: &Path, args: &[&str]) -> Output {
    bin()
        .current_dir(dir)
        .args(["run", "--disable-tqdm"])
        .args(args)
        .output()
        .expect("spawn servebench")
}

/// The servebench result of the one run in `dir`.
fn native(dir: &Path, out: &Output) -> Value {
    assert!(out.status.success(), "{}", text(out));
    let path = std::fs::read_dir(dir.join("results/runs"))
        .expect("output dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".servebench.json"))
        .expect("a servebench result");
    read_json(&path)
}

fn share(v: &Value, key: &str) -> f64 {
    v["prefix_hit"][key]
        .as_f64()
        .unwrap_or_else(|| panic!("prefix_hit.{key} missing: {}", v["prefix_hit"]))
}

#[test]
fn zero_rate_gives_no_cached_token_in_virtual_time() {
    let dir = tempdir("zero");
    let out = run_in(
        &dir,
        &[
            "--virtual-time",
            "--num-prompts",
            "100",
            "--random-input-len",
            "512",
            "--random-output-len",
            "4",
            "--request-rate",
            "20",
            "--prefix-hit-rate",
            "0",
        ],
    );
    let v = native(&dir, &out);
    assert_eq!(v["summary"]["total_cached_tokens"], 0, "{}", v["summary"]);
    assert_eq!(share(&v, "achievable"), 0.0);
    assert_eq!(share(&v, "achieved_usage"), 0.0);
    assert!(v["prefix_hit"]["warning"].is_null(), "{}", v["prefix_hit"]);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn half_rate_reaches_the_achievable_rate_in_virtual_time() {
    let dir = tempdir("half");
    // 200 prompts of 1024 tokens, 40 prefixes of 512 tokens (whole blocks of 16): the first
    // request of each prefix misses, so 0.5 × 160 / 200 = 40 % is achievable (one prefix for
    // all would give 49.75 %: the pool members must stay apart). Arrivals 50 ms apart let
    // each prefix be prefilled before its next request; overlap may cost a little, so the
    // bound is 2 points.
    let out = run_in(
        &dir,
        &[
            "--virtual-time",
            "--num-prompts",
            "200",
            "--random-input-len",
            "1024",
            "--random-output-len",
            "4",
            "--request-rate",
            "20",
            "--prefix-hit-rate",
            "0.5",
            "--prefix-pool",
            "40",
        ],
    );
    let v = native(&dir, &out);
    assert!((share(&v, "achievable") - 0.40).abs() < 1e-9);
    let usage = share(&v, "achieved_usage");
    assert!((usage - 0.40).abs() <= 0.02, "achieved {usage}");
    let counters = share(&v, "achieved_counters");
    assert!((counters - usage).abs() <= 0.005, "{counters} vs {usage}");
    assert_eq!(share(&v, "target"), 0.5);
    assert!(v["prefix_hit"]["warning"].is_null(), "{}", v["prefix_hit"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("Prefix hit rate: target 50.0 %, achievable 40.0 %"),
        "{stdout}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn range_ratio_shares_each_requests_own_share_in_virtual_time() {
    let dir = tempdir("range");
    // Shared lengths vary by request; a cache holds whole blocks of 16, which costs up to 15
    // tokens of a ~256-token share: the bound is 3 points below the achievable rate.
    let out = run_in(
        &dir,
        &[
            "--virtual-time",
            "--num-prompts",
            "200",
            "--random-input-len",
            "512",
            "--random-range-ratio",
            "0.5",
            "--random-output-len",
            "4",
            "--request-rate",
            "20",
            "--prefix-hit-rate",
            "0.5",
            "--prefix-pool",
            "8",
        ],
    );
    let v = native(&dir, &out);
    let (achievable, usage) = (share(&v, "achievable"), share(&v, "achieved_usage"));
    assert!(achievable > 0.4 && achievable < 0.5, "{achievable}");
    assert!(
        usage <= achievable + 1e-9 && usage >= achievable - 0.03,
        "achieved {usage}, achievable {achievable}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn counters_agree_with_usage_over_http() {
    let _one_at_a_time = common::exclusive();
    let dir = tempdir("http");
    // One request at a time against the in-process simulator server: every prompt after its
    // prefix's first finds 128 tokens (8 blocks) cached, and the server's
    // vllm:prefix_cache_{queries,hits}_total counters, scraped before and after, say the same.
    let out = run_in(
        &dir,
        &[
            "--num-prompts",
            "30",
            "--random-input-len",
            "256",
            "--random-output-len",
            "2",
            "--max-concurrency",
            "1",
            "--prefix-hit-rate",
            "0.5",
            "--prefix-pool",
            "3",
        ],
    );
    let v = native(&dir, &out);
    assert_eq!(
        v["summary"]["total_cached_tokens"],
        27 * 128,
        "{}",
        v["summary"]
    );
    let usage = share(&v, "achieved_usage");
    let counters = share(&v, "achieved_counters");
    assert!((usage - 0.45).abs() < 1e-9, "{usage}");
    assert!((counters - usage).abs() <= 0.01, "{counters} vs {usage}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn misuse_is_refused_with_the_flag_named() {
    let dir = tempdir("refused");
    let cases: &[(&[&str], &str)] = &[
        (
            &["--prefix-hit-rate", "1"],
            "--prefix-hit-rate must be in [0, 1)",
        ),
        (
            &["--prefix-hit-rate", "-0.1"],
            "--prefix-hit-rate must be in [0, 1)",
        ),
        (
            &["--prefix-hit-rate", "NaN"],
            "--prefix-hit-rate must be in [0, 1)",
        ),
        (
            &["--prefix-hit-rate", "0.5", "--random-prefix-len", "8"],
            "--random-prefix-len",
        ),
        (
            &[
                "--prefix-hit-rate",
                "0.5",
                "--random-prefix-mode",
                "per-request",
            ],
            "per-request",
        ),
        (
            &[
                "--prefix-hit-rate",
                "0.5",
                "--dataset-name",
                "prefix_repetition",
            ],
            "random dataset only",
        ),
        (
            &["--prefix-pool", "4"],
            "--prefix-pool needs --prefix-hit-rate",
        ),
        (
            &["--prefix-hit-rate", "0.5", "--prefix-pool", "0"],
            "--prefix-pool must be at least 1",
        ),
        (
            &["--prefix-hit-rate", "0.5", "--prefix-pool", "11"],
            "must not exceed --num-prompts (10)",
        ),
    ];
    for (args, want) in cases {
        let out = run_in(
            &dir,
            &[&["--virtual-time", "--num-prompts", "10"], *args].concat(),
        );
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn readme_examples_run_as_written() {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let lines = crate::common::documented_lines();
    let commands: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with("servebench run --virtual-time --prefix-hit-rate "))
        .collect();
    assert_eq!(commands.len(), 2, "the guide's prefix reuse examples");
    let dir = tempdir("readme");
    for line in commands {
        let words: Vec<&str> = line.split_whitespace().collect();
        let out = bin()
            .current_dir(root)
            .args(&words[1..])
            .args(["--disable-tqdm", "--output-dir"])
            .arg(&dir)
            .output()
            .expect("spawn servebench");
        assert!(out.status.success(), "{line}\n{}", text(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("Prefix hit rate: target "), "{stdout}");
        assert!(!stdout.contains("WARNING: the achieved"), "{stdout}");
    }
    std::fs::remove_dir_all(dir).ok();
}
