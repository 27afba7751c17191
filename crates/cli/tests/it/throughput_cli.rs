//! `servebench throughput` against the simulator in virtual time: the ceiling it reports is the
//! simulator's saturated throughput, the JSON is vLLM's, bad flags are refused.

#![allow(clippy::unwrap_used)]

use crate::common::{ok, read_json, servebench, tempdir, text};
use crate::latency_cli::ordered;

const THROUGHPUT_KEYS: [&str; 5] = [
    "elapsed_time",
    "num_requests",
    "total_num_tokens",
    "requests_per_second",
    "tokens_per_second",
];

/// A simulator whose batch is capped at 64 sequences, so both a closed loop of 64 users and
/// 1,000 requests released at once keep it saturated.
const SIM: &str = "llama-3.1-8b --gpu h100 --max-num-seqs 64";

#[test]
fn a_thousand_prompts_reach_the_saturated_throughput_of_a_closed_loop_run() {
    let dir = tempdir("throughput", "saturated");
    let json = dir.join("throughput.json");
    let out = servebench(&[
        "throughput",
        "--sim",
        SIM,
        "--num-prompts",
        "1000",
        "--input-len",
        "256",
        "--output-len",
        "128",
        "--output-json",
        json.to_str().unwrap(),
    ]);
    let stdout = ok(&out);
    assert!(stdout.contains(" output tokens/s"), "{stdout}");
    assert!(
        stdout.contains("Total num prompt tokens:  256000"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Total num output tokens:  128000"),
        "{stdout}"
    );
    assert_eq!(ordered(&json).keys(), THROUGHPUT_KEYS);
    let t = read_json(&json);
    assert_eq!(t["num_requests"], 1000);
    assert_eq!(t["total_num_tokens"], 384_000);
    let elapsed = t["elapsed_time"].as_f64().unwrap();
    let tps = t["tokens_per_second"].as_f64().unwrap();
    assert!((tps - 384_000.0 / elapsed).abs() < 1e-6 * tps);
    assert!((t["requests_per_second"].as_f64().unwrap() - 1000.0 / elapsed).abs() < 1e-9 * tps);

    // The same lengths as a closed loop of 64 users (every user sends again as soon as its
    // answer ends): the simulator at saturation.
    let out = servebench(&[
        "run",
        "--virtual-time",
        "--sim",
        SIM,
        "--num-prompts",
        "1000",
        "--random-input-len",
        "256",
        "--random-output-len",
        "128",
        "--max-concurrency",
        "64",
        "--save-result",
        "--result-dir",
        dir.to_str().unwrap(),
        "--result-filename",
        "closed.json",
        "--output-dir",
        dir.join("native").to_str().unwrap(),
        "--disable-tqdm",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let run = read_json(&dir.join("closed.json"));
    let saturated = run["total_token_throughput"].as_f64().unwrap();
    let err = (tps - saturated).abs() / saturated;
    assert!(
        err < 0.05,
        "throughput {tps} tok/s vs the closed loop's {saturated} tok/s"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn n_sequences_count_prompt_tokens_once_and_every_output() {
    let dir = tempdir("throughput", "n");
    let json = dir.join("t.json");
    let out = servebench(&[
        "throughput",
        "--num-prompts",
        "10",
        "--input-len",
        "100",
        "--output-len",
        "20",
        "--n",
        "3",
        "--output-json",
        json.to_str().unwrap(),
    ]);
    let stdout = ok(&out);
    assert!(
        stdout.contains("Total num prompt tokens:  1000"),
        "{stdout}"
    );
    assert!(stdout.contains("Total num output tokens:  600"), "{stdout}");
    let t = read_json(&json);
    assert_eq!(t["num_requests"], 10);
    assert_eq!(t["total_num_tokens"], 1600);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_custom_dataset_sets_the_prompts() {
    let dir = tempdir("throughput", "custom");
    let data = dir.join("d.jsonl");
    std::fs::write(
        &data,
        "{\"prompt\": \"Tell me about the sea.\", \"output_tokens\": 7}\n\
         {\"prompt\": \"Name three rivers.\", \"output_tokens\": 5}\n",
    )
    .unwrap();
    let out = servebench(&[
        "throughput",
        "--dataset-name",
        "custom",
        "--dataset-path",
        data.to_str().unwrap(),
        "--num-prompts",
        "2",
        "--output-len",
        "9",
    ]);
    let stdout = ok(&out);
    assert!(stdout.contains("Total num output tokens:  18"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_flags_exit_2_with_a_clear_message() {
    let cases: &[(&[&str], &str)] = &[
        (&["throughput"], "--input-len must be given"),
        (
            &["throughput", "--input-len", "8", "--num-prompts", "0"],
            "--num-prompts",
        ),
        (
            &["throughput", "--input-len", "8", "--hf-max-batch-size", "4"],
            "--hf-max-batch-size is a `vllm bench throughput` flag",
        ),
        (
            &[
                "throughput",
                "--input-len",
                "8",
                "--random-range-ratio",
                "1.5",
            ],
            "--random-range-ratio",
        ),
        (
            &["throughput", "--dataset-name", "sharegpt"],
            "needs --dataset-path",
        ),
        (
            &["throughput", "--input-len", "8", "--backend", "hf"],
            "--backend",
        ),
        // What would give a wrong number is refused, saying why (issue 28).
        (
            &[
                "throughput",
                "--input-len",
                "8",
                "--speculative-config",
                "{}",
            ],
            "how many drafts are accepted",
        ),
        (
            &["throughput", "--input-len", "8", "--quantization", "awq"],
            "--quantization awq",
        ),
    ];
    for (args, message) in cases {
        let out = servebench(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}\n{}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}

/// Answer checks hold for the offline commands too: the simulator's answers (its filler
/// words) match a regex any text matches, and one they never contain fails the run with
/// the invalid_output reason; `latency` the same.
#[test]
fn answer_checks_fail_a_batch_whose_answers_miss() {
    let base = [
        "--input-len",
        "8",
        "--output-len",
        "4",
        "--num-prompts",
        "3",
    ];
    let mut pass = vec!["throughput", "--expect-regex", "\\S"];
    pass.extend(base);
    ok(&servebench(&pass));
    let mut miss = vec![
        "throughput",
        "--expect-regex",
        "^no simulated answer says this$",
    ];
    miss.extend(base);
    let out = servebench(&miss);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("3 of 3 requests failed"), "{stderr}");
    assert!(
        stderr.contains("invalid_output") || stderr.contains("regex"),
        "{stderr}"
    );
    let out = servebench(&[
        "latency",
        "--batch-size",
        "2",
        "--num-iters-warmup",
        "0",
        "--num-iters",
        "1",
        "--output-len",
        "4",
        "--expect-regex",
        "^no simulated answer says this$",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let bad = servebench(&["throughput", "--input-len", "8", "--expect-regex", "("]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("--expect-regex"),
        "{}",
        text(&bad)
    );
}

/// `latency` and `throughput` take `--virtual-time` as `run` does (they run the simulator in
/// virtual time anyway without a server), so one command line serves all three; with a
/// server it is refused, as in `run`.
#[test]
fn latency_and_throughput_accept_virtual_time() {
    let t = servebench(&[
        "throughput",
        "--virtual-time",
        "--num-prompts",
        "8",
        "--input-len",
        "32",
        "--output-len",
        "8",
    ]);
    assert!(ok(&t).contains("Throughput:"), "{}", text(&t));
    let l = servebench(&[
        "latency",
        "--virtual-time",
        "--input-len",
        "32",
        "--output-len",
        "8",
        "--batch-size",
        "2",
        "--num-iters",
        "2",
        "--num-iters-warmup",
        "0",
    ]);
    assert!(ok(&l).contains("Avg latency"), "{}", text(&l));
    let refused = servebench(&[
        "throughput",
        "--virtual-time",
        "--base-url",
        "http://127.0.0.1:9",
        "--num-prompts",
        "1",
    ]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--virtual-time runs the simulator"),
        "{}",
        text(&refused)
    );
}
