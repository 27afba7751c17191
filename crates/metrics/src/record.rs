//! The per-request record: every clock point of docs/metrics.md, kept as offsets from one
//! monotonic run start, in nanoseconds.

use serde::{Deserialize, Serialize};

/// Where a token count came from (docs/metrics.md "Token counts, and where they came from").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CountSource {
    /// The server's `usage` object.
    Usage,
    /// The tokenizer's count of the text (generated text, or the synthesised prompt).
    Tokenizer,
    /// The dataset's intended length.
    Dataset,
    /// The number of token-bearing events (no usage, no tokenizer).
    Events,
}

impl CountSource {
    /// The serialized name (`usage`, `tokenizer`, `dataset`, `events`).
    pub fn as_str(self) -> &'static str {
        match self {
            CountSource::Usage => "usage",
            CountSource::Tokenizer => "tokenizer",
            CountSource::Dataset => "dataset",
            CountSource::Events => "events",
        }
    }
}

/// Why a request failed. Every failure is data: a record with one of these kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The server answered with a non-2xx status.
    HttpStatus,
    /// The connection could not be established.
    Connect,
    /// The connection was reset or closed before the stream ended (no `[DONE]`).
    Truncated,
    /// A chunk could not be parsed as the expected JSON.
    Malformed,
    /// `--request-timeout` elapsed.
    Timeout,
    /// The stream ended normally but carried no output token.
    EmptyOutput,
    /// The server sent an error object inside the stream.
    StreamError,
    /// Ctrl-C grace period ran out while the request was in flight.
    Cancelled,
    /// Anything else on the transport (I/O errors other than the above).
    Transport,
    /// The response completed, but its text failed an answer check (`--expect-regex`,
    /// `--expect-json-schema`, or the dataset's per-request `expected`).
    InvalidOutput,
    /// The stream went on far past the request's `max_tokens` (events or bytes): a server
    /// fault. Reading stopped there, so client memory stays bounded.
    Overlong,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::HttpStatus => "http_status",
            FailureKind::Connect => "connect",
            FailureKind::Truncated => "truncated",
            FailureKind::Malformed => "malformed",
            FailureKind::Timeout => "timeout",
            FailureKind::EmptyOutput => "empty_output",
            FailureKind::StreamError => "stream_error",
            FailureKind::Cancelled => "cancelled",
            FailureKind::Transport => "transport",
            FailureKind::InvalidOutput => "invalid_output",
            FailureKind::Overlong => "overlong",
        }
    }
}

/// A failed request's cause.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    pub kind: FailureKind,
    /// HTTP status when the server answered with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// A short, human readable message (a body excerpt, the I/O error); never holds secrets.
    pub message: String,
}

/// One token-bearing SSE event, as received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenEvent {
    /// Receipt time, ns from run start.
    pub t: u64,
    /// Characters of output text (content + reasoning) the event carried.
    pub chars: u32,
}

/// Everything measured about one request. Latencies are derived from these fields, never
/// kept on the side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Position of the request in the run's request list (warm-ups are not recorded).
    pub id: u64,
    /// When the arrival process scheduled it (ns from run start).
    pub intended: u64,
    /// When the dispatcher let it go (after any concurrency cap).
    pub released: u64,
    /// When the request's first byte was written to the connection: servebench's send point.
    pub sent: u64,
    /// When the client began the request, before a pooled connection was taken and before
    /// anything was written (vLLM's `st`, which its vLLM-format figures start from). `None`
    /// in records written before it was kept: `sent` stands in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<u64>,
    /// First token-bearing event.
    #[serde(default)]
    pub first_token: Option<u64>,
    /// Last token-bearing event (vLLM parity: E2EL ends here).
    #[serde(default)]
    pub end: Option<u64>,
    /// `[DONE]`, stream close, or the failure time.
    #[serde(default)]
    pub done: Option<u64>,
    /// Did this request wait for a concurrency slot (so its `released − intended` is not
    /// dispatch lag)?
    #[serde(default)]
    pub waited_for_slot: bool,
    /// Every token-bearing event.
    #[serde(default)]
    pub events: Vec<TokenEvent>,
    /// Receipt times of the events that had a non-empty `choices` list but carried no token
    /// (a chat stream's role-only opening chunk, a closing chunk with only a `finish_reason`).
    /// They are no token events for servebench, but vLLM's client counts them as such
    /// (docs/metrics.md "What counts as a token-bearing event").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bare_events: Vec<u64>,
    pub input_tokens: u64,
    pub input_source: CountSource,
    pub output_tokens: u64,
    pub output_source: CountSource,
    /// Prompt length the dataset intended (for the >1 % disagreement warning).
    pub intended_input_tokens: u64,
    /// `max_tokens` asked for, if any.
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// `usage.prompt_tokens_details.cached_tokens` when the server reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Generated text, kept only when the run asks for it (`--save-detailed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// `None` on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// Times the request was sent again because its first send went out on a reused
    /// connection the server had closed without reading it (at most once; absent when 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub resent: u32,
    /// The answer's text went through at least one answer check (passed, or failed with
    /// `invalid_output`); absent when the request had none or never completed.
    #[serde(default, skip_serializing_if = "is_false")]
    pub answer_checked: bool,
    /// How the output divided into reasoning and answer; absent for a response of plain
    /// content, where every token is answer and the first answer token is the first token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_split: Option<OutputSplit>,
    /// The conversation this request belongs to (`--multi-turn`); absent for single requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Position of this request in its conversation, from 0 (`--multi-turn`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// Which clock stamped the arrival of this request's response bytes (`first_token`, the
    /// token events, `end`); absent where no socket was read (virtual-time runs) and in files
    /// written before the field existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stamp_clock: Option<StampClock>,
    /// The LoRA adapter the request named as its `model` (`--lora-modules`); absent when it
    /// named the base model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<String>,
    /// Which pool and replica of a simulated fleet served the request (the simulator's
    /// `x-servebench-pool` / `x-servebench-replica` response headers, or set directly in
    /// virtual time); absent against a single server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_by: Option<ServedBy>,

    /// The images the request carried and the prompt tokens counted for them (part of
    /// `intended_input_tokens`); absent for a text-only request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<ImageUsage>,

    /// Where the request's time went on its connection before the answer: connect and TLS
    /// handshake when it opened one, its last byte written, the answer's first byte and
    /// headers, and whether the connection was reused. Absent where no socket was read
    /// (virtual time) and in older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phases: Option<RequestPhases>,
}

/// A request's clock points on its connection (docs/metrics.md "Where a request's time
/// went"): instants in ns from the run start like the record's others, durations in ns;
/// 0 where not measured. A handful of integers per request, filled from the stamps the
/// connection already takes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestPhases {
    /// TCP connect of the connection, when this request was its first (ns, a duration).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub connect_ns: u64,
    /// TLS handshake of that connection (ns, a duration); 0 on plain HTTP or a reused one.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub tls_ns: u64,
    /// The request's last byte handed to the socket (its first is the record's `sent`).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub written: u64,
    /// The answer's first byte received (the kernel's receive time where stamped).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub first_byte: u64,
    /// The answer's status line and headers parsed by the client.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub headers: u64,
    /// The connection had carried an earlier request; `None` on HTTP/2, whose streams
    /// share one connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reused: Option<bool>,
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

impl RequestRecord {
    /// A copy with no token events (`events` empty): for a view of the record that reads the
    /// events from the record itself. Every field is named, so a new one cannot be left out.
    pub fn clone_without_events(&self) -> RequestRecord {
        RequestRecord {
            id: self.id,
            intended: self.intended,
            released: self.released,
            sent: self.sent,
            started: self.started,
            first_token: self.first_token,
            end: self.end,
            done: self.done,
            waited_for_slot: self.waited_for_slot,
            events: Vec::new(),
            bare_events: self.bare_events.clone(),
            input_tokens: self.input_tokens,
            input_source: self.input_source,
            output_tokens: self.output_tokens,
            output_source: self.output_source,
            intended_input_tokens: self.intended_input_tokens,
            max_tokens: self.max_tokens,
            cached_tokens: self.cached_tokens,
            finish_reason: self.finish_reason.clone(),
            text: self.text.clone(),
            failure: self.failure.clone(),
            resent: self.resent,
            answer_checked: self.answer_checked,
            output_split: self.output_split,
            session_id: self.session_id.clone(),
            turn: self.turn,
            stamp_clock: self.stamp_clock,
            lora: self.lora.clone(),
            served_by: self.served_by.clone(),
            images: self.images,
            phases: self.phases,
        }
    }
}

/// Where in a fleet a request was served.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServedBy {
    /// The pool's name.
    pub pool: String,
    /// The replica's label within the pool (`0`, `1`, … or `p0`/`d1` in a prefill/decode pool).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub replica: String,
}

/// Images of one request (`random-mm`, datasets with images).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageUsage {
    /// Images sent.
    pub count: u32,
    /// Prompt tokens counted for them from the model's vision encoder.
    pub tokens: u64,
}

/// A reasoning or tool-calling response's output, split (docs/metrics.md "Reasoning and
/// tool calls"). Answer tokens are `output_tokens − reasoning_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputSplit {
    /// First event carrying answer output (`content` or `tool_calls`), ns from run start;
    /// `None` when the response stopped before its answer began (all of it was reasoning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_answer: Option<u64>,
    /// Output tokens spent reasoning (`reasoning_content` / `reasoning` deltas).
    pub reasoning_tokens: u64,
    /// `usage` when the server reported `completion_tokens_details.reasoning_tokens`, else
    /// `events` (the output count shared out in proportion to reasoning events).
    pub reasoning_source: CountSource,
    /// Did the response stream tool calls?
    #[serde(default, skip_serializing_if = "is_false")]
    pub tool_calls: bool,
}

/// The clock behind a record's arrival stamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StampClock {
    /// Every stamp is the kernel's receive time of the bytes (`SO_TIMESTAMPNS`), on the run
    /// clock: independent of when the client's task got to read them.
    KernelRx,
    /// Every stamp was taken when the client's task read the bytes (no kernel stamp: another
    /// platform, or the socket gave none).
    User,
    /// Some stamps from each.
    Mixed,
}

impl StampClock {
    pub fn as_str(self) -> &'static str {
        match self {
            StampClock::KernelRx => "kernel_rx",
            StampClock::User => "user",
            StampClock::Mixed => "mixed",
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl RequestRecord {
    /// A successful streamed request sent at `sent` (also its intended and release time) whose
    /// tokens arrived at `token_times` (one event of 4 characters each, counted by usage), with
    /// `input_tokens` prompt tokens and nothing else set: a base that tests and replays adjust
    /// with struct update syntax.
    pub fn streamed(id: u64, sent: u64, token_times: &[u64], input_tokens: u64) -> RequestRecord {
        RequestRecord {
            id,
            intended: sent,
            released: sent,
            sent,
            started: None,
            bare_events: Vec::new(),
            first_token: token_times.first().copied(),
            end: token_times.last().copied(),
            done: token_times.last().copied(),
            waited_for_slot: false,
            events: token_times
                .iter()
                .map(|&t| TokenEvent { t, chars: 4 })
                .collect(),
            input_tokens,
            input_source: CountSource::Usage,
            output_tokens: token_times.len() as u64,
            output_source: CountSource::Usage,
            intended_input_tokens: input_tokens,
            max_tokens: None,
            cached_tokens: None,
            finish_reason: None,
            text: None,
            failure: None,
            resent: 0,
            answer_checked: false,
            output_split: None,
            session_id: None,
            turn: None,
            stamp_clock: None,
            lora: None,
            served_by: None,
            images: None,
            phases: None,
        }
    }

    /// A request that completed with at least one output token and no failure.
    pub fn is_success(&self) -> bool {
        self.failure.is_none() && self.first_token.is_some()
    }
}
