//! The HTTP/SSE backend client: one prepared request in, one `RequestRecord` out.

use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use servebench_answer::{AnswerChecks, Expected};
use servebench_metrics::{
    CountSource, Failure, FailureKind, ImageUsage, RequestPhases, RequestRecord, StampClock,
};
use servebench_tokenizer::Tokenizer;
use servebench_wire::protocol::{request_id, REQUEST_ID_HEADER};

use crate::clock::RunClock;
use crate::connector::{ConnectionLog, TransportConnector};
use crate::rxstamp;
use crate::stamped::WriteStamp;
use crate::stop::StopSignal;
use crate::stream::StreamState;
use crate::target::{ApiKind, Target};
use crate::transport::Http2Mode;
use crate::LoadgenError;

/// Sends of one request in all: the first, plus at most one resend when the first went out on
/// a reused pooled connection the server had closed without reading it. A benchmark sends each
/// request once; this one exception is counted in the record (`resent`).
const MAX_SENDS: u32 = 2;

/// One request ready to send: the body is built before the clock point `sent` is taken.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub id: u64,
    pub body: Bytes,
    /// Prompt length the dataset intended, under the client's tokenizer.
    pub input_tokens: u64,
    pub max_tokens: Option<u64>,
    /// This request's own answer check (the dataset's `expected`), beside the run's.
    pub expected: Option<Expected>,
    /// The LoRA adapter named as this request's `model`, kept in its record.
    pub lora: Option<String>,
    /// The images the body carries, for the record.
    pub images: Option<ImageUsage>,
}

impl Prepared {
    /// The same request with its own answer check.
    pub fn with_expected(mut self, expected: Option<Expected>) -> Prepared {
        self.expected = expected;
        self
    }
}

/// How the client behaves beyond the target itself.
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    /// `--request-timeout`: the whole request, from send to the end of the stream.
    pub request_timeout: Option<Duration>,
    /// Keep the generated text in each record (`--save-detailed`).
    pub keep_text: bool,
    /// Counts output tokens when the server gives no `usage`.
    pub tokenizer: Option<Tokenizer>,
    /// Checks every completed answer must pass (`--expect-regex`, `--expect-json-schema`).
    pub checks: AnswerChecks,
}

/// The pooled client type every request goes through.
pub type HttpClient = Client<TransportConnector, Full<Bytes>>;

/// A pooled HTTP/1.1 or HTTP/2 client bound to one target. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct BackendClient {
    /// Built on first use: under `--http2 auto` over TLS the server's ALPN choice decides
    /// whether the pool speaks HTTP/2.
    http: tokio::sync::OnceCell<HttpClient>,
    /// Whether the settled pool speaks HTTP/2 (one connection carries every request).
    multiplexed: std::sync::OnceLock<bool>,
    connector: TransportConnector,
    target: Target,
    uri: Uri,
    /// The headers every request carries after its id (authorization, `--header`s), checked and
    /// built once: a request's headers are then copies, not parses of the same strings again.
    headers: Vec<(http::HeaderName, HeaderValue)>,
    options: ClientOptions,
}

impl BackendClient {
    pub fn new(target: Target, options: ClientOptions) -> Result<Self, LoadgenError> {
        let uri = target.endpoint_uri()?;
        let auth = target.auth_header()?;
        let connector = TransportConnector::new(target.transport.clone());
        if uri.scheme_str() == Some("https") {
            connector.tls_config().map_err(LoadgenError::Config)?;
        }
        let headers = auth
            .iter()
            .map(|a| (header::AUTHORIZATION, a.clone()))
            .chain(target.headers.iter().cloned())
            .collect();
        Ok(BackendClient {
            http: tokio::sync::OnceCell::new(),
            multiplexed: std::sync::OnceLock::new(),
            connector,
            target,
            uri,
            headers,
            options,
        })
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    pub(crate) fn options(&self) -> &ClientOptions {
        &self.options
    }

    /// The pooled client, settled on its HTTP version.
    pub async fn http(&self) -> &HttpClient {
        self.http
            .get_or_init(|| async {
                let h2 = match self.target.transport.http2 {
                    Http2Mode::Off => false,
                    Http2Mode::On => true,
                    Http2Mode::Auto if self.uri.scheme_str() == Some("https") => {
                        // Learn the server's choice on one connection, kept for the pool:
                        // a pool that only found out per connection would open one for each
                        // request of the first burst.
                        match self.connector.open(self.uri.clone()).await {
                            Ok(conn) => {
                                let h2 = conn.is_h2();
                                self.connector.park(conn);
                                h2
                            }
                            // The first request meets the same failure and records it.
                            Err(_) => false,
                        }
                    }
                    Http2Mode::Auto => false,
                };
                let _ = self.multiplexed.set(h2);
                build_client(self.connector.clone(), h2)
            })
            .await
    }

    /// Opens up to `n` HTTP/1.1 connections (each carries one request at a time) before the
    /// requests that will use them, so a burst released at once does not pay the connects at
    /// its intended time; returns how many are parked for the pool. Nothing on HTTP/2.
    pub async fn open_ahead(&self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        self.http().await;
        if self.multiplexed.get().copied().unwrap_or(true) {
            return 0;
        }
        let parked = self.connector.parked();
        if parked >= n {
            return parked;
        }
        self.connector.open_ahead(&self.uri, n - parked).await
    }

    /// The connections this client opened, with their connect and handshake times.
    pub fn connections(&self) -> &ConnectionLog {
        self.connector.log()
    }

    /// Build the `Prepared` form of a prompt.
    pub fn prepare(
        &self,
        id: u64,
        prompt: &str,
        input_tokens: u64,
        max_tokens: Option<u64>,
    ) -> Prepared {
        Prepared {
            id,
            body: Bytes::from(self.target.body(prompt, max_tokens)),
            input_tokens,
            max_tokens,
            expected: None,
            lora: None,
            images: None,
        }
    }

    /// Build the `Prepared` form of a dataset's request: its prompt, and its images when it
    /// has any (then `input_tokens` includes their tokens, as the request counts them).
    pub fn prepare_spec(&self, id: u64, spec: &servebench_workload::RequestSpec) -> Prepared {
        if spec.images.is_empty() {
            return self.prepare(id, &spec.prompt, spec.prompt_tokens, spec.max_tokens);
        }
        let urls: Vec<&str> = spec.images.iter().map(|i| i.url.as_str()).collect();
        Prepared {
            id,
            body: Bytes::from(self.target.image_body(&spec.prompt, &urls, spec.max_tokens)),
            input_tokens: spec.prompt_tokens,
            max_tokens: spec.max_tokens,
            expected: None,
            images: spec.image_usage(),
            lora: None,
        }
    }

    /// The request for `body`: the headers every request shares were built with the client;
    /// only the id's is made here. Same headers in the same order as a `Request::builder`
    /// chain of them (the test compares the bytes).
    pub(crate) fn build_request(
        &self,
        id: u64,
        body: Bytes,
    ) -> Result<Request<Full<Bytes>>, http::Error> {
        let mut headers = http::HeaderMap::with_capacity(3 + self.headers.len());
        headers.append(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.append(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        // The request id lets server logs be joined with the records (vLLM sends one too).
        headers.append(REQUEST_ID_HEADER, HeaderValue::try_from(request_id(id))?);
        for (name, value) in &self.headers {
            headers.append(name.clone(), value.clone());
        }
        crate::agents::add_session_header(&mut headers);
        let mut req = Request::new(Full::new(body));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = self.uri.clone();
        *req.headers_mut() = headers;
        Ok(req)
    }

    /// Send one request and measure it. Never fails: every problem becomes a failed record.
    pub async fn execute(
        &self,
        clock: &RunClock,
        p: &Prepared,
        intended: u64,
        released: u64,
        waited_for_slot: bool,
        stop: &StopSignal,
    ) -> RequestRecord {
        if self.target.api.is_pooling() {
            return crate::pooling::execute(
                self,
                clock,
                p,
                intended,
                released,
                waited_for_slot,
                stop,
            )
            .await;
        }
        let mut state;
        let mut outcome;
        let mut sent;
        let mut started;
        let mut attempt = 0;
        let result = loop {
            attempt += 1;
            state = StreamState::new(self.target.api)
                .with_limit(crate::stream::StreamLimit::for_max_tokens(p.max_tokens));
            outcome = Exchange::default();
            let req = match self.build_request(p.id, p.body.clone()) {
                Ok(req) => req,
                Err(e) => {
                    sent = clock.now_ns();
                    started = sent;
                    break Err(Failure {
                        kind: FailureKind::Transport,
                        status: None,
                        message: format!("could not build the request: {e}"),
                    });
                }
            };
            sent = clock.now_ns();
            started = sent;
            let r = self
                .attempt(clock, req, &mut state, &mut outcome, stop)
                .await;
            // A reused keep-alive connection the server had already closed (llama.cpp's server
            // closes after each stream despite advertising keep-alive) fails before any response
            // byte: the server never read the request, so it is sent once more, counted, and
            // `sent` is the time of the send that got through. A fresh connection that fails
            // is a failure of the server, recorded as such.
            if r.is_err() && outcome.stale_connection && attempt < MAX_SENDS {
                continue;
            }
            break r;
        };
        // `sent` is the moment the request started to be written, when the connection saw it;
        // the time before that (waiting for CPU, a connection, the socket) is client-side
        // queueing and stays visible in the record's `released → sent`.
        if let Some(w) = outcome.written {
            if w >= sent {
                sent = w;
            }
        }
        let done = outcome.done.unwrap_or_else(|| clock.now_ns());
        let mut record = self.finish_record(
            p,
            intended,
            released,
            waited_for_slot,
            sent,
            done,
            state,
            result,
        );
        record.resent = attempt - 1;
        record.phases = outcome.phases;
        record.stamp_clock = outcome.stamp_clock();
        record.served_by = outcome.served_by.take();
        // vLLM's `st`: taken before the pool hands out a connection, so a wait for one (or for
        // the CPU) counts in vLLM's TTFT and E2EL; servebench's own `sent` excludes it.
        record.started = Some(started);
        record
    }

    /// One exchange under the request timeout and the run's cancellation.
    async fn attempt(
        &self,
        clock: &RunClock,
        req: Request<Full<Bytes>>,
        state: &mut StreamState,
        outcome: &mut Exchange,
        stop: &StopSignal,
    ) -> Result<(), Failure> {
        let fut = self.exchange(clock, req, state, outcome);
        let timed = async {
            match self.options.request_timeout {
                Some(d) => match tokio::time::timeout(d, fut).await {
                    Ok(r) => r,
                    Err(_) => Err(Failure {
                        kind: FailureKind::Timeout,
                        status: None,
                        message: format!("no complete response within {:.1} s", d.as_secs_f64()),
                    }),
                },
                None => fut.await,
            }
        };
        tokio::select! {
            biased;
            r = timed => r,
            _ = stop.cancelled() => Err(Failure {
                kind: FailureKind::Cancelled,
                status: None,
                message: "interrupted: still in flight when the grace period ended".into(),
            }),
        }
    }

    /// The request/response exchange proper; fills `state` as bytes arrive.
    async fn exchange(
        &self,
        clock: &RunClock,
        req: Request<Full<Bytes>>,
        state: &mut StreamState,
        outcome: &mut Exchange,
    ) -> Result<(), Failure> {
        let resp = self.http().await.request(req).await.map_err(|e| {
            outcome.stale_connection =
                !e.is_connect() && closed_before_response(&e) && reused_and_unanswered(&e);
            let kind = if e.is_connect() {
                FailureKind::Connect
            } else {
                FailureKind::Transport
            };
            // `--http2 on` speaks HTTP/2 at once (prior knowledge); an HTTP/1 server answers
            // its preface with an error page and closes, which hyper reports as a broken pipe
            // or a reset: say what it means.
            let mut message = error_chain(&e);
            if self.target.transport.http2 == Http2Mode::On && !e.is_connect() {
                message.push_str(
                    " (with --http2 on the client speaks HTTP/2 without negotiating it: a server that speaks only HTTP/1.1 closes such a connection; use --http2 auto or off)",
                );
            }
            Failure {
                kind,
                status: None,
                message,
            }
        })?;
        // The answer's headers are parsed: one clock reading per request.
        let headers_at = clock.now_ns();
        let conn = resp.extensions().get::<WriteStamp>().cloned();
        let (first_write, conn_phases) = conn.as_ref().map(WriteStamp::phases).unzip();
        if let Some(t) = first_write.flatten() {
            outcome.written = Some(clock.ns_at(t));
        } else if let Some(ready) = resp.extensions().get::<crate::connector::ConnReady>() {
            // HTTP/2: the request went out once its connection was ready (or at once, on a
            // connection already open: `sent` is then later and stays).
            outcome.written = Some(clock.ns_at(ready.0.into()));
        }
        outcome.phases = Some(request_phases(clock, conn_phases.as_ref(), headers_at));
        let status = resp.status();
        outcome.served_by = crate::served_by::from_headers(resp.headers());
        let content_type = resp
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let mut body = resp.into_body();
        // The first bytes of the body, kept only until an event parses: a server that did not
        // stream at all is then named as such, with what it sent.
        let mut head: Vec<u8> = Vec::new();
        if !status.is_success() {
            let excerpt = read_excerpt(&mut body).await;
            outcome.done = Some(clock.now_ns());
            return Err(http_failure(status, &excerpt));
        }
        loop {
            match body.frame().await {
                None => break,
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        let t = outcome.arrival(clock, conn.as_ref(), data);
                        if head.len() < NON_SSE_EXCERPT {
                            let take = data.len().min(NON_SSE_EXCERPT - head.len());
                            head.extend_from_slice(&data[..take]);
                        }
                        state.feed(t, data);
                        if state.acc.saw_done {
                            outcome.done = Some(t);
                        }
                        // A server that never stops would grow this request without end:
                        // dropping the body closes the connection.
                        if let Some(f) = state.over_limit() {
                            outcome.done = Some(t);
                            return Err(f);
                        }
                    }
                }
                Some(Err(e)) => {
                    outcome.done = Some(clock.now_ns());
                    return Err(Failure {
                        kind: FailureKind::Truncated,
                        status: None,
                        message: format!("stream broke off: {}", error_chain(&e)),
                    });
                }
            }
        }
        outcome.done.get_or_insert_with(|| clock.now_ns());
        let leftover = state.finish();
        let no_event = !state.acc.saw_done
            && state.acc.events.is_empty()
            && state.acc.bare_events.is_empty()
            && state.acc.failure.is_none();
        let event_stream = content_type
            .as_deref()
            .is_some_and(|c| c.to_ascii_lowercase().starts_with("text/event-stream"));
        if no_event && !event_stream {
            let shown =
                servebench_wire::printable::printable(&String::from_utf8_lossy(&head)).into_owned();
            return Err(Failure {
                kind: FailureKind::Malformed,
                status: None,
                message: format!(
                    "the server answered {status} with {}, not an event stream: it did not stream (is \"stream\": true ignored at this endpoint?); body starts: {shown}",
                    content_type
                        .as_deref()
                        .map_or_else(|| "no Content-Type".to_owned(), |c| format!("Content-Type {c}"))
                ),
            });
        }
        if !state.acc.saw_done && state.acc.finish_reason.is_none() {
            let detail = if leftover {
                " (an event was cut off)"
            } else {
                ""
            };
            return Err(Failure {
                kind: FailureKind::Truncated,
                status: None,
                message: format!("the stream ended without [DONE] or a finish_reason{detail}"),
            });
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn finish_record(
        &self,
        p: &Prepared,
        intended: u64,
        released: u64,
        waited_for_slot: bool,
        sent: u64,
        done: u64,
        state: StreamState,
        result: Result<(), Failure>,
    ) -> RequestRecord {
        let mut acc = state.acc;
        let mut failure = result.err().or(acc.failure.take());
        if failure.is_none() && acc.first_token.is_none() {
            failure = Some(Failure {
                kind: FailureKind::EmptyOutput,
                status: None,
                message: "the stream finished without any output token".into(),
            });
        }
        let (output_tokens, output_source) = match acc.completion_tokens {
            Some(n) => (n, CountSource::Usage),
            None => match &self.options.tokenizer {
                Some(tok) if !acc.text.is_empty() => {
                    (tok.count(&acc.text) as u64, CountSource::Tokenizer)
                }
                _ => (acc.events.len() as u64, CountSource::Events),
            },
        };
        // Only an answer that arrived whole is checked: a failed transfer is already a
        // failure of its own kind.
        let answer_checked = failure.is_none() && self.options.checks.applies(p.expected.as_ref());
        if answer_checked {
            failure = self.options.checks.judge(&acc.text, p.expected.as_ref());
        }
        let (input_tokens, input_source) = match acc.prompt_tokens {
            Some(n) => (n, CountSource::Usage),
            None => (p.input_tokens, CountSource::Dataset),
        };
        let output_split = acc.output_split(output_tokens);
        RequestRecord {
            phases: None,
            images: p.images,
            id: p.id,
            intended,
            released,
            sent,
            started: None,
            first_token: acc.first_token,
            end: acc.end,
            done: Some(done),
            waited_for_slot,
            events: acc.events,
            bare_events: acc.bare_events,
            input_tokens,
            input_source,
            output_tokens,
            output_source,
            intended_input_tokens: p.input_tokens,
            max_tokens: p.max_tokens,
            cached_tokens: acc.cached_tokens,
            finish_reason: acc.finish_reason,
            text: if self.options.keep_text {
                Some(acc.text)
            } else {
                None
            },
            failure,
            resent: 0,
            answer_checked,
            output_split,
            session_id: None,
            turn: None,
            stamp_clock: None,
            lora: p.lora.clone(),
            served_by: None,
        }
    }
}

#[derive(Debug, Default)]
struct Exchange {
    done: Option<u64>,
    /// The request failed on a connection the server had closed, before any response.
    stale_connection: bool,
    /// When the request's first byte went to the socket (from the connection's write stamp).
    written: Option<u64>,
    /// Body frames stamped with the kernel's receive time, and with the read time.
    kernel_stamped: u64,
    user_stamped: u64,
    /// The latest frame's stamp: stamps never go back (a kernel stamp after a user-time one
    /// could be earlier).
    last: u64,
    /// A simulated fleet's `x-servebench-pool` / `x-servebench-replica` headers.
    served_by: Option<servebench_metrics::ServedBy>,
    /// Where the request's time went on its connection.
    phases: Option<RequestPhases>,
}

/// A request's phases from its connection's stamps (`None`: a multiplexed HTTP/2 stream,
/// which has only its headers' time). Connect and handshake belong to the connection's first
/// request; later ones reused it.
fn request_phases(
    clock: &RunClock,
    conn: Option<&crate::stamped::ConnPhases>,
    headers: u64,
) -> RequestPhases {
    let Some(c) = conn else {
        return RequestPhases {
            headers,
            ..RequestPhases::default()
        };
    };
    let first = c.requests <= 1;
    let ns = |d: Option<Duration>| {
        d.filter(|_| first)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    };
    RequestPhases {
        connect_ns: ns(c.connect),
        tls_ns: ns(c.handshake),
        written: c.last_write.map_or(0, |t| clock.ns_at(t)),
        first_byte: c.first_read.map_or(0, |t| clock.ns_at(t)),
        headers,
        reused: Some(!first),
    }
}

impl Exchange {
    /// When the bytes of a body frame arrived (ns on the run clock): the kernel's receive time
    /// of the read that delivered them, else now.
    #[inline]
    fn arrival(&mut self, clock: &RunClock, conn: Option<&WriteStamp>, frame: &[u8]) -> u64 {
        // The read's stamp was converted to the monotonic clock when it was read: no clock
        // is read here unless the frame has no kernel stamp.
        let kernel = conn
            .and_then(|c| c.rx_at(frame))
            .and_then(|at| rxstamp::instant_to_run(clock, at, self.written.unwrap_or(0)));
        let t = match kernel {
            Some(t) => {
                self.kernel_stamped += 1;
                t
            }
            None => {
                self.user_stamped += 1;
                clock.now_ns()
            }
        };
        self.last = self.last.max(t);
        self.last
    }

    fn stamp_clock(&self) -> Option<StampClock> {
        match (self.kernel_stamped, self.user_stamped) {
            (0, 0) => None,
            (_, 0) => Some(StampClock::KernelRx),
            (0, _) => Some(StampClock::User),
            _ => Some(StampClock::Mixed),
        }
    }
}

/// Did the request go out on a reused connection and get no byte of its answer (from the
/// connection's own stamp, which the client error carries)?
pub(crate) fn reused_and_unanswered(e: &hyper_util::client::legacy::Error) -> bool {
    let Some(info) = e.connect_info() else {
        return false;
    };
    let mut extras = http::Extensions::new();
    info.get_extras(&mut extras);
    extras
        .get::<WriteStamp>()
        .is_some_and(WriteStamp::reused_and_unanswered)
}

/// Did the connection close or reset before the server answered (a stale pooled connection)?
pub(crate) fn closed_before_response(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(inner) = src {
        if let Some(h) = inner.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() || h.is_canceled() || h.is_closed() {
                return true;
            }
        }
        if let Some(io) = inner.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
            if matches!(io.kind(), ConnectionReset | BrokenPipe | ConnectionAborted) {
                return true;
            }
        }
        src = inner.source();
    }
    false
}

/// A plain HTTP/1.1 client (the default transport).
pub fn http_client() -> HttpClient {
    build_client(TransportConnector::new(Default::default()), false)
}

/// A client for a target's transport: HTTP/2 only with `--http2 on`, else HTTP/1.1 (and
/// HTTP/2 on a TLS connection whose ALPN chose it).
pub fn http_client_for(transport: &crate::Transport) -> HttpClient {
    build_client(
        TransportConnector::new(transport.clone()),
        transport.http2 == Http2Mode::On,
    )
}

/// The shared pooled client: keep-alive connections, Nagle off, no idle cap so a run of
/// thousands of concurrent streams reuses its connections; on HTTP/2 one connection carries
/// them all as streams.
fn build_client(connector: TransportConnector, http2_only: bool) -> HttpClient {
    Client::builder(TokioExecutor::new())
        // hyper would resend a request that failed on a reused connection as often as it
        // likes, unseen; the client decides itself, once at most, and records it.
        .retry_canceled_requests(false)
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(usize::MAX)
        .http2_only(http2_only)
        .build(connector)
}

/// How much of a body that is not an event stream its failure message quotes.
const NON_SSE_EXCERPT: usize = 200;

pub(crate) fn http_failure(status: StatusCode, body: &str) -> Failure {
    // Prefer the server's own error message when the body is an OpenAI-style error object.
    let message = servebench_wire::openai::error_message(body)
        .unwrap_or_else(|| body.chars().take(300).collect());
    Failure {
        kind: FailureKind::HttpStatus,
        status: Some(status.as_u16()),
        message: format!("HTTP {status}: {message}"),
    }
}

pub(crate) async fn read_excerpt(body: &mut hyper::body::Incoming) -> String {
    const LIMIT: usize = 16 * 1024;
    let mut buf = Vec::new();
    let read = async {
        while let Some(Ok(frame)) = body.frame().await {
            if let Some(d) = frame.data_ref() {
                buf.extend_from_slice(d);
                if buf.len() >= LIMIT {
                    break;
                }
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), read).await;
    String::from_utf8_lossy(&buf[..buf.len().min(LIMIT)])
        .trim()
        .to_owned()
}

pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        let m = inner.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        src = inner.source();
    }
    s
}

/// The API an endpoint path speaks. Used to check `--backend` against `--endpoint`.
pub fn api_for_endpoint(endpoint: &str) -> ApiKind {
    if endpoint.contains("embeddings") {
        ApiKind::Embeddings
    } else if endpoint.ends_with("rerank") {
        ApiKind::Rerank
    } else if endpoint.contains("chat") {
        ApiKind::Chat
    } else if endpoint.trim_end_matches('/').ends_with("responses") {
        ApiKind::Responses
    } else {
        ApiKind::Completions
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// How a request was built at dispatch before the shared headers were built once.
    fn by_builder(c: &BackendClient, id: u64, body: Bytes) -> Request<Full<Bytes>> {
        let mut b = Request::builder()
            .method(Method::POST)
            .uri(c.uri.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "text/event-stream")
            .header(REQUEST_ID_HEADER, request_id(id));
        if let Some(auth) = c.target.auth_header().unwrap() {
            b = b.header(header::AUTHORIZATION, auth);
        }
        for (k, v) in &c.target.headers {
            b = b.header(k.clone(), v.clone());
        }
        b.body(Full::new(body)).unwrap()
    }

    fn client_for(base_url: String) -> BackendClient {
        let target = Target {
            base_url,
            endpoint: "/v1/completions".into(),
            api: ApiKind::Completions,
            model: "m".into(),
            headers: vec![
                (
                    http::HeaderName::from_static("x-tenant"),
                    HeaderValue::from_static("a"),
                ),
                (header::ACCEPT, HeaderValue::from_static("*/*")),
            ],
            api_key: Some("sk-test".into()),
            extra_body: serde_json::Map::new(),
            ignore_eos: true,
            transport: crate::Transport::default(),
        };
        BackendClient::new(target, ClientOptions::default()).unwrap()
    }

    /// The bytes a request puts on the wire, as a server reads them.
    async fn wire_bytes(req: Request<Full<Bytes>>, listener: &tokio::net::TcpListener) -> Vec<u8> {
        let client = http_client();
        let send = tokio::spawn(async move {
            let _ = client.request(req).await;
        });
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !got.ends_with(b"{\"p\":1}") {
            let n = sock.read(&mut buf).await.unwrap();
            assert!(
                n > 0,
                "the request ended early: {}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&buf[..n]);
        }
        sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
        send.await.unwrap();
        got
    }

    #[tokio::test]
    async fn requests_built_from_the_shared_headers_are_the_same_bytes_as_before() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = client_for(format!("http://{}", listener.local_addr().unwrap()));
        let body = Bytes::from_static(b"{\"p\":1}");
        let before = wire_bytes(by_builder(&c, 42, body.clone()), &listener).await;
        let now = wire_bytes(c.build_request(42, body).unwrap(), &listener).await;
        assert_eq!(
            String::from_utf8_lossy(&now),
            String::from_utf8_lossy(&before)
        );
        let text = String::from_utf8_lossy(&now).to_lowercase();
        assert!(text.contains("authorization: bearer sk-test"), "{text}");
        assert!(text.contains("x-tenant: a"), "{text}");
    }

    #[tokio::test]
    async fn connections_opened_ahead_are_parked_and_handed_out_before_new_ones() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = client_for(format!("http://{}", listener.local_addr().unwrap()));
        let accepted = tokio::spawn(async move {
            let mut socks = Vec::new();
            for _ in 0..5 {
                socks.push(listener.accept().await.unwrap().0);
            }
            socks
        });
        assert_eq!(c.open_ahead(5).await, 5);
        let socks = accepted.await.unwrap();
        assert_eq!(socks.len(), 5);
        assert_eq!(c.connections().snapshot().len(), 5);
        // Asking again for as many opens none.
        assert_eq!(c.open_ahead(5).await, 5);
        assert_eq!(c.connections().snapshot().len(), 5);
        // The pool takes the parked ones first: no connect happens.
        for _ in 0..5 {
            let conn = c.connector.open(c.uri.clone()).await.unwrap();
            assert!(!conn.is_h2());
        }
        assert_eq!(c.connector.parked(), 0);
        assert_eq!(c.connections().snapshot().len(), 5);
    }
}
