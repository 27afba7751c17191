//! Protocol constants shared by the client, the simulator and the test server, so the three
//! cannot drift apart: vLLM's defaults, the request-id convention and the error vocabulary.

/// vLLM's `max_tokens` when a completions request names none (`CompletionRequest.max_tokens`
/// defaults to 16); chat requests instead get the rest of the context.
pub const DEFAULT_COMPLETION_MAX_TOKENS: u64 = 16;

/// The header that carries a request's id; vLLM echoes it and logs it.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Response header of a simulated fleet: the pool that served the request.
pub const POOL_HEADER: &str = "x-servebench-pool";
/// Response header of a simulated fleet: the replica within the pool that served the request.
pub const REPLICA_HEADER: &str = "x-servebench-replica";

/// Prefix of the ids the servebench client sends: `servebench-<record id>`, so server logs
/// can be joined with the records.
pub const REQUEST_ID_PREFIX: &str = "servebench-";

/// The `x-request-id` value of record `id`.
pub fn request_id(id: u64) -> String {
    format!("{REQUEST_ID_PREFIX}{id}")
}

/// The record id in an `x-request-id` value written by [`request_id`].
pub fn record_id(request_id: &str) -> Option<u64> {
    request_id.strip_prefix(REQUEST_ID_PREFIX)?.parse().ok()
}

/// `object` of a completions response and of its stream chunks.
pub const TEXT_COMPLETION_OBJECT: &str = "text_completion";
/// `object` of a non-streaming chat response.
pub const CHAT_COMPLETION_OBJECT: &str = "chat.completion";
/// `object` of a chat stream chunk.
pub const CHAT_CHUNK_OBJECT: &str = "chat.completion.chunk";
/// Prefix of completions response ids.
pub const COMPLETION_ID_PREFIX: &str = "cmpl-";
/// Prefix of chat response ids.
pub const CHAT_ID_PREFIX: &str = "chatcmpl-";

/// Error `type` names, as vLLM writes them.
pub mod error_type {
    /// 400 and the default of vLLM's `create_error_response`.
    pub const BAD_REQUEST: &str = "BadRequestError";
    /// 401.
    pub const AUTHENTICATION: &str = "AuthenticationError";
    /// 403.
    pub const PERMISSION_DENIED: &str = "PermissionDeniedError";
    /// 404 (an unknown model).
    pub const NOT_FOUND: &str = "NotFoundError";
    /// 409.
    pub const CONFLICT: &str = "ConflictError";
    /// 429.
    pub const RATE_LIMIT: &str = "RateLimitError";
    /// 503.
    pub const SERVICE_UNAVAILABLE: &str = "ServiceUnavailableError";
    /// Any other 5xx, and errors reported inside a stream.
    pub const INTERNAL_SERVER: &str = "InternalServerError";
}

/// The error `type` for an HTTP status. Statuses without a name of their own fall back to
/// `BadRequestError` below 500 because that is the default `err_type` of vLLM's
/// `create_error_response` (vllm/entrypoints/openai/engine/serving.py), which every 4xx
/// not classified otherwise goes through.
pub fn error_type_for_status(status: u16) -> &'static str {
    use error_type::*;
    match status {
        401 => AUTHENTICATION,
        403 => PERMISSION_DENIED,
        404 => NOT_FOUND,
        409 => CONFLICT,
        429 => RATE_LIMIT,
        503 => SERVICE_UNAVAILABLE,
        s if s >= 500 => INTERNAL_SERVER,
        _ => BAD_REQUEST,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_table_names_every_class() {
        assert_eq!(error_type_for_status(400), "BadRequestError");
        assert_eq!(error_type_for_status(422), "BadRequestError");
        assert_eq!(error_type_for_status(413), "BadRequestError");
        assert_eq!(error_type_for_status(405), "BadRequestError");
        assert_eq!(error_type_for_status(404), "NotFoundError");
        assert_eq!(error_type_for_status(409), "ConflictError");
        assert_eq!(error_type_for_status(429), "RateLimitError");
        assert_eq!(error_type_for_status(503), "ServiceUnavailableError");
        assert_eq!(error_type_for_status(500), "InternalServerError");
        assert_eq!(error_type_for_status(502), "InternalServerError");
    }

    #[test]
    fn request_ids_round_trip() {
        assert_eq!(request_id(41), "servebench-41");
        assert_eq!(record_id("servebench-41"), Some(41));
        assert_eq!(record_id("other-41"), None);
        assert_eq!(record_id("servebench-x"), None);
    }
}
