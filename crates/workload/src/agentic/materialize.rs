//! From [`AgentSession`]s (messages maybe only counted) to [`AgentScript`]s (every message a
//! text of exactly its token count under the run's tokenizer), with a unique node id for
//! every agent: a main session keeps its id, a sub-agent is `PARENT/TURN.INDEX` (spawned after
//! the parent's turn TURN, the INDEX-th of them).

use std::collections::{HashMap, HashSet};

use servebench_tokenizer::Tokenizer;

use super::{AgentSession, Content, ToolCall};
use crate::error::WorkloadError;
use crate::rng::{stream, Purpose};

/// A message with its length under the run's tokenizer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TokenMessage {
    pub text: String,
    pub tokens: u64,
}

/// One model call as the load generator sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptTurn {
    /// The turn's own new message (possibly empty after sub-agents: their results are then
    /// the whole new context).
    pub input: TokenMessage,
    pub max_tokens: u64,
    /// Pause before the turn once every wait before it is over, ns (the run's default
    /// resolved).
    pub think_time_ns: u64,
    pub tool: Option<ToolCall>,
    pub subagents: Vec<AgentScript>,
}

/// One agent of a session tree, ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentScript {
    /// Unique in the run: what every record of this agent carries as `session_id`.
    pub id: String,
    pub system: Option<TokenMessage>,
    pub turns: Vec<ScriptTurn>,
}

impl AgentScript {
    /// Model calls of this agent and all its sub-agents.
    pub fn total_turns(&self) -> usize {
        self.turns
            .iter()
            .map(|t| {
                1 + t
                    .subagents
                    .iter()
                    .map(AgentScript::total_turns)
                    .sum::<usize>()
            })
            .sum()
    }

    /// Output tokens of the last turn: what a sub-agent returns to its parent.
    pub fn final_output_tokens(&self) -> u64 {
        self.turns.last().map_or(0, |t| t.max_tokens)
    }

    /// Every agent of the tree with its depth, parent first.
    pub fn walk(&self) -> Vec<(&AgentScript, u32)> {
        let mut out = Vec::new();
        fn go<'a>(a: &'a AgentScript, depth: u32, out: &mut Vec<(&'a AgentScript, u32)>) {
            out.push((a, depth));
            for t in &a.turns {
                for s in &t.subagents {
                    go(s, depth + 1, out);
                }
            }
        }
        go(self, 0, &mut out);
        out
    }
}

/// Texts of exact lengths, from the run's seed: a turn's text from its agent's id and turn
/// index, a system prompt given by length from the length alone (shared).
struct Writer<'a> {
    tok: &'a Tokenizer,
    seed: u64,
    systems: HashMap<u64, TokenMessage>,
}

fn key(id: &str, turn: usize) -> u64 {
    // FNV-1a: stable across platforms and runs.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes().chain((turn as u64).to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl Writer<'_> {
    fn counted(&self, text: &str) -> TokenMessage {
        TokenMessage {
            tokens: self.tok.count(text) as u64,
            text: text.to_owned(),
        }
    }

    fn synth(&self, purpose: Purpose, index: u64, len: u64) -> Result<TokenMessage, WorkloadError> {
        if len == 0 {
            return Ok(TokenMessage::default());
        }
        let n = usize::try_from(len)
            .map_err(|_| WorkloadError::InvalidConfig(format!("a message of {len} tokens")))?;
        let mut rng = stream(self.seed, purpose, index);
        let t = crate::synth::exact_text(self.tok, &mut rng, n)?;
        Ok(TokenMessage {
            tokens: t.ids.len() as u64,
            text: t.text,
        })
    }

    fn system(&mut self, c: &Content) -> Result<Option<TokenMessage>, WorkloadError> {
        Ok(match c {
            Content::Text(t) if t.is_empty() => None,
            Content::Text(t) => Some(self.counted(t)),
            Content::Tokens(0) => None,
            Content::Tokens(n) => {
                if let Some(m) = self.systems.get(n) {
                    return Ok(Some(m.clone()));
                }
                let m = self.synth(Purpose::AgentSystem, *n, *n)?;
                self.systems.insert(*n, m.clone());
                Some(m)
            }
        })
    }

    fn agent(
        &mut self,
        s: &AgentSession,
        id: String,
        default_think_ns: u64,
    ) -> Result<AgentScript, WorkloadError> {
        let system = match &s.system {
            Some(c) => self.system(c)?,
            None => None,
        };
        let mut turns = Vec::with_capacity(s.turns.len());
        for (k, t) in s.turns.iter().enumerate() {
            let input = match &t.input {
                Content::Text(text) => self.counted(text),
                Content::Tokens(n) => self.synth(Purpose::AgentText, key(&id, k), *n)?,
            };
            let subagents = t
                .subagents
                .iter()
                .enumerate()
                .map(|(j, sub)| self.agent(sub, format!("{id}/{k}.{j}"), default_think_ns))
                .collect::<Result<Vec<_>, _>>()?;
            turns.push(ScriptTurn {
                input,
                max_tokens: t.output_tokens,
                think_time_ns: t.think_time_ns.unwrap_or(default_think_ns),
                tool: t.tool.clone(),
                subagents,
            });
        }
        Ok(AgentScript { id, system, turns })
    }
}

/// Scripts for `sessions`: texts of exact token counts under `tok`, seeded by `seed`; turns
/// without a think time take `default_think_ns`. A main session id that repeats gets `#2`,
/// `#3`, … so every agent's records stay apart.
pub fn materialize(
    sessions: &[AgentSession],
    tok: &Tokenizer,
    seed: u64,
    default_think_ns: u64,
) -> Result<Vec<AgentScript>, WorkloadError> {
    let mut w = Writer {
        tok,
        seed,
        systems: HashMap::new(),
    };
    let mut seen: HashSet<String> = HashSet::new();
    let mut out = Vec::with_capacity(sessions.len());
    for s in sessions {
        let mut id = s.id.clone();
        let mut n = 1;
        while !seen.insert(id.clone()) {
            n += 1;
            id = format!("{}#{n}", s.id);
        }
        out.push(w.agent(s, id, default_think_ns)?);
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::agentic::AgentTurn;

    fn session(id: &str, system: Option<Content>) -> AgentSession {
        let child = AgentSession {
            id: String::new(),
            arrival_ns: None,
            system: Some(Content::Tokens(12)),
            turns: vec![AgentTurn {
                input: Content::Tokens(9),
                output_tokens: 5,
                think_time_ns: Some(3),
                tool: None,
                subagents: Vec::new(),
            }],
        };
        AgentSession {
            id: id.into(),
            arrival_ns: None,
            system,
            turns: vec![
                AgentTurn {
                    input: Content::Text("fix the failing test".into()),
                    output_tokens: 4,
                    think_time_ns: None,
                    tool: Some(ToolCall {
                        name: "bash".into(),
                        latency_ns: 7,
                    }),
                    subagents: vec![child.clone(), child],
                },
                AgentTurn {
                    input: Content::Tokens(0),
                    output_tokens: 4,
                    think_time_ns: None,
                    tool: None,
                    subagents: Vec::new(),
                },
            ],
        }
    }

    #[test]
    fn messages_get_exact_lengths_and_agents_unique_ids() {
        let tok = Tokenizer::builtin();
        let sessions = [
            session("a", Some(Content::Tokens(30))),
            session("a", Some(Content::Tokens(30))),
        ];
        let out = materialize(&sessions, &tok, 1, 99).unwrap();
        assert_eq!(out[0].id, "a");
        assert_eq!(out[1].id, "a#2");
        let sys = out[0].system.as_ref().unwrap();
        assert_eq!(sys.tokens, 30);
        assert_eq!(tok.count(&sys.text), 30);
        // One system text per length, shared.
        assert_eq!(out[1].system, out[0].system);
        let t0 = &out[0].turns[0];
        assert_eq!(t0.input.text, "fix the failing test");
        assert_eq!(t0.think_time_ns, 99);
        let ids: Vec<&str> = t0.subagents.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["a/0.0", "a/0.1"]);
        let sub = &t0.subagents[0];
        assert_eq!(sub.turns[0].input.tokens, 9);
        assert_eq!(tok.count(&sub.turns[0].input.text), 9);
        assert_eq!(sub.turns[0].think_time_ns, 3);
        // Sub-agents' own texts differ (keyed by their ids).
        assert_ne!(sub.turns[0].input.text, t0.subagents[1].turns[0].input.text);
        assert_eq!(out[0].turns[1].input, TokenMessage::default());
        assert_eq!(out[0].total_turns(), 4);
        let walk: Vec<(&str, u32)> = out[0]
            .walk()
            .iter()
            .map(|(a, d)| (a.id.as_str(), *d))
            .collect();
        assert_eq!(walk, [("a", 0), ("a/0.0", 1), ("a/0.1", 1)]);
        // Deterministic in the seed.
        assert_eq!(materialize(&sessions, &tok, 1, 99).unwrap(), out);
    }
}
