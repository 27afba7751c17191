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
    /// `/v1/embeddings` (vLLM's `openai-embeddings` backend): one JSON answer, no stream.
    Embeddings,
    /// `/v1/rerank` or `/rerank` (vLLM's `vllm-rerank` backend): one JSON answer, no stream.
    Rerank,
    /// `/v1/responses` (vLLM's `openai-responses` backend): the prompt as `input`, streamed
    /// as typed Responses API events.
    Responses,
}

impl ApiKind {
    /// A pooling API answers once with vectors or scores: no tokens are generated.
    pub fn is_pooling(self) -> bool {
        matches!(self, ApiKind::Embeddings | ApiKind::Rerank)
    }
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
    /// TLS and HTTP version (`--ca-cert`, `--insecure`, `--http2`, ...).
    pub transport: crate::Transport,
}

impl Target {
    /// The full request URI of the endpoint (credentials in the URL go in a header instead).
    pub fn endpoint_uri(&self) -> Result<Uri, LoadgenError> {
        parse_uri(&format!(
            "{}{}",
            strip_userinfo(&self.base_url).0,
            self.endpoint
        ))
    }

    /// A URI for another path on the same server (`/v1/models`, `/metrics`, ...).
    pub fn uri_for(&self, path: &str) -> Result<Uri, LoadgenError> {
        parse_uri(&format!("{}{}", strip_userinfo(&self.base_url).0, path))
    }

    /// The base URL as it may be shown or written: credentials replaced by `***`.
    pub fn display_url(&self) -> String {
        redact_url(&self.base_url)
    }

    /// The `Authorization` value: `Bearer` for `api_key`, else `Basic` for `user:password@`
    /// in the base URL (as curl does); marked sensitive so it is never printed by `Debug`.
    pub fn auth_header(&self) -> Result<Option<HeaderValue>, LoadgenError> {
        let value = match (&self.api_key, strip_userinfo(&self.base_url).1) {
            (Some(key), _) => format!("Bearer {key}"),
            (None, Some(userinfo)) => {
                format!("Basic {}", base64(percent_decode(userinfo).as_bytes()))
            }
            (None, None) => return Ok(None),
        };
        let mut v = HeaderValue::from_str(&value).map_err(|_| {
            LoadgenError::Config(
                "the credentials hold characters not allowed in an HTTP header".into(),
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
            ApiKind::Chat => self.chat_body(vec![ChatMessage::new("user", prompt)], max_tokens),
            ApiKind::Embeddings | ApiKind::Rerank => crate::pooling::body(self, prompt),
            ApiKind::Responses => self.responses_body(prompt, max_tokens),
        }
    }

    /// The JSON body of one streaming chat request whose user message holds `prompt` and then
    /// one `image_url` part per URL (vLLM's layout), whatever the run's API: only chat
    /// endpoints take images, and runs with images are refused on others before they start.
    pub fn image_body(
        &self,
        prompt: &str,
        image_urls: &[&str],
        max_tokens: Option<u64>,
    ) -> Vec<u8> {
        let message =
            servebench_wire::image::user_message_with_images(prompt, image_urls.iter().copied());
        self.chat_body(
            vec![message],
            max_tokens.map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
        )
    }

    /// The JSON body of one streaming chat request carrying a whole conversation
    /// (`(role, text)` messages in order), whatever the run's API.
    pub fn conversation_body(&self, messages: &[(&str, &str)], max_tokens: Option<u64>) -> Vec<u8> {
        let messages = messages
            .iter()
            .map(|(role, text)| ChatMessage::new(*role, *text))
            .collect();
        self.chat_body(
            messages,
            max_tokens.map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
        )
    }

    fn chat_body(&self, messages: Vec<ChatMessage>, max_tokens: Option<i64>) -> Vec<u8> {
        let mut r = ChatCompletionRequest::new(self.model.clone(), messages);
        r.max_completion_tokens = max_tokens;
        r.stream = Some(true);
        r.stream_options = Some(StreamOptions {
            include_usage: Some(true),
            continuous_usage_stats: None,
        });
        r.ignore_eos = self.ignore_eos.then_some(true);
        self.with_extra_body(&r)
    }

    /// vLLM's `openai-responses` request: `model`, `input`, `stream`, `max_output_tokens`,
    /// `ignore_eos` when asked, then `--extra-body` (with the sampling flags) over it.
    fn responses_body(&self, prompt: &str, max_tokens: Option<i64>) -> Vec<u8> {
        let mut body = Map::new();
        body.insert("model".into(), Value::from(self.model.clone()));
        body.insert("input".into(), Value::from(prompt));
        body.insert("stream".into(), Value::Bool(true));
        if let Some(n) = max_tokens {
            body.insert("max_output_tokens".into(), Value::from(n));
        }
        if self.ignore_eos {
            body.insert("ignore_eos".into(), Value::Bool(true));
        }
        for (k, v) in &self.extra_body {
            body.insert(k.clone(), v.clone());
        }
        serde_json::to_vec(&Value::Object(body)).unwrap_or_default()
    }

    pub(crate) fn with_extra_body<T>(&self, request: &T) -> Vec<u8>
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

/// Query parameters whose values are secrets.
fn is_secret_param(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    ["key", "token", "secret", "password", "auth", "signature"]
        .iter()
        .any(|s| n.contains(s))
}

/// `(url without "user:password@", the userinfo)`.
fn strip_userinfo(url: &str) -> (String, Option<&str>) {
    let (scheme, rest) = match url.find("://") {
        Some(i) => (&url[..i + 3], &url[i + 3..]),
        None => ("", url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => (format!("{scheme}{}", &rest[at + 1..]), Some(&rest[..at])),
        None => (url.to_owned(), None),
    }
}

/// A URL as it may be shown or written anywhere: `user:password@` becomes `***@`, and the
/// values of secret-looking query parameters (`api_key`, `token`, ...) become `***`. Text
/// without a URL comes back unchanged.
pub fn redact_url(url: &str) -> String {
    let (bare, userinfo) = strip_userinfo(url);
    let mut out = match userinfo {
        Some(_) => match bare.find("://") {
            Some(i) => format!("{}***@{}", &bare[..i + 3], &bare[i + 3..]),
            None => format!("***@{bare}"),
        },
        None => bare,
    };
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let (query, fragment) = match query.find('#') {
            Some(h) => (&query[..h], &query[h..]),
            None => (query, ""),
        };
        let redacted: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if is_secret_param(k) => format!("{k}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        out = format!("{head}{}{fragment}", redacted.join("&"));
    }
    out
}

/// `%XX` escapes of a URL's userinfo, decoded (curl decodes them too).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Standard base64 with padding (for a Basic auth header; not worth a dependency).
fn base64(data: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &c)| acc | u32::from(c) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Parse a URL, accepting `http://` and `https://`.
pub fn parse_uri(s: &str) -> Result<Uri, LoadgenError> {
    // Errors name the URL as it may be shown, never with its credentials.
    let shown = redact_url(s);
    let s = strip_userinfo(s).0;
    let uri: Uri = s
        .parse()
        .map_err(|e| LoadgenError::Config(format!("invalid URL {shown:?}: {e}")))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(LoadgenError::Config(format!(
            "{shown}: the URL must start with http:// or https://"
        )));
    }
    // The URL parser takes any digits as a port; one past 65535 (or 0) could only fail to
    // connect later, as a misleading "Connection refused".
    // `Uri::port` is `None` for a port that does not fit a u16, so the authority's own text
    // is read: the part after the last `:` that follows any IPv6 `]`.
    let authority = uri.authority().map_or("", |a| a.as_str());
    let host_end = authority.rfind(']').unwrap_or(0);
    if let Some(colon) = authority[host_end..].rfind(':') {
        let port = &authority[host_end + colon + 1..];
        if !port.is_empty() && !port.parse::<u16>().is_ok_and(|p| p > 0) {
            return Err(LoadgenError::Config(format!(
                "{shown}: port {port} is out of range (allowed: 1 to 65535)"
            )));
        }
    }
    Ok(uri)
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
            transport: Default::default(),
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
    fn credentials_in_the_url_are_redacted_but_sent_as_basic_auth() {
        let url = "http://user:sk-SECRET@127.0.0.1:8000/v1?api_key=sk-Q&x=1";
        let shown = redact_url(url);
        assert_eq!(shown, "http://***@127.0.0.1:8000/v1?api_key=***&x=1");
        let mut t = target(ApiKind::Completions);
        t.base_url = "http://user:sk-SECRET@127.0.0.1:8000".into();
        assert_eq!(t.display_url(), "http://***@127.0.0.1:8000");
        assert_eq!(
            t.endpoint_uri().unwrap().to_string(),
            "http://127.0.0.1:8000/v1/completions"
        );
        // curl -u user:sk-SECRET sends this header.
        assert_eq!(
            t.auth_header().unwrap().unwrap(),
            "Basic dXNlcjpzay1TRUNSRVQ="
        );
        assert_eq!(redact_url("not a url"), "not a url");
        let err = parse_uri("ftp://u:sk-SECRET@h").unwrap_err().to_string();
        assert!(!err.contains("SECRET"), "{err}");
    }

    #[test]
    fn base64_matches_the_standard_alphabet_and_padding() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn https_is_accepted_and_other_schemes_are_refused_with_a_reason() {
        assert_eq!(
            parse_uri("https://example.com/v1").unwrap().scheme_str(),
            Some("https")
        );
        let err = parse_uri("http://127.0.0.1:99999").unwrap_err().to_string();
        assert!(
            err.contains("port 99999 is out of range (allowed: 1 to 65535)"),
            "{err}"
        );
        assert!(parse_uri("http://127.0.0.1:0/v1").is_err());
        assert!(parse_uri("http://127.0.0.1:65535/v1").is_ok());
        let err = parse_uri("ws://example.com/v1").unwrap_err().to_string();
        assert!(err.contains("http:// or https://"), "{err}");
    }
}
