//! Rows of a data file as JSON objects: JSON Lines, a JSON list of objects, or Parquet (read
//! row by row, nested lists and structs as JSON arrays and objects).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::error::WorkloadError;

/// One row and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Its columns.
    pub fields: Map<String, Value>,
    /// Index of its file in the list that was read.
    pub file: usize,
    /// 1-based line of a JSON Lines file, or 1-based row of a JSON list or Parquet file.
    pub line: usize,
}

/// A row's columns with its 1-based line or position in its file.
pub type Numbered = (usize, Map<String, Value>);

/// Reads every row of `files`, in order.
pub(crate) fn read_all(files: &[PathBuf]) -> Result<Vec<Row>, WorkloadError> {
    let mut rows = Vec::new();
    for (index, path) in files.iter().enumerate() {
        let is_parquet = path.extension().and_then(|e| e.to_str()) == Some("parquet");
        let bytes = std::fs::read(path).map_err(|e| WorkloadError::io(path, e))?;
        let file_rows = if is_parquet {
            parse_parquet(bytes.into(), path)?
        } else {
            let text = String::from_utf8(bytes).map_err(|e| WorkloadError::Format {
                path: path.clone(),
                message: format!("not UTF-8 text: {e}"),
            })?;
            parse_json(&text, path)?
        };
        rows.extend(file_rows.into_iter().map(|(line, fields)| Row {
            fields,
            file: index,
            line,
        }));
    }
    Ok(rows)
}

/// Rows of a JSON Lines file or of a JSON list (when the text starts with `[`), each with its
/// line (JSON Lines) or 1-based position (list). Blank lines are skipped.
pub fn parse_json(text: &str, path: &Path) -> Result<Vec<Numbered>, WorkloadError> {
    if text.trim_start().starts_with('[') {
        let list: Vec<Value> = serde_json::from_str(text).map_err(|e| {
            WorkloadError::malformed(path, e.line(), format!("not a JSON list of rows: {e}"))
        })?;
        return list
            .into_iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::Object(m) => Ok((i + 1, m)),
                other => Err(WorkloadError::malformed(
                    path,
                    i + 1,
                    format!(
                        "row {} is {}, not an object of columns",
                        i + 1,
                        kind(&other)
                    ),
                )),
            })
            .collect();
    }
    let mut rows = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        if raw.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(raw) {
            Ok(Value::Object(m)) => rows.push((line, m)),
            Ok(other) => {
                return Err(WorkloadError::malformed(
                    path,
                    line,
                    format!("{}, not a JSON object of columns", kind(&other)),
                ))
            }
            Err(e) => {
                return Err(WorkloadError::malformed(
                    path,
                    line,
                    format!("not a JSON object: {e}"),
                ))
            }
        }
    }
    Ok(rows)
}

/// Rows of a Parquet file, with their 1-based position.
pub fn parse_parquet(bytes: bytes::Bytes, path: &Path) -> Result<Vec<Numbered>, WorkloadError> {
    use parquet::file::reader::{FileReader, SerializedFileReader};

    let unreadable = |message: String| WorkloadError::Format {
        path: path.to_path_buf(),
        message,
    };
    // The reader trusts lengths and offsets written in the file; a damaged file must be an
    // error here, never a crash of the whole run.
    let read = std::panic::catch_unwind(|| -> Result<Vec<Value>, String> {
        let reader = SerializedFileReader::new(bytes).map_err(|e| e.to_string())?;
        let iter = reader.get_row_iter(None).map_err(|e| e.to_string())?;
        iter.map(|row| row.map(|r| r.to_json_value()).map_err(|e| e.to_string()))
            .collect()
    });
    let values = match read {
        Ok(Ok(values)) => values,
        Ok(Err(e)) => return Err(unreadable(parquet_advice(&e))),
        Err(_) => {
            return Err(unreadable(
                "not a readable Parquet file (damaged)".to_owned(),
            ))
        }
    };
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::Object(m) => Ok((i + 1, m)),
            other => Err(WorkloadError::malformed(
                path,
                i + 1,
                format!(
                    "row {} is {}, not an object of columns",
                    i + 1,
                    kind(&other)
                ),
            )),
        })
        .collect()
}

/// The reader's message, with the way out when the file uses a codec not built in.
fn parquet_advice(e: &str) -> String {
    if e.contains("Disabled feature") || e.to_lowercase().contains("codec") {
        format!(
            "{e}; servebench reads uncompressed and Snappy Parquet: convert the file to JSON \
             Lines, e.g. python -c \"import pandas as p; p.read_parquet('IN.parquet')\
             .to_json('OUT.jsonl', orient='records', lines=True)\""
        )
    } else {
        format!("not a readable Parquet file: {e}")
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_and_lists_keep_their_positions() {
        let p = Path::new("d.jsonl");
        let rows = parse_json("{\"a\": 1}\n\n{\"a\": 2}\n", p).unwrap();
        assert_eq!(rows.iter().map(|(l, _)| *l).collect::<Vec<_>>(), [1, 3]);
        let rows = parse_json(" [{\"a\": 1}, {\"a\": 2}]", p).unwrap();
        assert_eq!(rows.iter().map(|(l, _)| *l).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn bad_lines_name_file_and_line() {
        let p = Path::new("d.jsonl");
        let err = parse_json("{\"a\": 1}\n{\"a\": \n", p)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("d.jsonl:2: not a JSON object"), "{err}");
        let err = parse_json("{}\n[1]\n", p).unwrap_err().to_string();
        assert!(err.starts_with("d.jsonl:2: a list"), "{err}");
        let err = parse_json("[{}, 3]", p).unwrap_err().to_string();
        assert!(err.contains("row 2 is a number"), "{err}");
    }

    #[test]
    fn garbage_is_not_parquet() {
        let err = parse_parquet(
            bytes::Bytes::from_static(b"PAR1 not really"),
            Path::new("x.parquet"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("x.parquet: "), "{err}");
    }
}
