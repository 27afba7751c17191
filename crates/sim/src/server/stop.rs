//! Stop sequences as vLLM applies them (docs/simulator.md §7): `stop` strings searched in the
//! generated text, `stop_token_ids` checked on each sampled token, both only once `min_tokens`
//! are out. vLLM does this in its frontend (the detokenizer), not in the engine core, and then
//! aborts the request in the core; the simulator's server does the same, and tells its engine
//! with [`crate::realtime::EngineHandle::stop_early`].
//!
//! Text that could be the start of a stop string is held back until the next token shows it is
//! not (vLLM's "stop buffer"), so a client never sees part of a stop string that is later cut.

use serde_json::{Map, Value};

use super::error::ApiError;

/// The stop conditions of one request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StopSpec {
    /// `stop`: non-empty strings.
    pub strings: Vec<String>,
    /// `stop_token_ids`.
    pub token_ids: Vec<u32>,
    /// `include_stop_str_in_output` (vLLM's extension; default false).
    pub include: bool,
}

impl StopSpec {
    /// Reads `stop`, `stop_token_ids` and `include_stop_str_in_output` from a request's fields
    /// that the wire types leave in `extra`. `None` when the request sets no stop condition.
    /// Wrong types are 400s, as vLLM's request model refuses them.
    pub fn from_extra(extra: &Map<String, Value>) -> Result<Option<StopSpec>, ApiError> {
        let strings = match extra.get("stop") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    _ => Err(type_error("stop")),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(type_error("stop")),
        };
        // vLLM's SamplingParams refuses an empty stop string (it would match everywhere).
        if strings.iter().any(String::is_empty) {
            return Err(ApiError::bad_request(
                "stop cannot contain an empty string.",
                Some("stop"),
            ));
        }
        let token_ids = match extra.get("stop_token_ids") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_u64()
                        .and_then(|id| u32::try_from(id).ok())
                        .ok_or_else(|| type_error("stop_token_ids"))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(type_error("stop_token_ids")),
        };
        let include = match extra.get("include_stop_str_in_output") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(type_error("include_stop_str_in_output")),
        };
        if strings.is_empty() && token_ids.is_empty() {
            return Ok(None);
        }
        Ok(Some(StopSpec {
            strings,
            token_ids,
            include,
        }))
    }

    /// Bytes of text held back while a stop string could still be completing: vLLM holds
    /// `max(len) − 1` characters; bytes are at least as many, so nothing partial leaks.
    fn hold_back(&self) -> usize {
        if self.include {
            return 0;
        }
        self.strings
            .iter()
            .map(String::len)
            .max()
            .unwrap_or(0)
            .saturating_sub(1)
    }
}

fn type_error(field: &'static str) -> ApiError {
    let expected = match field {
        "stop" => "a string or a list of strings",
        "stop_token_ids" => "a list of token ids",
        _ => "a boolean",
    };
    ApiError::bad_request(format!("`{field}` must be {expected}."), Some(field))
}

/// One response's text as it is generated, cut at the first stop.
#[derive(Debug)]
pub struct StopScan {
    spec: StopSpec,
    min_tokens: u32,
    /// Leading reasoning tokens (0: none); the text they make is reported apart.
    reasoning_tokens: u32,
    /// Generated text so far (cut at the stop once found).
    text: String,
    /// Byte length of the reasoning part of `text`, once the reasoning tokens are all out.
    reasoning_end: Option<usize>,
    /// Bytes of `text` already handed out.
    released: usize,
    /// Tokens taken so far: usage's `completion_tokens`.
    tokens: u32,
    stopped: bool,
}

/// Newly releasable text, split into the reasoning part and the answer part.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Released<'a> {
    pub thinking: &'a str,
    pub answer: &'a str,
}

impl StopScan {
    /// A scan for a response that may not stop before `min_tokens` and whose first
    /// `reasoning_tokens` tokens are reasoning.
    pub fn new(spec: StopSpec, min_tokens: u32, reasoning_tokens: u32) -> Self {
        StopScan {
            spec,
            min_tokens,
            reasoning_tokens,
            text: String::new(),
            reasoning_end: (reasoning_tokens == 0).then_some(0),
            released: 0,
            tokens: 0,
            stopped: false,
        }
    }

    /// Takes the next sampled token and its text; true when the response stops here. Tokens
    /// after a stop are ignored.
    pub fn push(&mut self, token: u32, text: &str) -> bool {
        if self.stopped {
            return true;
        }
        self.tokens += 1;
        // vLLM: a stop token ends the output once min_tokens are out, its text excluded unless
        // include_stop_str_in_output.
        if self.tokens >= self.min_tokens && self.spec.token_ids.contains(&token) {
            if self.spec.include {
                self.text.push_str(text);
            }
            self.stopped = true;
            self.mark_reasoning_end();
            return true;
        }
        let before = self.text.len();
        self.text.push_str(text);
        // vLLM's detokenizer checks stop strings only once more than min_tokens are out, and
        // only where the new text could complete one.
        if self.tokens > self.min_tokens {
            if let Some(cut) = self.find_stop(before) {
                self.text.truncate(cut);
                self.stopped = true;
            }
        }
        self.mark_reasoning_end();
        self.stopped
    }

    /// Where the text ends if a stop string completes in the text from byte `new_from`.
    fn find_stop(&self, new_from: usize) -> Option<usize> {
        let longest = self.spec.strings.iter().map(String::len).max()?;
        let mut start = new_from.saturating_sub(longest.saturating_sub(1));
        while !self.text.is_char_boundary(start) {
            start -= 1;
        }
        let hay = &self.text[start..];
        // The earliest occurrence wins; among stop strings found at the same place, the first.
        let (at, len) = self
            .spec
            .strings
            .iter()
            .filter_map(|s| hay.find(s.as_str()).map(|i| (start + i, s.len())))
            .min_by_key(|&(at, _)| at)?;
        Some(if self.spec.include { at + len } else { at })
    }

    fn mark_reasoning_end(&mut self) {
        if self.reasoning_end.is_none() && (self.tokens >= self.reasoning_tokens || self.stopped) {
            self.reasoning_end = Some(self.text.len());
        }
    }

    /// Tokens taken (the stop token or the one completing the stop string included, as vLLM's
    /// usage counts them).
    pub fn tokens(&self) -> u32 {
        self.tokens
    }

    /// Whether a stop ended the response.
    #[cfg(test)]
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// The text that can go out now: all of it once the response ended (`finished`, or a
    /// stop), else all but what could still be the start of a stop string.
    pub fn release(&mut self, finished: bool) -> Released<'_> {
        let mut end = if finished || self.stopped {
            self.text.len()
        } else {
            self.text.len().saturating_sub(self.spec.hold_back())
        };
        while !self.text.is_char_boundary(end) {
            end -= 1;
        }
        let from = self.released;
        if end <= from {
            return Released::default();
        }
        self.released = end;
        // Text before `reasoning_end` (all of it, while reasoning goes on) is reasoning.
        let split = self.reasoning_end.unwrap_or(usize::MAX).clamp(from, end);
        Released {
            thinking: &self.text[from..split],
            answer: &self.text[split..end],
        }
    }

    /// The whole text (for a non-streaming response), split as [`StopScan::release`] splits.
    pub fn into_text(self) -> (String, String) {
        let split = self.reasoning_end.unwrap_or(self.text.len());
        let mut text = self.text;
        let answer = text.split_off(split);
        (text, answer)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn spec(json: &str) -> Option<StopSpec> {
        let v: Map<String, Value> = serde_json::from_str(json).unwrap();
        StopSpec::from_extra(&v).unwrap()
    }

    fn words(scan: &mut StopScan, ws: &[&str]) -> Option<usize> {
        ws.iter().position(|w| scan.push(1000, w))
    }

    #[test]
    fn stop_is_a_string_or_a_list_and_bad_types_are_400() {
        assert_eq!(spec("{}"), None);
        assert_eq!(spec(r#"{"stop":null}"#), None);
        assert_eq!(spec(r#"{"stop":[]}"#), None);
        assert_eq!(spec(r#"{"stop":" of"}"#).unwrap().strings, vec![" of"]);
        let s =
            spec(r#"{"stop":["a","bc"],"stop_token_ids":[7],"include_stop_str_in_output":true}"#)
                .unwrap();
        assert_eq!(
            (s.strings.len(), s.token_ids.clone(), s.include),
            (2, vec![7], true)
        );
        for bad in [
            r#"{"stop":5}"#,
            r#"{"stop":[1]}"#,
            r#"{"stop":[""]}"#,
            r#"{"stop_token_ids":[-1]}"#,
            r#"{"stop_token_ids":"7"}"#,
            r#"{"include_stop_str_in_output":"yes"}"#,
        ] {
            let v: Map<String, Value> = serde_json::from_str(bad).unwrap();
            let e = StopSpec::from_extra(&v).unwrap_err();
            assert_eq!(e.status.as_u16(), 400, "{bad}");
        }
    }

    #[test]
    fn the_text_ends_before_the_first_stop_string_and_counts_the_tokens_taken() {
        let mut scan = StopScan::new(spec(r#"{"stop":["and the","zzz"]}"#).unwrap(), 0, 0);
        // The stop string spans two tokens; it completes on the fourth.
        let at = words(&mut scan, &[" of", " time", " and", " the", " end"]);
        assert_eq!(at, Some(3));
        assert!(scan.stopped());
        assert_eq!(scan.tokens(), 4);
        assert_eq!(scan.release(false).answer, " of time ");
        assert_eq!(scan.into_text().1, " of time ");
    }

    #[test]
    fn a_possible_start_of_a_stop_string_is_held_back_until_resolved() {
        let mut scan = StopScan::new(spec(r#"{"stop":" the end"}"#).unwrap(), 0, 0);
        assert!(!scan.push(1, " of"));
        // " of" could not start " the end" here, but the hold-back is length-based (as vLLM's).
        assert_eq!(scan.release(false).answer, "");
        assert!(!scan.push(2, " the"));
        assert!(!scan.push(3, " cat"));
        let out = scan.release(false).answer.to_owned();
        assert!(
            " of the cat".starts_with(&out) && !out.is_empty(),
            "{out:?}"
        );
        // The response ended without a stop: everything goes out.
        let rest = scan.release(true).answer.to_owned();
        assert_eq!(format!("{out}{rest}"), " of the cat");
    }

    #[test]
    fn min_tokens_defers_stops_and_include_keeps_the_stop_string() {
        let mut scan = StopScan::new(spec(r#"{"stop":" of"}"#).unwrap(), 2, 0);
        assert_eq!(words(&mut scan, &[" of", " a", " of", " b"]), Some(2));
        assert_eq!(scan.release(false).answer, " of a");
        let mut scan = StopScan::new(
            spec(r#"{"stop":" of","include_stop_str_in_output":true}"#).unwrap(),
            0,
            0,
        );
        assert_eq!(words(&mut scan, &[" a", " of", " b"]), Some(1));
        assert_eq!(scan.release(false).answer, " a of");
    }

    #[test]
    fn stop_token_ids_end_the_output_without_their_text() {
        let mut scan = StopScan::new(spec(r#"{"stop_token_ids":[42]}"#).unwrap(), 0, 0);
        assert!(!scan.push(1, " a"));
        assert!(scan.push(42, " b"));
        assert!(scan.push(3, " c"), "tokens after the stop are ignored");
        assert_eq!(scan.tokens(), 2);
        assert_eq!(scan.release(false).answer, " a");
    }

    #[test]
    fn reasoning_text_is_split_from_the_answer() {
        let mut scan = StopScan::new(spec(r#"{"stop":"!"}"#).unwrap(), 0, 2);
        assert_eq!(words(&mut scan, &[" a", " b", " c", "!", " d"]), Some(3));
        let r = scan.release(false);
        assert_eq!((r.thinking, r.answer), (" a b", " c"));
        let (thinking, answer) = scan.into_text();
        assert_eq!((thinking.as_str(), answer.as_str()), (" a b", " c"));
    }

    #[test]
    fn multibyte_stop_strings_never_split_a_character() {
        let mut scan = StopScan::new(spec(r#"{"stop":"ééé"}"#).unwrap(), 0, 0);
        assert!(!scan.push(1, " é"));
        let _ = scan.release(false);
        assert!(scan.push(2, "éé x"));
        assert_eq!(scan.release(false).answer, " ");
    }
}
