//! Errors in vLLM's current OpenAI-compatible shape:
//! `{"error": {"message", "type", "param", "code"}}` with `code` the HTTP status.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use servebench_wire::openai::ErrorResponse;

/// An error response.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status (also the body's `code`).
    pub status: StatusCode,
    /// Human-readable message.
    pub message: String,
    /// The offending request field, if one.
    pub param: Option<&'static str>,
}

impl ApiError {
    /// 400 Bad Request.
    pub fn bad_request(message: impl Into<String>, param: Option<&'static str>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            param,
        }
    }

    /// 404 for a model the server does not serve, worded as vLLM words it.
    pub fn unknown_model(model: &str) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("The model `{model}` does not exist."),
            param: Some("model"),
        }
    }

    /// Any status with a message.
    pub fn with_status(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            param: None,
        }
    }

    /// The engine task is gone (the server is shutting down).
    pub fn engine_stopped() -> Self {
        ApiError::with_status(
            StatusCode::SERVICE_UNAVAILABLE,
            "The engine is shutting down.",
        )
    }

    /// 413 for a body over `--max-body-bytes`.
    pub fn body_too_large(limit: usize) -> Self {
        ApiError::with_status(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "The request body is larger than this server accepts ({limit} bytes, --max-body-bytes)."
            ),
        )
    }

    /// 408 for a request body that stopped arriving.
    pub fn body_stalled(after: std::time::Duration) -> Self {
        ApiError::with_status(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "The request body stalled for more than {} s (--header-timeout-secs).",
                after.as_secs_f64()
            ),
        )
    }

    /// 408 for a request body that did not arrive in full within `--body-timeout-secs`.
    pub fn body_too_slow(limit: std::time::Duration) -> Self {
        ApiError::with_status(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "The request body did not arrive within {} s of its head (--body-timeout-secs).",
                limit.as_secs_f64()
            ),
        )
    }

    /// The serialized JSON body.
    pub fn json_bytes(&self) -> Vec<u8> {
        self.response().to_json()
    }

    /// The JSON body (the `type` follows the status, as the other servers' bodies do).
    pub fn body(&self) -> serde_json::Value {
        serde_json::to_value(self.response()).unwrap_or_default()
    }

    fn response(&self) -> ErrorResponse {
        ErrorResponse::for_status(self.status.as_u16(), self.message.clone(), self.param)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.json_bytes();
        let mut resp = (
            self.status,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
        if self.status == StatusCode::REQUEST_TIMEOUT {
            // The rest of the body may still be on its way: the connection cannot be reused,
            // and closing it frees its slot under --max-connections at once.
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }
}

/// The answer to a path no route serves. vLLM's app is FastAPI: Starlette's router raises its
/// own `HTTPException(404)` there, and vLLM's handler for FastAPI's `HTTPException` subclass
/// (vllm/entrypoints/serve/utils/server_utils.py, registered in `build_app`) does not match
/// that class, so FastAPI's default handler answers `{"detail":"Not Found"}` as JSON. The
/// simulator answers the same rather than an empty body.
pub async fn not_found() -> Response {
    detail_response(StatusCode::NOT_FOUND, "Not Found")
}

/// The answer to a known path with the wrong method: as for [`not_found`], Starlette's 405
/// with FastAPI's default body `{"detail":"Method Not Allowed"}`. (axum adds the `Allow`
/// header Starlette sends, where it knows the route's methods.)
pub async fn method_not_allowed() -> Response {
    detail_response(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed")
}

fn detail_response(status: StatusCode, detail: &str) -> Response {
    let body = serde_json::json!({ "detail": detail }).to_string();
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn shape_matches_vllm() {
        let e = ApiError::bad_request("too long", Some("max_tokens"));
        assert_eq!(
            e.body(),
            serde_json::json!({"error": {"message": "too long", "type": "BadRequestError", "param": "max_tokens", "code": 400}})
        );
        let e = ApiError::unknown_model("gpt-5");
        assert_eq!(e.body()["error"]["type"], "NotFoundError");
        assert_eq!(e.body()["error"]["code"], 404);
        assert_eq!(
            e.body()["error"]["message"],
            "The model `gpt-5` does not exist."
        );
        let e = ApiError::with_status(StatusCode::INTERNAL_SERVER_ERROR, "boom");
        assert_eq!(e.body()["error"]["type"], "InternalServerError");
        assert!(e.body()["error"]["param"].is_null());
    }

    #[tokio::test]
    async fn unknown_paths_and_methods_answer_fastapi_detail_json() {
        for (resp, status, detail) in [
            (not_found().await, 404, "Not Found"),
            (method_not_allowed().await, 405, "Method Not Allowed"),
        ] {
            assert_eq!(resp.status().as_u16(), status);
            assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/json");
            let bytes = axum::body::to_bytes(resp.into_body(), 1024).await.unwrap();
            let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(v, serde_json::json!({ "detail": detail }));
        }
    }

    #[tokio::test]
    async fn a_408_closes_its_connection() {
        let resp = ApiError::body_too_slow(std::time::Duration::from_secs(1)).into_response();
        assert_eq!(resp.status().as_u16(), 408);
        assert_eq!(resp.headers()[header::CONNECTION], "close");
    }
}
