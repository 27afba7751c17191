//! The client's per-event classifier: does this SSE `data` carry output, which text, which
//! usage? It runs once per streamed event, so it deserializes borrowed (`Cow<str>`,
//! `&RawValue`), keeps only the first choice's text, and skips everything else unparsed.
//!
//! The token-bearing rules are docs/metrics.md's:
//! - completions: an event with a non-empty `choices` list is a token, even with empty text,
//!   except (deliberately, unlike vLLM's client) a closing event whose choices all have empty
//!   text, no logprobs and a `finish_reason` (llama.cpp's final chunk);
//! - chat: an event whose delta carries non-empty content, reasoning content or tool calls is a
//!   token; the role-only opening chunk and a delta-less closing chunk are not;
//! - the usage-only chunk is never a token, and `[DONE]` is the caller's business
//!   ([`is_done`]).

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::openai::Usage;
use crate::WireError;

/// A string borrowed from the input when it has no escapes. (`Option<Cow<str>>` with
/// `#[serde(borrow)]` would still allocate: serde borrows only a bare `Cow` field.)
#[derive(Deserialize)]
#[serde(transparent)]
struct BStr<'a>(#[serde(borrow)] Cow<'a, str>);

fn cow(s: Option<BStr<'_>>) -> Option<Cow<'_, str>> {
    s.map(|b| b.0)
}

/// Which endpoint a stream comes from (the chunk shapes differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndpointKind {
    /// `/v1/completions`: `choices[].text`.
    Completions,
    /// `/v1/chat/completions`: `choices[].delta`.
    Chat,
    /// `/v1/responses` (the Responses API): typed events; `response.output_text.delta` and
    /// `response.reasoning_text.delta` carry output, `response.completed` ends the stream with
    /// the usage.
    Responses,
}

/// What one event carried.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChunkInfo<'a> {
    /// Does the event count as a token-bearing event (docs/metrics.md)?
    pub token_bearing: bool,
    /// Did the event have a non-empty `choices` list? vLLM's client counts every such event
    /// as a token, token-bearing or not.
    pub has_choices: bool,
    /// Output text of the first choice: completions `text`, or chat `reasoning_content` /
    /// `reasoning` followed by `content`. Borrowed unless it had escapes or two parts.
    pub text: Cow<'a, str>,
    /// Characters (Unicode scalar values) in `text`.
    pub text_chars: u32,
    /// The `usage` object, if the event carried one.
    pub usage: Option<Usage>,
    /// The first non-null `finish_reason` among the choices.
    pub finish_reason: Option<Cow<'a, str>>,
    /// A server error reported inside the stream (`{"error": ...}` or `"object": "error"`).
    pub error: Option<String>,
    /// Did a choice carry reasoning text (chat `reasoning_content` / `reasoning`)?
    pub reasoning: bool,
    /// Did a choice carry answer output: chat `content` or `tool_calls`, or any completions
    /// token (completions have no reasoning channel)?
    pub answer: bool,
    /// Did a choice carry a non-empty `tool_calls` list?
    pub tool_calls: bool,
}

/// Is this event's data the end-of-stream sentinel `[DONE]`?
pub fn is_done(data: &str) -> bool {
    data.trim_ascii() == "[DONE]"
}

/// Classify one event's `data` (not `[DONE]`: check [`is_done`] first).
pub fn classify(data: &str, endpoint: EndpointKind) -> Result<ChunkInfo<'_>, WireError> {
    if endpoint == EndpointKind::Responses {
        return classify_response_event(data);
    }
    let raw = match endpoint {
        EndpointKind::Responses => unreachable!("handled above"),
        EndpointKind::Completions => {
            let mut de = serde_json::Deserializer::from_str(data);
            let r = RawChunk::<CompletionChoice>::deserialize(&mut de)
                .and_then(|r| de.end().map(|()| r));
            r.map(RawChunk::into_parts)
        }
        EndpointKind::Chat => {
            let mut de = serde_json::Deserializer::from_str(data);
            let r = RawChunk::<ChatChoice>::deserialize(&mut de).and_then(|r| de.end().map(|()| r));
            r.map(RawChunk::into_parts)
        }
    };
    let (choices, top) = raw.map_err(|e| WireError::malformed(e, data))?;

    let error = top.error_message();
    let text_chars = count_chars(&choices.text);
    Ok(ChunkInfo {
        token_bearing: choices.any_token,
        has_choices: choices.any_choice,
        text: choices.text,
        text_chars,
        usage: top.usage,
        finish_reason: choices.finish_reason,
        error,
        reasoning: choices.parts.reasoning,
        answer: choices.parts.answer,
        tool_calls: choices.parts.tool_calls,
    })
}

/// One Responses API event, the fields the client reads.
#[derive(Deserialize)]
struct ResponseEvent<'a> {
    #[serde(borrow, rename = "type")]
    kind: BStr<'a>,
    #[serde(default, borrow)]
    delta: Option<BStr<'a>>,
    #[serde(default)]
    response: Option<ResponseObject>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize)]
struct ResponseObject {
    #[serde(default)]
    usage: Option<ResponseUsage>,
    #[serde(default)]
    error: Option<serde_json::Value>,
    #[serde(default)]
    status: Option<String>,
}

/// The Responses API's usage names.
#[derive(Deserialize)]
struct ResponseUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    input_tokens_details: Option<crate::openai::PromptTokensDetails>,
    #[serde(default)]
    output_tokens_details: Option<ResponseOutputDetails>,
}

#[derive(Deserialize)]
struct ResponseOutputDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

/// A Responses API event as vLLM's `openai-responses` client reads it: text and reasoning
/// deltas are token events (reasoning counts for TTFT and ITL but is not answer text),
/// `response.completed` carries the usage and ends the stream (as a `finish_reason` does),
/// `response.failed`, `response.incomplete` and `error` are errors, and every other event
/// (created, in_progress, output_item.added, ...) carries nothing.
fn classify_response_event(data: &str) -> Result<ChunkInfo<'_>, WireError> {
    let ev: ResponseEvent<'_> =
        serde_json::from_str(data).map_err(|e| WireError::malformed(e, data))?;
    let mut info = ChunkInfo::default();
    match ev.kind.0.as_ref() {
        "response.output_text.delta" => {
            let text = ev.delta.map(|d| d.0).unwrap_or_default();
            info.token_bearing = !text.is_empty();
            info.has_choices = true;
            info.text_chars = count_chars(&text);
            info.text = text;
            info.answer = true;
        }
        "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
            let text = ev.delta.map(|d| d.0).unwrap_or_default();
            info.token_bearing = !text.is_empty();
            info.has_choices = true;
            info.text_chars = count_chars(&text);
            info.reasoning = true;
        }
        "response.completed" => {
            if let Some(u) = ev.response.as_ref().and_then(|r| r.usage.as_ref()) {
                let mut usage = Usage::new(
                    u.input_tokens,
                    u.output_tokens,
                    u.input_tokens_details.and_then(|d| d.cached_tokens),
                );
                if let Some(r) = u
                    .output_tokens_details
                    .as_ref()
                    .and_then(|d| d.reasoning_tokens)
                {
                    usage.completion_tokens_details =
                        Some(crate::openai::CompletionTokensDetails {
                            reasoning_tokens: Some(r),
                        });
                }
                info.usage = Some(usage);
            }
            info.finish_reason = Some(Cow::Borrowed("stop"));
        }
        "response.failed" | "response.incomplete" => {
            let r = ev.response.as_ref();
            let detail = r
                .and_then(|r| r.error.as_ref())
                .map(|e| e.to_string())
                .or_else(|| r.and_then(|r| r.status.clone()))
                .unwrap_or_else(|| "no detail".to_owned());
            info.error = Some(format!("{}: {detail}", ev.kind.0));
        }
        "error" => {
            info.error = Some(
                ev.message
                    .unwrap_or_else(|| data.chars().take(200).collect()),
            );
        }
        _ => {}
    }
    Ok(info)
}

fn count_chars(s: &str) -> u32 {
    // Counting UTF-8 lead bytes is what `chars().count()` does, without decoding.
    let n = s.bytes().filter(|b| (b & 0xC0) != 0x80).count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Which kinds of output a choice carried.
#[derive(Debug, Clone, Copy, Default)]
struct Parts {
    reasoning: bool,
    answer: bool,
    tool_calls: bool,
}

impl std::ops::BitOrAssign for Parts {
    fn bitor_assign(&mut self, o: Parts) {
        self.reasoning |= o.reasoning;
        self.answer |= o.answer;
        self.tool_calls |= o.tool_calls;
    }
}

/// What a choice contributes, whatever the endpoint.
trait ChoiceLike<'a>: Deserialize<'a> {
    fn is_token(&self) -> bool;
    fn parts(&self) -> Parts;
    fn into_text(self) -> Cow<'a, str>;
    fn finish_reason(&mut self) -> Option<Cow<'a, str>>;
}

#[derive(Deserialize)]
struct CompletionChoice<'a> {
    #[serde(borrow, default)]
    text: Option<BStr<'a>>,
    #[serde(borrow, default)]
    logprobs: Option<&'a RawValue>,
    #[serde(borrow, default)]
    finish_reason: Option<BStr<'a>>,
}

impl<'a> ChoiceLike<'a> for CompletionChoice<'a> {
    fn is_token(&self) -> bool {
        let empty_text = self.text.as_ref().is_none_or(|t| t.0.is_empty());
        let closing_only = empty_text && self.logprobs.is_none() && self.finish_reason.is_some();
        !closing_only
    }
    fn parts(&self) -> Parts {
        Parts {
            answer: self.is_token(),
            ..Parts::default()
        }
    }
    fn into_text(self) -> Cow<'a, str> {
        cow(self.text).unwrap_or_default()
    }
    fn finish_reason(&mut self) -> Option<Cow<'a, str>> {
        cow(self.finish_reason.take())
    }
}

#[derive(Deserialize, Default)]
struct ChatDelta<'a> {
    #[serde(borrow, default)]
    content: Option<BStr<'a>>,
    #[serde(borrow, default)]
    reasoning_content: Option<BStr<'a>>,
    #[serde(borrow, default)]
    reasoning: Option<BStr<'a>>,
    #[serde(borrow, default)]
    tool_calls: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ChatChoice<'a> {
    #[serde(borrow, default)]
    delta: Option<ChatDelta<'a>>,
    #[serde(borrow, default)]
    finish_reason: Option<BStr<'a>>,
}

/// `[]`, with any whitespace inside.
fn is_empty_list(json: &str) -> bool {
    json.trim_ascii()
        .strip_prefix('[')
        .is_some_and(|rest| rest.trim_ascii() == "]")
}

fn non_empty(s: &Option<BStr<'_>>) -> bool {
    s.as_ref().is_some_and(|s| !s.0.is_empty())
}

impl<'a> ChoiceLike<'a> for ChatChoice<'a> {
    fn is_token(&self) -> bool {
        let p = self.parts();
        p.reasoning || p.answer
    }
    fn parts(&self) -> Parts {
        let Some(d) = &self.delta else {
            return Parts::default();
        };
        let tool_calls = d.tool_calls.is_some_and(|raw| !is_empty_list(raw.get()));
        Parts {
            reasoning: non_empty(&d.reasoning_content) || non_empty(&d.reasoning),
            answer: non_empty(&d.content) || tool_calls,
            tool_calls,
        }
    }
    fn into_text(self) -> Cow<'a, str> {
        let Some(d) = self.delta else {
            return Cow::Borrowed("");
        };
        let reasoning = cow(d.reasoning_content.or(d.reasoning)).unwrap_or_default();
        let content = cow(d.content).unwrap_or_default();
        if reasoning.is_empty() {
            content
        } else if content.is_empty() {
            reasoning
        } else {
            Cow::Owned(format!("{reasoning}{content}"))
        }
    }
    fn finish_reason(&mut self) -> Option<Cow<'a, str>> {
        cow(self.finish_reason.take())
    }
}

/// The `choices` list, folded as it is read: no `Vec` is built.
struct Choices<'a> {
    any_token: bool,
    any_choice: bool,
    text: Cow<'a, str>,
    finish_reason: Option<Cow<'a, str>>,
    parts: Parts,
}

impl Default for Choices<'_> {
    fn default() -> Self {
        Choices {
            any_token: false,
            any_choice: false,
            text: Cow::Borrowed(""),
            finish_reason: None,
            parts: Parts::default(),
        }
    }
}

struct ChoicesVisitor<C>(std::marker::PhantomData<C>);

impl<'de, C: ChoiceLike<'de>> Visitor<'de> for ChoicesVisitor<C> {
    type Value = Choices<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of choices")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Choices::default())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = Choices::default();
        let mut first = true;
        while let Some(mut choice) = seq.next_element::<C>()? {
            out.any_choice = true;
            let parts = choice.parts();
            out.any_token |= parts.reasoning || parts.answer;
            out.parts |= parts;
            if out.finish_reason.is_none() {
                out.finish_reason = choice.finish_reason();
            }
            // Only the first choice's text is kept (servebench sends n = 1, as vLLM's client).
            if first {
                out.text = choice.into_text();
                first = false;
            }
        }
        Ok(out)
    }
}

/// Top-level fields other than `choices`.
#[derive(Default)]
struct Top<'a> {
    usage: Option<Usage>,
    error: Option<&'a RawValue>,
    object_is_error: bool,
    message: Option<Cow<'a, str>>,
}

impl Top<'_> {
    fn error_message(&self) -> Option<String> {
        if let Some(raw) = self.error {
            #[derive(Deserialize)]
            struct Inner<'b> {
                #[serde(borrow, default)]
                message: Option<BStr<'b>>,
            }
            let text = raw.get().trim_ascii();
            if text == "null" {
                return None;
            }
            if let Ok(Inner { message: Some(m) }) = serde_json::from_str::<Inner<'_>>(text) {
                return Some(m.0.into_owned());
            }
            if let Ok(s) = serde_json::from_str::<Cow<'_, str>>(text) {
                return Some(s.into_owned());
            }
            return Some(text.to_owned());
        }
        if self.object_is_error {
            return Some(
                self.message
                    .as_deref()
                    .unwrap_or("server reported an error without a message")
                    .to_owned(),
            );
        }
        None
    }
}

struct RawChunk<'a, C> {
    choices: Choices<'a>,
    top: Top<'a>,
    _kind: std::marker::PhantomData<C>,
}

impl<'a, C> RawChunk<'a, C> {
    fn into_parts(self) -> (Choices<'a>, Top<'a>) {
        (self.choices, self.top)
    }
}

impl<'de, C: ChoiceLike<'de>> Deserialize<'de> for RawChunk<'de, C> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ChunkVisitor::<C>(std::marker::PhantomData))
    }
}

struct ChunkVisitor<C>(std::marker::PhantomData<C>);

/// Top-level keys, matched without allocating.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Key {
    Choices,
    Usage,
    Error,
    Object,
    Message,
    #[serde(other)]
    Other,
}

/// Wrapper so a `choices` value is read through [`ChoicesVisitor`].
struct ChoicesSeed<C>(std::marker::PhantomData<C>);

impl<'de, C: ChoiceLike<'de>> de::DeserializeSeed<'de> for ChoicesSeed<C> {
    type Value = Choices<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(ChoicesVisitor::<C>(std::marker::PhantomData))
    }
}

impl<'de, C: ChoiceLike<'de>> Visitor<'de> for ChunkVisitor<C> {
    type Value = RawChunk<'de, C>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object (an OpenAI stream chunk)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut choices = Choices::default();
        let mut top = Top::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Choices => {
                    choices = map.next_value_seed(ChoicesSeed::<C>(std::marker::PhantomData))?;
                }
                Key::Usage => top.usage = map.next_value::<Option<Usage>>()?,
                Key::Error => top.error = Some(map.next_value::<&'de RawValue>()?),
                Key::Object => {
                    let v = cow(map.next_value::<Option<BStr<'de>>>()?);
                    top.object_is_error = v.as_deref() == Some("error");
                }
                Key::Message => top.message = cow(map.next_value::<Option<BStr<'de>>>()?),
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(RawChunk {
            choices,
            top,
            _kind: std::marker::PhantomData,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use EndpointKind::{Chat, Completions};

    fn c(data: &str) -> ChunkInfo<'_> {
        classify(data, Completions).unwrap()
    }
    fn ch(data: &str) -> ChunkInfo<'_> {
        classify(data, Chat).unwrap()
    }

    const VLLM_CMPL: &str = r#"{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" world","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}"#;

    #[test]
    fn completions_text_chunk_is_a_token_and_borrows() {
        let info = c(VLLM_CMPL);
        assert!(info.token_bearing);
        assert_eq!(info.text, " world");
        assert!(matches!(info.text, Cow::Borrowed(_)));
        assert_eq!(info.text_chars, 6);
        assert_eq!(info.usage, None);
        assert_eq!(info.finish_reason, None);
        assert_eq!(info.error, None);
    }

    #[test]
    fn completions_empty_text_without_finish_is_still_a_token() {
        let info = c(r#"{"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":null}]}"#);
        assert!(info.token_bearing);
        assert_eq!(info.text_chars, 0);
    }

    #[test]
    fn completions_last_text_chunk_with_finish_reason_is_a_token() {
        let info = c(
            r#"{"choices":[{"index":0,"text":" end","logprobs":null,"finish_reason":"length","stop_reason":null}]}"#,
        );
        assert!(info.token_bearing);
        assert_eq!(info.finish_reason.as_deref(), Some("length"));
    }

    #[test]
    fn completions_closing_event_with_only_finish_reason_is_not_a_token() {
        // llama.cpp's final completions chunk, with usage and timings.
        let data = r#"{"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"stop"}],"created":1,"model":"m","system_fingerprint":"b1","object":"text_completion","id":"x","usage":{"completion_tokens":5,"prompt_tokens":3,"total_tokens":8},"timings":{"prompt_n":3,"prompt_ms":1.5,"predicted_n":5,"predicted_ms":20.0}}"#;
        let info = c(data);
        assert!(!info.token_bearing);
        assert_eq!(info.finish_reason.as_deref(), Some("stop"));
        assert_eq!(info.usage, Some(Usage::new(3, 5, None)));
    }

    #[test]
    fn completions_closing_event_with_logprobs_is_a_token() {
        let info =
            c(r#"{"choices":[{"text":"","logprobs":{"tokens":["</s>"]},"finish_reason":"stop"}]}"#);
        assert!(info.token_bearing);
    }

    #[test]
    fn usage_only_chunk_is_not_a_token() {
        let data = r#"{"id":"c","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":10,"total_tokens":26,"completion_tokens":16,"prompt_tokens_details":{"cached_tokens":8}}}"#;
        for kind in [Completions, Chat] {
            let info = classify(data, kind).unwrap();
            assert!(!info.token_bearing);
            let usage = info.usage.unwrap();
            assert_eq!(usage.completion_tokens, 16);
            assert_eq!(usage.cached_tokens(), Some(8));
        }
    }

    #[test]
    fn chat_role_only_opening_chunk_is_not_a_token() {
        let vllm = r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#;
        let llama = r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1,"id":"x","model":"m","object":"chat.completion.chunk"}"#;
        assert!(!ch(vllm).token_bearing);
        assert!(!ch(llama).token_bearing);
    }

    #[test]
    fn chat_content_chunk_is_a_token() {
        let info = ch(
            r#"{"choices":[{"index":0,"delta":{"content":"héllo"},"logprobs":null,"finish_reason":null}]}"#,
        );
        assert!(info.token_bearing);
        assert_eq!(info.text, "héllo");
        assert_eq!(info.text_chars, 5);
    }

    #[test]
    fn chat_reasoning_and_tool_calls_are_tokens() {
        let r = ch(r#"{"choices":[{"delta":{"reasoning_content":"hmm"}}]}"#);
        assert!(r.token_bearing);
        assert_eq!(r.text, "hmm");
        let r2 = ch(r#"{"choices":[{"delta":{"reasoning":"so","content":" yes"}}]}"#);
        assert!(r2.token_bearing);
        assert_eq!(r2.text, "so yes");
        assert_eq!(r2.text_chars, 6);
        let t = ch(
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}"#,
        );
        assert!(t.token_bearing);
        assert_eq!(t.text, "");
        assert!(!ch(r#"{"choices":[{"delta":{"tool_calls":[ ]}}]}"#).token_bearing);
        assert!(!ch(r#"{"choices":[{"delta":{"tool_calls":null}}]}"#).token_bearing);
    }

    #[test]
    fn chunk_parts_split_reasoning_from_answer() {
        let r = ch(r#"{"choices":[{"delta":{"reasoning_content":"hmm","content":null}}]}"#);
        assert!((r.reasoning, r.answer, r.tool_calls) == (true, false, false));
        let r = ch(r#"{"choices":[{"delta":{"reasoning":"so","content":""}}]}"#);
        assert!((r.reasoning, r.answer, r.tool_calls) == (true, false, false));
        let a = ch(r#"{"choices":[{"delta":{"content":"yes","reasoning_content":""}}]}"#);
        assert!((a.reasoning, a.answer, a.tool_calls) == (false, true, false));
        let t = ch(
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":""}}]}}]}"#,
        );
        assert!((t.reasoning, t.answer, t.tool_calls) == (false, true, true));
        let role = ch(r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#);
        assert!((role.reasoning, role.answer, role.tool_calls) == (false, false, false));
        // Completions have no reasoning channel: every token is answer.
        let c1 = c(VLLM_CMPL);
        assert!((c1.reasoning, c1.answer) == (false, true));
        let closing = c(r#"{"choices":[{"text":"","finish_reason":"stop"}]}"#);
        assert!(!closing.answer);
        let u = ch(
            r#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":9,"total_tokens":10,"completion_tokens_details":{"reasoning_tokens":7}}}"#,
        );
        assert_eq!(u.usage.unwrap().reasoning_tokens(), Some(7));
        assert!(!u.answer && !u.reasoning);
    }

    #[test]
    fn chat_closing_chunks_are_not_tokens() {
        // llama.cpp: empty delta with finish_reason, usage and timings.
        let llama = r#"{"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1,"id":"x","model":"m","object":"chat.completion.chunk","usage":{"completion_tokens":4,"prompt_tokens":2,"total_tokens":6},"timings":{"predicted_n":4}}"#;
        let info = ch(llama);
        assert!(!info.token_bearing);
        assert_eq!(info.finish_reason.as_deref(), Some("stop"));
        assert_eq!(info.usage.unwrap().completion_tokens, 4);
        // Empty content with a finish reason, and no delta at all.
        assert!(
            !ch(r#"{"choices":[{"delta":{"content":""},"finish_reason":"length"}]}"#).token_bearing
        );
        assert!(!ch(r#"{"choices":[{"index":0,"finish_reason":"stop"}]}"#).token_bearing);
    }

    #[test]
    fn chat_last_content_chunk_with_finish_reason_is_a_token() {
        let info = ch(
            r#"{"choices":[{"delta":{"content":"."},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}"#,
        );
        assert!(info.token_bearing);
        assert_eq!(info.usage.unwrap().total_tokens, 3);
    }

    #[test]
    fn escaped_text_is_decoded() {
        let info = c(r#"{"choices":[{"text":"a\nb\u00e9\"","finish_reason":null}]}"#);
        assert_eq!(info.text, "a\nbé\"");
        assert_eq!(info.text_chars, 5);
    }

    #[test]
    fn in_stream_errors_in_every_shape() {
        let nested = r#"{"error":{"message":"engine died","type":"InternalServerError","param":null,"code":500}}"#;
        let flat =
            r#"{"object":"error","message":"engine died","type":"InternalServerError","code":500}"#;
        let plain = r#"{"error":"engine died"}"#;
        for data in [nested, flat, plain] {
            for kind in [Completions, Chat] {
                let info = classify(data, kind).unwrap();
                assert_eq!(info.error.as_deref(), Some("engine died"), "{data}");
                assert!(!info.token_bearing);
            }
        }
        assert_eq!(c(r#"{"error":null,"choices":[]}"#).error, None);
    }

    #[test]
    fn malformed_chunks_are_errors_with_an_excerpt() {
        for bad in [
            r#"{"choices":[{"text":"x"#,
            "not json",
            "[1,2]",
            r#"{"choices":5}"#,
            "{} {}",
        ] {
            let err = classify(bad, Completions).unwrap_err();
            assert!(matches!(err, WireError::MalformedChunk { .. }), "{bad}");
        }
        let long = format!("{{\"choices\": [{}", "x".repeat(500));
        let msg = classify(&long, Chat).unwrap_err().to_string();
        assert!(msg.len() < 300, "{msg}");
    }

    #[test]
    fn done_sentinel() {
        assert!(is_done("[DONE]"));
        assert!(is_done(" [DONE] "));
        assert!(!is_done("[DONE"));
        assert!(!is_done(VLLM_CMPL));
    }

    #[test]
    fn choices_null_or_missing_is_not_a_token() {
        assert!(!c(r#"{"choices":null}"#).token_bearing);
        assert!(!c(r#"{"id":"x"}"#).token_bearing);
    }

    #[test]
    fn multiple_choices_any_token_counts_and_first_text_kept() {
        let info = c(
            r#"{"choices":[{"index":0,"text":"a"},{"index":1,"text":"b","finish_reason":"stop"}]}"#,
        );
        assert!(info.token_bearing);
        assert_eq!(info.text, "a");
        assert_eq!(info.finish_reason.as_deref(), Some("stop"));
    }
}
