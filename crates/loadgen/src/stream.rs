//! Turning the bytes of one streamed response into clock points and counts.
//!
//! Kept apart from the HTTP code so the hot path (parse + record per token) can be tested and
//! benchmarked on its own.

use servebench_metrics::{Failure, FailureKind, TokenEvent};
use servebench_wire::chunk::{classify, is_done, EndpointKind};
use servebench_wire::sse::SseParser;

use crate::target::ApiKind;

/// What the stream told us, accumulated event by event.
#[derive(Debug, Default)]
pub struct StreamAccumulator {
    pub first_token: Option<u64>,
    pub end: Option<u64>,
    pub events: Vec<TokenEvent>,
    /// Events with choices but no token (vLLM's client counts them; servebench does not).
    pub bare_events: Vec<u64>,
    pub text: String,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    pub finish_reason: Option<String>,
    pub saw_done: bool,
    /// The first problem seen inside the stream (malformed chunk, error object).
    pub failure: Option<Failure>,
}

/// Incremental state of one streamed response.
#[derive(Debug)]
pub struct StreamState {
    parser: SseParser,
    kind: EndpointKind,
    pub acc: StreamAccumulator,
}

impl StreamState {
    pub fn new(api: ApiKind) -> Self {
        StreamState {
            parser: SseParser::new(),
            kind: match api {
                ApiKind::Completions => EndpointKind::Completions,
                ApiKind::Chat => EndpointKind::Chat,
            },
            acc: StreamAccumulator::default(),
        }
    }

    /// Feed bytes received at `t` (ns from run start). Every event completed by these bytes
    /// gets the same receipt time: they arrived together.
    #[inline]
    pub fn feed(&mut self, t: u64, bytes: &[u8]) {
        let kind = self.kind;
        let acc = &mut self.acc;
        let result = self.parser.feed(bytes, |ev| acc.on_data(t, ev.data, kind));
        if let Err(e) = result {
            acc.fail(FailureKind::Malformed, format!("invalid SSE stream: {e}"));
        }
    }

    /// The body ended; returns whether bytes of an unfinished event were left over.
    pub fn finish(&mut self) -> bool {
        self.parser.finish()
    }
}

impl StreamAccumulator {
    fn fail(&mut self, kind: FailureKind, message: String) {
        if self.failure.is_none() {
            self.failure = Some(Failure {
                kind,
                status: None,
                message,
            });
        }
    }

    #[inline]
    fn on_data(&mut self, t: u64, data: &str, kind: EndpointKind) {
        if is_done(data) {
            self.saw_done = true;
            return;
        }
        let info = match classify(data, kind) {
            Ok(info) => info,
            Err(e) => {
                let excerpt: String = data.chars().take(120).collect();
                self.fail(
                    FailureKind::Malformed,
                    format!("malformed chunk ({e}): {excerpt}"),
                );
                return;
            }
        };
        if let Some(err) = info.error {
            self.fail(FailureKind::StreamError, err);
        }
        if let Some(u) = info.usage {
            self.prompt_tokens = Some(u.prompt_tokens);
            self.completion_tokens = Some(u.completion_tokens);
            if let Some(c) = u.prompt_tokens_details.and_then(|d| d.cached_tokens) {
                self.cached_tokens = Some(c);
            }
        }
        if let Some(r) = info.finish_reason {
            self.finish_reason = Some(r.to_string());
        }
        if info.token_bearing {
            if self.first_token.is_none() {
                self.first_token = Some(t);
            }
            self.end = Some(t);
            self.events.push(TokenEvent {
                t,
                chars: info.text_chars,
            });
            self.text.push_str(&info.text);
        } else if info.has_choices {
            self.bare_events.push(t);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn feed_all(api: ApiKind, events: &[(u64, &str)]) -> StreamAccumulator {
        let mut s = StreamState::new(api);
        for (t, data) in events {
            s.feed(*t, format!("data: {data}\n\n").as_bytes());
        }
        assert!(!s.finish());
        s.acc
    }

    /// vLLM's chat client counts every event with a non-empty `choices` list; servebench only
    /// those with content. The usage-only event (`choices: []`) and `[DONE]` are neither.
    #[test]
    fn chat_role_and_closing_chunks_are_bare_events() {
        let acc = feed_all(
            ApiKind::Chat,
            &[
                (
                    1,
                    r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
                ),
                (
                    2,
                    r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#,
                ),
                (
                    3,
                    r#"{"choices":[{"index":0,"delta":{"content":" there"},"finish_reason":null}]}"#,
                ),
                (
                    4,
                    r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
                ),
                (
                    5,
                    r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}"#,
                ),
                (6, "[DONE]"),
            ],
        );
        assert_eq!(
            acc.events.iter().map(|e| e.t).collect::<Vec<_>>(),
            vec![2, 3]
        );
        assert_eq!(acc.bare_events, vec![1, 4]);
        assert_eq!(acc.first_token, Some(2));
        assert_eq!(acc.end, Some(3));
        assert_eq!(acc.completion_tokens, Some(2));
    }

    /// Completions: an event with empty text and no finish_reason is a token for both (a
    /// special token); the closing event with empty text and a finish_reason only for vLLM.
    #[test]
    fn completions_closing_chunk_is_a_bare_event() {
        let acc = feed_all(
            ApiKind::Completions,
            &[
                (
                    1,
                    r#"{"choices":[{"index":0,"text":"a","finish_reason":null}]}"#,
                ),
                (
                    2,
                    r#"{"choices":[{"index":0,"text":"","finish_reason":null}]}"#,
                ),
                (
                    3,
                    r#"{"choices":[{"index":0,"text":"","finish_reason":"length"}]}"#,
                ),
                (
                    4,
                    r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":3,"total_tokens":6}}"#,
                ),
                (5, "[DONE]"),
            ],
        );
        assert_eq!(
            acc.events.iter().map(|e| e.t).collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert_eq!(acc.bare_events, vec![3]);
    }
}
