//! Agent sessions (`--dataset-name agentic`, docs/agents.md): trees of model calls. A session
//! is a main agent whose turns may call a tool (the client waits the tool's latency, then the
//! next turn carries the result) and may spawn sub-agents that run in parallel and return
//! their final answers to the parent's next turn. Every turn re-sends the agent's whole
//! context, so the context grows by the previous answer, the sub-agents' results and the new
//! message, exactly.
//!
//! Three sources give the same trees:
//! - [`trace`]: servebench's agent-trace format, JSON lines, one session tree per line;
//! - [`otel`]: OpenTelemetry GenAI spans in OTLP JSON (`gen_ai.*` semantic conventions);
//! - [`synthetic`]: a seeded generator with presets (coding agent, research agent).
//!
//! A source gives [`AgentSession`]s, whose messages may be only token counts;
//! [`materialize`] turns them into [`AgentScript`]s with text of exactly those counts under
//! the run's tokenizer, as the load generator sends them.

pub mod otel;
pub mod synthetic;
pub mod trace;

mod materialize;

pub use materialize::{materialize, AgentScript, ScriptTurn, TokenMessage};

/// Most tokens one message may have: larger counts are refused when read, so a hostile file
/// cannot make the client synthesise gigabytes of text.
pub const MAX_MESSAGE_TOKENS: u64 = 10_000_000;
/// Deepest nesting of sub-agents a source may give (a main agent is depth 0).
pub const MAX_DEPTH: usize = 8;
/// Longest wait (tool latency, think time) or arrival offset a source may give, ns (about 11.6
/// days): far beyond any run, and far from the end of `u64`.
pub const MAX_TIME_NS: u64 = 1_000_000 * 1_000_000_000;

/// A message as a source gives it: its text, or only its length in tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    Text(String),
    Tokens(u64),
}

impl Content {
    /// Whether the message adds nothing to the context.
    pub fn is_empty(&self) -> bool {
        match self {
            Content::Text(t) => t.is_empty(),
            Content::Tokens(n) => *n == 0,
        }
    }
}

/// A tool the agent calls after a turn's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The tool's name (for reports; empty when the source gives none).
    pub name: String,
    /// How long the client waits for it after the answer, ns.
    pub latency_ns: u64,
}

/// One model call of an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentTurn {
    /// The message this turn adds after the previous answer (and after the sub-agents'
    /// results, when the previous turn spawned some): the user's request, a tool's result.
    /// Empty only for a turn whose new context is its sub-agents' results alone.
    pub input: Content,
    /// Output tokens asked for (`max_tokens`).
    pub output_tokens: u64,
    /// Pause before this turn once every wait before it is over (the previous answer, the
    /// tool, the sub-agents; for a first turn, the session's arrival or the spawn), ns.
    /// `None` takes the run's default.
    pub think_time_ns: Option<u64>,
    /// A tool called after this turn's answer; never on the last turn.
    pub tool: Option<ToolCall>,
    /// Sub-agents spawned after this turn's answer, run in parallel; the next turn waits for
    /// all of them and carries their final answers. Never on the last turn.
    pub subagents: Vec<AgentSession>,
}

/// An agent: a main session (with an id and maybe an arrival time) or a sub-agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSession {
    /// The session's id (a sub-agent's is its label, possibly empty: its node id is derived).
    pub id: String,
    /// When the session arrives on the source's own clock, ns from the first arrival.
    pub arrival_ns: Option<u64>,
    /// The system prompt; a system prompt given by length is one text per length, shared by
    /// every agent with that length (what a prefix cache reuses across sessions).
    pub system: Option<Content>,
    /// The model calls in order, never empty.
    pub turns: Vec<AgentTurn>,
}

impl AgentSession {
    /// Model calls of this agent and all its sub-agents.
    pub fn total_turns(&self) -> usize {
        self.turns
            .iter()
            .map(|t| {
                1 + t
                    .subagents
                    .iter()
                    .map(AgentSession::total_turns)
                    .sum::<usize>()
            })
            .sum()
    }

    /// Agents in this tree, this one included.
    pub fn total_agents(&self) -> usize {
        1 + self
            .turns
            .iter()
            .flat_map(|t| &t.subagents)
            .map(AgentSession::total_agents)
            .sum::<usize>()
    }

    /// Output tokens of the last turn: what a sub-agent returns to its parent.
    pub fn final_output_tokens(&self) -> u64 {
        self.turns.last().map_or(0, |t| t.output_tokens)
    }
}

/// Checks a tree's shape (what every source must give): turns present, a first turn with a
/// message, no turn adding nothing, no tool or sub-agent after the last answer, sizes and
/// times in range, nesting not too deep. `Err` names the place (`turns[2].subagents[0]…`).
pub fn check_tree(s: &AgentSession, depth: usize) -> Result<(), String> {
    check_node(s, depth, "")
}

fn check_node(s: &AgentSession, depth: usize, at: &str) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!(
            "{at}sub-agents nest more than {MAX_DEPTH} levels deep"
        ));
    }
    if s.turns.is_empty() {
        return Err(format!("{at}an agent needs at least one turn"));
    }
    if let Some(Content::Tokens(n)) = &s.system {
        if *n > MAX_MESSAGE_TOKENS {
            return Err(format!(
                "{at}system prompt of {n} tokens (at most {MAX_MESSAGE_TOKENS})"
            ));
        }
    }
    if let Some(a) = s.arrival_ns {
        if a > MAX_TIME_NS {
            return Err(format!(
                "{at}arrival beyond {} s",
                MAX_TIME_NS / 1_000_000_000
            ));
        }
    }
    let last = s.turns.len() - 1;
    for (k, t) in s.turns.iter().enumerate() {
        let here = format!("{at}turns[{k}]: ");
        if let Content::Tokens(n) = t.input {
            if n > MAX_MESSAGE_TOKENS {
                return Err(format!(
                    "{here}input of {n} tokens (at most {MAX_MESSAGE_TOKENS})"
                ));
            }
        }
        if t.output_tokens == 0 {
            return Err(format!("{here}output_tokens must be at least 1"));
        }
        if t.output_tokens > MAX_MESSAGE_TOKENS {
            return Err(format!(
                "{here}output of {} tokens (at most {MAX_MESSAGE_TOKENS})",
                t.output_tokens
            ));
        }
        if t.input.is_empty() {
            let after_subagents = k > 0 && !s.turns[k - 1].subagents.is_empty();
            if !after_subagents {
                return Err(format!(
                    "{here}the turn adds nothing to the context: give it a message (input_tokens \
                     of at least 1, or text); only a turn after sub-agents may carry their \
                     results alone"
                ));
            }
        }
        if t.think_time_ns.is_some_and(|v| v > MAX_TIME_NS) {
            return Err(format!(
                "{here}think time beyond {} s",
                MAX_TIME_NS / 1_000_000_000
            ));
        }
        if let Some(tool) = &t.tool {
            if tool.latency_ns > MAX_TIME_NS {
                return Err(format!(
                    "{here}tool latency beyond {} s",
                    MAX_TIME_NS / 1_000_000_000
                ));
            }
        }
        if k == last && (t.tool.is_some() || !t.subagents.is_empty()) {
            return Err(format!(
                "{here}the last turn calls a tool or spawns sub-agents, but no turn follows to \
                 carry their results"
            ));
        }
        for (j, sub) in t.subagents.iter().enumerate() {
            check_node(sub, depth + 1, &format!("{at}turns[{k}].subagents[{j}]."))?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn turn(input: u64, out: u64) -> AgentTurn {
        AgentTurn {
            input: Content::Tokens(input),
            output_tokens: out,
            think_time_ns: None,
            tool: None,
            subagents: Vec::new(),
        }
    }

    fn session(turns: Vec<AgentTurn>) -> AgentSession {
        AgentSession {
            id: "s".into(),
            arrival_ns: None,
            system: None,
            turns,
        }
    }

    #[test]
    fn trees_count_their_turns_and_agents_and_are_checked() {
        let child = session(vec![turn(5, 3), turn(2, 7)]);
        let mut t0 = turn(10, 4);
        t0.subagents = vec![child.clone(), child];
        let s = session(vec![t0, turn(0, 2)]);
        assert_eq!(s.total_turns(), 6);
        assert_eq!(s.total_agents(), 3);
        assert_eq!(s.turns[0].subagents[0].final_output_tokens(), 7);
        check_tree(&s, 0).unwrap();
        // Without the sub-agents, the second turn adds nothing.
        let bare = session(vec![turn(10, 4), turn(0, 2)]);
        let e = check_tree(&bare, 0).unwrap_err();
        assert!(e.starts_with("turns[1]: the turn adds nothing"), "{e}");
        let mut last = turn(1, 1);
        last.tool = Some(ToolCall {
            name: "x".into(),
            latency_ns: 1,
        });
        let e = check_tree(&session(vec![last]), 0).unwrap_err();
        assert!(e.contains("last turn"), "{e}");
        let mut deep = session(vec![turn(1, 1)]);
        for _ in 0..=MAX_DEPTH {
            let mut t = turn(1, 1);
            t.subagents = vec![deep];
            deep = session(vec![t, turn(1, 1)]);
        }
        let e = check_tree(&deep, 0).unwrap_err();
        assert!(e.contains("nest more than"), "{e}");
        assert!(e.starts_with("turns[0].subagents[0].turns[0]"), "{e}");
    }
}
