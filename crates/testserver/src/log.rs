//! The server's log of what it did for each generation request, and its JSON-lines form.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

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
    /// The fault applied, by [`crate::Fault::name`].
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
    /// The arrival on the wall clock (Unix ns, from a paired reading of the server's clocks at
    /// its start), so a client's records can be set against the event writes
    /// (`arrival_wall_ns + events_ns[k]`) with the client's own clock anchor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrival_wall_ns: Option<u64>,
}

impl RequestLog {
    /// The arrival instant, given the server's start ([`crate::ScriptedServer::started`]).
    pub fn arrival(&self, server_started: Instant) -> Instant {
        server_started + Duration::from_nanos(self.arrival_ns)
    }

    /// The servebench record id carried in `x-request-id` (`servebench-<id>`), if any.
    pub fn record_id(&self) -> Option<u64> {
        servebench_wire::protocol::record_id(self.request_id.as_deref()?)
    }
}

/// The log, shared by the connection tasks.
#[derive(Debug)]
pub(crate) struct LogStore {
    pub(crate) entries: Mutex<Vec<RequestLog>>,
    pub(crate) count: watch::Sender<usize>,
}

impl LogStore {
    pub(crate) fn push(&self, entry: RequestLog) {
        let len = {
            let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            entries.push(entry);
            entries.len()
        };
        self.count.send_replace(len);
    }

    pub(crate) fn snapshot(&self) -> Vec<RequestLog> {
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
pub(crate) struct PendingLog {
    pub(crate) entry: RequestLog,
    pub(crate) store: Arc<LogStore>,
}

impl Drop for PendingLog {
    fn drop(&mut self) {
        self.store.push(std::mem::take(&mut self.entry));
    }
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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
}
