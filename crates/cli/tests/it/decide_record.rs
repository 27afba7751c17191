//! `servebench decide` on two virtual-time sweeps of the simulator that differ only in
//! `--max-num-seqs`: decision.md names the accepted and the rejected configuration with the
//! figures that decided, the cost, the versions and the stopping reason.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::common::{read_json, servebench, text};

/// Sweeps concurrency 16 and 32 of 1024-in/256-out requests on a simulated H100 with the
/// given `--max-num-seqs`; returns the experiment directory.
fn sweep(max_num_seqs: u32) -> PathBuf {
    let root = std::env::temp_dir().join(format!(
        "servebench-decide-seqs{max_num_seqs}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&root);
    let sim = format!("llama-3.1-8b --gpu h100 --max-num-seqs {max_num_seqs}");
    let root_s = root.to_string_lossy().into_owned();
    let o = servebench(&[
        "sweep",
        "--virtual-time",
        "--sim",
        &sim,
        "--max-concurrency",
        "16,32",
        "--input-len",
        "1024",
        "--output-len",
        "256",
        "--num-prompts",
        "96",
        "--slo",
        "ttft:p99:1000",
        "tpot:p95:40",
        "--results-dir",
        &root_s,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    PathBuf::from(
        out.lines()
            .rev()
            .find_map(|l| l.strip_prefix("experiment: "))
            .unwrap_or_else(|| panic!("{}", text(&o))),
    )
}

/// The two sweeps, made once for all tests of this file.
fn sweeps() -> &'static (PathBuf, PathBuf) {
    static SWEEPS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    SWEEPS.get_or_init(|| (sweep(8), sweep(256)))
}

/// A latency in the report's format (three significant digits), for values of 100 ms–1 s.
fn ms3(v: f64) -> String {
    assert!((100.0..1000.0).contains(&v), "{v}");
    format!("{v:.0} ms")
}

/// p99 TTFT (ms) of a sweep point's first run.
fn p99_ttft(dir: &Path, point: usize) -> f64 {
    let exp = read_json(&dir.join("experiment.json"));
    let run = exp["sweep"]["points"][point]["runs"][0].as_str().unwrap();
    let doc = read_json(&dir.join(run));
    doc["summary"]["ttft"]["percentiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["p"] == 99.0)
        .unwrap()["value"]
        .as_f64()
        .unwrap()
}

fn section<'a>(md: &'a str, heading: &str) -> &'a str {
    let start = md
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading} in\n{md}"));
    let rest = &md[start + heading.len()..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    &rest[..end]
}

#[test]
fn two_max_num_seqs_values_yield_an_accepted_and_a_rejected_configuration() {
    let (small, large) = sweeps();
    let out_file = small.parent().unwrap().join("decision-two-sweeps.md");
    let (s, l, f) = (
        small.to_string_lossy().into_owned(),
        large.to_string_lossy().into_owned(),
        out_file.to_string_lossy().into_owned(),
    );
    let o = servebench(&[
        "decide",
        &s,
        &l,
        "--slo",
        "ttft:p99:1000",
        "tpot:p95:40",
        "--gpu-hourly-cost",
        "2.5",
        "--output",
        &f,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let md = std::fs::read_to_string(&out_file).unwrap();
    assert_eq!(
        md,
        String::from_utf8_lossy(&o.stdout),
        "the printed record is the file"
    );

    assert!(md.contains("**Accept max_num_seqs=256"), "{md}");
    let target = section(&md, "## Workload target");
    assert!(
        target.contains("p99 TTFT < 1000 ms and p95 TPOT < 40 ms (from --slo"),
        "{target}"
    );
    assert!(
        target.contains("1,024 prompt and 256 output tokens"),
        "{target}"
    );
    assert!(target.contains("$2.50 per GPU-hour × 1 GPU"), "{target}");

    let accepted = section(&md, "## Accepted configuration");
    assert!(accepted.contains("`max_num_seqs = 256`"), "{accepted}");
    assert!(
        accepted.contains("--max-num-seqs 256"),
        "the flags: {accepted}"
    );
    assert!(
        accepted.contains("Operating point: S at concurrency 32"),
        "{accepted}"
    );
    // The figures are the result file's own.
    let p99 = p99_ttft(large, 1);
    assert!(
        accepted.contains(&format!("p99 TTFT {} < 1.00 s", ms3(p99))),
        "{accepted}"
    );
    assert!(
        accepted.contains("per million accepted tokens"),
        "{accepted}"
    );
    assert!(
        accepted.contains("| TTFT |"),
        "measured percentiles: {accepted}"
    );

    let rejected = section(&md, "## Rejected");
    assert!(rejected.contains("### max_num_seqs=8"), "{rejected}");
    assert!(
        rejected.contains("no load meets the contract"),
        "{rejected}"
    );
    let p99_small = p99_ttft(small, 0);
    assert!(p99_small > 1000.0);
    assert!(
        rejected.contains(&format!("p99 TTFT {:.2} s ≥ 1.00 s", p99_small / 1e3)),
        "the failing figure: {rejected}"
    );

    let versions = section(&md, "## Versions");
    assert!(
        versions.contains("servebench (this decision): "),
        "{versions}"
    );
    assert!(versions.contains("servebench-sim"), "{versions}");
    let stop = section(&md, "## Stopping reason");
    assert!(stop.contains("the sweep ran all 2 planned loads"), "{stop}");
}

#[test]
fn one_sweep_is_judged_by_its_stored_contract() {
    let (_, large) = sweeps();
    let l = large.to_string_lossy().into_owned();
    let o = servebench(&["decide", &l]);
    assert!(o.status.success(), "{}", text(&o));
    let md = std::fs::read_to_string(large.join("decision.md")).expect("decision.md in DIR");
    assert!(md.contains("from the sweep's experiment.json"), "{md}");
    assert!(md.contains("ttft:p99:1000 tpot:p95:40"), "{md}");
    assert!(md.contains("| S at concurrency 32 |"), "{md}");
    assert!(md.contains("operating point |"), "{md}");
    assert!(md.contains("meets, less throughput |"), "{md}");
    assert!(md.contains("Cost: not computed"), "{md}");
}

#[test]
fn a_contract_nobody_meets_exits_one_and_says_so() {
    let (small, large) = sweeps();
    let (s, l) = (
        small.to_string_lossy().into_owned(),
        large.to_string_lossy().into_owned(),
    );
    let o = servebench(&["decide", &s, &l, "--slo", "ttft:p99:1", "--no-write"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let md = String::from_utf8_lossy(&o.stdout);
    assert!(
        md.contains("**No configuration meets p99 TTFT < 1 ms.**"),
        "{md}"
    );
    assert!(md.contains("### max_num_seqs=8"), "{md}");
    assert!(md.contains("### max_num_seqs=256"), "{md}");
}

#[test]
fn a_directory_without_a_contract_needs_slo() {
    let dir = std::env::temp_dir().join(format!(
        "servebench-decide-nocontract-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let out = dir.join("rows/A").to_string_lossy().into_owned();
    let o = servebench(&[
        "run",
        "--virtual-time",
        "--num-prompts",
        "10",
        "--max-concurrency",
        "1",
        "--random-input-len",
        "128",
        "--random-output-len",
        "16",
        "--output-dir",
        &out,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let d = dir.join("rows/A").to_string_lossy().into_owned();
    let o = servebench(&["decide", &d]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no latency contract: pass --slo"),
        "{}",
        text(&o)
    );
    // With a contract, one run is a one-row matrix: accepted when its row meets it.
    let o = servebench(&["decide", &d, "--slo", "ttft:p99:10000", "--no-write"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("every row meets the contract"));
}

/// The guide's example names the `--results-dir` roots (`decide results/seqs-8/
/// results/seqs-256/`), not the experiment directories nested `<model>/<hardware>/<time>`
/// below them: each root resolves to its experiment and the record is the same.
#[test]
fn results_roots_resolve_to_their_experiments() {
    let (small, large) = sweeps();
    // <root>/<model>/<hardware>/<timestamp>: three levels up is the root.
    let root = |p: &Path| {
        p.ancestors()
            .nth(3)
            .expect("a results root")
            .to_string_lossy()
            .into_owned()
    };
    let (s, l) = (root(small), root(large));
    let o = servebench(&[
        "decide",
        &s,
        &l,
        "--slo",
        "ttft:p99:1000",
        "tpot:p95:40",
        "--no-write",
    ]);
    assert!(
        o.status.success() || o.status.code() == Some(1),
        "{}",
        text(&o)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("seqs8") && out.contains("seqs256"), "{out}");
    assert!(
        out.contains(&small.to_string_lossy().into_owned())
            || out.contains(small.file_name().unwrap().to_str().unwrap()),
        "names the experiment: {out}"
    );
}
