//! Where a request's time went (docs/metrics.md "Where a request's time went"): the
//! consecutive phases between the client starting a request and its last token, from each
//! record's clock points and its connection's [`crate::RequestPhases`].
//!
//! | phase | from → to |
//! | --- | --- |
//! | `wait` | `started` → `sent`: a pooled connection, or a new one's connect and handshake |
//! | `connect`, `tls` | a new connection's TCP connect and TLS handshake (inside `wait`) |
//! | `write` | `sent` → `written`: the request's bytes handed to the socket |
//! | `first_byte` | `written` → `first_byte`: the server's answer begins |
//! | `headers` | `first_byte` → `headers`: the client has the status and headers |
//! | `first_token` | `headers` → `first_token`: the server's queue and prefill |
//! | `streaming` | `first_token` → `end`: the rest of the answer |

use serde::{Deserialize, Serialize};

use crate::record::RequestRecord;
use crate::stats::{mean, percentile_sorted};
use crate::units::ns_to_ms;

/// One phase over the requests that have it, ms.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseStat {
    pub n: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p90_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ms: Option<f64>,
}

impl PhaseStat {
    fn of(mut ms: Vec<f64>) -> PhaseStat {
        if ms.is_empty() {
            return PhaseStat::default();
        }
        let m = mean(&ms);
        ms.sort_unstable_by(f64::total_cmp);
        PhaseStat {
            n: ms.len() as u64,
            mean_ms: m,
            p50_ms: percentile_sorted(&ms, 50.0),
            p90_ms: percentile_sorted(&ms, 90.0),
            p99_ms: percentile_sorted(&ms, 99.0),
            max_ms: ms.last().copied(),
        }
    }
}

/// The summary's `phases` block: each phase's distribution, and connection reuse.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseSummary {
    /// Requests whose connection stamped its phases.
    pub requests: u64,
    /// Of those, the ones that went out on a connection an earlier request had used.
    pub reused: u64,
    /// And the ones that opened their connection (or took one opened ahead of the run).
    pub new_connections: u64,
    pub wait: PhaseStat,
    pub connect: PhaseStat,
    pub tls: PhaseStat,
    pub write: PhaseStat,
    pub first_byte: PhaseStat,
    pub headers: PhaseStat,
    pub first_token: PhaseStat,
    pub streaming: PhaseStat,
}

impl PhaseSummary {
    /// The phases in order, with their names.
    pub fn named(&self) -> [(&'static str, &PhaseStat); 8] {
        [
            ("wait", &self.wait),
            ("connect", &self.connect),
            ("tls", &self.tls),
            ("write", &self.write),
            ("first_byte", &self.first_byte),
            ("headers", &self.headers),
            ("first_token", &self.first_token),
            ("streaming", &self.streaming),
        ]
    }

    /// What a phase covers, in a few words.
    pub fn describe(name: &str) -> &'static str {
        match name {
            "wait" => "start → first byte written (connection, connect, handshake)",
            "connect" => "TCP connect of a new connection",
            "tls" => "TLS handshake of a new connection",
            "write" => "request written",
            "first_byte" => "written → answer's first byte",
            "headers" => "first byte → headers parsed",
            "first_token" => "headers → first token (server queue, prefill)",
            "streaming" => "first token → last token",
            _ => "",
        }
    }

    /// `Where the time went (p50 / p99 ms): wait 0.05 / 0.21, … ; 990 of 1000 requests on
    /// reused connections`.
    pub fn line(&self) -> String {
        let parts: Vec<String> = self
            .named()
            .iter()
            .filter(|(_, s)| s.n > 0)
            .map(|(name, s)| {
                format!(
                    "{name} {:.2} / {:.2}",
                    s.p50_ms.unwrap_or(0.0),
                    s.p99_ms.unwrap_or(0.0)
                )
            })
            .collect();
        let mut line = format!("Where the time went (p50 / p99 ms): {}", parts.join(", "));
        if self.reused + self.new_connections > 0 {
            line.push_str(&format!(
                "; {} of {} requests on reused connections",
                self.reused,
                self.reused + self.new_connections
            ));
        }
        line
    }
}

/// `b − a` in ms when both points were stamped and in order.
fn span(a: u64, b: u64) -> Option<f64> {
    (a > 0 && b >= a).then(|| ns_to_ms(b - a))
}

/// The phases of every request that has them; `None` when none has (virtual time, files
/// written before they were kept).
pub fn phase_summary(records: &[RequestRecord]) -> Option<PhaseSummary> {
    let with: Vec<(&RequestRecord, &crate::RequestPhases)> = records
        .iter()
        .filter_map(|r| r.phases.as_ref().map(|p| (r, p)))
        .collect();
    if with.is_empty() {
        return None;
    }
    let collect = |f: &dyn Fn(&RequestRecord, &crate::RequestPhases) -> Option<f64>| {
        PhaseStat::of(with.iter().filter_map(|(r, p)| f(r, p)).collect())
    };
    let positive = |ns: u64| (ns > 0).then(|| ns_to_ms(ns));
    Some(PhaseSummary {
        requests: with.len() as u64,
        reused: with.iter().filter(|(_, p)| p.reused == Some(true)).count() as u64,
        new_connections: with.iter().filter(|(_, p)| p.reused == Some(false)).count() as u64,
        wait: collect(&|r, _| r.started.and_then(|s| span(s.max(1), r.sent))),
        connect: collect(&|_, p| positive(p.connect_ns)),
        tls: collect(&|_, p| positive(p.tls_ns)),
        write: collect(&|r, p| span(r.sent, p.written)),
        first_byte: collect(&|_, p| span(p.written, p.first_byte)),
        headers: collect(&|_, p| span(p.first_byte, p.headers)),
        first_token: collect(&|r, p| {
            r.first_token
                .filter(|_| r.is_success())
                .and_then(|t| span(p.headers, t))
        }),
        streaming: collect(&|r, _| match (r.first_token, r.end) {
            (Some(a), Some(b)) if r.is_success() => span(a, b),
            _ => None,
        }),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::RequestPhases;

    const MS: u64 = 1_000_000;

    fn timed(id: u64, reused: bool) -> RequestRecord {
        // Started at 10 ms, sent at 12, written at 12.5, first byte 20, headers 21,
        // first token 70, last token 170.
        let base = id * 1000 * MS;
        let mut r =
            RequestRecord::streamed(id, base + 12 * MS, &[base + 70 * MS, base + 170 * MS], 8);
        r.started = Some(base + 10 * MS);
        r.phases = Some(RequestPhases {
            connect_ns: if reused { 0 } else { MS },
            tls_ns: if reused { 0 } else { MS / 2 },
            written: base + 12 * MS + MS / 2,
            first_byte: base + 20 * MS,
            headers: base + 21 * MS,
            reused: Some(reused),
        });
        r
    }

    #[test]
    fn each_phase_is_the_span_between_consecutive_clock_points() {
        let records = vec![timed(0, false), timed(1, true), timed(2, true)];
        let s = phase_summary(&records).unwrap();
        assert_eq!((s.requests, s.reused, s.new_connections), (3, 2, 1));
        assert_eq!(s.wait.p50_ms, Some(2.0));
        assert_eq!(s.connect.n, 1);
        assert_eq!(s.connect.p50_ms, Some(1.0));
        assert_eq!(s.tls.p50_ms, Some(0.5));
        assert_eq!(s.write.p50_ms, Some(0.5));
        assert_eq!(s.first_byte.p50_ms, Some(7.5));
        assert_eq!(s.headers.p50_ms, Some(1.0));
        assert_eq!(s.first_token.p50_ms, Some(49.0));
        assert_eq!(s.streaming.p50_ms, Some(100.0));
        // The phases from `sent` add up to the TTFT.
        let ttft = records[0].ttft_ns().unwrap() as f64 / MS as f64;
        let sum = s.write.p50_ms.unwrap()
            + s.first_byte.p50_ms.unwrap()
            + s.headers.p50_ms.unwrap()
            + s.first_token.p50_ms.unwrap();
        assert!((sum - ttft).abs() < 1e-9, "{sum} vs {ttft}");
        let line = s.line();
        assert!(line.contains("first_token 49.00 / 49.00"), "{line}");
        assert!(
            line.ends_with("2 of 3 requests on reused connections"),
            "{line}"
        );
    }

    #[test]
    fn records_without_phases_give_none_and_unstamped_points_are_left_out() {
        let plain = RequestRecord::streamed(0, 5, &[10, 20], 2);
        assert!(phase_summary(std::slice::from_ref(&plain)).is_none());
        let mut h2 = plain.clone();
        h2.phases = Some(RequestPhases {
            headers: 8,
            ..RequestPhases::default()
        });
        let s = phase_summary(&[h2]).unwrap();
        assert_eq!(s.requests, 1);
        assert_eq!((s.reused, s.new_connections), (0, 0));
        assert_eq!(s.write.n, 0);
        assert_eq!(s.first_byte.n, 0);
        assert_eq!(s.first_token.n, 1);
        assert!(!s.line().contains("reused"));
    }
}
