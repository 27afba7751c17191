//! `servebench latency` against the simulator in virtual time: per-token decode time follows the
//! roofline's decode step as the batch grows, the JSON is vLLM's, bad flags are refused.

#![allow(clippy::unwrap_used)]

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use servebench_roofline::{Catalog, Deployment, Dtype, KvDtype};

use crate::common::{ok, servebench, tempdir, text};

/// A JSON document's objects with their keys in file order (serde_json's `Value` sorts them).
#[derive(Debug)]
pub enum Node {
    Obj(Vec<(String, Node)>),
    Other,
}

impl Node {
    pub fn keys(&self) -> Vec<&str> {
        match self {
            Node::Obj(kv) => kv.iter().map(|(k, _)| k.as_str()).collect(),
            Node::Other => Vec::new(),
        }
    }

    pub fn get(&self, key: &str) -> &Node {
        match self {
            Node::Obj(kv) => &kv.iter().find(|(k, _)| k == key).unwrap().1,
            Node::Other => panic!("not an object"),
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Node, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Node;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Node, A::Error> {
                let mut kv = Vec::new();
                while let Some((k, v)) = m.next_entry::<String, Node>()? {
                    kv.push((k, v));
                }
                Ok(Node::Obj(kv))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Node, A::Error> {
                while s.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Node::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Node, E> {
                Ok(Node::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Node, E> {
                Ok(Node::Other)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Node, E> {
                Ok(Node::Other)
            }
            fn visit_str<E>(self, _: &str) -> Result<Node, E> {
                Ok(Node::Other)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Node, E> {
                Ok(Node::Other)
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Other)
            }
        }
        d.deserialize_any(V)
    }
}

/// The keys of a JSON file, in file order, nested.
pub fn ordered(path: &std::path::Path) -> Node {
    let s = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(&s).unwrap()
}

const LATENCY_KEYS: [&str; 4] = ["avg_latency", "std_latency", "latencies", "percentiles"];
const PERCENTILE_KEYS: [&str; 6] = ["10", "25", "50", "75", "90", "99"];

/// The table's per-token column (ms) for each batch size.
fn per_token_ms(stdout: &str) -> Vec<(u32, f64)> {
    let header = stdout
        .lines()
        .position(|l| l.trim_start().starts_with("batch"))
        .unwrap_or_else(|| panic!("no table:\n{stdout}"));
    stdout
        .lines()
        .skip(header + 1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols[0].parse().unwrap(), cols[3].parse().unwrap())
        })
        .collect()
}

/// The roofline's mean decode step for `batch` requests decoding `output_len − 1` tokens
/// after an `input_len`-token prompt (step j runs on a context of `input_len + j − 1`).
fn roofline_decode_step_ms(input_len: u32, output_len: u32, batch: u32) -> f64 {
    let c = Catalog::builtin();
    let d = Deployment::new(
        c.gpu("h100").unwrap().clone(),
        c.model("llama-3.1-8b").unwrap().clone(),
        Dtype::Bf16,
        KvDtype::Auto,
        1,
    )
    .unwrap();
    let steps = output_len - 1;
    let sum: f64 = (0..steps)
        .map(|j| d.decode_tpot(input_len + j, batch).total)
        .sum();
    sum / f64::from(steps) * 1e3
}

#[test]
fn per_token_time_rises_with_the_batch_as_the_roofline_predicts() {
    let dir = tempdir("latency", "sweep");
    let json = dir.join("latency.json");
    let out = servebench(&[
        "latency",
        "--sim",
        "llama-3.1-8b --gpu h100",
        "--batch-size",
        "1,8,64",
        "--num-iters",
        "3",
        "--num-iters-warmup",
        "1",
        "--output-json",
        json.to_str().unwrap(),
    ]);
    let stdout = ok(&out);
    let rows = per_token_ms(&stdout);
    assert_eq!(
        rows.iter().map(|r| r.0).collect::<Vec<_>>(),
        [1, 8, 64],
        "{stdout}"
    );
    assert!(
        rows.windows(2).all(|w| w[1].1 > w[0].1),
        "per-token time must rise with the batch:\n{stdout}"
    );
    for (batch, measured) in &rows {
        // vLLM's defaults: 32 prompt tokens, 128 output tokens.
        let expected = roofline_decode_step_ms(32, 128, *batch);
        let err = (measured - expected).abs() / expected;
        assert!(
            err < 0.05,
            "batch {batch}: {measured} ms vs the roofline's {expected} ms\n{stdout}"
        );
    }

    // One vLLM object per batch size, in the order measured, vLLM's keys in vLLM's order.
    let doc = ordered(&json);
    assert_eq!(doc.keys(), ["1", "8", "64"]);
    for b in ["1", "8", "64"] {
        assert_eq!(doc.get(b).keys(), LATENCY_KEYS);
        assert_eq!(doc.get(b).get("percentiles").keys(), PERCENTILE_KEYS);
    }
    let v = crate::common::read_json(&json);
    for b in ["1", "8", "64"] {
        let lat = v[b]["latencies"].as_array().unwrap();
        assert_eq!(lat.len(), 3, "warm-up iterations are not measured");
        let avg = lat.iter().map(|x| x.as_f64().unwrap()).sum::<f64>() / 3.0;
        assert!((v[b]["avg_latency"].as_f64().unwrap() - avg).abs() < 1e-12);
    }
    // Larger batches take longer end to end.
    let avg = |b: &str| v[b]["avg_latency"].as_f64().unwrap();
    assert!(avg("1") < avg("8") && avg("8") < avg("64"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn one_batch_size_writes_vllms_object_and_lines() {
    let dir = tempdir("latency", "single");
    let json = dir.join("out/latency.json");
    let out = servebench(&[
        "latency",
        "--input-len",
        "64",
        "--output-len",
        "16",
        "--batch-size",
        "4",
        "--num-iters",
        "5",
        "--num-iters-warmup",
        "0",
        "--ignore-eos",
        "--output-json",
        json.to_str().unwrap(),
    ]);
    let stdout = ok(&out);
    for line in [
        "Avg latency: ",
        "Std latency: ",
        "10% percentile latency: ",
        "99% percentile latency: ",
    ] {
        assert!(stdout.contains(line), "{line}\n{stdout}");
    }
    let doc = ordered(&json);
    assert_eq!(doc.keys(), LATENCY_KEYS);
    assert_eq!(doc.get("percentiles").keys(), PERCENTILE_KEYS);
    let v = crate::common::read_json(&json);
    let lat: Vec<f64> = v["latencies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(lat.len(), 5);
    // np.percentile(latencies, 50) with linear interpolation: the median of five.
    let mut sorted = lat.clone();
    sorted.sort_by(f64::total_cmp);
    assert_eq!(v["percentiles"]["50"].as_f64().unwrap(), sorted[2]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn n_sequences_per_prompt_make_the_batch_n_times_larger() {
    let run = |n: &str| {
        let out = servebench(&[
            "latency",
            "--batch-size",
            "8",
            "--n",
            n,
            "--num-iters",
            "1",
            "--num-iters-warmup",
            "0",
            "--output-len",
            "32",
        ]);
        per_token_ms(&ok(&out))[0].1
    };
    let one = run("1");
    let two = run("2");
    // Twice the sequences decode together: the step (per-token time) is the roofline's at 16.
    let expected = roofline_decode_step_ms(32, 32, 16);
    assert!(two > one, "{two} ms at n=2 vs {one} ms at n=1");
    assert!(
        (two - expected).abs() / expected < 0.05,
        "{two} vs {expected}"
    );
}

#[test]
fn bad_flags_exit_2_with_a_clear_message() {
    let cases: &[(&[&str], &str)] = &[
        (&["latency", "--batch-size", "0"], "--batch-size"),
        (&["latency", "--batch-size", "1,x"], "--batch-size"),
        (&["latency", "--num-iters", "0"], "--num-iters"),
        (&["latency", "--output-len", "0"], "--output-len"),
        (&["latency", "--use-beam-search"], "beam search"),
        (
            &["latency", "--speculative-config", "{\"method\": \"ngram\"}"],
            "how many drafts are accepted",
        ),
        (
            &["latency", "--sim", "llama-3.1-8b", "--port", "1"],
            "cannot be combined",
        ),
        (
            &["latency", "--gpu", "h100"],
            "--gpu names the GPU of a server",
        ),
        (&["latency", "--sim", "no-such-model"], "no-such-model"),
    ];
    for (args, message) in cases {
        let out = servebench(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}\n{}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}

/// A scripted server that streams `tokens` tokens, the first after `first_ms`, then one every
/// `gap_ms`; `fault` breaks one request.
fn scripted(
    rt: &tokio::runtime::Runtime,
    tokens: u64,
    first_ms: u64,
    gap_ms: u64,
    fault: Option<servebench_testserver::Fault>,
) -> servebench_testserver::ScriptedServer {
    use servebench_testserver::{Script, ScriptedServer, Trigger};
    use std::time::Duration;
    let mut script = Script::new()
        .tokens(tokens)
        .first_token_delay(Duration::from_millis(first_ms))
        .inter_token_interval(Duration::from_millis(gap_ms));
    if let Some(f) = fault {
        script = script.fault(Trigger::Index(2), f);
    }
    rt.block_on(ScriptedServer::start(script)).unwrap()
}

#[test]
fn over_http_each_iteration_is_one_batch_timed_to_its_last_token() {
    let _exclusive = crate::common::exclusive();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = scripted(&rt, 10, 50, 20, None);
    let dir = tempdir("latency", "http");
    let json = dir.join("l.json");
    let out = servebench(&[
        "latency",
        "--base-url",
        &server.base_url(),
        "--model",
        "m",
        "--input-len",
        "8",
        "--output-len",
        "10",
        "--batch-size",
        "4",
        "--num-iters",
        "3",
        "--num-iters-warmup",
        "1",
        "--output-json",
        json.to_str().unwrap(),
    ]);
    let stdout = ok(&out);
    // Four requests per iteration, one warm-up and three measured.
    assert_eq!(rt.block_on(server.shutdown()).len(), 16);
    let v = crate::common::read_json(&json);
    let lat: Vec<f64> = v["latencies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(lat.len(), 3);
    // 50 ms to the first token and nine 20 ms gaps: at least 230 ms; loopback and two busy
    // cores add a little, never seconds.
    for l in &lat {
        assert!((0.23..2.0).contains(l), "{lat:?}\n{stdout}");
    }
    let per_token = per_token_ms(&stdout)[0].1;
    assert!((19.0..60.0).contains(&per_token), "{per_token}\n{stdout}");
    // A server measured without --gpu gets no roofline column.
    assert!(!stdout.contains("roofline"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn over_http_a_failed_request_fails_the_command() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = scripted(
        &rt,
        4,
        0,
        1,
        Some(servebench_testserver::Fault::HttpStatus {
            status: 500,
            message: "boom".into(),
        }),
    );
    let out = servebench(&[
        "latency",
        "--base-url",
        &server.base_url(),
        "--model",
        "m",
        "--input-len",
        "8",
        "--output-len",
        "4",
        "--batch-size",
        "4",
        "--num-iters",
        "1",
        "--num-iters-warmup",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("1 of 4 requests failed"), "{stderr}");
    let _ = rt.block_on(server.shutdown());
}

#[test]
fn gpu_and_model_put_the_roofline_beside_a_server() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = scripted(&rt, 4, 0, 1, None);
    let out = servebench(&[
        "latency",
        "--base-url",
        &server.base_url(),
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100",
        "--input-len",
        "8",
        "--output-len",
        "4",
        "--batch-size",
        "1,2",
        "--num-iters",
        "1",
        "--num-iters-warmup",
        "0",
    ]);
    let stdout = ok(&out);
    assert!(stdout.contains("roofline step (ms)"), "{stdout}");
    let _ = rt.block_on(server.shutdown());
    let out = servebench(&["latency", "--port", "1", "--gpu", "h100"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--gpu needs --model"),
        "{}",
        text(&out)
    );
}

#[test]
fn ctrl_c_stops_the_sweep_with_130_and_writes_nothing() {
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let rt = tokio::runtime::Runtime::new().unwrap();
    // 30 tokens 100 ms apart: three seconds a batch. The server logs a request once it has
    // answered it, so the signal lands in the second batch.
    let server = scripted(&rt, 30, 0, 100, None);
    let dir = tempdir("latency", "interrupt");
    let json = dir.join("l.json");
    let child = crate::common::bin()
        .args([
            "latency",
            "--base-url",
            &server.base_url(),
            "--model",
            "m",
            "--input-len",
            "8",
            "--output-len",
            "30",
            "--batch-size",
            "2",
            "--num-iters",
            "3",
            "--num-iters-warmup",
            "0",
            "--output-json",
            json.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while server.log().is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no request arrived"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Interrupted: no results written"),
        "{}",
        text(&out)
    );
    assert!(!json.exists());
    let _ = rt.block_on(server.shutdown());
    let _ = std::fs::remove_dir_all(&dir);
}
