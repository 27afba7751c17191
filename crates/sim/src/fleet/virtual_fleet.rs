//! A fleet in virtual time: one discrete-event loop over every engine of every pool. Events are
//! client arrivals, step ends (each engine keeps its own step in flight) and KV hand-offs of
//! prefill/decode pools; at one instant, steps commit first, then hand-offs land, then arrivals
//! are routed (so routers see the load as of that instant), then idle engines start a step.
//!
//! A disaggregated request runs twice: on a prefill engine with one output token (discarded,
//! as vLLM's P/D proxy discards the prefill instance's token), then, after the KV transfer, on a
//! decode engine that finds the prompt cached and computes only its tail before sampling the
//! first token the client sees. So TTFT = queueing + prefill + transfer + first decode step.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::engine::{EngineCore, EngineMetrics, FinishReason, NewRequest, StepPlan};
use crate::virtual_driver::{run_workload, ClientQueue, VirtualTarget, WarmedRun};
use crate::virtual_time::{RequestTrace, VirtualArrival, VirtualRun, VirtualWorkload};
use crate::SimError;

use super::router::{ReplicaPicker, TokenBucket};
use super::spec::ResolvedFleet;

/// Where a request was served, or why not.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Served {
    /// Pool name (empty for a request that never reached the fleet).
    pub pool: String,
    /// Replica label within the pool (`2`, or `d0` for a decode engine of a P/D pool).
    pub replica: String,
    /// Refused by the pool's rate limit (a 429 over HTTP).
    pub rate_limited: bool,
}

/// A virtual fleet run: the traces, plus where each request went.
#[derive(Debug, Clone)]
pub struct FleetRun {
    pub run: VirtualRun,
    /// Parallel to `run.traces`.
    pub served: Vec<Served>,
}

struct Engine {
    core: EngineCore,
    pool: usize,
    label: String,
    step: Option<(StepPlan, u64)>,
    /// Requests routed here, added to the core before its next step; `true` = arrives with
    /// its prompt's KV cache (a decode engine after a hand-off).
    queued: Vec<(NewRequest, bool)>,
    outstanding: usize,
}

struct PoolState {
    /// Engines taking whole requests, or the prefill engines of a P/D pool.
    front: std::ops::Range<usize>,
    /// Decode engines of a P/D pool (empty otherwise).
    decode: std::ops::Range<usize>,
    picker: ReplicaPicker,
    decode_picker: ReplicaPicker,
    bucket: Option<TokenBucket>,
}

#[derive(Clone, Copy)]
enum Stage {
    Whole,
    Prefill,
    Decode,
}

struct Live {
    engine: usize,
    stage: Stage,
    /// The original request, kept for the decode stage of a P/D request.
    request: Option<NewRequest>,
}

/// A stepping fleet driver with the shape of [`crate::virtual_time::VirtualDriver`].
pub struct FleetDriver {
    fleet: ResolvedFleet,
    engines: Vec<Engine>,
    pools: Vec<PoolState>,
    now_ns: u64,
    pending: ClientQueue,
    handoffs: BinaryHeap<Reverse<(u64, u64, usize)>>,
    /// Requests waiting for their hand-off, by sequence number.
    handing: HashMap<u64, (NewRequest, usize)>,
    handoff_seq: u64,
    max_concurrency: Option<usize>,
    in_flight: usize,
    traces: Vec<RequestTrace>,
    served: Vec<Served>,
    /// By trace index, which is also the request's id inside the engines (unique per engine,
    /// and a plain index instead of a hash lookup per token).
    live: Vec<Option<Live>>,
    steps: u64,
    keep_output_ids: bool,
    outstanding_scratch: Vec<usize>,
    /// No request is sent before this time: a finish at a step's end frees a client slot, and
    /// the request sent into it reaches the fleet after the engines began their next steps.
    hold_sends_until_ns: u64,
}

impl FleetDriver {
    pub fn new(fleet: &ResolvedFleet, max_concurrency: Option<usize>) -> Result<Self, SimError> {
        if max_concurrency == Some(0) {
            return Err(SimError::Config(
                "max_concurrency must be at least 1".into(),
            ));
        }
        let mut engines = Vec::new();
        let mut pools = Vec::new();
        for (pi, p) in fleet.pools.iter().enumerate() {
            let start = engines.len();
            for i in 0..p.num_engines() {
                engines.push(Engine {
                    core: EngineCore::new(p.engine.clone())?,
                    pool: pi,
                    label: p.replica_label(i),
                    step: None,
                    queued: Vec::new(),
                    outstanding: 0,
                });
            }
            let end = engines.len();
            let split = match &p.pd {
                Some(pd) => start + pd.prefill_replicas as usize,
                None => end,
            };
            pools.push(PoolState {
                front: start..split,
                decode: split..end,
                picker: ReplicaPicker::new(p.router),
                decode_picker: ReplicaPicker::new(p.router),
                bucket: p.rate_limit.map(|(r, b)| TokenBucket::new(r, b)),
            });
        }
        Ok(FleetDriver {
            fleet: fleet.clone(),
            engines,
            pools,
            now_ns: 0,
            pending: ClientQueue::default(),
            handoffs: BinaryHeap::new(),
            handing: HashMap::new(),
            handoff_seq: 0,
            max_concurrency,
            in_flight: 0,
            traces: Vec::new(),
            served: Vec::new(),
            live: Vec::new(),
            steps: 0,
            keep_output_ids: false,
            outstanding_scratch: Vec::new(),
            hold_sends_until_ns: 0,
        })
    }

    /// Traces keep their requests' generated token ids.
    pub fn keep_output_ids(&mut self) {
        self.keep_output_ids = true;
    }

    /// Queues an arrival (one intended before now is sent now).
    pub fn submit(&mut self, arrival: VirtualArrival) {
        VirtualTarget::submit(self, arrival);
    }

    /// Runs until nothing is pending, in flight or handing off.
    pub fn run_until_idle(&mut self) -> Result<(), SimError> {
        loop {
            let slot = self.max_concurrency.is_none_or(|c| self.in_flight < c);
            let t_arr = if slot {
                self.pending
                    .front()
                    .map(|p| p.due_ns().max(self.now_ns).max(self.hold_sends_until_ns))
            } else {
                None
            };
            let t_step = self
                .engines
                .iter()
                .filter_map(|e| e.step.as_ref().map(|s| s.1))
                .min();
            let t_hand = self.handoffs.peek().map(|Reverse((t, _, _))| *t);
            let Some(t) = [t_arr, t_step, t_hand].into_iter().flatten().min() else {
                if self.pending.is_empty() {
                    return Ok(());
                }
                return Err(SimError::Config(format!(
                    "virtual client stalled with {} requests in flight and an idle fleet",
                    self.in_flight
                )));
            };
            self.now_ns = self.now_ns.max(t);
            self.commit_due();
            self.land_handoffs();
            self.send_due();
            self.start_steps()?;
        }
    }

    fn commit_due(&mut self) {
        let now = self.now_ns;
        for ei in 0..self.engines.len() {
            if !matches!(self.engines[ei].step, Some((_, t1)) if t1 <= now) {
                continue;
            }
            let Some((plan, t1)) = self.engines[ei].step.take() else {
                continue;
            };
            let out = self.engines[ei].core.commit_step(plan, t1);
            self.steps += 1;
            for tok in &out.tokens {
                let trace = tok.id as usize;
                let Some(Some(l)) = self.live.get(trace) else {
                    continue;
                };
                if l.engine != ei || matches!(l.stage, Stage::Prefill) {
                    continue;
                }
                let tr = &mut self.traces[trace];
                tr.token_times_ns.push(t1);
                if self.keep_output_ids {
                    tr.output_ids.push(tok.token);
                }
            }
            for f in out.finished {
                let trace = f.id as usize;
                if !matches!(self.live.get(trace), Some(Some(l)) if l.engine == ei) {
                    continue;
                }
                let Some(l) = self.live[trace].take() else {
                    continue;
                };
                self.engines[ei].outstanding -= 1;
                let tr = &mut self.traces[trace];
                tr.preemptions += f.preemptions;
                match l.stage {
                    Stage::Prefill if f.reason != FinishReason::Abort => {
                        tr.cached_tokens = f.cached_tokens;
                        let pool = self.engines[ei].pool;
                        let Some(pd) = &self.fleet.pools[pool].pd else {
                            continue;
                        };
                        let at = t1 + pd.transfer_ns(f.prompt_tokens);
                        if let Some(req) = l.request {
                            self.handoff_seq += 1;
                            self.handing.insert(self.handoff_seq, (req, trace));
                            self.handoffs.push(Reverse((at, self.handoff_seq, pool)));
                        }
                    }
                    stage => {
                        tr.prompt_tokens = f.prompt_tokens;
                        tr.completion_tokens = f.completion_tokens;
                        if matches!(stage, Stage::Whole) {
                            tr.cached_tokens = f.cached_tokens;
                        }
                        tr.finish_reason = Some(f.reason);
                        tr.end_ns = Some(t1);
                        self.in_flight -= 1;
                        if self.max_concurrency.is_some() {
                            self.hold_sends_until_ns = t1 + 1;
                        }
                    }
                }
            }
        }
    }

    fn land_handoffs(&mut self) {
        while let Some(Reverse((t, seq, pool))) = self.handoffs.peek().copied() {
            if t > self.now_ns {
                break;
            }
            self.handoffs.pop();
            let Some((req, trace)) = self.handing.remove(&seq) else {
                continue;
            };
            let range = self.pools[pool].decode.clone();
            let ei = self.pick(pool, range, &req.prompt, true);
            // `p0+d1`: the prefill engine, then the decode engine.
            let label = format!("{}+{}", self.served[trace].replica, self.engines[ei].label);
            self.served[trace].replica = label;
            self.assign(ei, req, trace, Stage::Decode, None);
        }
    }

    fn pick(
        &mut self,
        pool: usize,
        range: std::ops::Range<usize>,
        prompt: &[u32],
        decode: bool,
    ) -> usize {
        self.outstanding_scratch.clear();
        self.outstanding_scratch
            .extend(self.engines[range.clone()].iter().map(|e| e.outstanding));
        let p = &mut self.pools[pool];
        let picker = if decode {
            &mut p.decode_picker
        } else {
            &mut p.picker
        };
        range.start + picker.pick(&self.outstanding_scratch, prompt)
    }

    fn assign(
        &mut self,
        ei: usize,
        mut req: NewRequest,
        trace: usize,
        stage: Stage,
        keep: Option<NewRequest>,
    ) {
        req.arrival_ns = self.now_ns;
        let e = &mut self.engines[ei];
        e.outstanding += 1;
        self.live[trace] = Some(Live {
            engine: ei,
            stage,
            request: keep,
        });
        e.queued.push((req, matches!(stage, Stage::Decode)));
    }

    fn send_due(&mut self) {
        while let Some(p) = self.pending.front() {
            if p.due_ns() > self.now_ns
                || self.now_ns < self.hold_sends_until_ns
                || self.max_concurrency.is_some_and(|c| self.in_flight >= c)
            {
                break;
            }
            let Some(p) = self.pending.pop() else {
                break;
            };
            let trace = p.trace;
            let now = self.now_ns;
            self.traces[trace].sent_ns = now;
            let mut req = p.arrival.request;
            req.id = trace as u64;
            let pool = self
                .fleet
                .route(req.prompt.len() as u64, u64::from(req.max_tokens));
            self.served[trace].pool = self.fleet.pools[pool].name.clone();
            if let Some(b) = &mut self.pools[pool].bucket {
                if !b.admit(now) {
                    let tr = &mut self.traces[trace];
                    tr.finish_reason = Some(FinishReason::Abort);
                    tr.end_ns = Some(now);
                    self.served[trace].rate_limited = true;
                    continue;
                }
            }
            self.in_flight += 1;
            let range = self.pools[pool].front.clone();
            let ei = self.pick(pool, range, &req.prompt, false);
            self.served[trace].replica = self.engines[ei].label.clone();
            if self.fleet.pools[pool].pd.is_some() {
                let mut prefill = req.clone();
                prefill.max_tokens = 1;
                prefill.min_tokens = 0;
                prefill.ignore_eos = true;
                self.assign(ei, prefill, trace, Stage::Prefill, Some(req));
            } else {
                self.assign(ei, req, trace, Stage::Whole, None);
            }
        }
    }

    fn start_steps(&mut self) -> Result<(), SimError> {
        let now = self.now_ns;
        for ei in 0..self.engines.len() {
            let e = &mut self.engines[ei];
            if e.step.is_some() {
                continue;
            }
            for (req, with_kv) in std::mem::take(&mut e.queued) {
                if with_kv {
                    e.core
                        .import_prompt_kv(&req.prompt, req.cache_salt.as_deref());
                }
                let id = req.id;
                if let Err(err) = e.core.try_add(req) {
                    tracing::warn!("virtual fleet: {err}");
                    e.outstanding -= 1;
                    if self.live[id as usize].take().is_some() {
                        let tr = &mut self.traces[id as usize];
                        tr.finish_reason = Some(FinishReason::Abort);
                        tr.end_ns = Some(now);
                        self.in_flight -= 1;
                    }
                }
            }
            if e.core.is_idle() {
                continue;
            }
            let Some(plan) = e.core.plan_step(now) else {
                return Err(SimError::Config(
                    "engine produced an empty step with requests queued".into(),
                ));
            };
            for (id, _, _) in plan.entries() {
                if let Some(tr) = self.traces.get_mut(id as usize) {
                    tr.first_scheduled_ns.get_or_insert(now);
                }
            }
            let t1 = now + plan.duration_ns;
            self.engines[ei].step = Some((plan, t1));
        }
        Ok(())
    }

    /// Drops every engine's prefix cache; false if any engine has blocks in use.
    pub fn reset_prefix_cache(&mut self) -> bool {
        // Every engine is reset, even after one refuses.
        let mut all = true;
        for e in &mut self.engines {
            all &= e.core.reset_prefix_cache();
        }
        all
    }

    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Moves the clock forward (never back).
    pub fn advance_to(&mut self, t_ns: u64) {
        self.now_ns = self.now_ns.max(t_ns);
    }

    /// Each engine's pool index, replica label and metrics, in fleet order.
    pub fn engine_metrics(&self) -> impl Iterator<Item = (usize, &str, &EngineMetrics)> + '_ {
        self.engines
            .iter()
            .map(|e| (e.pool, e.label.as_str(), e.core.metrics()))
    }

    /// Ends the run. Its metrics add up the counters of every engine (gauges and histograms
    /// are the first engine's).
    pub fn finish(self) -> FleetRun {
        let metrics = merged_counters(self.engines.iter().map(|e| e.core.metrics()));
        FleetRun {
            run: VirtualRun {
                traces: self.traces,
                metrics,
                steps: self.steps,
                end_ns: self.now_ns,
            },
            served: self.served,
        }
    }
}

fn merged_counters<'a>(mut all: impl Iterator<Item = &'a EngineMetrics>) -> EngineMetrics {
    let Some(first) = all.next() else {
        return EngineMetrics::new(1);
    };
    let mut m = first.clone();
    for o in all {
        m.prefix_cache_queries_total += o.prefix_cache_queries_total;
        m.prefix_cache_hits_total += o.prefix_cache_hits_total;
        m.num_preemptions_total += o.num_preemptions_total;
        m.prompt_tokens_total += o.prompt_tokens_total;
        m.generation_tokens_total += o.generation_tokens_total;
        m.request_success_stop += o.request_success_stop;
        m.request_success_length += o.request_success_length;
        m.request_success_abort += o.request_success_abort;
        m.preempted_prefix_queries_total += o.preempted_prefix_queries_total;
        m.preempted_prefix_hits_total += o.preempted_prefix_hits_total;
        m.steps_total += o.steps_total;
        if let (Some(a), Some(b)) = (m.spec_decode.as_mut(), o.spec_decode.as_ref()) {
            a.num_drafts += b.num_drafts;
            a.num_draft_tokens += b.num_draft_tokens;
            a.num_accepted_tokens += b.num_accepted_tokens;
            for (x, y) in a
                .num_accepted_tokens_per_pos
                .iter_mut()
                .zip(&b.num_accepted_tokens_per_pos)
            {
                *x += y;
            }
        }
    }
    m
}

impl VirtualTarget for FleetDriver {
    type Run = FleetRun;

    fn open_trace(&mut self, arrival: &VirtualArrival) -> usize {
        self.traces.push(RequestTrace::for_arrival(arrival));
        self.served.push(Served::default());
        self.live.push(None);
        self.traces.len() - 1
    }

    fn queue(&mut self, arrival: VirtualArrival, trace: usize) {
        self.pending.push(arrival, trace, self.now_ns);
    }

    fn keep_output_ids(&mut self) {
        FleetDriver::keep_output_ids(self);
    }

    fn run_until_idle(&mut self) -> Result<(), SimError> {
        FleetDriver::run_until_idle(self)
    }

    fn reset_prefix_cache(&mut self) -> bool {
        FleetDriver::reset_prefix_cache(self)
    }

    fn now_ns(&self) -> u64 {
        FleetDriver::now_ns(self)
    }

    fn finish(self) -> FleetRun {
        FleetDriver::finish(self)
    }
}

impl WarmedRun for FleetRun {
    fn drop_warmups(&mut self, n: usize, offset_ns: u64) {
        self.run.drop_warmups(n, offset_ns);
        self.served.drain(..n.min(self.served.len()));
    }
}

/// Runs a whole workload through the fleet (traces in the given order).
pub fn run_fleet_virtual(
    fleet: &ResolvedFleet,
    workload: VirtualWorkload,
    keep_output_ids: bool,
) -> Result<FleetRun, SimError> {
    let driver = FleetDriver::new(fleet, workload.max_concurrency)?;
    run_workload(driver, workload.arrivals, keep_output_ids)
}
