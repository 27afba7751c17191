//! The real-time driver (docs/simulator.md §8): one tokio task owns the [`EngineCore`] and runs its
//! steps against the wall clock. Handlers talk to it through an [`EngineHandle`]: commands go
//! over a bounded channel stamped with their receipt time, each request gets an unbounded sink
//! of [`TokenEvent`]s, and a metrics snapshot is published on a `watch` channel after each step,
//! so no lock ever guards engine state.
//!
//! Timing: a busy engine starts step `k+1` at the *intended* end of step `k` and sleeps on that
//! absolute deadline, so wake-up errors never accumulate. Lateness is exported; beyond
//! `max_lag` the timeline re-anchors to now. An idle engine anchors its next step at the
//! arrival of the request that wakes it. Commands stamped after a step's start wait for the
//! next step, so causality holds even when the engine runs behind.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use servebench_metrics::units::s_to_ms;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::engine::{EngineCore, EngineMetrics, Finished, NewRequest, StepOutputs};
use crate::prometheus::DriverMetrics;
use crate::SimError;

/// Capacity of the command channel; handlers wait when the engine is this far behind.
const COMMAND_CAPACITY: usize = 4096;
/// How long before a deadline `precise` timing leaves the 1 ms-granular tokio timer.
const PRECISE_SPIN: Duration = Duration::from_micros(1500);

/// How the driver maps engine time onto the wall clock.
#[derive(Debug, Clone, PartialEq)]
pub struct TimingOptions {
    /// Engine seconds per wall-clock second (`--time-scale`); durations are divided by it.
    pub time_scale: f64,
    /// Sleep to 1.5 ms before each deadline, then wait out the rest finely
    /// (`--precise-timing`): with a kernel sleep on the engine's own thread, else by yielding.
    /// Never use it under a paused tokio clock: the clock does not advance while it waits.
    pub precise: bool,
    /// Re-anchor the timeline when a step ends later than this (`--max-lag-ms`).
    pub max_lag: Duration,
}

impl Default for TimingOptions {
    fn default() -> Self {
        TimingOptions {
            time_scale: 1.0,
            precise: false,
            max_lag: Duration::from_millis(20),
        }
    }
}

/// What a request's sink receives at the end of each step that concerns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenEvent {
    /// The token sampled in this step, if any.
    pub token: Option<u32>,
    /// Set when the request left the engine in this step (finished or aborted).
    pub finished: Option<Finished>,
    /// The request's prefix-cache hit in tokens (usage's `cached_tokens`), so that a server
    /// ending a request itself on a stop string can report it at once.
    pub cached_tokens: u32,
}

/// Metrics published after every step.
#[derive(Debug, Clone)]
pub struct MetricsSnapshot {
    /// The engine core's counters, gauges and histograms.
    pub engine: EngineMetrics,
    /// Lag, lateness and re-anchors of the driver.
    pub driver: DriverMetrics,
}

enum Command {
    Add {
        request: NewRequest,
        received: Instant,
        sink: mpsc::UnboundedSender<TokenEvent>,
    },
    Abort {
        id: u64,
    },
    /// The server stopped the request after `emitted` tokens (a stop string).
    Stop {
        id: u64,
        emitted: u32,
    },
    Reset {
        reply: oneshot::Sender<bool>,
    },
    /// A prompt's KV cache arrives from a prefill engine (fleet P/D pools).
    ImportKv {
        prompt: Vec<u32>,
        cache_salt: Option<String>,
    },
}

/// The engine task has stopped (server shutting down).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the simulated engine has stopped")]
pub struct EngineStopped;

/// A cheap, cloneable connection to the engine task.
#[derive(Debug, Clone)]
pub struct EngineHandle {
    commands: mpsc::Sender<Command>,
    metrics: watch::Receiver<Arc<MetricsSnapshot>>,
    next_id: Arc<AtomicU64>,
    stop: Arc<watch::Sender<bool>>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Command::Add { request, .. } => write!(f, "Add({})", request.id),
            Command::Abort { id } => write!(f, "Abort({id})"),
            Command::Stop { id, emitted } => write!(f, "Stop({id}, {emitted})"),
            Command::Reset { .. } => f.write_str("Reset"),
            Command::ImportKv { .. } => f.write_str("ImportKv"),
        }
    }
}

/// A request accepted by the engine task.
#[derive(Debug)]
pub struct Submitted {
    /// The engine-wide request id (for [`EngineHandle::abort`]).
    pub id: u64,
    /// One event per step that produced a token for it, the last carrying `finished`.
    pub events: mpsc::UnboundedReceiver<TokenEvent>,
}

impl EngineHandle {
    /// Queues a request received at `received`. Its `id` and `arrival_ns` are assigned here
    /// and by the engine task.
    pub async fn submit(
        &self,
        mut request: NewRequest,
        received: Instant,
    ) -> Result<Submitted, EngineStopped> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        request.id = id;
        let (sink, events) = mpsc::unbounded_channel();
        self.commands
            .send(Command::Add {
                request,
                received,
                sink,
            })
            .await
            .map_err(|_| EngineStopped)?;
        Ok(Submitted { id, events })
    }

    /// Aborts a request, freeing its blocks. Never waits: usable from `Drop`.
    pub fn abort(&self, id: u64) {
        self.send_now(Command::Abort { id });
    }

    /// Ends a request the server stopped after `emitted` output tokens (a stop string in its
    /// text): its blocks are freed and it counts as finished with reason `stop`. Call it
    /// before dropping the request's event receiver, so that the engine, finding the receiver
    /// gone, sees this command first and does not count an abort. Never waits.
    pub fn stop_early(&self, id: u64, emitted: u32) {
        self.send_now(Command::Stop { id, emitted });
    }

    fn send_now(&self, cmd: Command) {
        match self.commands.try_send(cmd) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
            Err(mpsc::error::TrySendError::Full(cmd)) => {
                // The channel is full only under extreme load; the abort still must happen.
                let commands = self.commands.clone();
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    rt.spawn(async move {
                        let _ = commands.send(cmd).await;
                    });
                }
            }
        }
    }

    /// Drops every prefix-cache hash; `Ok(false)` while blocks are in use.
    pub async fn reset_prefix_cache(&self) -> Result<bool, EngineStopped> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(Command::Reset { reply })
            .await
            .map_err(|_| EngineStopped)?;
        rx.await.map_err(|_| EngineStopped)
    }

    /// The metrics as of the last step.
    pub fn metrics(&self) -> Arc<MetricsSnapshot> {
        self.metrics.borrow().clone()
    }

    /// Stops the engine task: every open request's sink closes.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Hands the engine a prompt's KV cache (as cached blocks), before the request that
    /// uses it is submitted.
    pub async fn import_kv(
        &self,
        prompt: Vec<u32>,
        cache_salt: Option<String>,
    ) -> Result<(), EngineStopped> {
        self.commands
            .send(Command::ImportKv { prompt, cache_salt })
            .await
            .map_err(|_| EngineStopped)
    }

    /// Draws request ids from `other`'s counter, so ids are unique across a fleet.
    pub fn share_ids_with(&mut self, other: &EngineHandle) {
        self.next_id = other.next_id.clone();
    }
}

/// Maps engine-clock nanoseconds to and from wall-clock instants.
#[derive(Debug, Clone, Copy)]
struct Clock {
    origin: Instant,
    scale: f64,
}

impl Clock {
    fn engine_ns(&self, t: Instant) -> u64 {
        let real = t.saturating_duration_since(self.origin).as_nanos();
        if self.scale == 1.0 {
            u64::try_from(real).unwrap_or(u64::MAX)
        } else {
            (real as f64 * self.scale) as u64
        }
    }

    fn instant(&self, engine_ns: u64) -> Instant {
        let real = if self.scale == 1.0 {
            engine_ns
        } else {
            (engine_ns as f64 / self.scale) as u64
        };
        self.origin + Duration::from_nanos(real)
    }
}

/// Spawns the engine task on the current tokio runtime (works under a paused test clock).
pub fn spawn(
    core: EngineCore,
    timing: TimingOptions,
) -> (EngineHandle, tokio::task::JoinHandle<()>) {
    let (handle, driver) = Driver::new(core, timing);
    (handle, tokio::spawn(driver.run()))
}

/// Runs the engine task on a dedicated thread with its own single-threaded runtime, so request
/// handlers busy on the shared runtime cannot delay the engine's wake-ups.
pub fn spawn_thread(
    core: EngineCore,
    timing: TimingOptions,
) -> Result<(EngineHandle, std::thread::JoinHandle<()>), SimError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    let (handle, mut driver) = Driver::new(core, timing);
    driver.own_thread = true;
    let thread = std::thread::Builder::new()
        .name("sim-engine".into())
        .spawn(move || rt.block_on(driver.run()))?;
    Ok((handle, thread))
}

struct Driver {
    core: EngineCore,
    timing: TimingOptions,
    clock: Clock,
    commands: mpsc::Receiver<Command>,
    stop: watch::Receiver<bool>,
    metrics_tx: watch::Sender<Arc<MetricsSnapshot>>,
    sinks: HashMap<u64, mpsc::UnboundedSender<TokenEvent>>,
    /// Adds received but stamped after the current step's start.
    pending: VecDeque<(NewRequest, Instant, mpsc::UnboundedSender<TokenEvent>)>,
    driver_metrics: DriverMetrics,
    /// Runs on a dedicated thread (may block it for sub-ms waits).
    own_thread: bool,
}

impl Driver {
    fn new(core: EngineCore, timing: TimingOptions) -> (EngineHandle, Driver) {
        let (commands_tx, commands) = mpsc::channel(COMMAND_CAPACITY);
        let (stop_tx, stop) = watch::channel(false);
        let snapshot = MetricsSnapshot {
            engine: core.metrics().clone(),
            driver: DriverMetrics::default(),
        };
        let (metrics_tx, metrics_rx) = watch::channel(Arc::new(snapshot));
        let scale = if timing.time_scale > 0.0 && timing.time_scale.is_finite() {
            timing.time_scale
        } else {
            1.0
        };
        let clock = Clock {
            origin: Instant::now(),
            scale,
        };
        let handle = EngineHandle {
            commands: commands_tx,
            metrics: metrics_rx,
            next_id: Arc::new(AtomicU64::new(1)),
            stop: Arc::new(stop_tx),
        };
        let driver = Driver {
            core,
            timing,
            clock,
            commands,
            stop,
            metrics_tx,
            sinks: HashMap::new(),
            pending: VecDeque::new(),
            driver_metrics: DriverMetrics::default(),
            own_thread: false,
        };
        (handle, driver)
    }

    async fn run(mut self) {
        // Engine time at which the next step starts.
        let mut t0: u64 = 0;
        loop {
            if *self.stop.borrow() {
                break;
            }
            while let Ok(cmd) = self.commands.try_recv() {
                self.accept(cmd);
            }
            self.admit_pending(t0);

            let Some(plan) = self.core.plan_step(t0) else {
                if let Some(first) = self.pending.iter().map(|(_, r, _)| *r).min() {
                    // Requests arrived after t0 (the engine woke late): anchor at the first.
                    t0 = t0.max(self.clock.engine_ns(first));
                    continue;
                }
                // Nothing to run: show the idle state (an abort changes the gauges without a
                // step), then wait for a command. An idle engine anchors at the arrival that
                // wakes it (never before the last step end).
                self.publish();
                let cmd = tokio::select! {
                    cmd = self.commands.recv() => cmd,
                    _ = self.stop.changed() => None,
                };
                let Some(cmd) = cmd else { break };
                if let Command::Add { received, .. } = &cmd {
                    t0 = t0.max(self.clock.engine_ns(*received));
                }
                self.accept(cmd);
                continue;
            };
            let t1 = t0 + plan.duration_ns;
            let deadline = self.clock.instant(t1);
            if !self.sleep_until(deadline).await {
                break;
            }
            let now = Instant::now();
            let lag = now.saturating_duration_since(deadline);
            let outputs = self.core.commit_step(plan, t1);

            let lag_s = lag.as_secs_f64();
            self.driver_metrics.engine_lag_seconds = lag_s;
            self.driver_metrics.step_lateness.observe(lag_s);
            if lag > self.timing.max_lag {
                // As if the GPU had stalled: continue from now rather than rushing to catch up.
                t0 = self.clock.engine_ns(now);
                self.driver_metrics.engine_reanchors_total += 1;
                tracing::debug!(lag_ms = s_to_ms(lag_s), "engine fell behind; re-anchoring");
            } else {
                t0 = t1;
            }
            // Publish before handing out tokens, so a client that saw a token never reads
            // metrics older than it.
            self.publish();
            self.dispatch(outputs);
        }
        // Dropping the sinks ends every open stream.
        self.sinks.clear();
        self.pending.clear();
    }

    fn publish(&self) {
        self.metrics_tx.send_replace(Arc::new(MetricsSnapshot {
            engine: self.core.metrics().clone(),
            driver: self.driver_metrics.clone(),
        }));
    }

    /// Applies aborts and resets at once; adds wait in `pending` for the step they belong to.
    fn accept(&mut self, cmd: Command) {
        match cmd {
            Command::Add {
                request,
                received,
                sink,
            } => self.pending.push_back((request, received, sink)),
            Command::Abort { id } => {
                if let Some(pos) = self.pending.iter().position(|(r, _, _)| r.id == id) {
                    self.pending.remove(pos);
                } else if self.core.abort(id) {
                    // Its sink is gone already; nobody needs the abort report.
                    self.core.take_aborted();
                }
                self.sinks.remove(&id);
            }
            Command::Stop { id, emitted } => {
                if let Some(pos) = self.pending.iter().position(|(r, _, _)| r.id == id) {
                    // Not admitted yet: it never ran, so there is nothing to count.
                    self.pending.remove(pos);
                } else {
                    self.core.stop_early(id, emitted);
                }
                self.sinks.remove(&id);
            }
            Command::Reset { reply } => {
                let _ = reply.send(self.core.reset_prefix_cache());
            }
            Command::ImportKv { prompt, cache_salt } => {
                self.core.import_prompt_kv(&prompt, cache_salt.as_deref());
            }
        }
    }

    /// Hands the engine every pending request stamped at or before `t0`, in receipt order.
    fn admit_pending(&mut self, t0: u64) {
        let mut i = 0;
        while i < self.pending.len() {
            let stamp = self.clock.engine_ns(self.pending[i].1);
            if stamp <= t0 {
                if let Some((mut request, _, sink)) = self.pending.remove(i) {
                    request.arrival_ns = stamp;
                    let id = request.id;
                    match self.core.try_add(request) {
                        Ok(()) => {
                            self.sinks.insert(id, sink);
                        }
                        // The server validates first; dropping the sink ends the request.
                        Err(e) => tracing::warn!("engine refused a request: {e}"),
                    }
                }
            } else {
                i += 1;
            }
        }
    }

    /// Sleeps until `deadline`; false if the task was told to stop meanwhile.
    async fn sleep_until(&mut self, deadline: Instant) -> bool {
        let coarse = if self.timing.precise {
            deadline.checked_sub(PRECISE_SPIN).unwrap_or(deadline)
        } else {
            deadline
        };
        if coarse > Instant::now() {
            tokio::select! {
                _ = tokio::time::sleep_until(coarse) => {}
                _ = self.stop.changed() => return false,
            }
        }
        if self.timing.precise {
            if self.own_thread {
                // Alone on this thread: the kernel's high-resolution sleep is accurate to tens
                // of µs and, unlike spinning, does not get the thread preempted by the OS
                // for hogging a core just before the deadline.
                let left = deadline.saturating_duration_since(Instant::now());
                if !left.is_zero() {
                    std::thread::sleep(left);
                }
            }
            while Instant::now() < deadline {
                tokio::task::yield_now().await;
            }
        }
        true
    }

    /// Sends each request its token (and finish) of this step; a closed sink means the client
    /// went away, so the request is aborted.
    fn dispatch(&mut self, outputs: StepOutputs) {
        let StepOutputs {
            tokens,
            mut finished,
        } = outputs;
        for t in tokens {
            let fin = if t.finish.is_some() {
                finished
                    .iter()
                    .position(|f| f.id == t.id)
                    .map(|i| finished.swap_remove(i))
            } else {
                None
            };
            let done = fin.is_some();
            let event = TokenEvent {
                token: Some(t.token),
                finished: fin,
                cached_tokens: t.cached_tokens,
            };
            self.deliver(t.id, event, done);
        }
        for f in finished {
            let id = f.id;
            let cached_tokens = f.cached_tokens;
            self.deliver(
                id,
                TokenEvent {
                    token: None,
                    finished: Some(f),
                    cached_tokens,
                },
                true,
            );
        }
    }

    fn deliver(&mut self, id: u64, event: TokenEvent, done: bool) {
        let sent = match self.sinks.get(&id) {
            Some(sink) => sink.send(event).is_ok(),
            None => return,
        };
        if done {
            self.sinks.remove(&id);
        } else if !sent {
            self.sinks.remove(&id);
            // A server that stopped the request on a stop string sent `Stop` before it let go
            // of the receiver: apply the commands already queued, so that request counts as
            // stopped rather than aborted.
            while let Ok(cmd) = self.commands.try_recv() {
                self.accept(cmd);
            }
            if self.core.abort(id) {
                self.core.take_aborted();
            }
        }
    }
}
