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
use super::stop::StopScan;
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

    /// The server ended the request after `emitted` tokens (a stop): the engine frees it and
    /// counts it as stopped, not aborted.
    pub fn stop_early(&mut self, emitted: u32) {
        if self.armed {
            self.engine.stop_early(self.id, emitted);
            self.armed = false;
        }
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
        Endpoint::Chat | Endpoint::Responses => format!("{CHAT_ID_PREFIX}{id:016x}"),
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

    /// Appends the final usage chunk (empty `choices`): the prompt once, the completion
    /// tokens of every choice.
    fn usage_chunk(&self, out: &mut Vec<u8>, completion_tokens: u32, cached_tokens: u32) {
        let usage = self.usage(completion_tokens, Some(cached_tokens));
        self.chunks.usage(out, &usage);
    }
}

/// One choice of a streaming response: its engine request and how far it has got.
pub struct ChoiceStream {
    /// The choice's `index` (0 for a request with `n` 1).
    pub index: u32,
    /// The choice's engine request id.
    pub id: u64,
    /// Token events from the engine.
    pub events: mpsc::UnboundedReceiver<TokenEvent>,
    /// Aborts the request if the stream is dropped early.
    pub guard: AbortOnDrop,
    /// The request's stop strings / stop tokens, if it has any.
    pub stop: Option<StopScan>,
    /// Tokens taken so far.
    pub sent: u32,
    /// The chat role chunk has gone out.
    pub role_sent: bool,
    /// Set once the choice has finished (the engine ended it, or a stop did).
    pub finished: Option<Finished>,
}

impl ChoiceStream {
    /// A choice that has not produced anything yet.
    pub fn new(
        index: u32,
        id: u64,
        events: mpsc::UnboundedReceiver<TokenEvent>,
        guard: AbortOnDrop,
        stop: Option<StopScan>,
    ) -> Self {
        ChoiceStream {
            index,
            id,
            events,
            guard,
            stop,
            sent: 0,
            role_sent: false,
            finished: None,
        }
    }
}

/// Everything a streaming response needs after validation.
pub struct StreamState {
    /// Server state (output words, fault counters).
    pub app: AppState,
    /// The request's pre-serialized chunk pieces.
    pub template: Arc<ChunkTemplate>,
    /// The choices, by index.
    pub choices: Vec<ChoiceStream>,
    /// The request's injected faults (they follow choice 0's tokens).
    pub faults: RequestFaults,
    /// Send a usage chunk before `[DONE]`.
    pub include_usage: bool,
    /// Output tokens before this index are sent as reasoning (0: none).
    pub reasoning: u32,
    /// Nothing more to write: the next poll ends the stream.
    pub done: bool,
    /// Fail the connection on the next poll (injected disconnect).
    pub cut: bool,
}

/// One write's worth of output of one choice, split into reasoning and answer.
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
/// index (`c.sent` before this write, plus the batch so far) is below `reasoning`. With stop
/// conditions the token goes through the scan instead, whose text [`release_text`] adds; a
/// stop ends the choice here, and its engine request with it.
fn merge_event(
    app: &AppState,
    c: &mut ChoiceStream,
    ev: TokenEvent,
    batch: &mut Batch,
    reasoning: u32,
    prompt_tokens: u32,
) {
    if c.finished.is_some() {
        // Steps the engine ran before it learnt of a stop: never shown.
        return;
    }
    if let Some(t) = ev.token {
        let thinking = c.sent + batch.tokens() < reasoning;
        if thinking {
            batch.thinking_tokens += 1;
        } else {
            batch.answer_tokens += 1;
        }
        match &mut c.stop {
            None => {
                let word = app.word(t);
                let part = if thinking {
                    &mut batch.thinking
                } else {
                    &mut batch.text
                };
                part.extend_from_slice(word.as_bytes());
            }
            Some(scan) => {
                if scan.push(t, &app.raw_word(t)) {
                    // Tell the engine before the receiver can be dropped (see `stop_early`).
                    c.guard.stop_early(scan.tokens());
                    c.finished = Some(Finished {
                        id: c.id,
                        reason: FinishReason::Stop,
                        prompt_tokens,
                        completion_tokens: scan.tokens(),
                        cached_tokens: ev.cached_tokens,
                        preemptions: 0,
                    });
                    return;
                }
            }
        }
    }
    if let Some(f) = ev.finished {
        c.guard.disarm();
        c.finished = Some(f);
    }
}

/// Moves the text a stop scan lets out now into `batch`, JSON-escaped.
fn release_text(c: &mut ChoiceStream, batch: &mut Batch) {
    let ended = c.finished.is_some();
    if let Some(scan) = &mut c.stop {
        let out = scan.release(ended);
        batch
            .thinking
            .extend_from_slice(super::escape_text(out.thinking).as_bytes());
        batch
            .text
            .extend_from_slice(super::escape_text(out.answer).as_bytes());
    }
}

/// Rewrites the choice index of rendered chunks: wire's renderer writes index 0, and a chunk
/// of choice `i` differs from it only there. The pattern cannot occur inside a JSON string
/// (its quotes would be escaped), so only the choice objects match.
fn with_choice_index(out: &[u8], index: u32) -> Vec<u8> {
    const PATTERN: &[u8] = br#""choices":[{"index":0,"#;
    if index == 0 {
        return out.to_vec();
    }
    let replacement = format!(r#""choices":[{{"index":{index},"#);
    let mut res = Vec::with_capacity(out.len() + 8);
    let mut rest = out;
    while let Some(p) = rest.windows(PATTERN.len()).position(|w| w == PATTERN) {
        res.extend_from_slice(&rest[..p]);
        res.extend_from_slice(replacement.as_bytes());
        rest = &rest[p + PATTERN.len()..];
    }
    res.extend_from_slice(rest);
    res
}

impl StreamState {
    /// Waits for the next event of any unfinished choice; `None` when the engine stopped.
    async fn next_event(&mut self) -> Option<(usize, TokenEvent)> {
        std::future::poll_fn(|cx| {
            for (i, c) in self.choices.iter_mut().enumerate() {
                if c.finished.is_some() {
                    continue;
                }
                match c.events.poll_recv(cx) {
                    std::task::Poll::Ready(Some(ev)) => {
                        return std::task::Poll::Ready(Some((i, ev)))
                    }
                    std::task::Poll::Ready(None) => return std::task::Poll::Ready(None),
                    std::task::Poll::Pending => {}
                }
            }
            std::task::Poll::Pending
        })
        .await
    }

    /// Merges every event already queued for the unfinished choices.
    fn drain(&mut self, batches: &mut [Batch]) {
        let prompt_tokens = self.template.prompt_tokens;
        for (c, batch) in self.choices.iter_mut().zip(batches.iter_mut()) {
            while c.finished.is_none() {
                match c.events.try_recv() {
                    Ok(ev) => merge_event(&self.app, c, ev, batch, self.reasoning, prompt_tokens),
                    Err(_) => break,
                }
            }
        }
    }

    /// The next write: one chunk per choice per engine step, or every queued step of a choice
    /// merged into one chunk when this handler fell behind. `None` ends the stream.
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
        let Some((first_choice, first)) = self.next_event().await else {
            // The engine stopped: end without [DONE], as a dying server would.
            self.done = true;
            return None;
        };
        let mut batches: Vec<Batch> = self.choices.iter().map(|_| Batch::default()).collect();
        let prompt_tokens = self.template.prompt_tokens;
        merge_event(
            &self.app,
            &mut self.choices[first_choice],
            first,
            &mut batches[first_choice],
            self.reasoning,
            prompt_tokens,
        );
        self.drain(&mut batches);
        if let Some(stall) = self.faults.stall_before_chunk() {
            self.app.faults().record(FaultKind::Stall);
            tokio::time::sleep(stall).await;
            // Steps that ended during the stall are merged into this chunk.
            self.drain(&mut batches);
        }

        let mut out = Vec::with_capacity(400 * self.choices.len());
        for (c, mut batch) in self.choices.iter_mut().zip(batches) {
            release_text(c, &mut batch);
            let before = c.sent;
            let new_tokens = batch.tokens();
            let reason = c.finished.as_ref().map(|f| f.reason);
            c.sent += new_tokens;
            if batch.thinking.is_empty() && batch.text.is_empty() && reason.is_none() {
                // Nothing to show: no new step for this choice, or its text is all held back
                // by a stop scan. Not even a chat role chunk goes out alone, so a client's first
                // byte is still its first text.
                continue;
            }
            let mut piece = Vec::with_capacity(batch.thinking.len() + batch.text.len() + 400);
            if !c.role_sent {
                self.template.role_chunk(&mut piece);
                c.role_sent = true;
            }
            let start = piece.len();
            if !batch.thinking.is_empty() {
                self.template.reasoning_chunk(
                    &mut piece,
                    &batch.thinking,
                    before + batch.thinking_tokens,
                );
            }
            // The answer's chunk, or the finishing one (a response that ended while still
            // reasoning closes with an empty content chunk carrying the finish reason). Tokens
            // whose text a stop scan still holds back make no chunk: vLLM sends none either.
            let answer = if c.stop.is_some() {
                !batch.text.is_empty()
            } else {
                batch.answer_tokens > 0
            };
            if answer || reason.is_some() {
                self.template
                    .content_chunk(&mut piece, &batch.text, reason, c.sent);
            }
            let mut cut = false;
            if c.index == 0 && piece.len() > start {
                let hit = |k: Option<u32>| k.is_some_and(|k| k > before && k <= c.sent);
                if hit(self.faults.malformed_at) {
                    self.app.faults().record(FaultKind::Malformed);
                    // Cut the JSON in half but keep the SSE framing so later events still parse.
                    let half = start + (piece.len() - start) / 2;
                    piece.truncate(half);
                    piece.extend_from_slice(b"\n\n");
                }
                cut = hit(self.faults.disconnect_after);
            }
            out.extend_from_slice(&with_choice_index(&piece, c.index));
            if cut {
                self.app.faults().record(FaultKind::Disconnect);
                self.cut = true;
                return Some(Ok(Bytes::from(out)));
            }
        }
        if self.choices.iter().all(|c| c.finished.is_some()) {
            if self.include_usage {
                let completion = self
                    .choices
                    .iter()
                    .filter_map(|c| c.finished.as_ref())
                    .map(|f| f.completion_tokens)
                    .sum();
                let cached = self.choices[0]
                    .finished
                    .as_ref()
                    .map_or(0, |f| f.cached_tokens);
                self.template.usage_chunk(&mut out, completion, cached);
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

/// One choice of a non-streaming response.
#[derive(Debug, Clone)]
pub struct ChoiceText {
    /// The answer.
    pub text: String,
    /// The reasoning text of a reasoning chat response, which vLLM returns beside the answer
    /// as `reasoning_content`.
    pub thinking: Option<String>,
    /// How it ended; its `completion_tokens` count toward usage.
    pub finished: Finished,
}

/// The one-shot JSON body of a non-streaming request: one choice per element of `choices`,
/// indexed in order, with the usage of all of them (the prompt counted once, as vLLM does).
pub fn full_body(meta: ResponseMeta<'_>, choices: Vec<ChoiceText>) -> serde_json::Value {
    let ResponseMeta {
        endpoint,
        id,
        created,
        model,
        prompt_tokens,
        details,
        reasoning,
    } = meta;
    let completion: u32 = choices.iter().map(|c| c.finished.completion_tokens).sum();
    let cached = choices.first().map_or(0, |c| c.finished.cached_tokens);
    let mut usage = Usage::new(
        u64::from(prompt_tokens),
        u64::from(completion),
        details.then_some(u64::from(cached)),
    );
    if let Some(r) = reasoning {
        let thinking: u32 = choices
            .iter()
            .map(|c| r.min(c.finished.completion_tokens))
            .sum();
        usage = usage.with_reasoning_tokens(u64::from(thinking));
    }
    let usage = Some(usage);
    let body = match endpoint {
        Endpoint::Completions => serde_json::to_value(CompletionResponse {
            id: response_id(endpoint, id),
            object: TEXT_COMPLETION_OBJECT.to_owned(),
            created,
            model: model.to_owned(),
            choices: choices
                .into_iter()
                .zip(0u32..)
                .map(|(c, index)| CompletionChoice {
                    index,
                    text: c.text,
                    logprobs: None,
                    finish_reason: Some(c.finished.reason.as_str().to_owned()),
                    stop_reason: None,
                    prompt_logprobs: None,
                })
                .collect(),
            usage,
        }),
        Endpoint::Chat | Endpoint::Responses => serde_json::to_value(ChatCompletionResponse {
            id: response_id(endpoint, id),
            object: CHAT_COMPLETION_OBJECT.to_owned(),
            created,
            model: model.to_owned(),
            choices: choices
                .into_iter()
                .zip(0u32..)
                .map(|(c, index)| {
                    // A reasoning response that never reached its answer has no content, as
                    // in vLLM.
                    let content = if c.thinking.is_some() && c.text.is_empty() {
                        None
                    } else {
                        Some(c.text)
                    };
                    ChatChoice {
                        index,
                        message: ResponseMessage {
                            role: "assistant".to_owned(),
                            content,
                            reasoning_content: c.thinking,
                            tool_calls: Some(Vec::new()),
                        },
                        logprobs: None,
                        finish_reason: Some(c.finished.reason.as_str().to_owned()),
                        stop_reason: None,
                    }
                })
                .collect(),
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
        t.usage_chunk(&mut out, fin.completion_tokens, fin.cached_tokens);
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
    fn choice_indices_are_rewritten_only_in_choice_objects() {
        // A model name that tries to look like the pattern stays untouched: it is escaped.
        let t = ChunkTemplate::new(
            Endpoint::Chat,
            1,
            0,
            r#""choices":[{"index":0,"#,
            5,
            true,
            true,
        );
        let mut out = Vec::new();
        t.role_chunk(&mut out);
        t.content_chunk(&mut out, b" hi", Some(FinishReason::Stop), 1);
        let ev = parse_events(&with_choice_index(&out, 3));
        assert_eq!(ev.len(), 2);
        for e in &ev {
            assert_eq!(e["choices"][0]["index"], 3, "{e}");
            assert_eq!(e["model"], r#""choices":[{"index":0,"#);
        }
        assert_eq!(ev[1]["choices"][0]["delta"]["content"], " hi");
        assert_eq!(with_choice_index(&out, 0), out);
    }

    #[test]
    fn a_non_streaming_body_has_one_choice_per_completion_and_sums_usage() {
        let meta = ResponseMeta {
            endpoint: Endpoint::Completions,
            id: 9,
            created: 0,
            model: "m",
            prompt_tokens: 10,
            details: true,
            reasoning: None,
        };
        let fin = |completion_tokens, reason| Finished {
            id: 9,
            reason,
            prompt_tokens: 10,
            completion_tokens,
            cached_tokens: 4,
            preemptions: 0,
        };
        let body = full_body(
            meta,
            vec![
                ChoiceText {
                    text: " a b".into(),
                    thinking: None,
                    finished: fin(2, FinishReason::Length),
                },
                ChoiceText {
                    text: " c".into(),
                    thinking: None,
                    finished: fin(3, FinishReason::Stop),
                },
            ],
        );
        assert_eq!(body["choices"][1]["index"], 1);
        assert_eq!(body["choices"][1]["text"], " c");
        assert_eq!(body["choices"][1]["finish_reason"], "stop");
        assert_eq!(body["usage"]["prompt_tokens"], 10);
        assert_eq!(body["usage"]["completion_tokens"], 5);
        assert_eq!(body["usage"]["total_tokens"], 15);
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
