//! How far a client's records are from the server's log of the same requests.

use serde::{Deserialize, Serialize};
use servebench_metrics::stats::percentile_sorted;
use servebench_metrics::RequestRecord;

use crate::log::RequestLog;

/// Summary of one error distribution, in milliseconds (of absolute errors).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ErrorStats {
    /// Samples.
    pub count: usize,
    /// Mean absolute error.
    pub mean_ms: f64,
    /// Median absolute error.
    pub p50_ms: f64,
    /// 99th percentile of the absolute error (linear interpolation, as NumPy).
    pub p99_ms: f64,
    /// Largest absolute error.
    pub max_ms: f64,
    /// Mean signed error (measured − logged): the bias.
    pub mean_signed_ms: f64,
}

impl ErrorStats {
    /// Statistics of signed errors in nanoseconds; `None` when there are none.
    pub fn from_errors_ns(errors: &[i64]) -> Option<ErrorStats> {
        if errors.is_empty() {
            return None;
        }
        let mut abs: Vec<f64> = errors
            .iter()
            .map(|e| e.unsigned_abs() as f64 / 1e6)
            .collect();
        abs.sort_by(f64::total_cmp);
        let n = abs.len() as f64;
        let signed: f64 = errors.iter().map(|e| *e as f64 / 1e6).sum::<f64>() / n;
        Some(ErrorStats {
            count: abs.len(),
            mean_ms: abs.iter().sum::<f64>() / n,
            p50_ms: percentile_sorted(&abs, 50.0).unwrap_or(0.0),
            p99_ms: percentile_sorted(&abs, 99.0).unwrap_or(0.0),
            max_ms: abs[abs.len() - 1],
            mean_signed_ms: signed,
        })
    }
}

/// How far a client's records are from the server's log of the same requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Accuracy {
    /// Successful records joined with a log entry through `x-request-id`.
    pub matched: usize,
    /// Successful records with no log entry of their id.
    pub unmatched: usize,
    /// Matched requests whose token event counts differ between client and server (only
    /// the common prefix of their events is compared).
    pub event_count_mismatches: usize,
    /// TTFT error: (`first_token − sent`) − (first event write − arrival). Includes the
    /// request's and the first event's trip over the connection.
    pub ttft: Option<ErrorStats>,
    /// ITL error: each gap between the client's receipts of consecutive token events minus
    /// the gap between the server's writes of the same events.
    pub itl: Option<ErrorStats>,
}

/// Joins records and log entries by `x-request-id` (`servebench-<record id>`) and measures
/// the client's timing error. When several log entries carry one id (warm-up requests reuse
/// ids), the last to arrive is used. Log entries without event instants are skipped.
pub fn compare_to_log(records: &[RequestRecord], log: &[RequestLog]) -> Accuracy {
    let mut by_id = std::collections::HashMap::new();
    for entry in log {
        if let Some(id) = entry.record_id() {
            let slot = by_id.entry(id).or_insert(entry);
            if entry.arrival_ns >= slot.arrival_ns {
                *slot = entry;
            }
        }
    }
    let mut ttft = Vec::new();
    let mut itl = Vec::new();
    let (mut matched, mut unmatched, mut mismatches) = (0, 0, 0);
    for r in records.iter().filter(|r| r.is_success()) {
        let Some(entry) = by_id.get(&r.id).filter(|e| !e.events_ns.is_empty()) else {
            unmatched += 1;
            continue;
        };
        matched += 1;
        if r.events.len() != entry.events_ns.len() {
            mismatches += 1;
        }
        let Some(first) = r.first_token else { continue };
        ttft.push(signed_diff(
            first.saturating_sub(r.sent),
            entry.events_ns[0],
        ));
        let n = r.events.len().min(entry.events_ns.len());
        for k in 1..n {
            let measured = r.events[k].t.saturating_sub(r.events[k - 1].t);
            let logged = entry.events_ns[k].saturating_sub(entry.events_ns[k - 1]);
            itl.push(signed_diff(measured, logged));
        }
    }
    Accuracy {
        matched,
        unmatched,
        event_count_mismatches: mismatches,
        ttft: ErrorStats::from_errors_ns(&ttft),
        itl: ErrorStats::from_errors_ns(&itl),
    }
}

fn signed_diff(a: u64, b: u64) -> i64 {
    i64::try_from(i128::from(a) - i128::from(b)).unwrap_or(if a > b { i64::MAX } else { i64::MIN })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn percentile_matches_numpy_linear() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile_sorted(&v, 50.0), Some(2.5));
        assert!((percentile_sorted(&v, 99.0).unwrap() - 3.97).abs() < 1e-12);
        let s = ErrorStats::from_errors_ns(&[-2_000_000, 1_000_000]).unwrap();
        assert_eq!(s.max_ms, 2.0);
        assert_eq!(s.mean_ms, 1.5);
        assert_eq!(s.mean_signed_ms, -0.5);
    }
}
