//! The agent driver (`--dataset-name agentic`, docs/agents.md): session trees on the
//! conversation machinery of [`crate::sessions`].
//!
//! Each agent sends its turns one after the other, each carrying its whole context: its
//! system prompt, every earlier message and the text the server returned for each answer.
//! After an answer the agent waits — for its tool (the tool's latency, a sleep of the client)
//! and for the sub-agents the answer spawned (each its own task, running in parallel from the
//! answer's end) — then sends its next turn with the sub-agents' final answers and the turn's
//! own message (a tool result, a user's follow-up) as one new user message, after the turn's
//! think time. A turn is due when every wait before it is over, so no tool wait is ever part
//! of a request's figures; all of them are part of the session's completion time.
//!
//! Sessions start open loop at their arrival times (a session holds one of
//! `--max-concurrency` slots for its whole tree), or from a fixed population of users, each
//! starting the next session when its previous one ended (`--num-users`). A failed turn ends
//! its agent, and a failed sub-agent its parent; other sessions go on. Every agent reports an
//! [`AgentNode`]: where its time went.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http::{HeaderMap, HeaderName, HeaderValue};
use servebench_metrics::{AgentNode, RequestRecord};
use servebench_workload::agentic::{AgentScript, ScriptTurn};
use tokio::sync::{mpsc, Semaphore};

use crate::clock::RunClock;
use crate::collector::{collect, JsonlSink};
use crate::dispatcher::LoadOutcome;
use crate::health::process_cpu_times;
use crate::progress::{Drawer, Live, Progress};
use crate::sessions::{ConversationBackend, Message};
use crate::stop::StopSignal;
use crate::telemetry::Scraper;
use crate::LoadgenError;

tokio::task_local! {
    /// The `--session-header` of the request the current task sends.
    static SESSION_HEADER: (HeaderName, HeaderValue);
}

/// Adds the sending task's `--session-header`, if it has one, to a request's headers.
pub(crate) fn add_session_header(headers: &mut HeaderMap) {
    let _ = SESSION_HEADER.try_with(|(name, value)| {
        headers.insert(name.clone(), value.clone());
    });
}

/// A session id as a header value: characters a header cannot carry become `_`.
pub fn header_value(id: &str) -> HeaderValue {
    HeaderValue::from_str(id).unwrap_or_else(|_| {
        let clean: String = id
            .chars()
            .map(|c| {
                if c.is_ascii_graphic() || c == ' ' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        HeaderValue::from_str(&clean).unwrap_or_else(|_| HeaderValue::from_static("_"))
    })
}

/// How sessions start.
#[derive(Debug, Clone)]
pub enum AgentStart {
    /// At these times (ns from the run start, one per session, non-decreasing).
    Arrivals(Vec<u64>),
    /// A fixed population of users: each starts the next session as soon as its previous one
    /// ended, until every session ran.
    Users(usize),
}

/// How to drive a run of agent sessions.
#[derive(Debug, Clone)]
pub struct AgentSpec {
    pub start: AgentStart,
    /// Sessions active at once (`--max-concurrency`, open loop only); a waiting session
    /// queues in order.
    pub max_concurrency: Option<usize>,
    pub progress: Option<Progress>,
    pub scrape_every: Option<Duration>,
    /// Keep each answer's text in its record.
    pub keep_text: bool,
    /// `--session-header`: every request carries its agent's id in this header.
    pub session_header: Option<HeaderName>,
}

/// What an agent run produced: the records and the agents as they ran.
#[derive(Debug)]
pub struct AgentOutcome {
    pub load: LoadOutcome,
    /// Every agent that started, in the order they ended.
    pub nodes: Vec<AgentNode>,
}

/// Run `sessions` on `client` following `spec`; records (one per turn sent, `session_id` the
/// agent's id, `turn` its turn) stream into `sink`.
pub async fn run_agents<B: ConversationBackend>(
    client: Arc<B>,
    sessions: Vec<AgentScript>,
    spec: AgentSpec,
    sink: Option<JsonlSink>,
    stop: StopSignal,
) -> Result<AgentOutcome, LoadgenError> {
    match &spec.start {
        AgentStart::Arrivals(a) if a.len() != sessions.len() => {
            return Err(LoadgenError::Config(format!(
                "{} arrival times for {} sessions",
                a.len(),
                sessions.len()
            )))
        }
        AgentStart::Users(0) => {
            return Err(LoadgenError::Config(
                "--num-users must be at least 1".into(),
            ))
        }
        _ => {}
    }
    if let Some(s) = sessions
        .iter()
        .flat_map(AgentScript::walk)
        .find(|(a, _)| a.turns.is_empty())
    {
        return Err(LoadgenError::Config(format!(
            "agent {:?} has no turns",
            s.0.id
        )));
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let live = Arc::new(Live::default());
    let drawer = spec.progress.clone().map(|p| {
        let last = match &spec.start {
            AgentStart::Arrivals(a) => a.last().copied().filter(|&t| t > 0),
            AgentStart::Users(_) => None,
        };
        Drawer::start(p, Arc::clone(&live), last.map(Duration::from_nanos))
    });
    let collector = tokio::spawn(collect(rx, sink, Arc::clone(&live), drawer));
    let cpu_before = process_cpu_times();
    let started_at = SystemTime::now();
    let clock = RunClock::start_now();
    live.begin();
    let scraper = spec.scrape_every.and_then(|every| {
        client
            .telemetry_target()
            .map(|target| Scraper::start(target.clone(), clock, every))
    });
    let ctx = Arc::new(Ctx {
        client,
        tx,
        stop: stop.clone(),
        clock,
        next_id: AtomicU64::new(0),
        unsent: AtomicUsize::new(0),
        keep_text: spec.keep_text,
        live,
        nodes: Mutex::new(Vec::new()),
        header: spec.session_header.clone(),
    });
    match spec.start {
        AgentStart::Arrivals(arrivals) => {
            open_loop(&ctx, sessions, arrivals, spec.max_concurrency).await;
        }
        AgentStart::Users(n) => users(&ctx, sessions, n).await,
    }
    let unsent = ctx.unsent.load(Ordering::Acquire);
    let nodes = std::mem::take(&mut *ctx.nodes.lock().unwrap_or_else(|e| e.into_inner()));
    // The last sender: the collector ends when it is dropped.
    drop(ctx);
    let load =
        crate::dispatcher::outcome(collector, scraper, cpu_before, started_at, clock, |_| {
            unsent
        })
        .await?;
    Ok(AgentOutcome { load, nodes })
}

async fn open_loop<B: ConversationBackend>(
    ctx: &Arc<Ctx<B>>,
    sessions: Vec<AgentScript>,
    arrivals: Vec<u64>,
    max_concurrency: Option<usize>,
) {
    let semaphore = max_concurrency.map(|n| Arc::new(Semaphore::new(n.max(1))));
    let mut running = tokio::task::JoinSet::new();
    let mut sessions = sessions.into_iter();
    for &arrival in &arrivals {
        let Some(session) = sessions.next() else {
            break;
        };
        let stop = &ctx.stop;
        let arrived = !stop.dispatch_stopped()
            && tokio::select! {
                biased;
                _ = stop.dispatch_stop() => false,
                _ = tokio::time::sleep_until(ctx.clock.instant_at(arrival)) => true,
            };
        let permit = match (&semaphore, arrived) {
            (_, false) => None,
            (None, true) => Some(None),
            (Some(sem), true) => match Arc::clone(sem).try_acquire_owned() {
                Ok(p) => Some(Some((p, false))),
                Err(_) => tokio::select! {
                    biased;
                    p = Arc::clone(sem).acquire_owned() => p.ok().map(|p| Some((p, true))),
                    _ = stop.dispatch_stop() => None,
                },
            },
        };
        let Some(permit) = permit else {
            ctx.unsent
                .fetch_add(session.total_turns(), Ordering::AcqRel);
            break;
        };
        let waited = permit.as_ref().is_some_and(|(_, w)| *w);
        let queue_ns = ctx.clock.now_ns().saturating_sub(arrival);
        let c = Arc::clone(ctx);
        running.spawn(async move {
            let id = session.id.clone();
            let start = Start {
                session: id,
                parent: None,
                depth: 0,
                at: arrival,
                queue_ns: if waited { queue_ns } else { 0 },
                waited_for_slot: waited,
            };
            run_agent(c, session, start).await;
            drop(permit);
        });
    }
    for s in sessions {
        ctx.unsent.fetch_add(s.total_turns(), Ordering::AcqRel);
    }
    while running.join_next().await.is_some() {}
}

async fn users<B: ConversationBackend>(ctx: &Arc<Ctx<B>>, sessions: Vec<AgentScript>, n: usize) {
    // More users than sessions would only wait for none.
    let n = n.min(sessions.len());
    let queue = Arc::new(Mutex::new(std::collections::VecDeque::from(sessions)));
    let mut running = tokio::task::JoinSet::new();
    for _ in 0..n {
        let c = Arc::clone(ctx);
        let queue = Arc::clone(&queue);
        running.spawn(async move {
            loop {
                let next = queue.lock().ok().and_then(|mut q| q.pop_front());
                let Some(session) = next else { break };
                if c.stop.dispatch_stopped() {
                    c.unsent.fetch_add(session.total_turns(), Ordering::AcqRel);
                    continue;
                }
                let start = Start {
                    session: session.id.clone(),
                    parent: None,
                    depth: 0,
                    at: c.clock.now_ns(),
                    queue_ns: 0,
                    waited_for_slot: false,
                };
                run_agent(Arc::clone(&c), session, start).await;
            }
        });
    }
    while running.join_next().await.is_some() {}
}

/// What every agent's task shares.
struct Ctx<B> {
    client: Arc<B>,
    tx: mpsc::UnboundedSender<RequestRecord>,
    stop: StopSignal,
    clock: RunClock,
    next_id: AtomicU64,
    unsent: AtomicUsize,
    keep_text: bool,
    live: Arc<Live>,
    nodes: Mutex<Vec<AgentNode>>,
    header: Option<HeaderName>,
}

/// Where an agent starts.
struct Start {
    session: String,
    parent: Option<String>,
    depth: u32,
    /// Arrival, or the end of the answer that spawned it, ns.
    at: u64,
    queue_ns: u64,
    waited_for_slot: bool,
}

/// How an agent ended.
struct Ended {
    /// It sent every turn and each succeeded.
    ok: bool,
    /// Its last answer's end (or when it stopped), ns.
    end: u64,
    /// Its final answer and that answer's output tokens.
    answer: String,
    answer_tokens: u64,
}

fn turns_in(turns: &[ScriptTurn]) -> usize {
    turns
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

type Boxed = Pin<Box<dyn Future<Output = Ended> + Send>>;

/// One agent, its sub-agents spawned as tasks of their own.
fn run_agent<B: ConversationBackend>(ctx: Arc<Ctx<B>>, script: AgentScript, start: Start) -> Boxed {
    Box::pin(async move {
        let mut node = AgentNode {
            id: script.id.clone(),
            session: start.session.clone(),
            parent: start.parent.clone(),
            depth: start.depth,
            start: start.at,
            turns_planned: script.turns.len() as u32,
            queue_ns: start.queue_ns,
            ..AgentNode::default()
        };
        let header = ctx.header.clone().map(|n| (n, header_value(&script.id)));
        let mut history: Vec<Message> = Vec::with_capacity(script.turns.len() * 2 + 1);
        let mut history_tokens = 0u64;
        if let Some(sys) = &script.system {
            history.push(Message {
                role: "system",
                text: sys.text.clone(),
            });
            history_tokens += sys.tokens;
        }
        let mut ready = start.at;
        // Sub-agents' answers for the next turn, in spawn order.
        let mut results: Vec<(String, u64)> = Vec::new();
        let mut last = Ended {
            ok: true,
            end: start.at,
            answer: String::new(),
            answer_tokens: 0,
        };
        let turns = script.turns;
        for k in 0..turns.len() {
            let turn = &turns[k];
            let due = ready.saturating_add(turn.think_time_ns);
            node.think_ns += turn.think_time_ns;
            let go = !ctx.stop.dispatch_stopped()
                && tokio::select! {
                    biased;
                    _ = ctx.stop.dispatch_stop() => false,
                    _ = tokio::time::sleep_until(ctx.clock.instant_at(due)) => true,
                };
            if !go {
                ctx.unsent
                    .fetch_add(turns_in(&turns[k..]), Ordering::AcqRel);
                last.ok = false;
                break;
            }
            let mut parts: Vec<String> = Vec::with_capacity(results.len() + 1);
            let mut tokens = 0;
            for (text, n) in results.drain(..) {
                parts.push(text);
                tokens += n;
            }
            if !turn.input.text.is_empty() {
                parts.push(turn.input.text.clone());
                tokens += turn.input.tokens;
            }
            history_tokens += tokens;
            history.push(Message {
                role: "user",
                text: parts.join("\n\n"),
            });
            let id = ctx.next_id.fetch_add(1, Ordering::AcqRel);
            let request =
                ctx.client
                    .prepare_turn(id, &history, history_tokens, Some(turn.max_tokens));
            let released = ctx.clock.now_ns();
            ctx.live.released();
            let send = ctx.client.execute(
                &ctx.clock,
                &request,
                due,
                released,
                start.waited_for_slot && k == 0,
                &ctx.stop,
            );
            let mut record = match &header {
                Some(h) => SESSION_HEADER.scope(h.clone(), send).await,
                None => send.await,
            };
            record.session_id = Some(script.id.clone());
            record.turn = Some(u32::try_from(k).unwrap_or(u32::MAX));
            let answered = record
                .done
                .or(record.end)
                .unwrap_or_else(|| ctx.clock.now_ns());
            node.server_ns += answered.saturating_sub(released);
            node.turns_sent += 1;
            let failed = record.failure.is_some();
            let answer = if ctx.keep_text {
                record.text.clone()
            } else {
                record.text.take()
            }
            .unwrap_or_default();
            let output_tokens = record.output_tokens;
            history_tokens += output_tokens;
            let _ = ctx.tx.send(record);
            last.end = answered;
            if failed {
                // Nothing after this turn can be sent without its answer.
                ctx.unsent
                    .fetch_add(turns_in(&turns[k + 1..]), Ordering::AcqRel);
                node.failed = true;
                last.ok = false;
                break;
            }
            if k + 1 == turns.len() {
                node.end = Some(answered);
                last.answer = answer;
                last.answer_tokens = output_tokens;
                break;
            }
            history.push(Message {
                role: "assistant",
                text: answer,
            });
            // The waits this answer starts: its sub-agents and its tool, side by side.
            let children: Vec<_> = turn
                .subagents
                .iter()
                .map(|sub| {
                    let start = Start {
                        session: start.session.clone(),
                        parent: Some(script.id.clone()),
                        depth: start.depth + 1,
                        at: answered,
                        queue_ns: 0,
                        waited_for_slot: false,
                    };
                    tokio::spawn(run_agent(Arc::clone(&ctx), sub.clone(), start))
                })
                .collect();
            let mut wait_end = answered;
            if let Some(tool) = &turn.tool {
                let tool_end = answered.saturating_add(tool.latency_ns);
                let done = tokio::select! {
                    biased;
                    _ = ctx.stop.dispatch_stop() => false,
                    _ = tokio::time::sleep_until(ctx.clock.instant_at(tool_end)) => true,
                };
                let until = if done { tool_end } else { ctx.clock.now_ns() };
                node.tool_ns += until.saturating_sub(answered);
                node.tool_calls += 1;
                node.tool_waits.push([answered, until]);
                wait_end = until;
            }
            let mut sub_failed = false;
            let mut children_end = wait_end;
            for c in children {
                match c.await {
                    Ok(e) => {
                        sub_failed |= !e.ok;
                        children_end = children_end.max(e.end);
                        results.push((e.answer, e.answer_tokens));
                    }
                    Err(_) => sub_failed = true,
                }
            }
            node.subagent_wait_ns += children_end - wait_end;
            wait_end = children_end;
            if sub_failed || ctx.stop.dispatch_stopped() {
                ctx.unsent
                    .fetch_add(turns_in(&turns[k + 1..]), Ordering::AcqRel);
                node.failed |= sub_failed;
                last.ok = false;
                last.end = wait_end;
                break;
            }
            ready = wait_end;
        }
        if let Ok(mut nodes) = ctx.nodes.lock() {
            nodes.push(node);
        }
        last
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use servebench_metrics::{CountSource, Failure, FailureKind};
    use servebench_workload::agentic::{TokenMessage, ToolCall};

    use super::*;
    use crate::backend::Backend;

    const MS: u64 = 1_000_000;

    /// Answers after `service` of (paused) tokio time with `answer-ID` (2 output tokens); a
    /// user message containing "FAIL" gets an HTTP 500. Keeps every history and header.
    struct Chat {
        service: Duration,
        seen: Mutex<Vec<(Vec<Message>, Option<String>)>>,
    }

    impl Backend for Chat {
        type Request = (u64, Vec<Message>, u64);

        async fn execute(
            &self,
            clock: &RunClock,
            request: &Self::Request,
            intended: u64,
            released: u64,
            waited_for_slot: bool,
            _stop: &StopSignal,
        ) -> RequestRecord {
            let (id, history, input) = request;
            let mut headers = HeaderMap::new();
            add_session_header(&mut headers);
            let header = headers
                .get("x-session")
                .map(|v| v.to_str().unwrap().to_owned());
            self.seen.lock().unwrap().push((history.clone(), header));
            tokio::time::sleep(self.service).await;
            let end = clock.now_ns();
            let fail = history.last().is_some_and(|m| m.text.contains("FAIL"));
            RequestRecord {
                phases: None,
                images: None,
                id: *id,
                intended,
                released,
                sent: released,
                started: None,
                bare_events: Vec::new(),
                first_token: (!fail).then_some(end),
                end: (!fail).then_some(end),
                done: Some(end),
                waited_for_slot,
                events: Vec::new(),
                input_tokens: *input,
                input_source: CountSource::Dataset,
                output_tokens: 2,
                output_source: CountSource::Events,
                intended_input_tokens: *input,
                max_tokens: Some(2),
                cached_tokens: None,
                finish_reason: None,
                text: (!fail).then(|| format!("answer-{id}")),
                failure: fail.then(|| Failure {
                    kind: FailureKind::HttpStatus,
                    status: Some(500),
                    message: "HTTP 500".into(),
                }),
                resent: 0,
                answer_checked: false,
                session_id: None,
                turn: None,
                output_split: None,
                stamp_clock: None,
                lora: None,
                served_by: None,
            }
        }
    }

    impl ConversationBackend for Chat {
        fn prepare_turn(
            &self,
            id: u64,
            history: &[Message],
            input_tokens: u64,
            _max_tokens: Option<u64>,
        ) -> Self::Request {
            (id, history.to_vec(), input_tokens)
        }
    }

    fn chat(ms: u64) -> Arc<Chat> {
        Arc::new(Chat {
            service: Duration::from_millis(ms),
            seen: Mutex::new(Vec::new()),
        })
    }

    fn msg(text: &str) -> TokenMessage {
        TokenMessage {
            text: text.into(),
            tokens: text.split_whitespace().count() as u64,
        }
    }

    fn turn(text: &str, tool_ms: Option<u64>, subagents: Vec<AgentScript>) -> ScriptTurn {
        ScriptTurn {
            input: msg(text),
            max_tokens: 2,
            think_time_ns: 0,
            tool: tool_ms.map(|ms| ToolCall {
                name: "t".into(),
                latency_ns: ms * MS,
            }),
            subagents,
        }
    }

    fn agent(id: &str, turns: Vec<ScriptTurn>) -> AgentScript {
        AgentScript {
            id: id.into(),
            system: Some(msg("be brief")),
            turns,
        }
    }

    fn spec(start: AgentStart) -> AgentSpec {
        AgentSpec {
            start,
            max_concurrency: None,
            progress: None,
            scrape_every: None,
            keep_text: false,
            session_header: Some(HeaderName::from_static("x-session")),
        }
    }

    fn tree() -> AgentScript {
        let child = |id: &str, ms: u64| {
            agent(
                id,
                vec![turn("look", Some(ms), vec![]), turn("more", None, vec![])],
            )
        };
        agent(
            "s",
            vec![
                turn("task one", Some(100), vec![]),
                turn(
                    "tool result",
                    None,
                    vec![child("s/1.0", 30), child("s/1.1", 60)],
                ),
                turn("", None, vec![]),
            ],
        )
    }

    #[tokio::test(start_paused = true)]
    async fn tool_waits_and_sub_agents_shape_the_tree() {
        let backend = chat(10);
        let out = run_agents(
            Arc::clone(&backend),
            vec![tree()],
            spec(AgentStart::Arrivals(vec![5 * MS])),
            None,
            StopSignal::never(),
        )
        .await
        .unwrap();
        let r = &out.load.records;
        assert_eq!(r.len(), 7);
        let of = |id: &str, turn: u32| {
            r.iter()
                .find(|x| x.session_id.as_deref() == Some(id) && x.turn == Some(turn))
                .unwrap()
        };
        // Turn 1 is due when the tool is done: the wait is in no request's figures.
        assert_eq!(of("s", 0).done, Some(15 * MS));
        assert_eq!(of("s", 1).intended, 115 * MS);
        assert_eq!(of("s", 1).released, 115 * MS);
        // Both sub-agents start at the answer's end and overlap.
        assert_eq!(of("s/1.0", 0).released, 125 * MS);
        assert_eq!(of("s/1.1", 0).released, 125 * MS);
        // The parent's last turn waits for the slower one: 125 + 10 + 60 + 10.
        assert_eq!(of("s", 2).intended, 205 * MS);
        let nodes: std::collections::HashMap<&str, &AgentNode> =
            out.nodes.iter().map(|n| (n.id.as_str(), n)).collect();
        let main = nodes["s"];
        assert_eq!(main.end, Some(215 * MS));
        assert_eq!(main.start, 5 * MS);
        assert_eq!(main.server_ns, 30 * MS);
        assert_eq!(main.tool_ns, 100 * MS);
        assert_eq!(main.subagent_wait_ns, 80 * MS);
        assert_eq!(
            main.server_ns + main.tool_ns + main.subagent_wait_ns,
            main.end.unwrap() - main.start
        );
        assert_eq!(nodes["s/1.1"].depth, 1);
        assert_eq!(nodes["s/1.1"].parent.as_deref(), Some("s"));
        assert_eq!(nodes["s/1.1"].tool_waits, vec![[135 * MS, 195 * MS]]);
        // Context: the last turn carries the sub-agents' answers, in spawn order, as one
        // user message after the history the server returned.
        let seen = backend.seen.lock().unwrap().clone();
        let (last, header) = seen.iter().find(|(h, _)| h.len() == 6).unwrap();
        let roles: Vec<&str> = last.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            ["system", "user", "assistant", "user", "assistant", "user"]
        );
        let a0 = of("s/1.0", 1).id;
        let a1 = of("s/1.1", 1).id;
        assert_eq!(last[5].text, format!("answer-{a0}\n\nanswer-{a1}"));
        assert_eq!(header.as_deref(), Some("s"));
        assert!(seen.iter().any(|(_, h)| h.as_deref() == Some("s/1.0")));
        // Token accounting: history grows by every answer and message exactly.
        let l = of("s", 2);
        assert_eq!(l.input_tokens, 2 + 2 + 2 + 2 + 2 + 2 + 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_sub_agent_ends_its_parent_and_users_start_sessions_back_to_back() {
        let backend = chat(10);
        let doomed = agent(
            "d",
            vec![
                turn(
                    "go",
                    None,
                    vec![agent("d/0.0", vec![turn("FAIL", None, vec![])])],
                ),
                turn("never", None, vec![]),
            ],
        );
        let fine = agent(
            "f",
            vec![turn("a", Some(5), vec![]), turn("b", None, vec![])],
        );
        let out = run_agents(
            Arc::clone(&backend),
            vec![
                doomed,
                fine.clone(),
                AgentScript {
                    id: "g".into(),
                    ..fine
                },
            ],
            spec(AgentStart::Users(1)),
            None,
            StopSignal::never(),
        )
        .await
        .unwrap();
        assert_eq!(out.load.records.len(), 2 + 2 + 2);
        assert_eq!(out.load.not_dispatched, 1);
        let d = out.nodes.iter().find(|n| n.id == "d").unwrap();
        assert!(d.failed);
        assert_eq!(d.end, None);
        // One user: f starts when d gave up (20 ms), g when f ended (20 + 25).
        let first = |id: &str| {
            out.load
                .records
                .iter()
                .find(|r| r.session_id.as_deref() == Some(id))
                .unwrap()
                .intended
        };
        assert_eq!(first("f"), 20 * MS);
        assert_eq!(first("g"), 45 * MS);
    }
}
