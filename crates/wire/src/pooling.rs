//! Serde types of the pooling endpoints: `/v1/embeddings` (OpenAI's shape, as vLLM and
//! llama.cpp serve it) and `/v1/rerank` / `/rerank` (the shape vLLM serves; TEI's `/rerank`
//! answers a bare list, which the client reads too).
//!
//! A benchmark sends a batch of inputs in one request and reads only `usage` back, so the
//! request types are the ones the client sends and the simulator parses; the responses are
//! what the simulator writes.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `input` of an embeddings request: one text, several, or token ids.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EmbeddingInput {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenBatches(Vec<Vec<u32>>),
}

impl EmbeddingInput {
    /// The inputs as texts; token-id inputs are `None` (their length is their token count).
    pub fn texts(&self) -> Option<Vec<&str>> {
        match self {
            EmbeddingInput::Text(t) => Some(vec![t.as_str()]),
            EmbeddingInput::Texts(ts) => Some(ts.iter().map(String::as_str).collect()),
            EmbeddingInput::Tokens(_) | EmbeddingInput::TokenBatches(_) => None,
        }
    }

    /// Token counts of token-id inputs, one per input.
    pub fn token_counts(&self) -> Option<Vec<u64>> {
        match self {
            EmbeddingInput::Tokens(t) => Some(vec![t.len() as u64]),
            EmbeddingInput::TokenBatches(b) => Some(b.iter().map(|t| t.len() as u64).collect()),
            EmbeddingInput::Text(_) | EmbeddingInput::Texts(_) => None,
        }
    }
}

/// `POST /v1/embeddings`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmbeddingRequest {
    pub model: String,
    pub input: EmbeddingInput,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding_format: Option<String>,
    /// vLLM's: −1 truncates each input to the model's context instead of refusing it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncate_prompt_tokens: Option<i64>,
    /// Every other field, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `POST /v1/rerank` (and `/rerank`): one query scored against each document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RerankRequest {
    pub model: String,
    pub query: String,
    pub documents: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_n: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncate_prompt_tokens: Option<i64>,
    /// Every other field, kept verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `usage` of a pooling response: no completion tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolingUsage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
}

/// One vector of an embeddings response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmbeddingData {
    pub index: usize,
    pub object: String,
    pub embedding: Vec<f32>,
}

/// The answer to `/v1/embeddings`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmbeddingResponse {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub data: Vec<EmbeddingData>,
    pub usage: PoolingUsage,
}

/// `document` of a rerank result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RerankDocument {
    pub text: String,
}

/// One scored document, by its position in the request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RerankResult {
    pub index: usize,
    pub document: RerankDocument,
    pub relevance_score: f64,
}

/// The answer to `/v1/rerank`: results best first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RerankResponse {
    pub id: String,
    pub model: String,
    pub usage: PoolingUsage,
    pub results: Vec<RerankResult>,
}

/// What a client needs from a pooling response body: the prompt tokens the server counted
/// (`usage.prompt_tokens`, else `usage.total_tokens` as vLLM's rerank reports it), and
/// whether the body has the shape of an answer at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolingReply {
    pub prompt_tokens: Option<u64>,
}

/// Read a pooling response body. `Err` carries why it is not an answer: not JSON, an error
/// object, or neither `data`, `results` nor a list (TEI's `/rerank`).
pub fn read_reply(body: &[u8]) -> Result<PoolingReply, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON ({e})"))?;
    if let Some(err) = v.get("error") {
        let msg = err
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| err.to_string());
        return Err(format!("error object: {msg}"));
    }
    let answered = v.is_array() || v.get("data").is_some() || v.get("results").is_some();
    if !answered {
        let excerpt: String = v.to_string().chars().take(120).collect();
        return Err(format!(
            "neither `data` nor `results` in the answer: {excerpt}"
        ));
    }
    let usage = v.get("usage");
    let field = |k: &str| usage.and_then(|u| u.get(k)).and_then(Value::as_u64);
    Ok(PoolingReply {
        prompt_tokens: field("prompt_tokens")
            .filter(|&n| n > 0)
            .or_else(|| field("total_tokens")),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn embedding_input_reads_every_shape() {
        let r: EmbeddingRequest =
            serde_json::from_str(r#"{"model":"m","input":["a","b"]}"#).unwrap();
        assert_eq!(r.input.texts().unwrap(), vec!["a", "b"]);
        let r: EmbeddingRequest = serde_json::from_str(r#"{"model":"m","input":"a"}"#).unwrap();
        assert_eq!(r.input.texts().unwrap(), vec!["a"]);
        let r: EmbeddingRequest =
            serde_json::from_str(r#"{"model":"m","input":[[1,2],[3]]}"#).unwrap();
        assert_eq!(r.input.token_counts().unwrap(), vec![2, 1]);
    }

    #[test]
    fn reply_usage_of_embeddings_rerank_and_tei() {
        let e = br#"{"data":[],"usage":{"prompt_tokens":7,"total_tokens":7}}"#;
        assert_eq!(read_reply(e).unwrap().prompt_tokens, Some(7));
        let r = br#"{"results":[],"usage":{"total_tokens":9}}"#;
        assert_eq!(read_reply(r).unwrap().prompt_tokens, Some(9));
        let tei = br#"[{"index":0,"score":0.5}]"#;
        assert_eq!(read_reply(tei).unwrap().prompt_tokens, None);
        assert!(read_reply(b"nope").unwrap_err().contains("not JSON"));
        let err = br#"{"error":{"message":"model not found"}}"#;
        assert!(read_reply(err).unwrap_err().contains("model not found"));
        assert!(read_reply(br#"{"x":1}"#).is_err());
    }
}
