//! servebench's agent-trace format (docs/agents.md): JSON lines, one session tree per line.
//!
//! ```json
//! {"session_id": "fix-1", "arrival_ms": 0, "system_tokens": 4000, "turns": [
//!   {"input_tokens": 350, "output_tokens": 120, "tool": {"name": "read_file", "latency_ms": 40}},
//!   {"input_tokens": 900, "output_tokens": 80, "subagents": [
//!     {"turns": [{"text": "find the callers", "output_tokens": 60, "tool": {"latency_ms": 300}},
//!                {"input_tokens": 700, "output_tokens": 200}]}]},
//!   {"input_tokens": 20, "output_tokens": 400, "think_time_ms": 3000}]}
//! ```
//!
//! Blank lines are skipped; anything else that is not a valid tree is an error naming the
//! file, the line and the place in the tree.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::{check_tree, AgentSession, AgentTurn, Content, ToolCall, MAX_TIME_NS};
use crate::error::WorkloadError;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionLine {
    session_id: Value,
    #[serde(default)]
    arrival_ms: Option<f64>,
    #[serde(default)]
    system: Option<String>,
    #[serde(default)]
    system_tokens: Option<u64>,
    turns: Vec<TurnLine>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubagentLine {
    /// A label for reports; the agent's id in records is derived from its place.
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    system: Option<String>,
    #[serde(default)]
    system_tokens: Option<u64>,
    turns: Vec<TurnLine>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnLine {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    input_tokens: Option<u64>,
    output_tokens: u64,
    #[serde(default)]
    think_time_ms: Option<f64>,
    #[serde(default)]
    tool: Option<ToolLine>,
    #[serde(default)]
    subagents: Vec<SubagentLine>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolLine {
    #[serde(default)]
    name: Option<String>,
    latency_ms: f64,
}

/// Milliseconds as given (finite, non-negative, not absurd) to ns.
fn ms_to_ns(ms: f64, what: &str, at: &str) -> Result<u64, String> {
    let max_ms = (MAX_TIME_NS / 1_000_000) as f64;
    if !ms.is_finite() || ms < 0.0 {
        return Err(format!(
            "{at}{what} must be a non-negative number of milliseconds, got {ms}"
        ));
    }
    if ms > max_ms {
        return Err(format!("{at}{what} of {ms} ms is beyond {max_ms} ms"));
    }
    Ok((ms * 1e6).round() as u64)
}

fn system(text: Option<String>, tokens: Option<u64>, at: &str) -> Result<Option<Content>, String> {
    match (text, tokens) {
        (Some(_), Some(_)) => Err(format!(
            "{at}give the system prompt as system (text) or system_tokens, not both"
        )),
        (Some(t), None) => Ok(Some(Content::Text(t))),
        (None, Some(n)) => Ok(Some(Content::Tokens(n))),
        (None, None) => Ok(None),
    }
}

fn turns(lines: Vec<TurnLine>, at: &str) -> Result<Vec<AgentTurn>, String> {
    lines
        .into_iter()
        .enumerate()
        .map(|(k, t)| {
            let here = format!("{at}turns[{k}]: ");
            let input = match (t.text, t.input_tokens) {
                (Some(_), Some(_)) => {
                    return Err(format!(
                        "{here}give the turn's message as text or input_tokens, not both"
                    ))
                }
                (Some(s), None) => Content::Text(s),
                (None, Some(n)) => Content::Tokens(n),
                (None, None) => {
                    return Err(format!(
                        "{here}the turn needs its new message: text or input_tokens"
                    ))
                }
            };
            let think_time_ns = t
                .think_time_ms
                .map(|v| ms_to_ns(v, "think_time_ms", &here))
                .transpose()?;
            let tool = t
                .tool
                .map(|tool| -> Result<ToolCall, String> {
                    Ok(ToolCall {
                        name: tool.name.unwrap_or_default(),
                        latency_ns: ms_to_ns(tool.latency_ms, "tool latency_ms", &here)?,
                    })
                })
                .transpose()?;
            let subagents = t
                .subagents
                .into_iter()
                .enumerate()
                .map(|(j, s)| {
                    let at = format!("{at}turns[{k}].subagents[{j}].");
                    Ok(AgentSession {
                        id: s.name.unwrap_or_default(),
                        arrival_ns: None,
                        system: system(s.system, s.system_tokens, &at)?,
                        turns: turns(s.turns, &at)?,
                    })
                })
                .collect::<Result<Vec<_>, String>>()?;
            Ok(AgentTurn {
                input,
                output_tokens: t.output_tokens,
                think_time_ns,
                tool,
                subagents,
            })
        })
        .collect()
}

/// The session trees of an agent-trace file's text; `path` names the source in errors.
pub fn parse_agent_trace(text: &str, path: &Path) -> Result<Vec<AgentSession>, WorkloadError> {
    let text = crate::text_file::strip_bom(text);
    let mut sessions = Vec::new();
    let mut lines_of: HashMap<String, usize> = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |m: String| WorkloadError::malformed(path, line_no, m);
        let parsed: SessionLine = serde_json::from_str(line)
            .map_err(|e| bad(format!("not an agent session object: {e}")))?;
        let id = match parsed.session_id {
            Value::String(s) => s,
            v @ Value::Number(_) => v.to_string(),
            other => {
                return Err(bad(format!(
                    "session_id must be a string or a number, not {other}"
                )))
            }
        };
        if let Some(first) = lines_of.insert(id.clone(), line_no) {
            return Err(bad(format!(
                "session {id:?} repeats the session of line {first}: ids must be unique"
            )));
        }
        let at = format!("session {id:?}: ");
        let arrival_ns = parsed
            .arrival_ms
            .map(|v| ms_to_ns(v, "arrival_ms", &at))
            .transpose()
            .map_err(bad)?;
        let session = AgentSession {
            system: system(parsed.system, parsed.system_tokens, &at).map_err(bad)?,
            turns: turns(parsed.turns, &at).map_err(bad)?,
            id,
            arrival_ns,
        };
        check_tree(&session, 0).map_err(|e| bad(format!("{at}{e}")))?;
        sessions.push(session);
    }
    Ok(sessions)
}

/// The session trees of the agent-trace file at `path`.
pub fn read_agent_trace(path: &Path) -> Result<Vec<AgentSession>, WorkloadError> {
    let text = crate::text_file::read_text(path)?;
    let sessions = parse_agent_trace(&text, path)?;
    if sessions.is_empty() {
        return Err(WorkloadError::Empty {
            path: path.to_path_buf(),
            reason: "the file holds no agent session".to_owned(),
        });
    }
    Ok(sessions)
}

/// One session tree as a line of the agent-trace format (the inverse of the reader, for
/// writing fixtures and converting other sources).
pub fn to_line(s: &AgentSession) -> String {
    fn ms(ns: u64) -> Value {
        // Whole milliseconds stay integers in the file.
        if ns % 1_000_000 == 0 {
            Value::from(ns / 1_000_000)
        } else {
            Value::from(ns as f64 / 1e6)
        }
    }
    fn node(s: &AgentSession, root: bool) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        if root {
            m.insert("session_id".into(), Value::from(s.id.clone()));
            if let Some(a) = s.arrival_ns {
                m.insert("arrival_ms".into(), ms(a));
            }
        } else if !s.id.is_empty() {
            m.insert("name".into(), Value::from(s.id.clone()));
        }
        match &s.system {
            Some(Content::Text(t)) => {
                m.insert("system".into(), Value::from(t.clone()));
            }
            Some(Content::Tokens(n)) => {
                m.insert("system_tokens".into(), Value::from(*n));
            }
            None => {}
        }
        let turns: Vec<Value> = s
            .turns
            .iter()
            .map(|t| {
                let mut o = serde_json::Map::new();
                match &t.input {
                    Content::Text(x) => o.insert("text".into(), Value::from(x.clone())),
                    Content::Tokens(n) => o.insert("input_tokens".into(), Value::from(*n)),
                };
                o.insert("output_tokens".into(), Value::from(t.output_tokens));
                if let Some(th) = t.think_time_ns {
                    o.insert("think_time_ms".into(), ms(th));
                }
                if let Some(tool) = &t.tool {
                    let mut tl = serde_json::Map::new();
                    if !tool.name.is_empty() {
                        tl.insert("name".into(), Value::from(tool.name.clone()));
                    }
                    tl.insert("latency_ms".into(), ms(tool.latency_ns));
                    o.insert("tool".into(), Value::Object(tl));
                }
                if !t.subagents.is_empty() {
                    o.insert(
                        "subagents".into(),
                        Value::Array(
                            t.subagents
                                .iter()
                                .map(|c| Value::Object(node(c, false)))
                                .collect(),
                        ),
                    );
                }
                Value::Object(o)
            })
            .collect();
        m.insert("turns".into(), Value::Array(turns));
        m
    }
    Value::Object(node(s, true)).to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"session_id": "fix-1", "arrival_ms": 2.5, "system_tokens": 40, "turns": [{"input_tokens": 35, "output_tokens": 12, "tool": {"name": "read_file", "latency_ms": 40}}, {"input_tokens": 90, "output_tokens": 8, "subagents": [{"name": "searcher", "turns": [{"text": "find the callers", "output_tokens": 6, "tool": {"latency_ms": 300}}, {"input_tokens": 70, "output_tokens": 20}]}]}, {"input_tokens": 0, "output_tokens": 40, "think_time_ms": 3000}]}

{"session_id": 7, "turns": [{"text": "hello", "output_tokens": 3}]}
"#;

    #[test]
    fn trees_are_read_with_their_times_and_written_back_the_same() {
        let s = parse_agent_trace(GOOD, Path::new("a.jsonl")).unwrap();
        assert_eq!(s.len(), 2);
        let a = &s[0];
        assert_eq!(a.id, "fix-1");
        assert_eq!(a.arrival_ns, Some(2_500_000));
        assert_eq!(a.system, Some(Content::Tokens(40)));
        assert_eq!(
            a.turns[0].tool,
            Some(ToolCall {
                name: "read_file".into(),
                latency_ns: 40_000_000
            })
        );
        let sub = &a.turns[1].subagents[0];
        assert_eq!(sub.id, "searcher");
        assert_eq!(sub.turns[0].input, Content::Text("find the callers".into()));
        assert_eq!(sub.turns[0].tool.as_ref().unwrap().latency_ns, 300_000_000);
        assert_eq!(a.turns[2].think_time_ns, Some(3_000_000_000));
        assert_eq!(a.total_turns(), 5);
        assert_eq!(s[1].id, "7");
        let again: Vec<String> = s.iter().map(to_line).collect();
        let back = parse_agent_trace(&again.join("\n"), Path::new("b.jsonl")).unwrap();
        assert_eq!(back, s);
    }

    fn err(text: &str) -> String {
        parse_agent_trace(text, Path::new("t.jsonl"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn bad_trees_name_file_line_and_place() {
        let ok = r#"{"session_id": "a", "turns": [{"input_tokens": 1, "output_tokens": 1}]}"#;
        let cases = [
            (r#"{"session_id": "b", "turns": []}"#, "at least one turn"),
            (
                r#"{"session_id": "b", "turns": [{"input_tokens": 1, "output_tokens": 0}]}"#,
                "turns[0]: output_tokens must be at least 1",
            ),
            (
                r#"{"session_id": "b", "turns": [{"input_tokens": 1, "output_tokens": 2, "tool": {"latency_ms": 5}}]}"#,
                "the last turn calls a tool",
            ),
            (
                r#"{"session_id": "b", "turns": [{"input_tokens": 1, "output_tokens": 2, "tool": {"latency_ms": -5}}, {"input_tokens": 1, "output_tokens": 1}]}"#,
                "tool latency_ms must be a non-negative",
            ),
            (
                r#"{"session_id": "b", "turns": [{"output_tokens": 2}]}"#,
                "needs its new message",
            ),
            (
                r#"{"session_id": "b", "turns": [{"input_tokens": 1, "output_tokens": 2, "subagents": [{"turns": [{"input_tokens": 0, "output_tokens": 1}]}]}, {"input_tokens": 0, "output_tokens": 1}]}"#,
                "session \"b\": turns[0].subagents[0].turns[0]: the turn adds nothing",
            ),
            (
                r#"{"session_id": "a", "turns": [{"text": "x", "output_tokens": 1}]}"#,
                "repeats the session of line 1",
            ),
            (
                r#"{"session_id": "b", "turns": [{"input_tokens": 1, "output_tokens": 1, "extra": 1}]}"#,
                "unknown field",
            ),
            (r#"{"session_id": null, "turns": []}"#, "string or a number"),
            (
                r#"{"session_id": "b", "arrival_ms": 1e300, "turns": [{"input_tokens": 1, "output_tokens": 1}]}"#,
                "beyond",
            ),
            (
                r#"{"session_id": "b", "turns": [{"input_tokens": 99999999999, "output_tokens": 1}]}"#,
                "at most",
            ),
            ("[1, 2]", "not an agent session object"),
        ];
        for (line, needle) in cases {
            let e = err(&format!("{ok}\n{line}\n"));
            assert!(e.starts_with("t.jsonl:2: "), "{e}");
            assert!(e.contains(needle), "wanted {needle:?}: {e}");
        }
        assert!(read_agent_trace(Path::new("/nonexistent/x.jsonl")).is_err());
    }
}
