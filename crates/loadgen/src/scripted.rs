//! A tiny, scriptable OpenAI-compatible streaming server, for tests and benchmarks of the
//! client.
//!
//! It answers `POST /v1/completions` and `POST /v1/chat/completions` with vLLM's exact chunk
//! shapes, paced by a [`Script`] (first-token delay, inter-token interval, tokens per request
//! and per event) and broken on purpose by [`FaultRule`]s. Every generation request leaves a
//! [`RequestLog`]: when it arrived, its `x-request-id`, and the instant right after each
//! token-bearing event was written to the socket. Comparing a client's records with that log
//! measures the client's own timing error, free of any lateness of the server.
//!
//! HTTP/1.1 is spoken directly on the socket rather than through an HTTP server library, for
//! two reasons: the log's instants are taken right after each event's bytes were handed to the
//! kernel (a library buffers and flushes on its own schedule), and a "connection reset" fault
//! is a real TCP RST. Only what clients of an OpenAI server send is understood: `HTTP/1.1`,
//! `content-length` bodies, keep-alive and `expect: 100-continue`.
//!
//! Pacing uses absolute deadlines from the arrival instant (event `k` at `arrival + delay +
//! k·interval`), so lateness never accumulates. Events whose deadlines have all passed are
//! written together (up to 64 KiB per write): with zero delay and zero interval a response is
//! streamed as fast as the socket takes it.

use std::fmt::Write as _;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use servebench_metrics::RequestRecord;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// Largest request head accepted (request line and headers).
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Largest request body accepted (a very long prompt is a few MB).
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
/// Most response bytes gathered into one write when several events are due.
const MAX_WRITE_BYTES: usize = 64 * 1024;
/// Output length when the script follows the request and the request names none (vLLM's
/// completions default).
pub const DEFAULT_MAX_TOKENS: u64 = 16;
/// `x-request-id` prefix the servebench client uses (`servebench-<record id>`).
pub const REQUEST_ID_PREFIX: &str = "servebench-";

/// Token texts, cycled: short ASCII words that need no JSON escaping.
const WORDS: [&str; 16] = [
    " the", " of", " and", " to", " in", " a", " is", " that", " for", " it", " as", " was",
    " with", " be", " by", " on",
];

/// How many tokens each response carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputLength {
    /// Always this many, whatever the request asks.
    Fixed(u64),
    /// The request's `max_completion_tokens` or `max_tokens`; `default` when it has neither.
    FromRequest {
        /// Used when the request names no limit.
        default: u64,
    },
}

/// Which chunk shapes a generation request is answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChunkShape {
    /// Chat chunks on a path containing `chat`, completions chunks elsewhere.
    #[default]
    ByPath,
    /// Always `text_completion` chunks.
    Completions,
    /// Always `chat.completion.chunk` chunks (with the role-only opening chunk).
    Chat,
}

/// Something going wrong on purpose, for one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// Answer with this HTTP status and a vLLM error body carrying `message`.
    HttpStatus {
        /// The status code (4xx or 5xx).
        status: u16,
        /// The error message in the body.
        message: String,
    },
    /// Reset the TCP connection (RST) after this many token events.
    Reset {
        /// Token events written before the reset.
        after_events: u32,
    },
    /// End the response cleanly after this many token events, with no `finish_reason`, usage
    /// or `[DONE]`.
    Truncate {
        /// Token events written before the end.
        after_events: u32,
    },
    /// Replace token event `at_event` (0-based) with a chunk that is not valid JSON; the rest
    /// of the stream is normal.
    Malformed {
        /// Index of the broken event.
        at_event: u32,
    },
    /// Stop sending for `duration` after this many token events, then go on (the remaining
    /// events are then overdue and follow at once).
    Stall {
        /// Token events written before the stall.
        after_events: u32,
        /// How long nothing is sent.
        duration: Duration,
    },
    /// After this many token events send a vLLM in-stream error object, then `[DONE]`.
    StreamError {
        /// Token events written before the error.
        after_events: u32,
        /// The error message.
        message: String,
    },
    /// A stream without any token: (chat) the role chunk, a closing chunk with
    /// `finish_reason`, usage if asked, `[DONE]`.
    Empty,
}

impl Fault {
    /// A short stable name, as kept in the log.
    pub fn name(&self) -> &'static str {
        match self {
            Fault::HttpStatus { .. } => "http_status",
            Fault::Reset { .. } => "reset",
            Fault::Truncate { .. } => "truncate",
            Fault::Malformed { .. } => "malformed",
            Fault::Stall { .. } => "stall",
            Fault::StreamError { .. } => "stream_error",
            Fault::Empty => "empty",
        }
    }
}

/// Which requests a fault hits.
#[derive(Debug, Clone, PartialEq)]
pub enum Trigger {
    /// The generation request with this arrival index (0-based, in the server's arrival order).
    Index(u64),
    /// The request whose `x-request-id` header equals this value.
    RequestId(String),
    /// Each request with this probability, drawn from the script's seed and the arrival index
    /// (the same seed hits the same indices).
    Probability(f64),
}

/// A fault and the requests it hits. The first matching rule of a script wins.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultRule {
    /// Which requests.
    pub trigger: Trigger,
    /// What happens to them.
    pub fault: Fault,
}

/// What the server does with each generation request.
#[derive(Debug, Clone)]
pub struct Script {
    /// From the arrival of the request to the first token.
    pub first_token_delay: Duration,
    /// Between consecutive tokens.
    pub inter_token_interval: Duration,
    /// Tokens per response.
    pub output: OutputLength,
    /// Tokens per SSE event (the last event may carry fewer); at least 1.
    pub tokens_per_event: u32,
    /// Chunk shapes.
    pub shape: ChunkShape,
    /// The `model` field of the chunks and of `/v1/models`.
    pub model: String,
    /// Faults, first match wins.
    pub faults: Vec<FaultRule>,
    /// Seed of [`Trigger::Probability`].
    pub seed: u64,
    /// Keep every token event's write instant in the log (off for long ingest runs, where the
    /// log would grow by 8 bytes per token).
    pub log_events: bool,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            first_token_delay: Duration::ZERO,
            inter_token_interval: Duration::ZERO,
            output: OutputLength::FromRequest {
                default: DEFAULT_MAX_TOKENS,
            },
            tokens_per_event: 1,
            shape: ChunkShape::ByPath,
            model: "scripted-model".to_owned(),
            faults: Vec::new(),
            seed: 0,
            log_events: true,
        }
    }
}

impl Script {
    /// No delay, no interval, the request's `max_tokens`, one token per event.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the first-token delay.
    pub fn first_token_delay(mut self, d: Duration) -> Self {
        self.first_token_delay = d;
        self
    }

    /// Sets the inter-token interval.
    pub fn inter_token_interval(mut self, d: Duration) -> Self {
        self.inter_token_interval = d;
        self
    }

    /// Every response carries exactly `n` tokens.
    pub fn tokens(mut self, n: u64) -> Self {
        self.output = OutputLength::Fixed(n);
        self
    }

    /// Responses carry the request's `max_tokens` (`default` when absent).
    pub fn tokens_from_request(mut self, default: u64) -> Self {
        self.output = OutputLength::FromRequest { default };
        self
    }

    /// Sets the tokens per SSE event.
    pub fn tokens_per_event(mut self, n: u32) -> Self {
        self.tokens_per_event = n.max(1);
        self
    }

    /// Sets the chunk shapes.
    pub fn shape(mut self, shape: ChunkShape) -> Self {
        self.shape = shape;
        self
    }

    /// Sets the served model name.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// Adds a fault rule.
    pub fn fault(mut self, trigger: Trigger, fault: Fault) -> Self {
        self.faults.push(FaultRule { trigger, fault });
        self
    }

    /// Sets the seed of probabilistic faults.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Keeps (or not) the write instant of every token event.
    pub fn log_events(mut self, on: bool) -> Self {
        self.log_events = on;
        self
    }

    fn fault_for(&self, index: u64, request_id: Option<&str>) -> Option<&Fault> {
        self.faults.iter().find_map(|rule| {
            let hit = match &rule.trigger {
                Trigger::Index(i) => *i == index,
                Trigger::RequestId(id) => request_id == Some(id.as_str()),
                Trigger::Probability(p) => unit_draw(self.seed, index) < *p,
            };
            hit.then_some(&rule.fault)
        })
    }
}

/// A uniform draw in `[0, 1)` from `(seed, index)` (splitmix64): stable across runs.
fn unit_draw(seed: u64, index: u64) -> f64 {
    let mut z = seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// How a logged request ended, as the server saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The whole response was written (an error status counts: it was the script).
    Completed,
    /// The script reset the connection.
    Reset,
    /// A write failed: the client closed the connection first.
    ClientGone,
    /// The server shut down (or the task ended) while the response was under way.
    #[default]
    Interrupted,
}

/// What the server did for one generation request. Offsets are nanoseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestLog {
    /// Arrival order among generation requests, from 0.
    pub index: u64,
    /// The `x-request-id` header, if the client sent one.
    #[serde(default)]
    pub request_id: Option<String>,
    /// The request path.
    pub path: String,
    /// When the whole request (head and body) had been read, from the server's start.
    pub arrival_ns: u64,
    /// The HTTP status answered.
    pub status: u16,
    /// `max_tokens` (or `max_completion_tokens`) of the request.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// Tokens the script meant to send.
    pub planned_tokens: u64,
    /// The fault applied, by [`Fault::name`].
    #[serde(default)]
    pub fault: Option<String>,
    /// Token-bearing events written.
    pub token_events: u64,
    /// For each token-bearing event: the instant right after its bytes were written to the
    /// socket, as an offset from arrival (empty when the script does not log events).
    #[serde(default)]
    pub events_ns: Vec<u64>,
    /// When the response ended (last byte written), as an offset from arrival.
    #[serde(default)]
    pub end_ns: Option<u64>,
    /// How it ended.
    #[serde(default)]
    pub outcome: Outcome,
}

impl RequestLog {
    /// The arrival instant, given the server's start ([`ScriptedServer::started`]).
    pub fn arrival(&self, server_started: Instant) -> Instant {
        server_started + Duration::from_nanos(self.arrival_ns)
    }

    /// The servebench record id carried in `x-request-id` (`servebench-<id>`), if any.
    pub fn record_id(&self) -> Option<u64> {
        self.request_id
            .as_deref()?
            .strip_prefix(REQUEST_ID_PREFIX)?
            .parse()
            .ok()
    }
}

/// The log, shared by the connection tasks.
#[derive(Debug)]
struct LogStore {
    entries: Mutex<Vec<RequestLog>>,
    count: watch::Sender<usize>,
}

impl LogStore {
    fn push(&self, entry: RequestLog) {
        let len = {
            let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            entries.push(entry);
            entries.len()
        };
        self.count.send_replace(len);
    }

    fn snapshot(&self) -> Vec<RequestLog> {
        let mut v = self
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        v.sort_by_key(|e| e.index);
        v
    }
}

/// A log entry under way; it reaches the log when dropped, so a response cut short by a
/// failed write or a shutdown is logged too.
struct PendingLog {
    entry: RequestLog,
    store: Arc<LogStore>,
}

impl Drop for PendingLog {
    fn drop(&mut self) {
        self.store.push(std::mem::take(&mut self.entry));
    }
}

#[derive(Debug)]
struct Shared {
    script: Script,
    started: Instant,
    /// Unix seconds at the start, the `created` field of every chunk.
    created: u64,
    next_index: AtomicU64,
    log: Arc<LogStore>,
}

/// A running scripted server. Dropping it stops the server (in the background);
/// [`ScriptedServer::shutdown`] stops it and waits.
#[derive(Debug)]
pub struct ScriptedServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl ScriptedServer {
    /// Serve `script` on `127.0.0.1` at a free port. Must be called inside a Tokio runtime.
    pub async fn start(script: Script) -> io::Result<ScriptedServer> {
        Self::bind(SocketAddr::from(([127, 0, 0, 1], 0)), script).await
    }

    /// Serve `script` on `addr` (port 0 picks a free one), with a listen backlog deep enough
    /// for thousands of simultaneous connects.
    pub async fn bind(addr: SocketAddr, script: Script) -> io::Result<ScriptedServer> {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        Self::start_on(socket.listen(4096)?, script)
    }

    /// Serve `script` on a bound listener. Must be called inside a Tokio runtime.
    pub fn start_on(listener: TcpListener, script: Script) -> io::Result<ScriptedServer> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(io::Error::other(
                "the scripted server needs a running Tokio runtime",
            ));
        }
        let addr = listener.local_addr()?;
        let (count, _) = watch::channel(0);
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let shared = Arc::new(Shared {
            script,
            started: Instant::now(),
            created,
            next_index: AtomicU64::new(0),
            log: Arc::new(LogStore {
                entries: Mutex::new(Vec::new()),
                count,
            }),
        });
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(accept_loop(listener, Arc::clone(&shared), stop_rx));
        Ok(ScriptedServer {
            addr,
            shared,
            stop,
            task: Some(task),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://host:port`, without a trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The server's time origin: [`RequestLog::arrival_ns`] counts from here.
    pub fn started(&self) -> Instant {
        self.shared.started
    }

    /// The script being served.
    pub fn script(&self) -> &Script {
        &self.shared.script
    }

    /// The requests logged so far (finished or cut short), in arrival order.
    pub fn log(&self) -> Vec<RequestLog> {
        self.shared.log.snapshot()
    }

    /// Waits until at least `n` requests are logged or `within` has passed, then returns the
    /// log. A response is logged after its last write, which can be a moment after the
    /// client has read it.
    pub async fn wait_for_log(&self, n: usize, within: Duration) -> Vec<RequestLog> {
        let mut rx = self.shared.log.count.subscribe();
        let _ = tokio::time::timeout(within, rx.wait_for(|c| *c >= n)).await;
        self.log()
    }

    /// Stops accepting, ends every connection and returns the complete log.
    pub async fn shutdown(mut self) -> Vec<RequestLog> {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.log()
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Resolves when `stop` turns true or its sender is gone.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut conns = JoinSet::new();
    loop {
        while conns.try_join_next().is_some() {}
        tokio::select! {
            biased;
            _ = stopped(&mut stop) => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    conns.spawn(serve_connection(stream, Arc::clone(&shared), stop.clone()));
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!("scripted server: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
        }
    }
    // Aborting drops each response's PendingLog, which logs it as interrupted.
    conns.shutdown().await;
}

/// One parsed request.
struct Request {
    method: String,
    path: String,
    request_id: Option<String>,
    close: bool,
    body: Vec<u8>,
    arrival: Instant,
}

/// Why a request could not be read.
enum ReadError {
    /// Answer with this status and message, then close.
    Bad(u16, String),
    /// The connection failed or closed mid-request: just close.
    Io,
}

/// Should the connection carry another request?
#[derive(PartialEq, Eq)]
enum Next {
    KeepAlive,
    Close,
}

async fn serve_connection(
    mut stream: TcpStream,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let work = async {
        let mut buf = Vec::with_capacity(8 * 1024);
        loop {
            let req = match read_request(&mut stream, &mut buf).await {
                Ok(Some(req)) => req,
                Ok(None) | Err(ReadError::Io) => return,
                Err(ReadError::Bad(status, message)) => {
                    let body = error_body(status, &message);
                    let _ =
                        write_response(&mut stream, status, "application/json", None, &body, true)
                            .await;
                    return;
                }
            };
            match respond(&mut stream, &shared, req).await {
                Ok(Next::KeepAlive) => {}
                Ok(Next::Close) | Err(_) => return,
            }
        }
    };
    tokio::select! {
        _ = work => {}
        _ = stopped(&mut stop) => {}
    }
    // Dropping the stream here closes it (with an RST when a Reset fault set zero linger).
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<usize, ReadError> {
    buf.reserve(16 * 1024);
    stream.read_buf(buf).await.map_err(|_| ReadError::Io)
}

/// Reads one request; `Ok(None)` when the client closed the connection between requests.
async fn read_request(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> Result<Option<Request>, ReadError> {
    let head_end = loop {
        if let Some(end) = find_head_end(buf) {
            break end;
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Err(ReadError::Bad(431, "request head too large".into()));
        }
        if read_more(stream, buf).await? == 0 {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err(ReadError::Io)
            };
        }
    };
    let head = std::str::from_utf8(&buf[..head_end - 4])
        .map_err(|_| ReadError::Bad(400, "the request head is not UTF-8".into()))?;
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let method = request_line.next().unwrap_or_default().to_owned();
    let target = request_line.next().unwrap_or_default();
    let version = request_line.next().unwrap_or_default();
    if version != "HTTP/1.1" {
        return Err(ReadError::Bad(
            505,
            format!("only HTTP/1.1 is served, not {version:?}"),
        ));
    }
    let path = target.split('?').next().unwrap_or_default().to_owned();
    let mut content_length = 0usize;
    let mut request_id = None;
    let mut close = false;
    let mut expect_continue = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(ReadError::Bad(
                400,
                format!("malformed header line {line:?}"),
            ));
        };
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("content-length") {
            content_length = value
                .parse()
                .map_err(|_| ReadError::Bad(400, format!("invalid content-length {value:?}")))?;
        } else if name.eq_ignore_ascii_case("x-request-id") {
            request_id = Some(value.to_owned());
        } else if name.eq_ignore_ascii_case("connection") {
            close = value.eq_ignore_ascii_case("close");
        } else if name.eq_ignore_ascii_case("expect") {
            expect_continue = value.eq_ignore_ascii_case("100-continue");
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(ReadError::Bad(
                501,
                "chunked request bodies are not supported; send content-length".into(),
            ));
        }
    }
    if content_length > MAX_BODY_BYTES {
        return Err(ReadError::Bad(
            413,
            format!("request body larger than {MAX_BODY_BYTES} bytes"),
        ));
    }
    let total = head_end + content_length;
    if buf.len() < total && expect_continue {
        stream
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .await
            .map_err(|_| ReadError::Io)?;
    }
    while buf.len() < total {
        if read_more(stream, buf).await? == 0 {
            return Err(ReadError::Io);
        }
    }
    let arrival = Instant::now();
    let body = buf[head_end..total].to_vec();
    buf.drain(..total);
    Ok(Some(Request {
        method,
        path,
        request_id,
        close,
        body,
        arrival,
    }))
}

/// The fields of a generation request the script looks at.
#[derive(Deserialize)]
struct GenerationRequest {
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    max_completion_tokens: Option<u64>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    prompt: Option<Value>,
    #[serde(default)]
    messages: Option<Vec<Value>>,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

impl GenerationRequest {
    /// Prompt length for `usage`: whitespace-separated words of the prompt text (an
    /// approximation; the server has no tokenizer).
    fn prompt_words(&self) -> u64 {
        fn words(v: &Value) -> u64 {
            match v {
                Value::String(s) => s.split_whitespace().count() as u64,
                Value::Array(a) => a.iter().map(words).sum(),
                Value::Object(o) => o.get("text").map(words).unwrap_or(0),
                _ => 0,
            }
        }
        let prompt = self.prompt.as_ref().map(words).unwrap_or(0);
        let messages: u64 = self
            .messages
            .iter()
            .flatten()
            .filter_map(|m| m.get("content"))
            .map(words)
            .sum();
        prompt + messages
    }
}

async fn respond(stream: &mut TcpStream, shared: &Arc<Shared>, req: Request) -> io::Result<Next> {
    let next = if req.close {
        Next::Close
    } else {
        Next::KeepAlive
    };
    let generation = req.path == "/v1/completions" || req.path == "/v1/chat/completions";
    match (req.method.as_str(), generation) {
        ("POST", true) => generate(stream, shared, req, next).await,
        ("GET", _) if req.path == "/health" => {
            write_response(
                stream,
                200,
                "application/json",
                None,
                b"",
                next == Next::Close,
            )
            .await?;
            Ok(next)
        }
        ("GET", _) if req.path == "/v1/models" => {
            let body = serde_json::json!({
                "object": "list",
                "data": [{
                    "id": shared.script.model,
                    "object": "model",
                    "created": shared.created,
                    "owned_by": "vllm",
                    "root": shared.script.model,
                    "parent": null,
                    "max_model_len": 131072,
                }],
            });
            let body = serde_json::to_vec(&body).map_err(io::Error::other)?;
            write_response(
                stream,
                200,
                "application/json",
                None,
                &body,
                next == Next::Close,
            )
            .await?;
            Ok(next)
        }
        (_, true) => {
            let body = br#"{"detail":"Method Not Allowed"}"#;
            write_response(
                stream,
                405,
                "application/json",
                None,
                body,
                next == Next::Close,
            )
            .await?;
            Ok(next)
        }
        _ => {
            let body = br#"{"detail":"Not Found"}"#;
            write_response(
                stream,
                404,
                "application/json",
                None,
                body,
                next == Next::Close,
            )
            .await?;
            Ok(next)
        }
    }
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

async fn generate(
    stream: &mut TcpStream,
    shared: &Arc<Shared>,
    req: Request,
    next: Next,
) -> io::Result<Next> {
    let script = &shared.script;
    let index = shared.next_index.fetch_add(1, Ordering::Relaxed);
    let mut pending = PendingLog {
        entry: RequestLog {
            index,
            request_id: req.request_id.clone(),
            path: req.path.clone(),
            arrival_ns: ns(req.arrival.saturating_duration_since(shared.started)),
            ..RequestLog::default()
        },
        store: Arc::clone(&shared.log),
    };
    let close = next == Next::Close;
    let rid = req.request_id.as_deref();

    let parsed: GenerationRequest = match serde_json::from_slice(&req.body) {
        Ok(p) => p,
        Err(e) => {
            let body = error_body(400, &format!("the request body is not valid JSON: {e}"));
            return finish_plain(
                stream,
                &mut pending,
                req.arrival,
                400,
                rid,
                &body,
                close,
                next,
            )
            .await;
        }
    };
    if !parsed.stream {
        let body = error_body(
            400,
            "this scripted server only streams: set \"stream\": true",
        );
        return finish_plain(
            stream,
            &mut pending,
            req.arrival,
            400,
            rid,
            &body,
            close,
            next,
        )
        .await;
    }
    let max_tokens = parsed.max_completion_tokens.or(parsed.max_tokens);
    pending.entry.max_tokens = max_tokens;
    let fault = script.fault_for(index, rid).cloned();
    pending.entry.fault = fault.as_ref().map(|f| f.name().to_owned());
    if let Some(Fault::HttpStatus { status, message }) = &fault {
        let body = error_body(*status, message);
        return finish_plain(
            stream,
            &mut pending,
            req.arrival,
            *status,
            rid,
            &body,
            close,
            next,
        )
        .await;
    }

    let chat = match script.shape {
        ChunkShape::ByPath => req.path.contains("chat"),
        ChunkShape::Completions => false,
        ChunkShape::Chat => true,
    };
    let tokens = match script.output {
        OutputLength::Fixed(n) => n,
        OutputLength::FromRequest { default } => max_tokens.unwrap_or(default),
    };
    pending.entry.planned_tokens = tokens;
    let spec = StreamSpec {
        chat,
        id: format!("{}-{index}", if chat { "chatcmpl" } else { "cmpl" }),
        created: shared.created,
        model: &script.model,
        tokens,
        tokens_per_event: script.tokens_per_event.max(1),
        first_token_delay: script.first_token_delay,
        inter_token_interval: script.inter_token_interval,
        include_usage: parsed
            .stream_options
            .as_ref()
            .is_some_and(|o| o.include_usage),
        prompt_tokens: parsed.prompt_words(),
        finish_reason: if max_tokens == Some(tokens) {
            "length"
        } else {
            "stop"
        },
    };
    let plan = plan_stream(&spec, fault.as_ref());
    pending.entry.status = 200;
    let outcome = stream_plan(
        stream,
        &plan,
        req.arrival,
        rid,
        close,
        script.log_events,
        &mut pending.entry,
    )
    .await;
    pending.entry.outcome = outcome;
    Ok(match outcome {
        Outcome::Completed => next,
        _ => Next::Close,
    })
}

#[allow(clippy::too_many_arguments)]
async fn finish_plain(
    stream: &mut TcpStream,
    pending: &mut PendingLog,
    arrival: Instant,
    status: u16,
    request_id: Option<&str>,
    body: &[u8],
    close: bool,
    next: Next,
) -> io::Result<Next> {
    pending.entry.status = status;
    match write_response(stream, status, "application/json", request_id, body, close).await {
        Ok(()) => {
            pending.entry.end_ns = Some(ns(arrival.elapsed()));
            pending.entry.outcome = Outcome::Completed;
            Ok(next)
        }
        Err(e) => {
            pending.entry.outcome = Outcome::ClientGone;
            Err(e)
        }
    }
}

/// vLLM's error body for an HTTP status, keys in vLLM's order:
/// `{"error":{"message":…,"type":…,"param":null,"code":…}}`.
pub fn error_body(status: u16, message: &str) -> Vec<u8> {
    let message = serde_json::to_string(message).unwrap_or_else(|_| "\"\"".to_owned());
    format!(
        r#"{{"error":{{"message":{message},"type":"{}","param":null,"code":{status}}}}}"#,
        error_type(status)
    )
    .into_bytes()
}

fn error_type(status: u16) -> &'static str {
    match status {
        400 => "BadRequestError",
        401 => "AuthenticationError",
        403 => "PermissionDeniedError",
        404 => "NotFoundError",
        413 | 422 => "BadRequestError",
        429 => "RateLimitError",
        503 => "ServiceUnavailableError",
        s if s >= 500 => "InternalServerError",
        _ => "Error",
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Status",
    }
}

async fn write_response(
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    request_id: Option<&str>,
    body: &[u8],
    close: bool,
) -> io::Result<()> {
    let mut out = Vec::with_capacity(160 + body.len());
    let _ = write!(
        Cursor(&mut out),
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n",
        reason(status),
        body.len()
    );
    push_common_headers(&mut out, request_id, close);
    out.extend_from_slice(body);
    stream.write_all(&out).await
}

fn push_common_headers(out: &mut Vec<u8>, request_id: Option<&str>, close: bool) {
    out.extend_from_slice(b"server: servebench-scripted\r\n");
    if let Some(id) = request_id {
        out.extend_from_slice(b"x-request-id: ");
        out.extend_from_slice(id.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// `fmt::Write` into a byte vector.
struct Cursor<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Cursor<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// Everything one streamed response depends on.
#[derive(Debug, Clone)]
pub struct StreamSpec<'a> {
    /// Chat chunk shapes (else completions).
    pub chat: bool,
    /// The response id, the same in every chunk.
    pub id: String,
    /// Unix seconds, the `created` field.
    pub created: u64,
    /// The `model` field.
    pub model: &'a str,
    /// Tokens to send.
    pub tokens: u64,
    /// Tokens per event (at least 1).
    pub tokens_per_event: u32,
    /// From arrival to the first token.
    pub first_token_delay: Duration,
    /// Between tokens.
    pub inter_token_interval: Duration,
    /// Send the final usage-only chunk.
    pub include_usage: bool,
    /// `usage.prompt_tokens`.
    pub prompt_tokens: u64,
    /// `finish_reason` of the last token event.
    pub finish_reason: &'static str,
}

/// One step of a planned response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Write the plan's body up to byte `end` (from where the previous send stopped) once
    /// `at` (from arrival) has passed; `token_events` of those events carry tokens.
    Send {
        at: Duration,
        end: usize,
        token_events: u32,
    },
    /// Send nothing for a while.
    Stall(Duration),
    /// Reset the connection.
    Reset,
    /// End the chunked body.
    Finish,
}

/// A response prepared before its first byte is due, so pacing only writes.
#[derive(Debug, Clone)]
struct Plan {
    /// The SSE text of the whole response.
    body: Vec<u8>,
    steps: Vec<Step>,
}

/// The SSE text of a whole normal response (no fault, no HTTP framing): what a client's
/// parser receives. Used by benchmarks of the client's hot path.
pub fn sse_body(spec: &StreamSpec<'_>) -> Vec<u8> {
    plan_stream(spec, None).body
}

fn plan_stream(spec: &StreamSpec<'_>, fault: Option<&Fault>) -> Plan {
    let r = Renderer::new(spec);
    let tpe = u64::from(spec.tokens_per_event.max(1));
    let n_events = spec.tokens.div_ceil(tpe);
    // Event j is due when its last token is: delay + (last token index)·interval.
    let due = |j: u64| {
        let last_token = ((j + 1) * tpe).min(spec.tokens).saturating_sub(1);
        spec.first_token_delay
            + spec
                .inter_token_interval
                .saturating_mul(u32::try_from(last_token).unwrap_or(u32::MAX))
    };
    let mut body = Vec::with_capacity(estimate_bytes(spec, n_events));
    let mut steps = Vec::with_capacity(n_events as usize + 4);

    if fault == Some(&Fault::Empty) {
        if spec.chat {
            r.role(&mut body);
        }
        r.closing(&mut body);
        if spec.include_usage {
            r.usage(&mut body, 0);
        }
        body.extend_from_slice(b"data: [DONE]\n\n");
        steps.push(Step::Send {
            at: spec.first_token_delay,
            end: body.len(),
            token_events: 0,
        });
        steps.push(Step::Finish);
        return Plan { body, steps };
    }

    let interrupt_at = match fault {
        Some(Fault::Reset { after_events })
        | Some(Fault::Truncate { after_events })
        | Some(Fault::Stall { after_events, .. })
        | Some(Fault::StreamError { after_events, .. }) => {
            Some(u64::from(*after_events).min(n_events))
        }
        _ => None,
    };
    let malformed_at = match fault {
        Some(Fault::Malformed { at_event }) => Some(u64::from(*at_event)),
        _ => None,
    };
    let mut text = String::new();
    for j in 0..=n_events {
        if interrupt_at == Some(j) {
            match fault {
                Some(Fault::Reset { .. }) => {
                    steps.push(Step::Reset);
                    return Plan { body, steps };
                }
                Some(Fault::Truncate { .. }) => {
                    steps.push(Step::Finish);
                    return Plan { body, steps };
                }
                Some(Fault::Stall { duration, .. }) => steps.push(Step::Stall(*duration)),
                Some(Fault::StreamError { message, .. }) => {
                    if j == 0 && spec.chat {
                        r.role(&mut body);
                    }
                    r.stream_error(&mut body, message);
                    body.extend_from_slice(b"data: [DONE]\n\n");
                    let at = if j == 0 {
                        spec.first_token_delay
                    } else {
                        due(j - 1)
                    };
                    steps.push(Step::Send {
                        at,
                        end: body.len(),
                        token_events: 0,
                    });
                    steps.push(Step::Finish);
                    return Plan { body, steps };
                }
                _ => {}
            }
        }
        if j == n_events {
            break;
        }
        if j == 0 && spec.chat {
            r.role(&mut body);
        }
        text.clear();
        let first = j * tpe;
        let last = ((j + 1) * tpe).min(spec.tokens);
        for k in first..last {
            text.push_str(WORDS[(k % WORDS.len() as u64) as usize]);
        }
        let token_events = if malformed_at == Some(j) {
            r.malformed(&mut body, &text);
            0
        } else {
            let finish = (j + 1 == n_events).then_some(spec.finish_reason);
            r.token(&mut body, &text, finish);
            1
        };
        steps.push(Step::Send {
            at: due(j),
            end: body.len(),
            token_events,
        });
    }
    if spec.include_usage {
        r.usage(&mut body, spec.tokens);
    }
    body.extend_from_slice(b"data: [DONE]\n\n");
    let at = if n_events == 0 {
        spec.first_token_delay
    } else {
        due(n_events - 1)
    };
    steps.push(Step::Send {
        at,
        end: body.len(),
        token_events: 0,
    });
    steps.push(Step::Finish);
    Plan { body, steps }
}

fn estimate_bytes(spec: &StreamSpec<'_>, n_events: u64) -> usize {
    let per_event = 160 + spec.model.len() + 8 * spec.tokens_per_event as usize;
    usize::try_from(n_events)
        .unwrap_or(0)
        .saturating_mul(per_event)
        .saturating_add(512)
}

/// Writes vLLM's chunk JSON. Chat chunks are serialized as vLLM does with
/// `exclude_unset=True` (no `usage` key on content chunks), completions chunks with
/// `exclude_unset=False` (`"usage":null`); the usage chunk drops `null`s in both.
struct Renderer {
    chat: bool,
    /// `{"id":"…","object":"…","created":…,"model":"…","choices":[` — shared by every chunk.
    prefix: String,
    prompt_tokens: u64,
}

impl Renderer {
    fn new(spec: &StreamSpec<'_>) -> Self {
        let object = if spec.chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        let model = serde_json::to_string(spec.model).unwrap_or_else(|_| "\"\"".to_owned());
        let id = serde_json::to_string(&spec.id).unwrap_or_else(|_| "\"\"".to_owned());
        let prefix = format!(
            r#"{{"id":{id},"object":"{object}","created":{},"model":{model},"choices":["#,
            spec.created
        );
        Renderer {
            chat: spec.chat,
            prefix,
            prompt_tokens: spec.prompt_tokens,
        }
    }

    fn open(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(self.prefix.as_bytes());
    }

    fn role(&self, out: &mut Vec<u8>) {
        self.open(out);
        out.extend_from_slice(
            br#"{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#,
        );
        out.extend_from_slice(b"\n\n");
    }

    /// `text` must need no JSON escaping (it comes from `WORDS`).
    fn token(&self, out: &mut Vec<u8>, text: &str, finish: Option<&str>) {
        self.open(out);
        if self.chat {
            out.extend_from_slice(br#"{"index":0,"delta":{"content":""#);
            out.extend_from_slice(text.as_bytes());
            out.extend_from_slice(br#""},"logprobs":null,"finish_reason":"#);
        } else {
            out.extend_from_slice(br#"{"index":0,"text":""#);
            out.extend_from_slice(text.as_bytes());
            out.extend_from_slice(br#"","logprobs":null,"finish_reason":"#);
        }
        match finish {
            Some(f) => {
                out.push(b'"');
                out.extend_from_slice(f.as_bytes());
                out.extend_from_slice(br#"","stop_reason":null}]"#);
            }
            None if self.chat => out.extend_from_slice(b"null}]"),
            None => out.extend_from_slice(br#"null,"stop_reason":null}]"#),
        }
        if !self.chat {
            out.extend_from_slice(br#","usage":null"#);
        }
        out.extend_from_slice(b"}\n\n");
    }

    /// A closing chunk with no text (what vLLM sends when generation stops without output).
    fn closing(&self, out: &mut Vec<u8>) {
        self.open(out);
        if self.chat {
            out.extend_from_slice(br#"{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}"#);
        } else {
            out.extend_from_slice(
                br#"{"index":0,"text":"","logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":null}"#,
            );
        }
        out.extend_from_slice(b"\n\n");
    }

    fn usage(&self, out: &mut Vec<u8>, completion_tokens: u64) {
        self.open(out);
        let p = self.prompt_tokens;
        let _ = write!(
            Cursor(out),
            r#"],"usage":{{"prompt_tokens":{p},"total_tokens":{},"completion_tokens":{completion_tokens}}}}}"#,
            p + completion_tokens
        );
        out.extend_from_slice(b"\n\n");
    }

    /// vLLM's in-stream error: Python's `json.dumps` of the error response (with its spaces).
    fn stream_error(&self, out: &mut Vec<u8>, message: &str) {
        let message = serde_json::to_string(message).unwrap_or_else(|_| "\"\"".to_owned());
        let _ = write!(
            Cursor(out),
            "data: {{\"error\": {{\"message\": {message}, \"type\": \"InternalServerError\", \"param\": null, \"code\": 500}}}}\n\n"
        );
    }

    /// A token chunk cut off in the middle of its JSON.
    fn malformed(&self, out: &mut Vec<u8>, text: &str) {
        self.open(out);
        out.extend_from_slice(br#"{"index":0,"text":""#);
        out.extend_from_slice(text.as_bytes());
        out.extend_from_slice(b"\",\"logpro\n\n");
    }
}

/// Carries out a plan on the socket, logging each token event's write instant.
async fn stream_plan(
    stream: &mut TcpStream,
    plan: &Plan,
    arrival: Instant,
    request_id: Option<&str>,
    close: bool,
    log_events: bool,
    entry: &mut RequestLog,
) -> Outcome {
    let mut head = Vec::with_capacity(256);
    head.extend_from_slice(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n",
    );
    push_common_headers(&mut head, request_id, close);
    if stream.write_all(&head).await.is_err() {
        return Outcome::ClientGone;
    }
    if log_events {
        entry.events_ns.reserve(plan.steps.len());
    }
    let mut out = Vec::with_capacity(MAX_WRITE_BYTES + 64);
    let mut pos = 0usize;
    let mut i = 0usize;
    while i < plan.steps.len() {
        match plan.steps[i] {
            Step::Send { at, .. } => {
                let deadline = arrival + at;
                if Instant::now() < deadline {
                    tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)).await;
                }
                // Gather this send and every following one already due, within one write.
                let now = arrival.elapsed();
                let start = pos;
                let mut token_events = 0u64;
                while let Some(Step::Send {
                    at,
                    end,
                    token_events: t,
                }) = plan.steps.get(i).copied()
                {
                    let first = pos == start;
                    if !first && (at > now || end - start > MAX_WRITE_BYTES) {
                        break;
                    }
                    pos = end;
                    token_events += u64::from(t);
                    i += 1;
                }
                out.clear();
                let _ = write!(Cursor(&mut out), "{:x}\r\n", pos - start);
                out.extend_from_slice(&plan.body[start..pos]);
                out.extend_from_slice(b"\r\n");
                let finishing = plan.steps.get(i) == Some(&Step::Finish);
                if finishing {
                    out.extend_from_slice(b"0\r\n\r\n");
                    i += 1;
                }
                if stream.write_all(&out).await.is_err() {
                    return Outcome::ClientGone;
                }
                let t = ns(arrival.elapsed());
                entry.token_events += token_events;
                if log_events {
                    entry
                        .events_ns
                        .extend(std::iter::repeat_n(t, token_events as usize));
                }
                if finishing {
                    entry.end_ns = Some(t);
                    return Outcome::Completed;
                }
            }
            Step::Stall(d) => {
                tokio::time::sleep(d).await;
                i += 1;
            }
            Step::Reset => {
                // Zero linger turns the close into an RST once the caller drops the stream.
                let _ = stream.set_zero_linger();
                entry.end_ns = Some(ns(arrival.elapsed()));
                return Outcome::Reset;
            }
            Step::Finish => {
                if stream.write_all(b"0\r\n\r\n").await.is_err() {
                    return Outcome::ClientGone;
                }
                entry.end_ns = Some(ns(arrival.elapsed()));
                return Outcome::Completed;
            }
        }
    }
    Outcome::Completed
}

/// Writes a log as JSON lines, one request per line.
pub fn write_log_jsonl<W: io::Write>(log: &[RequestLog], mut out: W) -> io::Result<()> {
    for entry in log {
        serde_json::to_writer(&mut out, entry).map_err(io::Error::other)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// Reads a log written by [`write_log_jsonl`]; blank lines are skipped.
pub fn read_log_jsonl(text: &str) -> Result<Vec<RequestLog>, serde_json::Error> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect()
}

/// Summary of one error distribution, in milliseconds (of absolute errors).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ErrorStats {
    /// Samples.
    pub count: usize,
    /// Mean absolute error.
    pub mean_ms: f64,
    /// Median absolute error.
    pub p50_ms: f64,
    /// 99th percentile of the absolute error (linear interpolation, as NumPy).
    pub p99_ms: f64,
    /// Largest absolute error.
    pub max_ms: f64,
    /// Mean signed error (measured − logged): the bias.
    pub mean_signed_ms: f64,
}

impl ErrorStats {
    /// Statistics of signed errors in nanoseconds; `None` when there are none.
    pub fn from_errors_ns(errors: &[i64]) -> Option<ErrorStats> {
        if errors.is_empty() {
            return None;
        }
        let mut abs: Vec<f64> = errors
            .iter()
            .map(|e| e.unsigned_abs() as f64 / 1e6)
            .collect();
        abs.sort_by(f64::total_cmp);
        let n = abs.len() as f64;
        let signed: f64 = errors.iter().map(|e| *e as f64 / 1e6).sum::<f64>() / n;
        Some(ErrorStats {
            count: abs.len(),
            mean_ms: abs.iter().sum::<f64>() / n,
            p50_ms: percentile(&abs, 50.0),
            p99_ms: percentile(&abs, 99.0),
            max_ms: abs[abs.len() - 1],
            mean_signed_ms: signed,
        })
    }
}

/// NumPy's default percentile (linear interpolation between closest ranks) of sorted data.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = p / 100.0 * (sorted.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    let frac = rank - lo as f64;
    sorted[lo] + (sorted[hi] - sorted[lo]) * frac
}

/// How far a client's records are from the server's log of the same requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Accuracy {
    /// Successful records joined with a log entry through `x-request-id`.
    pub matched: usize,
    /// Successful records with no log entry of their id.
    pub unmatched: usize,
    /// Matched requests whose token event counts differ between client and server (only
    /// the common prefix of their events is compared).
    pub event_count_mismatches: usize,
    /// TTFT error: (`first_token − sent`) − (first event write − arrival). Includes the
    /// request's and the first event's trip over the connection.
    pub ttft: Option<ErrorStats>,
    /// ITL error: each gap between the client's receipts of consecutive token events minus
    /// the gap between the server's writes of the same events.
    pub itl: Option<ErrorStats>,
}

/// Joins records and log entries by `x-request-id` (`servebench-<record id>`) and measures
/// the client's timing error. When several log entries carry one id (warm-up requests reuse
/// ids), the last to arrive is used. Log entries without event instants are skipped.
pub fn compare_to_log(records: &[RequestRecord], log: &[RequestLog]) -> Accuracy {
    let mut by_id = std::collections::HashMap::new();
    for entry in log {
        if let Some(id) = entry.record_id() {
            let slot = by_id.entry(id).or_insert(entry);
            if entry.arrival_ns >= slot.arrival_ns {
                *slot = entry;
            }
        }
    }
    let mut ttft = Vec::new();
    let mut itl = Vec::new();
    let (mut matched, mut unmatched, mut mismatches) = (0, 0, 0);
    for r in records.iter().filter(|r| r.is_success()) {
        let Some(entry) = by_id.get(&r.id).filter(|e| !e.events_ns.is_empty()) else {
            unmatched += 1;
            continue;
        };
        matched += 1;
        if r.events.len() != entry.events_ns.len() {
            mismatches += 1;
        }
        let Some(first) = r.first_token else { continue };
        ttft.push(signed_diff(
            first.saturating_sub(r.sent),
            entry.events_ns[0],
        ));
        let n = r.events.len().min(entry.events_ns.len());
        for k in 1..n {
            let measured = r.events[k].t.saturating_sub(r.events[k - 1].t);
            let logged = entry.events_ns[k].saturating_sub(entry.events_ns[k - 1]);
            itl.push(signed_diff(measured, logged));
        }
    }
    Accuracy {
        matched,
        unmatched,
        event_count_mismatches: mismatches,
        ttft: ErrorStats::from_errors_ns(&ttft),
        itl: ErrorStats::from_errors_ns(&itl),
    }
}

fn signed_diff(a: u64, b: u64) -> i64 {
    i64::try_from(i128::from(a) - i128::from(b)).unwrap_or(if a > b { i64::MAX } else { i64::MIN })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use servebench_wire::chunk::{classify, is_done, EndpointKind};
    use servebench_wire::sse::SseParser;

    fn spec(chat: bool, tokens: u64) -> StreamSpec<'static> {
        StreamSpec {
            chat,
            id: "cmpl-7".into(),
            created: 1_700_000_000,
            model: "m",
            tokens,
            tokens_per_event: 1,
            first_token_delay: Duration::from_millis(50),
            inter_token_interval: Duration::from_millis(20),
            include_usage: true,
            prompt_tokens: 5,
            finish_reason: "length",
        }
    }

    /// Every event's data, through the real SSE parser.
    fn events(body: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        let mut p = SseParser::new();
        p.feed(body, |ev| out.push(ev.data.to_owned()))
            .expect("a valid SSE stream");
        out
    }

    #[test]
    fn completions_chunks_have_vllm_shape_and_classify_as_tokens() {
        let body = sse_body(&spec(false, 3));
        let evs = events(&body);
        assert_eq!(evs.len(), 5, "{evs:?}");
        assert_eq!(
            evs[0],
            r#"{"id":"cmpl-7","object":"text_completion","created":1700000000,"model":"m","choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}"#
        );
        assert!(
            evs[2].contains(r#""finish_reason":"length","stop_reason":null"#),
            "{}",
            evs[2]
        );
        assert_eq!(
            evs[3],
            r#"{"id":"cmpl-7","object":"text_completion","created":1700000000,"model":"m","choices":[],"usage":{"prompt_tokens":5,"total_tokens":8,"completion_tokens":3}}"#
        );
        assert!(is_done(&evs[4]));
        for e in &evs[..3] {
            let info = classify(e, EndpointKind::Completions).unwrap();
            assert!(info.token_bearing);
        }
        let usage = classify(&evs[3], EndpointKind::Completions).unwrap();
        assert!(!usage.token_bearing);
        assert_eq!(usage.usage.unwrap().completion_tokens, 3);
    }

    #[test]
    fn chat_opens_with_a_role_only_chunk_that_is_no_token() {
        let body = sse_body(&spec(true, 2));
        let evs = events(&body);
        assert_eq!(
            evs[0],
            r#"{"id":"cmpl-7","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#
        );
        assert_eq!(
            evs[1],
            r#"{"id":"cmpl-7","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":" the"},"logprobs":null,"finish_reason":null}]}"#
        );
        let kinds: Vec<bool> = evs[..4]
            .iter()
            .map(|e| classify(e, EndpointKind::Chat).unwrap().token_bearing)
            .collect();
        assert_eq!(kinds, [false, true, true, false]);
        assert!(evs[2].contains(r#""finish_reason":"length""#));
    }

    #[test]
    fn deadlines_are_absolute_from_arrival() {
        let plan = plan_stream(&spec(false, 4), None);
        let ats: Vec<u64> = plan
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Send {
                    at,
                    token_events: 1,
                    ..
                } => Some(at.as_millis() as u64),
                _ => None,
            })
            .collect();
        assert_eq!(ats, [50, 70, 90, 110]);
        assert_eq!(plan.steps.last(), Some(&Step::Finish));
    }

    #[test]
    fn tokens_per_event_groups_tokens_and_times_events_by_their_last_token() {
        let mut s = spec(false, 5);
        s.tokens_per_event = 2;
        let plan = plan_stream(&s, None);
        let ats: Vec<u64> = plan
            .steps
            .iter()
            .filter_map(|st| match st {
                Step::Send {
                    at,
                    token_events: 1,
                    ..
                } => Some(at.as_millis() as u64),
                _ => None,
            })
            .collect();
        // Tokens 0..5 at 50,70,90,110,130; events carry (0,1), (2,3), (4).
        assert_eq!(ats, [70, 110, 130]);
        let evs = events(&plan.body);
        assert!(evs[0].contains(r#""text":" the of""#), "{}", evs[0]);
    }

    #[test]
    fn faults_shape_the_plan() {
        let reset = plan_stream(&spec(false, 10), Some(&Fault::Reset { after_events: 3 }));
        assert_eq!(reset.steps.last(), Some(&Step::Reset));
        assert_eq!(events(&reset.body).len(), 3);

        let trunc = plan_stream(&spec(false, 10), Some(&Fault::Truncate { after_events: 2 }));
        let evs = events(&trunc.body);
        assert_eq!(evs.len(), 2);
        assert!(!evs.iter().any(|e| is_done(e)));

        let bad = plan_stream(&spec(false, 4), Some(&Fault::Malformed { at_event: 1 }));
        let evs = events(&bad.body);
        assert!(classify(&evs[1], EndpointKind::Completions).is_err());
        assert!(classify(&evs[2], EndpointKind::Completions).is_ok());

        let err = plan_stream(
            &spec(false, 4),
            Some(&Fault::StreamError {
                after_events: 2,
                message: "boom \"x\"".into(),
            }),
        );
        let evs = events(&err.body);
        let info = classify(&evs[2], EndpointKind::Completions).unwrap();
        assert!(info.error.unwrap().contains("boom"));
        assert!(is_done(&evs[3]));

        let empty = plan_stream(&spec(true, 4), Some(&Fault::Empty));
        let evs = events(&empty.body);
        assert!(evs
            .iter()
            .filter(|e| !is_done(e))
            .all(|e| !classify(e, EndpointKind::Chat).unwrap().token_bearing));
        assert!(is_done(evs.last().unwrap()));

        let stall = plan_stream(
            &spec(false, 4),
            Some(&Fault::Stall {
                after_events: 1,
                duration: Duration::from_secs(3),
            }),
        );
        assert!(matches!(stall.steps[1], Step::Stall(d) if d == Duration::from_secs(3)));
    }

    #[test]
    fn triggers_match_index_id_and_seeded_probability() {
        let script = Script::new()
            .fault(Trigger::RequestId("servebench-3".into()), Fault::Empty)
            .fault(Trigger::Index(5), Fault::Truncate { after_events: 0 })
            .fault(Trigger::Probability(0.25), Fault::Reset { after_events: 0 })
            .seed(9);
        assert_eq!(
            script.fault_for(0, Some("servebench-3")),
            Some(&Fault::Empty)
        );
        assert_eq!(script.fault_for(5, None).map(Fault::name), Some("truncate"));
        let hits = (1000..11_000)
            .filter(|i| script.fault_for(*i, None).is_some())
            .count();
        assert!((2200..2800).contains(&hits), "{hits} of 10000 at p = 0.25");
        let again = (1000..11_000)
            .filter(|i| script.fault_for(*i, None).is_some())
            .count();
        assert_eq!(hits, again);
    }

    #[test]
    fn error_body_is_vllms_shape() {
        let body = String::from_utf8(error_body(400, "max_tokens is too large")).unwrap();
        assert_eq!(
            body,
            r#"{"error":{"message":"max_tokens is too large","type":"BadRequestError","param":null,"code":400}}"#
        );
        let parsed: servebench_wire::openai::ErrorResponse = serde_json::from_str(&body).unwrap();
        assert_eq!(parsed.error.message, "max_tokens is too large");
    }

    #[test]
    fn log_round_trips_through_jsonl_and_names_its_record() {
        let entry = RequestLog {
            index: 2,
            request_id: Some("servebench-41".into()),
            path: "/v1/completions".into(),
            arrival_ns: 5,
            status: 200,
            events_ns: vec![1, 2, 3],
            outcome: Outcome::Completed,
            ..RequestLog::default()
        };
        let mut buf = Vec::new();
        write_log_jsonl(std::slice::from_ref(&entry), &mut buf).unwrap();
        let back = read_log_jsonl(std::str::from_utf8(&buf).unwrap()).unwrap();
        assert_eq!(back, vec![entry]);
        assert_eq!(back[0].record_id(), Some(41));
    }

    #[test]
    fn percentile_matches_numpy_linear() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 50.0), 2.5);
        assert!((percentile(&v, 99.0) - 3.97).abs() < 1e-12);
        let s = ErrorStats::from_errors_ns(&[-2_000_000, 1_000_000]).unwrap();
        assert_eq!(s.max_ms, 2.0);
        assert_eq!(s.mean_ms, 1.5);
        assert_eq!(s.mean_signed_ms, -0.5);
    }
}
