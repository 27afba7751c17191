//! `servebench decide` over simulated fleet layouts (virtual time): the load-shaping example's
//! mixed and split fleets swept at the same rates, judged on the chats' p99 TTFT; and layouts
//! of different GPU counts ranked per GPU, with the line that says so.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use crate::common::{ok, servebench, tempdir, text};
use crate::fleet::{example, MIXED, SPLIT};

/// Sweeps `sim` in virtual time under `root`; `extra` are the sweep's own flags, `run` the
/// run flags after `--`. Returns the experiment directory.
fn sweep(root: &Path, sim: &str, extra: &[&str], run: &[&str]) -> PathBuf {
    let root_s = root.to_string_lossy().into_owned();
    let mut args = vec![
        "sweep",
        "--virtual-time",
        "--sim",
        sim,
        "--no-early-stop",
        "--results-dir",
        &root_s,
    ];
    args.extend_from_slice(extra);
    if !run.is_empty() {
        args.push("--");
        args.extend_from_slice(run);
    }
    let o = servebench(&args);
    let out = ok(&o);
    PathBuf::from(
        out.lines()
            .rev()
            .find_map(|l| l.strip_prefix("experiment: "))
            .unwrap_or_else(|| panic!("{}", text(&o))),
    )
}

/// The example trace's lengths at rates 5 and 10 req/s.
fn shaping_sweep(root: &Path, sim: &str) -> PathBuf {
    let trace = example();
    sweep(
        root,
        sim,
        &["--request-rate", "5,10", "--num-prompts", "600"],
        &[
            "--dataset-name",
            "timed_trace",
            "--dataset-path",
            &trace,
            "--no-self-timed",
        ],
    )
}

#[test]
fn decide_picks_the_split_fleet_under_the_chats_p99_ttft_contract() {
    let dir = tempdir("decide-fleet", "shaping");
    let mixed = shaping_sweep(&dir.join("mixed"), MIXED);
    let split = shaping_sweep(&dir.join("split"), SPLIT);
    let out = dir.join("decision.md");
    let o = servebench(&[
        "decide",
        mixed.to_str().unwrap(),
        split.to_str().unwrap(),
        "--slo",
        "ttft:p99:100",
        "--slo-requests",
        "prompt_tokens<4096",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let md = std::fs::read_to_string(&out).unwrap();
    let headline = md.lines().find(|l| l.starts_with("**")).unwrap();
    assert!(
        headline.starts_with("**Accept layout=chat 3×h100, long 1×h100")
            && headline.contains(&split.display().to_string()),
        "{headline}"
    );
    // Both layouts are named with their GPU count, and the counts are equal.
    assert!(md.contains("- Fleet layouts: every layout has 4 GPUs: totals are compared."));
    assert!(
        md.contains(&format!(
            "  - {}: default 4×h100 — 4 GPUs.",
            mixed.display()
        )),
        "{md}"
    );
    assert!(md.contains(&format!(
        "  - {}: chat 3×h100, long 1×h100; prompt_tokens>=4096 -> long — 4 GPUs.",
        split.display()
    )));
    assert!(md.contains("judged on the requests with `prompt_tokens<4096` only"));
    // The mixed fleet fails on the chats a 12–20k-token prefill delays; the split one's chats
    // never meet one. Its per-pool block shows both pools at the operating point.
    let rejected = md.split("## Rejected").nth(1).unwrap();
    assert!(
        rejected.contains("layout=default 4×h100 (4 GPUs)")
            && rejected.contains("Rejected: no load meets the contract"),
        "{rejected}"
    );
    let accepted = md.split("## Rejected").next().unwrap();
    assert!(accepted.contains("| pool | completed | failed | p99 TTFT | p99 TPOT |"));
    let chat_row = accepted
        .lines()
        .find(|l| l.starts_with("| chat |"))
        .unwrap();
    assert!(accepted.lines().any(|l| l.starts_with("| long |")));
    assert!(accepted.contains("- Capacity per GPU: "), "{accepted}");
    // The chats' pool p99 TTFT is the figure the contract judged (< 100 ms).
    let ttft = chat_row.split('|').nth(4).unwrap().trim();
    assert!(ttft.ends_with(" ms") && !ttft.ends_with(" s"), "{chat_row}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn layouts_of_different_gpu_counts_are_ranked_per_gpu() {
    let dir = tempdir("decide-fleet", "per-gpu");
    let flags = [
        "--request-rate",
        "2,4",
        "--input-len",
        "256",
        "--output-len",
        "64",
        "--num-prompts",
        "60",
    ];
    let one = sweep(
        &dir.join("one"),
        "llama-3.1-8b --gpu h100 --replicas 1",
        &flags,
        &[],
    );
    let two = sweep(
        &dir.join("two"),
        "llama-3.1-8b --gpu h100 --replicas 2",
        &flags,
        &[],
    );
    let o = servebench(&[
        "decide",
        two.to_str().unwrap(),
        one.to_str().unwrap(),
        "--slo",
        "ttft:p99:2000",
        "--no-write",
        "--gpu-hourly-cost",
        "2",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let md = String::from_utf8_lossy(&o.stdout);
    assert!(
        md.contains("- Fleet layouts: comparing 1 GPU with 2: per-GPU figures are used."),
        "{md}"
    );
    // Both carry the same offered load, so the same output: one GPU does it at half the
    // price per token, and wins per GPU.
    let headline = md.lines().find(|l| l.starts_with("**")).unwrap();
    assert!(headline.contains(&one.display().to_string()), "{headline}");
    assert!(md.contains("tok/s per GPU against the accepted"), "{md}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn plan_fleet_says_which_layout_meets_the_contract() {
    let dir = tempdir("decide-fleet", "plan");
    let trace = example();
    let out = dir.join("out");
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
        "--slo",
        "ttft:p99:100",
        "--slo-requests",
        "prompt_tokens<4096",
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    let stdout = ok(&o);
    assert!(
        stdout.contains("contract: ttft:p99:100 on the requests with prompt_tokens<4096"),
        "{stdout}"
    );
    let line = |k: u32| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("layout {k}: ")) && l.contains("p99 TTFT"))
            .unwrap_or_else(|| panic!("{stdout}"))
    };
    assert!(
        line(1).starts_with("layout 1: fails (p99 TTFT "),
        "{stdout}"
    );
    assert!(
        line(2).starts_with("layout 2: meets (p99 TTFT "),
        "{stdout}"
    );
    assert!(
        stdout.contains("\nlayout 2 meets the contract\n"),
        "{stdout}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
