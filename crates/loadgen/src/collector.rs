//! The collector: receives records as requests finish, appends them to the JSONL file at once
//! (an interrupted run keeps everything it measured) and reports live progress.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use servebench_metrics::RequestRecord;
use tokio::sync::mpsc;

use crate::progress::{Drawer, Live};
use crate::LoadgenError;

/// Appends one JSON line per record. Each record is serialized to a whole line in memory and
/// handed to the OS in one write before the next is taken, so a process killed at any moment
/// leaves at most one partial line, at the end of the file (no user-space buffer holds records
/// across requests).
pub struct JsonlSink {
    path: PathBuf,
    out: File,
    /// Reused between records so serializing does not allocate per request.
    line: Vec<u8>,
    /// Told of the first write error, so the run can stop measuring what it cannot keep.
    on_error: Option<OnWriteError>,
}

/// Called once with the first error writing the records file (a full disk, say).
pub type OnWriteError = Arc<dyn Fn(&LoadgenError) + Send + Sync>;

impl std::fmt::Debug for JsonlSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonlSink")
            .field("path", &self.path)
            .field("on_error", &self.on_error.is_some())
            .finish()
    }
}

impl JsonlSink {
    pub fn create(path: &Path) -> Result<Self, LoadgenError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| LoadgenError::io(dir, e))?;
        }
        let file = File::create(path).map_err(|e| LoadgenError::io(path, e))?;
        Ok(JsonlSink {
            path: path.to_owned(),
            out: file,
            line: Vec::with_capacity(4096),
            on_error: None,
        })
    }

    /// A sink writing into `file`, already opened (and so claimed) by the caller at `path`.
    pub fn from_file(path: &Path, file: File) -> Self {
        JsonlSink {
            path: path.to_owned(),
            out: file,
            line: Vec::with_capacity(4096),
            on_error: None,
        }
    }

    /// Call `f` with the first write error (writing stops there; what was written stays).
    pub fn on_write_error(mut self, f: OnWriteError) -> Self {
        self.on_error = Some(f);
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn append(&mut self, record: &RequestRecord) -> Result<(), LoadgenError> {
        self.line.clear();
        serde_json::to_writer(&mut self.line, record)
            .map_err(|e| LoadgenError::io(&self.path, std::io::Error::other(e)))?;
        self.line.push(b'\n');
        self.out
            .write_all(&self.line)
            .map_err(|e| LoadgenError::io(&self.path, e))?;
        self.out
            .flush()
            .map_err(|e| LoadgenError::io(&self.path, e))
    }
}

/// What the collector gathered. Records that reached the JSONL file are not also held in
/// memory, so a long run's memory stays flat: the caller reads them back from the file once
/// the run is over ([`crate::LoadOutcome::take_records`]).
#[derive(Debug, Default)]
pub(crate) struct Collected {
    /// Records held in memory: every record when there was no file, otherwise only those that
    /// could not be written (from the first write error on).
    pub kept: Vec<RequestRecord>,
    /// The records file, when there was one.
    pub path: Option<PathBuf>,
    /// Records written whole to the file (they are its first `written` lines).
    pub written: usize,
    /// Every record received.
    pub finished: usize,
    /// The latest moment any request ended (ns from the run start).
    pub last_end_ns: u64,
    /// Resends over all records.
    pub resent: u64,
    /// The first error writing the file, if any.
    pub write_error: Option<LoadgenError>,
}

/// Drain the channel until every sender is gone (writing stops at the first error, measuring
/// goes on). Each record only bumps `live`'s counters; `drawer` (if any) draws them on its own
/// timer and prints its last line once the channel is drained.
pub(crate) async fn collect(
    mut rx: mpsc::UnboundedReceiver<RequestRecord>,
    mut sink: Option<JsonlSink>,
    live: Arc<Live>,
    drawer: Option<Drawer>,
) -> Collected {
    let mut out = Collected {
        path: sink.as_ref().map(|s| s.path().to_owned()),
        ..Collected::default()
    };
    while let Some(mut record) = rx.recv().await {
        // Failure messages quote the server (error bodies, broken chunks): kept printable, as
        // everything that shows them prints them raw.
        if let Some(f) = record.failure.as_mut() {
            if let std::borrow::Cow::Owned(safe) = servebench_wire::printable::printable(&f.message)
            {
                f.message = safe;
            }
        }
        out.finished += 1;
        out.last_end_ns = out
            .last_end_ns
            .max(record.end.max(record.done).unwrap_or(record.sent));
        out.resent += u64::from(record.resent);
        live.finished(record.failure.is_some(), record.output_tokens);
        let mut on_disk = false;
        if let Some(s) = sink.as_mut() {
            match s.append(&record) {
                Ok(()) => on_disk = true,
                Err(e) => {
                    if let Some(f) = &s.on_error {
                        f(&e);
                    }
                    out.write_error = Some(e);
                    sink = None;
                }
            }
        }
        if on_disk {
            out.written += 1;
        } else {
            out.kept.push(record);
        }
    }
    if let Some(d) = drawer {
        d.finish();
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use servebench_metrics::CountSource;

    fn record(id: u64) -> RequestRecord {
        RequestRecord {
            phases: None,
            images: None,
            id,
            intended: 0,
            released: 0,
            sent: 0,
            started: None,
            bare_events: Vec::new(),
            first_token: None,
            end: None,
            done: Some(1),
            waited_for_slot: false,
            events: Vec::new(),
            input_tokens: 1,
            input_source: CountSource::Usage,
            output_tokens: 0,
            output_source: CountSource::Usage,
            intended_input_tokens: 1,
            max_tokens: None,
            cached_tokens: None,
            finish_reason: None,
            text: Some("x".repeat(100_000)),
            failure: None,
            resent: 0,
            answer_checked: false,
            output_split: None,
            session_id: None,
            turn: None,
            stamp_clock: None,
            lora: None,
            served_by: None,
        }
    }

    /// A full disk mid-run: the first failed write is reported to the run (which stops
    /// measuring), the later records are still collected, and nothing more is written.
    #[tokio::test]
    async fn a_full_disk_reports_the_first_write_error_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&calls);
        let sink = JsonlSink::create(Path::new("/dev/full"))
            .unwrap()
            .on_write_error(Arc::new(move |_| {
                seen.fetch_add(1, Ordering::SeqCst);
            }));
        let (tx, rx) = mpsc::unbounded_channel();
        for id in 0..3 {
            tx.send(record(id)).unwrap();
        }
        drop(tx);
        let got = collect(rx, Some(sink), Arc::default(), None).await;
        // Nothing reached the file, so every record stays in memory.
        assert_eq!(got.kept.len(), 3);
        assert_eq!((got.written, got.finished), (0, 3));
        let err = got
            .write_error
            .expect("the write error is returned")
            .to_string();
        assert!(err.contains("/dev/full"), "{err}");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    /// A killed process loses only what is still in its own memory: each record must be in the
    /// file, whole, as soon as `append` returns, not held in a buffer until the sink is dropped.
    #[test]
    fn each_record_is_on_disk_whole_when_append_returns() {
        let dir = std::env::temp_dir().join(format!("servebench-sink-{}", std::process::id()));
        let path = dir.join("r.requests.jsonl");
        let mut sink = JsonlSink::create(&path).unwrap();
        for id in 0..5 {
            sink.append(&record(id)).unwrap();
            let on_disk = std::fs::read(&path).unwrap();
            assert_eq!(on_disk.last(), Some(&b'\n'));
            let lines: Vec<&[u8]> = on_disk
                .split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .collect();
            assert_eq!(lines.len() as u64, id + 1);
            let last: RequestRecord = serde_json::from_slice(lines[lines.len() - 1]).unwrap();
            assert_eq!(last, record(id));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Records that reached the file are not held in memory too: a long run's memory is
    /// flat. Only the counts and the latest end are kept.
    #[tokio::test]
    async fn written_records_are_not_kept_in_memory() {
        let dir = std::env::temp_dir().join(format!("servebench-keep-{}", std::process::id()));
        let path = dir.join("r.requests.jsonl");
        let sink = JsonlSink::create(&path).unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        for id in 0..4 {
            let mut r = record(id);
            r.done = Some(10 + id);
            r.resent = 1;
            tx.send(r).unwrap();
        }
        drop(tx);
        let got = collect(rx, Some(sink), Arc::default(), None).await;
        assert!(got.kept.is_empty());
        assert_eq!((got.written, got.finished, got.resent), (4, 4, 4));
        assert_eq!(got.last_end_ns, 13);
        assert_eq!(got.path.as_deref(), Some(path.as_path()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
