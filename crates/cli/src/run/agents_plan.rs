//! `--dataset-name agentic` (docs/agents.md): the agent flags, checked into an [`AgentPlan`].
//!
//! Without `--dataset-path` the sessions are synthetic (`--agent-preset` and the
//! `--agent-*` parameters over it); with one they replay a file: servebench's agent-trace
//! JSON lines or OpenTelemetry GenAI spans in OTLP JSON (detected, or `--agent-trace-format`).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use http::HeaderName;
use servebench_workload::agentic::synthetic::{AgentPreset, AgenticConfig};

use super::args::{DatasetName, RunArgs};
use super::plan::{ApiFlavor, DatasetChoice, Endpoint, Traffic};

/// `--agent-preset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PresetArg {
    /// A coding agent: long shared system prompt, many short turns, nearly every one a tool
    /// call, now and then two sub-agents.
    Coding,
    /// A research agent: slow tools returning long documents, parallel researcher
    /// sub-agents, a long final report.
    Research,
}

impl From<PresetArg> for AgentPreset {
    fn from(p: PresetArg) -> Self {
        match p {
            PresetArg::Coding => AgentPreset::Coding,
            PresetArg::Research => AgentPreset::Research,
        }
    }
}

/// `--agent-trace-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AgentTraceFormat {
    /// servebench's agent-trace JSON lines (one session tree per line).
    Servebench,
    /// OpenTelemetry GenAI spans in OTLP JSON (or JSON lines of OTLP requests).
    Otel,
}

/// The flags of `--dataset-name agentic`. Unset parameters take the preset's value.
#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct AgentArgs {
    /// Synthetic agent sessions of this kind [default: coding].
    #[arg(long, value_enum, help_heading = "Agents")]
    pub agent_preset: Option<PresetArg>,
    /// Turns of a main agent, on average (uniform in [N/2, 3N/2]).
    #[arg(long, value_name = "N", help_heading = "Agents")]
    pub agent_turns: Option<u32>,
    /// Chance that a turn calls a tool (its result is the next turn's message).
    #[arg(long, value_name = "P", help_heading = "Agents")]
    pub agent_tool_probability: Option<f64>,
    /// Mean tool latency (log-normal): the client's wait between an answer and the next turn.
    #[arg(long, value_name = "MS", help_heading = "Agents")]
    pub agent_tool_latency_ms: Option<f64>,
    /// Mean tokens of a tool's result.
    #[arg(long, value_name = "N", help_heading = "Agents")]
    pub agent_tool_result_tokens: Option<u64>,
    /// Mean tokens of the user's opening request.
    #[arg(long, value_name = "N", help_heading = "Agents")]
    pub agent_input_tokens: Option<u64>,
    /// Mean tokens of a user's follow-up (a turn after no tool).
    #[arg(long, value_name = "N", help_heading = "Agents")]
    pub agent_user_tokens: Option<u64>,
    /// Mean output tokens of a turn.
    #[arg(long, value_name = "N", help_heading = "Agents")]
    pub agent_output_tokens: Option<u64>,
    /// Mean output tokens of a main agent's final answer.
    #[arg(long, value_name = "N", help_heading = "Agents")]
    pub agent_final_output_tokens: Option<u64>,
    /// Tokens of the system prompt all main agents share (0: none).
    #[arg(long, value_name = "N", help_heading = "Agents")]
    pub agent_system_tokens: Option<u64>,
    /// Mean think time before a user's follow-up (synthetic); with --dataset-path, the think
    /// time of turns whose trace gives none [default: 0 there].
    #[arg(long, value_name = "MS", help_heading = "Agents")]
    pub agent_think_time_ms: Option<f64>,
    /// Chance that a turn spawns sub-agents.
    #[arg(long, value_name = "P", help_heading = "Agents")]
    pub agent_subagent_probability: Option<f64>,
    /// Sub-agents per spawn, run in parallel.
    #[arg(long, value_name = "N", help_heading = "Agents")]
    pub agent_fanout: Option<u32>,
    /// Deepest level of sub-agents (0: none).
    #[arg(long, value_name = "N", help_heading = "Agents")]
    pub agent_depth: Option<u32>,
    /// Turns of a sub-agent, on average.
    #[arg(long, value_name = "N", help_heading = "Agents")]
    pub agent_subagent_turns: Option<u32>,
    /// Tokens of the system prompt all sub-agents share (0: none).
    #[arg(long, value_name = "N", help_heading = "Agents")]
    pub agent_subagent_system_tokens: Option<u64>,
    /// Mean output tokens of a sub-agent's final answer (what it returns to its parent).
    #[arg(long, value_name = "N", help_heading = "Agents")]
    pub agent_subagent_result_tokens: Option<u64>,
    /// The format of --dataset-path [default: detected: OTLP JSON when it holds
    /// resourceSpans, else servebench's agent-trace lines].
    #[arg(long, value_enum, help_heading = "Agents")]
    pub agent_trace_format: Option<AgentTraceFormat>,
    /// A fixed population of N users, each starting a new session as soon as its previous
    /// one ended (instead of sessions arriving at --request-rate).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), help_heading = "Agents")]
    pub num_users: Option<u64>,
    /// Send every request's agent id in this HTTP header (sticky routing by session).
    #[arg(long, value_name = "NAME", help_heading = "Agents")]
    pub session_header: Option<String>,
}

/// Where the sessions come from.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentSource {
    /// The generator's parameters (`num_sessions` and `seed` are the run's).
    Synthetic(AgenticConfig),
    /// A file; `None`: its format is detected.
    Trace {
        path: PathBuf,
        format: Option<AgentTraceFormat>,
        /// Think time of turns whose trace gives none, ns.
        default_think_ns: u64,
    },
}

/// An agent run, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentPlan {
    pub source: AgentSource,
    /// `--num-users`: a closed population instead of open-loop arrivals.
    pub num_users: Option<usize>,
    pub session_header: Option<HeaderName>,
    /// The flags as given, so the plan turns back into the same command line.
    pub flags: AgentArgs,
}

impl AgentPlan {
    /// The trace file, when the sessions replay one.
    pub fn path(&self) -> Option<&PathBuf> {
        match &self.source {
            AgentSource::Trace { path, .. } => Some(path),
            AgentSource::Synthetic(_) => None,
        }
    }
}

/// Most sessions one agent run holds (each is a tree of many requests with its texts).
pub const MAX_SESSIONS: usize = 100_000;

fn in_range<T: PartialOrd + std::fmt::Display + Copy>(
    flag: &str,
    v: Option<T>,
    lo: T,
    hi: T,
    unit: &str,
) -> Result<()> {
    if let Some(x) = v {
        // NaN fails both comparisons, so it is refused too.
        if !(x >= lo && x <= hi) {
            bail!("{flag} {x} is out of range (allowed: {lo} to {hi}{unit})");
        }
    }
    Ok(())
}

/// Each generator flag against its range, named.
fn check_ranges(f: &AgentArgs) -> Result<()> {
    const MS: f64 = 1e9;
    const TOKENS: u64 = servebench_workload::agentic::MAX_MESSAGE_TOKENS / 2;
    in_range(
        "--agent-tool-probability",
        f.agent_tool_probability,
        0.0,
        1.0,
        "",
    )?;
    in_range(
        "--agent-subagent-probability",
        f.agent_subagent_probability,
        0.0,
        1.0,
        "",
    )?;
    in_range(
        "--agent-tool-latency-ms",
        f.agent_tool_latency_ms,
        0.0,
        MS,
        " ms",
    )?;
    in_range(
        "--agent-think-time-ms",
        f.agent_think_time_ms,
        0.0,
        MS,
        " ms",
    )?;
    in_range("--agent-turns", f.agent_turns, 1, 10_000, "")?;
    in_range(
        "--agent-subagent-turns",
        f.agent_subagent_turns,
        1,
        10_000,
        "",
    )?;
    in_range("--agent-fanout", f.agent_fanout, 0, 64, "")?;
    in_range(
        "--agent-depth",
        f.agent_depth,
        0,
        servebench_workload::agentic::MAX_DEPTH as u32,
        "",
    )?;
    for (flag, v, lo) in [
        ("--agent-tool-result-tokens", f.agent_tool_result_tokens, 0),
        ("--agent-input-tokens", f.agent_input_tokens, 1),
        ("--agent-user-tokens", f.agent_user_tokens, 0),
        ("--agent-output-tokens", f.agent_output_tokens, 1),
        (
            "--agent-final-output-tokens",
            f.agent_final_output_tokens,
            1,
        ),
        ("--agent-system-tokens", f.agent_system_tokens, 0),
        (
            "--agent-subagent-system-tokens",
            f.agent_subagent_system_tokens,
            0,
        ),
        (
            "--agent-subagent-result-tokens",
            f.agent_subagent_result_tokens,
            1,
        ),
    ] {
        in_range(flag, v, lo, TOKENS, " tokens")?;
    }
    Ok(())
}

/// `--dataset-name agentic`'s plan from the flags.
pub fn plan(a: &RunArgs) -> Result<AgentPlan> {
    let f = &a.agents;
    check_ranges(f)?;
    if a.num_prompts > MAX_SESSIONS {
        bail!(
            "--num-prompts {} agent sessions are more than one run holds (allowed: 1 to {MAX_SESSIONS} sessions); split the load over runs",
            a.num_prompts
        );
    }
    let think = f.agent_think_time_ms;
    let session_header = f
        .session_header
        .as_deref()
        .map(|n| {
            HeaderName::try_from(n)
                .with_context(|| format!("--session-header {n:?} is not an HTTP header name"))
        })
        .transpose()?;
    let source = match &a.dataset_path {
        Some(path) => {
            let generator_flags = [
                ("--agent-preset", f.agent_preset.is_some()),
                ("--agent-turns", f.agent_turns.is_some()),
                (
                    "--agent-tool-probability",
                    f.agent_tool_probability.is_some(),
                ),
                ("--agent-tool-latency-ms", f.agent_tool_latency_ms.is_some()),
                (
                    "--agent-tool-result-tokens",
                    f.agent_tool_result_tokens.is_some(),
                ),
                ("--agent-input-tokens", f.agent_input_tokens.is_some()),
                ("--agent-user-tokens", f.agent_user_tokens.is_some()),
                ("--agent-output-tokens", f.agent_output_tokens.is_some()),
                (
                    "--agent-final-output-tokens",
                    f.agent_final_output_tokens.is_some(),
                ),
                ("--agent-system-tokens", f.agent_system_tokens.is_some()),
                (
                    "--agent-subagent-probability",
                    f.agent_subagent_probability.is_some(),
                ),
                ("--agent-fanout", f.agent_fanout.is_some()),
                ("--agent-depth", f.agent_depth.is_some()),
                ("--agent-subagent-turns", f.agent_subagent_turns.is_some()),
                (
                    "--agent-subagent-system-tokens",
                    f.agent_subagent_system_tokens.is_some(),
                ),
                (
                    "--agent-subagent-result-tokens",
                    f.agent_subagent_result_tokens.is_some(),
                ),
            ];
            if let Some((flag, _)) = generator_flags.iter().find(|(_, on)| *on) {
                bail!(
                    "{flag} shapes synthetic agent sessions; with --dataset-path {} the sessions \
                     replay the file (drop one or the other)",
                    path.display()
                );
            }
            AgentSource::Trace {
                path: path.clone(),
                format: f.agent_trace_format,
                default_think_ns: think.map_or(0, |ms| (ms * 1e6).round() as u64),
            }
        }
        None => {
            if f.agent_trace_format.is_some() {
                bail!("--agent-trace-format needs --dataset-path FILE (the trace to replay)");
            }
            let preset = f.agent_preset.unwrap_or(PresetArg::Coding).into();
            let mut c = AgenticConfig::preset(preset, a.num_prompts, a.seed);
            macro_rules! set {
                ($flag:ident, $field:ident) => {
                    if let Some(v) = f.$flag {
                        c.$field = v;
                    }
                };
            }
            set!(agent_turns, turns);
            set!(agent_tool_probability, tool_probability);
            set!(agent_tool_latency_ms, tool_latency_ms);
            set!(agent_tool_result_tokens, tool_result_tokens);
            set!(agent_input_tokens, first_input_tokens);
            set!(agent_user_tokens, user_tokens);
            set!(agent_output_tokens, output_tokens);
            set!(agent_final_output_tokens, final_output_tokens);
            set!(agent_system_tokens, system_tokens);
            set!(agent_think_time_ms, think_time_ms);
            set!(agent_subagent_probability, subagent_probability);
            set!(agent_fanout, fanout);
            set!(agent_depth, depth);
            set!(agent_subagent_turns, subagent_turns);
            set!(agent_subagent_system_tokens, subagent_system_tokens);
            set!(agent_subagent_result_tokens, subagent_result_tokens);
            c.validate()
                .map_err(|e| anyhow::anyhow!("--agent-* flags: {e}"))?;
            AgentSource::Synthetic(c)
        }
    };
    Ok(AgentPlan {
        source,
        num_users: f
            .num_users
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        session_header,
        flags: f.clone(),
    })
}

/// Refuses the agent flags with another dataset (they would be silently ignored).
pub fn check_unused(a: &RunArgs) -> Result<()> {
    if a.dataset_name != DatasetName::Agentic && a.agents != AgentArgs::default() {
        bail!(
            "the --agent-*, --num-users and --session-header flags apply to --dataset-name \
             agentic (the dataset is {})",
            a.dataset_name.as_str()
        );
    }
    Ok(())
}

/// What an agent run needs of the rest of the plan: the chat endpoint, a run bounded by its
/// sessions, one way of starting them.
pub fn check_run(
    a: &RunArgs,
    dataset: &DatasetChoice,
    endpoint: &Endpoint,
    traffic: &Traffic,
) -> Result<()> {
    let DatasetChoice::Agentic(p) = dataset else {
        return Ok(());
    };
    if endpoint.flavor != ApiFlavor::OpenaiChat {
        bail!(
            "--dataset-name agentic sends each agent's context as chat messages: use --backend \
             openai-chat (endpoint /v1/chat/completions), not --backend {}",
            endpoint.flavor.as_str()
        );
    }
    if a.multi_turn {
        bail!("--dataset-name agentic runs sessions of its own: drop --multi-turn");
    }
    if traffic.duration_s.is_some() || traffic.ramp_up.is_some() {
        bail!("--dataset-name agentic runs its sessions once: --duration and --ramp-up-strategy are not supported with it");
    }
    if p.num_users.is_some() {
        if traffic.max_concurrency.is_some() {
            bail!("--num-users is a closed population (each user runs one session at a time): drop --max-concurrency");
        }
        if traffic.request_rate.is_finite() || traffic.burstiness != 1.0 {
            bail!("--num-users starts sessions as users finish them: drop --request-rate and --burstiness");
        }
    }
    if a.shard.is_some() || a.shards.is_some() || a.start_at.is_some() {
        bail!("--shard, --shards and --start-at split a schedule of requests; an agent run's sessions are not split: drop them");
    }
    if !a.lora_modules.is_empty() {
        bail!("--lora-modules is not supported with --dataset-name agentic");
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::plan::RunPlan;
    use super::*;

    fn plan_of(flags: &[&str]) -> Result<RunPlan> {
        RunPlan::from_args(&RunArgs::from_flags(flags).map_err(anyhow::Error::msg)?)
    }

    const CHAT: [&str; 4] = ["--backend", "openai-chat", "--dataset-name", "agentic"];

    #[test]
    fn agent_flags_round_trip_and_shape_the_generator() {
        let p = plan_of(
            &[
                &CHAT[..],
                &[
                    "--agent-preset",
                    "research",
                    "--agent-turns",
                    "4",
                    "--agent-tool-latency-ms",
                    "25",
                    "--num-users",
                    "3",
                    "--session-header",
                    "x-session-id",
                    "--num-prompts",
                    "7",
                ],
            ]
            .concat(),
        )
        .unwrap();
        let DatasetChoice::Agentic(a) = &p.dataset else {
            panic!("{:?}", p.dataset)
        };
        let AgentSource::Synthetic(c) = &a.source else {
            panic!()
        };
        assert_eq!(c.turns, 4);
        assert_eq!(c.tool_latency_ms, 25.0);
        assert_eq!(c.num_sessions, 7);
        assert_eq!(c.fanout, 3, "the research preset's");
        assert_eq!(a.num_users, Some(3));
        assert_eq!(a.session_header.as_ref().unwrap().as_str(), "x-session-id");
        assert!(p.ignore_eos());
        let back = RunPlan::from_args(&p.to_args()).unwrap();
        assert_eq!(back.dataset, p.dataset);
        let t = plan_of(
            &[
                &CHAT[..],
                &["--dataset-path", "t.jsonl", "--agent-think-time-ms", "5"],
            ]
            .concat(),
        )
        .unwrap();
        let DatasetChoice::Agentic(a) = &t.dataset else {
            panic!()
        };
        assert_eq!(
            a.source,
            AgentSource::Trace {
                path: "t.jsonl".into(),
                format: None,
                default_think_ns: 5_000_000
            }
        );
        assert_eq!(RunPlan::from_args(&t.to_args()).unwrap().dataset, t.dataset);
    }

    #[test]
    fn agent_refusals_say_what_to_do() {
        let refused = |flags: &[&str], needle: &str| {
            let e = plan_of(flags).unwrap_err().to_string();
            assert!(e.contains(needle), "wanted {needle:?}: {e}");
        };
        refused(&["--dataset-name", "agentic"], "use --backend openai-chat");
        refused(&["--agent-turns", "3"], "apply to --dataset-name agentic");
        refused(&["--num-users", "3"], "apply to --dataset-name agentic");
        refused(
            &[&CHAT[..], &["--num-users", "2", "--max-concurrency", "2"]].concat(),
            "drop --max-concurrency",
        );
        refused(
            &[&CHAT[..], &["--num-users", "2", "--request-rate", "2"]].concat(),
            "drop --request-rate",
        );
        refused(
            &[&CHAT[..], &["--dataset-path", "x", "--agent-turns", "2"]].concat(),
            "replay the file",
        );
        refused(
            &[&CHAT[..], &["--agent-trace-format", "otel"]].concat(),
            "needs --dataset-path",
        );
        refused(
            &[&CHAT[..], &["--agent-tool-probability", "2"]].concat(),
            "--agent-tool-probability 2 is out of range (allowed: 0 to 1)",
        );
        refused(
            &[&CHAT[..], &["--agent-tool-latency-ms=nan"]].concat(),
            "allowed: 0 to 1000000000 ms",
        );
        refused(
            &[&CHAT[..], &["--agent-turns", "0"]].concat(),
            "allowed: 1 to 10000",
        );
        refused(
            &[&CHAT[..], &["--num-prompts", "1000000"]].concat(),
            "allowed: 1 to 100000 sessions",
        );
        refused(
            &[&CHAT[..], &["--session-header", "bad header"]].concat(),
            "not an HTTP header name",
        );
        refused(
            &[&CHAT[..], &["--multi-turn"]].concat(),
            "drop --multi-turn",
        );
        refused(&[&CHAT[..], &["--duration", "5"]].concat(), "--duration");
    }
}
