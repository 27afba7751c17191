//! The shape of a stream's token events, learned from one fully parsed event so the next ones
//! need no JSON parse.
//!
//! A server streams one response's token events with the same bytes around the text: vLLM's
//! `{"id":…,"object":…,"created":…,"model":…,"choices":[{"index":0,"text":"` … `","logprobs":null,
//! "finish_reason":null,…}]}`. The JSON parse of that frame was the largest part of the
//! client's CPU per token. Once an event was parsed ([`classify`]) and its text is a plain
//! string (no escapes) borrowed from the event, the bytes before and after it are kept; a later
//! event made of the same bytes around a non-empty string with no quote, backslash or control
//! character is the same JSON document with another text, so it classifies exactly as the
//! parsed one did, with that text. Any other event (another key, a finish reason, usage, an
//! escape, empty text) goes through the parser, and teaches the shape again when it can.

use std::borrow::Cow;

use servebench_wire::chunk::{classify, ChunkInfo, EndpointKind};
use servebench_wire::WireError;

/// What one learned event told beyond its text: equal for every event of the same shape.
#[derive(Debug, Clone, Copy, Default)]
struct Flags {
    reasoning: bool,
    answer: bool,
    tool_calls: bool,
}

/// The bytes around the text of the stream's latest token event, when it had the learnable form.
#[derive(Debug, Default)]
pub(crate) struct EventShape {
    before: Vec<u8>,
    after: Vec<u8>,
    flags: Flags,
    known: bool,
}

impl EventShape {
    /// Classifies `data` as [`classify`] does, without parsing when it has the known shape.
    #[inline]
    pub(crate) fn classify<'a>(
        &mut self,
        data: &'a str,
        kind: EndpointKind,
    ) -> Result<ChunkInfo<'a>, WireError> {
        if let Some(text) = self.text_of(data) {
            return Ok(ChunkInfo {
                token_bearing: true,
                has_choices: true,
                text: Cow::Borrowed(text),
                text_chars: count_chars(text),
                usage: None,
                finish_reason: None,
                error: None,
                reasoning: self.flags.reasoning,
                answer: self.flags.answer,
                tool_calls: self.flags.tool_calls,
            });
        }
        self.known = false;
        let info = classify(data, kind)?;
        self.learn(data, &info);
        Ok(info)
    }

    /// The text of `data` when it is the known shape around a plain, non-empty string.
    #[inline]
    fn text_of<'a>(&self, data: &'a str) -> Option<&'a str> {
        if !self.known {
            return None;
        }
        let bytes = data.as_bytes();
        if bytes.len() <= self.before.len() + self.after.len()
            || !bytes.starts_with(&self.before)
            || !bytes.ends_with(&self.after)
        {
            return None;
        }
        let end = bytes.len() - self.after.len();
        let text = data.get(self.before.len()..end)?;
        // A quote would end the string (and make another document); a backslash is an escape
        // the text would have to be decoded from; a control character is not valid JSON.
        let plain = text.bytes().all(|b| b != b'"' && b != b'\\' && b >= 0x20);
        plain.then_some(text)
    }

    /// Keeps the shape of `data` when its parse gave a plain non-empty text borrowed from it
    /// and nothing the next event's text alone could not tell (finish reason, usage, error).
    fn learn(&mut self, data: &str, info: &ChunkInfo<'_>) {
        self.known = false;
        let Cow::Borrowed(text) = &info.text else {
            return;
        };
        if !info.token_bearing
            || !info.has_choices
            || text.is_empty()
            || info.usage.is_some()
            || info.finish_reason.is_some()
            || info.error.is_some()
        {
            return;
        }
        let Some(start) = offset_in(data, text) else {
            return;
        };
        let end = start + text.len();
        let bytes = data.as_bytes();
        // The text is a JSON string's contents: a quote on either side.
        if start == 0 || bytes.get(start - 1) != Some(&b'"') || bytes.get(end) != Some(&b'"') {
            return;
        }
        self.before.clear();
        self.before.extend_from_slice(&bytes[..start]);
        self.after.clear();
        self.after.extend_from_slice(&bytes[end..]);
        self.flags = Flags {
            reasoning: info.reasoning,
            answer: info.answer,
            tool_calls: info.tool_calls,
        };
        self.known = true;
    }
}

/// Where `part` lies inside `whole`, when it is a slice of it (the parser borrows a string with
/// no escapes from its input); compared by address, then checked by content.
fn offset_in(whole: &str, part: &str) -> Option<usize> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    let end = start.checked_add(part.len())?;
    let slice = whole.get(start..end)?;
    (std::ptr::eq(slice.as_ptr(), part.as_ptr()) && slice == part).then_some(start)
}

/// Characters (Unicode scalar values): UTF-8 lead bytes, as the parser counts them.
fn count_chars(s: &str) -> u32 {
    let n = s.bytes().filter(|b| (b & 0xC0) != 0x80).count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Every event of `events`, classified through one shape in order, equals the parser's
    /// own classification; returns how many were taken without a parse.
    fn same_as_parser(kind: EndpointKind, events: &[&str]) -> usize {
        let mut shape = EventShape::default();
        let mut fast = 0;
        for data in events {
            let by_parser = classify(data, kind).map_err(|e| e.to_string());
            fast += usize::from(shape.text_of(data).is_some());
            let by_shape = shape.classify(data, kind).map_err(|e| e.to_string());
            assert_eq!(by_shape, by_parser, "event {data}");
        }
        fast
    }

    fn completion(text: &str, finish: &str) -> String {
        format!(
            r#"{{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{{"index":0,"text":"{text}","logprobs":null,"finish_reason":{finish},"stop_reason":null}}],"usage":null}}"#
        )
    }

    fn chat(delta: &str, finish: &str) -> String {
        format!(
            r#"{{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":{finish}}}]}}"#
        )
    }

    #[test]
    fn a_vllm_completions_stream_is_classified_as_the_parser_does() {
        let events = [
            completion("Hello", "null"),
            completion(" world", "null"),
            completion("ü€😀", "null"),
            completion("", "null"),
            completion("tab\\tquote\\\"", "null"),
            completion("again", "null"),
            completion("x", "null"),
            completion("a\u{7f}b", "null"),
            completion("", "\"length\""),
            completion("y", "\"stop\""),
            r#"{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":9,"total_tokens":12}}"#.to_owned(),
        ];
        let refs: Vec<&str> = events.iter().map(String::as_str).collect();
        let fast = same_as_parser(EndpointKind::Completions, &refs);
        // " world", "ü€😀", "x" and "a\x7fb" after a learned event.
        assert_eq!(fast, 4);
    }

    #[test]
    fn a_chat_stream_with_reasoning_and_tool_calls_is_classified_as_the_parser_does() {
        let events = [
            chat(r#"{"role":"assistant","content":""}"#, "null"),
            chat(r#"{"reasoning_content":"think"}"#, "null"),
            chat(r#"{"reasoning_content":"more"}"#, "null"),
            chat(r#"{"content":"Hi"}"#, "null"),
            chat(r#"{"content":" there"}"#, "null"),
            chat(r#"{"reasoning_content":"","content":"both"}"#, "null"),
            chat(r#"{"reasoning_content":"","content":"again"}"#, "null"),
            chat(r#"{"reasoning_content":"r","content":"c"}"#, "null"),
            chat(r#"{"content":"t","tool_calls":[{"index":0}]}"#, "null"),
            chat(r#"{"content":"u","tool_calls":[{"index":0}]}"#, "null"),
            chat(r#"{"content":"v","tool_calls":[]}"#, "null"),
            chat(r#"{"content":"w","tool_calls":[]}"#, "null"),
            chat(r#"{"content":""}"#, "null"),
            chat(r#"{}"#, r#""stop""#),
            r#"{"error":{"message":"boom"}}"#.to_owned(),
        ];
        let refs: Vec<&str> = events.iter().map(String::as_str).collect();
        let fast = same_as_parser(EndpointKind::Chat, &refs);
        assert_eq!(fast, 5);
    }

    /// What the known shape must not take: other bytes around the text, a text that would end
    /// the string, an escape, a control character, an empty text.
    #[test]
    fn only_the_known_bytes_around_a_plain_string_take_the_shortcut() {
        let mut shape = EventShape::default();
        shape
            .classify(&completion("a", "null"), EndpointKind::Completions)
            .unwrap();
        assert_eq!(shape.text_of(&completion("bc", "null")), Some("bc"));
        assert_eq!(shape.text_of(&completion("b\",\"x\":\"c", "null")), None);
        assert_eq!(shape.text_of(&completion("b\\nc", "null")), None);
        assert_eq!(shape.text_of(&completion("b\nc", "null")), None);
        assert_eq!(shape.text_of(&completion("", "null")), None);
        assert_eq!(shape.text_of(&completion("b", "\"stop\"")), None);
        assert_eq!(
            shape.text_of(&completion("b", "null").replace("cmpl-1", "cmpl-2")),
            None
        );
        // Malformed input is the parser's to report, and forgets the shape.
        assert!(shape
            .classify(r#"{"choices":[{"text":"a""#, EndpointKind::Completions)
            .is_err());
        assert_eq!(shape.text_of(&completion("bc", "null")), None);
    }

    #[test]
    fn a_part_is_found_by_address_only_inside_its_whole() {
        let whole = "abcabc";
        assert_eq!(offset_in(whole, &whole[3..5]), Some(3));
        assert_eq!(offset_in(whole, "abc"), None);
        assert_eq!(count_chars("aü€😀"), 4);
    }
}
