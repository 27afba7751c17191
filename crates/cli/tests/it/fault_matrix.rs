//! The fault matrix: `servebench run` against every way a server can fail — the simulator's
//! fault flags, the scripted test server's faults, a port nobody listens on, a server killed
//! with SIGKILL mid-run and a server that closes its listening socket. Every row checks that
//! each request is accounted for (completed + failed = sent, in the records file and in the
//! result), that each failure has its kind and a message, that the run ends within the
//! request timeout + 5 s, and the exit code docs/failures.md documents (2 when every request failed).

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use servebench_metrics::{read_jsonl_counted, RequestRecord};
use servebench_testserver::{Fault, Script, ScriptedServer, Trigger};

use super::common::{bin, tempdir, text};

/// Short, so a stalled row costs little; every timing bound below is this + [`SLACK`].
const REQUEST_TIMEOUT_S: u64 = 3;
/// A run ends within its request timeout plus this slack: process start, tokenizer load and
/// result writing on a loaded 2-core machine fit in it many times over.
const SLACK: Duration = Duration::from_secs(5);
const PROMPTS: usize = 4;

/// A word-level tokenizer: loads in milliseconds (the built-in one takes seconds in debug).
const TOKENIZER_JSON: &str = r#"{
  "version": "1.0", "truncation": null, "padding": null,
  "added_tokens": [{"id": 0, "content": "[UNK]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
  "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
  "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "the": 1, "time": 2, "of": 3, "river": 4, "stone": 5}, "unk_token": "[UNK]"}
}"#;

/// What a row expects.
struct Expect {
    /// Failures by kind.
    failed: &'static [(&'static str, usize)],
    exit: i32,
}

fn tokenizer(dir: &Path) -> PathBuf {
    let p = dir.join("tokenizer.json");
    std::fs::write(&p, TOKENIZER_JSON).expect("write tokenizer");
    p
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// `servebench run` with the row's target flags; returns its output and wall time.
fn run(dir: &Path, tok: &Path, prompts: usize, target: &[String]) -> (Output, Duration) {
    let started = Instant::now();
    let out = bin()
        .current_dir(dir)
        .args(["run", "--tokenizer"])
        .arg(tok)
        .args(target)
        .args([
            "--num-prompts",
            &prompts.to_string(),
            "--random-input-len",
            "8",
            "--random-output-len",
            "16",
            "--request-timeout",
            &REQUEST_TIMEOUT_S.to_string(),
            "--disable-tqdm",
            "--output-dir",
            "out",
        ])
        .output()
        .expect("spawn servebench run");
    (out, started.elapsed())
}

fn with_suffix(dir: &Path, suffix: &str, out: &Output) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}; {}", dir.display(), text(out)))
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(suffix))
        .unwrap_or_else(|| panic!("no *{suffix} in {}", dir.display()))
}

/// Checks accounting, kinds, messages and the exit code; returns failures by kind.
fn check(row: &str, dir: &Path, out: &Output, prompts: usize) -> BTreeMap<String, usize> {
    let ctx = || format!("row {row}: {}", text(out));
    let records: Vec<RequestRecord> =
        read_jsonl_counted(with_suffix(&dir.join("out"), ".requests.jsonl", out))
            .unwrap_or_else(|e| panic!("{e}; {}", ctx()))
            .records;
    assert_eq!(
        records.len(),
        prompts,
        "every request is a record; {}",
        ctx()
    );
    let mut kinds = BTreeMap::new();
    for r in &records {
        if let Some(f) = &r.failure {
            assert!(!f.message.trim().is_empty(), "{row}: empty message {f:?}");
            *kinds.entry(f.kind.as_str().to_owned()).or_insert(0) += 1;
        }
    }
    let failed: usize = kinds.values().sum();
    let native = super::common::read_json(&with_suffix(&dir.join("out"), ".servebench.json", out));
    let completed = native["summary"]["completed"].as_u64().unwrap_or(u64::MAX) as usize;
    let summary_failed = native["summary"]["failed"].as_u64().unwrap_or(u64::MAX) as usize;
    assert_eq!(summary_failed, failed, "result's failed count; {}", ctx());
    assert_eq!(
        completed + failed,
        prompts,
        "completed + failed = sent; {}",
        ctx()
    );
    kinds
}

fn scripted_row(name: &str, fault: Fault) -> (String, Script) {
    (
        name.to_owned(),
        Script::new().tokens(8).fault(Trigger::Index(1), fault),
    )
}

fn assert_row(row: &str, dir: &Path, out: &Output, wall: Duration, expect: &Expect) {
    let kinds = check(row, dir, out, PROMPTS);
    let want: BTreeMap<String, usize> = expect
        .failed
        .iter()
        .map(|(k, n)| ((*k).to_owned(), *n))
        .collect();
    assert_eq!(kinds, want, "row {row}: failures by kind; {}", text(out));
    assert_eq!(
        out.status.code(),
        Some(expect.exit),
        "row {row}: {}",
        text(out)
    );
    let bound = Duration::from_secs(REQUEST_TIMEOUT_S) + SLACK;
    assert!(wall <= bound, "row {row}: took {wall:?}, bound {bound:?}");
}

#[test]
fn every_fault_kind_is_accounted_for_classified_and_bounded_in_time() {
    let _exclusive = crate::common::exclusive();
    let root = tempdir("faults", "matrix");
    let tok = tokenizer(&root);
    let rt = tokio::runtime::Runtime::new().expect("runtime");

    // (row, script, expectation): the fault hits request index 1 unless the row says otherwise.
    let one = |kind: &'static str| -> &'static [(&'static str, usize)] {
        match kind {
            "" => &[],
            "http_status" => &[("http_status", 1)],
            "truncated" => &[("truncated", 1)],
            "malformed" => &[("malformed", 1)],
            "timeout" => &[("timeout", 1)],
            "stream_error" => &[("stream_error", 1)],
            "empty_output" => &[("empty_output", 1)],
            _ => unreachable!(),
        }
    };
    let body = |status: u16| Fault::HttpStatus {
        status,
        message: format!("scripted {status}"),
    };
    let mut scripted: Vec<(String, Script, Expect)> = Vec::new();
    for status in [429u16, 500, 503] {
        let (n, s) = scripted_row(&format!("http {status} with body"), body(status));
        scripted.push((
            n,
            s,
            Expect {
                failed: one("http_status"),
                exit: 0,
            },
        ));
        let (n, s) = scripted_row(
            &format!("http {status} without body"),
            Fault::BareStatus { status },
        );
        scripted.push((
            n,
            s,
            Expect {
                failed: one("http_status"),
                exit: 0,
            },
        ));
    }
    let rows: [(&str, Fault, &'static str); 9] = [
        ("stream without a token", Fault::Empty, "empty_output"),
        (
            "reset mid-stream",
            Fault::Reset { after_events: 2 },
            "truncated",
        ),
        (
            "malformed JSON chunk",
            Fault::Malformed { at_event: 2 },
            "malformed",
        ),
        (
            "non-UTF-8 bytes",
            Fault::NonUtf8 { at_event: 2 },
            "malformed",
        ),
        ("1 MB chunk", Fault::HugeChunk { bytes: 1 << 20 }, ""),
        ("headers never finish", Fault::HeadersNeverFinish, "timeout"),
        (
            "stall past the request timeout",
            Fault::Stall {
                after_events: 2,
                duration: Duration::from_secs(60),
            },
            "timeout",
        ),
        (
            "no [DONE]",
            Fault::Truncate { after_events: 2 },
            "truncated",
        ),
        (
            "in-stream error",
            Fault::StreamError {
                after_events: 2,
                message: "scripted engine error".into(),
            },
            "stream_error",
        ),
    ];
    for (name, fault, kind) in rows {
        let (n, s) = scripted_row(name, fault);
        scripted.push((
            n,
            s,
            Expect {
                failed: one(kind),
                exit: 0,
            },
        ));
    }
    scripted.push((
        "every request 503".to_owned(),
        Script::new().fault(Trigger::Probability(1.0), body(503)),
        Expect {
            failed: &[("http_status", PROMPTS)],
            exit: 2,
        },
    ));

    let servers: Vec<ScriptedServer> = rt.block_on(async {
        let mut v = Vec::new();
        for (_, s, _) in &scripted {
            v.push(ScriptedServer::start(s.clone()).await.expect("start"));
        }
        v
    });

    // (row, target flags, expectation) for every row; scripted ones point at their server.
    let mut table: Vec<(String, Vec<String>, Expect)> = Vec::new();
    for ((name, _, expect), server) in scripted.into_iter().zip(&servers) {
        let target = vec![
            "--base-url".into(),
            server.base_url(),
            "--model".into(),
            "m".into(),
        ];
        table.push((name, target, expect));
    }
    table.push((
        "connection refused".into(),
        vec![
            "--base-url".into(),
            format!("http://127.0.0.1:{}", free_port()),
            "--model".into(),
            "m".into(),
        ],
        Expect {
            failed: &[("connect", PROMPTS)],
            exit: 2,
        },
    ));
    let tok_s = tok.to_string_lossy().into_owned();
    let sim = |faults: &str| {
        vec![
            "--sim".to_owned(),
            format!("llama-3.1-8b --gpu h100 --tokenizer {tok_s} --seed 1 {faults}"),
        ]
    };
    for (name, faults, kind) in [
        (
            "sim 500",
            "--fault-error-rate 1 --fault-error-status 500",
            "http_status",
        ),
        (
            "sim 429",
            "--fault-error-rate 1 --fault-error-status 429",
            "http_status",
        ),
        ("sim disconnect", "--fault-disconnect-prob 1", "truncated"),
        ("sim malformed", "--fault-malformed-prob 1", "malformed"),
        (
            "sim stall",
            "--fault-stall-prob 1 --fault-stall-ms 60000",
            "timeout",
        ),
    ] {
        let failed: &'static [(&'static str, usize)] = match kind {
            "http_status" => &[("http_status", PROMPTS)],
            "truncated" => &[("truncated", PROMPTS)],
            "malformed" => &[("malformed", PROMPTS)],
            _ => &[("timeout", PROMPTS)],
        };
        table.push((name.into(), sim(faults), Expect { failed, exit: 2 }));
    }

    // Rows run three at a time: enough to keep the matrix short, few enough that a loaded
    // machine still starts each run well inside its bound.
    let mut problems = Vec::new();
    for chunk in table.chunks(3) {
        std::thread::scope(|scope| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|(name, target, expect)| {
                    let dir = root.join(format!(
                        "row-{}",
                        name.replace(|c: char| !c.is_ascii_alphanumeric(), "-")
                    ));
                    std::fs::create_dir_all(&dir).expect("row dir");
                    let tok = tok.clone();
                    scope.spawn(move || {
                        let (out, wall) = run(&dir, &tok, PROMPTS, target);
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            assert_row(name, &dir, &out, wall, expect)
                        }))
                        .err()
                        .map(|e| {
                            e.downcast_ref::<String>()
                                .cloned()
                                .unwrap_or_else(|| format!("row {name} failed"))
                        })
                    })
                })
                .collect();
            for h in handles {
                if let Some(p) = h.join().expect("row thread") {
                    problems.push(p);
                }
            }
        });
    }
    drop(servers);
    let _ = std::fs::remove_dir_all(&root);
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// Waits until `port` accepts a connection (the simulator is up) or `within` passes.
/// Polls the simulator's `/metrics` until it reports a running request.
fn wait_running(port: u16, within: Duration) {
    use std::io::{Read, Write};
    let start = Instant::now();
    loop {
        let running = std::net::TcpStream::connect(("127.0.0.1", port))
            .ok()
            .and_then(|mut c| {
                c.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
                    .ok()?;
                let mut body = String::new();
                c.read_to_string(&mut body).ok()?;
                body.lines()
                    .find(|l| l.starts_with("vllm:num_requests_running"))
                    .and_then(|l| l.rsplit(' ').next())
                    .and_then(|v| v.parse::<f64>().ok())
            })
            .is_some_and(|n| n >= 1.0);
        if running {
            return;
        }
        assert!(
            start.elapsed() < within,
            "the run never got a request running"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_listening(port: u16, within: Duration) {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the simulator did not listen on {port} within {within:?}");
}

#[test]
fn a_server_killed_mid_run_turns_queued_requests_into_connect_failures_at_once() {
    let _exclusive = crate::common::exclusive();
    let dir = tempdir("faults", "killed");
    let tok = tokenizer(&dir);
    let port = free_port();
    let mut server = Command::new(env!("CARGO_BIN_EXE_servebench"))
        .args([
            "sim",
            "llama-3.1-8b",
            "--gpu",
            "h100",
            "--port",
            &port.to_string(),
            "--tokenizer",
        ])
        .arg(&tok)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn servebench sim");
    wait_listening(port, Duration::from_secs(30));
    let prompts = 12;
    let client = bin()
        .current_dir(&dir)
        .args(["run", "--tokenizer"])
        .arg(&tok)
        .args([
            "--base-url",
            &format!("http://127.0.0.1:{port}"),
            "--num-prompts",
            &prompts.to_string(),
            "--max-concurrency",
            "2",
            "--random-input-len",
            "8",
            // About 6 s of decoding per request: the kill always lands mid-run.
            "--random-output-len",
            "800",
            // Far longer than the bound below: waiting for it would fail the test.
            "--request-timeout",
            "120",
            "--disable-tqdm",
            "--output-dir",
            "out",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn servebench run");
    // Kill only once the engine is decoding the run's requests: how long the client takes to
    // start (tokenizer, ready check, warm-up) depends on the machine's load.
    wait_running(port, Duration::from_secs(120));
    server.kill().expect("SIGKILL the simulator");
    let killed = Instant::now();
    let _ = server.wait();
    let out = client.wait_with_output().expect("run output");
    let after_kill = killed.elapsed();
    let kinds = check("killed", &dir, &out, prompts);
    assert!(
        after_kill <= SLACK,
        "the run went on {after_kill:?} after the kill; {}",
        text(&out)
    );
    let connect = kinds.get("connect").copied().unwrap_or(0);
    assert!(
        connect >= prompts - 4,
        "queued requests are connect failures: {kinds:?}"
    );
    assert!(
        // A request sent in the instant of the kill dies before its response starts
        // (`transport`); one already streaming is `truncated`; queued ones are refused.
        kinds
            .keys()
            .all(|k| k == "connect" || k == "truncated" || k == "transport"),
        "in-flight requests are cut, queued ones refused: {kinds:?}"
    );
    let code = if kinds.values().sum::<usize>() == prompts {
        2
    } else {
        0
    };
    assert_eq!(out.status.code(), Some(code), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_server_that_closes_its_listener_refuses_queued_requests_at_once() {
    let _exclusive = crate::common::exclusive();
    let dir = tempdir("faults", "unlisten");
    let tok = tokenizer(&dir);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let server = rt
        .block_on(ScriptedServer::start(
            Script::new()
                .tokens(10)
                .inter_token_interval(Duration::from_millis(300)),
        ))
        .expect("start");
    let url = server.base_url();
    let started = server.started();
    let prompts = 8;
    let child = bin()
        .current_dir(&dir)
        .args(["run", "--model", "m", "--tokenizer"])
        .arg(&tok)
        .args([
            "--base-url",
            &url,
            "--num-prompts",
            &prompts.to_string(),
            "--max-concurrency",
            "2",
            "--random-input-len",
            "8",
            "--random-output-len",
            "10",
            "--request-timeout",
            "120",
            // No ready-check request: its connection would sit idle in the pool from before the
            // close and could carry a later request (answered, as a live connection is).
            "--ready-check-timeout-sec",
            "0",
            "--disable-tqdm",
            "--output-dir",
            "out",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn servebench run");
    // Close in the middle of the second pair of responses, 1 s into their 3 s, far from
    // any moment a connection is between requests.
    let first = rt.block_on(server.wait_for_log(1, Duration::from_secs(60)));
    assert!(!first.is_empty(), "no request reached the server");
    std::thread::sleep(Duration::from_secs(1));
    server.close_listener();
    let closed = Instant::now();
    let out = child.wait_with_output().expect("run output");
    let after_close = closed.elapsed();
    let kinds = check("unlisten", &dir, &out, prompts);
    assert!(
        after_close <= SLACK,
        "the run went on {after_close:?} after the close; {}",
        text(&out)
    );
    // The server answered only requests that arrived before its listener closed; every
    // other request was refused at once.
    let log = rt.block_on(server.shutdown());
    let close_ns = u64::try_from(closed.duration_since(started).as_nanos()).unwrap_or(u64::MAX);
    let late: Vec<_> = log.iter().filter(|r| r.arrival_ns > close_ns).collect();
    assert!(late.is_empty(), "served after the close: {late:?}");
    assert!(
        log.len() < prompts,
        "the close landed mid-run: {} served",
        log.len()
    );
    assert!(
        kinds.keys().all(|k| k == "connect"),
        "{kinds:?}; {}",
        text(&out)
    );
    assert_eq!(
        kinds.get("connect").copied().unwrap_or(0),
        prompts - log.len(),
        "{}",
        text(&out)
    );
    let all_failed = kinds.values().sum::<usize>() == prompts;
    let code = if all_failed { 2 } else { 0 };
    assert_eq!(out.status.code(), Some(code), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&dir);
}
