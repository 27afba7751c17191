//! Turning the bytes of one streamed response into clock points and counts.
//!
//! Kept apart from the HTTP code so the hot path (parse + record per token) can be tested and
//! benchmarked on its own.

use servebench_metrics::{CountSource, Failure, FailureKind, OutputSplit, TokenEvent};
use servebench_wire::chunk::{is_done, EndpointKind};
use servebench_wire::sse::SseParser;

use crate::event_shape::EventShape;
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
    /// First token-bearing event with answer output (`content` or `tool_calls`; any token of
    /// a completions stream).
    pub first_answer: Option<u64>,
    /// Token-bearing events that carried reasoning text.
    pub reasoning_events: u64,
    /// `usage.completion_tokens_details.reasoning_tokens`, when the server reported it.
    pub reasoning_tokens: Option<u64>,
    /// Did any event stream tool calls?
    pub tool_calls: bool,
}

/// Events a response may carry per token it was allowed: a server streams one event per token
/// (a few more with a role chunk, usage and `[DONE]`), so twice as many is already a fault.
const EVENTS_PER_TOKEN: u64 = 2;
/// Events and tokens' worth of bytes allowed beyond `max_tokens` (role, usage, finish chunks).
const EVENT_MARGIN: u64 = 64;
/// Bytes a response may carry per allowed token: vLLM's chunks are ~250 bytes, and several
/// KiB with top-k logprobs; 16 KiB leaves room for any of them.
const BYTES_PER_TOKEN: u64 = 16 * 1024;
/// Without `max_tokens` (the server decides the length): at most a million events or
/// 256 MiB, far past any context window.
const UNBOUNDED_EVENTS: u64 = 1_000_000;
const UNBOUNDED_BYTES: u64 = 256 * 1024 * 1024;

/// How much one response may carry before it counts as a server that never stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimit {
    pub events: u64,
    pub bytes: u64,
}

impl StreamLimit {
    /// The limit of a request that asked for at most `max_tokens`.
    pub fn for_max_tokens(max_tokens: Option<u64>) -> Self {
        match max_tokens {
            Some(m) => StreamLimit {
                events: m
                    .saturating_mul(EVENTS_PER_TOKEN)
                    .saturating_add(EVENT_MARGIN),
                bytes: m
                    .saturating_add(EVENT_MARGIN)
                    .saturating_mul(BYTES_PER_TOKEN),
            },
            None => StreamLimit {
                events: UNBOUNDED_EVENTS,
                bytes: UNBOUNDED_BYTES,
            },
        }
    }
}

/// Incremental state of one streamed response.
#[derive(Debug)]
pub struct StreamState {
    parser: SseParser,
    kind: EndpointKind,
    /// The shape of the latest token event, so the next ones need no JSON parse.
    shape: EventShape,
    pub acc: StreamAccumulator,
    limit: Option<StreamLimit>,
    bytes: u64,
}

impl StreamState {
    pub fn new(api: ApiKind) -> Self {
        StreamState {
            parser: SseParser::new(),
            kind: match api {
                // A pooling answer is not a stream; it is read by `pooling`, never parsed here.
                ApiKind::Completions | ApiKind::Embeddings | ApiKind::Rerank => {
                    EndpointKind::Completions
                }
                ApiKind::Chat => EndpointKind::Chat,
                ApiKind::Responses => EndpointKind::Responses,
            },
            shape: EventShape::default(),
            acc: StreamAccumulator::default(),
            limit: None,
            bytes: 0,
        }
    }

    /// Bounds what this response may carry ([`StreamState::over_limit`]).
    pub fn with_limit(mut self, limit: StreamLimit) -> Self {
        self.limit = Some(limit);
        self
    }

    /// The failure of a response that went past its limit, once it has: the caller stops
    /// reading and records it.
    pub fn over_limit(&self) -> Option<Failure> {
        let limit = self.limit?;
        let events = (self.acc.events.len() + self.acc.bare_events.len()) as u64;
        if events <= limit.events && self.bytes <= limit.bytes {
            return None;
        }
        Some(Failure {
            kind: FailureKind::Overlong,
            status: None,
            message: format!(
                "the server kept streaming past the request's limit ({events} events, {} bytes; at most {} events and {} bytes for its max_tokens): reading stopped",
                self.bytes, limit.events, limit.bytes
            ),
        })
    }

    /// Feed bytes received at `t` (ns from run start). Every event completed by these bytes
    /// gets the same receipt time: they arrived together.
    #[inline]
    pub fn feed(&mut self, t: u64, bytes: &[u8]) {
        self.bytes = self.bytes.saturating_add(bytes.len() as u64);
        let kind = self.kind;
        let acc = &mut self.acc;
        let shape = &mut self.shape;
        let result = self
            .parser
            .feed(bytes, |ev| acc.on_data(t, ev.data, kind, shape));
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
    fn on_data(&mut self, t: u64, data: &str, kind: EndpointKind, shape: &mut EventShape) {
        if is_done(data) {
            self.saw_done = true;
            return;
        }
        let info = match shape.classify(data, kind) {
            Ok(info) => info,
            Err(e) => {
                // The wire error already names the chunk and quotes its start.
                let message = match e {
                    servebench_wire::WireError::MalformedChunk { .. } => e.to_string(),
                    other => {
                        let excerpt: String = data.chars().take(120).collect();
                        format!("malformed chunk ({other}): {excerpt}")
                    }
                };
                self.fail(FailureKind::Malformed, message);
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
            if let Some(r) = u.reasoning_tokens() {
                self.reasoning_tokens = Some(r);
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
            if info.answer && self.first_answer.is_none() {
                self.first_answer = Some(t);
            }
            self.reasoning_events += u64::from(info.reasoning);
            self.tool_calls |= info.tool_calls;
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

impl StreamAccumulator {
    /// How the output divided into reasoning and answer; `None` for a plain response (no
    /// reasoning, no tool calls). The reasoning count is the server's
    /// `completion_tokens_details.reasoning_tokens` when it gave one; else `output_tokens`
    /// shared out in proportion to the token-bearing events that carried reasoning (exact
    /// when every event is one token, as vLLM streams).
    pub fn output_split(&self, output_tokens: u64) -> Option<OutputSplit> {
        let reported = self.reasoning_tokens.filter(|&n| n > 0);
        if reported.is_none() && self.reasoning_events == 0 && !self.tool_calls {
            return None;
        }
        let (reasoning_tokens, reasoning_source) = match self.reasoning_tokens {
            Some(n) => (n.min(output_tokens), CountSource::Usage),
            None => {
                let events = self.events.len() as u64;
                let share = if events == 0 {
                    0
                } else if self.reasoning_events == events {
                    output_tokens
                } else {
                    // Rounded to nearest; u128 so a huge count cannot overflow.
                    let n = u128::from(output_tokens) * u128::from(self.reasoning_events);
                    let d = u128::from(events);
                    u64::try_from((2 * n + d) / (2 * d)).unwrap_or(output_tokens)
                };
                (share.min(output_tokens), CountSource::Events)
            }
        };
        Some(OutputSplit {
            first_answer: self.first_answer,
            reasoning_tokens,
            reasoning_source,
            tool_calls: self.tool_calls,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A stream that ignores `max_tokens` is cut once it carries twice as many events (plus a
    /// margin), or its bytes run past the per-token allowance; a stream within them is not.
    #[test]
    fn a_stream_far_past_max_tokens_is_over_its_limit() {
        let limit = StreamLimit::for_max_tokens(Some(16));
        assert_eq!(limit.events, 16 * 2 + 64);
        let chunk =
            "data: {\"choices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":null}]}\n\n";
        let mut s = StreamState::new(ApiKind::Completions).with_limit(limit);
        for i in 0..limit.events {
            s.feed(i, chunk.as_bytes());
            assert!(s.over_limit().is_none(), "event {i}");
        }
        s.feed(limit.events, chunk.as_bytes());
        let f = s.over_limit().expect("over the limit");
        assert_eq!(f.kind, FailureKind::Overlong);
        assert!(f.message.contains("97 events"), "{}", f.message);
        // One event too large for the allowance: the bytes rule.
        let mut big = StreamState::new(ApiKind::Completions).with_limit(limit);
        big.feed(0, &vec![b'x'; (limit.bytes + 1) as usize]);
        assert!(big.over_limit().is_some());
        // Without a limit nothing is cut.
        let mut free = StreamState::new(ApiKind::Completions);
        free.feed(0, &vec![b'x'; (limit.bytes + 1) as usize]);
        assert!(free.over_limit().is_none());
    }

    /// A chunk that is not JSON is named once, with its start quoted once (it was wrapped
    /// twice: "malformed chunk (malformed chunk (…").
    #[test]
    fn a_malformed_chunk_is_named_once() {
        let mut s = StreamState::new(ApiKind::Completions);
        s.feed(1, b"data: {\"choices\": [oops\n\n");
        let f = s.acc.failure.expect("failed");
        assert_eq!(f.kind, FailureKind::Malformed);
        assert_eq!(
            f.message.matches("malformed chunk").count(),
            1,
            "{}",
            f.message
        );
        assert_eq!(f.message.matches("oops").count(), 1, "{}", f.message);
    }

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

    fn chat(delta: &str) -> String {
        format!(r#"{{"choices":[{{"index":0,"delta":{delta},"finish_reason":null}}]}}"#)
    }

    /// Reasoning, then content: TTFT is the first reasoning event, the first answer the first
    /// content event; without usage details the reasoning count comes from the events.
    #[test]
    fn reasoning_then_content_splits_first_answer_and_counts_events() {
        let role = chat(r#"{"role":"assistant","content":""}"#);
        let r1 = chat(r#"{"reasoning_content":"Let"}"#);
        let r2 = chat(r#"{"reasoning_content":" me"}"#);
        let r3 = chat(r#"{"reasoning":" think"}"#);
        let a1 = chat(r#"{"content":"Yes"}"#);
        let a2 = chat(r#"{"content":"."}"#);
        let acc = feed_all(
            ApiKind::Chat,
            &[
                (1, &role),
                (2, &r1),
                (3, &r2),
                (4, &r3),
                (7, &a1),
                (8, &a2),
                (9, "[DONE]"),
            ],
        );
        assert_eq!(acc.first_token, Some(2));
        assert_eq!(acc.first_answer, Some(7));
        assert_eq!(acc.reasoning_events, 3);
        let split = acc.output_split(acc.events.len() as u64).unwrap();
        assert_eq!(split.first_answer, Some(7));
        assert_eq!(split.reasoning_tokens, 3);
        assert_eq!(split.reasoning_source, CountSource::Events);
        assert!(!split.tool_calls);
        // Events carrying two tokens each: the usage count is shared out by events.
        assert_eq!(acc.output_split(10).unwrap().reasoning_tokens, 6);
    }

    /// The server's `completion_tokens_details.reasoning_tokens` wins over counting events.
    #[test]
    fn usage_reasoning_tokens_win_over_counting() {
        let r1 = chat(r#"{"reasoning_content":"a b c"}"#);
        let a1 = chat(r#"{"content":"d"}"#);
        let usage = r#"{"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":9,"total_tokens":11,"completion_tokens_details":{"reasoning_tokens":6}}}"#;
        let acc = feed_all(
            ApiKind::Chat,
            &[(1, &r1), (2, &a1), (3, usage), (4, "[DONE]")],
        );
        assert_eq!(acc.completion_tokens, Some(9));
        let split = acc.output_split(9).unwrap();
        assert_eq!(split.reasoning_tokens, 6);
        assert_eq!(split.reasoning_source, CountSource::Usage);
        assert_eq!(split.first_answer, Some(2));
    }

    /// Tool-call deltas are answer tokens: TTFT and the first answer are the first tool event.
    #[test]
    fn tool_calls_are_answer_tokens() {
        let t1 = chat(
            r#"{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}"#,
        );
        let t2 = chat(r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}"#);
        let acc = feed_all(ApiKind::Chat, &[(5, &t1), (6, &t2), (7, "[DONE]")]);
        assert_eq!(acc.first_token, Some(5));
        assert_eq!(acc.events.len(), 2);
        let split = acc.output_split(2).unwrap();
        assert_eq!(split.first_answer, Some(5));
        assert_eq!(split.reasoning_tokens, 0);
        assert!(split.tool_calls);
    }

    /// A plain content stream (and any completions stream) has no split: TTFAT is TTFT.
    #[test]
    fn plain_streams_have_no_split() {
        let a = chat(r#"{"content":"Hi"}"#);
        let acc = feed_all(ApiKind::Chat, &[(1, &a), (2, "[DONE]")]);
        assert_eq!(acc.first_answer, acc.first_token);
        assert_eq!(acc.output_split(1), None);
        let acc = feed_all(
            ApiKind::Completions,
            &[(
                3,
                r#"{"choices":[{"index":0,"text":"a","finish_reason":null}]}"#,
            )],
        );
        assert_eq!(acc.first_answer, Some(3));
        assert_eq!(acc.output_split(1), None);
    }

    /// A stream that stops while still reasoning has no first answer.
    #[test]
    fn reasoning_cut_by_max_tokens_has_no_answer() {
        let r1 = chat(r#"{"reasoning_content":"hmm"}"#);
        let acc = feed_all(ApiKind::Chat, &[(1, &r1), (2, "[DONE]")]);
        let split = acc.output_split(1).unwrap();
        assert_eq!(split.first_answer, None);
        assert_eq!(split.reasoning_tokens, 1);
    }
}
