//! `POST /v1/responses` (the Responses API, as vLLM serves it) on top of the chat endpoint:
//! the request becomes a chat request (`input` as the user message, `max_output_tokens` as
//! `max_tokens`, the sampling fields as they are), the engine generates exactly as for chat,
//! and the chat stream is rewritten into Responses events: `response.created`, one
//! `response.output_text.delta` per chunk (`response.reasoning_text.delta` for reasoning),
//! then `response.completed` with the usage (`input_tokens`, `output_tokens`). Without
//! `stream`, one `response` object.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use http::{header, HeaderValue};
use serde_json::{json, Map, Value};

use super::error::ApiError;

/// The chat request a Responses request stands for.
pub fn to_chat_request(body: &[u8]) -> Result<(Vec<u8>, bool), ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("Invalid JSON body: {e}"), None))?;
    let Value::Object(req) = v else {
        return Err(ApiError::bad_request(
            "The body must be a JSON object.",
            None,
        ));
    };
    let messages = match req.get("input") {
        Some(Value::String(s)) => vec![json!({"role": "user", "content": s})],
        Some(Value::Array(items)) => items
            .iter()
            .map(|m| {
                json!({
                    "role": m.get("role").cloned().unwrap_or(Value::from("user")),
                    "content": m.get("content").cloned().unwrap_or(Value::from("")),
                })
            })
            .collect(),
        _ => {
            return Err(ApiError::bad_request(
                "`input` must be a string or a list of messages.",
                Some("input"),
            ))
        }
    };
    let stream = req.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let mut chat = Map::new();
    for (k, v) in &req {
        match k.as_str() {
            "input" | "max_output_tokens" | "stream" | "instructions" => {}
            _ => {
                chat.insert(k.clone(), v.clone());
            }
        }
    }
    let mut all = Vec::new();
    if let Some(Value::String(i)) = req.get("instructions") {
        all.push(json!({"role": "system", "content": i}));
    }
    all.extend(messages);
    chat.insert("messages".into(), Value::Array(all));
    if let Some(n) = req.get("max_output_tokens") {
        chat.insert("max_tokens".into(), n.clone());
    }
    chat.insert("stream".into(), Value::Bool(stream));
    if stream {
        chat.insert("stream_options".into(), json!({"include_usage": true}));
    }
    let bytes = serde_json::to_vec(&Value::Object(chat)).unwrap_or_default();
    Ok((bytes, stream))
}

fn usage_of(chunk: &Value) -> Option<Value> {
    let u = chunk.get("usage").filter(|u| !u.is_null())?;
    let input = u.get("prompt_tokens").cloned().unwrap_or(Value::from(0));
    let output = u
        .get("completion_tokens")
        .cloned()
        .unwrap_or(Value::from(0));
    let cached = u
        .pointer("/prompt_tokens_details/cached_tokens")
        .cloned()
        .unwrap_or(Value::from(0));
    let reasoning = u
        .pointer("/completion_tokens_details/reasoning_tokens")
        .cloned()
        .unwrap_or(Value::from(0));
    let total = u.get("total_tokens").cloned().unwrap_or(Value::from(0));
    Some(json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": total,
    }))
}

/// Rewrites one chat chunk's events as Responses events.
struct Translator {
    id: String,
    model: String,
    seq: u64,
    text: String,
    usage: Option<Value>,
    started: bool,
}

impl Translator {
    fn event(&mut self, kind: &str, mut v: Map<String, Value>) -> String {
        v.insert("type".into(), Value::from(kind));
        v.insert("sequence_number".into(), Value::from(self.seq));
        self.seq += 1;
        format!(
            "event: {kind}\ndata: {}\n\n",
            serde_json::to_string(&Value::Object(v)).unwrap_or_default()
        )
    }

    fn response(&self, status: &str) -> Value {
        json!({
            "id": self.id,
            "object": "response",
            "model": self.model,
            "status": status,
            "output": [{"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": self.text}]}],
            "usage": self.usage,
        })
    }

    /// The events for one chat `data:` payload.
    fn data(&mut self, data: &str) -> String {
        let mut out = String::new();
        if data.trim() == "[DONE]" {
            let r = self.response("completed");
            out.push_str(&self.event("response.completed", obj("response", r)));
            return out;
        }
        let Ok(chunk) = serde_json::from_str::<Value>(data) else {
            return out;
        };
        if let Some(e) = chunk.get("error") {
            out.push_str(&self.event(
                "error",
                obj("message", e.get("message").cloned().unwrap_or(e.clone())),
            ));
            return out;
        }
        if !self.started {
            self.started = true;
            if let Some(m) = chunk.get("model").and_then(Value::as_str) {
                self.model = m.to_owned();
            }
            let r = self.response("in_progress");
            out.push_str(&self.event("response.created", obj("response", r)));
        }
        if let Some(u) = usage_of(&chunk) {
            self.usage = Some(u);
        }
        if let Some(delta) = chunk.pointer("/choices/0/delta") {
            for (field, kind) in [
                ("reasoning_content", "response.reasoning_text.delta"),
                ("reasoning", "response.reasoning_text.delta"),
                ("content", "response.output_text.delta"),
            ] {
                if let Some(t) = delta
                    .get(field)
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty())
                {
                    if field == "content" {
                        self.text.push_str(t);
                    }
                    let mut m = Map::new();
                    m.insert("item_id".into(), Value::from(format!("msg_{}", self.id)));
                    m.insert("output_index".into(), Value::from(0));
                    m.insert("content_index".into(), Value::from(0));
                    m.insert("delta".into(), Value::from(t));
                    out.push_str(&self.event(kind, m));
                }
            }
        }
        out
    }
}

fn obj(key: &str, v: Value) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(key.into(), v);
    m
}

/// The chat endpoint's answer `chat` turned into the Responses API's.
pub async fn translate(chat: Response, stream: bool, id: String) -> Response {
    let (mut parts, body) = chat.into_parts();
    if !parts.status.is_success() {
        return Response::from_parts(parts, body);
    }
    if !stream {
        let bytes = match axum::body::to_bytes(body, usize::MAX).await {
            Ok(b) => b,
            Err(e) => return ApiError::bad_request(e.to_string(), None).into_response(),
        };
        let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let text = v
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let t = Translator {
            id,
            model: v
                .get("model")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            seq: 0,
            text,
            usage: usage_of(&v),
            started: true,
        };
        return axum::Json(t.response("completed")).into_response();
    }
    let mut t = Translator {
        id,
        model: String::new(),
        seq: 0,
        text: String::new(),
        usage: None,
        started: false,
    };
    let mut pending = String::new();
    let events = body.into_data_stream().map(move |chunk| {
        let chunk = chunk?;
        pending.push_str(&String::from_utf8_lossy(&chunk));
        let mut out = String::new();
        while let Some(end) = pending.find("\n\n") {
            let event: String = pending.drain(..end + 2).collect();
            for line in event.lines() {
                if let Some(data) = line.strip_prefix("data:") {
                    out.push_str(&t.data(data.trim_start()));
                }
            }
        }
        Ok::<Bytes, axum::Error>(Bytes::from(out))
    });
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from_stream(events))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_request_becomes_a_chat_request() {
        let (chat, stream) = to_chat_request(
            br#"{"model":"m","input":"hi","stream":true,"max_output_tokens":7,"temperature":0.5}"#,
        )
        .unwrap();
        assert!(stream);
        let v: Value = serde_json::from_slice(&chat).unwrap();
        assert_eq!(v["messages"][0]["content"], "hi");
        assert_eq!(v["max_tokens"], 7);
        assert_eq!(v["temperature"], 0.5);
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert!(to_chat_request(br#"{"model":"m"}"#).is_err());
    }

    #[test]
    fn chat_chunks_become_responses_events() {
        let mut t = Translator {
            id: "r1".into(),
            model: String::new(),
            seq: 0,
            text: String::new(),
            usage: None,
            started: false,
        };
        let a = t.data(r#"{"model":"m","choices":[{"delta":{"role":"assistant"}}]}"#);
        assert!(a.contains("event: response.created"), "{a}");
        let b = t.data(r#"{"model":"m","choices":[{"delta":{"content":"Hel"}}]}"#);
        assert!(b.contains(r#""delta":"Hel""#), "{b}");
        t.data(r#"{"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}"#);
        let end = t.data("[DONE]");
        assert!(end.contains("event: response.completed"), "{end}");
        assert!(end.contains(r#""input_tokens":3"#) && end.contains(r#""output_tokens":2"#));
        let info = servebench_wire::classify(
            end.lines().nth(1).unwrap().strip_prefix("data: ").unwrap(),
            servebench_wire::EndpointKind::Responses,
        )
        .unwrap();
        assert_eq!(info.usage.unwrap().completion_tokens, 2);
        assert!(info.finish_reason.is_some());
    }
}
