//! Fuzzing the chunk classifier on stable: arbitrary strings, JSON-shaped strings built from the
//! keys real chunks use, and mutated real chunks never panic, and what it returns is coherent.
//!
//! Cases: proptest's default (256), or `PROPTEST_CASES` for a long run (README.md, Tests).
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use serde_json::{Map, Value};
use servebench_wire::chunk::{classify, is_done, EndpointKind};

const KEYS: &[&str] = &[
    "choices",
    "text",
    "delta",
    "content",
    "reasoning_content",
    "reasoning",
    "role",
    "logprobs",
    "finish_reason",
    "usage",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
    "prompt_tokens_details",
    "cached_tokens",
    "error",
    "message",
    "object",
    "index",
    "id",
    "model",
    "tool_calls",
];

/// JSON values whose objects use the keys chunks have, nested a few levels.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "\\PC{0,8}".prop_map(Value::String),
        Just(Value::String("error".into())),
        Just(Value::String("stop".into())),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..6).prop_map(|kv| {
                Value::Object(
                    kv.into_iter()
                        .map(|(k, v)| (k.to_owned(), v))
                        .collect::<Map<_, _>>(),
                )
            }),
        ]
    })
}

const REAL_CHUNKS: &[&str] = &[
    r#"{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" hello","logprobs":null,"finish_reason":null}]}"#,
    r#"{"id":"cmpl-1","object":"text_completion","model":"m","choices":[{"index":0,"text":"","finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8,"prompt_tokens_details":{"cached_tokens":2}}}"#,
    r#"{"id":"chat-1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi \u00e9\ud83d\ude00"},"finish_reason":null}]}"#,
    r#"{"id":"chat-1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"reasoning_content":"think","content":"x"}}],"usage":null}"#,
    r#"{"object":"error","message":"boom","type":"InternalServerError","code":500}"#,
    r#"{"error":{"message":"bad","code":400}}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":0}}"#,
];

fn check(data: &str) -> Result<(), TestCaseError> {
    let _ = is_done(data);
    for endpoint in [EndpointKind::Completions, EndpointKind::Chat] {
        if let Ok(info) = classify(data, endpoint) {
            prop_assert_eq!(info.text_chars as usize, info.text.chars().count());
        }
    }
    Ok(())
}

/// One random edit: delete, insert or replace a byte, or truncate.
fn mutate(base: &[u8], ops: &[(u8, usize, u8)]) -> Vec<u8> {
    let mut b = base.to_vec();
    for &(op, at, byte) in ops {
        let at = at % (b.len() + 1);
        match op % 4 {
            0 if at < b.len() => {
                b.remove(at);
            }
            1 => b.insert(at, byte),
            2 if at < b.len() => b[at] = byte,
            _ => b.truncate(at),
        }
    }
    b
}

proptest! {
    #[test]
    fn arbitrary_strings_never_panic(data in "\\PC{0,200}") {
        check(&data)?;
    }

    #[test]
    fn arbitrary_bytes_as_lossy_text_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        check(&String::from_utf8_lossy(&bytes))?;
    }

    #[test]
    fn json_shaped_chunks_never_panic(v in json_value()) {
        check(&v.to_string())?;
        // Wrapped the way a chunk is, so the choice and usage paths see these values.
        for endpoint_key in ["text", "delta"] {
            let wrapped = serde_json::json!({
                "choices": [{ endpoint_key: v.clone(), "finish_reason": v.clone(), "logprobs": v.clone() }],
                "usage": v.clone(),
                "error": v.clone(),
            });
            check(&wrapped.to_string())?;
        }
    }

    #[test]
    fn mutated_real_chunks_never_panic(
        which in 0..REAL_CHUNKS.len(),
        ops in prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..6),
    ) {
        let bytes = mutate(REAL_CHUNKS[which].as_bytes(), &ops);
        check(&String::from_utf8_lossy(&bytes))?;
    }
}

#[test]
fn real_chunks_classify() {
    for c in REAL_CHUNKS {
        for endpoint in [EndpointKind::Completions, EndpointKind::Chat] {
            assert!(classify(c, endpoint).is_ok(), "{c}");
        }
    }
}
