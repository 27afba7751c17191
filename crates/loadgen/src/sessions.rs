//! The session driver (`--multi-turn`): conversations start open-loop at their arrival
//! times; within one, turn k is sent when turn k−1's answer has finished plus the turn's
//! think time, carrying the whole history — every earlier user turn and the text the server
//! actually returned. A session holds its concurrency slot for all its turns. A failed turn
//! is recorded and ends its session; the others go on.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use servebench_metrics::RequestRecord;
use tokio::sync::{mpsc, Semaphore};

use crate::backend::Backend;
use crate::client::{BackendClient, Prepared};
use crate::clock::RunClock;
use crate::collector::{collect, JsonlSink};
use crate::dispatcher::LoadOutcome;
use crate::health::process_cpu_times;
use crate::progress::{Drawer, Live, Progress};
use crate::stop::StopSignal;
use crate::telemetry::Scraper;
use crate::LoadgenError;

/// One message of a conversation as it is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `user` or `assistant`.
    pub role: &'static str,
    pub text: String,
}

/// A backend that can send a conversation: builds one turn's request from the history.
pub trait ConversationBackend: Backend {
    /// The request for the newest turn of `history` (which ends with that user message).
    /// `input_tokens` is the history's intended length, used when the server gives no usage.
    fn prepare_turn(
        &self,
        id: u64,
        history: &[Message],
        input_tokens: u64,
        max_tokens: Option<u64>,
    ) -> Self::Request;
}

impl ConversationBackend for BackendClient {
    fn prepare_turn(
        &self,
        id: u64,
        history: &[Message],
        input_tokens: u64,
        max_tokens: Option<u64>,
    ) -> Prepared {
        let messages: Vec<(&str, &str)> =
            history.iter().map(|m| (m.role, m.text.as_str())).collect();
        Prepared {
            id,
            body: bytes::Bytes::from(self.target().conversation_body(&messages, max_tokens)),
            input_tokens,
            max_tokens,
            expected: None,
            lora: None,
            images: None,
        }
    }
}

/// One user turn as the driver sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptedTurn {
    pub prompt: String,
    /// Tokens of `prompt` under the run's tokenizer.
    pub input_tokens: u64,
    pub max_tokens: Option<u64>,
    /// Pause between the previous answer's end and this turn (ignored for the first turn).
    pub think_time: Duration,
}

/// A conversation to replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptedSession {
    pub id: String,
    pub turns: Vec<ScriptedTurn>,
}

/// How to drive a run of sessions.
#[derive(Debug, Clone, Default)]
pub struct SessionSpec {
    /// When each session arrives (ns from the run start), one per session, non-decreasing.
    pub arrivals: Vec<u64>,
    /// Sessions active at once (`--max-concurrency`); a waiting session queues in order.
    pub max_concurrency: Option<usize>,
    pub progress: Option<Progress>,
    pub scrape_every: Option<Duration>,
    /// Keep each answer's text in its record; without it the text is only used for the
    /// history and dropped from the record.
    pub keep_text: bool,
}

/// Run `sessions` on `client` following `spec`; records (one per turn sent, with
/// `session_id` and `turn`) stream into `sink`. Record ids number the turns in the order they
/// were sent. `client` must return each answer's text in its record (`keep_text`).
pub async fn run_sessions<B: ConversationBackend>(
    client: Arc<B>,
    sessions: Vec<ScriptedSession>,
    spec: SessionSpec,
    sink: Option<JsonlSink>,
    stop: StopSignal,
) -> Result<LoadOutcome, LoadgenError> {
    if spec.arrivals.len() != sessions.len() {
        return Err(LoadgenError::Config(format!(
            "{} arrival times for {} sessions",
            spec.arrivals.len(),
            sessions.len()
        )));
    }
    if let Some(s) = sessions.iter().find(|s| s.turns.is_empty()) {
        return Err(LoadgenError::Config(format!(
            "session {:?} has no turns",
            s.id
        )));
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let live = Arc::new(Live::default());
    // A session's later turns come after its arrival, so the last arrival is only a floor.
    let drawer = spec.progress.clone().map(|p| {
        let last = spec.arrivals.last().copied().filter(|&t| t > 0);
        Drawer::start(p, Arc::clone(&live), last.map(Duration::from_nanos))
    });
    let collector = tokio::spawn(collect(rx, sink, Arc::clone(&live), drawer));
    let semaphore = spec
        .max_concurrency
        .map(|n| Arc::new(Semaphore::new(n.max(1))));
    let cpu_before = process_cpu_times();
    let started_at = SystemTime::now();
    let clock = RunClock::start_now();
    live.begin();
    let scraper = spec.scrape_every.and_then(|every| {
        client
            .telemetry_target()
            .map(|target| Scraper::start(target.clone(), clock, every))
    });
    let next_id = Arc::new(AtomicU64::new(0));
    let unsent = Arc::new(AtomicUsize::new(0));
    let mut running = tokio::task::JoinSet::new();
    let mut sessions = sessions.into_iter();
    for &arrival in &spec.arrivals {
        let Some(session) = sessions.next() else {
            break;
        };
        let deadline = clock.instant_at(arrival);
        let arrived = !stop.dispatch_stopped()
            && tokio::select! {
                biased;
                _ = stop.dispatch_stop() => false,
                _ = tokio::time::sleep_until(deadline) => true,
            };
        // Sessions queue for a slot in arrival order (the semaphore is fair); later arrivals
        // wait behind them, and their lateness shows as `released − intended`.
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
            unsent.fetch_add(session.turns.len(), Ordering::AcqRel);
            break;
        };
        let waited = permit.as_ref().is_some_and(|(_, w)| *w);
        let ctx = Turns {
            client: Arc::clone(&client),
            tx: tx.clone(),
            stop: stop.clone(),
            clock,
            next_id: Arc::clone(&next_id),
            unsent: Arc::clone(&unsent),
            keep_text: spec.keep_text,
            live: Arc::clone(&live),
        };
        running.spawn(async move {
            ctx.converse(session, arrival, waited).await;
            drop(permit);
        });
    }
    // Sessions that never arrived because dispatch stopped.
    for s in sessions {
        unsent.fetch_add(s.turns.len(), Ordering::AcqRel);
    }
    while running.join_next().await.is_some() {}
    drop(tx);
    crate::dispatcher::outcome(collector, scraper, cpu_before, started_at, clock, |_| {
        unsent.load(Ordering::Acquire)
    })
    .await
}

/// What one session's task needs to send its turns.
struct Turns<B> {
    client: Arc<B>,
    tx: mpsc::UnboundedSender<RequestRecord>,
    stop: StopSignal,
    clock: RunClock,
    next_id: Arc<AtomicU64>,
    unsent: Arc<AtomicUsize>,
    keep_text: bool,
    live: Arc<Live>,
}

impl<B: ConversationBackend> Turns<B> {
    async fn converse(&self, session: ScriptedSession, arrival: u64, waited_for_slot: bool) {
        let mut history: Vec<Message> = Vec::with_capacity(session.turns.len() * 2);
        let mut history_tokens = 0u64;
        let mut due = arrival;
        let mut previous_end = arrival;
        let total = session.turns.len();
        for (k, turn) in session.turns.into_iter().enumerate() {
            if k > 0 {
                let think = u64::try_from(turn.think_time.as_nanos()).unwrap_or(u64::MAX);
                due = previous_end.saturating_add(think);
                let deadline = self.clock.instant_at(due);
                let go = !self.stop.dispatch_stopped()
                    && tokio::select! {
                        biased;
                        _ = self.stop.dispatch_stop() => false,
                        _ = tokio::time::sleep_until(deadline) => true,
                    };
                if !go {
                    self.unsent.fetch_add(total - k, Ordering::AcqRel);
                    return;
                }
            }
            history_tokens += turn.input_tokens;
            history.push(Message {
                role: "user",
                text: turn.prompt,
            });
            let id = self.next_id.fetch_add(1, Ordering::AcqRel);
            let request = self
                .client
                .prepare_turn(id, &history, history_tokens, turn.max_tokens);
            let released = self.clock.now_ns();
            self.live.released();
            let mut record = self
                .client
                .execute(
                    &self.clock,
                    &request,
                    due,
                    released,
                    waited_for_slot && k == 0,
                    &self.stop,
                )
                .await;
            record.session_id = Some(session.id.clone());
            record.turn = Some(u32::try_from(k).unwrap_or(u32::MAX));
            let failed = record.failure.is_some();
            let answer = if self.keep_text {
                record.text.clone()
            } else {
                record.text.take()
            };
            let answered_at = record
                .done
                .or(record.end)
                .unwrap_or_else(|| self.clock.now_ns());
            history_tokens += record.output_tokens;
            let _ = self.tx.send(record);
            if failed {
                // The conversation cannot go on without this answer.
                return;
            }
            history.push(Message {
                role: "assistant",
                text: answer.unwrap_or_default(),
            });
            previous_end = answered_at;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Mutex;

    use servebench_metrics::{CountSource, Failure, FailureKind};

    use super::*;

    const MS: u64 = 1_000_000;

    /// Answers each turn after `service` of (paused) tokio time with the text `answer-ID`;
    /// a turn whose user message says "FAIL" gets an HTTP 500. Remembers every history it was
    /// sent and how many turns ran at once.
    struct Chat {
        service: Duration,
        in_flight: AtomicUsize,
        peak: AtomicUsize,
        seen: Mutex<Vec<Vec<Message>>>,
    }

    fn chat(service_ms: u64) -> Arc<Chat> {
        Arc::new(Chat {
            service: Duration::from_millis(service_ms),
            in_flight: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            seen: Mutex::new(Vec::new()),
        })
    }

    impl Backend for Chat {
        type Request = (u64, Vec<Message>);

        async fn execute(
            &self,
            clock: &RunClock,
            request: &Self::Request,
            intended: u64,
            released: u64,
            waited_for_slot: bool,
            _stop: &StopSignal,
        ) -> RequestRecord {
            let (id, history) = request;
            self.seen.lock().unwrap().push(history.clone());
            let now = self.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
            self.peak.fetch_max(now, Ordering::AcqRel);
            tokio::time::sleep(self.service).await;
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
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
                input_tokens: 1,
                input_source: CountSource::Dataset,
                output_tokens: 1,
                output_source: CountSource::Events,
                intended_input_tokens: 1,
                max_tokens: Some(1),
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
            _input_tokens: u64,
            _max_tokens: Option<u64>,
        ) -> Self::Request {
            (id, history.to_vec())
        }
    }

    fn session(id: &str, prompts: &[&str], think_ms: u64) -> ScriptedSession {
        ScriptedSession {
            id: id.into(),
            turns: prompts
                .iter()
                .map(|p| ScriptedTurn {
                    prompt: (*p).into(),
                    input_tokens: 1,
                    max_tokens: Some(1),
                    think_time: Duration::from_millis(think_ms),
                })
                .collect(),
        }
    }

    fn spec(arrivals_ms: &[u64], max_concurrency: Option<usize>) -> SessionSpec {
        SessionSpec {
            arrivals: arrivals_ms.iter().map(|ms| ms * MS).collect(),
            max_concurrency,
            progress: None,
            scrape_every: None,
            keep_text: false,
        }
    }

    fn of<'a>(records: &'a [RequestRecord], session: &str) -> Vec<&'a RequestRecord> {
        let mut v: Vec<_> = records
            .iter()
            .filter(|r| r.session_id.as_deref() == Some(session))
            .collect();
        v.sort_by_key(|r| r.turn);
        v
    }

    #[tokio::test(start_paused = true)]
    async fn each_turn_carries_the_history_with_the_answers_returned() {
        let backend = chat(10);
        let out = run_sessions(
            Arc::clone(&backend),
            vec![session("s", &["one", "two", "three"], 0)],
            spec(&[0], None),
            None,
            StopSignal::never(),
        )
        .await
        .unwrap();
        assert_eq!(out.records.len(), 3);
        let seen = backend.seen.lock().unwrap().clone();
        let texts: Vec<Vec<(&str, &str)>> = seen
            .iter()
            .map(|h| h.iter().map(|m| (m.role, m.text.as_str())).collect())
            .collect();
        assert_eq!(texts[0], [("user", "one")]);
        assert_eq!(
            texts[2],
            [
                ("user", "one"),
                ("assistant", "answer-0"),
                ("user", "two"),
                ("assistant", "answer-1"),
                ("user", "three")
            ]
        );
        let turns: Vec<Option<u32>> = out.records.iter().map(|r| r.turn).collect();
        assert_eq!(turns, [Some(0), Some(1), Some(2)]);
        assert!(out
            .records
            .iter()
            .all(|r| r.session_id.as_deref() == Some("s")));
        // The text served the history; the records drop it unless asked to keep it.
        assert!(out.records.iter().all(|r| r.text.is_none()));
    }

    #[tokio::test(start_paused = true)]
    async fn think_time_delays_the_next_turn_from_the_previous_answer() {
        let out = run_sessions(
            chat(10),
            vec![session("s", &["a", "b"], 250)],
            spec(&[5], None),
            None,
            StopSignal::never(),
        )
        .await
        .unwrap();
        let r = &out.records;
        assert_eq!(r[0].intended, 5 * MS);
        assert_eq!(r[0].done, Some(15 * MS));
        // Due at the previous answer's end plus the think time, and sent then.
        assert_eq!(r[1].intended, 265 * MS);
        assert_eq!(r[1].released, 265 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn a_session_holds_its_slot_for_all_its_turns() {
        let backend = chat(10);
        let out = run_sessions(
            Arc::clone(&backend),
            vec![
                session("a", &["1", "2"], 0),
                session("b", &["1", "2"], 0),
                session("c", &["1"], 0),
            ],
            spec(&[0, 0, 0], Some(2)),
            None,
            StopSignal::never(),
        )
        .await
        .unwrap();
        assert_eq!(out.records.len(), 5);
        assert_eq!(backend.peak.load(Ordering::Acquire), 2);
        let c = of(&out.records, "c");
        // c starts only when a whole session (two turns of 10 ms) has ended.
        assert_eq!(c[0].intended, 0);
        assert_eq!(c[0].released, 20 * MS);
        assert!(c[0].waited_for_slot);
        assert!(!of(&out.records, "a")[0].waited_for_slot);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_turn_ends_its_session_and_the_others_go_on() {
        let backend = chat(10);
        let out = run_sessions(
            Arc::clone(&backend),
            vec![
                session("bad", &["1", "FAIL", "3", "4"], 0),
                session("good", &["1", "2", "3", "4"], 0),
            ],
            spec(&[0, 0], None),
            None,
            StopSignal::never(),
        )
        .await
        .unwrap();
        let bad = of(&out.records, "bad");
        assert_eq!(bad.len(), 2, "nothing is sent after the failed turn");
        assert_eq!(bad[1].failure.as_ref().and_then(|f| f.status), Some(500));
        assert_eq!(of(&out.records, "good").len(), 4);
        // Only the failing turn itself ever carried the failed message.
        let carrying_failure = backend
            .seen
            .lock()
            .unwrap()
            .iter()
            .filter(|h| h.iter().any(|m| m.text == "FAIL"))
            .count();
        assert_eq!(carrying_failure, 1);
        // Ids number the turns sent, without gaps.
        let mut ids: Vec<u64> = out.records.iter().map(|r| r.id).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..6).collect::<Vec<_>>());
        assert_eq!(out.not_dispatched, 0);
    }

    #[tokio::test]
    async fn an_arrival_count_that_does_not_match_is_refused() {
        let err = run_sessions(
            chat(1),
            vec![session("s", &["a"], 0)],
            spec(&[0, 1], None),
            None,
            StopSignal::never(),
        )
        .await
        .unwrap_err();
        assert!(
            err.to_string().contains("2 arrival times for 1 sessions"),
            "{err}"
        );
    }
}
