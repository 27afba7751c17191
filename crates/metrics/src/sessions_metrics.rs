//! Agent runs (`--dataset-name agentic`, docs/agents.md): what a session tree's user felt.
//!
//! The load generator reports one [`AgentNode`] per agent that ran (a main session or a
//! sub-agent): when it started and ended and where its time went — on the server (its own
//! requests, release to done), on tools, waiting for its sub-agents, thinking, queued for a
//! session slot. Its requests are the records whose `session_id` is the node's id. From both,
//! [`agent_stats`] gives per-session figures (completion time, turns, server vs tool time),
//! their distribution, and a by-depth table of TTFT, time to first answer token and cached
//! prompt tokens.
//!
//! Tool waits are no request's time: they never enter a record's figures (a turn after a
//! tool is due when the tool is done), and they are part of the session's completion time.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::record::RequestRecord;
use crate::stats;
use crate::units::ns_to_ms;

/// One agent of a session tree, as it ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentNode {
    /// The agent's id: its records' `session_id`. A main session's own id; a sub-agent's is
    /// `PARENT/TURN.INDEX`.
    pub id: String,
    /// The main session's id.
    pub session: String,
    /// The parent agent's id (absent for a main session).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// 0 for a main session, 1 for its sub-agents, …
    pub depth: u32,
    /// When it started, ns from the run start: the session's arrival, or the end of the
    /// parent's answer that spawned it.
    pub start: u64,
    /// When its last answer ended (absent when it never finished).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<u64>,
    /// Turns it had, and turns it sent.
    pub turns_planned: u32,
    pub turns_sent: u32,
    /// Waiting for a session slot (`--max-concurrency`) before its first turn, ns.
    pub queue_ns: u64,
    /// Its own requests, release to done, ns: waiting on the server.
    pub server_ns: u64,
    /// Waiting on tools, ns.
    pub tool_ns: u64,
    pub tool_calls: u32,
    /// Waiting on sub-agents beyond its tools, ns.
    pub subagent_wait_ns: u64,
    /// Think time before turns, ns.
    pub think_ns: u64,
    /// A turn (or a sub-agent) failed, so nothing after it was sent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
    /// Each tool wait, `[from, to]` ns (for timelines).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_waits: Vec<[u64; 2]>,
}

impl AgentNode {
    /// End − start, when it finished.
    pub fn duration_ns(&self) -> Option<u64> {
        self.end.map(|e| e.saturating_sub(self.start))
    }
}

/// Mean and percentiles of one per-session figure, ms.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub mean: Option<f64>,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
}

impl Spread {
    fn of(xs: &[f64]) -> Spread {
        let sorted = stats::sorted_copy(xs);
        Spread {
            mean: stats::mean(xs),
            p50: stats::percentile_sorted(&sorted, 50.0),
            p90: stats::percentile_sorted(&sorted, 90.0),
            p99: stats::percentile_sorted(&sorted, 99.0),
        }
    }
}

/// One main session, whole tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionFigures {
    pub session: String,
    /// Arrival to the main agent's last answer, ms (absent when it did not finish).
    pub completion_ms: Option<f64>,
    /// Turns sent in the whole tree.
    pub turns: u32,
    /// Agents that ran (the main one included).
    pub agents: u32,
    /// The main agent's own waits, ms: on the server, on tools, on sub-agents, thinking, and
    /// queued for a slot. Together they make up its completion time.
    pub server_ms: f64,
    pub tool_ms: f64,
    pub subagent_wait_ms: f64,
    pub think_ms: f64,
    pub queue_ms: f64,
    /// Every agent's requests of the tree, ms (sub-agents run in parallel, so this can
    /// exceed the completion time).
    pub tree_server_ms: f64,
    pub failed: bool,
}

/// The requests of one depth (0: main agents).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DepthStats {
    pub depth: u32,
    /// Agents of this depth that ran.
    pub agents: u64,
    pub completed: u64,
    pub failed: u64,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    /// Time to first answer token (the first token when the answer is not split).
    pub ttfat_p50_ms: Option<f64>,
    pub prompt_tokens_mean: Option<f64>,
    pub cached_tokens_mean: Option<f64>,
    /// Σ cached / Σ prompt tokens of the completed requests whose server reported them.
    pub cached_share: Option<f64>,
}

/// An agent run's figures (`agents` in the result file).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentStats {
    /// Main sessions that ran, finished, and failed.
    pub sessions: u64,
    pub completed_sessions: u64,
    pub failed_sessions: u64,
    /// Sub-agents that ran.
    pub subagents: u64,
    /// Turns sent, and tool calls waited for.
    pub turns: u64,
    pub tool_calls: u64,
    /// Per finished session: completion time, its main agent's time on the server and on
    /// tools, turns of its tree.
    pub completion_ms: Spread,
    pub server_ms: Spread,
    pub tool_ms: Spread,
    pub turns_per_session: Spread,
    /// Finished sessions' time waiting on the server over their completion time.
    pub server_share: Option<f64>,
    pub by_depth: Vec<DepthStats>,
    pub by_session: Vec<SessionFigures>,
    /// Every agent as it ran.
    pub nodes: Vec<AgentNode>,
}

/// Figures of an agent run from its agents and records.
pub fn agent_stats(nodes: &[AgentNode], records: &[RequestRecord]) -> AgentStats {
    let depth_of: HashMap<&str, u32> = nodes.iter().map(|n| (n.id.as_str(), n.depth)).collect();
    let mut trees: BTreeMap<&str, Vec<&AgentNode>> = BTreeMap::new();
    for n in nodes {
        trees.entry(n.session.as_str()).or_default().push(n);
    }
    let mut by_session = Vec::new();
    for (session, members) in &trees {
        let Some(main) = members.iter().find(|n| n.parent.is_none()) else {
            continue;
        };
        let failed = members.iter().any(|n| n.failed);
        by_session.push(SessionFigures {
            session: (*session).to_owned(),
            completion_ms: main.duration_ns().filter(|_| !failed).map(ns_to_ms),
            turns: members.iter().map(|n| n.turns_sent).sum(),
            agents: members.len() as u32,
            server_ms: ns_to_ms(main.server_ns),
            tool_ms: ns_to_ms(main.tool_ns),
            subagent_wait_ms: ns_to_ms(main.subagent_wait_ns),
            think_ms: ns_to_ms(main.think_ns),
            queue_ms: ns_to_ms(main.queue_ns),
            tree_server_ms: ns_to_ms(members.iter().map(|n| n.server_ns).sum()),
            failed,
        });
    }
    let done: Vec<&SessionFigures> = by_session
        .iter()
        .filter(|s| s.completion_ms.is_some())
        .collect();
    let pick =
        |f: &dyn Fn(&SessionFigures) -> f64| -> Vec<f64> { done.iter().map(|s| f(s)).collect() };
    let completion = pick(&|s| s.completion_ms.unwrap_or(0.0));
    let server = pick(&|s| s.server_ms);
    let total_completion: f64 = completion.iter().sum();
    let server_share =
        (total_completion > 0.0).then(|| server.iter().sum::<f64>() / total_completion);

    let mut depths: BTreeMap<u32, (u64, Vec<&RequestRecord>)> = BTreeMap::new();
    for n in nodes {
        depths.entry(n.depth).or_default().0 += 1;
    }
    for r in records {
        if let Some(d) = r.session_id.as_deref().and_then(|s| depth_of.get(s)) {
            depths.entry(*d).or_default().1.push(r);
        }
    }
    let by_depth = depths
        .into_iter()
        .map(|(depth, (agents, rs))| {
            let ok: Vec<&RequestRecord> = rs.iter().copied().filter(|r| r.is_success()).collect();
            let ms =
                |v: Vec<u64>| stats::sorted_copy(&v.into_iter().map(ns_to_ms).collect::<Vec<_>>());
            let ttft = ms(ok.iter().filter_map(|r| r.ttft_ns()).collect());
            let ttfat = ms(ok.iter().filter_map(|r| r.ttfat_ns()).collect());
            let prompts: Vec<f64> = ok.iter().map(|r| r.input_tokens as f64).collect();
            let reported: Vec<&&RequestRecord> =
                ok.iter().filter(|r| r.cached_tokens.is_some()).collect();
            let cached: Vec<f64> = reported
                .iter()
                .filter_map(|r| r.cached_tokens)
                .map(|c| c as f64)
                .collect();
            let reported_prompt: u64 = reported.iter().map(|r| r.input_tokens).sum();
            DepthStats {
                depth,
                agents,
                completed: ok.len() as u64,
                failed: (rs.len() - ok.len()) as u64,
                ttft_p50_ms: stats::percentile_sorted(&ttft, 50.0),
                ttft_p99_ms: stats::percentile_sorted(&ttft, 99.0),
                ttfat_p50_ms: stats::percentile_sorted(&ttfat, 50.0),
                prompt_tokens_mean: stats::mean(&prompts),
                cached_tokens_mean: stats::mean(&cached),
                cached_share: (reported_prompt > 0)
                    .then(|| cached.iter().sum::<f64>() / reported_prompt as f64),
            }
        })
        .collect();
    AgentStats {
        sessions: by_session.len() as u64,
        completed_sessions: done.len() as u64,
        failed_sessions: by_session.iter().filter(|s| s.failed).count() as u64,
        subagents: nodes.iter().filter(|n| n.parent.is_some()).count() as u64,
        turns: nodes.iter().map(|n| u64::from(n.turns_sent)).sum(),
        tool_calls: nodes.iter().map(|n| u64::from(n.tool_calls)).sum(),
        completion_ms: Spread::of(&completion),
        server_ms: Spread::of(&server),
        tool_ms: Spread::of(&pick(&|s| s.tool_ms)),
        turns_per_session: Spread::of(&pick(&|s| f64::from(s.turns))),
        server_share,
        by_depth,
        by_session,
        nodes: nodes.to_vec(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::record::{CountSource, Failure, FailureKind};

    const MS: u64 = 1_000_000;

    fn rec(
        session: &str,
        turn: u32,
        sent_ms: u64,
        ttft_ms: u64,
        input: u64,
        cached: u64,
        ok: bool,
    ) -> RequestRecord {
        RequestRecord {
            phases: None,
            images: None,
            id: 0,
            intended: sent_ms * MS,
            released: sent_ms * MS,
            sent: sent_ms * MS,
            started: None,
            bare_events: Vec::new(),
            first_token: ok.then_some((sent_ms + ttft_ms) * MS),
            end: ok.then_some((sent_ms + ttft_ms) * MS),
            done: Some((sent_ms + ttft_ms) * MS),
            waited_for_slot: false,
            events: Vec::new(),
            input_tokens: input,
            input_source: CountSource::Usage,
            output_tokens: 1,
            output_source: CountSource::Usage,
            intended_input_tokens: input,
            max_tokens: Some(1),
            cached_tokens: Some(cached),
            finish_reason: None,
            text: None,
            failure: (!ok).then(|| Failure {
                kind: FailureKind::HttpStatus,
                status: Some(500),
                message: "no".into(),
            }),
            resent: 0,
            answer_checked: false,
            session_id: Some(session.into()),
            turn: Some(turn),
            output_split: None,
            stamp_clock: None,
            lora: None,
            served_by: None,
        }
    }

    fn node(
        id: &str,
        session: &str,
        parent: Option<&str>,
        depth: u32,
        start: u64,
        end: Option<u64>,
    ) -> AgentNode {
        AgentNode {
            id: id.into(),
            session: session.into(),
            parent: parent.map(Into::into),
            depth,
            start: start * MS,
            end: end.map(|e| e * MS),
            turns_planned: 2,
            turns_sent: 2,
            server_ns: 40 * MS,
            tool_ns: 50 * MS,
            tool_calls: 1,
            ..AgentNode::default()
        }
    }

    #[test]
    fn sessions_depths_and_shares() {
        let nodes = [
            node("a", "a", None, 0, 0, Some(100)),
            node("a/0.0", "a", Some("a"), 1, 20, Some(60)),
            node("a/0.1", "a", Some("a"), 1, 20, Some(70)),
            node("b", "b", None, 0, 10, Some(210)),
            AgentNode {
                failed: true,
                ..node("c", "c", None, 0, 0, None)
            },
        ];
        let records = [
            rec("a", 0, 0, 10, 100, 0, true),
            rec("a", 1, 80, 4, 300, 192, true),
            rec("a/0.0", 0, 20, 6, 50, 0, true),
            rec("a/0.1", 0, 20, 8, 50, 32, true),
            rec("b", 0, 10, 20, 100, 0, true),
            rec("c", 0, 0, 1, 5, 0, false),
            rec("stranger", 0, 0, 1, 5, 0, true),
        ];
        let s = agent_stats(&nodes, &records);
        assert_eq!(
            (s.sessions, s.completed_sessions, s.failed_sessions),
            (3, 2, 1)
        );
        assert_eq!(s.subagents, 2);
        assert_eq!(s.turns, 10);
        assert_eq!(s.tool_calls, 5);
        assert_eq!(s.completion_ms.p50, Some(150.0));
        assert_eq!(s.completion_ms.mean, Some(150.0));
        assert_eq!(s.server_share, Some(80.0 / 300.0));
        let a = &s.by_session[0];
        assert_eq!((a.turns, a.agents), (6, 3));
        assert_eq!(a.tree_server_ms, 120.0);
        assert_eq!(s.by_depth.len(), 2);
        let d0 = &s.by_depth[0];
        assert_eq!((d0.agents, d0.completed, d0.failed), (3, 3, 1));
        assert_eq!(d0.cached_share, Some(192.0 / 500.0));
        let d1 = &s.by_depth[1];
        assert_eq!((d1.agents, d1.completed), (2, 2));
        assert_eq!(d1.ttft_p50_ms, Some(7.0));
        assert_eq!(d1.ttfat_p50_ms, Some(7.0));
        assert_eq!(d1.cached_tokens_mean, Some(16.0));
        let json = serde_json::to_string(&s).unwrap();
        let back: AgentStats = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
    }
}
