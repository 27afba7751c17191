//! Multi-turn runs by turn index: how TTFT, prompt length and prefix-cache hits change as a
//! conversation grows (the history of turn k is everything before it, so a prefix cache
//! should serve most of it).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::record::RequestRecord;
use crate::stats;
use crate::units::ns_to_ms;

/// The requests of one turn index across all sessions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnStats {
    /// Position in the conversation, from 0.
    pub turn: u32,
    /// Requests of this turn that completed.
    pub completed: u64,
    /// Requests of this turn that failed.
    pub failed: u64,
    /// TTFT percentiles of the completed requests, ms.
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    /// Mean prompt tokens (the whole history) of the completed requests.
    pub prompt_tokens_mean: Option<f64>,
    /// Mean prefix-cached prompt tokens, over completed requests whose server reported them.
    pub cached_tokens_mean: Option<f64>,
}

/// Per-turn figures of the records that belong to a session, by turn; empty for a run
/// without sessions.
pub fn by_turn(records: &[RequestRecord]) -> Vec<TurnStats> {
    let mut turns: BTreeMap<u32, Vec<&RequestRecord>> = BTreeMap::new();
    for r in records {
        if let Some(t) = r.turn {
            turns.entry(t).or_default().push(r);
        }
    }
    turns
        .into_iter()
        .map(|(turn, rs)| {
            let ok: Vec<&RequestRecord> = rs.iter().copied().filter(|r| r.is_success()).collect();
            let ttft: Vec<f64> = ok
                .iter()
                .filter_map(|r| r.ttft_ns())
                .map(ns_to_ms)
                .collect();
            let sorted = stats::sorted_copy(&ttft);
            let prompts: Vec<f64> = ok.iter().map(|r| r.input_tokens as f64).collect();
            let cached: Vec<f64> = ok
                .iter()
                .filter_map(|r| r.cached_tokens)
                .map(|c| c as f64)
                .collect();
            TurnStats {
                turn,
                completed: ok.len() as u64,
                failed: (rs.len() - ok.len()) as u64,
                ttft_p50_ms: stats::percentile_sorted(&sorted, 50.0),
                ttft_p99_ms: stats::percentile_sorted(&sorted, 99.0),
                prompt_tokens_mean: stats::mean(&prompts),
                cached_tokens_mean: stats::mean(&cached),
            }
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::record::{CountSource, Failure, FailureKind};

    fn rec(
        turn: Option<u32>,
        ttft_ms: u64,
        input: u64,
        cached: Option<u64>,
        ok: bool,
    ) -> RequestRecord {
        let ms = 1_000_000;
        RequestRecord {
            phases: None,
            images: None,
            id: 0,
            intended: 0,
            released: 0,
            sent: 0,
            started: None,
            bare_events: Vec::new(),
            first_token: ok.then_some(ttft_ms * ms),
            end: ok.then_some(ttft_ms * ms),
            done: Some(ttft_ms * ms),
            waited_for_slot: false,
            events: Vec::new(),
            input_tokens: input,
            input_source: CountSource::Usage,
            output_tokens: 1,
            output_source: CountSource::Usage,
            intended_input_tokens: input,
            max_tokens: Some(1),
            cached_tokens: cached,
            finish_reason: None,
            text: None,
            failure: (!ok).then(|| Failure {
                kind: FailureKind::HttpStatus,
                status: Some(500),
                message: "no".into(),
            }),
            resent: 0,
            answer_checked: false,
            session_id: turn.map(|_| "s".into()),
            turn,
            output_split: None,
            stamp_clock: None,
            lora: None,
            served_by: None,
        }
    }

    #[test]
    fn figures_are_grouped_by_turn_and_failures_counted_apart() {
        let records = [
            rec(Some(0), 100, 10, Some(0), true),
            rec(Some(0), 300, 30, Some(0), true),
            rec(Some(1), 20, 50, Some(32), true),
            rec(Some(1), 999, 999, None, false),
            rec(None, 5, 5, None, true),
        ];
        let t = by_turn(&records);
        assert_eq!(t.len(), 2);
        assert_eq!((t[0].turn, t[0].completed, t[0].failed), (0, 2, 0));
        assert_eq!(t[0].ttft_p50_ms, Some(200.0));
        assert_eq!(t[0].prompt_tokens_mean, Some(20.0));
        assert_eq!((t[1].completed, t[1].failed), (1, 1));
        assert_eq!(t[1].ttft_p99_ms, Some(20.0));
        assert_eq!(t[1].cached_tokens_mean, Some(32.0));
        assert!(by_turn(&records[4..]).is_empty());
    }
}
