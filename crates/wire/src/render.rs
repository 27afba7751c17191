//! Writing SSE stream chunks in vLLM's shapes, for the servers (the simulator and the test
//! server) that stream them.
//!
//! A server renders thousands of chunks per second, so the fixed parts of one response's
//! chunks are serialized once, at [`ChunkRenderer::new`], and each chunk is those bytes plus the
//! already JSON-escaped text: no serializer runs per chunk.

use std::fmt::Write as _;

use crate::chunk::EndpointKind;
use crate::openai::Usage;
use crate::protocol::{error_type, CHAT_CHUNK_OBJECT, TEXT_COMPLETION_OBJECT};

/// Which keys the content chunks carry. vLLM itself serializes completions chunks with every
/// field (`"usage":null`) and chat chunks with only the fields set (`stop_reason` only on the
/// finishing chunk); a simpler server may write the same keys on every chunk. Clients must
/// read both, so both are rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkStyle {
    /// `stop_reason` on every choice, `usage` only when it has a value.
    Uniform,
    /// vLLM's own serialization, key for key.
    Vllm,
}

/// Identity of one streamed response.
#[derive(Debug, Clone, Copy)]
pub struct ChunkHead<'a> {
    /// Completions or chat shapes.
    pub endpoint: EndpointKind,
    /// The response id, the same on every chunk.
    pub id: &'a str,
    /// Unix seconds.
    pub created: u64,
    /// The served model name.
    pub model: &'a str,
}

/// The pre-serialized pieces of one response's chunks.
#[derive(Debug, Clone)]
pub struct ChunkRenderer {
    endpoint: EndpointKind,
    style: ChunkStyle,
    /// `data: {"id":…,"object":…,"created":…,"model":…,"choices":[`.
    head: Vec<u8>,
    /// `head` + `{"index":0,"text":"` (or `"delta":{"content":"`).
    content_open: Vec<u8>,
    /// `","logprobs":null,"finish_reason":` (chat closes the delta first).
    content_middle: &'static [u8],
}

fn json_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

impl ChunkRenderer {
    /// The renderer of one response.
    pub fn new(head: ChunkHead<'_>, style: ChunkStyle) -> Self {
        let object = match head.endpoint {
            EndpointKind::Completions => TEXT_COMPLETION_OBJECT,
            // The simulator renders a Responses stream as chat chunks and translates them.
            EndpointKind::Chat | EndpointKind::Responses => CHAT_CHUNK_OBJECT,
        };
        let prefix = format!(
            r#"data: {{"id":{},"object":"{object}","created":{},"model":{},"choices":["#,
            json_string(head.id),
            head.created,
            json_string(head.model)
        )
        .into_bytes();
        let (open, content_middle): (&[u8], &'static [u8]) = match head.endpoint {
            EndpointKind::Completions => (
                br#"{"index":0,"text":""#,
                br#"","logprobs":null,"finish_reason":"#,
            ),
            EndpointKind::Chat | EndpointKind::Responses => (
                br#"{"index":0,"delta":{"content":""#,
                br#""},"logprobs":null,"finish_reason":"#,
            ),
        };
        let mut content_open = prefix.clone();
        content_open.extend_from_slice(open);
        ChunkRenderer {
            endpoint: head.endpoint,
            style,
            head: prefix,
            content_open,
            content_middle,
        }
    }

    /// `data: {…,"choices":[`: the start every chunk of this response shares.
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    fn chat(&self) -> bool {
        self.endpoint != EndpointKind::Completions
    }

    /// The role-only chunk a chat stream opens with (nothing for completions).
    pub fn role(&self, out: &mut Vec<u8>) {
        if !self.chat() {
            return;
        }
        out.extend_from_slice(&self.head);
        out.extend_from_slice(
            br#"{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#,
        );
        out.extend_from_slice(b"\n\n");
    }

    /// One content chunk carrying `escaped_text` (already JSON-escaped), with the finish
    /// reason on the last one and `usage` when the stream reports it on every chunk.
    pub fn content(
        &self,
        out: &mut Vec<u8>,
        escaped_text: &[u8],
        finish: Option<&str>,
        usage: Option<&Usage>,
    ) {
        out.extend_from_slice(&self.content_open);
        out.extend_from_slice(escaped_text);
        out.extend_from_slice(self.content_middle);
        match finish {
            Some(reason) => {
                out.push(b'"');
                out.extend_from_slice(reason.as_bytes());
                out.push(b'"');
            }
            None => out.extend_from_slice(b"null"),
        }
        let stop_reason = match self.style {
            ChunkStyle::Uniform => true,
            ChunkStyle::Vllm => !self.chat() || finish.is_some(),
        };
        if stop_reason {
            out.extend_from_slice(b",\"stop_reason\":null");
        }
        out.extend_from_slice(b"}]");
        match usage {
            Some(u) => {
                out.extend_from_slice(b",\"usage\":");
                usage_json(out, u);
            }
            None if self.style == ChunkStyle::Vllm && !self.chat() => {
                out.extend_from_slice(b",\"usage\":null");
            }
            None => {}
        }
        out.extend_from_slice(b"}\n\n");
    }

    /// One chat chunk carrying `escaped_text` as `reasoning_content`, as vLLM streams a
    /// reasoning model's thinking when a reasoning parser is on (nothing for completions,
    /// whose text has no such split). It never finishes the stream: the answer follows.
    pub fn reasoning(&self, out: &mut Vec<u8>, escaped_text: &[u8], usage: Option<&Usage>) {
        if !self.chat() {
            return;
        }
        out.extend_from_slice(&self.head);
        out.extend_from_slice(br#"{"index":0,"delta":{"reasoning_content":""#);
        out.extend_from_slice(escaped_text);
        out.extend_from_slice(br#""},"logprobs":null,"finish_reason":null"#);
        if self.style == ChunkStyle::Uniform {
            out.extend_from_slice(b",\"stop_reason\":null");
        }
        out.extend_from_slice(b"}]");
        if let Some(u) = usage {
            out.extend_from_slice(b",\"usage\":");
            usage_json(out, u);
        }
        out.extend_from_slice(b"}\n\n");
    }

    /// A closing chunk without text (what vLLM sends when generation stops with no output).
    pub fn closing(&self, out: &mut Vec<u8>, finish: &str) {
        out.extend_from_slice(&self.head);
        let reason = json_string(finish);
        if self.chat() {
            let _ = write!(
                Bytes(out),
                r#"{{"index":0,"delta":{{}},"logprobs":null,"finish_reason":{reason},"stop_reason":null}}]}}"#
            );
        } else {
            let _ = write!(
                Bytes(out),
                r#"{{"index":0,"text":"","logprobs":null,"finish_reason":{reason},"stop_reason":null}}]"#
            );
            if self.style == ChunkStyle::Vllm {
                out.extend_from_slice(b",\"usage\":null");
            }
            out.push(b'}');
        }
        out.extend_from_slice(b"\n\n");
    }

    /// The usage-only chunk before `[DONE]` (empty `choices`).
    pub fn usage(&self, out: &mut Vec<u8>, usage: &Usage) {
        out.extend_from_slice(&self.head);
        out.extend_from_slice(b"],\"usage\":");
        usage_json(out, usage);
        out.extend_from_slice(b"}\n\n");
    }

    /// vLLM's in-stream error event: Python's `json.dumps` of the error body, with its spaces.
    pub fn stream_error(&self, out: &mut Vec<u8>, message: &str) {
        let _ = write!(
            Bytes(out),
            "data: {{\"error\": {{\"message\": {}, \"type\": \"{}\", \"param\": null, \"code\": 500}}}}\n\n",
            json_string(message),
            error_type::INTERNAL_SERVER
        );
    }
}

/// The end-of-stream event.
pub const DONE_EVENT: &[u8] = b"data: [DONE]\n\n";

/// `usage` in vLLM's key order (`prompt_tokens`, `total_tokens`, `completion_tokens`,
/// `prompt_tokens_details`).
fn usage_json(out: &mut Vec<u8>, u: &Usage) {
    let _ = write!(
        Bytes(out),
        r#"{{"prompt_tokens":{},"total_tokens":{},"completion_tokens":{}"#,
        u.prompt_tokens,
        u.total_tokens,
        u.completion_tokens
    );
    if let Some(c) = u.cached_tokens() {
        let _ = write!(
            Bytes(out),
            r#","prompt_tokens_details":{{"cached_tokens":{c}}}"#
        );
    }
    if let Some(r) = u.reasoning_tokens() {
        let _ = write!(
            Bytes(out),
            r#","completion_tokens_details":{{"reasoning_tokens":{r}}}"#
        );
    }
    out.push(b'}');
}

/// `fmt::Write` into a byte vector.
struct Bytes<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Bytes<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn head(endpoint: EndpointKind) -> ChunkHead<'static> {
        ChunkHead {
            endpoint,
            id: "cmpl-7",
            created: 1,
            model: "m\"x",
        }
    }

    fn text(out: &[u8]) -> &str {
        std::str::from_utf8(out).unwrap()
    }

    #[test]
    fn reasoning_chunks_are_chat_deltas_and_usage_reports_reasoning_tokens() {
        let mut out = Vec::new();
        let r = ChunkRenderer::new(head(EndpointKind::Chat), ChunkStyle::Vllm);
        let u = Usage::new(3, 5, None).with_reasoning_tokens(4);
        r.reasoning(&mut out, b" hm\\n", Some(&u));
        let data = text(&out).strip_prefix("data: ").unwrap().trim_end();
        let v: serde_json::Value = serde_json::from_str(data).unwrap();
        assert_eq!(v["choices"][0]["delta"]["reasoning_content"], " hm\n");
        assert!(v["choices"][0]["delta"].get("content").is_none());
        assert!(v["choices"][0]["finish_reason"].is_null());
        assert_eq!(
            v["usage"]["completion_tokens_details"]["reasoning_tokens"],
            4
        );
        let info = crate::classify(data, EndpointKind::Chat).unwrap();
        assert!(info.token_bearing && info.reasoning && !info.answer);
        assert_eq!(info.usage.unwrap().reasoning_tokens(), Some(4));
        out.clear();
        let r = ChunkRenderer::new(head(EndpointKind::Completions), ChunkStyle::Vllm);
        r.reasoning(&mut out, b" hm", None);
        assert!(out.is_empty());
    }

    #[test]
    fn styles_differ_only_in_optional_keys() {
        let mut out = Vec::new();
        let r = ChunkRenderer::new(head(EndpointKind::Completions), ChunkStyle::Uniform);
        r.content(&mut out, b" a", None, None);
        assert_eq!(
            text(&out),
            "data: {\"id\":\"cmpl-7\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\\\"x\",\"choices\":[{\"index\":0,\"text\":\" a\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}]}\n\n"
        );
        out.clear();
        let r = ChunkRenderer::new(head(EndpointKind::Completions), ChunkStyle::Vllm);
        r.content(&mut out, b" a", None, None);
        assert!(text(&out).ends_with("\"stop_reason\":null}],\"usage\":null}\n\n"));
        out.clear();
        let r = ChunkRenderer::new(head(EndpointKind::Chat), ChunkStyle::Vllm);
        r.content(&mut out, b" a", None, None);
        assert!(
            text(&out).ends_with("\"finish_reason\":null}]}\n\n"),
            "{}",
            text(&out)
        );
        out.clear();
        r.content(&mut out, b" a", Some("length"), None);
        assert!(text(&out).ends_with("\"finish_reason\":\"length\",\"stop_reason\":null}]}\n\n"));
    }

    #[test]
    fn usage_is_in_vllm_key_order() {
        let mut out = Vec::new();
        let r = ChunkRenderer::new(head(EndpointKind::Chat), ChunkStyle::Uniform);
        r.usage(&mut out, &Usage::new(5, 3, Some(2)));
        assert!(text(&out).ends_with(
            "\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"total_tokens\":8,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":2}}}\n\n"
        ));
    }
}
