//! A response planned before its first byte is due: the SSE text of the whole stream and
//! the steps (when to send which bytes, stalls, resets) that pace it.

use std::time::Duration;

use servebench_wire::openai::Usage;
use servebench_wire::render::DONE_EVENT;
use servebench_wire::{ChunkHead, ChunkRenderer, ChunkStyle, EndpointKind};

use crate::script::{Fault, WORDS};

/// Everything one streamed response depends on.
#[derive(Debug, Clone)]
pub struct StreamSpec<'a> {
    /// Chat chunk shapes (else completions).
    pub chat: bool,
    /// The response id, the same in every chunk.
    pub id: String,
    /// Unix seconds, the `created` field.
    pub created: u64,
    /// The `model` field.
    pub model: &'a str,
    /// Tokens to send.
    pub tokens: u64,
    /// Tokens per event (at least 1).
    pub tokens_per_event: u32,
    /// From arrival to the first token.
    pub first_token_delay: Duration,
    /// Between tokens.
    pub inter_token_interval: Duration,
    /// Send the final usage-only chunk.
    pub include_usage: bool,
    /// `usage.prompt_tokens`.
    pub prompt_tokens: u64,
    /// `finish_reason` of the last token event.
    pub finish_reason: &'static str,
}

/// One step of a planned response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Write the plan's body up to byte `end` (from where the previous send stopped) once
    /// `at` (from arrival) has passed; `token_events` of those events carry tokens.
    Send {
        at: Duration,
        end: usize,
        token_events: u32,
    },
    /// Send nothing for a while.
    Stall(Duration),
    /// Reset the connection.
    Reset,
    /// End the chunked body.
    Finish,
}

/// A response prepared before its first byte is due, so pacing only writes.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// The SSE text of the whole response.
    pub(crate) body: Vec<u8>,
    pub(crate) steps: Vec<Step>,
}

/// The SSE text of a whole normal response (no fault, no HTTP framing): what a client's
/// parser receives. Used by benchmarks of the client's hot path.
pub fn sse_body(spec: &StreamSpec<'_>) -> Vec<u8> {
    plan_stream(spec, None).body
}

pub(crate) fn plan_stream(spec: &StreamSpec<'_>, fault: Option<&Fault>) -> Plan {
    let r = Renderer::new(spec);
    let tpe = u64::from(spec.tokens_per_event.max(1));
    let n_events = spec.tokens.div_ceil(tpe);
    // Event j is due when its last token is: delay + (last token index)·interval.
    let due = |j: u64| {
        let last_token = ((j + 1) * tpe).min(spec.tokens).saturating_sub(1);
        spec.first_token_delay
            + spec
                .inter_token_interval
                .saturating_mul(u32::try_from(last_token).unwrap_or(u32::MAX))
    };
    let mut body = Vec::with_capacity(estimate_bytes(spec, n_events));
    let mut steps = Vec::with_capacity(n_events as usize + 4);

    if fault == Some(&Fault::Empty) {
        if spec.chat {
            r.role(&mut body);
        }
        r.closing(&mut body);
        if spec.include_usage {
            r.usage(&mut body, 0);
        }
        body.extend_from_slice(DONE_EVENT);
        steps.push(Step::Send {
            at: spec.first_token_delay,
            end: body.len(),
            token_events: 0,
        });
        steps.push(Step::Finish);
        return Plan { body, steps };
    }

    let interrupt_at = match fault {
        Some(Fault::Reset { after_events })
        | Some(Fault::Truncate { after_events })
        | Some(Fault::Stall { after_events, .. })
        | Some(Fault::StreamError { after_events, .. }) => {
            Some(u64::from(*after_events).min(n_events))
        }
        _ => None,
    };
    let malformed_at = match fault {
        Some(Fault::Malformed { at_event }) => Some(u64::from(*at_event)),
        _ => None,
    };
    let non_utf8_at = match fault {
        Some(Fault::NonUtf8 { at_event }) => Some(u64::from(*at_event)),
        _ => None,
    };
    let huge = match fault {
        Some(Fault::HugeChunk { bytes }) => Some(*bytes),
        _ => None,
    };
    let mut text = String::new();
    for j in 0..=n_events {
        if interrupt_at == Some(j) {
            match fault {
                Some(Fault::Reset { .. }) => {
                    steps.push(Step::Reset);
                    return Plan { body, steps };
                }
                Some(Fault::Truncate { .. }) => {
                    steps.push(Step::Finish);
                    return Plan { body, steps };
                }
                Some(Fault::Stall { duration, .. }) => steps.push(Step::Stall(*duration)),
                Some(Fault::StreamError { message, .. }) => {
                    if j == 0 && spec.chat {
                        r.role(&mut body);
                    }
                    r.stream_error(&mut body, message);
                    body.extend_from_slice(DONE_EVENT);
                    let at = if j == 0 {
                        spec.first_token_delay
                    } else {
                        due(j - 1)
                    };
                    steps.push(Step::Send {
                        at,
                        end: body.len(),
                        token_events: 0,
                    });
                    steps.push(Step::Finish);
                    return Plan { body, steps };
                }
                _ => {}
            }
        }
        if j == n_events {
            break;
        }
        if j == 0 && spec.chat {
            r.role(&mut body);
        }
        text.clear();
        let first = j * tpe;
        let last = ((j + 1) * tpe).min(spec.tokens);
        for k in first..last {
            text.push_str(WORDS[(k % WORDS.len() as u64) as usize]);
        }
        if let (0, Some(bytes)) = (j, huge) {
            // One letter repeated needs no JSON escaping, like the words.
            text.push(' ');
            text.extend(std::iter::repeat_n('x', bytes.saturating_sub(1)));
        }
        let token_events = if malformed_at == Some(j) {
            r.malformed(&mut body, &text);
            0
        } else if non_utf8_at == Some(j) {
            r.non_utf8(&mut body);
            0
        } else {
            let finish = (j + 1 == n_events).then_some(spec.finish_reason);
            r.token(&mut body, &text, finish);
            1
        };
        steps.push(Step::Send {
            at: due(j),
            end: body.len(),
            token_events,
        });
    }
    if spec.include_usage {
        r.usage(&mut body, spec.tokens);
    }
    body.extend_from_slice(DONE_EVENT);
    let at = if n_events == 0 {
        spec.first_token_delay
    } else {
        due(n_events - 1)
    };
    steps.push(Step::Send {
        at,
        end: body.len(),
        token_events: 0,
    });
    steps.push(Step::Finish);
    Plan { body, steps }
}

fn estimate_bytes(spec: &StreamSpec<'_>, n_events: u64) -> usize {
    let per_event = 160 + spec.model.len() + 8 * spec.tokens_per_event as usize;
    usize::try_from(n_events)
        .unwrap_or(0)
        .saturating_mul(per_event)
        .saturating_add(512)
}

/// vLLM's chunks for one response, as vLLM itself serializes them, plus the broken chunk of
/// the malformed-chunk fault.
struct Renderer {
    chunks: ChunkRenderer,
    prompt_tokens: u64,
}

impl Renderer {
    fn new(spec: &StreamSpec<'_>) -> Self {
        let head = ChunkHead {
            endpoint: if spec.chat {
                EndpointKind::Chat
            } else {
                EndpointKind::Completions
            },
            id: &spec.id,
            created: spec.created,
            model: spec.model,
        };
        Renderer {
            chunks: ChunkRenderer::new(head, ChunkStyle::Vllm),
            prompt_tokens: spec.prompt_tokens,
        }
    }

    fn role(&self, out: &mut Vec<u8>) {
        self.chunks.role(out);
    }

    /// `text` must need no JSON escaping (it comes from `WORDS`).
    fn token(&self, out: &mut Vec<u8>, text: &str, finish: Option<&str>) {
        self.chunks.content(out, text.as_bytes(), finish, None);
    }

    fn closing(&self, out: &mut Vec<u8>) {
        self.chunks.closing(out, "stop");
    }

    fn usage(&self, out: &mut Vec<u8>, completion_tokens: u64) {
        let usage = Usage::new(self.prompt_tokens, completion_tokens, None);
        self.chunks.usage(out, &usage);
    }

    /// A data line whose bytes are not UTF-8 (a lone continuation byte and an overlong
    /// encoding), framed as a normal event.
    fn non_utf8(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"data: {\"choices\":[{\"text\":\"\x80\xC0\xAF\xFF\"}]}\n\n");
    }

    fn stream_error(&self, out: &mut Vec<u8>, message: &str) {
        self.chunks.stream_error(out, message);
    }

    /// A token chunk cut off in the middle of its JSON.
    fn malformed(&self, out: &mut Vec<u8>, text: &str) {
        out.extend_from_slice(self.chunks.head());
        out.extend_from_slice(br#"{"index":0,"text":""#);
        out.extend_from_slice(text.as_bytes());
        out.extend_from_slice(b"\",\"logpro\n\n");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use servebench_wire::chunk::{classify, is_done};
    use servebench_wire::sse::SseParser;

    fn spec(chat: bool, tokens: u64) -> StreamSpec<'static> {
        StreamSpec {
            chat,
            id: "cmpl-7".into(),
            created: 1_700_000_000,
            model: "m",
            tokens,
            tokens_per_event: 1,
            first_token_delay: Duration::from_millis(50),
            inter_token_interval: Duration::from_millis(20),
            include_usage: true,
            prompt_tokens: 5,
            finish_reason: "length",
        }
    }

    /// Every event's data, through the real SSE parser.
    fn events(body: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        let mut p = SseParser::new();
        p.feed(body, |ev| out.push(ev.data.to_owned()))
            .expect("a valid SSE stream");
        out
    }

    #[test]
    fn completions_chunks_have_vllm_shape_and_classify_as_tokens() {
        let body = sse_body(&spec(false, 3));
        let evs = events(&body);
        assert_eq!(evs.len(), 5, "{evs:?}");
        assert_eq!(
            evs[0],
            r#"{"id":"cmpl-7","object":"text_completion","created":1700000000,"model":"m","choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}"#
        );
        assert!(
            evs[2].contains(r#""finish_reason":"length","stop_reason":null"#),
            "{}",
            evs[2]
        );
        assert_eq!(
            evs[3],
            r#"{"id":"cmpl-7","object":"text_completion","created":1700000000,"model":"m","choices":[],"usage":{"prompt_tokens":5,"total_tokens":8,"completion_tokens":3}}"#
        );
        assert!(is_done(&evs[4]));
        for e in &evs[..3] {
            let info = classify(e, EndpointKind::Completions).unwrap();
            assert!(info.token_bearing);
        }
        let usage = classify(&evs[3], EndpointKind::Completions).unwrap();
        assert!(!usage.token_bearing);
        assert_eq!(usage.usage.unwrap().completion_tokens, 3);
    }

    #[test]
    fn chat_opens_with_a_role_only_chunk_that_is_no_token() {
        let body = sse_body(&spec(true, 2));
        let evs = events(&body);
        assert_eq!(
            evs[0],
            r#"{"id":"cmpl-7","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#
        );
        assert_eq!(
            evs[1],
            r#"{"id":"cmpl-7","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":" the"},"logprobs":null,"finish_reason":null}]}"#
        );
        let kinds: Vec<bool> = evs[..4]
            .iter()
            .map(|e| classify(e, EndpointKind::Chat).unwrap().token_bearing)
            .collect();
        assert_eq!(kinds, [false, true, true, false]);
        assert!(evs[2].contains(r#""finish_reason":"length""#));
    }

    #[test]
    fn deadlines_are_absolute_from_arrival() {
        let plan = plan_stream(&spec(false, 4), None);
        let ats: Vec<u64> = plan
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Send {
                    at,
                    token_events: 1,
                    ..
                } => Some(at.as_millis() as u64),
                _ => None,
            })
            .collect();
        assert_eq!(ats, [50, 70, 90, 110]);
        assert_eq!(plan.steps.last(), Some(&Step::Finish));
    }

    #[test]
    fn tokens_per_event_groups_tokens_and_times_events_by_their_last_token() {
        let mut s = spec(false, 5);
        s.tokens_per_event = 2;
        let plan = plan_stream(&s, None);
        let ats: Vec<u64> = plan
            .steps
            .iter()
            .filter_map(|st| match st {
                Step::Send {
                    at,
                    token_events: 1,
                    ..
                } => Some(at.as_millis() as u64),
                _ => None,
            })
            .collect();
        // Tokens 0..5 at 50,70,90,110,130; events carry (0,1), (2,3), (4).
        assert_eq!(ats, [70, 110, 130]);
        let evs = events(&plan.body);
        assert!(evs[0].contains(r#""text":" the of""#), "{}", evs[0]);
    }

    #[test]
    fn non_utf8_and_huge_chunk_faults_break_one_event_and_keep_the_rest() {
        let bad = plan_stream(&spec(false, 4), Some(&Fault::NonUtf8 { at_event: 1 }));
        assert!(std::str::from_utf8(&bad.body).is_err());
        let lines: Vec<&[u8]> = bad
            .body
            .split(|b| *b == b'\n')
            .filter(|l| l.starts_with(b"data: "))
            .collect();
        assert_eq!(lines.len(), 6, "four events, usage and [DONE]");
        assert!(std::str::from_utf8(lines[1]).is_err());
        assert!(std::str::from_utf8(lines[2]).is_ok());

        let huge = plan_stream(&spec(false, 3), Some(&Fault::HugeChunk { bytes: 1 << 20 }));
        let evs = events(&huge.body);
        assert!(evs[0].len() > 1 << 20, "{} bytes", evs[0].len());
        assert!(
            classify(&evs[0], EndpointKind::Completions)
                .unwrap()
                .token_bearing
        );
        assert!(is_done(evs.last().unwrap()));
    }

    #[test]
    fn faults_shape_the_plan() {
        let reset = plan_stream(&spec(false, 10), Some(&Fault::Reset { after_events: 3 }));
        assert_eq!(reset.steps.last(), Some(&Step::Reset));
        assert_eq!(events(&reset.body).len(), 3);

        let trunc = plan_stream(&spec(false, 10), Some(&Fault::Truncate { after_events: 2 }));
        let evs = events(&trunc.body);
        assert_eq!(evs.len(), 2);
        assert!(!evs.iter().any(|e| is_done(e)));

        let bad = plan_stream(&spec(false, 4), Some(&Fault::Malformed { at_event: 1 }));
        let evs = events(&bad.body);
        assert!(classify(&evs[1], EndpointKind::Completions).is_err());
        assert!(classify(&evs[2], EndpointKind::Completions).is_ok());

        let err = plan_stream(
            &spec(false, 4),
            Some(&Fault::StreamError {
                after_events: 2,
                message: "boom \"x\"".into(),
            }),
        );
        let evs = events(&err.body);
        let info = classify(&evs[2], EndpointKind::Completions).unwrap();
        assert!(info.error.unwrap().contains("boom"));
        assert!(is_done(&evs[3]));

        let empty = plan_stream(&spec(true, 4), Some(&Fault::Empty));
        let evs = events(&empty.body);
        assert!(evs
            .iter()
            .filter(|e| !is_done(e))
            .all(|e| !classify(e, EndpointKind::Chat).unwrap().token_bearing));
        assert!(is_done(evs.last().unwrap()));

        let stall = plan_stream(
            &spec(false, 4),
            Some(&Fault::Stall {
                after_events: 1,
                duration: Duration::from_secs(3),
            }),
        );
        assert!(matches!(stall.steps[1], Step::Stall(d) if d == Duration::from_secs(3)));
    }
}
