//! Multi-turn conversations (`--multi-turn`): each session is a list of user turns sent one
//! after the other, every turn carrying the whole conversation so far.
//!
//! Two sources: a ShareGPT file (each conversation is a session; its human turns are the
//! prompts and the token count of the answer after each gives that turn's output length —
//! the dataset's answers themselves are never sent, the server's are) and a JSONL file of
//! sessions, one per line:
//! `{"session_id": .., "turns": [{"prompt": .., "output_len": .., "think_time_ms": ..}]}`.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;
use servebench_tokenizer::Tokenizer;

use crate::error::WorkloadError;
use crate::selection::{oversample_picks, shuffle};

/// One user turn of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionTurn {
    /// The user's message of this turn (only this turn's; the history is added when sent).
    pub prompt: String,
    /// Tokens of `prompt` under the workload's tokenizer.
    pub prompt_tokens: u64,
    /// Output length to ask for, or `None` to leave it to the server.
    pub max_tokens: Option<u64>,
    /// Pause after the previous turn's answer before this turn is sent; `None` takes the
    /// run's default (`--think-time-ms`).
    pub think_time_ms: Option<u64>,
}

/// A conversation: its turns in order, never empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub id: String,
    pub turns: Vec<SessionTurn>,
}

/// How sessions are picked from a file (`--num-prompts` counts sessions).
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSelection {
    pub num_sessions: usize,
    pub seed: u64,
    pub disable_shuffle: bool,
    pub no_oversample: bool,
}

impl SessionSelection {
    fn apply(&self, mut sessions: Vec<Session>) -> Vec<Session> {
        if !self.disable_shuffle {
            shuffle(&mut sessions, self.seed);
        }
        if sessions.len() >= self.num_sessions {
            sessions.truncate(self.num_sessions);
            return sessions;
        }
        if self.no_oversample || sessions.is_empty() {
            return sessions;
        }
        // Repeated sessions get their own ids, so their records stay apart.
        let picks = oversample_picks(sessions.len(), self.num_sessions, self.seed);
        let extra: Vec<Session> = picks
            .into_iter()
            .enumerate()
            .filter_map(|(k, i)| {
                sessions.get(i).map(|s| Session {
                    id: format!("{}#{}", s.id, k + 1),
                    turns: s.turns.clone(),
                })
            })
            .collect();
        sessions.extend(extra);
        sessions
    }
}

#[derive(Deserialize)]
struct ShareGptEntry {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    conversations: Option<Vec<ShareGptMessage>>,
}

#[derive(Deserialize)]
struct ShareGptMessage {
    #[serde(default)]
    from: Option<String>,
    value: String,
}

fn is_user(from: Option<&str>) -> bool {
    matches!(from, Some("human" | "user"))
}

/// Sessions from a ShareGPT file. A human turn followed by an answer becomes one turn whose
/// output length is the answer's token count (`output_len` overrides it); a conversation with
/// no such pair is skipped. Messages without `from` alternate, the first being the user's.
pub fn sharegpt_sessions(
    path: &Path,
    output_len: Option<u64>,
    pick: &SessionSelection,
    tok: &Tokenizer,
) -> Result<Vec<Session>, WorkloadError> {
    let text = crate::text_file::read_text(path)?;
    let entries: Vec<ShareGptEntry> = serde_json::from_str(&text).map_err(|e| {
        WorkloadError::malformed(
            path,
            e.line(),
            format!("not a ShareGPT JSON list of conversations: {e}"),
        )
    })?;
    let mut sessions = Vec::new();
    for (index, entry) in entries.into_iter().enumerate() {
        let Some(messages) = entry.conversations else {
            continue;
        };
        let mut turns = Vec::new();
        let mut i = 0;
        while i + 1 < messages.len() {
            let (user, answer) = (&messages[i], &messages[i + 1]);
            let user_side = user
                .from
                .as_deref()
                .map_or(i % 2 == 0, |f| is_user(Some(f)));
            let answer_side = !is_user(answer.from.as_deref());
            if !user_side || !answer_side || user.value.is_empty() {
                i += 1;
                continue;
            }
            let output = output_len.unwrap_or_else(|| tok.count(&answer.value) as u64);
            turns.push(SessionTurn {
                prompt: user.value.clone(),
                prompt_tokens: tok.count(&user.value) as u64,
                max_tokens: Some(output.max(1)),
                think_time_ms: None,
            });
            i += 2;
        }
        if turns.is_empty() {
            continue;
        }
        let id = match entry.id {
            Some(Value::String(s)) => s,
            Some(v @ Value::Number(_)) => v.to_string(),
            _ => format!("sharegpt-{index}"),
        };
        sessions.push(Session { id, turns });
    }
    if sessions.is_empty() && pick.num_sessions > 0 {
        return Err(WorkloadError::Empty {
            path: path.to_path_buf(),
            reason: "no conversation has a user turn followed by an answer".to_owned(),
        });
    }
    Ok(pick.apply(sessions))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionLine {
    session_id: Value,
    turns: Vec<TurnLine>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnLine {
    prompt: String,
    #[serde(default)]
    output_len: Option<u64>,
    #[serde(default)]
    think_time_ms: Option<u64>,
}

/// Sessions from a JSONL file of `{"session_id", "turns": [{"prompt", "output_len",
/// "think_time_ms"}]}` lines. `default_output_len` (−1: the server decides) applies to turns
/// without `output_len`. Blank lines are skipped; a line that does not parse or a session
/// without turns is an error naming the file and line.
pub fn custom_sessions(
    path: &Path,
    default_output_len: i64,
    pick: &SessionSelection,
    tok: &Tokenizer,
) -> Result<Vec<Session>, WorkloadError> {
    let text = crate::text_file::read_text(path)?;
    let sessions = parse_custom_sessions(&text, path, default_output_len, tok)?;
    if sessions.is_empty() && pick.num_sessions > 0 {
        return Err(WorkloadError::Empty {
            path: path.to_path_buf(),
            reason: "the file holds no session".to_owned(),
        });
    }
    Ok(pick.apply(sessions))
}

/// [`custom_sessions`]'s parser over the file's text; `path` names the source in errors.
pub fn parse_custom_sessions(
    text: &str,
    path: &Path,
    default_output_len: i64,
    tok: &Tokenizer,
) -> Result<Vec<Session>, WorkloadError> {
    let default_output = u64::try_from(default_output_len).ok();
    let mut sessions = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        if line.trim().is_empty() {
            continue;
        }
        let parsed: SessionLine = serde_json::from_str(line).map_err(|e| {
            WorkloadError::malformed(path, line_no, format!("not a session object: {e}"))
        })?;
        let id = match parsed.session_id {
            Value::String(s) => s,
            v @ Value::Number(_) => v.to_string(),
            other => {
                return Err(WorkloadError::malformed(
                    path,
                    line_no,
                    format!("session_id must be a string or a number, not {other}"),
                ))
            }
        };
        if parsed.turns.is_empty() {
            return Err(WorkloadError::malformed(
                path,
                line_no,
                format!("session {id:?} has an empty turn list"),
            ));
        }
        let turns = parsed
            .turns
            .into_iter()
            .map(|t| SessionTurn {
                prompt_tokens: tok.count(&t.prompt) as u64,
                prompt: t.prompt,
                max_tokens: t.output_len.or(default_output),
                think_time_ms: t.think_time_ms,
            })
            .collect();
        sessions.push(Session { id, turns });
    }
    Ok(sessions)
}

/// Conversations in a trace with prompt block ids (Mooncake's `hash_ids`): an entry whose ids
/// begin with all the ids of an earlier entry continues that entry's conversation (the latest
/// entry of each open conversation is the one extended). Each conversation is a session
/// arriving at its first entry's offset (returned beside it, ns). A later turn's own message
/// is the part of the entry's prompt the history does not hold: its input length less the
/// previous turn's input and output lengths (at least one token), as random text; the
/// history itself is what the server returns. Entries without block ids are sessions of one turn.
pub fn trace_sessions(
    entries: &[crate::trace::TraceEntry],
    tok: &Tokenizer,
    seed: u64,
) -> Result<(Vec<Session>, Vec<u64>), WorkloadError> {
    // Each conversation: its entries in order, and its latest entry.
    let mut chains: Vec<(Vec<usize>, usize)> = Vec::new();
    let mut open: Vec<usize> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let extends = open.iter().position(|&c| {
            let last = &entries[chains[c].1];
            !last.block_hashes.is_empty()
                && e.block_hashes.len() > last.block_hashes.len()
                && e.block_hashes.starts_with(&last.block_hashes)
        });
        match extends {
            Some(at) => {
                let c = open[at];
                chains[c].0.push(i);
                chains[c].1 = i;
            }
            None => {
                open.push(chains.len());
                chains.push((vec![i], i));
            }
        }
    }
    let mut sessions = Vec::with_capacity(chains.len());
    let mut arrivals = Vec::with_capacity(chains.len());
    for (n, (members, _)) in chains.into_iter().enumerate() {
        let mut turns = Vec::with_capacity(members.len());
        let mut previous: Option<&crate::trace::TraceEntry> = None;
        for &i in &members {
            let e = &entries[i];
            let own = match previous {
                None => e.input_tokens,
                Some(p) => e
                    .input_tokens
                    .saturating_sub(p.input_tokens + p.output_tokens),
            }
            .max(1);
            let len = usize::try_from(own)
                .map_err(|_| WorkloadError::InvalidConfig("trace prompt too long".to_owned()))?;
            let mut rng = crate::rng::stream(seed, crate::rng::Purpose::TraceTail, i as u64);
            let text = crate::synth::exact_text(tok, &mut rng, len)?;
            turns.push(SessionTurn {
                prompt_tokens: text.ids.len() as u64,
                prompt: text.text,
                max_tokens: Some(e.output_tokens.max(1)),
                think_time_ms: None,
            });
            previous = Some(e);
        }
        arrivals.push(entries[members[0]].offset_ns);
        sessions.push(Session {
            id: format!("trace-{n}"),
            turns,
        });
    }
    Ok((sessions, arrivals))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn tok() -> Tokenizer {
        Tokenizer::builtin()
    }

    fn pick(n: usize) -> SessionSelection {
        SessionSelection {
            num_sessions: n,
            seed: 0,
            disable_shuffle: true,
            no_oversample: true,
        }
    }

    #[test]
    fn custom_lines_become_sessions_with_their_own_turn_values() {
        let text = r#"{"session_id": "a", "turns": [{"prompt": "hello there", "output_len": 5, "think_time_ms": 20}, {"prompt": "and then"}]}

{"session_id": 7, "turns": [{"prompt": "x"}]}"#;
        let s = parse_custom_sessions(text, Path::new("s.jsonl"), 9, &tok()).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].id, "a");
        assert_eq!(s[0].turns[0].max_tokens, Some(5));
        assert_eq!(s[0].turns[0].think_time_ms, Some(20));
        assert_eq!(s[0].turns[1].max_tokens, Some(9));
        assert_eq!(s[0].turns[1].think_time_ms, None);
        assert_eq!(
            s[0].turns[0].prompt_tokens,
            tok().count("hello there") as u64
        );
        assert_eq!(s[1].id, "7");
        let open = parse_custom_sessions(text, Path::new("s.jsonl"), -1, &tok()).unwrap();
        assert_eq!(open[1].turns[0].max_tokens, None);
    }

    #[test]
    fn an_empty_turn_list_names_the_session_and_line() {
        let text = "{\"session_id\": \"ok\", \"turns\": [{\"prompt\": \"p\"}]}\n{\"session_id\": \"lonely\", \"turns\": []}\n";
        let err = parse_custom_sessions(text, Path::new("s.jsonl"), 4, &tok()).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("s.jsonl:2"), "{msg}");
        assert!(msg.contains("\"lonely\""), "{msg}");
        assert!(msg.contains("empty turn list"), "{msg}");
    }

    #[test]
    fn a_bad_line_names_file_and_line() {
        let text = "{\"session_id\": \"ok\", \"turns\": [{\"prompt\": \"p\"}]}\n{\"session_id\": \"b\", \"turns\": [{\"prompt\": 3}]}\n";
        let err = parse_custom_sessions(text, Path::new("s.jsonl"), 4, &tok()).unwrap_err();
        assert!(err.to_string().starts_with("s.jsonl:2: "), "{err}");
    }

    #[test]
    fn sharegpt_conversations_pair_user_turns_with_answer_lengths() {
        let dir = std::env::temp_dir().join(format!("servebench-mt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sg.json");
        std::fs::write(
            &path,
            r#"[{"id": "c1", "conversations": [
                {"from": "human", "value": "first question"},
                {"from": "gpt", "value": "one two three four five"},
                {"from": "human", "value": "second question"},
                {"from": "gpt", "value": "six seven"}]},
               {"conversations": [{"from": "gpt", "value": "no user here"}]},
               {"conversations": [{"value": "q"}, {"value": "a b"}]}]"#,
        )
        .unwrap();
        let s = sharegpt_sessions(&path, None, &pick(10), &tok()).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].id, "c1");
        assert_eq!(s[0].turns.len(), 2);
        assert_eq!(s[0].turns[1].prompt, "second question");
        assert_eq!(
            s[0].turns[0].max_tokens,
            Some(tok().count("one two three four five") as u64)
        );
        assert_eq!(s[1].id, "sharegpt-2");
        let fixed = sharegpt_sessions(&path, Some(3), &pick(1), &tok()).unwrap();
        assert_eq!(fixed.len(), 1);
        assert!(fixed[0].turns.iter().all(|t| t.max_tokens == Some(3)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn oversampled_sessions_get_ids_of_their_own() {
        let text = "{\"session_id\": \"a\", \"turns\": [{\"prompt\": \"p\"}]}\n";
        let s = parse_custom_sessions(text, Path::new("s.jsonl"), 4, &tok()).unwrap();
        let mut p = pick(3);
        p.no_oversample = false;
        let out = p.apply(s);
        let ids: Vec<&str> = out.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["a", "a#1", "a#2"]);
    }

    #[test]
    fn trace_entries_that_extend_an_earlier_one_continue_its_conversation() {
        use crate::trace::TraceEntry;
        let e = |at: u64, input: u64, output: u64, ids: &[u64]| TraceEntry {
            offset_ns: at,
            input_tokens: input,
            output_tokens: output,
            block_hashes: ids.to_vec(),
        };
        let entries = [
            e(0, 20, 5, &[1]),
            e(10, 30, 4, &[7]),
            e(20, 40, 6, &[1, 2]),
            e(30, 8, 3, &[]),
            e(40, 60, 2, &[1, 2, 3]),
            e(50, 12, 2, &[1]),
        ];
        let (s, arrivals) = trace_sessions(&entries, &tok(), 3).unwrap();
        let lens: Vec<usize> = s.iter().map(|s| s.turns.len()).collect();
        assert_eq!(lens, [3, 1, 1, 1]);
        assert_eq!(arrivals, [0, 10, 30, 50]);
        // Turn 1's own message: 40 − (20 + 5) tokens; turn 2's: 60 − (40 + 6).
        let own: Vec<u64> = s[0].turns.iter().map(|t| t.prompt_tokens).collect();
        assert_eq!(own, [20, 15, 14]);
        let outs: Vec<Option<u64>> = s[0].turns.iter().map(|t| t.max_tokens).collect();
        assert_eq!(outs, [Some(5), Some(6), Some(2)]);
    }
}
