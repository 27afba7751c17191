//! A trace file's lines as its readers take them: numbered from 1 (blank lines count, so error
//! messages name the line an editor shows), UTF-8 checked, trimmed, blank ones skipped.

use std::io::BufRead;
use std::path::Path;

use crate::error::WorkloadError;

/// Calls `each(line_no, line)` for every non-blank line, streaming (one line in memory).
pub(crate) fn for_each_line(
    mut reader: impl BufRead,
    path: &Path,
    mut each: impl FnMut(usize, &str) -> Result<(), WorkloadError>,
) -> Result<(), WorkloadError> {
    let mut buf = Vec::new();
    let mut line_no = 0usize;
    loop {
        buf.clear();
        let read = reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| WorkloadError::io(path, e))?;
        if read == 0 {
            return Ok(());
        }
        line_no += 1;
        let line = std::str::from_utf8(&buf)
            .map_err(|_| WorkloadError::malformed(path, line_no, "line is not UTF-8 text"))?;
        let line = if line_no == 1 {
            crate::text_file::strip_bom(line)
        } else {
            line
        }
        .trim();
        if !line.is_empty() {
            each(line_no, line)?;
        }
    }
}
