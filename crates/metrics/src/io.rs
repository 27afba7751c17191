//! Reading per-request records back (`*.requests.jsonl`). Writing belongs to the collector.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use crate::record::RequestRecord;

/// A problem reading records.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line is not a valid record.
    #[error("{path}:{line}: not a valid request record: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// What was wrong.
        source: serde_json::Error,
    },
    /// A line is not UTF-8.
    #[error("{path}:{line}: not valid UTF-8")]
    Utf8 {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
    },
}

/// Read a JSONL file of records, one per line (blank lines are skipped). An error names the
/// file and the line.
pub fn read_jsonl(path: impl AsRef<Path>) -> Result<Vec<RequestRecord>, MetricsError> {
    let path = path.as_ref();
    let io_err = |source| MetricsError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut reader = BufReader::new(File::open(path).map_err(io_err)?);
    let mut records = Vec::new();
    let mut buf = Vec::new();
    let mut line = 0u64;
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf).map_err(io_err)? == 0 {
            break;
        }
        line += 1;
        let Ok(text) = std::str::from_utf8(&buf) else {
            return Err(MetricsError::Utf8 {
                path: path.to_path_buf(),
                line,
            });
        };
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let record = serde_json::from_str(text).map_err(|source| MetricsError::Parse {
            path: path.to_path_buf(),
            line,
            source,
        })?;
        records.push(record);
    }
    Ok(records)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::derived::tests::record;
    use std::io::Write;

    fn temp_file(name: &str, content: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("servebench-metrics-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::File::create(&path)
            .unwrap()
            .write_all(content)
            .unwrap();
        path
    }

    #[test]
    fn reads_records_and_skips_blank_lines() {
        let a = record(0, 0, &[100, 200], 2);
        let b = record(1, 5, &[300], 1);
        let text = format!(
            "{}\n\n{}\n",
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&b).unwrap()
        );
        let path = temp_file("ok.jsonl", text.as_bytes());
        assert_eq!(read_jsonl(&path).unwrap(), vec![a, b]);
    }

    #[test]
    fn malformed_line_names_file_and_line() {
        let a = serde_json::to_string(&record(0, 0, &[100], 1)).unwrap();
        let path = temp_file("bad.jsonl", format!("{a}\n{a}\n{{\"id\": 3}}\n").as_bytes());
        let err = read_jsonl(&path).unwrap_err();
        assert!(matches!(err, MetricsError::Parse { line: 3, .. }), "{err}");
        let msg = err.to_string();
        assert!(msg.contains("bad.jsonl:3:"), "{msg}");

        let path = temp_file("utf8.jsonl", b"\xff\n");
        assert!(matches!(
            read_jsonl(&path).unwrap_err(),
            MetricsError::Utf8 { line: 1, .. }
        ));
        let missing = std::env::temp_dir().join("servebench-no-such-file.jsonl");
        assert!(read_jsonl(&missing)
            .unwrap_err()
            .to_string()
            .contains("cannot read"));
    }
}
