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

mod accuracy;
mod log;
mod plan;
mod script;
mod server;

pub use accuracy::{compare_to_log, Accuracy, ErrorStats};
pub use log::{read_log_jsonl, write_log_jsonl, Outcome, RequestLog};
pub use plan::{sse_body, StreamSpec};
pub use script::{ChunkShape, Fault, FaultRule, OutputLength, Script, Trigger};
pub use servebench_wire::protocol::{
    DEFAULT_COMPLETION_MAX_TOKENS as DEFAULT_MAX_TOKENS, REQUEST_ID_PREFIX,
};
pub use server::{error_body, ScriptedServer};
