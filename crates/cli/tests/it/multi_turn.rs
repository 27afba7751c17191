//! `servebench run --multi-turn`: conversations whose turns carry the history the server
//! actually returned, against a tiny echo server that keeps every request body, and against
//! the simulator, whose prefix cache should serve each turn's history.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::common::{self, bin, ok, read_json, text};

fn tempdir(name: &str) -> PathBuf {
    common::tempdir("multi-turn", name)
}

/// Request bodies the echo server received, in arrival order.
type Bodies = Arc<Mutex<Vec<Value>>>;

/// A chat server on 127.0.0.1:0 that answers each request with `echo:<last user message> ok`
/// streamed in two content chunks (so the client must concatenate them), and with HTTP 500
/// when the last user message contains `FAIL`. Every GET is a 404.
fn echo_server() -> (String, Bodies) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let bodies: Bodies = Arc::default();
    let kept = Arc::clone(&bodies);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let kept = Arc::clone(&kept);
            std::thread::spawn(move || {
                let _ = answer(stream, &kept);
            });
        }
    });
    (format!("http://{addr}"), bodies)
}

fn answer(stream: TcpStream, bodies: &Bodies) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        if line.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    let mut out = stream;
    if !request_line.starts_with("POST") {
        return out.write_all(
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        );
    }
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let last = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    bodies.lock().expect("bodies").push(body);
    if last.contains("FAIL") {
        let msg =
            br#"{"error":{"message":"scripted failure","type":"InternalServerError","code":500}}"#;
        let head = format!(
            "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            msg.len()
        );
        out.write_all(head.as_bytes())?;
        return out.write_all(msg);
    }
    let chunk = |delta: Value, finish: Value| {
        serde_json::json!({"id": "c", "object": "chat.completion.chunk", "created": 1,
            "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let events = [
        chunk(
            serde_json::json!({"role": "assistant", "content": ""}),
            Value::Null,
        ),
        chunk(
            serde_json::json!({"content": format!("echo:{last}")}),
            Value::Null,
        ),
        chunk(serde_json::json!({"content": " ok"}), Value::Null),
        chunk(serde_json::json!({}), Value::from("stop")),
        serde_json::json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}}),
    ];
    let mut sse = String::new();
    for e in &events {
        sse.push_str(&format!("data: {e}\n\n"));
    }
    sse.push_str("data: [DONE]\n\n");
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
    out.write_all(head.as_bytes())?;
    out.write_all(sse.as_bytes())
}

fn records(dir: &Path) -> Vec<Value> {
    let path = std::fs::read_dir(dir)
        .expect("output dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".requests.jsonl"))
        .expect("a records file");
    std::fs::read_to_string(&path)
        .expect("records")
        .lines()
        .map(|l| serde_json::from_str(l).expect("record"))
        .collect()
}

fn native(dir: &Path) -> Value {
    let path = std::fs::read_dir(dir)
        .expect("output dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".servebench.json"))
        .expect("a result file");
    read_json(&path)
}

fn of_session<'a>(records: &'a [Value], id: &str) -> Vec<&'a Value> {
    let mut v: Vec<&Value> = records.iter().filter(|r| r["session_id"] == id).collect();
    v.sort_by_key(|r| r["turn"].as_u64());
    v
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn each_turn_sends_the_returned_answers_and_a_failed_turn_ends_only_its_session() {
    let dir = tempdir("echo");
    let (base_url, bodies) = echo_server();
    let sessions = dir.join("sessions.jsonl");
    std::fs::write(
        &sessions,
        concat!(
            r#"{"session_id": "calm", "turns": [{"prompt": "first"}, {"prompt": "second"}, {"prompt": "third", "think_time_ms": 50}]}"#,
            "\n",
            r#"{"session_id": "doomed", "turns": [{"prompt": "hello"}, {"prompt": "FAIL now"}, {"prompt": "never sent"}]}"#,
            "\n"
        ),
    )
    .expect("sessions file");
    let out_dir = dir.join("out");
    let out = bin()
        .current_dir(&dir)
        .args([
            "run",
            "--disable-tqdm",
            "--base-url",
            &base_url,
            "--model",
            "m",
        ])
        .args([
            "--backend",
            "openai-chat",
            "--multi-turn",
            "--dataset-name",
            "custom",
        ])
        .args(["--dataset-path", sessions.to_str().expect("utf-8")])
        .args([
            "--disable-shuffle",
            "--num-prompts",
            "2",
            "--max-concurrency",
            "1",
        ])
        .args([
            "--think-time-ms",
            "200",
            "--output-dir",
            out_dir.to_str().expect("utf-8"),
        ])
        .output()
        .expect("spawn servebench");
    ok(&out);

    // Turn k carries every earlier user turn and, exactly, the text streamed back for each.
    let bodies = bodies.lock().expect("bodies").clone();
    let third = bodies
        .iter()
        .find(|b| b["messages"].as_array().is_some_and(|m| m.len() == 5))
        .unwrap_or_else(|| panic!("no third turn among {bodies:?}"));
    let history: Vec<(&str, &str)> = third["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or(""),
                m["content"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        history,
        [
            ("user", "first"),
            ("assistant", "echo:first ok"),
            ("user", "second"),
            ("assistant", "echo:second ok"),
            ("user", "third"),
        ]
    );
    // Nothing after the failed turn was ever sent.
    assert!(
        bodies.iter().all(|b| !b.to_string().contains("never sent")),
        "{bodies:?}"
    );
    assert_eq!(bodies.len(), 5, "{bodies:?}");

    let recs = records(&out_dir);
    let calm = of_session(&recs, "calm");
    let doomed = of_session(&recs, "doomed");
    assert_eq!(calm.len(), 3, "{recs:?}");
    assert!(calm.iter().all(|r| r.get("failure").is_none()), "{calm:?}");
    assert_eq!(doomed.len(), 2, "{recs:?}");
    assert_eq!(doomed[1]["failure"]["status"], 500, "{:?}", doomed[1]);
    assert_eq!(doomed[1]["turn"], 1);
    // Think time: a turn is due when the previous answer ended plus its think time (the
    // session's own value wins over --think-time-ms), and is not sent before.
    assert_eq!(u(&calm[1]["intended"]), u(&calm[0]["done"]) + 200_000_000);
    assert_eq!(u(&calm[2]["intended"]), u(&calm[1]["done"]) + 50_000_000);
    for r in &calm {
        assert!(u(&r["sent"]) >= u(&r["intended"]), "{r}");
    }
    // One active session at a time: the second starts after the first has ended.
    let (a, b) = if u(&calm[0]["sent"]) < u(&doomed[0]["sent"]) {
        (&calm, &doomed)
    } else {
        (&doomed, &calm)
    };
    let a_end = a.iter().map(|r| u(&r["done"])).max().unwrap_or(0);
    assert!(u(&b[0]["sent"]) >= a_end, "sessions overlapped: {recs:?}");
    assert_eq!(b[0]["waited_for_slot"], true);

    let result = native(&out_dir);
    let by_turn = result["by_turn"].as_array().expect("by_turn");
    assert_eq!(by_turn.len(), 3, "{by_turn:?}");
    assert_eq!(
        (
            by_turn[1]["completed"].clone(),
            by_turn[1]["failed"].clone()
        ),
        (1.into(), 1.into())
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn later_turns_hit_the_prefix_cache_with_a_growing_prompt() {
    let _one_at_a_time = common::exclusive();
    let dir = tempdir("cache");
    // ShareGPT conversations: a long opening question, then short follow-ups. Each later
    // turn re-sends the history, which the simulator's prefix cache already holds.
    let long = "please consider the following long description of the problem ".repeat(200);
    let conversation = |i: usize| {
        serde_json::json!({"id": format!("c{i}"), "conversations": [
            {"from": "human", "value": format!("{i} {long}")},
            {"from": "gpt", "value": "one two three four five six seven eight"},
            {"from": "human", "value": "and what follows from that"},
            {"from": "gpt", "value": "one two three four five six seven eight"},
            {"from": "human", "value": "summarise it in a line"},
            {"from": "gpt", "value": "one two three four five six seven eight"},
        ]})
    };
    let data = dir.join("sharegpt.json");
    std::fs::write(
        &data,
        serde_json::to_string(&(0..4).map(conversation).collect::<Vec<_>>()).expect("json"),
    )
    .expect("dataset");
    let out_dir = dir.join("out");
    let out = bin()
        .current_dir(&dir)
        .args([
            "run",
            "--disable-tqdm",
            "--backend",
            "openai-chat",
            "--multi-turn",
        ])
        .args([
            "--dataset-name",
            "sharegpt",
            "--dataset-path",
            data.to_str().expect("utf-8"),
        ])
        .args(["--num-prompts", "4", "--max-concurrency", "1"])
        .args(["--output-dir", out_dir.to_str().expect("utf-8")])
        .output()
        .expect("spawn servebench");
    let stdout = ok(&out);
    assert!(stdout.contains("By turn"), "{}", text(&out));
    let result = native(&out_dir);
    let by_turn = result["by_turn"].as_array().expect("by_turn");
    assert_eq!(by_turn.len(), 3, "{by_turn:?}");
    let f = |t: &Value, k: &str| t[k].as_f64().unwrap_or_else(|| panic!("{k} in {t}"));
    for w in by_turn.windows(2) {
        assert!(
            f(&w[1], "prompt_tokens_mean") > f(&w[0], "prompt_tokens_mean"),
            "{by_turn:?}"
        );
        assert!(
            f(&w[1], "cached_tokens_mean") > f(&w[0], "cached_tokens_mean"),
            "{by_turn:?}"
        );
    }
    assert_eq!(f(&by_turn[0], "cached_tokens_mean"), 0.0, "{by_turn:?}");
    // The opening prefill is ~2,000 tokens; later turns prefill only their new tokens. The
    // bound is generous for a loaded machine: the simulator's own cost model gives ~10×.
    assert!(
        f(&by_turn[1], "ttft_p50_ms") < 0.5 * f(&by_turn[0], "ttft_p50_ms"),
        "{by_turn:?}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn multi_turn_refusals_say_what_to_do() {
    let dir = tempdir("refusals");
    let sessions = dir.join("s.jsonl");
    std::fs::write(
        &sessions,
        "{\"session_id\": \"fine\", \"turns\": [{\"prompt\": \"p\"}]}\n{\"session_id\": \"hollow\", \"turns\": []}\n",
    )
    .expect("file");
    let path = sessions.to_str().expect("utf-8");
    let custom = ["--dataset-name", "custom", "--dataset-path", path];
    let refused = |args: &[&str], needle: &str| {
        let out = bin()
            .current_dir(&dir)
            .args(["run", "--disable-tqdm", "--multi-turn"])
            .args(args)
            .output()
            .expect("spawn servebench");
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "wanted {needle:?}: {}", text(&out));
    };
    refused(&custom, "use --backend openai-chat");
    refused(
        &[&["--backend", "vllm"][..], &custom].concat(),
        "use --backend openai-chat",
    );
    refused(
        &["--backend", "openai-chat", "--dataset-name", "random"],
        "sharegpt or custom",
    );
    let line = format!("{path}:2");
    refused(
        &[&["--backend", "openai-chat"][..], &custom].concat(),
        &line,
    );
    refused(
        &[&["--backend", "openai-chat"][..], &custom].concat(),
        "session \"hollow\" has an empty turn list",
    );
    std::fs::remove_dir_all(dir).ok();
}

/// The guide's local multi-turn examples (the example session file, against the simulator
/// servebench starts, in real and in virtual time) run as written.
#[test]
fn readme_multi_turn_examples_run_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let documented = crate::common::documented_lines();
    let lines: Vec<&String> = documented
        .iter()
        .filter(|l| l.starts_with("servebench run --backend openai-chat --multi-turn"))
        .filter(|l| l.contains("examples/multi-turn-sessions.jsonl"))
        .collect();
    assert_eq!(lines.len(), 2, "the guide's local multi-turn examples");
    for (i, line) in lines.iter().enumerate() {
        let dir = tempdir(&format!("readme-{i}"));
        let out = bin()
            .current_dir(&root)
            .args(line.split_whitespace().skip(1))
            .args([
                "--disable-tqdm",
                "--output-dir",
                dir.to_str().expect("utf-8"),
            ])
            .output()
            .expect("spawn servebench");
        ok(&out);
        let recs = records(&dir);
        let sessions: std::collections::BTreeSet<&str> = recs
            .iter()
            .filter_map(|r| r["session_id"].as_str())
            .collect();
        assert_eq!(sessions.len(), 3, "{line}: {recs:?}");
        assert_eq!(
            recs.len(),
            9,
            "{line}: every turn of the three example sessions"
        );
        std::fs::remove_dir_all(dir).ok();
    }
}

/// In virtual time the history is token ids: turn k's prompt is turn k−1's prompt, the ids
/// generated for it and the turn's own text, so its length is exact, the engine's prefix
/// cache serves the history, and a turn is due exactly at the previous end plus think time.
#[test]
fn virtual_time_conversations_grow_exactly_and_hit_the_cache() {
    let dir = tempdir("virtual");
    let long = "a long opening question about the system under test ".repeat(120);
    let line = |id: &str| {
        serde_json::json!({"session_id": id, "turns": [
            {"prompt": format!("{id} {long}"), "output_len": 8},
            {"prompt": "a short follow-up", "output_len": 8, "think_time_ms": 40},
            {"prompt": "and one more", "output_len": 8},
        ]})
        .to_string()
    };
    let sessions = dir.join("s.jsonl");
    std::fs::write(&sessions, ["a", "b", "c"].map(line).join("\n")).expect("sessions");
    let out_dir = dir.join("out");
    let out = bin()
        .current_dir(&dir)
        .args([
            "run",
            "--disable-tqdm",
            "--virtual-time",
            "--backend",
            "openai-chat",
        ])
        .args(["--multi-turn", "--dataset-name", "custom", "--ignore-eos"])
        .args(["--dataset-path", sessions.to_str().expect("utf-8")])
        .args([
            "--disable-shuffle",
            "--num-prompts",
            "3",
            "--max-concurrency",
            "2",
        ])
        .args([
            "--think-time-ms",
            "25",
            "--output-dir",
            out_dir.to_str().expect("utf-8"),
        ])
        .output()
        .expect("spawn servebench");
    ok(&out);
    let recs = records(&out_dir);
    assert_eq!(recs.len(), 9, "{recs:?}");
    for id in ["a", "b", "c"] {
        let s = of_session(&recs, id);
        assert_eq!(s.len(), 3);
        for k in 1..3 {
            let (prev, cur) = (s[k - 1], s[k]);
            let own = if k == 1 {
                "a short follow-up"
            } else {
                "and one more"
            };
            assert!(
                u(&cur["input_tokens"]) > u(&prev["input_tokens"]) + u(&prev["output_tokens"]),
                "{own}: {cur}"
            );
            // The history is cached in whole 16-token blocks: at most a block short of it,
            // and a short turn may add no new whole block.
            let history = u(&prev["input_tokens"]) + u(&prev["output_tokens"]);
            assert!(u(&cur["cached_tokens"]) + 16 >= history, "{cur}");
            assert!(
                u(&cur["cached_tokens"]) >= u(&prev["cached_tokens"]),
                "{cur}"
            );
            let think = if k == 1 { 40_000_000 } else { 25_000_000 };
            assert_eq!(u(&cur["intended"]), u(&prev["done"]) + think, "{cur}");
        }
    }
    // Two sessions at a time: the third starts when one of the first two has ended.
    let c = of_session(&recs, "c");
    let first_end = ["a", "b"]
        .map(|id| {
            of_session(&recs, id)
                .iter()
                .map(|r| u(&r["done"]))
                .max()
                .unwrap_or(0)
        })
        .into_iter()
        .min()
        .unwrap_or(0);
    assert_eq!(u(&c[0]["sent"]), first_end, "{c:?}");
    let by_turn = native(&out_dir)["by_turn"]
        .as_array()
        .expect("by_turn")
        .clone();
    let f = |t: &Value, k: &str| t[k].as_f64().unwrap_or_else(|| panic!("{k} in {t}"));
    assert!(
        f(&by_turn[1], "ttft_p50_ms") < 0.5 * f(&by_turn[0], "ttft_p50_ms"),
        "{by_turn:?}"
    );
    std::fs::remove_dir_all(dir).ok();
}
