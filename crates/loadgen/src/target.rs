//! Where requests go and what they look like on the wire.

use crate::LoadgenError;
use http::{HeaderName, HeaderValue, Uri};
use serde_json::{Map, Value};
use servebench_wire::openai::{
    merge_extra_body, ChatCompletionRequest, ChatMessage, CompletionRequest, Prompt, StreamOptions,
};

/// The API flavour a run speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiKind {
    /// `/v1/completions` (vLLM's `openai` / `vllm` backends).
    Completions,
    /// `/v1/chat/completions` (vLLM's `openai-chat` backend).
    Chat,
}

/// A benchmark target: the server, the endpoint, the model and the fixed parts of each body.
#[derive(Debug, Clone)]
pub struct Target {
    /// `http://host:port` without a trailing slash.
    pub base_url: String,
    /// The endpoint path, e.g. `/v1/completions`.
    pub endpoint: String,
    pub api: ApiKind,
    /// The `model` field sent in each request.
    pub model: String,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Bearer token; never logged, never written to results.
    pub api_key: Option<String>,
    /// Merged into every body last (sampling flags, then `--extra-body`).
    pub extra_body: Map<String, Value>,
    pub ignore_eos: bool,
}

impl Target {
    /// The full request URI of the endpoint.
    pub fn endpoint_uri(&self) -> Result<Uri, LoadgenError> {
        parse_uri(&format!("{}{}", self.base_url, self.endpoint))
    }

    /// A URI for another path on the same server (`/v1/models`, `/metrics`, ...).
    pub fn uri_for(&self, path: &str) -> Result<Uri, LoadgenError> {
        parse_uri(&format!("{}{}", self.base_url, path))
    }

    /// The `Authorization: Bearer …` value for `api_key`, marked sensitive so it is never
    /// printed by `Debug`.
    pub fn auth_header(&self) -> Result<Option<HeaderValue>, LoadgenError> {
        let Some(key) = &self.api_key else {
            return Ok(None);
        };
        let mut v = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
            LoadgenError::Config(
                "the API key holds characters not allowed in an HTTP header".into(),
            )
        })?;
        v.set_sensitive(true);
        Ok(Some(v))
    }

    /// A request to another path on the same server, with the run's auth and headers.
    pub fn admin_request(
        &self,
        method: http::Method,
        path: &str,
        body: bytes::Bytes,
    ) -> Result<http::Request<http_body_util::Full<bytes::Bytes>>, LoadgenError> {
        let mut b = http::Request::builder()
            .method(method)
            .uri(self.uri_for(path)?);
        if let Some(auth) = self.auth_header()? {
            b = b.header(http::header::AUTHORIZATION, auth);
        }
        if !body.is_empty() {
            b = b.header(http::header::CONTENT_TYPE, "application/json");
        }
        for (k, v) in &self.headers {
            b = b.header(k.clone(), v.clone());
        }
        b.body(http_body_util::Full::new(body))
            .map_err(|e| LoadgenError::Config(format!("bad request for {path}: {e}")))
    }

    /// The JSON body of one streaming request: wire's request of the run's API, with
    /// `extra_body` merged over it last (as vLLM's client does).
    pub fn body(&self, prompt: &str, max_tokens: Option<u64>) -> Vec<u8> {
        let max_tokens = max_tokens.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let stream_options = Some(StreamOptions {
            include_usage: Some(true),
            continuous_usage_stats: None,
        });
        let ignore_eos = self.ignore_eos.then_some(true);
        match self.api {
            ApiKind::Completions => {
                let mut r =
                    CompletionRequest::new(self.model.clone(), Prompt::Text(prompt.to_owned()));
                r.max_tokens = max_tokens;
                r.stream = Some(true);
                r.stream_options = stream_options;
                r.ignore_eos = ignore_eos;
                self.with_extra_body(&r)
            }
            ApiKind::Chat => {
                let message = ChatMessage::new("user", prompt);
                let mut r = ChatCompletionRequest::new(self.model.clone(), vec![message]);
                r.max_completion_tokens = max_tokens;
                r.stream = Some(true);
                r.stream_options = stream_options;
                r.ignore_eos = ignore_eos;
                self.with_extra_body(&r)
            }
        }
    }

    fn with_extra_body<T>(&self, request: &T) -> Vec<u8>
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
    {
        let extra = Value::Object(self.extra_body.clone());
        if let Ok(merged) = merge_extra_body(request, &extra) {
            return serde_json::to_vec(&merged).unwrap_or_default();
        }
        // A known key of the wrong type (`"max_tokens": "ten"`): send it as given, for the
        // server to judge, rather than refuse what the user asked for.
        let mut body = match serde_json::to_value(request) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        };
        for (k, v) in &self.extra_body {
            body.insert(k.clone(), v.clone());
        }
        serde_json::to_vec(&Value::Object(body)).unwrap_or_default()
    }
}

/// Parse a URL, accepting only plain `http://` (TLS is not supported yet: say so).
pub fn parse_uri(s: &str) -> Result<Uri, LoadgenError> {
    let uri: Uri = s
        .parse()
        .map_err(|e| LoadgenError::Config(format!("invalid URL {s:?}: {e}")))?;
    match uri.scheme_str() {
        Some("http") => Ok(uri),
        Some("https") => Err(LoadgenError::Config(format!(
            "{s}: https is not supported yet; use an http:// endpoint (e.g. through a local proxy)"
        ))),
        _ => Err(LoadgenError::Config(format!(
            "{s}: the URL must start with http://"
        ))),
    }
}

/// Normalise a base URL: strip a trailing `/` and a trailing `/v1` is kept as given.
pub fn normalize_base_url(s: &str) -> String {
    s.trim_end_matches('/').to_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn target(api: ApiKind) -> Target {
        Target {
            base_url: "http://127.0.0.1:8000".into(),
            endpoint: "/v1/completions".into(),
            api,
            model: "m".into(),
            headers: vec![],
            api_key: None,
            extra_body: serde_json::from_str(r#"{"temperature":0.5,"max_tokens":7}"#).unwrap(),
            ignore_eos: true,
        }
    }

    #[test]
    fn completions_body_has_stream_usage_and_extra_body_wins() {
        let v: Value =
            serde_json::from_slice(&target(ApiKind::Completions).body("hi", Some(3))).unwrap();
        assert_eq!(v["prompt"], "hi");
        assert_eq!(v["stream"], true);
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["ignore_eos"], true);
        assert_eq!(v["temperature"], 0.5);
        // --extra-body is merged last, as in vLLM.
        assert_eq!(v["max_tokens"], 7);
    }

    #[test]
    fn chat_body_wraps_prompt_in_one_user_message() {
        let v: Value = serde_json::from_slice(&target(ApiKind::Chat).body("hi", Some(3))).unwrap();
        assert_eq!(v["messages"][0]["role"], "user");
        assert_eq!(v["messages"][0]["content"], "hi");
        assert_eq!(v["max_completion_tokens"], 3);
        assert!(v.get("prompt").is_none());
    }

    #[test]
    fn a_wrongly_typed_extra_body_key_is_sent_as_given() {
        let mut t = target(ApiKind::Completions);
        t.extra_body = serde_json::from_str(r#"{"max_tokens":"ten","top_k":null}"#).unwrap();
        let v: Value = serde_json::from_slice(&t.body("hi", Some(3))).unwrap();
        assert_eq!(v["max_tokens"], "ten");
        assert_eq!(v["prompt"], "hi");
    }

    #[test]
    fn https_is_refused_with_a_reason() {
        let err = parse_uri("https://example.com/v1").unwrap_err().to_string();
        assert!(err.contains("https is not supported"), "{err}");
    }
}
