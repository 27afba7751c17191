//! Reads which pool and replica of a simulated fleet answered (its response headers).

use http::HeaderMap;
use servebench_metrics::ServedBy;
use servebench_wire::protocol::{POOL_HEADER, REPLICA_HEADER};

/// `None` unless the response names a pool; a header that is not text is ignored.
pub fn from_headers(headers: &HeaderMap) -> Option<ServedBy> {
    let pool = headers.get(POOL_HEADER)?.to_str().ok()?.to_owned();
    let replica = headers
        .get(REPLICA_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    Some(ServedBy { pool, replica })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn pool_and_replica_come_from_the_headers() {
        let mut h = HeaderMap::new();
        assert_eq!(from_headers(&h), None);
        h.insert(POOL_HEADER, HeaderValue::from_static("chat"));
        h.insert(REPLICA_HEADER, HeaderValue::from_static("2"));
        assert_eq!(
            from_headers(&h),
            Some(ServedBy {
                pool: "chat".into(),
                replica: "2".into()
            })
        );
    }
}
