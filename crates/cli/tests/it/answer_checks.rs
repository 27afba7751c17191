//! Answer checks (`--expect-regex`, `--expect-json-schema`, a custom dataset's per-request
//! `expected`): a completed answer that fails one is a failed request of kind
//! `invalid_output`, with the reason in its record, counted as failed in every output; a check
//! that cannot be built stops the run before any request.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

use crate::common::{self, bin, read_json, text};

fn tempdir(name: &str) -> PathBuf {
    common::tempdir("answer", name)
}

fn run_in(dir: &Path, args: &[&str]) -> Output {
    bin()
        .current_dir(dir)
        .arg("run")
        .args(args)
        .arg("--disable-tqdm")
        .output()
        .expect("spawn servebench")
}

fn only_file(dir: &Path, suffix: &str) -> PathBuf {
    let found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    assert_eq!(found.len(), 1, "{suffix} in {}: {found:?}", dir.display());
    found.into_iter().next().unwrap_or_default()
}

fn records(dir: &Path) -> Vec<Value> {
    let p = only_file(dir, ".requests.jsonl");
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

fn native(dir: &Path) -> Value {
    read_json(&only_file(dir, ".servebench.json"))
}

fn kind(r: &Value) -> Option<&str> {
    r["failure"]["kind"].as_str()
}

fn message(r: &Value) -> &str {
    r["failure"]["message"].as_str().unwrap_or_default()
}

/// A server whose answers are chosen by the prompt: the first key found in the request
/// body picks the streamed pieces of its answer. Counts the completion requests it got.
struct AnswerServer {
    url: String,
    posts: Arc<AtomicUsize>,
}

const ANSWERS: &[(&str, &[&str])] = &[
    ("ask-good", &["{\"answer\": ", "42}"]),
    ("ask-wrong-type", &["{\"answer\": \"forty-two\"}"]),
    ("ask-chatty", &["Sure! ", "{\"answer\": 42}"]),
];

fn sse(pieces: &[&str]) -> String {
    let chunk = |text: &str, finish: Value| {
        let c = json!({
            "id": "cmpl-1", "object": "text_completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "text": text, "finish_reason": finish}],
        });
        format!("data: {c}\n\n")
    };
    let mut s: String = pieces.iter().map(|p| chunk(p, Value::Null)).collect();
    s.push_str(&chunk("", json!("stop")));
    s.push_str("data: [DONE]\n\n");
    s
}

fn answer_server() -> AnswerServer {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let posts = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&posts);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut sock) = conn else { return };
            let seen = Arc::clone(&seen);
            std::thread::spawn(move || {
                let mut got = Vec::new();
                let mut buf = [0u8; 8192];
                // Head, then as much body as Content-Length says.
                let (head, body_start) = loop {
                    let n = sock.read(&mut buf).unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                    let t = String::from_utf8_lossy(&got).into_owned();
                    if let Some(h) = t.find("\r\n\r\n") {
                        break (t[..h].to_owned(), h + 4);
                    }
                };
                let len = head
                    .lines()
                    .find_map(|l| {
                        let l = l.to_ascii_lowercase();
                        l.strip_prefix("content-length:")
                            .and_then(|v| v.trim().parse::<usize>().ok())
                    })
                    .unwrap_or(0);
                while got.len() < body_start + len {
                    let n = sock.read(&mut buf).unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                let body = String::from_utf8_lossy(&got[body_start.min(got.len())..]).into_owned();
                let reply = if head.starts_with("POST") {
                    seen.fetch_add(1, Ordering::SeqCst);
                    let pieces = ANSWERS
                        .iter()
                        .find(|(key, _)| body.contains(key))
                        .map_or(&["no key in the prompt"][..], |(_, p)| p);
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n{}",
                        sse(pieces)
                    )
                } else {
                    "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        .to_owned()
                };
                let _ = sock.write_all(reply.as_bytes());
            });
        }
    });
    AnswerServer {
        url: format!("http://127.0.0.1:{port}"),
        posts,
    }
}

fn write(dir: &Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, body).expect("write");
    p.display().to_string()
}

const SCHEMA: &str = r#"{
  "type": "object",
  "required": ["answer"],
  "properties": {"answer": {"type": "integer"}}
}"#;

#[test]
fn json_schema_turns_invalid_json_and_schema_violations_into_invalid_output() {
    let server = answer_server();
    let dir = tempdir("schema");
    let schema = write(&dir, "answer.schema.json", SCHEMA);
    let data = write(
        &dir,
        "prompts.jsonl",
        "{\"prompt\": \"ask-good\"}\n{\"prompt\": \"ask-wrong-type\"}\n{\"prompt\": \"ask-chatty\"}\n",
    );
    let out = run_in(
        &dir,
        &[
            "--base-url",
            &server.url,
            "--model",
            "m",
            "--dataset-name",
            "custom",
            "--dataset-path",
            &data,
            "--num-prompts",
            "3",
            "--expect-json-schema",
            &schema,
            "--save-result",
            "--result-filename",
            "vllm.json",
            "--save-detailed",
            "--output-dir",
            "out",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("Valid answers (passed/checked):") && stdout.contains("1/3 (33.3 %)"),
        "{stdout}"
    );
    let recs = records(&dir.join("out"));
    assert_eq!(recs.len(), 3);
    assert!(recs.iter().all(|r| r["answer_checked"] == true), "{recs:?}");
    let by_text = |t: &str| {
        recs.iter()
            .find(|r| r["text"] == t)
            .unwrap_or_else(|| panic!("no record with text {t:?}: {recs:?}"))
    };
    // Streamed pieces are checked joined.
    let good = by_text("{\"answer\": 42}");
    assert!(good["failure"].is_null(), "{good}");
    let wrong = by_text("{\"answer\": \"forty-two\"}");
    assert_eq!(kind(wrong), Some("invalid_output"));
    assert!(
        message(wrong).contains("violates --expect-json-schema")
            && message(wrong).contains(&schema)
            && message(wrong).contains("at /answer"),
        "{wrong}"
    );
    let chatty = by_text("Sure! {\"answer\": 42}");
    assert_eq!(kind(chatty), Some("invalid_output"));
    assert!(
        message(chatty).contains("answer is not JSON")
            && message(chatty).contains("answer: \"Sure! {\\\"answer\\\": 42}\""),
        "{chatty}"
    );

    let summary = &native(&dir.join("out"))["summary"];
    assert_eq!(
        (summary["completed"].as_u64(), summary["failed"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(summary["failures_by_kind"]["invalid_output"], 2);
    assert_eq!(
        summary["answer_checks"],
        json!({"checked": 3, "passed": 1, "failed": 2})
    );
    // vLLM's file counts a request as failed when it was not a success.
    let vllm = read_json(&dir.join("vllm.json"));
    assert_eq!(
        (vllm["completed"].as_u64(), vllm["failed"].as_u64()),
        (Some(1), Some(2))
    );
}

#[test]
fn custom_dataset_expected_checks_each_request_by_its_own_line() {
    let server = answer_server();
    let dir = tempdir("expected");
    let data = write(
        &dir,
        "prompts.jsonl",
        concat!(
            "{\"prompt\": \"ask-good\", \"expected\": \"42\"}\n",
            "{\"prompt\": \"ask-wrong-type\", \"expected\": {\"regex\": \"^\\\\{\\\"answer\\\": \\\"[a-z-]+\\\"\\\\}$\"}}\n",
            "{\"prompt\": \"ask-chatty\", \"expected\": {\"regex\": \"^\\\\{\"}}\n",
            "{\"prompt\": \"ask-chatty again\", \"expected\": \"forty\"}\n",
            "{\"prompt\": \"ask-good, unchecked\"}\n",
        ),
    );
    let out = run_in(
        &dir,
        &[
            "--base-url",
            &server.url,
            "--model",
            "m",
            "--dataset-name",
            "custom",
            "--dataset-path",
            &data,
            "--num-prompts",
            "5",
            "--save-detailed",
            "--output-dir",
            "out",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let recs = records(&dir.join("out"));
    assert_eq!(recs.len(), 5);
    let checked = recs.iter().filter(|r| r["answer_checked"] == true).count();
    assert_eq!(
        checked, 4,
        "the line without expected is not checked: {recs:?}"
    );
    let failed: Vec<&Value> = recs.iter().filter(|r| !r["failure"].is_null()).collect();
    assert_eq!(failed.len(), 2, "{recs:?}");
    for r in &failed {
        assert_eq!(kind(r), Some("invalid_output"), "{r}");
        assert_eq!(r["text"], "Sure! {\"answer\": 42}", "{r}");
    }
    let reasons: Vec<&str> = failed.iter().map(|r| message(r)).collect();
    assert!(
        reasons
            .iter()
            .any(|m| m.contains("does not match the expected regex \"^\\\\{\"")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|m| m.contains("does not contain the expected substring \"forty\"")),
        "{reasons:?}"
    );
    let summary = &native(&dir.join("out"))["summary"];
    assert_eq!(
        summary["answer_checks"],
        json!({"checked": 4, "passed": 2, "failed": 2})
    );
}

/// Every answer of the simulator is a run of filler words, each with its leading space.
const SIM_WORDS: &str = "^( [a-z']+)+$";

fn sim_run(dir: &Path, virtual_time: bool, expect: &[&str]) -> Output {
    let mut args = vec![
        "--num-prompts",
        "8",
        "--random-input-len",
        "32",
        "--random-output-len",
        "6",
        "--save-detailed",
        "--output-dir",
        "out",
    ];
    if virtual_time {
        args.push("--virtual-time");
    }
    for re in expect {
        args.extend(["--expect-regex", re]);
    }
    run_in(dir, &args)
}

#[test]
fn a_regex_the_simulators_answers_match_passes_over_http_and_in_virtual_time() {
    for virtual_time in [false, true] {
        let dir = tempdir(&format!("sim-match-{virtual_time}"));
        let out = sim_run(&dir, virtual_time, &[SIM_WORDS]);
        assert!(out.status.success(), "{}", text(&out));
        let recs = records(&dir.join("out"));
        assert_eq!(recs.len(), 8);
        for r in &recs {
            assert!(r["failure"].is_null(), "{r}");
            assert_eq!(r["answer_checked"], true, "{r}");
        }
        let summary = &native(&dir.join("out"))["summary"];
        assert_eq!(
            summary["answer_checks"],
            json!({"checked": 8, "passed": 8, "failed": 0})
        );
    }
}

#[test]
fn a_regex_the_simulators_answers_miss_gives_invalid_output_with_the_reason() {
    for virtual_time in [false, true] {
        let dir = tempdir(&format!("sim-miss-{virtual_time}"));
        let out = sim_run(&dir, virtual_time, &["^SELECT "]);
        // Every request failed its check: the run failed, as when every request fails.
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("8 invalid_output"),
            "{}",
            text(&out)
        );
        let recs = records(&dir.join("out"));
        assert_eq!(recs.len(), 8);
        for r in &recs {
            assert_eq!(kind(r), Some("invalid_output"), "{r}");
            let m = message(r);
            assert!(
                m.starts_with("answer does not match --expect-regex \"^SELECT \"; answer: \" "),
                "{r}"
            );
            assert!(m.len() < 300, "the reason is bounded: {m}");
        }
        let summary = &native(&dir.join("out"))["summary"];
        assert_eq!(summary["completed"], 0);
        assert_eq!(
            summary["answer_checks"],
            json!({"checked": 8, "passed": 0, "failed": 8})
        );
    }
}

#[test]
fn bad_checks_exit_2_before_any_request() {
    let server = answer_server();
    let dir = tempdir("bad");
    let broken = write(&dir, "broken.schema.json", "{ \"type\": ");
    let not_a_schema = write(&dir, "type12.schema.json", "{\"type\": 12}");
    let bad_line = write(
        &dir,
        "bad-expected.jsonl",
        "{\"prompt\": \"ask-good\"}\n{\"prompt\": \"ask-good\", \"expected\": {\"regex\": \"(\"}}\n",
    );
    let target = ["--base-url", server.url.as_str(), "--model", "m"];
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec!["--expect-regex", "(unclosed"],
            vec!["--expect-regex", "(unclosed"],
        ),
        (
            vec!["--expect-json-schema", &broken],
            vec![&broken, "not JSON"],
        ),
        (
            vec!["--expect-json-schema", &not_a_schema],
            vec![&not_a_schema, "not a valid JSON schema"],
        ),
        (
            vec!["--expect-json-schema", "/nonexistent/answer.schema.json"],
            vec!["/nonexistent/answer.schema.json"],
        ),
        (
            vec!["--dataset-name", "custom", "--dataset-path", &bad_line],
            vec!["bad-expected.jsonl:2", "regular expression"],
        ),
    ];
    for (flags, wanted) in cases {
        let mut args = target.to_vec();
        args.extend(["--num-prompts", "2", "--output-dir", "out"]);
        args.extend(&flags);
        let out = run_in(&dir, &args);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        for w in &wanted {
            assert!(err.contains(w), "{flags:?}: missing {w:?} in {err}");
        }
    }
    // The matrix refuses too, before its first row.
    let out = bin()
        .current_dir(&dir)
        .args(["matrix", "--base-url", &server.url, "--model", "m"])
        .args(["--expect-json-schema", &broken, "--results-dir", "r"])
        .output()
        .expect("spawn");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&broken),
        "{}",
        text(&out)
    );
    assert_eq!(
        server.posts.load(Ordering::SeqCst),
        0,
        "no request was sent"
    );
}

#[test]
fn matrix_checks_apply_to_every_row_and_a_row_adds_its_own() {
    let dir = tempdir("matrix");
    let file = dir.join("m.toml");
    std::fs::write(
        &file,
        r#"
title = "checked rows"
[target]
virtual_time = true
[defaults]
num_warmups = 0
[[row]]
id = "plain"
input_len = 32
output_len = 6
num_prompts = 5
[[row]]
id = "strict"
input_len = 32
output_len = 6
num_prompts = 5
flags = ["--expect-regex", "^SELECT "]
"#,
    )
    .expect("write");
    let out = bin()
        .current_dir(&dir)
        .args(["matrix", "--matrix", file.to_str().unwrap_or_default()])
        .args(["--expect-regex", SIM_WORDS, "--results-dir", "r"])
        .output()
        .expect("spawn");
    // A row whose every request failed makes the matrix exit 2; its files are still written.
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let exp_dir = stdout
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("experiment: "))
        .map(|d| dir.join(d))
        .unwrap_or_else(|| panic!("{}", text(&out)));
    let exp = read_json(&exp_dir.join("experiment.json"));
    let summary_of = |id: &str| -> Value {
        let row = exp["rows"]
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["id"] == id))
            .unwrap_or_else(|| panic!("row {id} in {exp}"));
        let run = row["runs"][0].as_str().unwrap_or_default();
        read_json(&exp_dir.join(run))["summary"].clone()
    };
    assert_eq!(
        summary_of("plain")["answer_checks"],
        json!({"checked": 5, "passed": 5, "failed": 0})
    );
    let strict = summary_of("strict");
    assert_eq!(
        strict["answer_checks"],
        json!({"checked": 5, "passed": 0, "failed": 5})
    );
    assert_eq!(strict["failures_by_kind"]["invalid_output"], 5);
    let plan = std::fs::read_to_string(exp_dir.join("plan.toml")).expect("plan.toml");
    assert!(plan.contains("--expect-regex"), "{plan}");
    // The report shows each run's validity rate.
    let html = std::fs::read_to_string(exp_dir.join("report.html")).expect("report.html");
    for rate in [
        "100.0 % (5 of 5 checked answers passed, 0 failed the check)",
        "0.0 % (0 of 5 checked answers passed, 5 failed the check)",
    ] {
        assert!(html.contains(rate), "report.html lacks {rate:?}");
    }
}

fn workspace_root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

#[test]
fn the_readme_virtual_time_regex_example_runs_as_written_and_every_answer_passes() {
    let lines = crate::common::documented_lines();
    let line = lines
        .iter()
        .find(|l| {
            l.starts_with("servebench run --virtual-time --num-prompts 50")
                && l.contains("--expect-regex")
        })
        .expect("the guide's --expect-regex example");
    let words = servebench_sim::args::split_shell_words(line).expect("shell words");
    let dir = tempdir("readme");
    let out = bin()
        .current_dir(&dir)
        .args(&words[1..])
        .args(["--disable-tqdm", "--output-dir", "out"])
        .output()
        .expect("spawn");
    assert!(out.status.success(), "{line}\n{}", text(&out));
    assert_eq!(
        native(&dir.join("out"))["summary"]["answer_checks"],
        json!({"checked": 50, "passed": 50, "failed": 0})
    );
}

#[test]
fn the_example_dataset_and_schema_load() {
    use servebench_answer::{AnswerChecks, Expected};
    let root = workspace_root();
    let mut cfg = servebench_workload::CustomConfig::new(root.join("examples/expected.jsonl"));
    cfg.num_prompts = 0;
    cfg.disable_shuffle = true;
    let got = servebench_workload::sample_custom_checked(
        &cfg,
        &servebench_tokenizer::Tokenizer::builtin(),
    )
    .expect("examples/expected.jsonl");
    assert_eq!(got.requests.len(), 4);
    assert_eq!(got.expected[0], Some(Expected::Substring("Paris".into())));
    assert!(matches!(&got.expected[1], Some(Expected::Regex(_))));
    assert!(got.expected[3].is_none());
    let checks = AnswerChecks::new(&[], &[root.join("examples/answer.schema.json")])
        .expect("examples/answer.schema.json");
    assert!(checks
        .verify("{\"answer\": 42}", got.expected[2].as_ref())
        .is_ok());
    assert!(
        checks.verify(" 42 ", got.expected[1].as_ref()).is_err(),
        "not JSON"
    );
}
