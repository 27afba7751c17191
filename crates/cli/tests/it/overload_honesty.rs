//! Open-loop honesty and validity verdicts end to end in virtual time: a short run says how
//! much more it needs, an overloaded sweep point is never the answer, diagnose names the
//! overload, a what-if with absurd latencies warns, and plan refuses an overloaded rate.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use crate::common::{self, bin, ok, read_json, servebench, text};

fn tempdir(name: &str) -> PathBuf {
    common::tempdir("overload", name)
}

fn native_result(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".servebench.json"))
        .unwrap_or_else(|| panic!("no result in {}", dir.display()))
}

#[test]
fn twenty_request_run_at_p99_says_not_enough_data_with_the_number_needed() {
    let dir = tempdir("twenty");
    let d = dir.to_str().unwrap();
    let o = servebench(&[
        "run",
        "--virtual-time",
        "--num-prompts",
        "20",
        "--request-rate",
        "1",
        "--save-result",
        "--result-dir",
        d,
        "--output-dir",
        d,
    ]);
    let out = ok(&o);
    let line = out
        .lines()
        .find(|l| l.starts_with("Verdict: "))
        .unwrap_or_else(|| panic!("{}", text(&o)));
    assert!(
        line.starts_with("Verdict: NOT ENOUGH DATA: p99 TTFT rests on 20 samples, needs 1000"),
        "{line}"
    );
    assert!(line.contains("(980 more requests"), "{line}");
    assert!(out.contains("Load: offered 1.00 req/s, achieved"), "{out}");
    assert!(out.contains("Steady state (MSER-5):"), "{out}");

    let native = read_json(&native_result(&dir));
    let v = &native["validity"];
    assert_eq!(v["verdict"]["status"], "not_enough_data", "{v}");
    assert_eq!(v["verdict"]["needed"]["more_requests"], 980, "{v}");
    assert_eq!(v["load"]["offered_rate"], 1.0, "{v}");
    assert_eq!(v["steady_state"]["mode"], "auto", "{v}");

    // vLLM's result file keeps vLLM's keys only.
    let vllm = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            let s = p.to_string_lossy();
            s.ends_with(".json") && !s.ends_with(".servebench.json")
        })
        .unwrap();
    let vllm = read_json(&vllm);
    assert!(vllm.get("validity").is_none() && vllm.get("verdict").is_none());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn steady_state_off_reports_the_warm_up_instead_of_excluding_it() {
    let dir = tempdir("steady-off");
    let d = dir.to_str().unwrap();
    let o = servebench(&[
        "run",
        "--virtual-time",
        "--num-prompts",
        "20",
        "--request-rate",
        "1",
        "--steady-state",
        "off",
        "--output-dir",
        d,
    ]);
    let out = ok(&o);
    assert!(
        out.contains("should have been excluded (--steady-state off)"),
        "{out}"
    );
    let native = read_json(&native_result(&dir));
    assert_eq!(native["validity"]["steady_state"]["mode"], "off");
    assert_eq!(native["validity"]["steady_state"]["excluded_s"], 0.0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn row_d_sweep_never_names_an_overloaded_point() {
    let dir = tempdir("row-d");
    let o = bin()
        .args([
            "sweep",
            "--row",
            "D",
            "--request-rate",
            "1,2,4,8,16",
            "--slo",
            "ttft:p99:500",
            "tpot:p95:40",
            "--virtual-time",
            "--results-dir",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    let out = ok(&o);
    assert!(!out.contains("(rate 16 req/s)"), "{out}");
    assert!(out.contains("achieved req/s"), "{out}");
    assert!(out.contains("OVERLOADED"), "{out}");
    let overloaded = out
        .lines()
        .find(|l| l.starts_with("Overloaded: "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(overloaded.contains("rate 2 req/s"), "{overloaded}");
    // Row D caps concurrency at 8: the message names the cap as the cause, not the client,
    // and the knee line says how far the cap carries.
    assert!(
        overloaded.contains("The concurrency cap of 8"),
        "{overloaded}"
    );
    assert!(
        !overloaded.contains("The client could not send"),
        "{overloaded}"
    );
    assert!(
        out.contains(
            "Knee: none (every point was overloaded: the concurrency cap of 8 carries about"
        ),
        "{out}"
    );
    // The headline, when it names a point, names one that kept up.
    let headline = out
        .lines()
        .find(|l| l.contains("output tok/s at p99 TTFT") || l.starts_with("no load"))
        .unwrap_or_else(|| panic!("{out}"));
    if let Some(rate) = headline
        .rsplit("(rate ")
        .next()
        .filter(|_| headline.contains("(rate "))
    {
        let rate = rate.trim_end_matches(" req/s)");
        assert!(
            !overloaded.contains(&format!("rate {rate} req/s")),
            "{headline} names an overloaded point"
        );
    }

    let exp_dir = PathBuf::from(
        out.lines()
            .rev()
            .find_map(|l| l.strip_prefix("experiment: "))
            .unwrap(),
    );
    let exp = read_json(&exp_dir.join("experiment.json"));
    if let Some(best) = exp["sweep"]["best_under_slo"].as_u64() {
        let run = exp["sweep"]["points"][best as usize]["runs"][0]
            .as_str()
            .unwrap();
        let r = read_json(&exp_dir.join(run));
        assert_eq!(r["validity"]["load"]["overloaded"], false);
    }

    // diagnose names the overload, with numbers and the next experiment.
    let d = servebench(&["diagnose", exp_dir.to_str().unwrap()]);
    let diag = ok(&d);
    assert!(
        diag.contains("Offered load above what the server"),
        "{diag}"
    );
    assert!(diag.contains("offered 2.00 req/s, achieved"), "{diag}");
    assert!(diag.contains("in the client queue"), "{diag}");
    assert!(diag.contains("--request-rate auto"), "{diag}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_overloaded_what_if_warns_and_plan_refuses_its_rate() {
    let dir = tempdir("what-if");
    let d = dir.to_str().unwrap();
    let o = servebench(&[
        "run",
        "--virtual-time",
        "--num-prompts",
        "40",
        "--request-rate",
        "16",
        "--max-concurrency",
        "1",
        "--random-output-len",
        "256",
        "--output-dir",
        d,
    ]);
    let out = ok(&o);
    assert!(
        out.contains("WARNING: these latencies are not the server's"),
        "{out}"
    );
    assert!(out.contains("overloaded: offered 16.00 req/s"), "{out}");
    assert!(out.contains("Verdict: NOT ENOUGH DATA"), "{out}");

    let native = native_result(&dir);
    let p = servebench(&[
        "plan",
        "--from",
        native.to_str().unwrap(),
        "--daily-requests",
        "1000000",
    ]);
    assert!(!p.status.success(), "{}", text(&p));
    let err = String::from_utf8_lossy(&p.stderr);
    assert!(err.contains("was overloaded (offered 16.00 req/s"), "{err}");
    assert!(err.contains("no per-GPU capacity"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn plan_from_an_unsaturated_run_warns_its_rate_is_a_lower_bound() {
    let dir = tempdir("unsaturated");
    let d = dir.to_str().unwrap();
    ok(&servebench(&[
        "run",
        "--virtual-time",
        "--num-prompts",
        "20",
        "--request-rate",
        "1",
        "--random-output-len",
        "16",
        "--output-dir",
        d,
    ]));
    let native = native_result(&dir);
    let p = servebench(&[
        "plan",
        "--from",
        native.to_str().unwrap(),
        "--daily-requests",
        "1000000",
    ]);
    ok(&p);
    let err = String::from_utf8_lossy(&p.stderr);
    assert!(err.contains("was not saturated"), "{err}");
    assert!(err.contains("lower bound"), "{err}");
    assert!(
        err.contains("servebench sweep --request-rate auto"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The README's 70B/H200 what-if, shortened to 300 s of arrivals: the client sends every
/// request on time, but the simulated server cannot keep up with 10 req/s, so it queues
/// them itself. The verdict says overloaded with the growth that shows it, the result file
/// holds the backlog, and plan refuses the rate. (Before, the verdict was `valid` with no
/// reason and only a separate warning line.)
#[test]
fn a_what_if_the_server_cannot_keep_up_with_is_overloaded_with_its_backlog() {
    let dir = tempdir("server-behind");
    let d = dir.to_str().unwrap();
    let o = servebench(&[
        "run",
        "--virtual-time",
        "--sim",
        "llama-3.1-70b --gpu h200 --dtype fp8",
        "--request-rate",
        "10",
        "--duration",
        "300",
        "--random-input-len",
        "1024",
        "--random-output-len",
        "256",
        "--output-dir",
        d,
    ]);
    let out = ok(&o);
    assert!(
        out.contains(
            "Verdict: NOT STEADY: overloaded: the server fell behind the arrivals: TTFT rose from"
        ),
        "{out}"
    );
    assert!(
        out.contains("OVERLOADED: the server queued the arrivals itself"),
        "{out}"
    );
    assert!(out.contains("give the server more capacity"), "{out}");
    let native = native_result(&dir);
    let r = read_json(&native);
    let load = &r["validity"]["load"];
    assert_eq!(load["overloaded"], true, "{load}");
    // The client kept its schedule: this is the server's backlog, not the client's queue.
    let achieved = load["achieved_rate"].as_f64().unwrap();
    assert!((achieved - 10.0).abs() < 1.0, "{load}");
    let server = &load["server"];
    assert_eq!(server["behind"], true, "{server}");
    assert!(server["ttft_growth"].as_f64().unwrap() > 0.5, "{server}");
    assert!(
        server["serve_span_s"].as_f64().unwrap() > 1.5 * server["arrival_span_s"].as_f64().unwrap(),
        "{server}"
    );
    let reasons = r["validity"]["verdict"]["reasons"].as_array().unwrap();
    assert!(
        reasons
            .iter()
            .any(|x| x["kind"] == "overloaded" && x["server"]["behind"] == true),
        "{reasons:?}"
    );
    let p = servebench(&[
        "plan",
        "--from",
        native.to_str().unwrap(),
        "--daily-requests",
        "1000000",
    ]);
    assert!(!p.status.success(), "{}", text(&p));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The row-D sweep of the README and of the guide (docs/sweep.md, its first command) shows
/// what they say it shows: a frontier with a knee and a point meeting the SLOs, every rate
/// below what the concurrency cap of 8 carries except the last, 1 req/s, which is named as
/// stopped by the cap.
#[test]
fn the_documented_row_d_sweep_shows_a_frontier_its_knee_and_the_cap() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut lines = Vec::new();
    for file in ["README.md", "docs/sweep.md"] {
        let doc = std::fs::read_to_string(root.join(file)).unwrap();
        let line = doc
            .lines()
            .find(|l| l.starts_with("servebench sweep --row D"))
            .unwrap_or_else(|| panic!("the row-D example in {file}"))
            .to_owned();
        lines.push(line);
    }
    lines.dedup();
    for line in lines {
        let words: Vec<&str> = line.split_whitespace().skip(1).collect();
        let dir = tempdir("row-d-guide");
        let o = bin()
            .args(&words)
            .args(["--virtual-time", "--results-dir"])
            .arg(&dir)
            .output()
            .unwrap();
        let out = ok(&o);
        assert!(out.contains("Knee: rate 0.5 req/s"), "{line}\n{out}");
        assert!(
            out.contains("output tok/s at p99 TTFT < 500 ms"),
            "{line}\n{out}"
        );
        assert!(!out.contains("no load meets"), "{line}\n{out}");
        let overloaded = out
            .lines()
            .find(|l| l.starts_with("Overloaded: "))
            .unwrap_or_else(|| panic!("{line}\n{out}"));
        assert!(
            overloaded.starts_with("Overloaded: rate 1 req/s"),
            "{overloaded}"
        );
        assert!(
            overloaded.contains("The concurrency cap of 8"),
            "{overloaded}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
