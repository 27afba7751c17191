//! The OpenAI-compatible HTTP surface of the simulator (docs/simulator.md §7): completions and chat
//! (streaming and not), models, health, version, Prometheus metrics, tokenize, prefix-cache
//! reset and the effective configuration.
//!
//! The library never binds a port on its own or installs signal handlers: [`serve`] takes a
//! bound listener and a shutdown future; [`spawn_in_process`] binds `127.0.0.1:0` for callers
//! that want a private simulator.

mod body;
mod connections;
mod error;
mod images;
mod pooling;
mod request;
mod response;
mod responses;
mod secure;
mod signal;
mod stop;

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use servebench_tokenizer::Tokenizer;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::time::Instant;

pub use connections::ConnectionLimits;
pub use error::ApiError;
pub use request::Endpoint;
pub use signal::stop_requested;

use crate::engine::{self, NewRequest};
use crate::faults::{FaultInjector, FaultKind};
use crate::prometheus::{self, CacheConfigInfo, MetricsView};
use crate::realtime::EngineHandle;
use crate::reasoning::ReasoningSplit;
use crate::resolve::ResolvedSim;
use crate::SimError;
use request::{GenerateBody, Limits};
use response::{AbortOnDrop, ChoiceStream, ChunkTemplate, StreamState};
use servebench_wire::openai::{ModelCard, ModelList, TokenizeRequest};
use stop::StopScan;

/// Shared state of every handler: immutable configuration plus the engine handle.
#[derive(Debug, Clone)]
pub struct AppState {
    inner: Arc<Shared>,
}

#[derive(Debug)]
struct Word {
    raw: String,
    escaped: String,
}

#[derive(Debug)]
struct Shared {
    engine: EngineHandle,
    served_name: String,
    accepted_names: Vec<String>,
    tokenizer: Tokenizer,
    limits: Limits,
    /// `--max-body-bytes`.
    max_body_bytes: usize,
    /// How long a request body may take (`--header-timeout-secs`, `--body-timeout-secs`).
    body_timeouts: body::BodyTimeouts,
    /// Output words by token id, each with its leading space: raw and JSON-escaped.
    words: HashMap<u32, Word>,
    sim_config: Bytes,
    faults: FaultInjector,
    prompt_tokens_details: bool,
    metrics_compat: bool,
    cache_info: CacheConfigInfo,
    /// `--reasoning-tokens` / `--reasoning-fraction`.
    reasoning: Option<ReasoningSplit>,
    /// The engine's seed and natural-length law, to know a response's length ahead when the
    /// reasoning split is a share of it.
    output_law: (u64, f64, f64),
    /// Unix seconds at start: the `created` of models and responses.
    created: u64,
    /// The model's hidden size: the length of an embedding vector.
    hidden_size: usize,
    /// `--lora-modules`: adapter `i` runs in the engine as `i + 1`.
    lora_modules: Vec<String>,
    /// The engines of a simulated fleet (`--replicas`, `--pool`); `None` for one engine.
    fleet: Option<Arc<crate::fleet::realtime_fleet::FleetEngines>>,
    /// The served model's vision encoder (images are refused without one).
    vision: Option<servebench_roofline::VisionSpec>,
    /// `/start_profile` and `/stop_profile` calls so far (vLLM's profiler endpoints; the
    /// simulator has nothing to trace, it counts them for `/sim/profile`).
    profile_calls: [std::sync::atomic::AtomicU64; 2],
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn escape_text(s: &str) -> String {
    let quoted = serde_json::Value::from(s).to_string();
    quoted[1..quoted.len() - 1].to_string()
}

impl AppState {
    /// State for a resolved configuration served by `engine`.
    pub fn new(sim: &ResolvedSim, engine: EngineHandle) -> Self {
        let words = sim
            .tokenizer
            .filler_words()
            .into_iter()
            .map(|(raw, id)| {
                (
                    id,
                    Word {
                        escaped: escape_text(&raw),
                        raw,
                    },
                )
            })
            .collect();
        let sim_config =
            Bytes::from(serde_json::to_vec_pretty(&sim.config_json).unwrap_or_default());
        let e = &sim.engine;
        AppState {
            inner: Arc::new(Shared {
                engine,
                served_name: sim.served_model_name.clone(),
                accepted_names: sim.accepted_model_names.clone(),
                tokenizer: sim.tokenizer.clone(),
                limits: Limits {
                    max_model_len: e.max_model_len,
                    vocab_size: e.vocab_size,
                },
                max_body_bytes: sim.args.max_body_bytes,
                // `serve` refuses a bad timeout before any state exists; this fallback is the default.
                body_timeouts: ConnectionLimits::from_args(&sim.args)
                    .map(|l| body::BodyTimeouts {
                        stall: l.header_timeout,
                        total: l.body_timeout,
                    })
                    .unwrap_or(body::BodyTimeouts {
                        stall: std::time::Duration::from_secs(10),
                        total: std::time::Duration::from_secs(30),
                    }),
                words,
                sim_config,
                faults: FaultInjector::new(sim.faults.clone(), e.seed),
                prompt_tokens_details: sim.prompt_tokens_details,
                metrics_compat: sim.metrics_compat,
                cache_info: CacheConfigInfo {
                    block_size: e.block_size,
                    gpu_memory_utilization: sim.gpu_memory_utilization,
                    num_gpu_blocks: e.num_gpu_blocks,
                    enable_prefix_caching: e.enable_prefix_caching,
                    cache_dtype: sim.cache_dtype.clone(),
                },
                created: unix_now(),
                reasoning: sim.reasoning,
                output_law: (e.seed, e.eos_len_median, e.eos_len_sigma),
                hidden_size: e.deployment.model().hidden_size as usize,
                lora_modules: sim.lora_modules.clone(),
                fleet: None,
                vision: sim.vision.clone(),
                profile_calls: Default::default(),
            }),
        }
    }

    /// This state in front of a fleet's engines (from [`crate::fleet::realtime_fleet::spawn`]).
    pub fn with_fleet(
        mut self,
        fleet: Option<Arc<crate::fleet::realtime_fleet::FleetEngines>>,
    ) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.fleet = fleet;
        }
        self
    }

    /// The engine this state talks to.
    pub fn engine(&self) -> &EngineHandle {
        &self.inner.engine
    }

    /// The fault injector (for its counters).
    pub fn faults(&self) -> &FaultInjector {
        &self.inner.faults
    }

    /// JSON-escaped text of an output token.
    fn word(&self, id: u32) -> Cow<'_, str> {
        match self.inner.words.get(&id) {
            Some(w) => Cow::Borrowed(w.escaped.as_str()),
            None => Cow::Owned(escape_text(&self.inner.tokenizer.decode(&[id]))),
        }
    }

    /// Text of an output token.
    fn raw_word(&self, id: u32) -> Cow<'_, str> {
        match self.inner.words.get(&id) {
            Some(w) => Cow::Borrowed(w.raw.as_str()),
            None => Cow::Owned(self.inner.tokenizer.decode(&[id])),
        }
    }

    /// Leading reasoning tokens of a response to `req`, when the simulator acts as a reasoning
    /// model and the endpoint is chat.
    fn reasoning_tokens(&self, endpoint: Endpoint, req: &NewRequest) -> Option<u32> {
        let split = self.inner.reasoning?;
        if endpoint != Endpoint::Chat {
            return None;
        }
        let len = if split.needs_output_len() {
            let (seed, median, sigma) = self.inner.output_law;
            engine::planned_output_len(req, seed, median, sigma)
        } else {
            req.max_tokens.max(1)
        };
        Some(split.reasoning_tokens(len))
    }

    fn check_model(&self, model: Option<&str>) -> Result<(), ApiError> {
        match model {
            None => Ok(()),
            Some(m) if self.inner.accepted_names.iter().any(|n| n == m) => Ok(()),
            Some(m) if self.lora_of(Some(m)).is_some() => Ok(()),
            Some(m) => Err(ApiError::unknown_model(m)),
        }
    }

    /// The engine's number of the LoRA adapter `model` names, if it names one.
    fn lora_of(&self, model: Option<&str>) -> Option<u32> {
        let m = model?;
        let i = self.inner.lora_modules.iter().position(|n| n == m)?;
        u32::try_from(i + 1).ok()
    }

    /// The `/metrics` page as of the last engine step.
    pub fn render_metrics(&self) -> String {
        if let Some(fleet) = &self.inner.fleet {
            return crate::fleet::server_hooks::render_metrics(self, fleet);
        }
        let snap = self.inner.engine.metrics();
        prometheus::encode(&MetricsView {
            model_name: &self.inner.served_name,
            engine: &snap.engine,
            driver: &snap.driver,
            cache: &self.inner.cache_info,
            faults: self.inner.faults.counts(),
            compat: self.inner.metrics_compat,
        })
    }

    /// The `/metrics` view of one engine's snapshot (a fleet renders one per engine).
    pub(crate) fn metrics_view<'a>(
        &'a self,
        engine: &'a crate::engine::EngineMetrics,
        driver: &'a prometheus::DriverMetrics,
    ) -> MetricsView<'a> {
        MetricsView {
            model_name: &self.inner.served_name,
            engine,
            driver,
            cache: &self.inner.cache_info,
            faults: self.inner.faults.counts(),
            compat: self.inner.metrics_compat,
        }
    }
}

/// Every route of the simulator.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/responses", post(responses_api))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/version", get(version))
        .route("/metrics", get(metrics))
        .route("/tokenize", post(tokenize))
        .route("/reset_prefix_cache", post(reset_prefix_cache))
        .route("/start_profile", post(start_profile))
        .route("/stop_profile", post(stop_profile))
        .route("/sim/profile", get(profile_calls))
        .route("/sim/config", get(sim_config))
        .merge(pooling::routes())
        .fallback(error::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        .with_state(state)
}

async fn completions(State(app): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let received = Instant::now();
    generate(app, Endpoint::Completions, &headers, body, received)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn chat_completions(State(app): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let received = Instant::now();
    generate(app, Endpoint::Chat, &headers, body, received)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// The Responses API: a chat request underneath, its stream rewritten (responses.rs).
async fn responses_api(State(app): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let received = Instant::now();
    let bytes = match body::read_limited(
        &headers,
        body,
        app.inner.max_body_bytes,
        app.inner.body_timeouts,
    )
    .await
    {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let (chat, stream) = match responses::to_chat_request(&bytes) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    let mut chat_headers = headers.clone();
    chat_headers.remove(header::CONTENT_LENGTH);
    let answer = generate(
        app,
        Endpoint::Chat,
        &chat_headers,
        Body::from(chat),
        received,
    )
    .await
    .unwrap_or_else(IntoResponse::into_response);
    let id = format!(
        "resp_{:016x}",
        xxhash_rust::xxh3::xxh3_64(&bytes) ^ received.elapsed().as_nanos() as u64
    );
    responses::translate(answer, stream, id).await
}

async fn generate(
    app: AppState,
    endpoint: Endpoint,
    headers: &HeaderMap,
    body: Body,
    received: Instant,
) -> Result<Response, ApiError> {
    let body = body::read_limited(
        headers,
        body,
        app.inner.max_body_bytes,
        app.inner.body_timeouts,
    )
    .await?;
    let body = GenerateBody::parse(endpoint, &body)?;
    app.check_model(body.model())?;
    let mut req = request::validate(&body, &app.inner.tokenizer, app.inner.limits)?;
    images::charge(
        &body,
        &mut req,
        app.inner.vision.as_ref(),
        &app.inner.served_name,
        app.inner.limits,
    )?;
    let faults = app.inner.faults.draw(req.max_tokens);
    if faults.error {
        app.inner.faults.record(FaultKind::Error);
        let status = StatusCode::from_u16(app.inner.faults.config().error_status)
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return Err(ApiError::with_status(
            status,
            "Injected fault: the simulator rejected this request.",
        ));
    }
    let prompt_tokens = u32::try_from(req.prompt.len()).unwrap_or(u32::MAX);
    let first = NewRequest {
        lora: app.lora_of(body.model()),
        id: 0,
        prompt: req.prompt,
        max_tokens: req.max_tokens,
        min_tokens: req.min_tokens,
        ignore_eos: req.ignore_eos,
        seed: req.seed,
        cache_salt: req.cache_salt,
        arrival_ns: 0,
    };
    let reasoning = app.reasoning_tokens(endpoint, &first);
    // `n` choices are `n` engine requests with the same prompt, as vLLM V1 fans a request out
    // into child requests; each draws its own output (`choice_seed`). Every choice is
    // submitted before any token is awaited, so they are scheduled together.
    let mut submitted = Vec::with_capacity(req.n as usize);
    let mut served = None;
    for index in 0..req.n {
        let mut new = first.clone();
        new.seed = engine::choice_seed(first.seed, &first.prompt, index);
        let (engine, sub, labels) = match &app.inner.fleet {
            Some(fleet) => {
                let session = headers
                    .get(fleet.session_header())
                    .and_then(|v| v.to_str().ok());
                crate::fleet::server_hooks::submit_for(fleet, new, received, session).await?
            }
            None => {
                let engine = app.inner.engine.clone();
                let sub = engine
                    .submit(new, received)
                    .await
                    .map_err(|_| ApiError::engine_stopped())?;
                (engine, sub, None)
            }
        };
        if index == 0 {
            served = labels;
        }
        let guard = AbortOnDrop::new(engine, sub.id);
        submitted.push((sub, guard));
    }
    let response_id = submitted.first().map_or(0, |(s, _)| s.id);
    let created = unix_now();
    let details = app.inner.prompt_tokens_details;
    let scan = |req_stop: &Option<stop::StopSpec>| {
        req_stop
            .clone()
            .map(|spec| StopScan::new(spec, req.min_tokens, reasoning.unwrap_or(0)))
    };

    if req.stream {
        let mut template = ChunkTemplate::new(
            endpoint,
            response_id,
            created,
            &app.inner.served_name,
            prompt_tokens,
            req.continuous_usage,
            details,
        );
        if let Some(n) = reasoning {
            template = template.with_reasoning(n);
        }
        let template = Arc::new(template);
        let choices = submitted
            .into_iter()
            .zip(0u32..)
            .map(|((sub, guard), index)| {
                ChoiceStream::new(index, sub.id, sub.events, guard, scan(&req.stop))
            })
            .collect();
        let state = StreamState {
            app,
            template,
            choices,
            faults,
            include_usage: req.include_usage,
            reasoning: reasoning.unwrap_or(0),
            done: false,
            cut: false,
        };
        let stream = futures_util::stream::unfold(state, |mut s| async move {
            let item = s.next_write().await?;
            Some((item, s))
        });
        let mut resp = Response::new(Body::from_stream(stream));
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream; charset=utf-8"),
        );
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        crate::fleet::server_hooks::mark_served(&mut resp, served.as_ref());
        return Ok(resp);
    }

    // The choices run together in the engine; their events queue until read, so reading
    // them one after the other costs nothing.
    let mut texts = Vec::with_capacity(submitted.len());
    for (sub, mut guard) in submitted {
        let choice = collect_choice(&app, sub, &mut guard, scan(&req.stop), reasoning).await?;
        texts.push(choice);
    }
    let meta = response::ResponseMeta {
        endpoint,
        id: response_id,
        created,
        model: &app.inner.served_name,
        prompt_tokens,
        details,
        reasoning,
    };
    let body = response::full_body(meta, texts);
    let mut resp = axum::Json(body).into_response();
    crate::fleet::server_hooks::mark_served(&mut resp, served.as_ref());
    Ok(resp)
}

/// Reads one choice of a non-streaming response to its end: the engine's finish, or the
/// first stop in its text.
async fn collect_choice(
    app: &AppState,
    sub: crate::realtime::Submitted,
    guard: &mut AbortOnDrop,
    mut scan: Option<StopScan>,
    reasoning: Option<u32>,
) -> Result<response::ChoiceText, ApiError> {
    let mut events = sub.events;
    let mut text = String::new();
    let mut thinking = reasoning.map(|_| String::new());
    let mut generated = 0u32;
    let finished = loop {
        let Some(ev) = events.recv().await else {
            return Err(ApiError::engine_stopped());
        };
        if let Some(t) = ev.token {
            if let Some(scan) = &mut scan {
                if scan.push(t, &app.raw_word(t)) {
                    // Tell the engine before `events` is dropped (see `stop_early`).
                    guard.stop_early(scan.tokens());
                    break engine::Finished {
                        id: sub.id,
                        reason: engine::FinishReason::Stop,
                        prompt_tokens: 0,
                        completion_tokens: scan.tokens(),
                        cached_tokens: ev.cached_tokens,
                        preemptions: 0,
                    };
                }
            } else {
                match &mut thinking {
                    Some(th) if generated < reasoning.unwrap_or(0) => {
                        th.push_str(&app.raw_word(t));
                    }
                    _ => text.push_str(&app.raw_word(t)),
                }
            }
            generated += 1;
        }
        if let Some(f) = ev.finished {
            break f;
        }
    };
    guard.disarm();
    if let Some(scan) = scan {
        let (th, answer) = scan.into_text();
        text = answer;
        if let Some(t) = &mut thinking {
            *t = th;
        }
    }
    Ok(response::ChoiceText {
        text,
        thinking,
        finished,
    })
}

async fn models(State(app): State<AppState>) -> Response {
    let s = &app.inner;
    axum::Json(ModelList {
        object: "list".to_owned(),
        data: [ModelCard {
            id: s.served_name.clone(),
            object: "model".to_owned(),
            created: s.created,
            owned_by: "servebench-sim".to_owned(),
            root: Some(s.served_name.clone()),
            parent: None,
            max_model_len: Some(u64::from(s.limits.max_model_len)),
        }]
        .into_iter()
        // vLLM lists each adapter as a model whose parent is the base model.
        .chain(s.lora_modules.iter().map(|name| ModelCard {
            id: name.clone(),
            object: "model".to_owned(),
            created: s.created,
            owned_by: "servebench-sim".to_owned(),
            root: Some(name.clone()),
            parent: Some(s.served_name.clone()),
            max_model_len: Some(u64::from(s.limits.max_model_len)),
        }))
        .collect(),
    })
    .into_response()
}

async fn health() -> StatusCode {
    StatusCode::OK
}

async fn version() -> Response {
    axum::Json(serde_json::json!({ "version": concat!(env!("CARGO_PKG_VERSION"), "-sim") }))
        .into_response()
}

async fn metrics(State(app): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        app.render_metrics(),
    )
        .into_response()
}

async fn tokenize(State(app): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    let body = match body::read_limited(
        &headers,
        body,
        app.inner.max_body_bytes,
        app.inner.body_timeouts,
    )
    .await
    {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let result = (|| {
        let body: TokenizeRequest = request::parse_json(&body)?;
        app.check_model(body.model.as_deref())?;
        let tokens = match (&body.prompt, &body.messages) {
            (Some(p), _) => request::completion_prompt(&app.inner.tokenizer, p, app.inner.limits)?,
            (None, Some(m)) => request::chat_prompt(&app.inner.tokenizer, m),
            (None, None) => {
                return Err(ApiError::bad_request(
                    "Either `prompt` or `messages` is required.",
                    Some("prompt"),
                ))
            }
        };
        Ok(serde_json::json!({
            "count": tokens.len(),
            "max_model_len": app.inner.limits.max_model_len,
            "tokens": tokens,
            "token_strs": null,
        }))
    })();
    match result {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn reset_prefix_cache(State(app): State<AppState>) -> Response {
    let reset = match &app.inner.fleet {
        Some(fleet) => fleet.reset_prefix_cache().await,
        None => app.inner.engine.reset_prefix_cache().await,
    };
    match reset {
        Ok(true) => StatusCode::OK.into_response(),
        Ok(false) => ApiError::with_status(
            StatusCode::CONFLICT,
            "Cannot reset the prefix cache while KV blocks are in use; retry when the engine is idle.",
        )
        .into_response(),
        Err(_) => ApiError::engine_stopped().into_response(),
    }
}

/// vLLM's `/start_profile`: 200 with an empty body (vLLM's answer once its profiler is
/// configured).
async fn start_profile(State(app): State<AppState>) -> StatusCode {
    app.inner.profile_calls[0].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    StatusCode::OK
}

/// vLLM's `/stop_profile`.
async fn stop_profile(State(app): State<AppState>) -> StatusCode {
    app.inner.profile_calls[1].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    StatusCode::OK
}

/// How often the profiler endpoints were called: `{"start": N, "stop": M}`.
async fn profile_calls(State(app): State<AppState>) -> Response {
    let [start, stop] = &app.inner.profile_calls;
    axum::Json(serde_json::json!({
        "start": start.load(std::sync::atomic::Ordering::Relaxed),
        "stop": stop.load(std::sync::atomic::Ordering::Relaxed),
    }))
    .into_response()
}

async fn sim_config(State(app): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        app.inner.sim_config.clone(),
    )
        .into_response()
}

/// Serves the simulator on `listener` until `shutdown` resolves, then stops the engine (open
/// streams end without `[DONE]`) and returns once every connection has closed. The engine runs
/// on its own thread so that busy request handlers cannot delay its steps.
pub async fn serve(
    listener: TcpListener,
    sim: ResolvedSim,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), SimError> {
    serve_announced(listener, sim, shutdown, || {}).await
}

/// [`serve`], calling `announce` once the configuration has been accepted (limits, TLS, the
/// engines started) and just before connections are taken: a "Serving on …" line printed
/// there is never followed by a configuration error.
pub async fn serve_announced(
    listener: TcpListener,
    sim: ResolvedSim,
    shutdown: impl Future<Output = ()> + Send + 'static,
    announce: impl FnOnce(),
) -> Result<(), SimError> {
    let limits = ConnectionLimits::from_args(&sim.args)?;
    let secure = secure::Secure::from_args(&sim.args, &limits)?;
    let (engine, fleet) = crate::fleet::realtime_fleet::spawn(&sim)?;
    announce();
    let state = AppState::new(&sim, engine.clone()).with_fleet(fleet.clone());
    let stopper = (engine.clone(), fleet.clone());
    connections::serve_connections(
        listener,
        router(state),
        limits,
        secure,
        shutdown,
        move || {
            stopper.0.stop();
            if let Some(f) = &stopper.1 {
                f.stop();
            }
        },
    )
    .await;
    engine.stop();
    if let Some(f) = &fleet {
        f.stop();
    }
    Ok(())
}

/// Stops an in-process simulator when dropped or on [`ShutdownHandle::shutdown`].
#[derive(Debug)]
pub struct ShutdownHandle {
    trigger: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), SimError>>>,
}

impl ShutdownHandle {
    /// Stops the server and waits until it has closed every connection.
    pub async fn shutdown(mut self) -> Result<(), SimError> {
        if let Some(t) = self.trigger.take() {
            let _ = t.send(());
        }
        match self.task.take() {
            Some(task) => task.await.map_err(|e| {
                SimError::Io(std::io::Error::other(format!("simulator task failed: {e}")))
            })?,
            None => Ok(()),
        }
    }
}

impl Drop for ShutdownHandle {
    fn drop(&mut self) {
        // Dropping the sender resolves the server's shutdown future.
        self.trigger.take();
    }
}

/// Starts a simulator on `127.0.0.1:0` in the current runtime; it serves until the handle is
/// dropped or shut down.
pub async fn spawn_in_process(sim: ResolvedSim) -> Result<(SocketAddr, ShutdownHandle), SimError> {
    // Refuse bad limits here rather than from inside the spawned task.
    ConnectionLimits::from_args(&sim.args)?;
    if sim.args.tls_cert.is_some() || sim.args.tls_key.is_some() {
        return Err(SimError::Config(
            "--tls-cert/--tls-key are for `servebench sim`; the in-process simulator serves plain http".to_owned(),
        ));
    }
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let (trigger, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, sim, async move {
        let _ = rx.await;
    }));
    Ok((
        addr,
        ShutdownHandle {
            trigger: Some(trigger),
            task: Some(task),
        },
    ))
}
