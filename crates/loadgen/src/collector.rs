//! The collector: receives records as requests finish, appends them to the JSONL file at once
//! (an interrupted run keeps everything it measured) and reports live progress.

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use servebench_metrics::RequestRecord;
use tokio::sync::mpsc;

use crate::LoadgenError;

/// Appends one JSON line per record and flushes it before taking the next.
#[derive(Debug)]
pub struct JsonlSink {
    path: PathBuf,
    out: BufWriter<File>,
}

impl JsonlSink {
    pub fn create(path: &Path) -> Result<Self, LoadgenError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| LoadgenError::io(dir, e))?;
        }
        let file = File::create(path).map_err(|e| LoadgenError::io(path, e))?;
        Ok(JsonlSink {
            path: path.to_owned(),
            out: BufWriter::with_capacity(256 * 1024, file),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn append(&mut self, record: &RequestRecord) -> Result<(), LoadgenError> {
        serde_json::to_writer(&mut self.out, record)
            .map_err(|e| LoadgenError::io(&self.path, std::io::Error::other(e)))?;
        self.out
            .write_all(b"\n")
            .map_err(|e| LoadgenError::io(&self.path, e))?;
        self.out
            .flush()
            .map_err(|e| LoadgenError::io(&self.path, e))
    }
}

/// Live progress on stderr.
#[derive(Debug, Clone)]
pub struct Progress {
    pub total: Option<usize>,
    pub label: String,
}

/// Drain the channel until every sender is gone; returns the records in arrival order and the
/// first write error, if any (writing stops at the first error, measuring goes on).
pub(crate) async fn collect(
    mut rx: mpsc::UnboundedReceiver<RequestRecord>,
    mut sink: Option<JsonlSink>,
    progress: Option<Progress>,
) -> (Vec<RequestRecord>, Option<LoadgenError>) {
    let mut records = Vec::new();
    let mut write_error = None;
    let mut failed = 0usize;
    let started = std::time::Instant::now();
    let tty = std::io::stderr().is_terminal();
    let every = if tty {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(10)
    };
    let mut last_print = started;
    while let Some(record) = rx.recv().await {
        if let Some(s) = sink.as_mut() {
            if let Err(e) = s.append(&record) {
                write_error = Some(e);
                sink = None;
            }
        }
        if record.failure.is_some() {
            failed += 1;
        }
        records.push(record);
        if let Some(p) = &progress {
            if last_print.elapsed() >= every {
                last_print = std::time::Instant::now();
                print_progress(p, records.len(), failed, started.elapsed(), tty, false);
            }
        }
    }
    if let Some(p) = &progress {
        print_progress(p, records.len(), failed, started.elapsed(), tty, true);
    }
    (records, write_error)
}

fn print_progress(
    p: &Progress,
    done: usize,
    failed: usize,
    elapsed: Duration,
    tty: bool,
    last: bool,
) {
    let total = p.total.map(|t| format!("/{t}")).unwrap_or_default();
    let pct = p
        .total
        .filter(|t| *t > 0)
        .map(|t| format!(" {:3.0}%", 100.0 * done as f64 / t as f64))
        .unwrap_or_default();
    let line = format!(
        "{}{pct} {done}{total} requests, {failed} failed, {:.1} s",
        p.label,
        elapsed.as_secs_f64()
    );
    let mut err = std::io::stderr().lock();
    if tty {
        let _ = write!(err, "\r\x1b[2K{line}");
        if last {
            let _ = writeln!(err);
        }
    } else {
        let _ = writeln!(err, "{line}");
    }
}
