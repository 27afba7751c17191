//! `servebench run` end to end: the real binary against the in-process simulator (or in
//! virtual time), checking files, vLLM compatibility, errors and secrets.

use crate::common::{self, bin, read_json};
use std::path::{Path, PathBuf};
use std::process::Output;

fn tempdir(name: &str) -> PathBuf {
    common::tempdir("cli", name)
}

fn run_in(dir: &Path, args: &[&str]) -> Output {
    bin()
        .current_dir(dir)
        .arg("run")
        .args(args)
        .output()
        .expect("spawn servebench")
}

fn files_with_suffix(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.to_string_lossy().ends_with(suffix))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Key order of a JSON object as written (serde_json's Map does not keep order).
fn key_order(text: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut depth = 0i32;
    let mut in_str = false;
    let mut esc = false;
    let mut cur = String::new();
    let mut expect_key = false;
    for ch in text.chars() {
        if in_str {
            if esc {
                esc = false;
                cur.push(ch);
            } else if ch == '\\' {
                esc = true;
            } else if ch == '"' {
                in_str = false;
                if depth == 1 && expect_key {
                    keys.push(std::mem::take(&mut cur));
                    expect_key = false;
                }
                cur.clear();
            } else {
                cur.push(ch);
            }
            continue;
        }
        match ch {
            '"' => in_str = true,
            '{' | '[' => {
                depth += 1;
                if depth == 1 {
                    expect_key = true;
                }
            }
            '}' | ']' => depth -= 1,
            ',' if depth == 1 => expect_key = true,
            _ => {}
        }
    }
    keys
}

const VLLM_KEYS_DETAILED: &[&str] = &[
    "date",
    "endpoint_type",
    "backend",
    "label",
    "model_id",
    "tokenizer_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "latencies",
    "start_times",
    "queue_times",
    "generated_texts",
    "errors",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    "rtfx",
    "mean_ttft_ms",
    "median_ttft_ms",
    "std_ttft_ms",
    "p50_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "std_tpot_ms",
    "p50_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "std_itl_ms",
    "p50_itl_ms",
    "p99_itl_ms",
    "mean_e2el_ms",
    "median_e2el_ms",
    "std_e2el_ms",
    "p50_e2el_ms",
    "p99_e2el_ms",
];

#[test]
fn vllm_result_json_has_vllms_keys_in_vllms_order_regression_issue_2() {
    let _exclusive = crate::common::exclusive();
    let dir = tempdir("vllm-keys");
    let out = run_in(
        &dir,
        &[
            "--num-prompts",
            "40",
            "--random-input-len",
            "64",
            "--random-output-len",
            "16",
            "--max-concurrency",
            "64",
            "--save-result",
            "--save-detailed",
            "--percentile-metrics",
            "ttft,tpot,itl,e2el",
            "--metric-percentiles",
            "50,99",
            "--result-filename",
            "r.json",
            "--disable-tqdm",
        ],
    );
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(dir.join("r.json")).expect("vllm result written");
    assert_eq!(key_order(&text), VLLM_KEYS_DETAILED);
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["request_rate"], "inf");
    assert_eq!(v["completed"], 40);
    assert_eq!(v["max_concurrency"], 64);
    assert_eq!(v["total_input_tokens"], 40 * 64);
    assert_eq!(v["total_output_tokens"], 40 * 16);
    assert_eq!(v["ttfts"].as_array().map(Vec::len), Some(40));
    // One gap per chunk after the first: 15 when every chunk carries one token, fewer when
    // the simulator fell behind on a loaded machine and sent several tokens in one chunk (as
    // a lagging vLLM server does); never none, never more than the tokens.
    let gaps = v["itls"][0].as_array().map(Vec::len).unwrap_or(0);
    assert!(
        (1..=15).contains(&gaps),
        "one gap per chunk after the first, at most 15: {gaps}"
    );
    // Python's json.dump layout.
    assert!(text.starts_with("{\"date\": \""), "{}", &text[..40]);
    // The terminal summary follows vLLM's layout.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("============ Serving Benchmark Result ============"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Successful requests:                     40"),
        "{stdout}"
    );
}

#[test]
fn vllm_result_without_detail_keeps_latencies_and_queue_times_and_adds_metadata_after_num_prompts()
{
    let dir = tempdir("vllm-meta");
    let out = run_in(
        &dir,
        &[
            "--virtual-time",
            "--num-prompts",
            "30",
            "--random-input-len",
            "32",
            "--random-output-len",
            "8",
            "--request-rate",
            "20",
            "--save-result",
            "--result-filename",
            "m.json",
            "--metadata",
            "tp=1",
            "gpu=h100",
            "--label",
            "mylabel",
            "--goodput",
            "ttft:1000",
            "--disable-tqdm",
        ],
    );
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(dir.join("m.json")).expect("written");
    let keys = key_order(&text);
    let pos = |k: &str| {
        keys.iter()
            .position(|x| x == k)
            .unwrap_or_else(|| panic!("{k} missing in {keys:?}"))
    };
    assert_eq!(pos("tp"), pos("num_prompts") + 1);
    assert_eq!(pos("gpu"), pos("num_prompts") + 2);
    assert!(keys.contains(&"latencies".to_string()) && keys.contains(&"queue_times".to_string()));
    for k in [
        "ttfts",
        "itls",
        "input_lens",
        "output_lens",
        "start_times",
        "generated_texts",
        "errors",
    ] {
        assert!(
            !keys.contains(&k.to_string()),
            "{k} only with --save-detailed"
        );
    }
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(v["label"], "mylabel");
    assert_eq!(v["request_rate"], 20.0);
    assert!(v["request_goodput"].as_f64().expect("goodput") > 0.0);
    // Default percentile metrics are vLLM's: ttft, tpot, itl.
    assert!(v.get("p99_ttft_ms").is_some() && v.get("p99_e2el_ms").is_none());
    // The servebench result says it was simulated.
    let native = files_with_suffix(&dir.join("results/runs"), ".servebench.json");
    assert_eq!(native.len(), 1);
    let n = read_json(&native[0]);
    assert_eq!(n["schema"], "servebench.result/v1");
    assert_eq!(n["simulated"], true);
    assert_eq!(n["metadata"]["target"]["clock"], "virtual");
}

#[test]
fn append_result_appends_a_second_json_document() {
    let dir = tempdir("append");
    for _ in 0..2 {
        let out = run_in(
            &dir,
            &[
                "--virtual-time",
                "--num-prompts",
                "5",
                "--random-input-len",
                "16",
                "--random-output-len",
                "4",
                "--append-result",
                "--result-filename",
                "a.json",
                "--disable-tqdm",
            ],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = std::fs::read_to_string(dir.join("a.json")).expect("written");
    let docs: Vec<&str> = text.split('\n').filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(docs.len(), 2);
    for d in docs {
        let v: serde_json::Value = serde_json::from_str(d).expect("each line is one JSON result");
        assert_eq!(v["completed"], 5);
    }
}

#[test]
fn unsupported_vllm_flags_are_refused_with_a_reason() {
    let dir = tempdir("unsupported");
    // `--profile` is measured now (the server's /start_profile and /stop_profile); beam
    // search is not, and would change what is generated.
    let out = run_in(&dir, &["--use-beam-search"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--use-beam-search") && err.contains("not support"),
        "{err}"
    );
    let out = run_in(
        &dir,
        &["--percentile-metrics", "ttft,nonsense", "--virtual-time"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("allowed"));
}

#[test]
fn a_run_where_every_request_fails_exits_non_zero_with_the_reason_and_keeps_records() {
    // A port nobody listens on: every request is a connect failure.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    let dir = tempdir("all-fail");
    let out = run_in(
        &dir,
        &[
            "--base-url",
            &format!("http://127.0.0.1:{port}"),
            "--model",
            "m",
            "--num-prompts",
            "5",
            "--random-input-len",
            "8",
            "--random-output-len",
            "4",
            "--disable-tqdm",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("every request failed") && err.contains("connect"),
        "{err}"
    );
    let jsonl = files_with_suffix(&dir.join("results/runs"), ".requests.jsonl");
    assert_eq!(jsonl.len(), 1);
    let lines = std::fs::read_to_string(&jsonl[0]).expect("read");
    assert_eq!(lines.lines().count(), 5, "every failed request is a record");
    assert!(lines.contains("\"kind\":\"connect\""));
}

#[test]
fn the_api_key_never_reaches_a_result_file_or_the_output() {
    let dir = tempdir("secret");
    let out = bin()
        .current_dir(&dir)
        .args([
            "run",
            "--num-prompts",
            "6",
            "--random-input-len",
            "16",
            "--random-output-len",
            "4",
            "--save-result",
            "--save-detailed",
            "--result-filename",
            "s.json",
            "--disable-tqdm",
            "--header",
            "Authorization=Bearer sk-header-secret",
            "--api-key",
            "sk-flag-secret",
        ])
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut all =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    for p in files_with_suffix(&dir.join("results/runs"), "")
        .into_iter()
        .chain([dir.join("s.json")])
    {
        all.push_str(&std::fs::read_to_string(p).unwrap_or_default());
    }
    assert!(
        !all.contains("sk-flag-secret") && !all.contains("sk-header-secret"),
        "a secret leaked"
    );
}

#[test]
fn duration_runs_by_time_and_queue_time_appears_when_the_cap_binds() {
    let dir = tempdir("duration");
    let out = run_in(
        &dir,
        &[
            "--virtual-time",
            "--duration",
            "20",
            "--request-rate",
            "8",
            "--max-concurrency",
            "2",
            "--random-input-len",
            "512",
            "--random-output-len",
            "256",
            "--disable-tqdm",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let native = read_json(&files_with_suffix(&dir.join("results/runs"), ".servebench.json")[0]);
    let completed = native["summary"]["completed"].as_u64().expect("completed");
    // About 8 req/s for 20 s were scheduled.
    assert!((120..=200).contains(&completed), "completed {completed}");
    // Two slots of ~1.8 s requests cannot keep up with 8 req/s: requests queue on the client.
    let queue_p50 = native["summary"]["queue"]["median"]
        .as_f64()
        .expect("queue median");
    assert!(queue_p50 > 1000.0, "queue p50 {queue_p50} ms");
    let user_ttft = native["summary"]["user_ttft"]["median"]
        .as_f64()
        .expect("user ttft");
    let ttft = native["summary"]["ttft"]["median"].as_f64().expect("ttft");
    assert!(user_ttft > ttft + 1000.0, "user TTFT includes the queue");
}

/// Two runs started together in one directory with the same flags (virtual-time runs take
/// under a second, so their names' time stamps agree): both results are kept, none is
/// overwritten, and each result names its own records file.
#[test]
fn two_runs_started_together_in_one_directory_keep_both_results() {
    let dir = tempdir("no-clobber");
    let args = [
        "run",
        "--virtual-time",
        "--num-prompts",
        "20",
        "--random-input-len",
        "64",
        "--random-output-len",
        "8",
        "--save-result",
        "--disable-tqdm",
    ];
    let spawn = || {
        bin()
            .current_dir(&dir)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn servebench")
    };
    let (a, b, c) = (spawn(), spawn(), spawn());
    for child in [a, b, c] {
        let o = child.wait_with_output().expect("wait");
        assert!(o.status.success(), "{}", common::text(&o));
    }
    let natives = files_with_suffix(&dir.join("results/runs"), ".servebench.json");
    let records = files_with_suffix(&dir.join("results/runs"), ".requests.jsonl");
    assert_eq!(natives.len(), 3, "{natives:?}");
    assert_eq!(records.len(), 3, "{records:?}");
    let vllm: Vec<PathBuf> = files_with_suffix(&dir, ".json");
    assert_eq!(vllm.len(), 3, "{vllm:?}");
    for n in &natives {
        let r = read_json(n);
        assert_eq!(r["summary"]["completed"], 20, "{}", n.display());
    }
}

/// Results that cannot be written once the run is measured (here a file-size limit stands in
/// for a full disk: the 14 KB result is refused, the small records file is not) end the run
/// with exit 3, as a records file that cannot be written does, and leave no empty or partial
/// result behind; the records already written stay.
#[test]
fn results_that_cannot_be_written_exit_3_and_leave_no_partial_file() {
    let dir = tempdir("results-full");
    let o = std::process::Command::new("bash")
        .current_dir(&dir)
        .env_remove("OPENAI_API_KEY")
        .args([
            "-c",
            "trap '' XFSZ; ulimit -f 8; exec \"$0\" \"$@\"",
            env!("CARGO_BIN_EXE_servebench"),
            "run",
            "--virtual-time",
            "--num-prompts",
            "4",
            "--random-input-len",
            "16",
            "--random-output-len",
            "4",
            "--output-dir",
            "out",
        ])
        .output()
        .expect("spawn bash");
    assert_eq!(o.status.code(), Some(3), "{}", common::text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("writing the results failed"), "{err}");
    let out = dir.join("out");
    assert!(
        files_with_suffix(&out, ".servebench.json").is_empty(),
        "no partial result"
    );
    let records = files_with_suffix(&out, ".requests.jsonl");
    assert_eq!(records.len(), 1);
    let n = std::fs::read_to_string(&records[0])
        .expect("records")
        .lines()
        .count();
    assert_eq!(n, 4, "the measured records stay");
}

/// The README's one-workload example, in virtual time: warnings that fire are true. The p99
/// confidence interval that more samples would close is shown open with its reason (it was
/// `[x, -]`), a 20 s run is called too short for MSER rather than "no steady state", and a
/// finite rate shows its achieved rate.
#[test]
fn the_one_workload_example_prints_only_true_warnings() {
    let dir = tempdir("true-warnings");
    let o = run_in(
        &dir,
        &[
            "--virtual-time",
            "--num-prompts",
            "200",
            "--request-rate",
            "10",
            "--random-input-len",
            "1024",
            "--random-output-len",
            "128",
        ],
    );
    let out = common::ok(&o);
    assert!(!out.contains(", -]"), "{out}");
    assert!(
        out.contains("∞) (no upper bound: too few samples)"),
        "{out}"
    );
    assert!(!out.contains("no steady state reached"), "{out}");
    assert!(
        out.contains("too short to tell a warm-up from noise"),
        "{out}"
    );
    assert!(!out.contains("CLIENT limited"), "{out}");
    assert!(out.contains("Load: offered 10.00 req/s, achieved"), "{out}");
}

/// Progress when stderr is not a terminal (CI, pipes): plain lines, the first after 2 s so a
/// run of a few seconds shows one, each with requests in flight, throughput and an ETA; the
/// last line gives the final count. `--disable-tqdm` turns all of it off.
#[test]
fn a_real_time_run_prints_plain_progress_lines_with_an_eta_when_stderr_is_not_a_terminal() {
    let _exclusive = crate::common::exclusive();
    let dir = tempdir("progress");
    let args = [
        "--request-rate",
        "20",
        "--num-prompts",
        "60",
        "--random-input-len",
        "64",
        "--random-output-len",
        "16",
    ];
    let out = run_in(&dir, &args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("run ")).collect();
    let live = lines
        .iter()
        .find(|l| l.contains(", ETA "))
        .unwrap_or_else(|| panic!("no progress line with an ETA: {err}"));
    assert!(
        live.contains("/60 requests, ") && live.contains(" in flight, ") && live.contains(" req/s"),
        "{live}"
    );
    let last = lines.last().expect("a last progress line");
    assert!(
        last.starts_with("run 100% 60/60 requests, 0 failed, ") && !last.contains("ETA"),
        "{last}"
    );
    // No terminal, so no bar: nothing redraws a line in place.
    assert!(!err.contains('\r'), "{err}");

    let quiet = run_in(&dir, &[&args[..], &["--disable-tqdm"]].concat());
    let err = String::from_utf8_lossy(&quiet.stderr);
    assert!(quiet.status.success(), "{err}");
    assert!(!err.contains("/60 requests"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
