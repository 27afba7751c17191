//! `--dataset-name agentic --virtual-time`: agent session trees through the simulator's engine
//! core in virtual time. An agent's prompt is token ids, exactly: its system prompt and first
//! message, then turn by turn the previous prompt, the ids the engine generated for it, the
//! final answers' ids of the sub-agents it waited for and the turn's own message — so the
//! context grows token-exactly and the prefix cache sees what a server would. Waits are the
//! client's: a tool's latency, the sub-agents (submitted at the answer's end, in parallel),
//! think time; a turn is due when all are over. A session holds one of `--max-concurrency`
//! slots for its whole tree; `--num-users` users each start the next session at the end of
//! their last. A turn the engine refuses ends its agent, and a failed sub-agent its parent.

use std::collections::VecDeque;

use anyhow::Result;
use servebench_loadgen::telemetry::ServerTelemetry;
use servebench_loadgen::AgentStart;
use servebench_metrics::{AgentNode, RequestRecord};
use servebench_sim::engine::{FinishReason, NewRequest};
use servebench_sim::virtual_time::{VirtualArrival, VirtualDriver};
use servebench_sim::ResolvedSim;
use servebench_tokenizer::Tokenizer;
use servebench_workload::agentic::AgentScript;
use servebench_workload::RequestSpec;

use super::plan::RunPlan;
use super::virtual_run::VirtualTarget;
use super::{output, RunOutcome};

/// A finished virtual agent run.
pub struct VirtualAgents {
    pub records: Vec<RequestRecord>,
    pub nodes: Vec<AgentNode>,
    pub duration_ns: u64,
    pub telemetry: ServerTelemetry,
}

/// One agent on its way through the engine.
struct Agent<'a> {
    script: &'a AgentScript,
    node: AgentNode,
    /// The parent's index and this agent's place among the sub-agents it spawned.
    parent: Option<(usize, usize)>,
    /// The root session's index (for the concurrency slot).
    root: usize,
    /// Prompt ids of the current turn.
    prompt: Vec<u32>,
    turn: usize,
    /// The current turn's trace, while in flight.
    trace: Option<usize>,
    /// After an answer: when the tool is done, how many sub-agents are still running, when
    /// the last ended, and their answers' ids in spawn order.
    tool_end: u64,
    answered: u64,
    pending: usize,
    children_end: u64,
    results: Vec<Vec<u32>>,
    child_failed: bool,
}

struct Sim<'a> {
    driver: VirtualDriver,
    tok: &'a Tokenizer,
    ignore_eos: bool,
    agents: Vec<Agent<'a>>,
    /// (agent, turn, spec) per trace, in submission order.
    sent: Vec<(usize, usize, RequestSpec)>,
    in_flight: Vec<usize>,
    /// Turns never sent (an agent that failed or was cut short).
    unsent: usize,
}

fn ids_of(tok: &Tokenizer, text: &str) -> Vec<u32> {
    if text.is_empty() {
        Vec::new()
    } else {
        tok.encode(text)
    }
}

impl<'a> Sim<'a> {
    fn submit(&mut self, a: usize, intended_ns: u64) {
        let agent = &self.agents[a];
        let t = &agent.script.turns[agent.turn];
        let id = self.sent.len() as u64;
        let max_tokens = u32::try_from(t.max_tokens).unwrap_or(u32::MAX);
        self.sent.push((
            a,
            agent.turn,
            RequestSpec {
                images: Vec::new(),
                id,
                prompt: String::new(),
                prompt_tokens: agent.prompt.len() as u64,
                max_tokens: Some(t.max_tokens),
                prefix_tokens: 0,
            },
        ));
        self.driver.submit(VirtualArrival {
            intended_ns,
            request: NewRequest {
                lora: None,
                id,
                prompt: agent.prompt.clone(),
                max_tokens,
                min_tokens: 0,
                ignore_eos: self.ignore_eos,
                seed: None,
                cache_salt: None,
                arrival_ns: intended_ns,
            },
        });
        let trace = self.driver.traces().len() - 1;
        self.agents[a].trace = Some(trace);
        self.in_flight.push(a);
    }

    /// Starts agent `script` at `at` (its arrival, or its parent's answer); returns its index.
    fn start(
        &mut self,
        script: &'a AgentScript,
        session: &str,
        parent: Option<(usize, usize)>,
        root: Option<usize>,
        depth: u32,
        at: u64,
    ) -> usize {
        let a = self.agents.len();
        let mut prompt = script
            .system
            .as_ref()
            .map(|s| ids_of(self.tok, &s.text))
            .unwrap_or_default();
        prompt.extend(ids_of(self.tok, &script.turns[0].input.text));
        if prompt.is_empty() {
            prompt.push(0);
        }
        let think = script.turns[0].think_time_ns;
        self.agents.push(Agent {
            script,
            node: AgentNode {
                id: script.id.clone(),
                session: session.to_owned(),
                parent: parent.map(|(p, _)| self.agents[p].script.id.clone()),
                depth,
                start: at,
                turns_planned: script.turns.len() as u32,
                think_ns: think,
                ..AgentNode::default()
            },
            parent,
            root: root.unwrap_or(a),
            prompt,
            turn: 0,
            trace: None,
            tool_end: 0,
            answered: 0,
            pending: 0,
            children_end: 0,
            results: Vec::new(),
            child_failed: false,
        });
        self.submit(a, at.saturating_add(think));
        a
    }

    /// The next turn of `a`, due once every wait after its last answer is over.
    fn next_turn(&mut self, a: usize) {
        let (due, prompt) = {
            let agent = &mut self.agents[a];
            let wait_end = agent.tool_end.max(agent.children_end).max(agent.answered);
            agent.node.subagent_wait_ns += agent
                .children_end
                .saturating_sub(agent.tool_end.max(agent.answered));
            agent.turn += 1;
            let t = &agent.script.turns[agent.turn];
            agent.node.think_ns += t.think_time_ns;
            let mut prompt = std::mem::take(&mut agent.prompt);
            for r in agent.results.drain(..) {
                prompt.extend(r);
            }
            prompt.extend(ids_of(self.tok, &t.input.text));
            (wait_end.saturating_add(t.think_time_ns), prompt)
        };
        self.agents[a].prompt = prompt;
        self.submit(a, due);
    }

    /// `a` ended (finished, or gave up): its node is final; its parent learns of it.
    fn end(&mut self, a: usize, ok: bool, at: u64, answer: Vec<u32>) -> Option<usize> {
        if !ok {
            self.agents[a].node.failed = true;
        }
        let Some((p, slot)) = self.agents[a].parent else {
            return Some(a);
        };
        let parent = &mut self.agents[p];
        parent.results[slot] = answer;
        parent.children_end = parent.children_end.max(at);
        parent.child_failed |= !ok;
        parent.pending -= 1;
        if parent.pending == 0 {
            if parent.child_failed {
                let rest = unsent_after(parent.script, parent.turn);
                self.unsent += rest;
                let end = parent.children_end;
                return self.end(p, false, end, Vec::new());
            }
            self.next_turn(p);
        }
        None
    }
}

/// Turns of `script` (sub-agents included) after turn `k`.
fn unsent_after(script: &AgentScript, k: usize) -> usize {
    script.turns[k + 1..]
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

/// The main sessions and how they start.
struct Roots<'a> {
    sessions: &'a [AgentScript],
    cap: usize,
    /// `--num-users`: a session starts when another ended, not at its arrival.
    users: bool,
}

impl<'a> Roots<'a> {
    fn start_waiting(
        &self,
        s: &mut Sim<'a>,
        active: &mut usize,
        now: u64,
        waiting: &mut VecDeque<(usize, u64)>,
    ) {
        while *active < self.cap {
            let Some((i, arrival)) = waiting.pop_front() else {
                break;
            };
            let at = if self.users { now } else { arrival };
            let script = &self.sessions[i];
            s.start(script, &script.id, None, None, 0, at);
            *active += 1;
        }
    }
}

/// Runs the sessions through the engine; records are in sending order.
pub fn simulate_agents(
    sim: &ResolvedSim,
    plan: &RunPlan,
    sessions: &[AgentScript],
    start: &AgentStart,
) -> Result<VirtualAgents> {
    if sim.fleet.is_some() {
        anyhow::bail!("agent sessions in virtual time run on one engine: drop the fleet flags (--replicas, --pool, --route, --rate-limit, --prefill-replicas) from --sim, or run against `servebench sim` with them over HTTP");
    }
    let mut driver = VirtualDriver::new(sim.engine.clone(), None)?;
    driver.keep_output_ids();
    let mut s = Sim {
        driver,
        tok: &sim.tokenizer,
        ignore_eos: plan.ignore_eos(),
        agents: Vec::new(),
        sent: Vec::new(),
        in_flight: Vec::new(),
        unsent: 0,
    };
    // Sessions not started yet, with their arrival; and how many may run at once.
    let (mut waiting, cap, users): (VecDeque<(usize, u64)>, usize, bool) = match start {
        AgentStart::Arrivals(a) => (
            a.iter().copied().enumerate().collect(),
            plan.traffic.max_concurrency.unwrap_or(usize::MAX).max(1),
            false,
        ),
        AgentStart::Users(n) => ((0..sessions.len()).map(|i| (i, 0)).collect(), *n, true),
    };
    let mut active_roots = 0usize;
    let roots = Roots {
        sessions,
        cap,
        users,
    };
    roots.start_waiting(&mut s, &mut active_roots, 0, &mut waiting);
    loop {
        let more = s.driver.step()?;
        let mut progressed = false;
        let now = s.driver.now_ns();
        let mut i = 0;
        while i < s.in_flight.len() {
            let a = s.in_flight[i];
            let Some(tr) = s.agents[a].trace else {
                s.in_flight.swap_remove(i);
                continue;
            };
            let t = &s.driver.traces()[tr];
            let Some(end) = t.end_ns else {
                i += 1;
                continue;
            };
            s.in_flight.swap_remove(i);
            progressed = true;
            let ok = matches!(t.finish_reason, Some(r) if r != FinishReason::Abort)
                && !t.token_times_ns.is_empty();
            let output = t.output_ids.clone();
            let sent_at = t.sent_ns;
            let agent = &mut s.agents[a];
            agent.trace = None;
            agent.node.turns_sent += 1;
            agent.node.server_ns += end.saturating_sub(sent_at);
            if agent.turn == 0 && agent.parent.is_none() {
                let due = agent
                    .node
                    .start
                    .saturating_add(agent.script.turns[0].think_time_ns);
                agent.node.queue_ns = sent_at.saturating_sub(due);
            }
            let mut ended_root = None;
            if !ok {
                s.unsent += unsent_after(agent.script, agent.turn);
                ended_root = s.end(a, false, end, Vec::new());
            } else if agent.turn + 1 == agent.script.turns.len() {
                agent.node.end = Some(end);
                ended_root = s.end(a, true, end, output);
            } else {
                agent.prompt.extend_from_slice(&output);
                agent.answered = end;
                agent.children_end = end;
                let turn = &agent.script.turns[agent.turn];
                agent.tool_end = end;
                if let Some(tool) = &turn.tool {
                    let tool_end = end.saturating_add(tool.latency_ns);
                    agent.tool_end = tool_end;
                    agent.node.tool_ns += tool.latency_ns;
                    agent.node.tool_calls += 1;
                    agent.node.tool_waits.push([end, tool_end]);
                }
                let subs: Vec<&AgentScript> = turn.subagents.iter().collect();
                agent.pending = subs.len();
                agent.results = vec![Vec::new(); subs.len()];
                agent.child_failed = false;
                let session = agent.node.session.clone();
                let depth = agent.node.depth + 1;
                let root = agent.root;
                if subs.is_empty() {
                    s.next_turn(a);
                } else {
                    for (j, sub) in subs.into_iter().enumerate() {
                        s.start(sub, &session, Some((a, j)), Some(root), depth, end);
                    }
                }
            }
            if let Some(r) = ended_root {
                debug_assert!(s.agents[r].parent.is_none());
                active_roots -= 1;
                roots.start_waiting(&mut s, &mut active_roots, now, &mut waiting);
            }
            // New submissions may have been pushed behind `i`; the scan goes on over them.
        }
        // Requests submitted after the driver went idle: the next step picks them up.
        if !more && (s.in_flight.is_empty() || !progressed) {
            break;
        }
    }
    for (i, _) in waiting {
        s.unsent += sessions[i].total_turns();
    }
    let run = s.driver.finish();
    let records: Vec<RequestRecord> = run
        .traces
        .iter()
        .zip(&s.sent)
        .map(|(t, (agent, turn, spec))| {
            let mut r = super::virtual_run::record(t, spec, true);
            r.session_id = Some(s.agents[*agent].script.id.clone());
            r.turn = Some(u32::try_from(*turn).unwrap_or(u32::MAX));
            r
        })
        .collect();
    let (duration_ns, telemetry) = super::virtual_run::run_totals(&records, &run);
    let nodes = s.agents.into_iter().map(|a| a.node).collect();
    Ok(VirtualAgents {
        records,
        nodes,
        duration_ns,
        telemetry,
    })
}

/// A virtual agent run's files, as over HTTP.
pub fn write(
    v: &VirtualTarget,
    plan: &RunPlan,
    tokenizer: &Tokenizer,
    command_line: Vec<String>,
    print: bool,
    run: VirtualAgents,
) -> Result<RunOutcome> {
    let model_id = plan
        .model
        .clone()
        .unwrap_or_else(|| v.sim.served_model_name.clone());
    let report_args = plan.to_args();
    let (mut finish, mut sink) =
        output::Finish::open(&report_args, model_id, tokenizer, command_line, print)?;
    for r in &run.records {
        sink.append(r)?;
    }
    finish.agent_nodes = Some(run.nodes);
    let meta = servebench_metrics::result::TargetInfo::simulator(
        "virtual",
        &v.spec,
        output::sim_config(&v.sim.config_json)?,
    );
    output::write_results(
        &finish,
        &run.records,
        run.duration_ns,
        None,
        Some(&run.telemetry),
        None,
        meta,
        true,
    )
}
