//! Reading a request body under `--max-body-bytes`: a declared length over the cap is refused
//! before anything is read, and a body without one is refused as soon as it crosses the cap, in
//! the JSON error shape (axum's own limit answers in plain text). A body that stalls for longer
//! than the header timeout, or is not complete within the body timeout of the end of its head
//! (a client trickling a byte a second never stalls), is given up on with 408 and the
//! connection is closed, so a slow sender cannot hold a connection after a complete head
//! either.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap};
use bytes::BytesMut;
use futures_util::StreamExt;

use super::error::ApiError;

/// How long a body may take.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BodyTimeouts {
    /// Longest wait for the next piece (`--header-timeout-secs`).
    pub stall: Duration,
    /// Longest time for the whole body, from when reading starts (`--body-timeout-secs`).
    pub total: Duration,
}

/// Collects `body`, at most `limit` bytes of it, waiting at most `timeouts.stall` for each
/// piece and `timeouts.total` for all of it. Handlers call this first thing, when hyper has
/// just parsed the head, so `total` counts from the end of the head.
pub async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    timeouts: BodyTimeouts,
) -> Result<Bytes, ApiError> {
    let BodyTimeouts { stall, total } = timeouts;
    let deadline = tokio::time::Instant::now() + total;
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
        let now = tokio::time::Instant::now();
        let overall = now + stall >= deadline;
        let Ok(next) = tokio::time::timeout_at((now + stall).min(deadline), stream.next()).await
        else {
            return Err(if overall {
                ApiError::body_too_slow(total)
            } else {
                ApiError::body_stalled(stall)
            });
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

    const FIVE: BodyTimeouts = BodyTimeouts {
        stall: Duration::from_secs(5),
        total: Duration::from_secs(5),
    };

    #[tokio::test]
    async fn bodies_over_the_cap_are_413_whether_declared_or_not() {
        let none = HeaderMap::new();
        let ok = read_limited(&none, Body::from("0123456789"), 10, FIVE)
            .await
            .unwrap();
        assert_eq!(&ok[..], b"0123456789");
        let e = read_limited(&none, Body::from("0123456789x"), 10, FIVE)
            .await
            .unwrap_err();
        assert_eq!(e.status.as_u16(), 413);
        let mut declared = HeaderMap::new();
        declared.insert(header::CONTENT_LENGTH, HeaderValue::from_static("20000000"));
        let e = read_limited(&declared, Body::empty(), 10, FIVE)
            .await
            .unwrap_err();
        assert_eq!(e.status.as_u16(), 413);
        assert_eq!(e.body()["error"]["code"], 413);
    }

    /// Issue 27 item 7: a body that never stalls but never ends (a byte every 100 ms) is cut
    /// off at the body timeout, though the stall timeout never fires.
    #[tokio::test(start_paused = true)]
    async fn a_trickling_body_is_408_at_the_body_timeout() {
        let trickle = futures_util::stream::unfold(0u32, |i| async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Some((Ok::<_, std::io::Error>(Bytes::from_static(b" ")), i + 1))
        });
        let timeouts = BodyTimeouts {
            stall: Duration::from_secs(1),
            total: Duration::from_secs(3),
        };
        let started = tokio::time::Instant::now();
        let e = read_limited(
            &HeaderMap::new(),
            Body::from_stream(trickle),
            1 << 20,
            timeouts,
        )
        .await
        .unwrap_err();
        assert_eq!(e.status.as_u16(), 408);
        assert!(e.message.contains("--body-timeout-secs"), "{}", e.message);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_secs(3) && took < Duration::from_millis(3200),
            "{took:?}"
        );
    }
}
