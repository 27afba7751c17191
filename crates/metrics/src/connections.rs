//! The connections a run opened: how many, how long the TCP connect and the TLS handshake
//! took, and what they negotiated. Reported apart from the requests: a request's `sent` is
//! taken when its bytes go out on a connection that is already open, so connect and handshake
//! time is never inside TTFT (it is client-side time, between `released` and `sent`).

use serde::{Deserialize, Serialize};

use crate::stats::percentile;

/// One new connection as the client measured it.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionTiming {
    pub tcp_connect_ms: f64,
    /// `None` on plain HTTP.
    pub tls_handshake_ms: Option<f64>,
    /// `http/1.1`, `h2` or `h2c`.
    pub protocol: String,
    /// `TLSv1.3`, `TLSv1.2`; `None` on plain HTTP.
    pub tls_version: Option<String>,
}

/// The result's `connections` block (absent from plain HTTP/1.1 runs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectionSummary {
    /// New connections the run's client opened (ready check and warm-up included).
    pub count: u64,
    pub tcp_connect_p50_ms: f64,
    pub tcp_connect_p99_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_handshake_p50_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_handshake_p99_ms: Option<f64>,
    /// The negotiated protocol (`h2`, `http/1.1`, `h2c`); several joined by `+` when the
    /// connections differed.
    pub protocol: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_version: Option<String>,
}

impl ConnectionSummary {
    /// `None` without connections.
    pub fn from_timings(conns: &[ConnectionTiming]) -> Option<ConnectionSummary> {
        if conns.is_empty() {
            return None;
        }
        let connect: Vec<f64> = conns.iter().map(|c| c.tcp_connect_ms).collect();
        let handshake: Vec<f64> = conns.iter().filter_map(|c| c.tls_handshake_ms).collect();
        let joined = |names: Vec<&str>| {
            let mut names = names;
            names.sort_unstable();
            names.dedup();
            names.join("+")
        };
        let versions: Vec<&str> = conns
            .iter()
            .filter_map(|c| c.tls_version.as_deref())
            .collect();
        Some(ConnectionSummary {
            count: conns.len() as u64,
            tcp_connect_p50_ms: percentile(&connect, 50.0).unwrap_or(0.0),
            tcp_connect_p99_ms: percentile(&connect, 99.0).unwrap_or(0.0),
            tls_handshake_p50_ms: percentile(&handshake, 50.0),
            tls_handshake_p99_ms: percentile(&handshake, 99.0),
            protocol: joined(conns.iter().map(|c| c.protocol.as_str()).collect()),
            tls_version: (!versions.is_empty()).then(|| joined(versions)),
        })
    }

    /// One report line: `Connections: 1 new (h2, TLSv1.3), TLS handshake p50 2.10 ms, p99 …`.
    pub fn line(&self) -> String {
        let mut what = self.protocol.clone();
        if let Some(v) = &self.tls_version {
            what.push_str(", ");
            what.push_str(v);
        }
        let mut s = format!(
            "Connections: {} new ({what}); TCP connect p50 {:.2} ms, p99 {:.2} ms",
            self.count, self.tcp_connect_p50_ms, self.tcp_connect_p99_ms
        );
        if let (Some(p50), Some(p99)) = (self.tls_handshake_p50_ms, self.tls_handshake_p99_ms) {
            s.push_str(&format!("; TLS handshake p50 {p50:.2} ms, p99 {p99:.2} ms"));
        }
        s
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn conn(ms: f64, hs: Option<f64>, protocol: &str) -> ConnectionTiming {
        ConnectionTiming {
            tcp_connect_ms: ms,
            tls_handshake_ms: hs,
            protocol: protocol.into(),
            tls_version: hs.map(|_| "TLSv1.3".into()),
        }
    }

    #[test]
    fn percentiles_protocols_and_the_report_line() {
        assert!(ConnectionSummary::from_timings(&[]).is_none());
        let s = ConnectionSummary::from_timings(&[
            conn(1.0, Some(2.0), "h2"),
            conn(3.0, Some(4.0), "h2"),
            conn(2.0, Some(10.0), "http/1.1"),
        ])
        .unwrap();
        assert_eq!(s.count, 3);
        assert_eq!(s.tcp_connect_p50_ms, 2.0);
        assert_eq!(s.tls_handshake_p50_ms, Some(4.0));
        assert!((s.tls_handshake_p99_ms.unwrap() - 9.88).abs() < 1e-9);
        assert_eq!(s.protocol, "h2+http/1.1");
        assert_eq!(s.tls_version.as_deref(), Some("TLSv1.3"));
        let line = s.line();
        assert!(
            line.starts_with("Connections: 3 new (h2+http/1.1, TLSv1.3)"),
            "{line}"
        );
        assert!(line.contains("TLS handshake p50 4.00 ms"), "{line}");
        let plain = ConnectionSummary::from_timings(&[conn(1.0, None, "h2c")]).unwrap();
        let json = serde_json::to_value(&plain).unwrap();
        assert!(json.get("tls_handshake_p50_ms").is_none());
        assert!(!plain.line().contains("TLS"));
    }
}
