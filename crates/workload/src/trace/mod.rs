//! Production traces: readers for the public LLM-serving trace formats, and replay of
//! a trace as requests with arrival offsets.
//!
//! Supported formats (detected from the first line):
//! - Azure LLM inference trace (2023 code and conversation): CSV
//!   `TIMESTAMP,ContextTokens,GeneratedTokens`, wall-clock timestamps such as
//!   `2023-11-16 18:17:03.9799600`;
//! - Mooncake (FAST'25): JSON lines `{"timestamp": ms, "input_length": n,
//!   "output_length": n, "hash_ids": [..]}`, each hash id naming one 512-token block
//!   of the prompt, equal leading ids meaning a shared prefix;
//! - BurstGPT: CSV `Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`,
//!   timestamps in seconds;
//! - vLLM's timed trace (`vllm bench serve --dataset-name timed_trace`): the Mooncake shape
//!   with timestamps in seconds (after vLLM's `--timed-trace-sec-multiplier`) and hash ids
//!   naming chunks of `--timed-trace-chunk-hash-size` tokens. JSON lines are detected as
//!   Mooncake; the timed-trace dataset ([`timed`]) reads them as vLLM does unless told
//!   otherwise.
//!
//! Azure 2024 timestamps carry a UTC offset (`2024-05-10 00:00:00.004570+00:00`); it is
//! applied, so traces that mix offsets still order correctly.
//!
//! Every reader yields [`TraceEntry`]s sorted by arrival, offsets counted from the
//! earliest entry.

pub mod burstgpt;
mod csv;
mod datetime;
pub mod inspect;
mod lines;
mod replay;
pub mod timed;

use std::path::Path;

use serde::Deserialize;
use servebench_metrics::units::{NS_PER_MS, NS_PER_S};

use crate::error::WorkloadError;

pub use burstgpt::{sample_burstgpt, BurstGptConfig};
pub use replay::{
    full_block_ids, lengths_only, synthesize, ReplayConfig, TracePrompts, TraceWorkload,
};
pub use timed::{load_timed_trace, sample_timed_trace, TimedTrace, TimedTraceConfig, TraceWindow};

/// One request of a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEntry {
    /// Arrival, in ns after the trace's first arrival.
    pub offset_ns: u64,
    /// Prompt length in tokens.
    pub input_tokens: u64,
    /// Output length in tokens.
    pub output_tokens: u64,
    /// Prompt block ids (Mooncake): block `k` covers tokens `[512k, 512(k+1))`; two
    /// entries whose first `j` ids are equal share their first `j` blocks. Empty for
    /// formats without them.
    pub block_hashes: Vec<u64>,
}

/// A trace file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    /// Azure LLM inference trace CSV.
    Azure,
    /// Mooncake JSON lines.
    Mooncake,
    /// BurstGPT CSV.
    BurstGpt,
    /// vLLM's timed-trace JSON lines (timestamps in seconds, 16-token chunks by default).
    Vllm,
}

/// The field names of a JSON-lines trace (vLLM's `--timed-trace-label-*` flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceLabels {
    pub timestamp: String,
    pub input_length: String,
    pub output_length: String,
    pub hash_ids: String,
}

impl Default for TraceLabels {
    /// vLLM's defaults, which are also Mooncake's names.
    fn default() -> Self {
        Self {
            timestamp: "timestamp".to_owned(),
            input_length: "input_length".to_owned(),
            output_length: "output_length".to_owned(),
            hash_ids: "hash_ids".to_owned(),
        }
    }
}

/// How many JSON lines the detector reads to decide the unit of their timestamps.
pub const DETECT_LINES: usize = 1000;

impl TraceFormat {
    /// Recognises the format from the file's text (see [`TraceFormat::detect_lines`]).
    pub fn detect(text: &str) -> Option<Self> {
        Self::detect_lines(text.lines(), "timestamp")
    }

    /// The one format detector of every trace reader (`trace inspect`, `matrix --trace`,
    /// `run --dataset-name timed_trace`). CSV: by the header's columns. JSON lines hold the
    /// same fields in two units: vLLM's timed trace writes seconds as decimals (`0.4`),
    /// Mooncake's published traces milliseconds as integers (`27482`). So JSON lines whose
    /// `timestamp_label` values, in the first [`DETECT_LINES`] rows, include one written as a
    /// decimal are vLLM's (seconds), and integers throughout are Mooncake's (milliseconds).
    /// `--trace-format` overrides either.
    pub fn detect_lines<'a>(
        lines: impl Iterator<Item = &'a str>,
        timestamp_label: &str,
    ) -> Option<Self> {
        let mut lines = lines.map(str::trim).filter(|l| !l.is_empty());
        let first = lines.next()?;
        if first.starts_with('{') {
            let decimal = std::iter::once(first)
                .chain(lines)
                .take(DETECT_LINES)
                .map_while(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .any(|v| {
                    v.get(timestamp_label)
                        .is_some_and(serde_json::Value::is_f64)
                });
            return Some(if decimal { Self::Vllm } else { Self::Mooncake });
        }
        let header: Vec<String> = csv::split_line(first)
            .iter()
            .map(|c| c.trim().to_ascii_lowercase())
            .collect();
        let has = |name: &str| header.iter().any(|c| c == name);
        if has("contexttokens") && has("generatedtokens") {
            Some(Self::Azure)
        } else if has("request tokens") && has("response tokens") {
            Some(Self::BurstGpt)
        } else {
            None
        }
    }
}

/// Reads a trace file, detecting its format.
pub fn read_trace(path: impl AsRef<Path>) -> Result<Vec<TraceEntry>, WorkloadError> {
    let path = path.as_ref();
    let text = crate::text_file::read_text(path)?;
    parse_trace(&text, None, path)
}

/// Parses a trace from its text, in `format` or the detected one; `path` only names
/// the source in errors.
pub fn parse_trace(
    text: &str,
    format: Option<TraceFormat>,
    path: &Path,
) -> Result<Vec<TraceEntry>, WorkloadError> {
    let text = crate::text_file::strip_bom(text);
    let format = match format.or_else(|| TraceFormat::detect(text)) {
        Some(f) => f,
        None => {
            return Err(WorkloadError::malformed(
                path,
                1,
                "unknown trace format: expected Mooncake JSON lines or a CSV header with \
                 ContextTokens,GeneratedTokens (Azure) or Request tokens,Response tokens \
                 (BurstGPT)",
            ))
        }
    };
    let raw = match format {
        TraceFormat::Azure => parse_azure(text, path)?,
        TraceFormat::BurstGpt => parse_burstgpt(text, path)?,
        TraceFormat::Mooncake => parse_mooncake(text, path, NS_PER_MS)?,
        TraceFormat::Vllm => parse_mooncake(text, path, NS_PER_S)?,
    };
    Ok(into_entries(raw))
}

/// An entry with its absolute timestamp in ns, before offsets are taken.
struct RawEntry {
    at_ns: i128,
    input_tokens: u64,
    output_tokens: u64,
    block_hashes: Vec<u64>,
}

fn into_entries(mut raw: Vec<RawEntry>) -> Vec<TraceEntry> {
    raw.sort_by_key(|r| r.at_ns);
    let start = raw.first().map_or(0, |r| r.at_ns);
    raw.into_iter()
        .map(|r| TraceEntry {
            offset_ns: u64::try_from(r.at_ns - start).unwrap_or(u64::MAX),
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            block_hashes: r.block_hashes,
        })
        .collect()
}

/// Data rows of a CSV file with a header, as `(line number, fields)`.
type CsvRows = Vec<(usize, Vec<String>)>;

/// Splits a CSV file with a header into the index of each wanted column (matched
/// case-insensitively) and the data rows.
fn csv_rows(
    text: &str,
    path: &Path,
    wanted: &[&str],
) -> Result<(Vec<usize>, CsvRows), WorkloadError> {
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.trim().is_empty());
    let (header_no, header) = lines
        .next()
        .ok_or_else(|| WorkloadError::malformed(path, 1, "empty file: no CSV header"))?;
    let names: Vec<String> = csv::split_line(header)
        .iter()
        .map(|c| c.trim().to_ascii_lowercase())
        .collect();
    let mut columns = Vec::with_capacity(wanted.len());
    for w in wanted {
        match names.iter().position(|n| n == &w.to_ascii_lowercase()) {
            Some(i) => columns.push(i),
            None => {
                return Err(WorkloadError::malformed(
                    path,
                    header_no,
                    format!("CSV header has no `{w}` column (found: {header})"),
                ))
            }
        }
    }
    Ok((
        columns,
        lines.map(|(no, l)| (no, csv::split_line(l))).collect(),
    ))
}

fn field<'a>(
    fields: &'a [String],
    col: usize,
    name: &str,
    path: &Path,
    line: usize,
) -> Result<&'a str, WorkloadError> {
    fields
        .get(col)
        .map(|s| s.trim())
        .ok_or_else(|| WorkloadError::malformed(path, line, format!("missing `{name}` field")))
}

fn parse_count(s: &str, name: &str, path: &Path, line: usize) -> Result<u64, WorkloadError> {
    // Some exports write counts as floats ("12.0").
    s.parse::<u64>()
        .ok()
        .or_else(|| {
            s.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0 && v.fract() == 0.0)
                .map(|v| v as u64)
        })
        .ok_or_else(|| {
            WorkloadError::malformed(path, line, format!("`{name}` is not a token count: {s:?}"))
        })
}

fn parse_azure(text: &str, path: &Path) -> Result<Vec<RawEntry>, WorkloadError> {
    let names = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"];
    let (cols, rows) = csv_rows(text, path, &names)?;
    let mut out = Vec::new();
    for (line, fields) in rows {
        let ts = field(&fields, cols[0], names[0], path, line)?;
        let at_ns = inspect::rows::azure_ns(ts).map(i128::from).ok_or_else(|| {
            WorkloadError::malformed(
                path,
                line,
                format!("TIMESTAMP is not `YYYY-MM-DD HH:MM:SS[.fraction][+HH:MM]`: {ts:?}"),
            )
        })?;
        out.push(RawEntry {
            at_ns,
            input_tokens: parse_count(
                field(&fields, cols[1], names[1], path, line)?,
                names[1],
                path,
                line,
            )?,
            output_tokens: parse_count(
                field(&fields, cols[2], names[2], path, line)?,
                names[2],
                path,
                line,
            )?,
            block_hashes: Vec::new(),
        });
    }
    Ok(out)
}

fn parse_burstgpt(text: &str, path: &Path) -> Result<Vec<RawEntry>, WorkloadError> {
    let names = ["Timestamp", "Request tokens", "Response tokens"];
    let (cols, rows) = csv_rows(text, path, &names)?;
    let mut out = Vec::new();
    for (line, fields) in rows {
        let ts = field(&fields, cols[0], names[0], path, line)?;
        let secs: f64 = ts
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| {
                WorkloadError::malformed(path, line, format!("Timestamp is not seconds: {ts:?}"))
            })?;
        out.push(RawEntry {
            at_ns: (secs * NS_PER_S as f64).round() as i128,
            input_tokens: parse_count(
                field(&fields, cols[1], names[1], path, line)?,
                names[1],
                path,
                line,
            )?,
            output_tokens: parse_count(
                field(&fields, cols[2], names[2], path, line)?,
                names[2],
                path,
                line,
            )?,
            block_hashes: Vec::new(),
        });
    }
    Ok(out)
}

#[derive(Deserialize)]
struct MooncakeLine {
    timestamp: f64,
    input_length: u64,
    output_length: u64,
    #[serde(default)]
    hash_ids: Vec<u64>,
}

fn parse_mooncake(
    text: &str,
    path: &Path,
    ns_per_unit: u64,
) -> Result<Vec<RawEntry>, WorkloadError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let m: MooncakeLine = serde_json::from_str(line).map_err(|e| {
            WorkloadError::malformed(
                path,
                i + 1,
                format!(
                    "expected {{\"timestamp\": ms, \"input_length\": n, \"output_length\": n, \
                     \"hash_ids\": [..]}}: {e}"
                ),
            )
        })?;
        if !m.timestamp.is_finite() || m.timestamp < 0.0 {
            return Err(WorkloadError::malformed(
                path,
                i + 1,
                format!("timestamp must be non-negative, got {}", m.timestamp),
            ));
        }
        let seconds = m.timestamp * ns_per_unit as f64 / 1e9;
        if seconds > timed::MAX_TRACE_SECONDS {
            return Err(WorkloadError::malformed(
                path,
                i + 1,
                format!(
                    "timestamp {} is {seconds:e} s (allowed: up to {:e} s)",
                    m.timestamp,
                    timed::MAX_TRACE_SECONDS
                ),
            ));
        }
        for (name, n) in [
            ("input_length", m.input_length),
            ("output_length", m.output_length),
        ] {
            if n > timed::MAX_ROW_TOKENS {
                return Err(WorkloadError::malformed(
                    path,
                    i + 1,
                    format!(
                        "{name} {n} is out of range (allowed: 0 to {} tokens)",
                        timed::MAX_ROW_TOKENS
                    ),
                ));
            }
        }
        out.push(RawEntry {
            at_ns: (m.timestamp * ns_per_unit as f64).round() as i128,
            input_tokens: m.input_length,
            output_tokens: m.output_length,
            block_hashes: m.hash_ids,
        });
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn p() -> &'static Path {
        Path::new("fixture")
    }

    #[test]
    fn azure_fixture() {
        let text = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
                    2023-11-16 18:17:04.0319600,3180,8\n\
                    2023-11-16 18:17:03.9799600,4808,10\n\
                    2023-11-16 18:18:03.9799600,110,27\n";
        assert_eq!(TraceFormat::detect(text), Some(TraceFormat::Azure));
        let e = parse_trace(text, None, p()).unwrap();
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].offset_ns, 0);
        assert_eq!((e[0].input_tokens, e[0].output_tokens), (4808, 10));
        assert_eq!(e[1].offset_ns, 52_000_000);
        assert_eq!(e[2].offset_ns, 60_000_000_000);
        assert!(e.iter().all(|x| x.block_hashes.is_empty()));
    }

    #[test]
    fn azure_2024_timestamps_with_a_utc_offset_parse() {
        let text = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
                    2024-05-10 00:00:00.004570+00:00,1024,16\n\
                    2024-05-10 02:00:01.004570+02:00,512,8\n";
        let e = parse_trace(text, None, p()).unwrap();
        assert_eq!(e[0].offset_ns, 0);
        assert_eq!(e[1].offset_ns, 1_000_000_000);
        assert_eq!(e[1].input_tokens, 512);
    }

    #[test]
    fn json_lines_timestamps_written_as_decimals_are_seconds_integers_milliseconds() {
        let vllm = "{\"timestamp\": 0.0, \"input_length\": 7, \"output_length\": 1}\n\
                    {\"timestamp\": 0.4, \"input_length\": 7, \"output_length\": 1}\n";
        assert_eq!(TraceFormat::detect(vllm), Some(TraceFormat::Vllm));
        let e = parse_trace(vllm, None, p()).unwrap();
        assert_eq!(e[1].offset_ns, 400_000_000);
        // A decimal far down the file still counts (within DETECT_LINES).
        let mut late =
            "{\"timestamp\": 1, \"input_length\": 7, \"output_length\": 1}\n".repeat(500);
        late.push_str("{\"timestamp\": 501.5, \"input_length\": 7, \"output_length\": 1}\n");
        assert_eq!(TraceFormat::detect(&late), Some(TraceFormat::Vllm));
        let mooncake = "{\"timestamp\": 0, \"input_length\": 7, \"output_length\": 1}\n\
                        {\"timestamp\": 350, \"input_length\": 7, \"output_length\": 1}\n";
        assert_eq!(TraceFormat::detect(mooncake), Some(TraceFormat::Mooncake));
        // Another label: the detector reads that field.
        assert_eq!(
            TraceFormat::detect_lines(["{\"at\": 1.5}"].into_iter(), "at"),
            Some(TraceFormat::Vllm)
        );
    }

    #[test]
    fn burstgpt_fixture() {
        let text = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
                    5,ChatGPT,472,18,490,Conversation log\n\
                    45,GPT-4,1087,0,1087,Conversation log\n\
                    118.5,ChatGPT,417,245,662,API log\n";
        assert_eq!(TraceFormat::detect(text), Some(TraceFormat::BurstGpt));
        let e = parse_trace(text, None, p()).unwrap();
        assert_eq!(
            e.iter().map(|x| x.offset_ns).collect::<Vec<_>>(),
            [0, 40_000_000_000, 113_500_000_000]
        );
        assert_eq!(e[1].input_tokens, 1087);
        assert_eq!(e[1].output_tokens, 0);
    }

    #[test]
    fn mooncake_fixture() {
        let text = "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 6, \"hash_ids\": [0, 1]}\n\
                    \n\
                    {\"timestamp\": 40, \"input_length\": 600, \"output_length\": 3, \"hash_ids\": [0, 2]}\n";
        assert_eq!(TraceFormat::detect(text), Some(TraceFormat::Mooncake));
        let e = parse_trace(text, None, p()).unwrap();
        assert_eq!(e[1].offset_ns, 40_000_000);
        assert_eq!(e[1].block_hashes, vec![0, 2]);
    }

    #[test]
    fn errors_name_file_and_line() {
        let text = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
                    2023-11-16 18:17:04.0319600,3180,8\n\
                    2023-11-16 18:17:04.0319600,lots,8\n";
        let err = parse_trace(text, None, Path::new("azure.csv"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("azure.csv:3:"), "{err}");
        assert!(err.contains("ContextTokens"), "{err}");

        let text = "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n{oops\n";
        let err = parse_trace(text, None, Path::new("m.jsonl"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("m.jsonl:2:"), "{err}");

        let err = parse_trace("a,b,c\n1,2,3\n", None, Path::new("x.csv"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown trace format"), "{err}");

        let err = parse_trace(
            "TIMESTAMP,ContextTokens\n",
            Some(TraceFormat::Azure),
            Path::new("y.csv"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("GeneratedTokens"), "{err}");
    }
}
