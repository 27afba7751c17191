//! Reading a dataset or trace as text. Editors on Windows (and Excel's "CSV UTF-8") start a
//! file with a UTF-8 byte-order mark; as the first character of a JSON line or a CSV header it
//! made every reader fail with "expected value at line 1 column 1". It is not content: it is
//! dropped here, once for every reader.

use std::path::Path;

use crate::error::WorkloadError;

/// The UTF-8 byte-order mark.
const BOM: char = '\u{feff}';

/// `text` without a leading byte-order mark.
pub(crate) fn strip_bom(text: &str) -> &str {
    text.strip_prefix(BOM).unwrap_or(text)
}

/// The file at `path` as text, without a leading byte-order mark.
pub(crate) fn read_text(path: &Path) -> Result<String, WorkloadError> {
    let mut text = std::fs::read_to_string(path).map_err(|e| WorkloadError::io(path, e))?;
    if text.starts_with(BOM) {
        text.drain(..BOM.len_utf8());
    }
    Ok(text)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_order_mark_is_not_content() {
        assert_eq!(strip_bom("\u{feff}{\"a\":1}"), "{\"a\":1}");
        assert_eq!(strip_bom("{\"a\":1}"), "{\"a\":1}");
        let p = std::env::temp_dir().join(format!("servebench-bom-{}.jsonl", std::process::id()));
        std::fs::write(&p, "\u{feff}{\"prompt\": \"hi\"}\n").unwrap();
        assert_eq!(read_text(&p).unwrap(), "{\"prompt\": \"hi\"}\n");
        let _ = std::fs::remove_file(&p);
    }
}
