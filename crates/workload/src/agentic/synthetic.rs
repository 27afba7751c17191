//! The synthetic agent workload (`--dataset-name agentic`): session trees drawn from a seed,
//! with presets for a coding agent and a research agent (docs/agents.md).
//!
//! A main agent has about `turns` turns (uniform in [turns/2, 3·turns/2]). After every turn
//! but the last it calls a tool with `tool_probability` (the next turn carries the tool's
//! result), and may spawn `fanout` sub-agents with `subagent_probability` while its depth is
//! below `depth` (the next turn carries their answers). A turn after neither is the user's
//! follow-up, after a think time. Token counts are uniform in [m/2, 3m/2] around their means;
//! tool latencies are log-normal around their mean (σ = 0.75), think times exponential.

use rand::Rng;
use rand_distr::{Distribution, Exp, LogNormal};

use super::{AgentSession, AgentTurn, Content, ToolCall};
use crate::error::WorkloadError;
use crate::rng::{stream, Purpose};

/// A preset of the generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentPreset {
    /// A coding agent: a long system prompt with tool definitions, many short turns, nearly
    /// every turn a tool call (read a file, run the tests) returning mid-sized results, now
    /// and then a pair of sub-agents.
    Coding,
    /// A research agent: fewer, longer turns, slow tools (search, fetch a page) returning
    /// large documents, often fanning out to parallel researcher sub-agents, and a long final
    /// report.
    Research,
}

impl AgentPreset {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentPreset::Coding => "coding",
            AgentPreset::Research => "research",
        }
    }
}

/// The generator's parameters (means unless said otherwise).
#[derive(Debug, Clone, PartialEq)]
pub struct AgenticConfig {
    pub num_sessions: usize,
    pub seed: u64,
    /// Turns of a main agent.
    pub turns: u32,
    /// Chance that a turn (not the last) calls a tool.
    pub tool_probability: f64,
    /// Tool latency, ms.
    pub tool_latency_ms: f64,
    /// Tokens of a tool's result.
    pub tool_result_tokens: u64,
    /// Tokens of the user's opening request.
    pub first_input_tokens: u64,
    /// Tokens of a user's follow-up.
    pub user_tokens: u64,
    /// Output tokens of a turn.
    pub output_tokens: u64,
    /// Output tokens of a main agent's last turn (its final answer).
    pub final_output_tokens: u64,
    /// Tokens of the system prompt every main agent shares (0: none).
    pub system_tokens: u64,
    /// Think time before a user's follow-up, ms.
    pub think_time_ms: f64,
    /// Chance that a turn (not the last) spawns sub-agents.
    pub subagent_probability: f64,
    /// Sub-agents per spawn.
    pub fanout: u32,
    /// Deepest sub-agent level (0: no sub-agents).
    pub depth: u32,
    /// Turns of a sub-agent.
    pub subagent_turns: u32,
    /// Tokens of the system prompt every sub-agent shares (0: none).
    pub subagent_system_tokens: u64,
    /// Output tokens of a sub-agent's last turn: the result it returns.
    pub subagent_result_tokens: u64,
}

impl AgenticConfig {
    /// The preset's parameters for `num_sessions` sessions from `seed`.
    pub fn preset(preset: AgentPreset, num_sessions: usize, seed: u64) -> Self {
        match preset {
            AgentPreset::Coding => AgenticConfig {
                num_sessions,
                seed,
                turns: 20,
                tool_probability: 0.9,
                tool_latency_ms: 1000.0,
                tool_result_tokens: 600,
                first_input_tokens: 400,
                user_tokens: 60,
                output_tokens: 180,
                final_output_tokens: 350,
                system_tokens: 6000,
                think_time_ms: 5000.0,
                subagent_probability: 0.05,
                fanout: 2,
                depth: 1,
                subagent_turns: 8,
                subagent_system_tokens: 2500,
                subagent_result_tokens: 400,
            },
            AgentPreset::Research => AgenticConfig {
                num_sessions,
                seed,
                turns: 10,
                tool_probability: 0.85,
                tool_latency_ms: 2500.0,
                tool_result_tokens: 1800,
                first_input_tokens: 150,
                user_tokens: 60,
                output_tokens: 250,
                final_output_tokens: 1500,
                system_tokens: 2500,
                think_time_ms: 5000.0,
                subagent_probability: 0.3,
                fanout: 3,
                depth: 1,
                subagent_turns: 6,
                subagent_system_tokens: 1500,
                subagent_result_tokens: 600,
            },
        }
    }

    /// Refuses parameters the generator cannot honour.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        let bad = |m: String| Err(WorkloadError::InvalidConfig(m));
        for (name, p) in [
            ("tool probability", self.tool_probability),
            ("sub-agent probability", self.subagent_probability),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return bad(format!("the {name} must be in [0, 1], got {p}"));
            }
        }
        for (name, v) in [
            ("tool latency", self.tool_latency_ms),
            ("think time", self.think_time_ms),
        ] {
            if !v.is_finite() || !(0.0..=1e9).contains(&v) {
                return bad(format!(
                    "the {name} must be a non-negative number of ms (at most 1e9), got {v}"
                ));
            }
        }
        if self.turns == 0 || self.subagent_turns == 0 {
            return bad("agents need at least one turn".into());
        }
        if self.turns > 10_000 || self.subagent_turns > 10_000 {
            return bad("at most 10000 turns per agent".into());
        }
        if self.fanout > 64 {
            return bad(format!("a fan-out of at most 64, got {}", self.fanout));
        }
        if self.depth as usize > super::MAX_DEPTH {
            return bad(format!(
                "sub-agents nest at most {} levels, got {}",
                super::MAX_DEPTH,
                self.depth
            ));
        }
        for (name, v) in [
            ("first input", self.first_input_tokens),
            ("output", self.output_tokens),
            ("final output", self.final_output_tokens),
            ("sub-agent result", self.subagent_result_tokens),
        ] {
            if v == 0 {
                return bad(format!("the {name} needs at least 1 token"));
            }
        }
        for v in [
            self.tool_result_tokens,
            self.first_input_tokens,
            self.user_tokens,
            self.output_tokens,
            self.final_output_tokens,
            self.system_tokens,
            self.subagent_system_tokens,
            self.subagent_result_tokens,
        ] {
            if v > super::MAX_MESSAGE_TOKENS / 2 {
                return bad(format!(
                    "token counts of at most {}, got {v}",
                    super::MAX_MESSAGE_TOKENS / 2
                ));
            }
        }
        Ok(())
    }
}

struct Draw<'a, R> {
    cfg: &'a AgenticConfig,
    rng: R,
}

impl<R: Rng> Draw<'_, R> {
    /// Uniform in [m/2, 3m/2], at least `min`.
    fn tokens(&mut self, mean: u64, min: u64) -> u64 {
        if mean == 0 {
            return min;
        }
        let lo = (mean / 2).max(1);
        let hi = mean + mean / 2;
        self.rng.random_range(lo..=hi).max(min)
    }

    fn turns(&mut self, mean: u32) -> usize {
        let lo = (mean / 2).max(1);
        let hi = (mean + mean / 2).max(1);
        self.rng.random_range(lo..=hi) as usize
    }

    fn latency_ns(&mut self) -> u64 {
        let mean = self.cfg.tool_latency_ms;
        if mean <= 0.0 {
            return 0;
        }
        let sigma: f64 = 0.75;
        let ms = LogNormal::new(mean.ln() - sigma * sigma / 2.0, sigma)
            .map_or(mean, |d| d.sample(&mut self.rng));
        (ms.min(1e9) * 1e6).round() as u64
    }

    fn think_ns(&mut self) -> u64 {
        let mean = self.cfg.think_time_ms;
        if mean <= 0.0 {
            return 0;
        }
        let ms = Exp::new(1.0 / mean).map_or(mean, |d| d.sample(&mut self.rng));
        (ms.min(1e9) * 1e6).round() as u64
    }

    fn agent(&mut self, depth: u32) -> AgentSession {
        let main = depth == 0;
        let c = self.cfg;
        let n = self.turns(if main { c.turns } else { c.subagent_turns });
        let system_tokens = if main {
            c.system_tokens
        } else {
            c.subagent_system_tokens
        };
        let first = if main {
            c.first_input_tokens
        } else {
            c.first_input_tokens.div_ceil(2)
        };
        let mut turns: Vec<AgentTurn> = Vec::with_capacity(n);
        let mut next_input = self.tokens(first, 1);
        let mut next_think = 0;
        for k in 0..n {
            let last = k + 1 == n;
            let output = if last {
                self.tokens(
                    if main {
                        c.final_output_tokens
                    } else {
                        c.subagent_result_tokens
                    },
                    1,
                )
            } else {
                self.tokens(c.output_tokens, 1)
            };
            let mut turn = AgentTurn {
                input: Content::Tokens(next_input),
                output_tokens: output,
                think_time_ns: Some(next_think),
                tool: None,
                subagents: Vec::new(),
            };
            if !last {
                let tool = self.rng.random_bool(c.tool_probability);
                let spawn =
                    depth < c.depth && c.fanout > 0 && self.rng.random_bool(c.subagent_probability);
                if tool {
                    turn.tool = Some(ToolCall {
                        name: String::new(),
                        latency_ns: self.latency_ns(),
                    });
                }
                if spawn {
                    turn.subagents = (0..c.fanout).map(|_| self.agent(depth + 1)).collect();
                }
                (next_input, next_think) = if tool {
                    (self.tokens(c.tool_result_tokens, 1), 0)
                } else if spawn {
                    (0, 0)
                } else {
                    (self.tokens(c.user_tokens, 1), self.think_ns())
                };
            }
            turns.push(turn);
        }
        AgentSession {
            id: String::new(),
            arrival_ns: None,
            system: (system_tokens > 0).then_some(Content::Tokens(system_tokens)),
            turns,
        }
    }
}

/// `cfg.num_sessions` session trees, deterministic in `cfg.seed` (each session from its own
/// stream, so session i is the same whatever the count), named `agent-0`, `agent-1`, ….
pub fn generate(cfg: &AgenticConfig) -> Result<Vec<AgentSession>, WorkloadError> {
    cfg.validate()?;
    Ok((0..cfg.num_sessions)
        .map(|i| {
            let mut d = Draw {
                cfg,
                rng: stream(cfg.seed, Purpose::AgentShape, i as u64),
            };
            let mut s = d.agent(0);
            s.id = format!("agent-{i}");
            s
        })
        .collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::agentic::check_tree;

    #[test]
    fn presets_give_valid_deterministic_trees_of_their_shape() {
        for preset in [AgentPreset::Coding, AgentPreset::Research] {
            let cfg = AgenticConfig::preset(preset, 40, 3);
            let a = generate(&cfg).unwrap();
            assert_eq!(a, generate(&cfg).unwrap());
            assert_eq!(a.len(), 40);
            for s in &a {
                check_tree(s, 0).unwrap();
                assert_eq!(s.system, Some(Content::Tokens(cfg.system_tokens)));
            }
            // Session i does not depend on how many were asked for.
            let fewer = generate(&AgenticConfig {
                num_sessions: 5,
                ..cfg.clone()
            })
            .unwrap();
            assert_eq!(&a[..5], &fewer[..]);
            let turns: usize = a.iter().map(|s| s.turns.len()).sum();
            let tools = a
                .iter()
                .flat_map(|s| &s.turns)
                .filter(|t| t.tool.is_some())
                .count();
            let share = tools as f64 / (turns - a.len()) as f64;
            assert!((share - cfg.tool_probability).abs() < 0.1, "{share}");
            let agents: usize = a.iter().map(AgentSession::total_agents).sum();
            assert!(agents > a.len(), "{preset:?} spawns sub-agents");
        }
        let other = generate(&AgenticConfig::preset(AgentPreset::Coding, 40, 4)).unwrap();
        assert_ne!(
            other,
            generate(&AgenticConfig::preset(AgentPreset::Coding, 40, 3)).unwrap()
        );
    }

    #[test]
    fn bad_parameters_are_refused() {
        let base = AgenticConfig::preset(AgentPreset::Coding, 1, 0);
        for bad in [
            AgenticConfig {
                tool_probability: 1.5,
                ..base.clone()
            },
            AgenticConfig {
                tool_latency_ms: f64::NAN,
                ..base.clone()
            },
            AgenticConfig {
                turns: 0,
                ..base.clone()
            },
            AgenticConfig {
                depth: 99,
                ..base.clone()
            },
            AgenticConfig {
                output_tokens: 0,
                ..base.clone()
            },
        ] {
            assert!(generate(&bad).is_err(), "{bad:?}");
        }
    }
}
