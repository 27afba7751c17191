//! Serde types for the OpenAI-compatible endpoints servebench speaks, in vLLM's dialect.
//!
//! Requests serialize for the client and deserialize for the simulator, so they accept every
//! shape a vLLM server accepts for the fields servebench honours; unknown fields are kept in
//! `extra` (the client merges `--extra-body` there, the simulator ignores them). Optional fields
//! are omitted when `None`, so a request carries only what was asked for.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::WireError;

/// `stream_options` of both endpoints.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamOptions {
    /// Send a final chunk with `usage` (and empty `choices`) before `[DONE]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_usage: Option<bool>,
    /// vLLM extension: a `usage` object on every chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuous_usage_stats: Option<bool>,
}

/// A completions prompt: text or token ids, possibly as a batch.
///
/// Batches of any length deserialize; [`Prompt::single`] says whether it is one prompt (the
/// only thing servebench sends and the simulator serves). A token id outside `u32` (vLLM reads
/// any integer) is refused with vLLM's "out of vocabulary" wording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Prompt {
    /// A string.
    Text(String),
    /// A list of token ids.
    Tokens(Vec<u32>),
    /// A list of strings.
    TextBatch(Vec<String>),
    /// A list of token-id lists.
    TokenBatch(Vec<Vec<u32>>),
}

/// One prompt, borrowed from a [`Prompt`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinglePrompt<'a> {
    /// Prompt text.
    Text(&'a str),
    /// Prompt token ids.
    Tokens(&'a [u32]),
}

impl Prompt {
    /// The one prompt this holds: a string, a token list, or a one-element batch of either.
    pub fn single(&self) -> Result<SinglePrompt<'_>, WireError> {
        match self {
            Prompt::Text(t) => Ok(SinglePrompt::Text(t)),
            Prompt::Tokens(t) => Ok(SinglePrompt::Tokens(t)),
            Prompt::TextBatch(v) if v.len() == 1 => Ok(SinglePrompt::Text(&v[0])),
            Prompt::TokenBatch(v) if v.len() == 1 => Ok(SinglePrompt::Tokens(&v[0])),
            Prompt::TextBatch(v) => Err(batch_error(v.len())),
            Prompt::TokenBatch(v) => Err(batch_error(v.len())),
        }
    }
}

fn batch_error(n: usize) -> WireError {
    WireError::Prompt(format!(
        "a batch of {n} prompts was sent; only a single prompt (or a one-element list) is supported"
    ))
}

impl<'de> Deserialize<'de> for Prompt {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(PromptVisitor)
    }
}

/// One element of a prompt list, before the list is known to be homogeneous.
#[derive(Deserialize)]
#[serde(untagged)]
enum PromptItem {
    Token(i64),
    Text(String),
    Tokens(Vec<i64>),
}

fn token_id<E: de::Error>(t: i64) -> Result<u32, E> {
    u32::try_from(t).map_err(|_| E::custom(format!("Token id {t} is out of vocabulary")))
}

fn token_ids<E: de::Error>(ts: Vec<i64>) -> Result<Vec<u32>, E> {
    ts.into_iter().map(token_id).collect()
}

struct PromptVisitor;

impl<'de> Visitor<'de> for PromptVisitor {
    type Value = Prompt;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string, a list of token ids, or a list of strings or of token-id lists")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Prompt, E> {
        Ok(Prompt::Text(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Prompt, E> {
        Ok(Prompt::Text(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Prompt, A::Error> {
        let mixed = || {
            de::Error::custom(
                "prompt list mixes kinds: use only token ids, only strings, or only token-id lists",
            )
        };
        let Some(first) = seq.next_element::<PromptItem>()? else {
            return Ok(Prompt::Tokens(Vec::new()));
        };
        match first {
            PromptItem::Token(t) => {
                let mut v = Vec::with_capacity(seq.size_hint().unwrap_or(0) + 1);
                v.push(token_id(t)?);
                while let Some(t) = seq.next_element::<i64>()? {
                    v.push(token_id(t)?);
                }
                Ok(Prompt::Tokens(v))
            }
            PromptItem::Text(s) => {
                let mut v = vec![s];
                while let Some(item) = seq.next_element::<PromptItem>()? {
                    match item {
                        PromptItem::Text(s) => v.push(s),
                        _ => return Err(mixed()),
                    }
                }
                Ok(Prompt::TextBatch(v))
            }
            PromptItem::Tokens(t) => {
                let mut v = vec![token_ids(t)?];
                while let Some(item) = seq.next_element::<PromptItem>()? {
                    match item {
                        PromptItem::Tokens(t) => v.push(token_ids(t)?),
                        _ => return Err(mixed()),
                    }
                }
                Ok(Prompt::TokenBatch(v))
            }
        }
    }
}

/// `POST /v1/completions` request body.
///
/// Counts are signed and `model` and `prompt` optional, as in vLLM's protocol, so that a server
/// reading this type can reject a negative count or a missing prompt with vLLM's own message
/// instead of a parse error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionRequest {
    /// Served model name (a server may default it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<Prompt>,
    /// Output cap (vLLM defaults to
    /// [`DEFAULT_COMPLETION_MAX_TOKENS`](crate::protocol::DEFAULT_COMPLETION_MAX_TOKENS)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    /// vLLM extension: do not stop before this many tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_tokens: Option<i64>,
    /// vLLM extension: generate exactly `max_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
    /// Stream as SSE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Streaming options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Sampling seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    /// vLLM extension: salt for the prefix-cache hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_salt: Option<String>,
    /// Number of completions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<i64>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Top-k sampling (`-1` disables it in vLLM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i64>,
    /// Min-p sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_p: Option<f64>,
    /// Every other field, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl CompletionRequest {
    /// A request with only `model` and `prompt` set.
    pub fn new(model: impl Into<String>, prompt: Prompt) -> Self {
        CompletionRequest {
            model: Some(model.into()),
            prompt: Some(prompt),
            max_tokens: None,
            min_tokens: None,
            ignore_eos: None,
            stream: None,
            stream_options: None,
            seed: None,
            cache_salt: None,
            n: None,
            temperature: None,
            top_p: None,
            top_k: None,
            min_p: None,
            extra: Map::new(),
        }
    }

    /// Merge `--extra-body` over this request; see [`merge_extra_body`].
    pub fn with_extra_body(&self, extra: &Value) -> Result<Self, WireError> {
        merge_extra_body(self, extra)
    }
}

/// One part of a list-form chat message content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContentPart {
    /// Part type; servebench reads only `"text"` parts.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// The text of a `"text"` part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Other keys (images and the like), kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ContentPart {
    /// A `{"type": "text", "text": ...}` part.
    pub fn text(text: impl Into<String>) -> Self {
        ContentPart {
            kind: "text".to_owned(),
            text: Some(text.into()),
            extra: Map::new(),
        }
    }
}

/// Chat message content: a string or a list of parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    /// Plain text.
    Text(String),
    /// Typed parts.
    Parts(Vec<ContentPart>),
}

impl MessageContent {
    /// The text of the content: the string, or the `"text"` parts joined by `\n` (as vLLM's
    /// chat template renders them).
    pub fn text(&self) -> Cow<'_, str> {
        match self {
            MessageContent::Text(t) => Cow::Borrowed(t),
            MessageContent::Parts(parts) => {
                let mut texts = parts
                    .iter()
                    .filter(|p| p.kind == "text")
                    .filter_map(|p| p.text.as_deref());
                match (texts.next(), texts.next()) {
                    (None, _) => Cow::Borrowed(""),
                    (Some(one), None) => Cow::Borrowed(one),
                    (Some(a), Some(b)) => {
                        let mut s = format!("{a}\n{b}");
                        for t in texts {
                            s.push('\n');
                            s.push_str(t);
                        }
                        Cow::Owned(s)
                    }
                }
            }
        }
    }
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool`, ...
    #[serde(default)]
    pub role: String,
    /// The content; `null` is allowed (an assistant turn that only called tools).
    #[serde(default)]
    pub content: Option<MessageContent>,
    /// Other keys (`name`, `tool_calls`, ...), kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ChatMessage {
    /// A message with string content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: Some(MessageContent::Text(content.into())),
            extra: Map::new(),
        }
    }

    /// The message text (empty when the content is `null`).
    pub fn text(&self) -> Cow<'_, str> {
        self.content
            .as_ref()
            .map_or(Cow::Borrowed(""), MessageContent::text)
    }
}

/// `POST /v1/chat/completions` request body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionRequest {
    /// Served model name (a server may default it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The conversation (a missing list reads as empty, for the server to refuse).
    #[serde(default)]
    pub messages: Vec<ChatMessage>,
    /// Output cap (legacy name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    /// Output cap; wins over `max_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<i64>,
    /// vLLM extension: do not stop before this many tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_tokens: Option<i64>,
    /// vLLM extension: generate exactly the cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
    /// Stream as SSE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Streaming options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Sampling seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    /// vLLM extension: salt for the prefix-cache hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_salt: Option<String>,
    /// Number of completions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<i64>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Top-k sampling (`-1` disables it in vLLM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i64>,
    /// Min-p sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_p: Option<f64>,
    /// Every other field, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ChatCompletionRequest {
    /// A request with only `model` and `messages` set.
    pub fn new(model: impl Into<String>, messages: Vec<ChatMessage>) -> Self {
        ChatCompletionRequest {
            model: Some(model.into()),
            messages,
            max_tokens: None,
            max_completion_tokens: None,
            min_tokens: None,
            ignore_eos: None,
            stream: None,
            stream_options: None,
            seed: None,
            cache_salt: None,
            n: None,
            temperature: None,
            top_p: None,
            top_k: None,
            min_p: None,
            extra: Map::new(),
        }
    }

    /// The output cap in force: `max_completion_tokens`, else `max_tokens`.
    pub fn effective_max_tokens(&self) -> Option<i64> {
        self.max_completion_tokens.or(self.max_tokens)
    }

    /// Merge `--extra-body` over this request; see [`merge_extra_body`].
    pub fn with_extra_body(&self, extra: &Value) -> Result<Self, WireError> {
        merge_extra_body(self, extra)
    }
}

/// vLLM's `POST /tokenize` body: a completions `prompt` or chat `messages`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenizeRequest {
    /// Served model name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Text or token ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<Prompt>,
    /// A conversation, rendered with the chat template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<ChatMessage>>,
}

/// Merge a JSON object over a request, key by key, the extra side winning (as vLLM's client
/// does with `payload.update(extra_body)`). Known keys land in their typed fields (so
/// `{"max_tokens": 5}` really changes `max_tokens`), unknown ones in `extra`; a `null` value
/// removes the key.
pub fn merge_extra_body<T>(request: &T, extra: &Value) -> Result<T, WireError>
where
    T: Serialize + serde::de::DeserializeOwned,
{
    let Value::Object(extra) = extra else {
        return Err(WireError::ExtraBodyNotObject(json_kind(extra)));
    };
    let mut base = match serde_json::to_value(request)? {
        Value::Object(m) => m,
        other => return Err(WireError::ExtraBodyNotObject(json_kind(&other))),
    };
    for (k, v) in extra {
        if v.is_null() {
            base.remove(k);
        } else {
            base.insert(k.clone(), v.clone());
        }
    }
    Ok(serde_json::from_value(Value::Object(base))?)
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `usage.prompt_tokens_details`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens served from the prefix cache (vLLM may send `null`).
    #[serde(default)]
    pub cached_tokens: Option<u64>,
}

/// Token usage of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Generated tokens.
    #[serde(default)]
    pub completion_tokens: u64,
    /// Sum of both.
    #[serde(default)]
    pub total_tokens: u64,
    /// Prefix-cache detail, when the server reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
    /// Split of the generated tokens, when the server reports it (OpenAI's shape; a reasoning
    /// model's thinking tokens are part of `completion_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
}

/// `usage.completion_tokens_details`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletionTokensDetails {
    /// Generated tokens spent reasoning (sent as `reasoning_content` / `reasoning`).
    #[serde(default)]
    pub reasoning_tokens: Option<u64>,
}

impl Usage {
    /// Usage with `total_tokens` computed.
    pub fn new(prompt_tokens: u64, completion_tokens: u64, cached_tokens: Option<u64>) -> Self {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            prompt_tokens_details: cached_tokens.map(|c| PromptTokensDetails {
                cached_tokens: Some(c),
            }),
            completion_tokens_details: None,
        }
    }

    /// The same usage, reporting `reasoning` of its completion tokens as reasoning tokens.
    pub fn with_reasoning_tokens(mut self, reasoning: u64) -> Self {
        self.completion_tokens_details = Some(CompletionTokensDetails {
            reasoning_tokens: Some(reasoning),
        });
        self
    }

    /// `completion_tokens_details.reasoning_tokens`, if reported.
    pub fn reasoning_tokens(&self) -> Option<u64> {
        self.completion_tokens_details
            .and_then(|d| d.reasoning_tokens)
    }

    /// `prompt_tokens_details.cached_tokens`, if reported.
    pub fn cached_tokens(&self) -> Option<u64> {
        self.prompt_tokens_details.and_then(|d| d.cached_tokens)
    }
}

/// One choice of a non-streaming completions response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionChoice {
    /// Choice index.
    #[serde(default)]
    pub index: u32,
    /// The generated text.
    #[serde(default)]
    pub text: String,
    /// Log-probabilities, when asked for.
    #[serde(default)]
    pub logprobs: Option<Value>,
    /// Why generation stopped.
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// vLLM: the stop string or token id that ended generation (`null` otherwise).
    #[serde(default)]
    pub stop_reason: Option<Value>,
    /// vLLM: prompt log-probabilities, when asked for.
    #[serde(default)]
    pub prompt_logprobs: Option<Value>,
}

/// A non-streaming `/v1/completions` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionResponse {
    /// Response id.
    pub id: String,
    /// `"text_completion"`.
    #[serde(default = "text_completion")]
    pub object: String,
    /// Unix seconds.
    #[serde(default)]
    pub created: u64,
    /// Served model name.
    #[serde(default)]
    pub model: String,
    /// The completions.
    #[serde(default)]
    pub choices: Vec<CompletionChoice>,
    /// Token usage.
    #[serde(default)]
    pub usage: Option<Usage>,
}

fn text_completion() -> String {
    crate::protocol::TEXT_COMPLETION_OBJECT.to_owned()
}

/// The message of a non-streaming chat response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseMessage {
    /// `"assistant"`.
    pub role: String,
    /// The generated text.
    #[serde(default)]
    pub content: Option<String>,
    /// Reasoning text, when a reasoning parser is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    /// Tool calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<Value>>,
}

/// One choice of a non-streaming chat response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatChoice {
    /// Choice index.
    #[serde(default)]
    pub index: u32,
    /// The answer.
    pub message: ResponseMessage,
    /// Log-probabilities, when asked for.
    #[serde(default)]
    pub logprobs: Option<Value>,
    /// Why generation stopped.
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// vLLM: the stop string or token id that ended generation (`null` otherwise).
    #[serde(default)]
    pub stop_reason: Option<Value>,
}

/// A non-streaming `/v1/chat/completions` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionResponse {
    /// Response id.
    pub id: String,
    /// `"chat.completion"`.
    #[serde(default = "chat_completion")]
    pub object: String,
    /// Unix seconds.
    #[serde(default)]
    pub created: u64,
    /// Served model name.
    #[serde(default)]
    pub model: String,
    /// The answers.
    #[serde(default)]
    pub choices: Vec<ChatChoice>,
    /// Token usage.
    #[serde(default)]
    pub usage: Option<Usage>,
}

fn chat_completion() -> String {
    crate::protocol::CHAT_COMPLETION_OBJECT.to_owned()
}

/// An error `code`: vLLM sends the HTTP status as an integer, OpenAI a string.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ErrorCode {
    /// Numeric code (vLLM, llama.cpp: the HTTP status).
    Int(i64),
    /// Textual code (OpenAI).
    Text(String),
}

/// The inner error object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// Human-readable explanation.
    #[serde(default)]
    pub message: String,
    /// Error class, e.g. `BadRequestError`, `NotFoundError`, `invalid_request_error`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// The offending parameter, if any.
    #[serde(default)]
    pub param: Option<String>,
    /// The code (see [`ErrorCode`]).
    #[serde(default)]
    pub code: Option<ErrorCode>,
}

/// An error body. Serializes in vLLM's current shape, `{"error": {message, type, param, code}}`;
/// deserializes that shape (also llama.cpp's, which is the same with fewer keys) and vLLM's
/// older flat `{"object": "error", "message", "type", "param", "code"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorResponse {
    /// The error.
    pub error: ErrorObject,
}

impl ErrorResponse {
    /// vLLM's shape for an HTTP status: `code` is the status as an integer.
    pub fn new(status: u16, kind: impl Into<String>, message: impl Into<String>) -> Self {
        ErrorResponse {
            error: ErrorObject {
                message: message.into(),
                kind: kind.into(),
                param: None,
                code: Some(ErrorCode::Int(i64::from(status))),
            },
        }
    }

    /// The body a server answers `status` with: the `type` from
    /// [`error_type_for_status`](crate::protocol::error_type_for_status), and the offending
    /// request field, if one.
    pub fn for_status(status: u16, message: impl Into<String>, param: Option<&str>) -> Self {
        let mut e = ErrorResponse::new(
            status,
            crate::protocol::error_type_for_status(status),
            message,
        );
        e.error.param = param.map(str::to_owned);
        e
    }

    /// The serialized body, keys in vLLM's order: `{"error":{"message","type","param","code"}}`.
    pub fn to_json(&self) -> Vec<u8> {
        // Strings, an optional string and an integer: serializing cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

impl<'de> Deserialize<'de> for ErrorResponse {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Raw {
            #[serde(default)]
            error: Option<ErrorObject>,
            #[serde(default)]
            object: Option<String>,
            #[serde(default)]
            message: Option<String>,
            #[serde(rename = "type", default)]
            kind: Option<String>,
            #[serde(default)]
            param: Option<String>,
            #[serde(default)]
            code: Option<ErrorCode>,
        }
        let raw = Raw::deserialize(deserializer)?;
        if let Some(error) = raw.error {
            return Ok(ErrorResponse { error });
        }
        if raw.object.as_deref() == Some("error") || raw.message.is_some() {
            return Ok(ErrorResponse {
                error: ErrorObject {
                    message: raw.message.unwrap_or_default(),
                    kind: raw.kind.unwrap_or_default(),
                    param: raw.param,
                    code: raw.code,
                },
            });
        }
        Err(de::Error::custom(
            "not an error body: expected an `error` object or `\"object\": \"error\"`",
        ))
    }
}

/// The server's message from an error body in any shape [`ErrorResponse`] reads; `None` when
/// the body is not such an object (or has an empty message).
pub fn error_message(body: &str) -> Option<String> {
    let parsed: ErrorResponse = serde_json::from_str(body).ok()?;
    let message = parsed.error.message.trim();
    (!message.is_empty()).then(|| message.to_owned())
}

/// One entry of `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    /// Served model name.
    pub id: String,
    /// `"model"`.
    #[serde(default = "model_object")]
    pub object: String,
    /// Unix seconds.
    #[serde(default)]
    pub created: u64,
    /// Owner (`vllm` for vLLM).
    #[serde(default)]
    pub owned_by: String,
    /// vLLM: the model path or hub id behind the served name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// vLLM: the base model of a LoRA adapter (`null` for a base model, as vLLM writes it).
    #[serde(default)]
    pub parent: Option<String>,
    /// vLLM: context length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<u64>,
}

fn model_object() -> String {
    "model".to_owned()
}

/// `GET /v1/models` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelList {
    /// `"list"`.
    #[serde(default = "list_object")]
    pub object: String,
    /// The served models.
    #[serde(default)]
    pub data: Vec<ModelCard>,
}

fn list_object() -> String {
    "list".to_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prompt_accepts_every_single_shape() {
        for (body, want) in [
            (json!("hi"), SinglePrompt::Text("hi")),
            (json!(["hi"]), SinglePrompt::Text("hi")),
            (json!([1, 2, 3]), SinglePrompt::Tokens(&[1, 2, 3])),
            (json!([[1, 2, 3]]), SinglePrompt::Tokens(&[1, 2, 3])),
        ] {
            let p: Prompt = serde_json::from_value(body.clone()).unwrap();
            assert_eq!(p.single().unwrap(), want, "{body}");
        }
    }

    #[test]
    fn prompt_batches_and_bad_shapes() {
        let p: Prompt = serde_json::from_value(json!(["a", "b"])).unwrap();
        assert!(p.single().unwrap_err().to_string().contains("batch of 2"));
        assert!(serde_json::from_value::<Prompt>(json!(["a", 1])).is_err());
        assert!(serde_json::from_value::<Prompt>(json!([1, -2])).is_err());
        let err = serde_json::from_value::<Prompt>(json!(3)).unwrap_err();
        assert!(err.to_string().contains("list of token ids"), "{err}");
    }

    #[test]
    fn completion_request_round_trip_keeps_unknown_fields() {
        let body = json!({
            "model": "m", "prompt": [5, 6], "max_tokens": 10, "min_tokens": 2,
            "ignore_eos": true, "stream": true,
            "stream_options": {"include_usage": true, "continuous_usage_stats": false},
            "seed": 7, "cache_salt": "s", "n": 1, "temperature": 0.5, "top_p": 0.9,
            "top_k": -1, "min_p": 0.1, "logprobs": 3, "stop": ["x"]
        });
        let req: CompletionRequest = serde_json::from_value(body.clone()).unwrap();
        assert_eq!(req.max_tokens, Some(10));
        assert_eq!(req.top_k, Some(-1));
        assert_eq!(req.stream_options.unwrap().include_usage, Some(true));
        assert_eq!(req.extra.get("logprobs"), Some(&json!(3)));
        assert_eq!(serde_json::to_value(&req).unwrap(), body);
    }

    #[test]
    fn unset_fields_are_not_serialized() {
        let req = CompletionRequest::new("m", Prompt::Text("p".into()));
        assert_eq!(
            serde_json::to_value(&req).unwrap(),
            json!({"model": "m", "prompt": "p"})
        );
    }

    #[test]
    fn extra_body_wins_and_routes_known_keys() {
        let mut req = ChatCompletionRequest::new("m", vec![ChatMessage::new("user", "hi")]);
        req.max_completion_tokens = Some(100);
        req.temperature = Some(1.0);
        let merged = req
            .with_extra_body(&json!({"max_completion_tokens": 5, "temperature": null, "foo": 1}))
            .unwrap();
        assert_eq!(merged.max_completion_tokens, Some(5));
        assert_eq!(merged.temperature, None);
        assert_eq!(merged.extra.get("foo"), Some(&json!(1)));
        let v = serde_json::to_string(&merged).unwrap();
        assert_eq!(v.matches("max_completion_tokens").count(), 1);
        assert!(req.with_extra_body(&json!([1])).is_err());
    }

    #[test]
    fn chat_messages_with_string_or_parts() {
        let req: ChatCompletionRequest = serde_json::from_value(json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [
                    {"type": "text", "text": "a"},
                    {"type": "image_url", "image_url": {"url": "x"}},
                    {"type": "text", "text": "b"}
                ]},
                {"role": "assistant", "content": null, "tool_calls": []}
            ],
            "max_tokens": 3, "max_completion_tokens": 4
        }))
        .unwrap();
        assert_eq!(req.messages[0].text(), "be brief");
        assert_eq!(req.messages[1].text(), "a\nb");
        assert_eq!(req.messages[2].text(), "");
        assert_eq!(req.effective_max_tokens(), Some(4));
    }

    #[test]
    fn error_bodies_in_all_three_shapes() {
        let vllm = json!({"error": {"message": "too long", "type": "BadRequestError",
                                     "param": null, "code": 400}});
        let flat = json!({"object": "error", "message": "too long", "type": "BadRequestError",
                          "param": null, "code": 400});
        let llama = json!({"error": {"code": 400, "message": "too long",
                                      "type": "invalid_request_error"}});
        for body in [vllm.clone(), flat, llama] {
            let e: ErrorResponse = serde_json::from_value(body).unwrap();
            assert_eq!(e.error.message, "too long");
            assert_eq!(e.error.code, Some(ErrorCode::Int(400)));
        }
        let ours = ErrorResponse::new(400, "BadRequestError", "too long");
        assert_eq!(serde_json::to_value(ours).unwrap(), vllm);
        assert!(serde_json::from_value::<ErrorResponse>(json!({"choices": []})).is_err());
        assert_eq!(
            error_message(r#"{"object":"error","message":" no such model ","code":404}"#),
            Some("no such model".to_owned())
        );
        assert_eq!(error_message("<html>502 Bad Gateway</html>"), None);
        assert_eq!(error_message(r#"{"error":{"message":""}}"#), None);
    }

    #[test]
    fn usage_and_models() {
        let u: Usage = serde_json::from_value(json!({"prompt_tokens": 3, "completion_tokens": 4,
            "total_tokens": 7, "prompt_tokens_details": {"cached_tokens": 2}}))
        .unwrap();
        assert_eq!(u, Usage::new(3, 4, Some(2)));
        assert_eq!(u.cached_tokens(), Some(2));
        let m: ModelList = serde_json::from_value(json!({"object": "list", "data": [
            {"id": "llama", "object": "model", "created": 1, "owned_by": "vllm",
             "root": "meta/llama", "parent": null, "max_model_len": 8192}]}))
        .unwrap();
        assert_eq!(m.data[0].max_model_len, Some(8192));
        assert_eq!(m.data[0].owned_by, "vllm");
    }
}
