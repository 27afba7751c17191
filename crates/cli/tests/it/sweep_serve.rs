//! `servebench sweep serve` against `servebench sim` as the server command: servers started
//! and stopped in turn on one port, the decision, `--dry-run`, `--resume`, and servers that
//! crash or never become ready. These run in real time (the simulator is a real server here),
//! so the workloads are small and the bounds generous.

#![allow(clippy::unwrap_used)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{bin, exclusive, ok, read_json, tempdir, text};

const EXE: &str = env!("CARGO_BIN_EXE_servebench");

fn write(dir: &Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p.display().to_string()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn combinations(experiment: &Path) -> Vec<Value> {
    read_json(&experiment.join("sweep_serve.json"))["combinations"]
        .as_array()
        .unwrap()
        .clone()
}

fn p99_ttft(experiment: &Path, serve: &str) -> f64 {
    let dir = experiment.join(format!(
        "SERVE--{serve}-BENCH--num_prompts=64-random_input_len=256-random_output_len=32"
    ));
    read_json(&dir.join("run=0.json"))["p99_ttft_ms"]
        .as_f64()
        .unwrap()
}

/// Issue 14: max_num_seqs 4 vs 64 under a burst of 64 requests. Both servers listen on one
/// named port, so the second start proves the first one's stop freed it; 4 running sequences
/// queue the burst for seconds, 64 take it at once.
#[test]
fn two_server_configurations_run_in_turn_and_64_sequences_are_accepted() {
    let _x = exclusive();
    let dir = tempdir("sweep-serve", "two");
    let serve = write(
        &dir,
        "serve.json",
        r#"[{"max_num_seqs": 4}, {"max_num_seqs": 64}]"#,
    );
    let bench = write(
        &dir,
        "bench.json",
        r#"[{"num_prompts": 64, "random_input_len": 256, "random_output_len": 32}]"#,
    );
    let port = free_port();
    let serve_cmd = format!("{EXE} sim llama-3.1-8b --gpu h100 --port {port}");
    let args = |extra: &[&str]| {
        let mut a = vec![
            "sweep",
            "serve",
            "--serve-cmd",
            &serve_cmd,
            "--bench-cmd",
            "vllm bench serve --model llama-3.1-8b",
            "--serve-params",
            &serve,
            "--bench-params",
            &bench,
            "-e",
            "exp",
            "--num-runs",
            "1",
            "--server-ready-timeout",
            "120",
            "--slo",
            "ttft:p99:1500",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let out = bin()
        .current_dir(&dir)
        .args(args(&["-o", "results"]))
        .output()
        .unwrap();
    let stdout = ok(&out);
    assert_eq!(stdout.matches("[BEGIN SERVER]").count(), 2, "{stdout}");
    let exp = dir.join("results/exp");
    let combs = combinations(&exp);
    assert_eq!(combs.len(), 2);
    let pids: Vec<u64> = combs
        .iter()
        .map(|c| c["server_pid"].as_u64().unwrap())
        .collect();
    assert_ne!(pids[0], pids[1], "two servers, one after the other");
    for c in &combs {
        assert_eq!(c["status"], "ok", "{c}");
        assert_eq!(c["port"].as_u64(), Some(u64::from(port)), "{c}");
    }
    let slow = p99_ttft(&exp, "max_num_seqs=4");
    let fast = p99_ttft(&exp, "max_num_seqs=64");
    assert!(
        fast * 3.0 < slow,
        "p99 TTFT 64 seqs {fast} ms, 4 seqs {slow} ms"
    );
    let decision = std::fs::read_to_string(exp.join("decision.md")).unwrap();
    assert!(
        decision.contains("**Accepted: max_num_seqs=64"),
        "{decision}"
    );
    assert!(
        decision.contains("rejected: p99_ttft_ms"),
        "4 sequences miss the contract: {decision}"
    );
    // One run a side: the per-request test still finds the TTFT change significant, and
    // says that no noise floor was measured.
    let ttft_row: Vec<&str> = decision
        .lines()
        .find(|l| l.starts_with("| max_num_seqs=64") && l.contains("| p99 TTFT ms |"))
        .unwrap_or_else(|| panic!("{decision}"))
        .split('|')
        .map(str::trim)
        .collect();
    // ["", change, against, axis, baseline, value, effect, floor, test, p, verdict, ""]
    assert_eq!(
        ttft_row[8], "Mann–Whitney per request (64/64)",
        "{decision}"
    );
    let p: f64 = ttft_row[9].parse().unwrap();
    assert!(p < 0.01, "{decision}");
    assert_eq!(
        ttft_row[10], "significant, better (no noise floor: 1 baseline run)",
        "{decision}"
    );
    assert!(exp
        .join("SERVE--max_num_seqs=64-BENCH--num_prompts=64-random_input_len=256-random_output_len=32/run=0.servebench.json")
        .is_file());
    // vLLM's files: the result with its parameters, the combination's summary, the table.
    let run0 = read_json(&exp.join(
        "SERVE--max_num_seqs=64-BENCH--num_prompts=64-random_input_len=256-random_output_len=32/run=0.json",
    ));
    assert_eq!(run0["max_num_seqs"], 64);
    assert_eq!(run0["run_number"], 0);
    assert_eq!(run0["completed"], 64);
    let csv = std::fs::read_to_string(exp.join("summary.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
    assert!(
        std::fs::read_to_string(exp.join("SERVE-max_num_seqs=4-server.log"))
            .unwrap()
            .contains("Serving on")
    );

    // Everything is done: --resume starts no server and keeps the results.
    let again = bin()
        .current_dir(&dir)
        .args(args(&["-o", "results", "--resume"]))
        .output()
        .unwrap();
    let stdout = ok(&again);
    assert!(!stdout.contains("[BEGIN BENCHMARK]"), "{}", text(&again));
    assert_eq!(stdout.matches("not started").count(), 2, "{}", text(&again));
    let resumed = combinations(&exp);
    assert!(
        resumed.iter().all(|c| c["status"] == "resumed"),
        "{resumed:?}"
    );
    assert!(std::fs::read_to_string(exp.join("decision.md"))
        .unwrap()
        .contains("**Accepted: max_num_seqs=64"));
    // Without --resume an existing experiment is not overwritten.
    let refused = bin()
        .current_dir(&dir)
        .args(args(&["-o", "results"]))
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--resume"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dry_run_prints_every_command_and_runs_nothing() {
    let dir = tempdir("sweep-serve", "dry");
    let serve = write(
        &dir,
        "serve.json",
        r#"{"small": {"max_num_seqs": 4, "enable_prefix_caching": false}, "big": {"max_num_seqs": 64}}"#,
    );
    let bench = write(
        &dir,
        "bench.json",
        r#"[{"max_concurrency": 4}, {"max_concurrency": 64}]"#,
    );
    let out = bin()
        .current_dir(&dir)
        .args([
            "sweep",
            "serve",
            "--serve-cmd",
            "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 256",
            "--bench-cmd",
            "vllm bench serve --model meta-llama/Llama-3.1-8B-Instruct --num-prompts 100",
            "--serve-params",
            &serve,
            "--bench-params",
            &bench,
            "--link-vars",
            "max_num_seqs=max_concurrency",
            "--num-runs",
            "2",
            "--dry-run",
            "-e",
            "dry",
        ])
        .output()
        .unwrap();
    let stdout = ok(&out);
    assert!(
        stdout.contains(
            "Server command: vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 4 --no-enable-prefix-caching"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("--max-num-seqs 64\n"), "{stdout}");
    // Linked: 4 with 4 and 64 with 64 only, two runs each.
    assert_eq!(stdout.matches("Benchmark command:").count(), 4, "{stdout}");
    assert!(stdout.contains(" run --model meta-llama/Llama-3.1-8B-Instruct --num-prompts 100 --max-concurrency 4 --base-url http://127.0.0.1:{port}"), "{stdout}");
    assert!(
        stdout.contains("SERVE--small-BENCH--max_concurrency=4/run=1.json"),
        "{stdout}"
    );
    assert!(
        stdout.contains("SERVE--big-BENCH--max_concurrency=64/run=0.json"),
        "{stdout}"
    );
    assert!(!dir.join("results").exists(), "a dry run writes nothing");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server that never becomes ready and one that dies in the middle of a run: each is a
/// failed combination with its log's tail, and with --continue-on-error the sweep finishes.
#[test]
fn a_crashing_and_a_hanging_server_fail_their_combinations_and_the_sweep_goes_on() {
    let _x = exclusive();
    let dir = tempdir("sweep-serve", "faults");
    // `--mode` picks the failure: `hang` never listens; `crash` serves until the benchmark
    // has recorded its first requests (its records file is written as they complete), then
    // dies: mid-run however slowly the machine starts things.
    let script = format!(
        "case \"$2\" in \
           hang) echo \"loading weights forever\"; exec sleep 120;; \
           crash) {EXE} sim llama-3.1-8b --gpu h100 --port \"$4\" & pid=$!; \
                  for i in $(seq 1 600); do \
                    f=$(ls results/*/SERVE--mode=crash*/*.requests.jsonl 2>/dev/null | head -n 1); \
                    [ -n \"$f\" ] && [ -s \"$f\" ] && break; sleep 0.2; \
                  done; \
                  echo \"simulated engine crash\"; kill -9 $pid; exit 7;; \
         esac"
    );
    let serve_cmd = format!("sh -c '{script}' sh --mode none --port {{port}}");
    let serve = write(
        &dir,
        "serve.json",
        r#"[{"mode": "hang"}, {"mode": "crash"}]"#,
    );
    // 10 req/s for 6 s: the requests after the crash fail one by one.
    let bench = write(
        &dir,
        "bench.json",
        r#"[{"num_prompts": 60, "request_rate": 10, "random_input_len": 64, "random_output_len": 8}]"#,
    );
    let base = |ready_timeout: &str, extra: &[&str]| {
        let mut c = bin();
        c.current_dir(&dir).args([
            "sweep",
            "serve",
            "--serve-cmd",
            &serve_cmd,
            "--bench-cmd",
            "vllm bench serve --model llama-3.1-8b",
            "--serve-params",
            &serve,
            "--bench-params",
            &bench,
            "--num-runs",
            "1",
            "--server-ready-timeout",
            ready_timeout,
            "--server-stop-timeout",
            "2",
        ]);
        c.args(extra);
        c
    };
    // Without --continue-on-error the sweep stops at the first failure.
    let stopped = base("3", &["-e", "stop"]).output().unwrap();
    assert_eq!(stopped.status.code(), Some(2), "{}", text(&stopped));
    let s = String::from_utf8_lossy(&stopped.stdout);
    assert_eq!(s.matches("[BEGIN SERVER]").count(), 1, "{s}");
    let err = String::from_utf8_lossy(&stopped.stderr);
    assert!(err.contains("not ready within 3 s"), "{err}");
    assert!(
        err.contains("loading weights forever"),
        "the log's tail: {err}"
    );

    // Long enough for the simulator to start on a loaded machine; the hang waits it out.
    let out = base("20", &["-e", "go-on", "--continue-on-error"])
        .output()
        .unwrap();
    let stdout = ok(&out);
    assert_eq!(
        stdout.matches("[BEGIN SERVER]").count(),
        2,
        "{}",
        text(&out)
    );
    let exp = dir.join("results/go-on");
    let combs = combinations(&exp);
    assert_eq!(combs.len(), 2, "{combs:?}");
    assert!(combs.iter().all(|c| c["status"] == "failed"), "{combs:?}");
    let hang = &combs[0];
    assert!(
        hang["error"].as_str().unwrap().contains("not ready"),
        "{hang}"
    );
    assert!(hang["log_tail"]
        .as_str()
        .unwrap()
        .contains("loading weights forever"));
    let crash = &combs[1];
    let e = crash["error"].as_str().unwrap();
    assert!(e.contains("exited during the run"), "{crash}");
    assert!(
        crash["log_tail"]
            .as_str()
            .unwrap()
            .contains("simulated engine crash"),
        "{crash}"
    );
    assert!(exp.join("SERVE-mode=hang-failure.json").exists());
    let decision = std::fs::read_to_string(exp.join("decision.md")).unwrap();
    assert!(decision.contains("No combination accepted"), "{decision}");
    assert!(decision.contains("simulated engine crash"), "{decision}");
    // The crashed run keeps what it measured under a name --resume does not take as done,
    // the requests after the crash recorded as failures.
    let crash_dir =
        exp.join("SERVE--mode=crash-BENCH--num_prompts=60-request_rate=10-random_input_len=64-random_output_len=8");
    assert!(!crash_dir.join("run=0.json").exists());
    let partial = read_json(&crash_dir.join("run=0.partial.json"));
    assert!(partial["failed"].as_u64().unwrap() > 0, "{partial}");
    assert!(partial["completed"].as_u64().unwrap() > 0, "{partial}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--server-cmd` on the frontier sweep: one server for the whole experiment, measured as a
/// `--base-url` would be, and stopped (its port free) when the sweep ends.
#[test]
fn the_frontier_sweep_starts_and_stops_its_own_server() {
    let _x = exclusive();
    let dir = tempdir("sweep-serve", "server-cmd");
    let port = free_port();
    let out = bin()
        .current_dir(&dir)
        .args([
            "sweep",
            "--server-cmd",
            &format!("{EXE} sim llama-3.1-8b --gpu h100 --port {port}"),
            "--max-concurrency",
            "1,4",
            "--num-prompts",
            "8",
            "--input-len",
            "64",
            "--output-len",
            "8",
            "--num-warmups",
            "0",
            "--results-dir",
            "res",
        ])
        .output()
        .unwrap();
    let stdout = ok(&out);
    let exp = stdout
        .lines()
        .find_map(|l| l.strip_prefix("experiment: "))
        .unwrap_or_else(|| panic!("{}", text(&out)));
    let exp = read_json(&dir.join(exp).join("experiment.json"));
    assert_eq!(exp["sweep"]["points"].as_array().unwrap().len(), 2, "{exp}");
    let log = std::fs::read_dir(dir.join("res"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "log"))
        .expect("the server log in the results directory");
    assert!(std::fs::read_to_string(log).unwrap().contains("Serving on"));
    assert!(
        TcpListener::bind(("127.0.0.1", port)).is_ok(),
        "the server's port is free after the sweep"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A frontier as the benchmark side: each server combination gets a whole concurrency sweep.
#[test]
fn a_frontier_can_be_the_bench_side_of_sweep_serve() {
    let _x = exclusive();
    let dir = tempdir("sweep-serve", "frontier-bench");
    let out = bin()
        .current_dir(&dir)
        .args([
            "sweep",
            "serve",
            "--serve-cmd",
            &format!("{EXE} sim llama-3.1-8b --gpu h100 --max-num-seqs 8"),
            "--bench-cmd",
            "servebench sweep --max-concurrency 1,4 --num-prompts 8 --input-len 64 --output-len 8 --num-warmups 0",
            "--num-runs",
            "1",
            "-e",
            "f",
        ])
        .output()
        .unwrap();
    ok(&out);
    let exp = dir.join("results/f");
    let run0 = read_json(&exp.join("run=0.json"));
    let frontier = dir.join(PathBuf::from(run0["results_dir"].as_str().unwrap()));
    assert!(frontier.is_dir(), "{run0}");
    let combs = combinations(&exp);
    assert_eq!(combs[0]["status"], "ok", "{combs:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// One knob at a time: the baseline from --serve-params' first entry, each --vary value a
/// server combination that changes only that knob, shown by --dry-run.
#[test]
fn vary_changes_one_knob_from_the_baseline() {
    let dir = tempdir("sweep-serve", "vary-dry");
    let serve = write(
        &dir,
        "serve.json",
        r#"[{"max_num_seqs": 64, "max_num_batched_tokens": 8192}, {"max_num_seqs": 1}]"#,
    );
    let out = bin()
        .current_dir(&dir)
        .args([
            "sweep",
            "serve",
            "--serve-cmd",
            "vllm serve m",
            "--bench-cmd",
            "vllm bench serve --model m",
            "--serve-params",
            &serve,
            "--vary",
            "max_num_seqs=16,64,256",
            "--vary",
            "enable_chunked_prefill=false",
            "--num-runs",
            "3",
            "--dry-run",
        ])
        .output()
        .unwrap();
    let stdout = ok(&out);
    let servers: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("Server command: "))
        .collect();
    assert_eq!(
        servers,
        [
            "vllm serve m --max-num-seqs 64 --max-num-batched-tokens 8192",
            "vllm serve m --max-num-seqs 16 --max-num-batched-tokens 8192",
            "vllm serve m --max-num-seqs 256 --max-num-batched-tokens 8192",
            "vllm serve m --max-num-seqs 64 --max-num-batched-tokens 8192 --no-enable-chunked-prefill",
        ],
        "{stdout}"
    );
    assert!(stdout.contains("SERVE--baseline/run=2.json"), "{stdout}");
    let bad = bin()
        .args([
            "sweep",
            "serve",
            "--serve-cmd",
            "x",
            "--bench-cmd",
            "y",
            "--vary",
            "max_num_seqs",
            "--dry-run",
        ])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("knob=v1,v2"),
        "{}",
        text(&bad)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The repeated baseline gives the noise floor: 4 running sequences against a baseline of 64
/// make p99 TTFT worse beyond it, and decision.md says so.
#[test]
fn the_decision_judges_a_knob_against_the_baseline_noise_floor() {
    let _x = exclusive();
    let dir = tempdir("sweep-serve", "vary-real");
    let base = write(&dir, "base.json", r#"{"max_num_seqs": 64}"#);
    let bench = write(
        &dir,
        "bench.json",
        r#"[{"num_prompts": 48, "random_input_len": 128, "random_output_len": 16}]"#,
    );
    let out = bin()
        .current_dir(&dir)
        .args([
            "sweep",
            "serve",
            "--serve-cmd",
            "servebench sim llama-3.1-8b --gpu h100",
            "--bench-cmd",
            "vllm bench serve --model llama-3.1-8b",
            "--baseline",
            &base,
            "--vary",
            "max_num_seqs=4",
            "--bench-params",
            &bench,
            "--num-runs",
            "2",
            "-e",
            "v",
        ])
        .output()
        .unwrap();
    ok(&out);
    let decision = std::fs::read_to_string(dir.join("results/v/decision.md")).unwrap();
    let ttft_row = decision
        .lines()
        .find(|l| l.starts_with("| max_num_seqs=4") && l.contains("| p99 TTFT ms |"))
        .unwrap_or_else(|| panic!("{decision}"));
    assert!(ttft_row.contains("beyond noise, worse"), "{decision}");
    // Both runs' requests on each side, pooled: each run kept its own records.
    assert!(
        ttft_row.contains("| Mann–Whitney per request (96/96) |"),
        "{decision}"
    );
    assert!(decision.contains("**Accepted: baseline"), "{decision}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The documented `sweep serve` commands (README and guide), as written: the example against the simulator runs
/// for real (its parameter files are the ones in examples/sweep-serve/), the others dry.
#[test]
fn the_readme_sweep_serve_examples_run_as_written() {
    let _x = exclusive();
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let commands: Vec<Vec<String>> = crate::common::documented_lines()
        .iter()
        .filter(|l| l.starts_with("servebench sweep serve "))
        .map(|l| servebench_sim::args::split_shell_words(l).unwrap())
        .collect();
    assert!(commands.len() >= 2, "{commands:?}");
    let dir = tempdir("sweep-serve", "readme");
    for c in &commands {
        let out = bin()
            .current_dir(root)
            .args(&c[1..])
            .arg("-o")
            .arg(&dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{c:?}\n{}", text(&out));
        if !c.iter().any(|w| w == "--dry-run") {
            let exp = dir.join("max-num-seqs");
            let decision = std::fs::read_to_string(exp.join("decision.md")).unwrap();
            assert!(
                decision.contains("**Accepted: max_num_seqs=64 × burst-64**"),
                "{decision}"
            );
            assert!(exp
                .join("SERVE--max_num_seqs=4-BENCH--burst-64/run=0.json")
                .is_file());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--server-cmd` on `matrix`: the rows measure the server it started, which is stopped after.
#[test]
fn the_matrix_starts_and_stops_its_own_server() {
    let _x = exclusive();
    let dir = tempdir("sweep-serve", "matrix-server");
    let matrix = write(
        &dir,
        "tiny.toml",
        "title = \"tiny\"\n[defaults]\nnum_warmups = 0\n[[row]]\nid = \"T\"\nname = \"tiny\"\n\
         input_len = 64\noutput_len = 8\nmax_concurrency = 4\nrequest_rate = 100\nnum_prompts = 8\n",
    );
    let out = bin()
        .current_dir(&dir)
        .args([
            "matrix",
            "--matrix",
            &matrix,
            "--server-cmd",
            "servebench sim llama-3.1-8b --gpu h100 --max-num-seqs 8",
            "--server-log",
            "server.log",
            "--results-dir",
            "res",
        ])
        .output()
        .unwrap();
    let stdout = ok(&out);
    let exp = stdout
        .lines()
        .find_map(|l| l.strip_prefix("experiment: "))
        .unwrap_or_else(|| panic!("{}", text(&out)));
    let env = read_json(&dir.join(exp).join("environment.json"));
    assert!(
        env.to_string().contains("http://127.0.0.1:"),
        "the runs went to the started server: {env}"
    );
    let log = std::fs::read_to_string(dir.join("server.log")).unwrap();
    assert!(log.contains("Serving on"), "{log}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Server stopped"),
        "{}",
        text(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
