//! The HTTP/1.1 side: accepting connections, reading requests, answering them, and carrying
//! out a planned stream on the socket.

use std::fmt::Write as _;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use servebench_wire::openai::{
    ChatCompletionRequest, CompletionRequest, ErrorResponse, MessageContent, ModelCard, ModelList,
    Prompt,
};
use servebench_wire::protocol::REQUEST_ID_HEADER;

use crate::log::{LogStore, Outcome, PendingLog, RequestLog};
use crate::plan::{plan_stream, Plan, Step, StreamSpec};
use crate::script::{ChunkShape, Fault, OutputLength, Script};

/// Largest request head accepted (request line and headers).
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Largest request body accepted (a very long prompt is a few MB).
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
/// Most response bytes gathered into one write when several events are due.
const MAX_WRITE_BYTES: usize = 64 * 1024;

#[derive(Debug)]
struct Shared {
    script: Script,
    started: Instant,
    /// `started` on the wall clock (Unix ns).
    started_wall_ns: u64,
    /// Unix seconds at the start, the `created` field of every chunk.
    created: u64,
    next_index: AtomicU64,
    log: Arc<LogStore>,
    /// Set by [`ScriptedServer::close_listener`]: answers from then on close their connection,
    /// so a client cannot go on reusing it.
    unlistened: AtomicBool,
}

/// A running scripted server. Dropping it stops the server (in the background);
/// [`ScriptedServer::shutdown`] stops it and waits.
#[derive(Debug)]
pub struct ScriptedServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    /// True once the listening socket should be closed (connections carry on).
    unlisten: watch::Sender<bool>,
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
            started_wall_ns: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
                .unwrap_or(0),
            created,
            next_index: AtomicU64::new(0),
            log: Arc::new(LogStore {
                entries: Mutex::new(Vec::new()),
                count,
            }),
            unlistened: AtomicBool::new(false),
        });
        let (stop, stop_rx) = watch::channel(false);
        let (unlisten, unlisten_rx) = watch::channel(false);
        let task = tokio::spawn(accept_loop(
            listener,
            Arc::clone(&shared),
            stop_rx,
            unlisten_rx,
        ));
        Ok(ScriptedServer {
            addr,
            shared,
            stop,
            unlisten,
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

    /// Closes the listening socket: later connects are refused, as by a server that lost its
    /// listener, while the responses in progress go on and then close their connections.
    /// Idle connections are closed at once; a request already being read when the close
    /// came is answered with `connection: close`.
    pub fn close_listener(&self) {
        self.shared.unlistened.store(true, Ordering::Relaxed);
        let _ = self.unlisten.send(true);
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

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    mut unlisten: watch::Receiver<bool>,
) {
    let mut conns = JoinSet::new();
    let mut listener = Some(listener);
    loop {
        while conns.try_join_next().is_some() {}
        let Some(l) = listener.as_ref() else {
            stopped(&mut stop).await;
            break;
        };
        tokio::select! {
            biased;
            _ = stopped(&mut stop) => break,
            _ = stopped(&mut unlisten) => {
                listener = None;
            }
            accepted = l.accept() => match accepted {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    conns.spawn(serve_connection(
                        stream,
                        Arc::clone(&shared),
                        stop.clone(),
                        unlisten.clone(),
                    ));
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
    mut unlisten: watch::Receiver<bool>,
) {
    let work = async {
        let mut buf = Vec::with_capacity(8 * 1024);
        loop {
            if buf.is_empty() {
                // A server going away closes its idle connections too: otherwise one the
                // client's pool opened before the close (and never used) would carry a
                // request after it. Biased: when the close and a request race, the close wins
                // and the client sees an unanswered connection, as from a real server.
                // `peek`, not `readable`: readiness can be reported before any byte is there.
                let mut first = [0u8; 1];
                tokio::select! {
                    biased;
                    _ = stopped(&mut unlisten) => return,
                    peeked = stream.peek(&mut first) => {
                        if !matches!(peeked, Ok(n) if n > 0) {
                            return;
                        }
                    }
                }
            }
            let req = match read_request(&mut stream, &mut buf).await {
                Ok(Some(mut req)) => {
                    req.close |= shared.unlistened.load(Ordering::Relaxed);
                    req
                }
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
                // A server without its listener is going away: it takes no further request
                // on a kept-alive connection either.
                Ok(Next::KeepAlive) if !shared.unlistened.load(Ordering::Relaxed) => {}
                Ok(_) | Err(_) => return,
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
        } else if name.eq_ignore_ascii_case(REQUEST_ID_HEADER) {
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

/// A generation request, as wire reads the body of its endpoint.
enum GenerationRequest {
    Completions(CompletionRequest),
    Chat(ChatCompletionRequest),
}

impl GenerationRequest {
    fn parse(path: &str, body: &[u8]) -> serde_json::Result<Self> {
        Ok(if path.contains("chat") {
            GenerationRequest::Chat(serde_json::from_slice(body)?)
        } else {
            GenerationRequest::Completions(serde_json::from_slice(body)?)
        })
    }

    fn stream(&self) -> bool {
        match self {
            GenerationRequest::Completions(r) => r.stream,
            GenerationRequest::Chat(r) => r.stream,
        }
        .unwrap_or(false)
    }

    fn include_usage(&self) -> bool {
        match self {
            GenerationRequest::Completions(r) => r.stream_options,
            GenerationRequest::Chat(r) => r.stream_options,
        }
        .and_then(|o| o.include_usage)
        .unwrap_or(false)
    }

    /// `max_completion_tokens` or `max_tokens` (a negative cap counts as none).
    fn max_tokens(&self) -> Option<u64> {
        match self {
            GenerationRequest::Completions(r) => r.max_tokens,
            GenerationRequest::Chat(r) => r.effective_max_tokens(),
        }
        .and_then(|n| u64::try_from(n).ok())
    }

    /// Prompt length for `usage`: whitespace-separated words of the prompt text (an
    /// approximation; the server has no tokenizer).
    fn prompt_words(&self) -> u64 {
        fn words(s: &str) -> u64 {
            s.split_whitespace().count() as u64
        }
        match self {
            GenerationRequest::Completions(r) => match &r.prompt {
                Some(Prompt::Text(t)) => words(t),
                Some(Prompt::TextBatch(v)) => v.iter().map(|t| words(t)).sum(),
                _ => 0,
            },
            GenerationRequest::Chat(r) => r
                .messages
                .iter()
                .map(|m| match &m.content {
                    Some(MessageContent::Text(t)) => words(t),
                    Some(MessageContent::Parts(parts)) => parts
                        .iter()
                        .filter_map(|p| p.text.as_deref())
                        .map(words)
                        .sum(),
                    None => 0,
                })
                .sum(),
        }
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
        ("GET", _) if req.path == "/metrics" && shared.script.metrics.is_some() => {
            let (before, after) = match &shared.script.metrics {
                Some((b, a)) => (b.as_str(), a.as_str()),
                None => ("", ""),
            };
            let body = if shared.next_index.load(Ordering::SeqCst) == 0 {
                before
            } else {
                after
            };
            write_response(
                stream,
                200,
                "text/plain; version=0.0.4",
                None,
                body.as_bytes(),
                next == Next::Close,
            )
            .await?;
            Ok(next)
        }
        ("GET", _) if req.path == "/v1/models" => {
            let body = ModelList {
                object: "list".to_owned(),
                data: vec![ModelCard {
                    id: shared.script.model.clone(),
                    object: "model".to_owned(),
                    created: shared.created,
                    owned_by: "vllm".to_owned(),
                    root: Some(
                        shared
                            .script
                            .model_root
                            .clone()
                            .unwrap_or_else(|| shared.script.model.clone()),
                    ),
                    parent: None,
                    max_model_len: Some(131_072),
                }],
            };
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
            arrival_wall_ns: Some(
                shared.started_wall_ns + ns(req.arrival.saturating_duration_since(shared.started)),
            ),
            ..RequestLog::default()
        },
        store: Arc::clone(&shared.log),
    };
    let close = next == Next::Close;
    let rid = req.request_id.as_deref();

    let parsed = match GenerationRequest::parse(&req.path, &req.body) {
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
    if !parsed.stream() {
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
    let max_tokens = parsed.max_tokens();
    pending.entry.max_tokens = max_tokens;
    let fault = script.fault_for(index, rid).cloned();
    pending.entry.fault = fault.as_ref().map(|f| f.name().to_owned());
    if let Some(Fault::BareStatus { status }) = &fault {
        return finish_plain(
            stream,
            &mut pending,
            req.arrival,
            *status,
            rid,
            b"",
            close,
            next,
        )
        .await;
    }
    if fault == Some(Fault::HeadersNeverFinish) {
        pending.entry.status = 200;
        stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nx-partial: ")
            .await?;
        // The connection ends when the client gives up or the server stops.
        std::future::pending::<()>().await;
    }
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
        include_usage: parsed.include_usage(),
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
    ErrorResponse::for_status(status, message, None).to_json()
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
        out.extend_from_slice(REQUEST_ID_HEADER.as_bytes());
        out.extend_from_slice(b": ");
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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

    #[tokio::test]
    async fn closing_the_listener_closes_idle_connections_and_refuses_new_ones() {
        use tokio::io::AsyncReadExt;
        let server = ScriptedServer::start(Script::new().tokens(1))
            .await
            .unwrap();
        let mut idle = TcpStream::connect(server.addr()).await.unwrap();
        // Let the accept loop take the connection before the close.
        tokio::time::sleep(Duration::from_millis(50)).await;
        server.close_listener();
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(10), idle.read(&mut byte))
            .await
            .expect("the idle connection is closed, not left open");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(TcpStream::connect(server.addr()).await.is_err());
        assert!(server.shutdown().await.is_empty());
    }
}
