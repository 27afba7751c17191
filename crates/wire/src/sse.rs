//! Incremental Server-Sent-Events parser (WHATWG HTML, "Parsing an event stream").
//!
//! Built for the client's hot path: an event that lies wholly inside one fed buffer is handed
//! out borrowed from that buffer (no copy, no allocation). Only an event split across two feeds
//! is assembled in an internal buffer whose capacity is reused from event to event.
//!
//! Deviations from the browser algorithm, all deliberate:
//! - invalid UTF-8 is reported as an [`SseError`] for that event instead of being replaced with
//!   U+FFFD, because a benchmark must flag a corrupted stream rather than measure it;
//! - an event (or unterminated line) larger than [`SseParser::max_event_bytes`] is reported and
//!   skipped, so a server that never ends a line cannot exhaust memory;
//! - `retry` is ignored (there is no reconnection here).

use memchr::memchr2;

/// Default cap on the bytes buffered for one event: far above any real completion chunk.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// One dispatched event. Borrows either the fed buffer or the parser's own buffer, so it only
/// lives for the duration of the callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The `data` lines joined by `\n` (no trailing newline).
    pub data: &'a str,
    /// The `event` field, `None` when absent or empty (the spec's default type "message").
    pub event: Option<&'a str>,
    /// The last event ID: it persists across events until the server sets another one, as the
    /// spec says. `None` while it is empty.
    pub id: Option<&'a str>,
}

/// A problem with one event. The parser skips that event and carries on with the next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A field value is not valid UTF-8.
    #[error(
        "SSE event field `{field}` is not valid UTF-8 (first invalid byte at offset {valid_up_to})"
    )]
    InvalidUtf8 {
        /// `data`, `event` or `id`.
        field: &'static str,
        /// Length of the valid prefix of the field value.
        valid_up_to: usize,
    },
    /// The event grew past the configured limit before its terminating blank line.
    #[error("SSE event exceeds {limit} bytes without a terminating blank line; event skipped")]
    EventTooLarge {
        /// The limit in force.
        limit: usize,
    },
}

/// What was left when the stream ended (see [`SseParser::finish`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseTail {
    /// Bytes of a last line that had no line terminator.
    pub partial_line_bytes: usize,
    /// Whether fields of an event had been received without its terminating blank line. The
    /// spec drops such an event.
    pub incomplete_event: bool,
    /// The data of that dropped event, lossily decoded (so a caller can tell, say, a stream
    /// that ended on `data: [DONE]\n` without the blank line).
    pub incomplete_data: Option<String>,
}

impl SseTail {
    /// True when the stream ended exactly on an event boundary (nothing was dropped).
    pub fn is_clean(&self) -> bool {
        self.partial_line_bytes == 0 && !self.incomplete_event
    }
}

/// Where the current event's data lives while it is being assembled inside one `feed` call.
#[derive(Clone, Copy)]
enum Data {
    /// No `data` field yet.
    None,
    /// Exactly one `data` line so far, located in the buffer being fed.
    InInput(usize, usize),
    /// In `Fields::data` (several lines, or carried over from an earlier feed).
    Buffered,
}

/// Per-event field buffers, kept apart from the line buffer so both can be borrowed at once.
#[derive(Default)]
struct Fields {
    data: Vec<u8>,
    event: Vec<u8>,
    last_id: Vec<u8>,
    /// Any field line (other than a comment) seen since the last dispatch.
    any_field: bool,
}

/// Incremental SSE parser; see the module documentation.
pub struct SseParser {
    /// Bytes of the current line that arrived in earlier feeds (no terminator yet).
    line: Vec<u8>,
    fields: Fields,
    /// `fields.data` holds data of an event begun in an earlier feed.
    data_buffered: bool,
    /// The previous feed ended on `\r`: a leading `\n` in the next one belongs to it.
    skip_lf: bool,
    /// No complete line has been seen yet, so a BOM may still be stripped.
    at_stream_start: bool,
    /// Skipping an oversized event until its blank line.
    discarding: bool,
    /// While discarding: the current (unterminated) line is not empty.
    discard_line_nonempty: bool,
    max_event_bytes: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for SseParser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseParser")
            .field("buffered_line_bytes", &self.line.len())
            .field("buffered_data_bytes", &self.fields.data.len())
            .field("discarding", &self.discarding)
            .finish()
    }
}

/// A field value's location: inside the fed buffer (borrowable) or inside the line buffer.
#[derive(Clone, Copy)]
enum Src {
    Input,
    Line,
}

impl SseParser {
    /// A parser at the start of a stream, with [`DEFAULT_MAX_EVENT_BYTES`].
    pub fn new() -> Self {
        Self::with_max_event_bytes(DEFAULT_MAX_EVENT_BYTES)
    }

    /// A parser that reports and skips events buffering more than `limit` bytes.
    pub fn with_max_event_bytes(limit: usize) -> Self {
        SseParser {
            line: Vec::new(),
            fields: Fields::default(),
            data_buffered: false,
            skip_lf: false,
            at_stream_start: true,
            discarding: false,
            discard_line_nonempty: false,
            max_event_bytes: limit.max(1),
        }
    }

    /// The limit on bytes buffered for one event.
    pub fn max_event_bytes(&self) -> usize {
        self.max_event_bytes
    }

    /// Parse the next piece of the stream, calling `on_event` for every valid event completed
    /// in it, in order. Bytes may be split anywhere (inside a line ending, inside a UTF-8
    /// sequence). An invalid event is skipped and parsing goes on; the first such error of
    /// this piece is returned after all its valid events were delivered.
    pub fn feed<F>(&mut self, bytes: &[u8], mut on_event: F) -> Result<(), SseError>
    where
        F: FnMut(SseEvent<'_>),
    {
        let mut first_error = None;
        self.feed_results(bytes, |r| match r {
            Ok(ev) => on_event(ev),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        });
        first_error.map_or(Ok(()), Err)
    }

    /// Like [`Self::feed`], but hands every event or error to `on_event` in stream order.
    pub fn feed_results<F>(&mut self, bytes: &[u8], mut on_event: F)
    where
        F: FnMut(Result<SseEvent<'_>, SseError>),
    {
        if bytes.is_empty() {
            return;
        }
        let mut pos = 0;
        if self.skip_lf {
            self.skip_lf = false;
            if bytes[0] == b'\n' {
                pos = 1;
            }
        }
        let mut data = if self.data_buffered {
            Data::Buffered
        } else {
            Data::None
        };

        while pos < bytes.len() {
            let Some(rel) = memchr2(b'\n', b'\r', &bytes[pos..]) else {
                break;
            };
            let end = pos + rel;
            let next = if bytes[end] == b'\r' {
                match bytes.get(end + 1) {
                    Some(b'\n') => end + 2,
                    Some(_) => end + 1,
                    None => {
                        self.skip_lf = true;
                        end + 1
                    }
                }
            } else {
                end + 1
            };

            if self.discarding {
                let empty = end == pos && !self.discard_line_nonempty;
                self.discard_line_nonempty = false;
                if empty {
                    self.discarding = false;
                    self.reset_event();
                    data = Data::None;
                }
            } else if self.line.is_empty() {
                let mut start = pos;
                if self.at_stream_start {
                    self.at_stream_start = false;
                    if bytes[start..end].starts_with(BOM) {
                        start += BOM.len();
                    }
                }
                self.process_line(bytes, start, end, Src::Input, &mut data, &mut on_event);
            } else {
                self.line.extend_from_slice(&bytes[pos..end]);
                let mut start = 0;
                if self.at_stream_start {
                    self.at_stream_start = false;
                    if self.line.starts_with(BOM) {
                        start = BOM.len();
                    }
                }
                let line_len = self.line.len();
                self.process_line(bytes, start, line_len, Src::Line, &mut data, &mut on_event);
                self.line.clear();
            }
            pos = next;
        }

        // Carry the unfinished event and line over to the next feed.
        if let Data::InInput(s, e) = data {
            self.fields.data.clear();
            self.fields.data.extend_from_slice(&bytes[s..e]);
            data = Data::Buffered;
        }
        self.data_buffered = matches!(data, Data::Buffered);
        let rest = &bytes[pos..];
        if self.discarding {
            self.discard_line_nonempty |= !rest.is_empty();
        } else if !rest.is_empty() {
            self.line.extend_from_slice(rest);
            let held = self.line.len() + self.fields.data.len() + self.fields.event.len();
            if held > self.max_event_bytes {
                self.start_discarding(&mut on_event);
            }
        } else if self.data_buffered && self.fields.data.len() > self.max_event_bytes {
            self.start_discarding(&mut on_event);
        }
    }

    /// End of stream. Per the spec an event without its terminating blank line is dropped;
    /// returns `true` when something was (an unterminated line or an undispatched event), so
    /// the caller can flag truncation. The parser is reset for a new stream.
    pub fn finish(&mut self) -> bool {
        !self.finish_tail().is_clean()
    }

    /// [`Self::finish`], with the details of what was left over.
    pub fn finish_tail(&mut self) -> SseTail {
        let partial_line_bytes = if self.discarding {
            usize::from(self.discard_line_nonempty)
        } else if self.at_stream_start && self.line == BOM {
            0 // a stream holding only its byte-order mark ended cleanly
        } else {
            self.line.len()
        };
        let incomplete_event = self.discarding || self.fields.any_field;
        let incomplete_data = (self.data_buffered && !self.discarding)
            .then(|| String::from_utf8_lossy(&self.fields.data).into_owned());
        self.reset();
        SseTail {
            partial_line_bytes,
            incomplete_event,
            incomplete_data,
        }
    }

    /// Forget everything, including the last event ID: ready for a new stream.
    pub fn reset(&mut self) {
        self.line.clear();
        self.reset_event();
        self.fields.last_id.clear();
        self.skip_lf = false;
        self.at_stream_start = true;
        self.discarding = false;
        self.discard_line_nonempty = false;
    }

    fn reset_event(&mut self) {
        self.fields.data.clear();
        self.fields.event.clear();
        self.fields.any_field = false;
        self.data_buffered = false;
    }

    fn start_discarding<F>(&mut self, on_event: &mut F)
    where
        F: FnMut(Result<SseEvent<'_>, SseError>),
    {
        on_event(Err(SseError::EventTooLarge {
            limit: self.max_event_bytes,
        }));
        self.discard_line_nonempty = !self.line.is_empty();
        self.line.clear();
        self.reset_event();
        self.discarding = true;
    }

    /// Interpret one complete line, `[start, end)` of either the fed buffer or the line buffer.
    fn process_line<F>(
        &mut self,
        input: &[u8],
        start: usize,
        end: usize,
        src: Src,
        data: &mut Data,
        on_event: &mut F,
    ) where
        F: FnMut(Result<SseEvent<'_>, SseError>),
    {
        if start == end {
            self.dispatch(input, data, on_event);
            return;
        }
        let line = match src {
            Src::Input => &input[start..end],
            Src::Line => &self.line[start..end],
        };
        // Fast path for the overwhelmingly common line.
        let (name_len, value_start) = if line.starts_with(b"data: ") {
            (4, 6)
        } else if line[0] == b':' {
            return; // comment
        } else {
            match memchr::memchr(b':', line) {
                Some(colon) => {
                    let v = if line.get(colon + 1) == Some(&b' ') {
                        colon + 2
                    } else {
                        colon + 1
                    };
                    (colon, v)
                }
                None => (line.len(), line.len()),
            }
        };
        let name = &line[..name_len];
        let (vs, ve) = (start + value_start, end);
        let fields = &mut self.fields;
        match name {
            b"data" => {
                fields.any_field = true;
                let value = match src {
                    Src::Input => &input[vs..ve],
                    Src::Line => &self.line[vs..ve],
                };
                match (*data, src) {
                    (Data::None, Src::Input) => *data = Data::InInput(vs, ve),
                    (Data::None, Src::Line) => {
                        fields.data.clear();
                        fields.data.extend_from_slice(value);
                        *data = Data::Buffered;
                    }
                    (Data::InInput(s, e), _) => {
                        fields.data.clear();
                        fields.data.extend_from_slice(&input[s..e]);
                        fields.data.push(b'\n');
                        fields.data.extend_from_slice(value);
                        *data = Data::Buffered;
                    }
                    (Data::Buffered, _) => {
                        fields.data.push(b'\n');
                        fields.data.extend_from_slice(value);
                    }
                }
            }
            b"event" => {
                fields.any_field = true;
                let value = match src {
                    Src::Input => &input[vs..ve],
                    Src::Line => &self.line[vs..ve],
                };
                fields.event.clear();
                fields.event.extend_from_slice(value);
            }
            b"id" => {
                fields.any_field = true;
                let value = match src {
                    Src::Input => &input[vs..ve],
                    Src::Line => &self.line[vs..ve],
                };
                if memchr::memchr(0, value).is_none() {
                    fields.last_id.clear();
                    fields.last_id.extend_from_slice(value);
                }
            }
            // `retry` and unknown fields are ignored, but still make the event "begun".
            _ => fields.any_field = true,
        }
    }

    fn dispatch<F>(&mut self, input: &[u8], data: &mut Data, on_event: &mut F)
    where
        F: FnMut(Result<SseEvent<'_>, SseError>),
    {
        let fields = &self.fields;
        let data_bytes: Option<&[u8]> = match *data {
            Data::None => None,
            Data::InInput(s, e) => Some(&input[s..e]),
            Data::Buffered => Some(&fields.data),
        };
        // The spec dispatches nothing for an event without data (it only resets the type).
        if let Some(bytes) = data_bytes {
            let result = decode(bytes, "data").and_then(|data| {
                let event = decode(&fields.event, "event")?;
                let id = decode(&fields.last_id, "id")?;
                Ok(SseEvent {
                    data,
                    event: (!event.is_empty()).then_some(event),
                    id: (!id.is_empty()).then_some(id),
                })
            });
            on_event(result);
        }
        *data = Data::None;
        self.reset_event();
    }
}

fn decode<'a>(bytes: &'a [u8], field: &'static str) -> Result<&'a str, SseError> {
    std::str::from_utf8(bytes).map_err(|e| SseError::InvalidUtf8 {
        field,
        valid_up_to: e.valid_up_to(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Out {
        Ev {
            data: String,
            event: Option<String>,
            id: Option<String>,
        },
        Err(SseError),
    }

    fn collect(parser: &mut SseParser, bytes: &[u8], out: &mut Vec<Out>) {
        parser.feed_results(bytes, |r| {
            out.push(match r {
                Ok(e) => Out::Ev {
                    data: e.data.to_owned(),
                    event: e.event.map(str::to_owned),
                    id: e.id.map(str::to_owned),
                },
                Err(e) => Out::Err(e),
            })
        });
    }

    fn parse_all(bytes: &[u8]) -> Vec<Out> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        collect(&mut p, bytes, &mut out);
        out
    }

    fn datas(out: &[Out]) -> Vec<String> {
        out.iter()
            .filter_map(|o| match o {
                Out::Ev { data, .. } => Some(data.clone()),
                Out::Err(_) => None,
            })
            .collect()
    }

    #[test]
    fn single_and_multiline_data() {
        let out = parse_all(b"data: a\n\ndata: b\ndata:  c\ndata\n\n");
        assert_eq!(datas(&out), vec!["a", "b\n c\n"]);
    }

    #[test]
    fn all_line_endings() {
        assert_eq!(datas(&parse_all(b"data: x\r\n\r\n")), vec!["x"]);
        assert_eq!(datas(&parse_all(b"data: x\r\r")), vec!["x"]);
        assert_eq!(
            datas(&parse_all(b"data: x\r\ndata: y\rdata: z\n\r\n")),
            vec!["x\ny\nz"]
        );
    }

    #[test]
    fn comments_unknown_fields_and_retry_are_ignored() {
        let out = parse_all(b": ping\nretry: 10\nfoo: bar\ndata: v\n\n:only comment\n\n");
        assert_eq!(datas(&out), vec!["v"]);
    }

    #[test]
    fn event_without_data_is_not_dispatched_and_empty_data_is() {
        let out = parse_all(b"event: x\n\ndata:\n\ndata\n\n");
        assert_eq!(
            out,
            vec![
                Out::Ev {
                    data: String::new(),
                    event: None,
                    id: None
                },
                Out::Ev {
                    data: String::new(),
                    event: None,
                    id: None
                }
            ]
        );
    }

    #[test]
    fn only_one_leading_space_is_removed() {
        assert_eq!(datas(&parse_all(b"data:   x \n\n")), vec!["  x "]);
        assert_eq!(datas(&parse_all(b"data:x\n\n")), vec!["x"]);
    }

    #[test]
    fn event_type_resets_but_id_persists() {
        let out = parse_all(b"event: e1\nid: 7\ndata: a\n\ndata: b\n\nid\ndata: c\n\n");
        assert_eq!(
            out,
            vec![
                Out::Ev {
                    data: "a".into(),
                    event: Some("e1".into()),
                    id: Some("7".into())
                },
                Out::Ev {
                    data: "b".into(),
                    event: None,
                    id: Some("7".into())
                },
                Out::Ev {
                    data: "c".into(),
                    event: None,
                    id: None
                },
            ]
        );
    }

    #[test]
    fn id_with_nul_is_ignored() {
        let out = parse_all(b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n");
        match &out[1] {
            Out::Ev { id, .. } => assert_eq!(id.as_deref(), Some("1")),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn bom_is_stripped_only_at_stream_start() {
        assert_eq!(datas(&parse_all(b"\xEF\xBB\xBFdata: a\n\n")), vec!["a"]);
        // A BOM split over three feeds.
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for piece in [&b"\xEF"[..], b"\xBB", b"\xBFdata: a\n\n"] {
            collect(&mut p, piece, &mut out);
        }
        assert_eq!(datas(&out), vec!["a"]);
        // Later a BOM is part of a field name, so the line is an unknown field.
        assert_eq!(
            datas(&parse_all(b"data: a\n\n\xEF\xBB\xBFdata: b\n\n")),
            vec!["a"]
        );
    }

    #[test]
    fn cr_lf_split_across_feeds_is_one_line_end() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        collect(&mut p, b"data: a\r", &mut out);
        collect(&mut p, b"\ndata: b\r", &mut out);
        collect(&mut p, b"\n\r", &mut out);
        collect(&mut p, b"\n", &mut out);
        assert_eq!(datas(&out), vec!["a\nb"]);
        assert!(!p.finish());
    }

    #[test]
    fn utf8_split_inside_a_sequence() {
        let text = "data: héllo ✓\n\n".as_bytes();
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for b in text {
            collect(&mut p, std::slice::from_ref(b), &mut out);
        }
        assert_eq!(datas(&out), vec!["héllo ✓"]);
    }

    #[test]
    fn feed_returns_the_first_error_after_delivering_valid_events() {
        let mut p = SseParser::new();
        let mut got = Vec::new();
        let r = p.feed(
            b"data: \xFF\n\ndata: ok\n\nevent: \xFE\ndata: x\n\n",
            |ev| got.push(ev.data.to_owned()),
        );
        assert_eq!(
            r,
            Err(SseError::InvalidUtf8 {
                field: "data",
                valid_up_to: 0
            })
        );
        assert_eq!(got, vec!["ok"]);
        assert_eq!(p.feed(b"data: fine\n\n", |_| {}), Ok(()));
    }

    #[test]
    fn invalid_utf8_is_an_error_and_parsing_continues() {
        let out = parse_all(b"data: a\xFFb\n\ndata: ok\n\n");
        assert_eq!(
            out[0],
            Out::Err(SseError::InvalidUtf8 {
                field: "data",
                valid_up_to: 1
            })
        );
        assert_eq!(datas(&out), vec!["ok"]);
    }

    #[test]
    fn finish_reports_truncation() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        collect(&mut p, b"data: a\n\ndata: [DONE]\n", &mut out);
        let tail = p.finish_tail();
        assert_eq!(datas(&out), vec!["a"]);
        assert!(!tail.is_clean());
        assert!(tail.incomplete_event);
        assert_eq!(tail.incomplete_data.as_deref(), Some("[DONE]"));

        collect(&mut p, b"data: a\n\ndata: {\"x", &mut out);
        let tail = p.finish_tail();
        assert_eq!(tail.partial_line_bytes, 9);
        assert!(!tail.incomplete_event);

        collect(&mut p, b"data: a\n\n: bye\n", &mut out);
        assert!(!p.finish());
        collect(&mut p, b"data: a", &mut out);
        assert!(p.finish());
    }

    #[test]
    fn oversized_event_is_reported_and_skipped() {
        let mut p = SseParser::with_max_event_bytes(16);
        let mut out = Vec::new();
        collect(&mut p, b"data: 0123456789", &mut out);
        collect(&mut p, b"0123456789", &mut out);
        collect(&mut p, b"\ndata: more\n", &mut out);
        collect(&mut p, b"\ndata: ok\n\n", &mut out);
        assert_eq!(out[0], Out::Err(SseError::EventTooLarge { limit: 16 }));
        assert_eq!(datas(&out), vec!["ok"]);
    }

    #[test]
    fn event_inside_one_buffer_is_borrowed_from_it() {
        let input = b"data: {\"a\":1}\n\ndata: x\ndata: y\n\n";
        let range = input.as_ptr_range();
        let mut p = SseParser::new();
        let mut borrowed = Vec::new();
        p.feed(input, |ev| borrowed.push(range.contains(&ev.data.as_ptr())))
            .unwrap();
        // The single-line event borrows the input; the two-line one had to be joined.
        assert_eq!(borrowed, vec![true, false]);
    }

    #[test]
    fn event_started_in_one_feed_finishes_in_the_next() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        collect(&mut p, b"event: t\ndata: a\n", &mut out);
        collect(&mut p, b"data: b\n\n", &mut out);
        assert_eq!(
            out,
            vec![Out::Ev {
                data: "a\nb".into(),
                event: Some("t".into()),
                id: None
            }]
        );
    }
}
