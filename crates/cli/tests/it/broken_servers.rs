//! Servers that misbehave: one that reads and never answers must not keep a run going long
//! after `--request-timeout`, and one whose error bodies and model ids hold terminal escape
//! sequences must not reach the user's terminal raw.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::common::{bin, read_request_head, tempdir, text};

/// Accepts connections and reads them, never writing a byte; connections stay open.
fn silent_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        let mut held: Vec<TcpStream> = Vec::new();
        for conn in listener.incoming() {
            let Ok(sock) = conn else { return };
            held.push(sock);
        }
    });
    format!("http://{addr}")
}

/// The escape sequences a hostile server puts in its text: clear the screen, retitle the
/// window, and a newline that fakes an output line.
const HOSTILE: &str = "\u{1b}[2J\u{1b}]0;pwned\u{7}\nVerdict: VALID";

/// Answers `/v1/models` with a model whose id holds [`HOSTILE`], and every POST with a 500
/// whose OpenAI-style error message holds it too.
fn hostile_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut sock) = conn else { return };
            std::thread::spawn(move || {
                let Some(head) = read_request_head(&mut sock) else {
                    return;
                };
                let hostile = serde_json::to_string(HOSTILE).expect("json");
                let (status, body) = if head.starts_with("GET /v1/models") {
                    (
                        "200 OK",
                        format!(
                            "{{\"object\":\"list\",\"data\":[{{\"id\":{hostile},\"object\":\"model\",\"root\":{hostile}}}]}}"
                        ),
                    )
                } else if head.starts_with("POST") {
                    (
                        "500 Internal Server Error",
                        format!(
                            "{{\"error\":{{\"message\":{hostile},\"type\":\"x\",\"code\":500}}}}"
                        ),
                    )
                } else {
                    ("404 Not Found", String::new())
                };
                let _ = write!(
                    sock,
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    format!("http://{addr}")
}

/// Streams completion chunks to every POST and never stops (it ignores `max_tokens`);
/// answers `/v1/models` with one model.
fn endless_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut sock) = conn else { return };
            std::thread::spawn(move || {
                let Some(head) = read_request_head(&mut sock) else {
                    return;
                };
                if !head.starts_with("POST") {
                    let _ = write!(
                        sock,
                        "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    );
                    return;
                }
                if write!(
                    sock,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                )
                .is_err()
                {
                    return;
                }
                let chunk = "data: {\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":null}]}\n\n";
                let batch = chunk.repeat(64);
                // Until the client hangs up.
                while sock.write_all(batch.as_bytes()).is_ok() {}
            });
        }
    });
    format!("http://{addr}")
}

/// A server that streams without end past `max_tokens`: each request is cut once it
/// carries twice its tokens' worth of events, recorded as an `overlong` failure with a small
/// record, and the run ends well within `--request-timeout` (before, the client grew to 1 GB
/// and wrote a 305 MB record line).
#[test]
fn a_stream_that_never_ends_is_cut_and_recorded_as_a_server_fault() {
    let url = endless_server();
    let dir = tempdir("broken", "endless");
    let started = Instant::now();
    let o = bin()
        .args([
            "run",
            "--base-url",
            &url,
            "--model",
            "m",
            "--num-prompts",
            "4",
            "--random-input-len",
            "16",
            "--random-output-len",
            "16",
            "--request-timeout",
            "20",
            "--output-dir",
            dir.to_str().expect("utf-8"),
        ])
        .output()
        .expect("spawn servebench");
    let took = started.elapsed();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(took < Duration::from_secs(15), "took {took:?}");
    let records = std::fs::read_dir(&dir)
        .expect("dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".requests.jsonl"))
        .expect("records file");
    let body = std::fs::read_to_string(&records).expect("records");
    assert_eq!(body.lines().count(), 4, "every request recorded once");
    for line in body.lines() {
        let r: serde_json::Value = serde_json::from_str(line).expect("json");
        assert_eq!(r["failure"]["kind"], "overlong", "{line:.300}");
        // 16 tokens allowed: at most 2 × 16 + 64 events, and a record to match.
        assert!(line.len() < 64 * 1024, "record of {} bytes", line.len());
    }
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("kept streaming past the request's limit"),
        "{err}"
    );
}

/// A server that never answers: the run ends within `--request-timeout` + 5 s (the probes
/// around the run share one wait, bounded by the timeout), plus a documented allowance of
/// 3 s for a debug build's start-up on a loaded 2-core machine. Before, model discovery
/// waited 30 s whatever the timeout said and the probes after the run waited in turn.
#[test]
fn a_server_that_never_answers_ends_the_run_within_the_request_timeout() {
    let url = silent_server();
    let dir = tempdir("broken", "silent");
    let d = dir.to_str().expect("utf-8");
    for with_model in [true, false] {
        let started = Instant::now();
        let mut cmd = bin();
        cmd.args([
            "run",
            "--base-url",
            &url,
            "--request-timeout",
            "3",
            "--num-prompts",
            "2",
            "--output-dir",
            d,
        ]);
        if with_model {
            cmd.args(["--model", "m"]);
        }
        let o = cmd.output().expect("spawn servebench");
        let took = started.elapsed();
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(
            took < Duration::from_secs(3 + 5 + 3),
            "model given: {with_model}; took {took:?}: {}",
            text(&o)
        );
    }
}

/// Server text is shown with its control characters escaped: the model id in the
/// discovery line and the error body in the failure summary.
#[test]
fn escape_sequences_from_a_server_are_printed_escaped() {
    let url = hostile_server();
    let dir = tempdir("broken", "hostile");
    let o = bin()
        .args([
            "run",
            "--base-url",
            &url,
            "--num-prompts",
            "2",
            "--request-timeout",
            "10",
            "--output-dir",
            dir.to_str().expect("utf-8"),
        ])
        .output()
        .expect("spawn servebench");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    for (name, bytes) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
        assert!(
            !bytes.contains(&0x1b) && !bytes.contains(&0x07),
            "{name} holds a raw escape: {}",
            text(&o)
        );
    }
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("\\x1b[2J"), "shown escaped: {err}");
    assert!(
        !err.lines().any(|l| l.starts_with("Verdict: VALID")),
        "no faked line: {err}"
    );
}

/// Runs `servebench ARGS`, sends it SIGINT once `after` has passed, then waits at most
/// `bound` for it to exit (killing it past that); returns its exit code and how long it took
/// after the signal.
fn interrupt_after(args: &[&str], after: Duration, bound: Duration) -> (Option<i32>, Duration) {
    let mut child = bin()
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn servebench");
    std::thread::sleep(after);
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let signalled = Instant::now();
    loop {
        if let Some(s) = child.try_wait().expect("wait") {
            return (s.code(), signalled.elapsed());
        }
        if signalled.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            return (None, signalled.elapsed());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Ctrl-C works before the first request: while model discovery waits on a server that
/// never answers (before: ignored, then exit 2 when discovery timed out), and while a huge
/// workload is being built (before: ignored even twice; only SIGKILL stopped it). Both end
/// at once with exit 130. Bounds are generous for a loaded 2-core machine.
#[test]
fn ctrl_c_before_the_first_request_ends_the_run_with_130() {
    let url = silent_server();
    let dir = tempdir("broken", "early-ctrl-c");
    let out = dir.to_str().expect("utf-8");
    let discovery = [
        "run",
        "--base-url",
        &url,
        "--request-timeout",
        "60",
        "--num-prompts",
        "2",
        "--output-dir",
        out,
    ];
    let (code, took) = interrupt_after(
        &discovery,
        Duration::from_millis(1500),
        Duration::from_secs(10),
    );
    assert_eq!(code, Some(130), "discovery: exit after {took:?}");

    let build = [
        "run",
        "--virtual-time",
        "--num-prompts",
        "20000000",
        "--random-input-len",
        "2000",
        "--output-dir",
        out,
    ];
    let (code, took) =
        interrupt_after(&build, Duration::from_millis(2500), Duration::from_secs(10));
    assert_eq!(code, Some(130), "workload build: exit after {took:?}");
}

/// Answers every POST with `200` and a complete JSON completion (no stream).
fn non_streaming_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut sock) = conn else { return };
            std::thread::spawn(move || {
                if read_request_head(&mut sock).is_none() {
                    return;
                }
                let body = r#"{"id":"c","object":"text_completion","choices":[{"index":0,"text":" hi","finish_reason":"length"}],"usage":{"prompt_tokens":4,"completion_tokens":1,"total_tokens":5}}"#;
                let _ = write!(
                    sock,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    format!("http://{addr}")
}

/// A server that answers a streamed request with one JSON body is named as not streaming,
/// with its content type and what it sent (before: "an event was cut off").
#[test]
fn a_server_that_does_not_stream_is_named_as_such() {
    let url = non_streaming_server();
    let dir = tempdir("broken", "non-sse");
    let o = bin()
        .args([
            "run",
            "--base-url",
            &url,
            "--model",
            "m",
            "--num-prompts",
            "2",
            "--output-dir",
            dir.to_str().expect("utf-8"),
        ])
        .output()
        .expect("spawn servebench");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("not an event stream") && err.contains("Content-Type application/json"),
        "{err}"
    );
    assert!(err.contains("text_completion"), "quotes the body: {err}");
    assert!(!err.contains("cut off"), "{err}");
}

/// `--http2 on` against a server that speaks only HTTP/1.1: the failure says what happened
/// (before: a bare "broken pipe").
#[test]
fn http2_on_against_an_http1_server_says_why_it_failed() {
    let url = non_streaming_server();
    let dir = tempdir("broken", "h2-on-h1");
    let o = bin()
        .args([
            "run",
            "--base-url",
            &url,
            "--model",
            "m",
            "--http2",
            "on",
            "--num-prompts",
            "1",
            "--request-timeout",
            "10",
            "--output-dir",
            dir.to_str().expect("utf-8"),
        ])
        .output()
        .expect("spawn servebench");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("use --http2 auto or off"), "{err}");
}
