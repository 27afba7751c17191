//! Response bodies: the pre-serialized SSE chunk template of a streaming request, the stream
//! that turns engine events into writes, and the one-shot JSON body.
//!
//! The streaming hot path builds each write by concatenating the request's template pieces
//! with the already JSON-escaped output words: no serializer runs per chunk.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use servebench_wire::openai::{
    ChatChoice, ChatCompletionResponse, CompletionChoice, CompletionResponse, ResponseMessage,
    Usage,
};
use servebench_wire::protocol::{
    CHAT_COMPLETION_OBJECT, CHAT_ID_PREFIX, COMPLETION_ID_PREFIX, TEXT_COMPLETION_OBJECT,
};
use servebench_wire::render::DONE_EVENT;
use servebench_wire::{ChunkHead, ChunkRenderer, ChunkStyle};

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

/// One request's stream chunks: wire's renderer plus what this request's usage reports.
#[derive(Debug)]
pub struct ChunkTemplate {
    chunks: ChunkRenderer,
    prompt_tokens: u32,
    continuous_usage: bool,
    details: bool,
    /// Leading reasoning tokens of a chat response (`None`: not a reasoning response).
    reasoning: Option<u32>,
}

/// The response id of engine request `id`.
fn response_id(endpoint: Endpoint, id: u64) -> String {
    match endpoint {
        Endpoint::Completions => format!("{COMPLETION_ID_PREFIX}{id:016x}"),
        Endpoint::Chat => format!("{CHAT_ID_PREFIX}{id:016x}"),
    }
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
        let rid = response_id(endpoint, id);
        let head = ChunkHead {
            endpoint,
            id: &rid,
            created,
            model,
        };
        ChunkTemplate {
            chunks: ChunkRenderer::new(head, ChunkStyle::Uniform),
            prompt_tokens,
            continuous_usage,
            details,
            reasoning: None,
        }
    }

    /// The response's first `n` output tokens are reasoning (chat only; completions ignore it).
    pub fn with_reasoning(mut self, n: u32) -> Self {
        self.reasoning = Some(n);
        self
    }

    fn usage(&self, completion: u32, cached: Option<u32>) -> Usage {
        let cached = cached.filter(|_| self.details).map(u64::from);
        let usage = Usage::new(u64::from(self.prompt_tokens), u64::from(completion), cached);
        match self.reasoning {
            Some(r) => usage.with_reasoning_tokens(u64::from(r.min(completion))),
            None => usage,
        }
    }

    /// Appends one reasoning chunk carrying `text` (already JSON-escaped).
    fn reasoning_chunk(&self, out: &mut Vec<u8>, text: &[u8], completion_so_far: u32) {
        let usage = self
            .continuous_usage
            .then(|| self.usage(completion_so_far, None));
        self.chunks.reasoning(out, text, usage.as_ref());
    }

    /// Appends the role-only chunk a chat stream opens with (nothing for completions).
    fn role_chunk(&self, out: &mut Vec<u8>) {
        self.chunks.role(out);
    }

    /// Appends one content chunk carrying `text` (already JSON-escaped).
    fn content_chunk(
        &self,
        out: &mut Vec<u8>,
        text: &[u8],
        finish: Option<FinishReason>,
        completion_so_far: u32,
    ) {
        let usage = self
            .continuous_usage
            .then(|| self.usage(completion_so_far, None));
        self.chunks
            .content(out, text, finish.map(FinishReason::as_str), usage.as_ref());
    }

    /// Appends the final usage chunk (empty `choices`).
    fn usage_chunk(&self, out: &mut Vec<u8>, finished: &Finished) {
        let usage = self.usage(finished.completion_tokens, Some(finished.cached_tokens));
        self.chunks.usage(out, &usage);
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
    /// Output tokens before this index are sent as reasoning (0: none).
    pub reasoning: u32,
    /// Nothing more to write: the next poll ends the stream.
    pub done: bool,
    /// Fail the connection on the next poll (injected disconnect).
    pub cut: bool,
}

/// One write's worth of output, split into reasoning and answer.
#[derive(Default)]
struct Batch {
    thinking: Vec<u8>,
    text: Vec<u8>,
    thinking_tokens: u32,
    answer_tokens: u32,
}

impl Batch {
    fn tokens(&self) -> u32 {
        self.thinking_tokens + self.answer_tokens
    }
}

/// Appends one step's event to `batch`: to the reasoning part while the response's output
/// index (`sent` before this write, plus the batch so far) is below `reasoning`. Returns the
/// finish if any.
fn merge_event(
    app: &AppState,
    ev: TokenEvent,
    batch: &mut Batch,
    sent: u32,
    reasoning: u32,
) -> Option<Finished> {
    if let Some(t) = ev.token {
        let word = app.word(t);
        if sent + batch.tokens() < reasoning {
            batch.thinking.extend_from_slice(word.as_bytes());
            batch.thinking_tokens += 1;
        } else {
            batch.text.extend_from_slice(word.as_bytes());
            batch.answer_tokens += 1;
        }
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
        let mut batch = Batch::default();
        let (sent, reasoning) = (self.sent, self.reasoning);
        let mut finished = merge_event(&self.app, first, &mut batch, sent, reasoning);
        while finished.is_none() {
            match self.events.try_recv() {
                Ok(ev) => finished = merge_event(&self.app, ev, &mut batch, sent, reasoning),
                Err(_) => break,
            }
        }
        if let Some(stall) = self.faults.stall_before_chunk() {
            self.app.faults().record(FaultKind::Stall);
            tokio::time::sleep(stall).await;
            // Steps that ended during the stall are merged into this chunk.
            while finished.is_none() {
                match self.events.try_recv() {
                    Ok(ev) => finished = merge_event(&self.app, ev, &mut batch, sent, reasoning),
                    Err(_) => break,
                }
            }
        }
        let before = self.sent;
        let new_tokens = batch.tokens();
        self.sent += new_tokens;
        let reason = finished.as_ref().map(|f| f.reason);
        if finished.is_some() {
            self.guard.disarm();
        }

        let mut out = Vec::with_capacity(batch.thinking.len() + batch.text.len() + 400);
        if !self.role_sent {
            self.template.role_chunk(&mut out);
            self.role_sent = true;
        }
        if new_tokens > 0 || reason.is_some() {
            let start = out.len();
            if batch.thinking_tokens > 0 {
                self.template.reasoning_chunk(
                    &mut out,
                    &batch.thinking,
                    before + batch.thinking_tokens,
                );
            }
            // The answer's chunk, or the finishing one (a response that ended while still
            // reasoning closes with an empty content chunk carrying the finish reason).
            if batch.answer_tokens > 0 || reason.is_some() {
                self.template
                    .content_chunk(&mut out, &batch.text, reason, self.sent);
            }
            let hit = |k: Option<u32>| k.is_some_and(|k| k > before && k <= self.sent);
            if hit(self.faults.malformed_at) {
                self.app.faults().record(FaultKind::Malformed);
                // Cut the JSON in half but keep the SSE framing so later events still parse.
                let cut = start + (out.len() - start) / 2;
                out.truncate(cut);
                out.extend_from_slice(b"\n\n");
            }
            if hit(self.faults.disconnect_after) {
                self.app.faults().record(FaultKind::Disconnect);
                self.cut = true;
                return Some(Ok(Bytes::from(out)));
            }
        }
        if let Some(f) = &finished {
            if self.include_usage {
                self.template.usage_chunk(&mut out, f);
            }
            out.extend_from_slice(DONE_EVENT);
            self.done = true;
        }
        Some(Ok(Bytes::from(out)))
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
    /// The leading output tokens that were reasoning (`None`: not a reasoning response).
    pub reasoning: Option<u32>,
}

/// The one-shot JSON body of a non-streaming request. `thinking`: the reasoning text of a
/// reasoning chat response, which vLLM returns beside the answer as `reasoning_content`.
pub fn full_body(
    meta: ResponseMeta<'_>,
    text: String,
    thinking: Option<String>,
    finished: &Finished,
) -> serde_json::Value {
    let ResponseMeta {
        endpoint,
        id,
        created,
        model,
        prompt_tokens,
        details,
        reasoning,
    } = meta;
    let mut usage = Usage::new(
        u64::from(prompt_tokens),
        u64::from(finished.completion_tokens),
        details.then_some(u64::from(finished.cached_tokens)),
    );
    if let Some(r) = reasoning {
        usage = usage.with_reasoning_tokens(u64::from(r.min(finished.completion_tokens)));
    }
    let usage = Some(usage);
    // A reasoning response that never reached its answer has no content, as in vLLM.
    let content = if thinking.is_some() && text.is_empty() {
        None
    } else {
        Some(text)
    };
    let reason = Some(finished.reason.as_str().to_owned());
    let body = match endpoint {
        Endpoint::Completions => serde_json::to_value(CompletionResponse {
            id: response_id(endpoint, id),
            object: TEXT_COMPLETION_OBJECT.to_owned(),
            created,
            model: model.to_owned(),
            choices: vec![CompletionChoice {
                index: 0,
                text: content.unwrap_or_default(),
                logprobs: None,
                finish_reason: reason,
                stop_reason: None,
                prompt_logprobs: None,
            }],
            usage,
        }),
        Endpoint::Chat => serde_json::to_value(ChatCompletionResponse {
            id: response_id(endpoint, id),
            object: CHAT_COMPLETION_OBJECT.to_owned(),
            created,
            model: model.to_owned(),
            choices: vec![ChatChoice {
                index: 0,
                message: ResponseMessage {
                    role: "assistant".to_owned(),
                    content,
                    reasoning_content: thinking,
                    tool_calls: Some(Vec::new()),
                },
                logprobs: None,
                finish_reason: reason,
                stop_reason: None,
            }],
            usage,
        }),
    };
    // Strings and integers only: serializing cannot fail.
    body.unwrap_or_default()
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
        let mut out = Vec::new();
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
        let mut out = Vec::new();
        t.role_chunk(&mut out);
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
