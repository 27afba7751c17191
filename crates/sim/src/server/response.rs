//! Response bodies: the pre-serialized SSE chunk template of a streaming request, the stream
//! that turns engine events into writes, and the one-shot JSON body.
//!
//! The streaming hot path builds each write by concatenating the request's template pieces
//! with the already JSON-escaped output words: no serializer runs per chunk.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::sync::mpsc;

use super::request::Endpoint;
use super::AppState;
use crate::engine::{FinishReason, Finished};
use crate::faults::{FaultKind, RequestFaults};
use crate::realtime::{EngineHandle, TokenEvent};

/// Aborts the engine request when dropped before it finished: a client that disconnects
/// drops the response body (streaming) or the handler future (non-streaming).
#[derive(Debug)]
pub struct AbortOnDrop {
    engine: EngineHandle,
    id: u64,
    armed: bool,
}

impl AbortOnDrop {
    /// Guards request `id`.
    pub fn new(engine: EngineHandle, id: u64) -> Self {
        AbortOnDrop {
            engine,
            id,
            armed: true,
        }
    }

    /// The request finished; nothing to abort.
    pub fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.engine.abort(self.id);
        }
    }
}

/// The fixed parts of one request's stream chunks.
#[derive(Debug)]
pub struct ChunkTemplate {
    /// `data: {…,"choices":[{"index":0,"text":"` (or `"delta":{"content":"`).
    prefix: Bytes,
    /// `","logprobs":null,"finish_reason":` (chat closes the delta first).
    middle: Bytes,
    /// The role-only chunk a chat stream sends with its first content chunk.
    role_chunk: Option<Bytes>,
    /// `data: {"id":…,"model":…,"choices":[],"usage":` of the final usage chunk.
    usage_prefix: Bytes,
    prompt_tokens: u32,
    continuous_usage: bool,
    details: bool,
}

fn json_str(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

impl ChunkTemplate {
    /// Builds the template of request `id`.
    pub fn new(
        endpoint: Endpoint,
        id: u64,
        created: u64,
        model: &str,
        prompt_tokens: u32,
        continuous_usage: bool,
        details: bool,
    ) -> Self {
        let model = json_str(model);
        let (object, rid) = match endpoint {
            Endpoint::Completions => ("text_completion", format!("cmpl-{id:016x}")),
            Endpoint::Chat => ("chat.completion.chunk", format!("chatcmpl-{id:016x}")),
        };
        let head = format!(
            r#"data: {{"id":"{rid}","object":"{object}","created":{created},"model":{model},"choices":["#
        );
        let (prefix, middle, role_chunk) = match endpoint {
            Endpoint::Completions => (
                format!(r#"{head}{{"index":0,"text":""#),
                r#"","logprobs":null,"finish_reason":"#.to_string(),
                None,
            ),
            Endpoint::Chat => (
                format!(r#"{head}{{"index":0,"delta":{{"content":""#),
                r#""},"logprobs":null,"finish_reason":"#.to_string(),
                Some(Bytes::from(
                    format!(
                        r#"{head}{{"index":0,"delta":{{"role":"assistant","content":""}},"logprobs":null,"finish_reason":null}}]}}"#
                    ) + "\n\n",
                )),
            ),
        };
        ChunkTemplate {
            prefix: Bytes::from(prefix),
            middle: Bytes::from(middle),
            role_chunk,
            usage_prefix: Bytes::from(format!("{head}],\"usage\":")),
            prompt_tokens,
            continuous_usage,
            details,
        }
    }

    fn usage_json(&self, out: &mut BytesMut, completion: u32, cached: Option<u32>) {
        let p = self.prompt_tokens;
        let mut s = format!(
            r#"{{"prompt_tokens":{p},"total_tokens":{},"completion_tokens":{completion}"#,
            p + completion
        );
        if let (true, Some(c)) = (self.details, cached) {
            s.push_str(&format!(
                r#","prompt_tokens_details":{{"cached_tokens":{c}}}"#
            ));
        }
        s.push('}');
        out.put_slice(s.as_bytes());
    }

    /// Appends one content chunk carrying `text` (already JSON-escaped).
    fn content_chunk(
        &self,
        out: &mut BytesMut,
        text: &[u8],
        finish: Option<FinishReason>,
        completion_so_far: u32,
    ) {
        out.put_slice(&self.prefix);
        out.put_slice(text);
        out.put_slice(&self.middle);
        match finish {
            Some(r) => {
                out.put_u8(b'"');
                out.put_slice(r.as_str().as_bytes());
                out.put_u8(b'"');
            }
            None => out.put_slice(b"null"),
        }
        out.put_slice(b",\"stop_reason\":null}]");
        if self.continuous_usage {
            out.put_slice(b",\"usage\":");
            self.usage_json(out, completion_so_far, None);
        }
        out.put_slice(b"}\n\n");
    }

    /// Appends the final usage chunk (empty `choices`).
    fn usage_chunk(&self, out: &mut BytesMut, finished: &Finished) {
        out.put_slice(&self.usage_prefix);
        self.usage_json(
            out,
            finished.completion_tokens,
            Some(finished.cached_tokens),
        );
        out.put_slice(b"}\n\n");
    }
}

/// Everything a streaming response needs after validation.
pub struct StreamState {
    /// Server state (output words, fault counters).
    pub app: AppState,
    /// The request's pre-serialized chunk pieces.
    pub template: Arc<ChunkTemplate>,
    /// Token events from the engine.
    pub events: mpsc::UnboundedReceiver<TokenEvent>,
    /// Aborts the request if the stream is dropped early.
    pub guard: AbortOnDrop,
    /// The request's injected faults.
    pub faults: RequestFaults,
    /// Send a usage chunk before `[DONE]`.
    pub include_usage: bool,
    /// Tokens written so far.
    pub sent: u32,
    /// The chat role chunk has gone out.
    pub role_sent: bool,
    /// Nothing more to write: the next poll ends the stream.
    pub done: bool,
    /// Fail the connection on the next poll (injected disconnect).
    pub cut: bool,
}

/// Appends `events` (one or more steps' worth) to `text`; returns the finish if any.
fn merge_event(
    app: &AppState,
    ev: TokenEvent,
    text: &mut BytesMut,
    tokens: &mut u32,
) -> Option<Finished> {
    if let Some(t) = ev.token {
        text.put_slice(app.word(t).as_bytes());
        *tokens += 1;
    }
    ev.finished
}

impl StreamState {
    /// The next write: one chunk per engine step, or every queued step merged into one chunk
    /// when this handler fell behind. `None` ends the stream.
    pub async fn next_write(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        if self.cut {
            // An injected disconnect: fail the body so the connection is dropped mid-stream.
            return Some(Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "injected disconnect",
            )));
        }
        if self.done {
            return None;
        }
        let first = self.events.recv().await;
        let Some(first) = first else {
            // The engine stopped: end without [DONE], as a dying server would.
            self.done = true;
            return None;
        };
        let mut text = BytesMut::new();
        let mut new_tokens = 0u32;
        let mut finished = merge_event(&self.app, first, &mut text, &mut new_tokens);
        while finished.is_none() {
            match self.events.try_recv() {
                Ok(ev) => finished = merge_event(&self.app, ev, &mut text, &mut new_tokens),
                Err(_) => break,
            }
        }
        if let Some(stall) = self.faults.stall_before_chunk() {
            self.app.faults().record(FaultKind::Stall);
            tokio::time::sleep(stall).await;
            // Steps that ended during the stall are merged into this chunk.
            while finished.is_none() {
                match self.events.try_recv() {
                    Ok(ev) => finished = merge_event(&self.app, ev, &mut text, &mut new_tokens),
                    Err(_) => break,
                }
            }
        }
        let before = self.sent;
        self.sent += new_tokens;
        let reason = finished.as_ref().map(|f| f.reason);
        if finished.is_some() {
            self.guard.disarm();
        }

        let mut out = BytesMut::with_capacity(self.template.prefix.len() + text.len() + 160);
        if !self.role_sent {
            if let Some(role) = &self.template.role_chunk {
                out.put_slice(role);
            }
            self.role_sent = true;
        }
        if new_tokens > 0 || reason.is_some() {
            let start = out.len();
            self.template
                .content_chunk(&mut out, &text, reason, self.sent);
            let hit = |k: Option<u32>| k.is_some_and(|k| k > before && k <= self.sent);
            if hit(self.faults.malformed_at) {
                self.app.faults().record(FaultKind::Malformed);
                // Cut the JSON in half but keep the SSE framing so later events still parse.
                let cut = start + (out.len() - start) / 2;
                out.truncate(cut);
                out.put_slice(b"\n\n");
            }
            if hit(self.faults.disconnect_after) {
                self.app.faults().record(FaultKind::Disconnect);
                self.cut = true;
                return Some(Ok(out.freeze()));
            }
        }
        if let Some(f) = &finished {
            if self.include_usage {
                self.template.usage_chunk(&mut out, f);
            }
            out.put_slice(b"data: [DONE]\n\n");
            self.done = true;
        }
        Some(Ok(out.freeze()))
    }
}

/// Identity of one response.
#[derive(Debug, Clone, Copy)]
pub struct ResponseMeta<'a> {
    /// Completions or chat.
    pub endpoint: Endpoint,
    /// Engine request id (the response id derives from it).
    pub id: u64,
    /// Unix seconds.
    pub created: u64,
    /// Served model name.
    pub model: &'a str,
    /// Prompt length as counted by the server.
    pub prompt_tokens: u32,
    /// Include `prompt_tokens_details`.
    pub details: bool,
}

/// The one-shot JSON body of a non-streaming request.
pub fn full_body(meta: ResponseMeta<'_>, text: String, finished: &Finished) -> serde_json::Value {
    let ResponseMeta {
        endpoint,
        id,
        created,
        model,
        prompt_tokens,
        details,
    } = meta;
    let mut usage = serde_json::json!({
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + finished.completion_tokens,
        "completion_tokens": finished.completion_tokens,
    });
    if details {
        usage["prompt_tokens_details"] =
            serde_json::json!({ "cached_tokens": finished.cached_tokens });
    }
    let reason = finished.reason.as_str();
    match endpoint {
        Endpoint::Completions => serde_json::json!({
            "id": format!("cmpl-{id:016x}"),
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [{
                "index": 0,
                "text": text,
                "logprobs": null,
                "finish_reason": reason,
                "stop_reason": null,
                "prompt_logprobs": null,
            }],
            "usage": usage,
        }),
        Endpoint::Chat => serde_json::json!({
            "id": format!("chatcmpl-{id:016x}"),
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [{
                "index": 0,
                "message": { "role": "assistant", "content": text, "tool_calls": [] },
                "logprobs": null,
                "finish_reason": reason,
                "stop_reason": null,
            }],
            "usage": usage,
        }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn parse_events(bytes: &[u8]) -> Vec<serde_json::Value> {
        std::str::from_utf8(bytes)
            .unwrap()
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap())
            .collect()
    }

    #[test]
    fn completion_chunks_are_valid_json_with_usage_when_asked() {
        let t = ChunkTemplate::new(
            Endpoint::Completions,
            7,
            1_700_000_000,
            "m\"x",
            12,
            true,
            true,
        );
        let mut out = BytesMut::new();
        t.content_chunk(&mut out, b" the of", None, 2);
        t.content_chunk(&mut out, b" and", Some(FinishReason::Length), 3);
        let fin = Finished {
            id: 7,
            reason: FinishReason::Length,
            prompt_tokens: 12,
            completion_tokens: 3,
            cached_tokens: 8,
            preemptions: 0,
        };
        t.usage_chunk(&mut out, &fin);
        let ev = parse_events(&out);
        assert_eq!(ev[0]["id"], "cmpl-0000000000000007");
        assert_eq!(ev[0]["model"], "m\"x");
        assert_eq!(ev[0]["choices"][0]["text"], " the of");
        assert!(ev[0]["choices"][0]["finish_reason"].is_null());
        assert_eq!(ev[0]["usage"]["completion_tokens"], 2);
        assert_eq!(ev[1]["choices"][0]["finish_reason"], "length");
        assert_eq!(ev[2]["choices"], serde_json::json!([]));
        assert_eq!(ev[2]["usage"]["total_tokens"], 15);
        assert_eq!(ev[2]["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
    }

    #[test]
    fn chat_chunks_use_deltas() {
        let t = ChunkTemplate::new(Endpoint::Chat, 1, 0, "m", 5, false, false);
        let mut out = BytesMut::new();
        out.put_slice(t.role_chunk.as_ref().unwrap());
        t.content_chunk(&mut out, b" hi", Some(FinishReason::Stop), 1);
        let ev = parse_events(&out);
        assert_eq!(ev[0]["object"], "chat.completion.chunk");
        assert_eq!(
            ev[0]["choices"][0]["delta"],
            serde_json::json!({"role": "assistant", "content": ""})
        );
        assert_eq!(ev[1]["choices"][0]["delta"]["content"], " hi");
        assert_eq!(ev[1]["choices"][0]["finish_reason"], "stop");
        assert!(ev[1].get("usage").is_none());
    }
}
