//! Agent session sources (docs/agents.md): the OpenTelemetry GenAI fixture replays into the
//! same trees and timings as its agent-trace equivalent, and both readers, fuzzed like the
//! other readers, return their trees or an error naming the file and line — never a panic.
//!
//! Cases: proptest's default (256), or `PROPTEST_CASES` for a long run (README.md, Tests).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use servebench_tokenizer::Tokenizer;
use servebench_workload::agentic::otel::{parse_otel, read_otel};
use servebench_workload::agentic::trace::{parse_agent_trace, read_agent_trace, to_line};
use servebench_workload::agentic::{materialize, AgentSession, Content};
use servebench_workload::WorkloadError;

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/agents")
        .join(name)
}

/// The project's fixture, written by the published GenAI conventions (`invoke_agent`,
/// `chat`, `execute_tool` spans, agents used as tools), and the same sessions by hand in the
/// agent-trace format.
#[test]
fn the_otel_fixture_replays_as_its_jsonl_equivalent() {
    let from_spans = read_otel(&example("coding-agent.otlp.json")).unwrap();
    let from_lines = read_agent_trace(&example("coding-agent.jsonl")).unwrap();
    assert_eq!(from_spans, from_lines);
    // What that equality covers: two sessions on their own clock, a tool wait, two parallel
    // sub-agents (one with a tool of its own) whose answers the next turn carries.
    assert_eq!(from_spans.len(), 2);
    let a = &from_spans[0];
    assert_eq!(a.id, "fix-failing-test");
    assert_eq!(from_spans[1].arrival_ns, Some(1_500_000_000));
    assert_eq!(a.turns[1].tool.as_ref().unwrap().latency_ns, 2_000_000_000);
    assert_eq!(a.turns[2].subagents.len(), 2);
    assert_eq!(a.turns[3].input, Content::Tokens(25));
    assert_eq!(a.total_turns(), 7);
    // And as sent: the same texts, ids and think times.
    let tok = Tokenizer::builtin();
    assert_eq!(
        materialize(&from_spans, &tok, 5, 0).unwrap(),
        materialize(&from_lines, &tok, 5, 0).unwrap()
    );
    // The writer gives the file back.
    let lines: Vec<String> = from_lines.iter().map(to_line).collect();
    assert_eq!(
        parse_agent_trace(&lines.join("\n"), Path::new("x")).unwrap(),
        from_lines
    );
}

/// The same spans as JSON lines of OTLP requests (the Collector's file exporter), one span
/// list per line, read the same.
#[test]
fn otlp_json_lines_read_like_one_document() {
    let text = std::fs::read_to_string(example("coding-agent.otlp.json")).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
        .as_array()
        .unwrap()
        .clone();
    let lines: Vec<String> = spans
        .chunks(4)
        .map(|c| serde_json::json!({"resourceSpans": [{"scopeSpans": [{"spans": c}]}]}).to_string())
        .collect();
    let from_lines = parse_otel(&lines.join("\n"), Path::new("spans.jsonl")).unwrap();
    assert_eq!(
        from_lines,
        read_agent_trace(&example("coding-agent.jsonl")).unwrap()
    );
}

const FILE: &str = "fuzzed-agents.txt";

fn check(r: Result<Vec<AgentSession>, WorkloadError>, path: &Path) -> Result<(), TestCaseError> {
    let Err(err) = r else { return Ok(()) };
    match &err {
        WorkloadError::Io { path: p, .. } | WorkloadError::Empty { path: p, .. } => {
            prop_assert_eq!(p.as_path(), path);
        }
        WorkloadError::Malformed { path: p, line, .. } => {
            prop_assert_eq!(p.as_path(), path);
            prop_assert!(*line >= 1, "line {} in {}", line, err);
        }
        other => prop_assert!(false, "a reader returned a non-file error: {other}"),
    }
    let msg = err.to_string();
    prop_assert!(msg.contains(FILE), "error does not name the file: {}", msg);
    Ok(())
}

fn both_on_text(text: &str) -> Result<(), TestCaseError> {
    let path = Path::new(FILE);
    check(parse_agent_trace(text, path), path)?;
    check(parse_otel(text, path), path)?;
    Ok(())
}

fn both_on_file(bytes: &[u8]) -> Result<(), TestCaseError> {
    let dir = common::TempDir::new("fuzz-agents");
    let path = dir.path().join(FILE);
    std::fs::write(&path, bytes).unwrap();
    check(read_agent_trace(&path), &path)?;
    check(read_otel(&path), &path)?;
    Ok(())
}

/// Values that break naive arithmetic and parsing.
const DICTIONARY: &[&str] = &[
    "0",
    "-1",
    "1e308",
    "-1e308",
    "NaN",
    "1.5",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "99999999999999999999999",
    "",
    "\n",
    ",",
    "\"",
    ":",
    "{",
    "}",
    "[",
    "]",
    "null",
    "[]",
    "{}",
    "\"\"",
    "é😀",
    "\u{feff}",
    "\"turns\": []",
    "\"subagents\": [{}]",
];

fn mutate(base: &str, muts: &[(u8, usize, usize)]) -> Vec<u8> {
    let mut b = base.as_bytes().to_vec();
    for &(kind, at, w) in muts {
        let len = b.len();
        match kind % 5 {
            0 => {
                // Replace a run of digits.
                let runs: Vec<(usize, usize)> = {
                    let mut v = Vec::new();
                    let mut i = 0;
                    while i < b.len() {
                        if b[i].is_ascii_digit() {
                            let s = i;
                            while i < b.len() && b[i].is_ascii_digit() {
                                i += 1;
                            }
                            v.push((s, i));
                        } else {
                            i += 1;
                        }
                    }
                    v
                };
                if !runs.is_empty() {
                    let (s, e) = runs[at % runs.len()];
                    b.splice(s..e, DICTIONARY[w % DICTIONARY.len()].bytes());
                }
            }
            1 => {
                let at = at % (len + 1);
                b.splice(at..at, DICTIONARY[w % DICTIONARY.len()].bytes());
            }
            2 if len > 0 => {
                b.remove(at % len);
            }
            3 => b.truncate(at % (len + 1)),
            _ => {
                if len > 0 {
                    b[at % len] = w as u8;
                }
            }
        }
    }
    b
}

fn valid() -> [String; 2] {
    [
        std::fs::read_to_string(example("coding-agent.jsonl")).unwrap(),
        std::fs::read_to_string(example("coding-agent.otlp.json")).unwrap(),
    ]
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        both_on_text(&String::from_utf8_lossy(&bytes))?;
        both_on_file(&bytes)?;
    }

    #[test]
    fn mutated_valid_files_never_panic(
        which in 0..2usize,
        muts in prop::collection::vec((any::<u8>(), any::<usize>(), any::<usize>()), 1..6),
    ) {
        let bytes = mutate(&valid()[which], &muts);
        both_on_text(&String::from_utf8_lossy(&bytes))?;
    }

    #[test]
    fn trace_lines_with_any_numbers_never_panic(
        input in any::<i64>(), output in any::<i64>(), latency in any::<f64>(),
        think in any::<f64>(), arrival in any::<f64>(), depth in 0..12usize,
    ) {
        let mut node = format!(r#"{{"turns": [{{"input_tokens": {input}, "output_tokens": {output}}}]}}"#);
        for _ in 0..depth {
            node = format!(
                r#"{{"turns": [{{"input_tokens": 1, "output_tokens": 1, "think_time_ms": {think:e}, "tool": {{"latency_ms": {latency:e}}}, "subagents": [{node}]}}, {{"input_tokens": 0, "output_tokens": 2}}]}}"#
            );
        }
        let line = format!(r#"{{"session_id": "s", "arrival_ms": {arrival:e}, {}"#, &node[1..]);
        both_on_text(&line)?;
    }

    #[test]
    fn spans_with_any_numbers_never_panic(
        start in any::<u64>(), len in any::<u64>(), input in any::<i64>(), output in any::<i64>(),
        second_input in any::<i64>(),
    ) {
        let span = |id: &str, s: u64, e: u64, i: i64, o: i64| serde_json::json!({
            "traceId": "t", "spanId": id, "startTimeUnixNano": s.to_string(),
            "endTimeUnixNano": e.to_string(),
            "attributes": [
                {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                {"key": "gen_ai.usage.input_tokens", "value": {"intValue": i.to_string()}},
                {"key": "gen_ai.usage.output_tokens", "value": {"intValue": o}}]});
        let end = start.saturating_add(len);
        let doc = serde_json::json!({"resourceSpans": [{"scopeSpans": [{"spans": [
            span("a", start, end, input, output),
            span("b", end, end.saturating_add(len), second_input, output),
        ]}]}]});
        both_on_text(&doc.to_string())?;
    }
}
