//! Server text made safe for a terminal. An error body or a model id is the server's to
//! choose: one holding `ESC [2J` would clear the user's screen, `ESC ] 0;…BEL` retitle the
//! window, and a newline fake an output line. Every such character is shown escaped instead.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` with every control character (C0 including newline, DEL, C1) escaped as `\xNN`
/// (`\u{NNNN}` above U+00FF); tab is kept. Borrowed when there is nothing to escape.
pub fn printable(text: &str) -> Cow<'_, str> {
    escape(text, false)
}

/// [`printable`] that keeps newlines: for multi-line messages servebench wrote itself that
/// may quote server text.
pub fn printable_lines(text: &str) -> Cow<'_, str> {
    escape(text, true)
}

fn escape(text: &str, keep_newlines: bool) -> Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && c != '\t' && !(keep_newlines && c == '\n');
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !unsafe_char(c) {
            out.push(c);
        } else if (c as u32) <= 0xff {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            let _ = write!(out, "\\u{{{:04x}}}", c as u32);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_escapes_from_a_server_are_shown_not_obeyed() {
        let hostile = "bad\x1b[2J\x1b]0;title\x07\nFAKE: all good\r\u{9b}31m\x7f";
        let shown = printable(hostile);
        assert_eq!(
            shown,
            "bad\\x1b[2J\\x1b]0;title\\x07\\x0aFAKE: all good\\x0d\\x9b31m\\x7f"
        );
        assert!(!shown.chars().any(|c| c.is_control()));
        assert_eq!(printable_lines("a\nb\x1b"), "a\nb\\x1b");
        assert!(matches!(printable("plain\ttext é"), Cow::Borrowed(_)));
    }
}
