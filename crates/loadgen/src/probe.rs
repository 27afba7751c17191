//! Small GET requests around a run: the served models, the server version, readiness.

use std::time::Duration;

use bytes::Bytes;
use http::Method;
use http_body_util::BodyExt;
use serde_json::Value;
use servebench_wire::openai::ModelList;

use crate::client::{error_chain, http_client_for};
use crate::target::Target;
use crate::LoadgenError;

/// GET a path on the target's server and parse the body as JSON.
pub async fn get_json(
    target: &Target,
    path: &str,
    timeout: Duration,
) -> Result<Value, LoadgenError> {
    let body = get_text(target, path, timeout).await?;
    serde_json::from_str(&body).map_err(|e| {
        let excerpt: String = body.chars().take(200).collect();
        LoadgenError::Server(format!(
            "{}{path} did not answer with JSON ({e}): {excerpt}",
            target.display_url()
        ))
    })
}

/// The most a probe reads of an answer: 4 MiB, ten times a large `/metrics` page or model list.
pub const MAX_PROBE_BODY: usize = 4 * 1024 * 1024;

/// GET a path on the target's server; non-2xx is an error naming the status.
pub async fn get_text(
    target: &Target,
    path: &str,
    timeout: Duration,
) -> Result<String, LoadgenError> {
    let req = target.admin_request(Method::GET, path, Bytes::new())?;
    let client = http_client_for(&target.transport);
    let fut = async {
        let resp = client.request(req).await.map_err(|e| {
            LoadgenError::Server(format!(
                "{}{path}: {}",
                target.display_url(),
                error_chain(&e)
            ))
        })?;
        let status = resp.status();
        // A bounded read: a server that streams without end to a probe (or answers with
        // gigabytes) is cut at the limit instead of filling the client's memory.
        let limited = http_body_util::Limited::new(resp.into_body(), MAX_PROBE_BODY);
        let bytes = limited
            .collect()
            .await
            .map_err(|e| {
                let why = if e.is::<http_body_util::LengthLimitError>() {
                    format!("answered more than {MAX_PROBE_BODY} bytes")
                } else {
                    e.to_string()
                };
                LoadgenError::Server(format!("{}{path}: {why}", target.display_url()))
            })?
            .to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if !status.is_success() {
            let excerpt: String = text.chars().take(200).collect();
            return Err(LoadgenError::Server(format!(
                "{}{path}: HTTP {status}: {excerpt}",
                target.display_url()
            )));
        }
        Ok(text)
    };
    tokio::time::timeout(timeout, fut).await.map_err(|_| {
        LoadgenError::Server(format!(
            "{}{path}: no answer within {:.0} s",
            target.display_url(),
            timeout.as_secs_f64()
        ))
    })?
}

/// The first model id from `/v1/models` (vLLM's default for `--model`).
pub async fn first_model(target: &Target, timeout: Duration) -> Result<String, LoadgenError> {
    first_model_card(target, timeout).await.map(|(id, _)| id)
}

/// The first model of `/v1/models` as vLLM's client reads it: its `id` (the name requests
/// use) and its `root` (what vLLM's result calls `model_id`; the id when the server gives no
/// root).
pub async fn first_model_card(
    target: &Target,
    timeout: Duration,
) -> Result<(String, String), LoadgenError> {
    let v = get_json(target, "/v1/models", timeout).await?;
    serde_json::from_value::<ModelList>(v)
        .ok()
        .and_then(|list| list.data.into_iter().next())
        .map(|model| {
            let root = model.root.clone().unwrap_or_else(|| model.id.clone());
            (model.id, root)
        })
        .ok_or_else(|| {
            LoadgenError::Server(format!(
                "{}/v1/models lists no model; pass --model",
                target.display_url()
            ))
        })
}

/// The speculative-decoding counters of the server's `/metrics`, as vLLM's client reads them
/// before and after a run; `None` when the server has none or does not answer.
pub async fn spec_decode_counters(
    target: &Target,
    timeout: Duration,
) -> Option<servebench_metrics::vllm::SpecDecodeCounters> {
    let text = get_text(target, "/metrics", timeout).await.ok()?;
    servebench_metrics::vllm::SpecDecodeCounters::parse(&text)
}

/// POST an empty JSON body to a path; returns the HTTP status (for best-effort admin calls
/// such as `/reset_prefix_cache`).
pub async fn post_status(
    target: &Target,
    path: &str,
    timeout: Duration,
) -> Result<u16, LoadgenError> {
    let req = target.admin_request(Method::POST, path, Bytes::from_static(b"{}"))?;
    let client = http_client_for(&target.transport);
    let resp = tokio::time::timeout(timeout, client.request(req))
        .await
        .map_err(|_| LoadgenError::Server(format!("{}{path}: no answer", target.display_url())))?
        .map_err(|e| {
            LoadgenError::Server(format!(
                "{}{path}: {}",
                target.display_url(),
                error_chain(&e)
            ))
        })?;
    Ok(resp.status().as_u16())
}
