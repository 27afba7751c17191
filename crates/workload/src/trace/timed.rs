//! vLLM's timed-trace dataset (`--dataset-name timed_trace`), widened to every trace format
//! servebench reads.
//!
//! A trace row's timestamp times the multiplier is its arrival in seconds; arrivals are
//! counted from the earliest row, so request `i` is meant to be sent
//! `round((t_i − t_first) × multiplier × 10⁹)` ns after the start (to the nanosecond: the
//! records' `intended` times are exactly these). Hash ids name chunks of
//! `chunk_hash_size` tokens; equal leading ids give byte-identical leading text.
//!
//! Defaults per format (each overridable with vLLM's flags):
//!
//! | format | timestamps | multiplier | chunk tokens |
//! |---|---|---|---|
//! | vLLM timed trace (JSON lines, the default for JSON lines) | seconds | 1 | 16 |
//! | Mooncake (JSON lines, `--trace-format mooncake`) | milliseconds | 0.001 | 512 |
//! | Azure 2023/2024 CSV | wall clock | 1 | (no hash ids) |
//! | BurstGPT CSV | seconds | 1 | (no hash ids) |
//!
//! A window (`start`, `duration`, in seconds of the replay clock, i.e. after the
//! multiplier) keeps the rows arriving in `[start, start + duration)` and counts their
//! offsets from `start`. Rows out of time order are sorted (stably); the count of rows
//! that moved is reported so the caller can warn.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use servebench_tokenizer::Tokenizer;

use super::inspect::rows::{for_each_row, json_row};
use super::lines::for_each_line;
use super::replay::{synthesize, ReplayConfig, TracePrompts, MOONCAKE_BLOCK_TOKENS};
use super::{TraceEntry, TraceFormat, TraceLabels};
use crate::error::WorkloadError;
use crate::request::RequestSpec;

/// vLLM's `--timed-trace-chunk-hash-size` default.
pub const VLLM_CHUNK_HASH_SIZE: u64 = 16;

/// Part of a trace to replay, in seconds of the replay clock.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TraceWindow {
    /// Skip rows arriving earlier (0 when `None`).
    pub start_s: Option<f64>,
    /// Keep rows arriving before `start + duration` (to the end when `None`).
    pub duration_s: Option<f64>,
}

impl TraceWindow {
    /// Whether the window keeps the whole trace.
    pub fn is_whole(&self) -> bool {
        self.start_s.is_none() && self.duration_s.is_none()
    }
}

/// How to read a timed trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TimedTraceConfig {
    pub path: PathBuf,
    /// `None`: detected ([`TraceFormat::detect_lines`]; JSON lines are vLLM's timed trace
    /// whenever a vLLM timed-trace flag is given).
    pub format: Option<TraceFormat>,
    /// Timestamp × multiplier = seconds; `None`: the format's default.
    pub sec_multiplier: Option<f64>,
    /// Tokens per hash id; `None`: the format's default.
    pub chunk_hash_size: Option<u64>,
    /// Field names of JSON-lines traces.
    pub labels: TraceLabels,
    pub window: TraceWindow,
    /// Replay at most this many rows (the first ones of the window).
    pub max_requests: Option<usize>,
    /// Seed of the synthesized prompt texts.
    pub seed: u64,
}

impl TimedTraceConfig {
    /// A whole trace with the format's defaults.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            format: None,
            sec_multiplier: None,
            chunk_hash_size: None,
            labels: TraceLabels::default(),
            window: TraceWindow::default(),
            max_requests: None,
            seed: 0,
        }
    }
}

/// The multiplier a format's timestamps take when none is given.
pub fn default_sec_multiplier(format: TraceFormat) -> f64 {
    match format {
        TraceFormat::Mooncake => 0.001,
        TraceFormat::Vllm | TraceFormat::Azure | TraceFormat::BurstGpt => 1.0,
    }
}

/// The tokens per hash id a format has when none is given.
pub fn default_chunk_hash_size(format: TraceFormat) -> u64 {
    match format {
        TraceFormat::Mooncake => MOONCAKE_BLOCK_TOKENS,
        TraceFormat::Vllm | TraceFormat::Azure | TraceFormat::BurstGpt => VLLM_CHUNK_HASH_SIZE,
    }
}

/// A trace read and cut to what is replayed.
#[derive(Debug, Clone, PartialEq)]
pub struct TimedTrace {
    pub format: TraceFormat,
    pub sec_multiplier: f64,
    pub chunk_hash_size: u64,
    /// The rows to replay in arrival order, `offset_ns` on the replay clock counted from
    /// the window's start.
    pub entries: Vec<TraceEntry>,
    /// Rows of the file.
    pub total: usize,
    /// Rows that changed place when sorted by arrival (0 for a file in time order).
    pub reordered: usize,
    /// The whole trace's span on the replay clock, ns.
    pub span_ns: u64,
    /// Rows of the window left out by `max_requests`.
    pub capped: usize,
}

/// Reads the trace `cfg` names and cuts it to its window.
pub fn load_timed_trace(cfg: &TimedTraceConfig) -> Result<TimedTrace, WorkloadError> {
    let path = cfg.path.as_path();
    let format = match cfg.format {
        Some(f) => f,
        None => {
            // vLLM's timed-trace flags (a multiplier, a chunk size, field names) say the
            // file is vLLM's, whatever its numbers look like.
            let vllm_flags = cfg.sec_multiplier.is_some()
                || cfg.chunk_hash_size.is_some()
                || cfg.labels != TraceLabels::default();
            detect_file(path, &cfg.labels.timestamp, vllm_flags)?
        }
    };
    let sec_multiplier = cfg
        .sec_multiplier
        .unwrap_or_else(|| default_sec_multiplier(format));
    if !sec_multiplier.is_finite() || sec_multiplier <= 0.0 {
        return Err(WorkloadError::InvalidConfig(format!(
            "the timed-trace seconds multiplier must be positive, got {sec_multiplier}"
        )));
    }
    let chunk_hash_size = cfg
        .chunk_hash_size
        .unwrap_or_else(|| default_chunk_hash_size(format));
    if chunk_hash_size == 0 {
        return Err(WorkloadError::InvalidConfig(
            "the timed-trace chunk hash size must be at least 1 token".to_owned(),
        ));
    }
    let (start_ns, end_ns) = window_ns(&cfg.window)?;

    let rows = read_rows(path, format, &cfg.labels, sec_multiplier)?;
    let total = rows.len();
    if total == 0 {
        return Err(WorkloadError::Empty {
            path: path.to_path_buf(),
            reason: "empty trace: no rows".to_owned(),
        });
    }
    let (entries, reordered) = sorted_offsets(rows, sec_multiplier);
    let span_ns = entries.last().map_or(0, |e| e.offset_ns);
    let mut entries: Vec<TraceEntry> = entries
        .into_iter()
        .filter(|e| e.offset_ns >= start_ns && e.offset_ns < end_ns)
        .map(|mut e| {
            e.offset_ns -= start_ns;
            e
        })
        .collect();
    if entries.is_empty() {
        return Err(WorkloadError::Empty {
            path: path.to_path_buf(),
            reason: format!(
                "the window {} holds no request: the trace spans 0 s to {:.3} s on the replay \
                 clock (timestamps × {sec_multiplier})",
                describe_window(&cfg.window),
                span_ns as f64 / 1e9
            ),
        });
    }
    let capped = match cfg.max_requests {
        Some(n) if n < entries.len() => {
            let dropped = entries.len() - n;
            entries.truncate(n);
            dropped
        }
        _ => 0,
    };
    Ok(TimedTrace {
        format,
        sec_multiplier,
        chunk_hash_size,
        entries,
        total,
        reordered,
        span_ns,
        capped,
    })
}

/// The requests of a timed trace (prompts synthesized at each row's exact length), in
/// arrival order; their arrivals are [`TimedTrace::entries`]' offsets.
pub fn sample_timed_trace(
    cfg: &TimedTraceConfig,
    tok: &Tokenizer,
) -> Result<Vec<RequestSpec>, WorkloadError> {
    let trace = load_timed_trace(cfg)?;
    Ok(trace.requests(tok, cfg.seed)?.requests)
}

impl TimedTrace {
    /// Prompts of exact length for every entry (shared chunks share text).
    pub fn requests(
        &self,
        tok: &Tokenizer,
        seed: u64,
    ) -> Result<super::TraceWorkload, WorkloadError> {
        synthesize(
            &self.entries,
            tok,
            &ReplayConfig {
                block_tokens: self.chunk_hash_size,
                seed,
                time_scale: 1.0,
                max_requests: None,
            },
        )
    }

    /// The entries' prompts, to build one at a time (identical to [`TimedTrace::requests`]).
    pub fn into_prompts(self, tok: &Tokenizer, seed: u64) -> Result<TracePrompts, WorkloadError> {
        TracePrompts::new(
            self.entries,
            tok.clone(),
            ReplayConfig {
                block_tokens: self.chunk_hash_size,
                seed,
                time_scale: 1.0,
                max_requests: None,
            },
        )
    }

    /// The entries' intended send offsets, ns.
    pub fn offsets_ns(&self) -> Vec<u64> {
        self.entries.iter().map(|e| e.offset_ns).collect()
    }
}

fn window_ns(w: &TraceWindow) -> Result<(u64, u64), WorkloadError> {
    let start = w.start_s.unwrap_or(0.0);
    if !start.is_finite() || start < 0.0 {
        return Err(WorkloadError::InvalidConfig(format!(
            "the trace window's start must be a non-negative number of seconds, got {start}"
        )));
    }
    let start_ns = (start * 1e9).round() as u64;
    let end_ns = match w.duration_s {
        None => u64::MAX,
        Some(d) if d.is_finite() && d > 0.0 => start_ns.saturating_add((d * 1e9).round() as u64),
        Some(d) => {
            return Err(WorkloadError::InvalidConfig(format!(
                "the trace window's duration must be a positive number of seconds, got {d}"
            )))
        }
    };
    Ok((start_ns, end_ns))
}

fn describe_window(w: &TraceWindow) -> String {
    let start = w.start_s.unwrap_or(0.0);
    match w.duration_s {
        Some(d) => format!("[{start} s, {} s)", start + d),
        None => format!("[{start} s, end)"),
    }
}

/// The format of a file, by the detector every trace reader shares
/// ([`TraceFormat::detect_lines`]: decimal timestamps are vLLM's seconds, integers
/// Mooncake's milliseconds). `vllm_flags`: the run gave one of vLLM's timed-trace flags, so
/// its JSON lines are vLLM's whatever their numbers look like.
fn detect_file(
    path: &Path,
    timestamp_label: &str,
    vllm_flags: bool,
) -> Result<TraceFormat, WorkloadError> {
    let file = std::fs::File::open(path).map_err(|e| WorkloadError::io(path, e))?;
    let mut reader = BufReader::new(file);
    let mut buf = Vec::new();
    let mut lines: Vec<String> = Vec::new();
    let mut first_line_no = 0;
    let mut line_no = 0;
    while lines.len() < super::DETECT_LINES {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| WorkloadError::io(path, e))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let text = String::from_utf8_lossy(&buf);
        let line = if line_no == 1 {
            crate::text_file::strip_bom(&text)
        } else {
            &text
        }
        .trim()
        .to_owned();
        if line.is_empty() {
            continue;
        }
        if lines.is_empty() {
            first_line_no = line_no;
        }
        lines.push(line);
    }
    if lines.is_empty() {
        return Err(WorkloadError::Empty {
            path: path.to_path_buf(),
            reason: "empty trace: the file has no lines".to_owned(),
        });
    }
    match TraceFormat::detect_lines(lines.iter().map(String::as_str), timestamp_label) {
        Some(TraceFormat::Mooncake) if vllm_flags => Ok(TraceFormat::Vllm),
        Some(f) => Ok(f),
        None => Err(WorkloadError::malformed(
            path,
            first_line_no,
            "unknown trace format: expected JSON lines (vLLM timed trace or Mooncake) or a \
             CSV header with ContextTokens,GeneratedTokens (Azure) or Request \
             tokens,Response tokens (BurstGPT); --trace-format forces one",
        )),
    }
}

/// A row's arrival as read: a JSON timestamp in the trace's unit, or a CSV instant in ns.
#[derive(Clone, Copy)]
enum Stamp {
    Units(f64),
    Ns(i64),
}

struct RawRow {
    stamp: Stamp,
    input_tokens: u64,
    output_tokens: u64,
    block_hashes: Vec<u64>,
}

/// The longest prompt or answer a trace row may ask for: 10 million tokens, past every
/// model's context window. A row beyond it is a corrupt file, and building its prompt would
/// take the machine's memory.
pub const MAX_ROW_TOKENS: u64 = 10_000_000;

/// The latest arrival a trace may hold, in seconds on the replay clock (about 31.7 years):
/// past it the nanosecond clock would saturate and the row vanish from every window.
pub const MAX_TRACE_SECONDS: f64 = 1e9;

fn read_rows(
    path: &Path,
    format: TraceFormat,
    labels: &TraceLabels,
    multiplier: f64,
) -> Result<Vec<RawRow>, WorkloadError> {
    let file = std::fs::File::open(path).map_err(|e| WorkloadError::io(path, e))?;
    let reader = BufReader::new(file);
    let mut out = Vec::new();
    match format {
        TraceFormat::Vllm | TraceFormat::Mooncake => {
            for_each_line(reader, path, |line_no, line| {
                let r = json_row(line, path, line_no, labels)?;
                for (label, n) in [
                    (&labels.input_length, r.input_tokens),
                    (&labels.output_length, r.output_tokens),
                ] {
                    if n > MAX_ROW_TOKENS {
                        return Err(WorkloadError::malformed(
                            path,
                            line_no,
                            format!("{label} {n} is out of range (allowed: 0 to {MAX_ROW_TOKENS} tokens)"),
                        ));
                    }
                }
                let seconds = r.timestamp * multiplier;
                if !seconds.is_finite() || seconds > MAX_TRACE_SECONDS {
                    return Err(WorkloadError::malformed(
                        path,
                        line_no,
                        format!(
                            "{} {} is {seconds:e} s on the replay clock (allowed: up to {MAX_TRACE_SECONDS:e} s, timestamps × {multiplier})",
                            labels.timestamp, r.timestamp
                        ),
                    ));
                }
                out.push(RawRow {
                    stamp: Stamp::Units(r.timestamp),
                    input_tokens: r.input_tokens,
                    output_tokens: r.output_tokens,
                    block_hashes: r.block_hashes,
                });
                Ok(())
            })?;
        }
        TraceFormat::Azure | TraceFormat::BurstGpt => {
            for_each_row(reader, path, Some(format), |r| {
                out.push(RawRow {
                    stamp: Stamp::Ns(r.at_ns),
                    input_tokens: r.input_tokens,
                    output_tokens: r.output_tokens,
                    block_hashes: r.block_hashes,
                })
            })?;
        }
    }
    Ok(out)
}

/// Entries sorted (stably) by arrival, offsets `round((t − t_first) × multiplier × 10⁹)` ns
/// (CSV instants are ns already: `round((t − t_first) × multiplier)`), and how many rows
/// changed place.
fn sorted_offsets(rows: Vec<RawRow>, multiplier: f64) -> (Vec<TraceEntry>, usize) {
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by(|&a, &b| match (rows[a].stamp, rows[b].stamp) {
        (Stamp::Units(x), Stamp::Units(y)) => x.total_cmp(&y),
        (Stamp::Ns(x), Stamp::Ns(y)) => x.cmp(&y),
        // One file has one format, so stamps never mix.
        (Stamp::Units(_), Stamp::Ns(_)) => std::cmp::Ordering::Less,
        (Stamp::Ns(_), Stamp::Units(_)) => std::cmp::Ordering::Greater,
    });
    let reordered = order.iter().enumerate().filter(|(i, &o)| *i != o).count();
    let first = order.first().map(|&i| rows[i].stamp);
    let mut slots: Vec<Option<RawRow>> = rows.into_iter().map(Some).collect();
    let entries = order
        .into_iter()
        .filter_map(|i| slots[i].take())
        .map(|r| {
            let offset = match (r.stamp, first) {
                (Stamp::Units(t), Some(Stamp::Units(t0))) => (t - t0) * multiplier * 1e9,
                (Stamp::Ns(t), Some(Stamp::Ns(t0))) => {
                    (i128::from(t) - i128::from(t0)) as f64 * multiplier
                }
                _ => 0.0,
            };
            TraceEntry {
                // Float-to-int casts saturate: an absurd offset cannot wrap.
                offset_ns: offset.round() as u64,
                input_tokens: r.input_tokens,
                output_tokens: r.output_tokens,
                block_hashes: r.block_hashes,
            }
        })
        .collect();
    (entries, reordered)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("servebench-timed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn vllm_jsonl_defaults_scale_and_sort() {
        let p = write(
            "v.jsonl",
            "{\"timestamp\": 10.5, \"input_length\": 40, \"output_length\": 3, \"hash_ids\": [1, 2, 3]}\n\
             {\"timestamp\": 10.0, \"input_length\": 20, \"output_length\": 2, \"hash_ids\": [1, 2]}\n\
             {\"timestamp\": 12.25, \"input_length\": 5, \"output_length\": 1}\n",
        );
        let t = load_timed_trace(&TimedTraceConfig::new(&p)).unwrap();
        assert_eq!(t.format, TraceFormat::Vllm);
        assert_eq!((t.sec_multiplier, t.chunk_hash_size), (1.0, 16));
        assert_eq!(t.offsets_ns(), vec![0, 500_000_000, 2_250_000_000]);
        assert_eq!(t.reordered, 2);
        assert_eq!(t.entries[0].input_tokens, 20);

        let mut cfg = TimedTraceConfig::new(&p);
        cfg.format = Some(TraceFormat::Mooncake);
        let t = load_timed_trace(&cfg).unwrap();
        assert_eq!((t.sec_multiplier, t.chunk_hash_size), (0.001, 512));
        assert_eq!(t.offsets_ns(), vec![0, 500_000, 2_250_000]);
    }

    #[test]
    fn labels_window_and_cap() {
        let p = write(
            "l.jsonl",
            &(0..10)
                .map(|i| format!("{{\"ts\": {}, \"in\": {}, \"out\": 4}}\n", i * 2, 10 + i))
                .collect::<String>(),
        );
        let mut cfg = TimedTraceConfig::new(&p);
        cfg.labels.timestamp = "ts".into();
        cfg.labels.input_length = "in".into();
        cfg.labels.output_length = "out".into();
        cfg.sec_multiplier = Some(0.5);
        // Replay clock: row i at i s; the window [3, 6) keeps rows 3, 4, 5.
        cfg.window = TraceWindow {
            start_s: Some(3.0),
            duration_s: Some(3.0),
        };
        let t = load_timed_trace(&cfg).unwrap();
        assert_eq!(t.offsets_ns(), vec![0, 1_000_000_000, 2_000_000_000]);
        assert_eq!(t.entries[0].input_tokens, 13);
        assert_eq!(t.span_ns, 9_000_000_000);

        cfg.max_requests = Some(2);
        let t = load_timed_trace(&cfg).unwrap();
        assert_eq!((t.entries.len(), t.capped), (2, 1));

        cfg.window = TraceWindow {
            start_s: Some(100.0),
            duration_s: Some(60.0),
        };
        let err = load_timed_trace(&cfg).unwrap_err().to_string();
        assert!(err.contains("[100 s, 160 s)"), "{err}");
        assert!(err.contains("0 s to 9.000 s"), "{err}");

        cfg.labels.timestamp = "timestamp".into();
        cfg.window = TraceWindow::default();
        let err = load_timed_trace(&cfg).unwrap_err().to_string();
        assert!(
            err.contains("l.jsonl:1:") && err.contains("`timestamp`"),
            "{err}"
        );
    }

    /// A row asking for a trillion tokens, or arriving in 10^15 s, is refused naming its file
    /// and line (before: the first reserved terabytes, the second vanished without a note).
    #[test]
    fn absurd_rows_are_refused_with_file_and_line() {
        let p = write(
            "huge.jsonl",
            "{\"timestamp\": 0.5, \"input_length\": 10, \"output_length\": 2}\n\
             {\"timestamp\": 1.5, \"input_length\": 1000000000000, \"output_length\": 2}\n",
        );
        let err = load_timed_trace(&TimedTraceConfig::new(&p))
            .unwrap_err()
            .to_string();
        assert!(err.contains("huge.jsonl:2:"), "{err}");
        assert!(err.contains("allowed: 0 to 10000000 tokens"), "{err}");
        let p = write(
            "late.jsonl",
            "{\"timestamp\": 0.5, \"input_length\": 10, \"output_length\": 2}\n\
             {\"timestamp\": 1e15, \"input_length\": 10, \"output_length\": 2}\n",
        );
        let err = load_timed_trace(&TimedTraceConfig::new(&p))
            .unwrap_err()
            .to_string();
        assert!(err.contains("late.jsonl:2:"), "{err}");
        assert!(err.contains("allowed: up to"), "{err}");
        // The same rows through the trace reader of `trace inspect` and `matrix --trace`.
        let text = "{\"timestamp\": 0, \"input_length\": 1000000000000, \"output_length\": 2}\n";
        let err = super::super::parse_trace(text, None, Path::new("m.jsonl"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("m.jsonl:1:") && err.contains("input_length"),
            "{err}"
        );
    }

    #[test]
    fn csv_formats_are_detected_and_scaled() {
        let p = write(
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n\
             2024-05-10 00:00:00.004570+00:00,100,10\n\
             2024-05-10 00:00:02.004570+00:00,200,20\n",
        );
        let mut cfg = TimedTraceConfig::new(&p);
        cfg.sec_multiplier = Some(0.25);
        let t = load_timed_trace(&cfg).unwrap();
        assert_eq!(t.format, TraceFormat::Azure);
        assert_eq!(t.offsets_ns(), vec![0, 500_000_000]);

        let p = write(
            "b.csv",
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
             5,ChatGPT,472,18,490,Conversation log\n\
             7.5,GPT-4,1087,10,1097,Conversation log\n",
        );
        let t = load_timed_trace(&TimedTraceConfig::new(&p)).unwrap();
        assert_eq!(t.format, TraceFormat::BurstGpt);
        assert_eq!(t.offsets_ns(), vec![0, 2_500_000_000]);
    }

    #[test]
    fn bad_settings_are_refused() {
        let p = write(
            "ok.jsonl",
            "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1}\n",
        );
        let mut cfg = TimedTraceConfig::new(&p);
        cfg.sec_multiplier = Some(0.0);
        assert!(load_timed_trace(&cfg).is_err());
        cfg.sec_multiplier = None;
        cfg.chunk_hash_size = Some(0);
        assert!(load_timed_trace(&cfg).is_err());
        cfg.chunk_hash_size = None;
        cfg.window.duration_s = Some(-1.0);
        assert!(load_timed_trace(&cfg).is_err());
        let e = write("e.jsonl", "\n\n");
        assert!(load_timed_trace(&TimedTraceConfig::new(&e)).is_err());
    }
}
