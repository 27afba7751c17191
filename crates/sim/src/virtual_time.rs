//! The virtual-time driver (docs/simulator.md §8): a discrete-event loop over the engine core,
//! without tokio or sleeping. Events are client arrivals and step ends; an idle engine jumps
//! to the next arrival, so an hour of load costs seconds of CPU.
//!
//! A client-side concurrency cap holds arrivals until a request in flight finishes (a closed
//! loop is "everything intended at 0 with a cap"), so queueing in the client emerges as the
//! gap between `intended_ns` and `sent_ns`.

use std::collections::{HashMap, VecDeque};

use crate::engine::{EngineConfig, EngineCore, EngineMetrics, FinishReason, NewRequest};
use crate::virtual_driver::{run_workload, ClientQueue, VirtualTarget};
use crate::SimError;

/// One request of a virtual workload and when the client means to send it.
#[derive(Debug, Clone)]
pub struct VirtualArrival {
    /// Intended send time (ns from the start of the run).
    pub intended_ns: u64,
    /// The request; its `arrival_ns` is overwritten with the time it reaches the engine.
    pub request: NewRequest,
}

/// What to run.
#[derive(Debug, Clone, Default)]
pub struct VirtualWorkload {
    pub arrivals: Vec<VirtualArrival>,
    /// Client-side cap on requests in flight (`None` = open loop without a cap).
    pub max_concurrency: Option<usize>,
}

/// What happened to one request, in engine nanoseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestTrace {
    pub id: u64,
    pub intended_ns: u64,
    /// When the client got a slot and the request reached the engine.
    pub sent_ns: u64,
    pub first_scheduled_ns: Option<u64>,
    /// One entry per generated token (tokens of one step share its end time).
    pub token_times_ns: Vec<u64>,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub cached_tokens: u32,
    /// `None` only for a request still in flight (the run stopped early).
    pub finish_reason: Option<FinishReason>,
    pub preemptions: u32,
    /// When the request left the engine.
    pub end_ns: Option<u64>,
    /// Generated token ids, in order: kept only by a driver asked to
    /// ([`VirtualDriver::keep_output_ids`]), empty otherwise.
    pub output_ids: Vec<u32>,
}

impl RequestTrace {
    /// Intended send → first token (what a user waits, client-side queueing included).
    pub fn ttft_ns(&self) -> Option<u64> {
        self.token_times_ns
            .first()
            .map(|t| t.saturating_sub(self.intended_ns))
    }

    /// Mean gap between successive tokens: `(last − first) / (n − 1)`.
    pub fn tpot_ns(&self) -> Option<f64> {
        let n = self.token_times_ns.len();
        if n < 2 {
            return None;
        }
        Some((self.token_times_ns[n - 1] - self.token_times_ns[0]) as f64 / (n - 1) as f64)
    }

    /// Gaps between successive tokens.
    pub fn itls_ns(&self) -> impl Iterator<Item = u64> + '_ {
        self.token_times_ns.windows(2).map(|w| w[1] - w[0])
    }
}

/// The result of a virtual run.
#[derive(Debug, Clone)]
pub struct VirtualRun {
    /// In the order the arrivals were given.
    pub traces: Vec<RequestTrace>,
    pub metrics: EngineMetrics,
    pub steps: u64,
    /// Engine time when the last step ended.
    pub end_ns: u64,
}

/// Runs a whole workload to completion in virtual time.
pub fn run_virtual(
    config: EngineConfig,
    workload: VirtualWorkload,
) -> Result<VirtualRun, SimError> {
    run_virtual_with(config, workload, false)
}

/// [`run_virtual`], keeping each request's generated token ids in its trace (so its text can
/// be rebuilt and checked).
pub fn run_virtual_keeping_output(
    config: EngineConfig,
    workload: VirtualWorkload,
) -> Result<VirtualRun, SimError> {
    run_virtual_with(config, workload, true)
}

fn run_virtual_with(
    config: EngineConfig,
    workload: VirtualWorkload,
    keep_output_ids: bool,
) -> Result<VirtualRun, SimError> {
    let driver = VirtualDriver::new(config, workload.max_concurrency)?;
    run_workload(driver, workload.arrivals, keep_output_ids)
}

/// A stepping virtual-time driver: submit arrivals, run until idle, touch the engine between
/// runs (e.g. reset its prefix cache), and collect traces.
#[derive(Debug)]
pub struct VirtualDriver {
    core: EngineCore,
    now_ns: u64,
    pending: ClientQueue,
    max_concurrency: Option<usize>,
    /// Times at which a client slot became free, oldest first (only with a cap).
    free_slots: VecDeque<u64>,
    in_flight: usize,
    traces: Vec<RequestTrace>,
    /// Request id → trace index; looked up only.
    trace_index: HashMap<u64, usize>,
    steps: u64,
    /// Record generated token ids in the traces (memory grows with every output token).
    keep_output_ids: bool,
    /// Sent requests on their way to the engine: (when it can see them, request, trace).
    inbox: VecDeque<(u64, NewRequest, usize)>,
    /// When the last step ended.
    last_step_end_ns: Option<u64>,
}

impl VirtualDriver {
    /// A driver over a fresh engine at time 0.
    pub fn new(config: EngineConfig, max_concurrency: Option<usize>) -> Result<Self, SimError> {
        if max_concurrency == Some(0) {
            return Err(SimError::Config(
                "max_concurrency must be at least 1".into(),
            ));
        }
        let core = EngineCore::new(config)?;
        let free_slots = match max_concurrency {
            Some(c) => std::iter::repeat_n(0, c).collect(),
            None => VecDeque::new(),
        };
        Ok(VirtualDriver {
            core,
            now_ns: 0,
            pending: ClientQueue::default(),
            max_concurrency,
            free_slots,
            in_flight: 0,
            traces: Vec::new(),
            trace_index: HashMap::new(),
            steps: 0,
            keep_output_ids: false,
            inbox: VecDeque::new(),
            last_step_end_ns: None,
        })
    }

    /// From now on, traces keep their requests' generated token ids.
    pub fn keep_output_ids(&mut self) {
        self.keep_output_ids = true;
    }

    /// Queue an arrival. One intended before the current engine time is sent no earlier than
    /// now (the client cannot go back in time); its trace keeps the intended time.
    pub fn submit(&mut self, arrival: VirtualArrival) {
        VirtualTarget::submit(self, arrival);
    }

    /// Steps the engine until no request is waiting, running or pending in the client.
    pub fn run_until_idle(&mut self) -> Result<(), SimError> {
        while self.step()? {}
        Ok(())
    }

    /// Advances to the next event: sends due arrivals, then runs one engine step, or jumps an
    /// idle engine to the next arrival. `false` when there is nothing left to do.
    pub fn step(&mut self) -> Result<bool, SimError> {
        self.send_due();
        self.deliver_ready();
        if self.core.is_idle() {
            let Some(at) = self.next_event() else {
                return Ok(false);
            };
            if at <= self.now_ns {
                // Due but without a client slot while the engine is idle: a slot frees up only
                // when a request finishes, and none is in flight.
                return Err(SimError::Config(format!(
                    "virtual client stalled with {} requests in flight and an idle engine",
                    self.in_flight
                )));
            }
            self.now_ns = at;
            return Ok(true);
        }
        let Some(plan) = self.core.plan_step(self.now_ns) else {
            return Err(SimError::Config(
                "engine produced an empty step with requests queued".into(),
            ));
        };
        for (id, _, _) in plan.entries() {
            if let Some(&i) = self.trace_index.get(&id) {
                self.traces[i].first_scheduled_ns.get_or_insert(self.now_ns);
            }
        }
        let t1 = self.now_ns + plan.duration_ns;
        let out = self.core.commit_step(plan, t1);
        self.steps += 1;
        self.now_ns = t1;
        self.last_step_end_ns = Some(t1);
        for tok in &out.tokens {
            if let Some(&i) = self.trace_index.get(&tok.id) {
                self.traces[i].token_times_ns.push(t1);
                if self.keep_output_ids {
                    self.traces[i].output_ids.push(tok.token);
                }
            }
        }
        for f in out.finished {
            let Some(i) = self.trace_index.remove(&f.id) else {
                continue;
            };
            let tr = &mut self.traces[i];
            tr.prompt_tokens = f.prompt_tokens;
            tr.completion_tokens = f.completion_tokens;
            tr.cached_tokens = f.cached_tokens;
            tr.finish_reason = Some(f.reason);
            tr.preemptions = f.preemptions;
            tr.end_ns = Some(t1);
            self.in_flight -= 1;
            if self.max_concurrency.is_some() {
                self.free_slot_at(t1);
            }
        }
        Ok(true)
    }

    /// The next time something can happen while the engine is idle.
    fn next_event(&self) -> Option<u64> {
        let inbox = self.inbox.front().map(|(t, _, _)| *t);
        let send = self.pending.front().and_then(|p| {
            let slot = match self.max_concurrency {
                Some(_) => *self.free_slots.front()?,
                None => 0,
            };
            Some(p.due_ns().max(slot))
        });
        match (inbox, send) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn free_slot_at(&mut self, t: u64) {
        let at = self.free_slots.partition_point(|&x| x <= t);
        self.free_slots.insert(at, t);
    }

    /// Sends every pending arrival that is due at `now` and has a client slot.
    fn send_due(&mut self) {
        while let Some(p) = self.pending.front() {
            let due = p.due_ns();
            if due > self.now_ns {
                break;
            }
            let slot_free_at = match self.max_concurrency {
                Some(_) => match self.free_slots.front() {
                    Some(&t) if t <= self.now_ns => {
                        self.free_slots.pop_front();
                        t
                    }
                    _ => break,
                },
                None => 0,
            };
            let Some(p) = self.pending.pop() else {
                break;
            };
            let sent = due.max(slot_free_at);
            self.traces[p.trace].sent_ns = sent;
            // A request sent because the step that just ended freed its slot learns of that
            // end only after the engine has begun the next step (over HTTP the last token
            // travels to the client and the new request back): it joins the step after.
            let ready = if self.last_step_end_ns == Some(sent) && slot_free_at == sent {
                sent + 1
            } else {
                sent
            };
            self.inbox.push_back((ready, p.arrival.request, p.trace));
        }
    }

    /// Hands the engine every sent request that has reached it by now.
    fn deliver_ready(&mut self) {
        while self
            .inbox
            .front()
            .is_some_and(|(t, _, _)| *t <= self.now_ns)
        {
            let Some((ready, mut request, trace)) = self.inbox.pop_front() else {
                break;
            };
            request.arrival_ns = ready;
            let id = request.id;
            match self.core.try_add(request) {
                Ok(()) => {
                    self.trace_index.insert(id, trace);
                    self.in_flight += 1;
                }
                Err(e) => {
                    // Refused at once, as a server answers 400: the slot frees immediately.
                    tracing::warn!("virtual client: {e}");
                    let tr = &mut self.traces[trace];
                    tr.finish_reason = Some(FinishReason::Abort);
                    tr.end_ns = Some(ready);
                    if self.max_concurrency.is_some() {
                        self.free_slot_at(ready);
                    }
                }
            }
        }
    }

    /// Drops the engine's prefix cache; false while blocks are in use.
    pub fn reset_prefix_cache(&mut self) -> bool {
        self.core.reset_prefix_cache()
    }

    /// Current engine time.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Moves the clock forward (never back), e.g. to leave a gap between phases.
    pub fn advance_to(&mut self, t_ns: u64) {
        self.now_ns = self.now_ns.max(t_ns);
    }

    /// The engine, for gauges and metrics between runs.
    pub fn core(&self) -> &EngineCore {
        &self.core
    }

    /// Traces so far, in submission order.
    pub fn traces(&self) -> &[RequestTrace] {
        &self.traces
    }

    /// Arrivals the client has not sent yet (waiting for their time or for a slot).
    pub fn num_pending(&self) -> usize {
        self.pending.len()
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Ends the run.
    pub fn finish(self) -> VirtualRun {
        VirtualRun {
            metrics: self.core.metrics().clone(),
            traces: self.traces,
            steps: self.steps,
            end_ns: self.now_ns,
        }
    }
}

impl VirtualTarget for VirtualDriver {
    type Run = VirtualRun;

    fn open_trace(&mut self, arrival: &VirtualArrival) -> usize {
        self.traces.push(RequestTrace::for_arrival(arrival));
        self.traces.len() - 1
    }

    fn queue(&mut self, arrival: VirtualArrival, trace: usize) {
        self.pending.push(arrival, trace, self.now_ns);
    }

    fn keep_output_ids(&mut self) {
        VirtualDriver::keep_output_ids(self);
    }

    fn run_until_idle(&mut self) -> Result<(), SimError> {
        VirtualDriver::run_until_idle(self)
    }

    fn reset_prefix_cache(&mut self) -> bool {
        VirtualDriver::reset_prefix_cache(self)
    }

    fn now_ns(&self) -> u64 {
        VirtualDriver::now_ns(self)
    }

    fn finish(self) -> VirtualRun {
        VirtualDriver::finish(self)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::test_support::{arrival, engine_config as config};

    #[test]
    fn an_idle_engine_jumps_to_the_next_arrival() {
        let run = run_virtual(
            config(),
            VirtualWorkload {
                arrivals: vec![arrival(1, 1_000, 3), arrival(2, 5_000, 3)],
                max_concurrency: None,
            },
        )
        .unwrap();
        assert_eq!(run.steps, 6);
        let [a, b] = &run.traces[..] else {
            panic!("two traces")
        };
        assert_eq!(a.sent_ns, 1_000_000_000);
        assert_eq!(a.first_scheduled_ns, Some(1_000_000_000));
        assert_eq!(b.sent_ns, 5_000_000_000);
        assert_eq!(b.first_scheduled_ns, Some(5_000_000_000));
        assert_eq!(a.token_times_ns.len(), 3);
        assert_eq!(a.finish_reason, Some(FinishReason::Length));
        assert_eq!(run.end_ns, *b.token_times_ns.last().unwrap());
    }

    #[test]
    fn a_concurrency_cap_holds_arrivals_until_a_slot_frees() {
        // Closed loop of 1: each request is sent when the previous one ends.
        let run = run_virtual(
            config(),
            VirtualWorkload {
                arrivals: (0..3).map(|i| arrival(i, 0, 4)).collect(),
                max_concurrency: Some(1),
            },
        )
        .unwrap();
        let t = &run.traces;
        assert_eq!(t[0].sent_ns, 0);
        assert_eq!(t[1].sent_ns, t[0].end_ns.unwrap());
        assert_eq!(t[2].sent_ns, t[1].end_ns.unwrap());
        assert!(t.iter().all(|x| x.intended_ns == 0));
        // Queueing in the client is visible as sent − intended.
        assert!(t[2].sent_ns > t[1].sent_ns);
    }

    #[test]
    fn a_replacement_request_misses_the_step_that_begins_as_its_slot_frees() {
        // Two in flight: request 0 (2 tokens) ends while request 1 (6 tokens) runs on; request 2
        // is sent into the freed slot at that step's end, and the engine, already stepping on
        // with request 1, schedules it only in the step after.
        let run = run_virtual(
            config(),
            VirtualWorkload {
                arrivals: vec![arrival(0, 0, 2), arrival(1, 0, 6), arrival(2, 0, 2)],
                max_concurrency: Some(2),
            },
        )
        .unwrap();
        let (a, b, c) = (&run.traces[0], &run.traces[1], &run.traces[2]);
        let freed = a.end_ns.unwrap();
        assert_eq!(c.sent_ns, freed);
        let next_step_end = *b.token_times_ns.iter().find(|&&t| t > freed).unwrap();
        assert_eq!(c.first_scheduled_ns, Some(next_step_end));
        assert!(c.ttft_ns().unwrap() > next_step_end - freed);
    }

    #[test]
    fn a_replacement_into_an_idle_engine_starts_at_once() {
        let run = run_virtual(
            config(),
            VirtualWorkload {
                arrivals: (0..2).map(|i| arrival(i, 0, 3)).collect(),
                max_concurrency: Some(1),
            },
        )
        .unwrap();
        let (a, b) = (&run.traces[0], &run.traces[1]);
        // One nanosecond later: the engine has nothing else to run.
        assert_eq!(b.first_scheduled_ns, Some(a.end_ns.unwrap() + 1));
    }

    #[test]
    fn arrivals_during_a_step_are_seen_by_the_next_schedule() {
        let run = run_virtual(
            config(),
            VirtualWorkload {
                arrivals: vec![arrival(1, 0, 50), arrival(2, 1, 2)],
                max_concurrency: None,
            },
        )
        .unwrap();
        let (a, b) = (&run.traces[0], &run.traces[1]);
        // Request 2 arrives 1 ms into request 1's prefill step and is scheduled at its end.
        assert_eq!(b.sent_ns, 1_000_000);
        assert_eq!(b.first_scheduled_ns, Some(a.token_times_ns[0]));
    }

    #[test]
    fn traces_keep_the_given_order_and_refusals_are_recorded() {
        let mut bad = arrival(9, 0, 1);
        bad.request.prompt.clear();
        let run = run_virtual(
            config(),
            VirtualWorkload {
                arrivals: vec![arrival(1, 20, 1), bad, arrival(3, 10, 1)],
                max_concurrency: Some(1),
            },
        )
        .unwrap();
        let ids: Vec<u64> = run.traces.iter().map(|t| t.id).collect();
        assert_eq!(ids, vec![1, 9, 3]);
        assert_eq!(run.traces[1].finish_reason, Some(FinishReason::Abort));
        assert!(run.traces[1].token_times_ns.is_empty());
        assert!(run.traces[0].finish_reason == Some(FinishReason::Length));
    }

    #[test]
    fn the_stepping_driver_resets_the_cache_between_phases() {
        let mut d = VirtualDriver::new(config(), Some(1)).unwrap();
        d.submit(arrival(1, 0, 2));
        d.run_until_idle().unwrap();
        d.advance_to(10_000_000_000);
        d.submit(arrival(2, 0, 2)); // intended in the past: sent now
        let mut same = arrival(3, 0, 1);
        same.request.prompt = arrival(2, 0, 1).request.prompt;
        d.submit(same);
        d.run_until_idle().unwrap();
        let t = d.traces();
        assert_eq!(t[1].sent_ns, 10_000_000_000);
        assert_eq!(t[2].cached_tokens, 96);
        assert!(d.reset_prefix_cache());
        assert_eq!(d.num_pending(), 0);
        let run = d.finish();
        assert_eq!(run.traces.len(), 3);
        assert_eq!(run.metrics.request_success_length, 3);
    }

    #[test]
    fn zero_concurrency_is_refused() {
        assert!(VirtualDriver::new(config(), Some(0)).is_err());
    }
}
