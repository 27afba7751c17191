//! Reading a request body under `--max-body-bytes`: a declared length over the cap is refused
//! before anything is read, and a body without one is refused as soon as it crosses the cap, in
//! the JSON error shape (axum's own limit answers in plain text). A body that stalls for longer
//! than the header timeout is given up on with 408, so a slow sender cannot hold a connection
//! after a complete head either.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap};
use bytes::BytesMut;
use futures_util::StreamExt;

use super::error::ApiError;

/// Collects `body`, at most `limit` bytes of it, waiting at most `stall` for each piece.
pub async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    stall: Duration,
) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::body_too_large(limit));
    }
    // The declared length is within the cap here, so reserving it is bounded.
    let mut buf = BytesMut::with_capacity(declared.map_or(0, |n| n as usize));
    let mut stream = body.into_data_stream();
    loop {
        let Ok(next) = tokio::time::timeout(stall, stream.next()).await else {
            return Err(ApiError::body_stalled(stall));
        };
        let Some(chunk) = next else { break };
        let chunk = chunk.map_err(|e| {
            ApiError::bad_request(format!("Failed to read the request body: {e}"), None)
        })?;
        if buf.len() + chunk.len() > limit {
            return Err(ApiError::body_too_large(limit));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[tokio::test]
    async fn bodies_over_the_cap_are_413_whether_declared_or_not() {
        let none = HeaderMap::new();
        let ok = read_limited(&none, Body::from("0123456789"), 10, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(&ok[..], b"0123456789");
        let e = read_limited(&none, Body::from("0123456789x"), 10, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(e.status.as_u16(), 413);
        let mut declared = HeaderMap::new();
        declared.insert(header::CONTENT_LENGTH, HeaderValue::from_static("20000000"));
        let e = read_limited(&declared, Body::empty(), 10, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(e.status.as_u16(), 413);
        assert_eq!(e.body()["error"]["code"], 413);
    }
}
