//! Reasoning and tool-call streams end to end: the simulator acting as a reasoning model
//! (`--reasoning-tokens`, `--reasoning-fraction`) in virtual and real time, and a stand-in
//! server streaming `tool_calls` deltas. TTFT stays the first token of any kind; time to first
//! answer token (TTFAT) waits for `content` or `tool_calls`.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde_json::Value;
use servebench_metrics::{CountSource, RequestRecord};

use crate::common::{bin, read_json, tempdir, text};

fn run_in(dir: &Path, args: &[&str]) -> Output {
    bin()
        .current_dir(dir)
        .arg("run")
        .args(args)
        .output()
        .expect("spawn servebench")
}

fn only_file(dir: &Path, suffix: &str) -> PathBuf {
    let v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    assert_eq!(v.len(), 1, "{suffix} files in {}: {v:?}", dir.display());
    v[0].clone()
}

/// A chat run of `prompts` requests, one at a time, `output` tokens each, into `dir/out`;
/// returns the native summary and the records.
fn chat_run(
    dir: &Path,
    sim: &str,
    virtual_time: bool,
    prompts: u32,
    output: u32,
) -> (Value, Vec<RequestRecord>) {
    let (p, o) = (prompts.to_string(), output.to_string());
    let mut args = vec![
        "--sim",
        sim,
        "--backend",
        "openai-chat",
        "--endpoint",
        "/v1/chat/completions",
        "--num-prompts",
        &p,
        "--max-concurrency",
        "1",
        "--random-input-len",
        "32",
        "--random-output-len",
        &o,
        "--ignore-eos",
        "--disable-tqdm",
        "--output-dir",
        "out",
    ];
    if virtual_time {
        args.push("--virtual-time");
    }
    let out = run_in(dir, &args);
    assert!(out.status.success(), "{}", text(&out));
    let native = read_json(&only_file(&dir.join("out"), ".servebench.json"));
    let records = read_records(&dir.join("out"));
    (native["summary"].clone(), records)
}

fn read_records(dir: &Path) -> Vec<RequestRecord> {
    let path = only_file(dir, ".requests.jsonl");
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Mean gap between the record's successive tokens, ns.
fn mean_itl_ns(r: &RequestRecord) -> f64 {
    let gaps: Vec<u64> = r.itls_ns().collect();
    gaps.iter().sum::<u64>() as f64 / gaps.len() as f64
}

/// In virtual time each request runs alone, so its 64 reasoning tokens take 64 decode steps:
/// TTFAT − TTFT = 64 × the step time, exact within one step (the step time grows a little
/// with the context, so the check is against the request's own mean step).
#[test]
fn virtual_reasoning_tokens_delay_the_first_answer_by_their_steps() {
    let dir = tempdir("reasoning", "virtual-tokens");
    let (s, records) = chat_run(
        &dir,
        "llama-3.1-8b --jitter-sigma 0 --reasoning-tokens 64",
        true,
        4,
        128,
    );
    assert_eq!(records.len(), 4);
    for r in &records {
        assert!(r.is_success(), "{r:?}");
        assert_eq!(r.output_tokens, 128);
        let split = r.output_split.unwrap();
        assert_eq!(split.reasoning_tokens, 64);
        assert_eq!(split.reasoning_source, CountSource::Usage);
        assert_eq!(r.answer_tokens(), 64);
        let gap = (r.ttfat_ns().unwrap() - r.ttft_ns().unwrap()) as f64;
        let step = mean_itl_ns(r);
        assert!(
            (gap - 64.0 * step).abs() < step / 2.0,
            "TTFAT - TTFT = {gap} ns, 64 steps of {step} ns"
        );
    }
    let reasoning = &s["reasoning"];
    assert_eq!(reasoning["reasoning_tokens"], 256);
    assert_eq!(reasoning["answer_tokens"], 256);
    assert_eq!(f(&reasoning["reasoning_share"]), 0.5);
    assert_eq!(reasoning["ttfat"]["n"], 4);
    let gap_ms = f(&reasoning["ttfat"]["mean"]) - f(&s["ttft"]["mean"]);
    let step_ms = f(&s["itl"]["mean"]);
    assert!(
        (gap_ms - 64.0 * step_ms).abs() < step_ms / 2.0,
        "mean TTFAT - TTFT = {gap_ms} ms, step {step_ms} ms"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn virtual_reasoning_fraction_splits_each_output_as_stated() {
    let dir = tempdir("reasoning", "virtual-fraction");
    let (s, records) = chat_run(
        &dir,
        "llama-3.1-8b --jitter-sigma 0 --reasoning-fraction 0.25",
        true,
        3,
        40,
    );
    for r in &records {
        assert_eq!((r.output_tokens, r.reasoning_tokens()), (40, 10), "{r:?}");
        // The first answer token is the 11th token.
        assert_eq!(r.first_answer_at(), Some(r.events[10].t));
    }
    assert_eq!(f(&s["reasoning"]["reasoning_share"]), 0.25);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An ordinary chat run prints and writes as before: no reasoning lines, no split fields.
#[test]
fn plain_runs_show_no_reasoning() {
    let dir = tempdir("reasoning", "plain");
    let out = run_in(
        &dir,
        &[
            "--virtual-time",
            "--backend",
            "openai-chat",
            "--endpoint",
            "/v1/chat/completions",
            "--num-prompts",
            "2",
            "--random-input-len",
            "16",
            "--random-output-len",
            "8",
            "--disable-tqdm",
            "--output-dir",
            "out",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("TTFAT") && !stdout.contains("Reasoning"),
        "{stdout}"
    );
    let native = read_json(&only_file(&dir.join("out"), ".servebench.json"));
    assert!(native["summary"].get("reasoning").is_none());
    let jsonl = std::fs::read_to_string(only_file(&dir.join("out"), ".requests.jsonl")).unwrap();
    assert!(!jsonl.contains("output_split"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Real time against the simulator over HTTP: the reasoning deltas arrive first, so TTFAT −
/// TTFT is about 16 decode steps. Generous bounds (between 8 and 32 of the request's own
/// mean steps): a loaded 2-core machine delays single chunks, never the count of steps.
#[test]
fn real_time_reasoning_stream_counts_and_times_the_answer() {
    let _exclusive = crate::common::exclusive();
    let dir = tempdir("reasoning", "real-time");
    let (s, records) = chat_run(
        &dir,
        "llama-3.1-8b --jitter-sigma 0 --reasoning-tokens 16",
        false,
        3,
        48,
    );
    assert_eq!(records.len(), 3);
    for r in &records {
        assert!(r.is_success(), "{r:?}");
        assert_eq!(r.output_source, CountSource::Usage);
        assert_eq!(r.output_tokens, 48);
        let split = r.output_split.unwrap();
        assert_eq!(split.reasoning_tokens, 16);
        assert_eq!(split.reasoning_source, CountSource::Usage);
        assert!(!split.tool_calls);
        let gap = (r.ttfat_ns().unwrap() - r.ttft_ns().unwrap()) as f64;
        let step = mean_itl_ns(r);
        assert!(
            gap > 8.0 * step && gap < 32.0 * step,
            "TTFAT - TTFT = {gap} ns, step {step} ns"
        );
    }
    assert_eq!(s["reasoning"]["reasoning_tokens"], 48);
    assert_eq!(s["reasoning"]["answer_tokens"], 96);
    let _ = std::fs::remove_dir_all(&dir);
}

/// One answer of the tool-calling stand-in: the role chunk, then `calls` tool-call deltas
/// `gap` apart, the closing chunk, usage and `[DONE]`.
fn tool_stream(calls: u32, gap: Duration, out: &mut impl Write) -> std::io::Result<()> {
    let head =
        r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":"#;
    let mut event = |choices: &str, extra: &str| -> std::io::Result<()> {
        write!(out, "data: {head}{choices}{extra}}}\n\n")?;
        out.flush()
    };
    event(
        r#"[{"index":0,"delta":{"role":"assistant","content":null},"finish_reason":null}]"#,
        "",
    )?;
    std::thread::sleep(gap);
    event(
        r#"[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]"#,
        "",
    )?;
    for i in 1..calls {
        std::thread::sleep(gap);
        let arg = if i == 1 {
            r#"{\"city\":"#
        } else {
            r#" \"Paris\"}"#
        };
        event(
            &format!(
                r#"[{{"index":0,"delta":{{"tool_calls":[{{"index":0,"function":{{"arguments":"{arg}"}}}}]}},"finish_reason":null}}]"#
            ),
            "",
        )?;
    }
    event(
        r#"[{"index":0,"delta":{},"finish_reason":"tool_calls"}]"#,
        "",
    )?;
    event(
        "[]",
        &format!(
            r#","usage":{{"prompt_tokens":12,"completion_tokens":{calls},"total_tokens":{}}}"#,
            12 + calls
        ),
    )?;
    out.write_all(b"data: [DONE]\n\n")?;
    out.flush()
}

/// Serves each connection one request: chat completions get the tool-call stream, anything
/// else a 404. `Connection: close` keeps the stand-in free of keep-alive bookkeeping.
fn serve_tool_calls(listener: TcpListener, calls: u32, gap: Duration) {
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { return };
        std::thread::spawn(move || {
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                return;
            }
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                    break;
                }
                if let Some((k, v)) = line.split_once(':') {
                    if k.eq_ignore_ascii_case("content-length") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            if request_line.starts_with("POST /v1/chat/completions") {
                let _ = conn.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
                );
                let _ = tool_stream(calls, gap, &mut conn);
            } else {
                let _ = conn.write_all(
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
            }
        });
    }
}

/// Tool-call deltas are token-bearing answer output: TTFT and the first answer are the first
/// tool-call delta (not the role chunk), every delta is a token, and the record says the
/// stream carried tool calls.
#[test]
fn tool_call_streams_count_as_answer_tokens() {
    let _exclusive = crate::common::exclusive();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let gap = Duration::from_millis(40);
    std::thread::spawn(move || serve_tool_calls(listener, 3, gap));
    let dir = tempdir("reasoning", "tool-calls");
    let out = run_in(
        &dir,
        &[
            "--base-url",
            &url,
            "--backend",
            "openai-chat",
            "--endpoint",
            "/v1/chat/completions",
            "--model",
            "m",
            "--num-prompts",
            "2",
            "--max-concurrency",
            "1",
            "--random-input-len",
            "8",
            "--random-output-len",
            "3",
            "--disable-tqdm",
            "--output-dir",
            "out",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let records = read_records(&dir.join("out"));
    assert_eq!(records.len(), 2);
    for r in &records {
        assert!(r.is_success(), "{r:?}");
        assert_eq!(r.events.len(), 3, "{r:?}");
        assert_eq!(r.output_tokens, 3);
        assert_eq!(r.bare_events.len(), 2, "role and closing chunks: {r:?}");
        // The first token is the first tool-call delta, a gap after the role chunk.
        assert_eq!(r.first_token, Some(r.events[0].t));
        assert!(r.events[0].t > r.bare_events[0]);
        let split = r.output_split.unwrap();
        assert!(split.tool_calls);
        assert_eq!(split.reasoning_tokens, 0);
        assert_eq!(r.ttfat_ns(), r.ttft_ns());
        assert_eq!(r.answer_tokens(), 3);
    }
    let native = read_json(&only_file(&dir.join("out"), ".servebench.json"));
    let reasoning = &native["summary"]["reasoning"];
    assert_eq!(reasoning["requests_with_tool_calls"], 2);
    assert_eq!(reasoning["reasoning_share"].as_f64(), Some(0.0));
    let _ = std::fs::remove_dir_all(&dir);
}
