//! A fleet in real time: one engine task per replica (each on its own thread, as the single
//! engine), and a front that routes each request, applies the pool's rate limit, and forwards
//! the chosen engine's token events to the handler. The forwarding task counts requests in
//! flight per engine (what least-outstanding routing reads) and, in a prefill/decode pool,
//! runs the prefill, waits out the KV transfer, hands the KV to a decode engine and streams
//! the decode engine's tokens.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::engine::{EngineCore, NewRequest};
use crate::realtime::{self, EngineHandle, EngineStopped, Submitted, TimingOptions, TokenEvent};
use crate::{ResolvedSim, SimError};

use super::router::{ReplicaPicker, TokenBucket};
use super::spec::ResolvedFleet;

/// Why the front refused a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrontError {
    /// Above the pool's rate limit (HTTP 429).
    RateLimited { pool: String },
    /// The engines have stopped.
    Stopped,
}

impl From<EngineStopped> for FrontError {
    fn from(_: EngineStopped) -> Self {
        FrontError::Stopped
    }
}

struct FleetEngine {
    handle: EngineHandle,
    pool: usize,
    label: String,
    outstanding: Arc<AtomicUsize>,
}

struct PoolRouting {
    front: std::ops::Range<usize>,
    decode: std::ops::Range<usize>,
    picker: ReplicaPicker,
    decode_picker: ReplicaPicker,
    bucket: Option<TokenBucket>,
}

/// Every engine of a fleet and the routing state in front of them.
pub struct FleetEngines {
    fleet: Arc<ResolvedFleet>,
    engines: Vec<FleetEngine>,
    routing: Mutex<Vec<PoolRouting>>,
    origin: Instant,
    time_scale: f64,
}

impl std::fmt::Debug for FleetEngines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetEngines")
            .field("engines", &self.engines.len())
            .finish()
    }
}

/// Where a request went: `(pool, replica)` labels for the response headers.
pub type ServedLabels = (String, String);

/// Starts the engines of `sim`: one for a plain simulator (`None` fleet), else every engine of
/// the fleet. The handle returned first is the one the server's single-engine paths use.
pub fn spawn(sim: &ResolvedSim) -> Result<(EngineHandle, Option<Arc<FleetEngines>>), SimError> {
    let Some(fleet) = &sim.fleet else {
        let core = EngineCore::new(sim.engine.clone())?;
        let (engine, _thread) = realtime::spawn_thread(core, sim.timing.clone())?;
        return Ok((engine, None));
    };
    let fe = FleetEngines::spawn(fleet.clone(), &sim.timing)?;
    let first = fe
        .engines
        .first()
        .map(|e| e.handle.clone())
        .ok_or_else(|| SimError::Config("a fleet needs at least one engine".into()))?;
    Ok((first, Some(Arc::new(fe))))
}

impl FleetEngines {
    fn spawn(fleet: Arc<ResolvedFleet>, timing: &TimingOptions) -> Result<Self, SimError> {
        let mut engines: Vec<FleetEngine> = Vec::new();
        let mut routing = Vec::new();
        for (pi, p) in fleet.pools.iter().enumerate() {
            let start = engines.len();
            for i in 0..p.num_engines() {
                let core = EngineCore::new(p.engine.clone())?;
                let (mut handle, _thread) = realtime::spawn_thread(core, timing.clone())?;
                if let Some(first) = engines.first() {
                    handle.share_ids_with(&first.handle);
                }
                engines.push(FleetEngine {
                    handle,
                    pool: pi,
                    label: p.replica_label(i),
                    outstanding: Arc::new(AtomicUsize::new(0)),
                });
            }
            let end = engines.len();
            let split = match &p.pd {
                Some(pd) => start + pd.prefill_replicas as usize,
                None => end,
            };
            routing.push(PoolRouting {
                front: start..split,
                decode: split..end,
                picker: ReplicaPicker::new(p.router),
                decode_picker: ReplicaPicker::new(p.router),
                bucket: p.rate_limit.map(|(r, b)| TokenBucket::new(r, b)),
            });
        }
        let time_scale = if timing.time_scale > 0.0 && timing.time_scale.is_finite() {
            timing.time_scale
        } else {
            1.0
        };
        Ok(FleetEngines {
            fleet,
            engines,
            routing: Mutex::new(routing),
            origin: Instant::now(),
            time_scale,
        })
    }

    fn pick(
        &self,
        routing: &mut PoolRouting,
        decode: bool,
        prompt: &[u32],
        session: Option<&str>,
    ) -> usize {
        let range = if decode {
            routing.decode.clone()
        } else {
            routing.front.clone()
        };
        let load: Vec<usize> = self.engines[range.clone()]
            .iter()
            .map(|e| e.outstanding.load(Ordering::Relaxed))
            .collect();
        let picker = if decode {
            &mut routing.decode_picker
        } else {
            &mut routing.picker
        };
        range.start + picker.pick_for(&load, prompt, session)
    }

    /// The header `--router session` keys on.
    pub fn session_header(&self) -> &str {
        &self.fleet.session_header
    }

    /// Routes and submits a request; its events come from whichever engine serves it.
    pub async fn submit(
        self: &Arc<Self>,
        request: NewRequest,
        received: Instant,
    ) -> Result<(EngineHandle, Submitted, ServedLabels), FrontError> {
        self.submit_for(request, received, None).await
    }

    /// [`FleetEngines::submit`] for a request of a session (`--router session`).
    pub async fn submit_for(
        self: &Arc<Self>,
        request: NewRequest,
        received: Instant,
        session: Option<&str>,
    ) -> Result<(EngineHandle, Submitted, ServedLabels), FrontError> {
        let pool = self
            .fleet
            .route(request.prompt.len() as u64, u64::from(request.max_tokens));
        let pool_name = self.fleet.pools[pool].name.clone();
        let now_ns = (received.saturating_duration_since(self.origin).as_nanos() as f64
            * self.time_scale) as u64;
        let ei = {
            let mut routing = self.routing.lock().unwrap_or_else(|p| p.into_inner());
            let r = &mut routing[pool];
            if let Some(b) = &mut r.bucket {
                if !b.admit(now_ns) {
                    return Err(FrontError::RateLimited { pool: pool_name });
                }
            }
            self.pick(r, false, &request.prompt, session)
        };
        let e = &self.engines[ei];
        let label = e.label.clone();
        e.outstanding.fetch_add(1, Ordering::Relaxed);
        let pd = self.fleet.pools[pool].pd.clone();
        let first_request = match &pd {
            Some(_) => {
                let mut p = request.clone();
                p.max_tokens = 1;
                p.min_tokens = 0;
                p.ignore_eos = true;
                p
            }
            None => request.clone(),
        };
        let submitted = match e.handle.submit(first_request, received).await {
            Ok(s) => s,
            Err(err) => {
                e.outstanding.fetch_sub(1, Ordering::Relaxed);
                return Err(err.into());
            }
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let id = submitted.id;
        let handle = e.handle.clone();
        let me = self.clone();
        let served = match pd {
            None => {
                tokio::spawn(async move {
                    me.forward(ei, id, submitted.events, &tx).await;
                });
                (pool_name, label)
            }
            Some(pd) => {
                // The decode engine is chosen at hand-off; the headers name the prefill one.
                tokio::spawn(async move {
                    me.prefill_then_decode(pool, ei, id, submitted.events, request, pd, tx)
                        .await;
                });
                (pool_name, label)
            }
        };
        Ok((handle, Submitted { id, events: rx }, served))
    }

    /// Passes events on until the request finishes or the handler goes away (then aborts).
    async fn forward(
        &self,
        ei: usize,
        id: u64,
        mut events: mpsc::UnboundedReceiver<TokenEvent>,
        tx: &mpsc::UnboundedSender<TokenEvent>,
    ) -> bool {
        let e = &self.engines[ei];
        let mut finished = false;
        while let Some(ev) = events.recv().await {
            finished = ev.finished.is_some();
            if tx.send(ev).is_err() {
                e.handle.abort(id);
                break;
            }
            if finished {
                break;
            }
        }
        e.outstanding.fetch_sub(1, Ordering::Relaxed);
        finished
    }

    #[allow(clippy::too_many_arguments)]
    async fn prefill_then_decode(
        self: Arc<Self>,
        pool: usize,
        ei: usize,
        id: u64,
        mut events: mpsc::UnboundedReceiver<TokenEvent>,
        request: NewRequest,
        pd: super::spec::PdSpec,
        tx: mpsc::UnboundedSender<TokenEvent>,
    ) {
        let pe = &self.engines[ei];
        let mut prefilled = false;
        while let Some(ev) = events.recv().await {
            if let Some(f) = ev.finished {
                prefilled = f.reason != crate::engine::FinishReason::Abort;
                if !prefilled {
                    let cached_tokens = f.cached_tokens;
                    let _ = tx.send(TokenEvent {
                        token: None,
                        finished: Some(f),
                        cached_tokens,
                    });
                }
                break;
            }
            if tx.is_closed() {
                pe.handle.abort(id);
                break;
            }
        }
        pe.outstanding.fetch_sub(1, Ordering::Relaxed);
        if !prefilled || tx.is_closed() {
            return;
        }
        let transfer = pd.transfer_ns(request.prompt.len() as u32) as f64 / self.time_scale;
        tokio::time::sleep(Duration::from_nanos(transfer as u64)).await;
        let di = {
            let mut routing = self.routing.lock().unwrap_or_else(|p| p.into_inner());
            self.pick(&mut routing[pool], true, &request.prompt, None)
        };
        let de = &self.engines[di];
        de.outstanding.fetch_add(1, Ordering::Relaxed);
        let sent = async {
            de.handle
                .import_kv(request.prompt.clone(), request.cache_salt.clone())
                .await?;
            de.handle.submit(request, Instant::now()).await
        };
        match sent.await {
            Ok(s) => {
                self.forward(di, s.id, s.events, &tx).await;
            }
            Err(_) => {
                de.outstanding.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// Stops every engine.
    pub fn stop(&self) {
        for e in &self.engines {
            e.handle.stop();
        }
    }

    /// Resets every engine's prefix cache; false if any had blocks in use.
    pub async fn reset_prefix_cache(&self) -> Result<bool, EngineStopped> {
        let mut all = true;
        for e in &self.engines {
            all &= e.handle.reset_prefix_cache().await?;
        }
        Ok(all)
    }

    /// `(pool, replica label, engine handle)` of every engine, in fleet order.
    pub fn engines(&self) -> impl Iterator<Item = (&str, &str, &EngineHandle)> + '_ {
        self.engines.iter().map(|e| {
            (
                self.fleet.pools[e.pool].name.as_str(),
                e.label.as_str(),
                &e.handle,
            )
        })
    }
}
