//! The load generator: dispatcher (open-loop arrivals, concurrency cap), the `Backend` it
//! drives (the HTTP + SSE client, a timestamp on every chunk), collector (JSONL as records arrive) and client
//! health.

pub mod agents;
mod backend;
pub mod client;
mod clock;
mod collector;
pub mod connector;
mod dispatcher;
mod event_shape;
pub mod gpu;
pub mod health;
pub mod pooling;
mod precise_wait;
pub mod probe;
mod progress;
pub mod realtime;
mod rxstamp;
mod served_by;
pub mod sessions;
mod stamped;
mod stop;
pub mod stream;
pub mod target;
pub mod telemetry;
mod tls_errors;
pub mod transport;

pub use agents::{run_agents, AgentOutcome, AgentSpec, AgentStart};
pub use backend::Backend;
pub use client::{BackendClient, ClientOptions, Prepared};
pub use clock::RunClock;
pub use collector::JsonlSink;
pub use dispatcher::{is_closed_loop, run_load, run_load_feed, warm_up, LoadOutcome, LoadSpec};
pub use progress::Progress;
pub use sessions::{run_sessions, ConversationBackend, ScriptedSession, ScriptedTurn, SessionSpec};
pub use stop::{stop_pair, StopHandle, StopSignal};
pub use target::{ApiKind, Target};
pub use transport::{Http2Mode, Transport};

use std::path::Path;

/// Errors of the load generator (configuration and files; request failures are records).
#[derive(Debug, thiserror::Error)]
pub enum LoadgenError {
    #[error("{0}")]
    Config(String),
    // The reason is part of the message and not also a `source`, so a printed error chain
    // says it once.
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("{0}")]
    Server(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl LoadgenError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        LoadgenError::Io {
            path: path.display().to_string(),
            error: source,
        }
    }
}
