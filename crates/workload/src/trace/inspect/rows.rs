//! Reading a trace one line at a time, so a file of millions of rows never sits in memory.
//!
//! The same formats as [`crate::trace::parse_trace`], parsed with its field rules; the
//! difference is that rows come out in file order, one by one, with their line numbers,
//! and a bad field names itself.

use std::io::BufRead;
use std::path::Path;

use serde_json::Value;
use servebench_metrics::units::{NS_PER_MS, NS_PER_S};

use crate::error::WorkloadError;
use crate::trace::lines::for_each_line;
use crate::trace::{csv, datetime, parse_count, TraceFormat, TraceLabels};

/// One trace row as read: its arrival as an absolute timestamp, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    /// Arrival in ns on the trace's own clock (epoch for Azure, zero-based otherwise).
    pub at_ns: i64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub block_hashes: Vec<u64>,
}

/// Where the columns a CSV trace needs sit in each row.
struct CsvColumns {
    timestamp: usize,
    input: usize,
    output: usize,
    names: [&'static str; 3],
}

/// Streams the rows of a trace: `format` (or the one the first non-empty line shows), then
/// every row to `each`. Returns the format read.
pub(crate) fn for_each_row(
    reader: impl BufRead,
    path: &Path,
    format: Option<TraceFormat>,
    mut each: impl FnMut(Row),
) -> Result<TraceFormat, WorkloadError> {
    let mut state = State::Start;
    for_each_line(reader, path, |line_no, line| {
        match &state {
            State::Start => {
                let f = format
                    .or_else(|| TraceFormat::detect(line))
                    .ok_or_else(|| {
                        WorkloadError::malformed(
                            path,
                            line_no,
                            "unknown trace format: expected Mooncake JSON lines or a CSV header \
                             with ContextTokens,GeneratedTokens (Azure) or Request tokens,Response \
                             tokens (BurstGPT)",
                        )
                    })?;
                state = match f {
                    TraceFormat::Mooncake | TraceFormat::Vllm => {
                        each(json_row_ns(f, line, path, line_no)?);
                        State::Json(f)
                    }
                    TraceFormat::Azure => State::Csv(
                        f,
                        csv_columns(
                            line,
                            ["TIMESTAMP", "ContextTokens", "GeneratedTokens"],
                            path,
                            line_no,
                        )?,
                    ),
                    TraceFormat::BurstGpt => State::Csv(
                        f,
                        csv_columns(
                            line,
                            ["Timestamp", "Request tokens", "Response tokens"],
                            path,
                            line_no,
                        )?,
                    ),
                };
            }
            State::Json(f) => each(json_row_ns(*f, line, path, line_no)?),
            State::Csv(f, cols) => each(csv_row(*f, cols, line, path, line_no)?),
        }
        Ok(())
    })?;
    match state {
        State::Start => Err(WorkloadError::Empty {
            path: path.to_path_buf(),
            reason: "empty trace: the file has no lines".to_owned(),
        }),
        State::Json(f) => Ok(f),
        State::Csv(f, _) => Ok(f),
    }
}

/// What the lines read so far established.
enum State {
    /// Only blank lines yet.
    Start,
    /// JSON lines: Mooncake (ms timestamps) or vLLM's timed trace (seconds).
    Json(TraceFormat),
    /// A CSV format, its header read.
    Csv(TraceFormat, CsvColumns),
}

fn csv_columns(
    header: &str,
    names: [&'static str; 3],
    path: &Path,
    line: usize,
) -> Result<CsvColumns, WorkloadError> {
    let found: Vec<String> = csv::split_line(header)
        .iter()
        .map(|c| c.trim().to_ascii_lowercase())
        .collect();
    let mut idx = [0usize; 3];
    for (slot, name) in idx.iter_mut().zip(names) {
        *slot = found
            .iter()
            .position(|n| *n == name.to_ascii_lowercase())
            .ok_or_else(|| {
                WorkloadError::malformed(
                    path,
                    line,
                    format!("CSV header has no `{name}` column (found: {header})"),
                )
            })?;
    }
    Ok(CsvColumns {
        timestamp: idx[0],
        input: idx[1],
        output: idx[2],
        names,
    })
}

fn csv_row(
    format: TraceFormat,
    cols: &CsvColumns,
    line: &str,
    path: &Path,
    line_no: usize,
) -> Result<Row, WorkloadError> {
    let fields = csv::split_line(line);
    let get = |col: usize, name: &str| {
        fields.get(col).map(|s| s.trim()).ok_or_else(|| {
            WorkloadError::malformed(path, line_no, format!("missing `{name}` field"))
        })
    };
    let [ts_name, in_name, out_name] = cols.names;
    let ts = get(cols.timestamp, ts_name)?;
    let at_ns = match format {
        TraceFormat::Azure => azure_ns(ts).ok_or_else(|| {
            WorkloadError::malformed(
                path,
                line_no,
                format!("`{ts_name}` is not `YYYY-MM-DD HH:MM:SS[.fraction]`: {ts:?}"),
            )
        })?,
        _ => ts
            .parse::<f64>()
            .ok()
            .and_then(|s| scaled_ns(s, NS_PER_S))
            .ok_or_else(|| {
                WorkloadError::malformed(
                    path,
                    line_no,
                    format!("`{ts_name}` is not a non-negative number of seconds: {ts:?}"),
                )
            })?,
    };
    Ok(Row {
        at_ns,
        input_tokens: parse_count(get(cols.input, in_name)?, in_name, path, line_no)?,
        output_tokens: parse_count(get(cols.output, out_name)?, out_name, path, line_no)?,
        block_hashes: Vec::new(),
    })
}

/// An Azure timestamp in ns since the epoch, UTC. The 2023 traces write naive date-times
/// (`2023-11-16 18:17:03.9799600`), the 2024 ones add an offset
/// (`2024-05-10 00:00:00.009930+00:00`); the offset is applied so mixed offsets still order.
pub(crate) fn azure_ns(ts: &str) -> Option<i64> {
    let (local, offset_s) = split_utc_offset(ts.trim())?;
    let ns = datetime::parse_ns(local)? - i128::from(offset_s) * i128::from(NS_PER_S);
    i64::try_from(ns).ok()
}

/// A date-time and its trailing UTC offset in seconds (`Z`, `±HH:MM`, `±HHMM`, `±HH`; none
/// means UTC).
fn split_utc_offset(ts: &str) -> Option<(&str, i64)> {
    if let Some(rest) = ts.strip_suffix(['Z', 'z']) {
        return Some((rest, 0));
    }
    // Only the time part can hold the offset's sign: the date has hyphens of its own.
    let time_at = ts.find([' ', 'T']).map_or(ts.len(), |i| i + 1);
    let Some(sign_at) = ts[time_at..].rfind(['+', '-']).map(|i| i + time_at) else {
        return Some((ts, 0));
    };
    let digits: String = ts[sign_at + 1..].chars().filter(|c| *c != ':').collect();
    if !(digits.len() == 2 || digits.len() == 4) || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let hours: i64 = digits[..2].parse().ok()?;
    let minutes: i64 = if digits.len() == 4 {
        digits[2..].parse().ok()?
    } else {
        0
    };
    if hours > 23 || minutes > 59 {
        return None;
    }
    let sign = if ts[sign_at..].starts_with('-') {
        -1
    } else {
        1
    };
    Some((&ts[..sign_at], sign * (hours * 3600 + minutes * 60)))
}

/// `value` units of `ns_per_unit` ns each, if it is a finite, non-negative time that fits.
fn scaled_ns(value: f64, ns_per_unit: u64) -> Option<i64> {
    let ns = (value * ns_per_unit as f64).round();
    // i64::MAX as f64 rounds up to 2^63, which itself does not fit: compare strictly.
    (value.is_finite() && value >= 0.0 && ns < i64::MAX as f64).then_some(ns as i64)
}

/// A JSON-lines row with the default labels, its timestamp in ns: Mooncake's are
/// milliseconds, vLLM's timed trace's seconds.
fn json_row_ns(
    format: TraceFormat,
    line: &str,
    path: &Path,
    line_no: usize,
) -> Result<Row, WorkloadError> {
    let unit = if format == TraceFormat::Mooncake {
        NS_PER_MS
    } else {
        NS_PER_S
    };
    let r = json_row(line, path, line_no, &TraceLabels::default())?;
    let at_ns = scaled_ns(r.timestamp, unit).ok_or_else(|| {
        WorkloadError::malformed(
            path,
            line_no,
            format!("field `timestamp` is too large: {}", r.timestamp),
        )
    })?;
    Ok(Row {
        at_ns,
        input_tokens: r.input_tokens,
        output_tokens: r.output_tokens,
        block_hashes: r.block_hashes,
    })
}

/// One JSON-lines trace row as written: the timestamp in the file's own unit.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JsonRow {
    /// Non-negative and finite.
    pub timestamp: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub block_hashes: Vec<u64>,
}

/// Parses one JSON-lines trace row whose fields carry the names in `labels`.
pub(crate) fn json_row(
    line: &str,
    path: &Path,
    line_no: usize,
    labels: &TraceLabels,
) -> Result<JsonRow, WorkloadError> {
    let bad = |msg: String| WorkloadError::malformed(path, line_no, msg);
    let value: Value = serde_json::from_str(line).map_err(|e| {
        bad(format!(
            "not a JSON object {{\"{}\": t, \"{}\": n, \"{}\": n, \"{}\": [..]}}: {e}",
            labels.timestamp, labels.input_length, labels.output_length, labels.hash_ids
        ))
    })?;
    let obj = value
        .as_object()
        .ok_or_else(|| bad("expected a JSON object".to_owned()))?;
    let field = |name: &str| {
        obj.get(name)
            .ok_or_else(|| bad(format!("missing field `{name}`")))
    };
    let ts = field(&labels.timestamp)?;
    let timestamp = ts
        .as_f64()
        .filter(|t| t.is_finite() && *t >= 0.0)
        .ok_or_else(|| {
            bad(format!(
                "field `{}`: expected a non-negative number, got {ts}",
                labels.timestamp
            ))
        })?;
    let count = |name: &str| -> Result<u64, WorkloadError> {
        let v = field(name)?;
        v.as_u64()
            .or_else(|| {
                v.as_f64()
                    .filter(|x| {
                        x.is_finite() && *x >= 0.0 && x.fract() == 0.0 && *x < 2f64.powi(64)
                    })
                    .map(|x| x as u64)
            })
            .ok_or_else(|| bad(format!("field `{name}`: expected a token count, got {v}")))
    };
    let input_tokens = count(&labels.input_length)?;
    let output_tokens = count(&labels.output_length)?;
    let hash_name = &labels.hash_ids;
    let block_hashes = match obj.get(hash_name.as_str()) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(ids)) => ids
            .iter()
            .map(|id| {
                id.as_u64().ok_or_else(|| {
                    bad(format!(
                        "field `{hash_name}`: expected non-negative integers, got {id}"
                    ))
                })
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(bad(format!(
                "field `{hash_name}`: expected an array of integers, got {other}"
            )))
        }
    };
    Ok(JsonRow {
        timestamp,
        input_tokens,
        output_tokens,
        block_hashes,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn rows(text: &str) -> Result<(TraceFormat, Vec<Row>), WorkloadError> {
        let mut out = Vec::new();
        let f = for_each_row(text.as_bytes(), Path::new("t.txt"), None, |r| out.push(r))?;
        Ok((f, out))
    }

    #[test]
    fn reads_each_format_in_file_order() {
        let (f, r) = rows(
            "TIMESTAMP,ContextTokens,GeneratedTokens\n\
             2023-11-16 18:17:04.0319600,3180,8\n\
             \n\
             2023-11-16 18:17:03.9799600,4808,10\n",
        )
        .unwrap();
        assert_eq!(f, TraceFormat::Azure);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].at_ns - r[1].at_ns, 52_000_000);
        assert_eq!((r[1].input_tokens, r[1].output_tokens), (4808, 10));

        let (f, r) = rows(
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
             5,ChatGPT,472,18,490,Conversation log\n\
             118.5,GPT-4,417,245,662,API log\n",
        )
        .unwrap();
        assert_eq!(f, TraceFormat::BurstGpt);
        assert_eq!(r[1].at_ns, 118_500_000_000);

        let (f, r) = rows(
            "{\"timestamp\": 40, \"input_length\": 600, \"output_length\": 3, \"hash_ids\": [0, 2]}\n\
             {\"timestamp\": 7.5, \"input_length\": 6, \"output_length\": 1}\n",
        )
        .unwrap();
        assert_eq!(f, TraceFormat::Mooncake);
        assert_eq!(r[0].block_hashes, vec![0, 2]);
        assert_eq!(r[1].at_ns, 7_500_000);
        assert!(r[1].block_hashes.is_empty());
    }

    #[test]
    fn a_bad_field_is_named_with_file_and_line() {
        let err = rows(
            "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n\
             {\"timestamp\": 1, \"input_length\": \"many\", \"output_length\": 1}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("t.txt:2:"), "{err}");
        assert!(err.contains("input_length"), "{err}");

        let err = rows("{\"timestamp\": -3, \"input_length\": 5, \"output_length\": 1}\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("t.txt:1:") && err.contains("timestamp"),
            "{err}"
        );

        let err = rows("{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1, -2]}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("hash_ids"), "{err}");

        let err = rows("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,5,1\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("t.txt:2:") && err.contains("TIMESTAMP"),
            "{err}"
        );

        let err = rows("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:04,5\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("GeneratedTokens"), "{err}");
    }

    #[test]
    fn azure_2024_timestamps_with_utc_offsets_read() {
        let (_, r) = rows(
            "TIMESTAMP,ContextTokens,GeneratedTokens\n\
             2024-05-10 00:00:00.009930+00:00,100,10\n\
             2024-05-10 02:00:01.009930+02:00,200,20\n\
             2024-05-10 00:00:02Z,300,30\n\
             2024-05-09T23:30:03-0030,400,40\n",
        )
        .unwrap();
        let base = r[0].at_ns;
        assert_eq!(
            r.iter().map(|x| x.at_ns - base).collect::<Vec<_>>(),
            [0, 1_000_000_000, 1_990_070_000, 2_990_070_000]
        );
        let err = rows("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00+25:00,1,1\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("TIMESTAMP"), "{err}");
    }

    #[test]
    fn an_empty_file_says_so() {
        for text in ["", "\n\n  \n"] {
            let err = rows(text).unwrap_err();
            assert!(matches!(err, WorkloadError::Empty { .. }), "{err}");
            assert!(err.to_string().contains("empty"), "{err}");
        }
    }

    #[test]
    fn non_utf8_lines_are_errors() {
        let mut out = Vec::new();
        let err = for_each_row(
            &b"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n\xff\xfe\n"[..],
            Path::new("b.jsonl"),
            None,
            |r| out.push(r),
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("b.jsonl:2:"), "{err}");
    }
}
