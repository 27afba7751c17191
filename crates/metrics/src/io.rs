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

/// The records of a JSONL file, and what was left out.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonlRecords {
    /// Every complete record, in file order.
    pub records: Vec<RequestRecord>,
    /// Bytes of a final line that had no newline and did not parse: the record a killed writer
    /// was cut off in the middle of. 0 when the file ends cleanly.
    pub partial_tail_bytes: usize,
}

impl JsonlRecords {
    /// Whether a cut-off final line was dropped.
    pub fn had_partial_tail(&self) -> bool {
        self.partial_tail_bytes > 0
    }
}

/// Read a JSONL file of records, one per line (blank lines are skipped). An error names the
/// file and the line. A final line without newline that does not parse (a writer killed in the
/// middle of a record) is dropped; [`read_jsonl_counted`] tells the caller when that happened.
pub fn read_jsonl(path: impl AsRef<Path>) -> Result<Vec<RequestRecord>, MetricsError> {
    read_jsonl_counted(path).map(|read| read.records)
}

/// [`read_jsonl`], also reporting a dropped partial final line.
pub fn read_jsonl_counted(path: impl AsRef<Path>) -> Result<JsonlRecords, MetricsError> {
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
        // Only the last line can lack its newline; a complete line always has one.
        let cut_off = buf.last() != Some(&b'\n');
        let parsed = match std::str::from_utf8(&buf) {
            Ok(text) if text.trim().is_empty() => continue,
            Ok(text) => serde_json::from_str(text.trim()).map_err(|source| MetricsError::Parse {
                path: path.to_path_buf(),
                line,
                source,
            }),
            Err(_) => Err(MetricsError::Utf8 {
                path: path.to_path_buf(),
                line,
            }),
        };
        match parsed {
            Ok(record) => records.push(record),
            Err(_) if cut_off => {
                return Ok(JsonlRecords {
                    records,
                    partial_tail_bytes: buf.len(),
                })
            }
            Err(e) => return Err(e),
        }
    }
    Ok(JsonlRecords {
        records,
        partial_tail_bytes: 0,
    })
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

    #[test]
    fn partial_final_line_is_dropped_and_counted() {
        let a = serde_json::to_string(&record(0, 0, &[100], 1)).unwrap();
        let b = serde_json::to_string(&record(1, 0, &[100], 1)).unwrap();
        // Cut the second record at every byte: the first always survives, the tail is counted.
        for cut in 1..b.len() {
            let text = format!("{a}\n{}", &b[..cut]);
            let path = temp_file("cut.jsonl", text.as_bytes());
            let read = read_jsonl_counted(&path).unwrap();
            assert_eq!(read.records.len(), 1, "cut at {cut}");
            assert_eq!(read.partial_tail_bytes, cut, "cut at {cut}");
            assert!(read.had_partial_tail());
            assert_eq!(read_jsonl(&path).unwrap().len(), 1);
        }
        // A complete final record without its newline still counts as a record.
        let path = temp_file("nonl.jsonl", format!("{a}\n{b}").as_bytes());
        let read = read_jsonl_counted(&path).unwrap();
        assert_eq!(read.records.len(), 2);
        assert!(!read.had_partial_tail());
    }

    #[test]
    fn partial_final_line_cut_inside_a_utf8_character_is_dropped() {
        let mut r = record(0, 0, &[100], 1);
        r.text = Some("héllo".to_owned());
        let a = serde_json::to_string(&r).unwrap();
        let cut = a.find('é').unwrap() + 1;
        let mut bytes = format!("{a}\n").into_bytes();
        bytes.extend_from_slice(&a.as_bytes()[..cut]);
        let path = temp_file("cut-utf8-raw.jsonl", &bytes);
        let read = read_jsonl_counted(&path).unwrap();
        assert_eq!(read.records.len(), 1);
        assert_eq!(read.partial_tail_bytes, cut);
    }

    #[test]
    fn malformed_line_before_the_end_still_errors() {
        let a = serde_json::to_string(&record(0, 0, &[100], 1)).unwrap();
        // A complete (newline-terminated) bad last line is not a cut-off write.
        let path = temp_file("bad-last.jsonl", format!("{a}\n{{\"id\"\n").as_bytes());
        assert!(matches!(
            read_jsonl(&path).unwrap_err(),
            MetricsError::Parse { line: 2, .. }
        ));
        // A partial line followed by more lines is corruption, not a cut.
        let path = temp_file("bad-middle.jsonl", format!("{{\"id\"\n{a}").as_bytes());
        let err = read_jsonl(&path).unwrap_err();
        assert!(matches!(err, MetricsError::Parse { line: 1, .. }), "{err}");
        assert!(err.to_string().contains("bad-middle.jsonl:1:"), "{err}");
    }
}
