//! Trust in what a run sends and writes: outputs are checked before the first request,
//! credentials in URLs never reach a file or a message, errors name their cause once, and a
//! records file alone rebuilds a run's results.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::common::{bin, read_json, servebench, tempdir, text};

const STREAM: &str = concat!(
    "data: {\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" b\",\"finish_reason\":\"length\"}]}\n\n",
    "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2,\"total_tokens\":6}}\n\n",
    "data: [DONE]\n\n",
);

/// What the tiny server saw.
#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    authorization: Mutex<Vec<String>>,
}

/// A one-thread-per-connection HTTP server: POSTs get a short completion stream, anything
/// else a 404; every connection is closed after one answer.
fn tiny_server() -> (String, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(Seen::default());
    let s = Arc::clone(&seen);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut sock) = conn else { return };
            s.connections.fetch_add(1, Ordering::SeqCst);
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                let mut got = Vec::new();
                let mut buf = [0u8; 8192];
                let head = loop {
                    let n = sock.read(&mut buf).unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                    let t = String::from_utf8_lossy(&got).into_owned();
                    if let Some(h) = t.find("\r\n\r\n") {
                        break t[..h].to_owned();
                    }
                };
                for line in head.lines() {
                    if let Some(v) = line
                        .to_ascii_lowercase()
                        .strip_prefix("authorization:")
                        .map(|_| line["authorization:".len()..].trim().to_owned())
                    {
                        if let Ok(mut a) = s.authorization.lock() {
                            a.push(v);
                        }
                    }
                }
                let answer = if head.starts_with("POST") {
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n{STREAM}"
                    )
                } else {
                    "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        .to_owned()
                };
                let _ = sock.write_all(answer.as_bytes());
            });
        }
    });
    (format!("127.0.0.1:{}", addr.port()), seen)
}

/// Every file under `dir` (recursively), read as text and joined.
fn all_files(dir: &Path) -> String {
    let mut out = String::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.push_str(&all_files(&p));
            } else {
                out.push_str(&std::fs::read_to_string(&p).unwrap_or_default());
            }
        }
    }
    out
}

fn run_args<'a>(base_url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "run",
        "--base-url",
        base_url,
        "--model",
        "m",
        "--num-prompts",
        "3",
        "--random-input-len",
        "8",
        "--random-output-len",
        "2",
        "--disable-tqdm",
    ];
    a.extend_from_slice(extra);
    a
}

#[test]
fn an_unwritable_output_dir_fails_before_any_request_is_sent() {
    let dir = tempdir("trust", "unwritable");
    let (addr, seen) = tiny_server();
    let url = format!("http://{addr}");
    let file = dir.join("plain");
    std::fs::write(&file, b"").expect("file");
    let under_file = file.join("out");
    let under_file = under_file.to_string_lossy().into_owned();
    for extra in [
        vec!["--output-dir", under_file.as_str()],
        vec!["--save-result", "--result-dir", "/proc/x"],
    ] {
        let out = bin()
            .current_dir(&dir)
            .args(run_args(&url, &extra))
            .output()
            .expect("spawn");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(
            stderr.contains(extra[extra.len() - 1])
                && (stderr.contains("Not a directory") || stderr.contains("No such file")),
            "the path and the reason: {stderr}"
        );
    }
    assert_eq!(
        seen.connections.load(Ordering::SeqCst),
        0,
        "nothing was sent"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn credentials_in_the_base_url_authenticate_but_never_reach_an_output() {
    let dir = tempdir("trust", "credentials");
    let (addr, seen) = tiny_server();
    let url = format!("http://user:sk-SECRET@{addr}");
    let out = bin()
        .current_dir(&dir)
        .args(run_args(
            &url,
            &[
                "--save-result",
                "--result-filename",
                "v.json",
                "--output-dir",
                "o",
            ],
        ))
        .output()
        .expect("spawn");
    assert!(out.status.success(), "{}", text(&out));
    assert!(dir.join("v.json").exists(), "{}", text(&out));
    let all = String::from_utf8_lossy(&out.stdout).into_owned()
        + &String::from_utf8_lossy(&out.stderr)
        + &all_files(&dir);
    assert!(!all.contains("sk-SECRET"), "the secret leaked");
    let native = std::fs::read_dir(dir.join("o"))
        .expect("output dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".servebench.json"))
        .expect("native result");
    let v = read_json(&native);
    assert_eq!(
        v["metadata"]["target"]["base_url"],
        format!("http://***@{addr}"),
        "{v}"
    );
    // curl -u user:sk-SECRET sends the same header.
    let auth = seen.authorization.lock().expect("lock").clone();
    assert!(!auth.is_empty(), "the requests carried credentials");
    assert!(
        auth.iter().all(|a| a == "Basic dXNlcjpzay1TRUNSRVQ="),
        "{auth:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_io_error_prints_its_cause_once() {
    let out = servebench(&[
        "run",
        "--virtual-time",
        "--dataset-name",
        "sharegpt",
        "--dataset-path",
        "/nonexistent/servebench-data.json",
        "--num-prompts",
        "3",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert_eq!(stderr.matches("os error 2").count(), 1, "{stderr}");
}

#[test]
fn report_rebuilds_a_run_from_a_records_file_cut_mid_line() {
    let dir = tempdir("trust", "rebuild");
    let out = bin()
        .current_dir(&dir)
        .args([
            "run",
            "--virtual-time",
            "--num-prompts",
            "20",
            "--random-input-len",
            "16",
            "--random-output-len",
            "4",
            "--output-dir",
            "o",
        ])
        .output()
        .expect("spawn");
    assert!(out.status.success(), "{}", text(&out));
    let jsonl = std::fs::read_dir(dir.join("o"))
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".requests.jsonl"))
        .expect("records");
    // A run killed mid-write: 12 whole records and half of the 13th, no summary.
    let text_in = std::fs::read_to_string(&jsonl).expect("records");
    let lines: Vec<&str> = text_in.lines().collect();
    let mut cut = lines[..12].join("\n");
    cut.push('\n');
    cut.push_str(&lines[12][..lines[12].len() / 2]);
    let cut_path = dir.join("killed.requests.jsonl");
    std::fs::write(&cut_path, cut).expect("write");

    let out = servebench(&[
        "report",
        cut_path.to_str().expect("utf-8 path"),
        "--print",
        "table",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("INTERRUPTED"),
        "{}",
        text(&out)
    );
    let native = read_json(&dir.join("killed.rebuilt.servebench.json"));
    assert_eq!(native["interrupted"], true);
    assert!(native["interrupted_reason"]
        .as_str()
        .is_some_and(|r| r.contains("cut off")));
    assert_eq!(native["summary"]["completed"], 12);
    let vllm = read_json(&dir.join("killed.rebuilt.json"));
    assert_eq!(vllm["completed"], 12);
    let html = std::fs::read_to_string(dir.join("killed.rebuilt.report.html")).expect("html");
    assert!(html.contains("INTERRUPTED"));
    let _ = std::fs::remove_dir_all(&dir);
}
