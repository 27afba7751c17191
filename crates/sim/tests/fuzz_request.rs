//! Fuzzing the simulator's request parsing on stable, over a real socket on 127.0.0.1: arbitrary
//! bodies, JSON built from the fields requests use, and mutated valid requests to the
//! completions, chat and tokenize endpoints always get a whole HTTP answer (2xx or 4xx), never a
//! dropped connection (what a panicking handler gives), and the server keeps serving.
//!
//! Cases: proptest's default (256), or `PROPTEST_CASES` for a long run (README.md, Tests).
#![allow(clippy::unwrap_used)]

mod server_common;

use std::net::SocketAddr;
use std::sync::OnceLock;

use proptest::prelude::*;
use serde_json::{Map, Value};
use server_common::*;

/// Durations divided by 1000 and short sequences, so an accepted request answers at once.
const SPEC: &str = "--time-scale 1000 --max-model-len 256 --jitter-sigma 0 --served-model-name m";

const PATHS: &[&str] = &["/v1/completions", "/v1/chat/completions", "/tokenize"];

/// One simulator for every case, on a runtime that outlives them.
fn sim() -> &'static (tokio::runtime::Runtime, SocketAddr) {
    static SIM: OnceLock<(tokio::runtime::Runtime, SocketAddr)> = OnceLock::new();
    SIM.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let sim = rt.block_on(start(SPEC));
        let addr = sim.addr;
        // The server lives as long as the test process.
        std::mem::forget(sim.handle);
        (rt, addr)
    })
}

fn send(path: &str, body: &str) -> Result<(), TestCaseError> {
    let (rt, addr) = sim();
    let r = rt.block_on(post(*addr, path, body));
    prop_assert!(!r.truncated, "{} answer cut off for body {:?}", path, body);
    prop_assert!(
        (200..300).contains(&r.status) || (400..500).contains(&r.status),
        "{} answered {} to {:?}: {}",
        path,
        r.status,
        body,
        r.text()
    );
    Ok(())
}

const KEYS: &[&str] = &[
    "model",
    "prompt",
    "messages",
    "role",
    "content",
    "text",
    "type",
    "max_tokens",
    "max_completion_tokens",
    "min_tokens",
    "stream",
    "stream_options",
    "include_usage",
    "continuous_usage_stats",
    "ignore_eos",
    "temperature",
    "top_p",
    "n",
    "echo",
    "logprobs",
    "stop",
    "seed",
    "add_generation_prompt",
];

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (0i64..300).prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "\\PC{0,12}".prop_map(Value::String),
        Just(Value::String("m".into())),
        Just(Value::String("user".into())),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..7).prop_map(|kv| {
                Value::Object(
                    kv.into_iter()
                        .map(|(k, v)| (k.to_owned(), v))
                        .collect::<Map<_, _>>(),
                )
            }),
        ]
    })
}

const VALID: &[&str] = &[
    r#"{"model":"m","prompt":"the quick brown fox","max_tokens":5,"ignore_eos":true}"#,
    r#"{"model":"m","prompt":[[1,2,3,4]],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}"#,
    r#"{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_completion_tokens":4,"stream":true}"#,
    r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":2}"#,
];

fn mutate(base: &[u8], ops: &[(u8, usize, u8)]) -> Vec<u8> {
    const SPLICE: &[&[u8]] = &[
        b"-1",
        b"0",
        b"1e308",
        b"18446744073709551616",
        b"9223372036854775807",
        b"null",
        b"[]",
        b"{}",
        b"\"",
        b",",
    ];
    let mut b = base.to_vec();
    for &(op, at, byte) in ops {
        let at = at % (b.len() + 1);
        match op % 4 {
            0 if at < b.len() => {
                b.remove(at);
            }
            1 => {
                let s = SPLICE[usize::from(byte) % SPLICE.len()];
                b.splice(at..at, s.iter().copied());
            }
            2 if at < b.len() => b[at] = byte,
            _ => b.truncate(at),
        }
    }
    b
}

proptest! {
    #[test]
    fn arbitrary_bodies_get_an_answer(
        path in prop::sample::select(PATHS),
        bytes in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        send(path, &String::from_utf8_lossy(&bytes))?;
    }

    #[test]
    fn json_shaped_bodies_get_an_answer(path in prop::sample::select(PATHS), v in json_value()) {
        send(path, &v.to_string())?;
    }

    #[test]
    fn mutated_valid_requests_get_an_answer(
        path in prop::sample::select(PATHS),
        which in 0..VALID.len(),
        ops in prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..5),
    ) {
        let body = mutate(VALID[which].as_bytes(), &ops);
        send(path, &String::from_utf8_lossy(&body))?;
    }
}

#[test]
fn valid_requests_succeed_and_the_server_stays_up() {
    let (rt, addr) = sim();
    for body in VALID {
        let path = if body.contains("messages") {
            "/v1/chat/completions"
        } else {
            "/v1/completions"
        };
        let r = rt.block_on(post(*addr, path, body));
        assert_eq!(r.status, 200, "{body}: {}", r.text());
        assert!(!r.truncated);
    }
    assert_eq!(rt.block_on(get(*addr, "/v1/models")).status, 200);
}
