//! Reasoning models and tool calls: time to first *answer* token (TTFAT) and the share of
//! output spent reasoning. TTFT stays vLLM's (first token of any kind); TTFAT is the wait
//! until the first `content` or `tool_calls` token, which is what a user of a reasoning model
//! waits for.

use serde::{Deserialize, Serialize};

use crate::record::RequestRecord;
use crate::summary::MetricSummary;
use crate::units::ns_to_ms;

impl RequestRecord {
    /// When the first answer token arrived: the first token for a plain response, the
    /// split's first answer for a reasoning one (`None` if its answer never began).
    pub fn first_answer_at(&self) -> Option<u64> {
        match &self.output_split {
            None => self.first_token,
            Some(s) => s.first_answer,
        }
    }

    /// TTFAT = `first answer − sent` (measured like TTFT).
    pub fn ttfat_ns(&self) -> Option<u64> {
        self.first_answer_at()?.checked_sub(self.sent)
    }

    /// Output tokens spent reasoning (0 for a plain response; never above `output_tokens`).
    pub fn reasoning_tokens(&self) -> u64 {
        self.output_split
            .map_or(0, |s| s.reasoning_tokens.min(self.output_tokens))
    }

    /// Output tokens of the answer (content and tool calls).
    pub fn answer_tokens(&self) -> u64 {
        self.output_tokens - self.reasoning_tokens()
    }
}

/// The reasoning part of a run's summary; present only when some completed request reasoned
/// or called tools, so a plain run's summary is as before.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReasoningSummary {
    /// Time to first answer token, over completed requests whose answer began.
    pub ttfat: MetricSummary,
    /// Σ reasoning tokens of completed requests.
    pub reasoning_tokens: u64,
    /// Σ answer tokens of completed requests.
    pub answer_tokens: u64,
    /// `reasoning_tokens / (reasoning_tokens + answer_tokens)`.
    pub reasoning_share: f64,
    /// Completed requests with at least one reasoning token.
    pub requests_with_reasoning: u64,
    /// Completed requests that streamed tool calls.
    pub requests_with_tool_calls: u64,
    /// Completed requests that stopped before their answer began (no TTFAT sample).
    pub requests_without_answer: u64,
}

impl ReasoningSummary {
    /// From the completed requests of a run; `None` when none had a split.
    pub fn from_completed(ok: &[&RequestRecord], percentiles: &[f64]) -> Option<Self> {
        if !ok.iter().any(|r| r.output_split.is_some()) {
            return None;
        }
        let ttfat = ok
            .iter()
            .filter_map(|r| r.ttfat_ns())
            .map(ns_to_ms)
            .collect();
        let reasoning_tokens: u64 = ok.iter().map(|r| r.reasoning_tokens()).sum();
        let answer_tokens: u64 = ok.iter().map(|r| r.answer_tokens()).sum();
        let total = reasoning_tokens + answer_tokens;
        Some(ReasoningSummary {
            ttfat: MetricSummary::from_ms(ttfat, percentiles),
            reasoning_tokens,
            answer_tokens,
            reasoning_share: if total > 0 {
                reasoning_tokens as f64 / total as f64
            } else {
                0.0
            },
            requests_with_reasoning: ok.iter().filter(|r| r.reasoning_tokens() > 0).count() as u64,
            requests_with_tool_calls: ok
                .iter()
                .filter(|r| r.output_split.is_some_and(|s| s.tool_calls))
                .count() as u64,
            requests_without_answer: ok.iter().filter(|r| r.first_answer_at().is_none()).count()
                as u64,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::record::{CountSource, OutputSplit, TokenEvent};

    const MS: u64 = 1_000_000;

    fn rec(first: u64, split: Option<OutputSplit>, output: u64) -> RequestRecord {
        RequestRecord {
            phases: None,
            images: None,
            id: 0,
            intended: 0,
            released: 0,
            sent: 0,
            started: None,
            first_token: Some(first),
            end: Some(first + 10 * MS),
            done: Some(first + 10 * MS),
            waited_for_slot: false,
            events: vec![TokenEvent { t: first, chars: 1 }],
            bare_events: Vec::new(),
            input_tokens: 1,
            input_source: CountSource::Usage,
            output_tokens: output,
            output_source: CountSource::Usage,
            intended_input_tokens: 1,
            max_tokens: None,
            cached_tokens: None,
            finish_reason: None,
            text: None,
            failure: None,
            resent: 0,
            answer_checked: false,
            output_split: split,
            session_id: None,
            turn: None,
            stamp_clock: None,
            lora: None,
            served_by: None,
        }
    }

    fn split(first_answer: Option<u64>, reasoning: u64) -> Option<OutputSplit> {
        Some(OutputSplit {
            first_answer,
            reasoning_tokens: reasoning,
            reasoning_source: CountSource::Usage,
            tool_calls: false,
        })
    }

    #[test]
    fn plain_records_have_ttfat_equal_to_ttft_and_no_summary() {
        let r = rec(5 * MS, None, 8);
        assert_eq!(r.ttfat_ns(), r.ttft_ns());
        assert_eq!((r.reasoning_tokens(), r.answer_tokens()), (0, 8));
        assert_eq!(ReasoningSummary::from_completed(&[&r], &[50.0]), None);
    }

    #[test]
    fn summary_takes_ttfat_from_the_first_answer_and_the_share_from_tokens() {
        let a = rec(5 * MS, split(Some(25 * MS), 30), 40);
        let b = rec(7 * MS, None, 20);
        // Stopped while reasoning: no TTFAT sample, all its output is reasoning.
        let c = rec(9 * MS, split(None, 99), 10);
        let s = ReasoningSummary::from_completed(&[&a, &b, &c], &[50.0]).unwrap();
        assert_eq!(s.ttfat.n, 2);
        assert_eq!(s.ttfat.min, Some(7.0));
        assert_eq!(s.ttfat.max, Some(25.0));
        assert_eq!((s.reasoning_tokens, s.answer_tokens), (40, 30));
        assert!((s.reasoning_share - 40.0 / 70.0).abs() < 1e-12);
        assert_eq!(s.requests_with_reasoning, 2);
        assert_eq!(s.requests_without_answer, 1);
        assert_eq!(s.requests_with_tool_calls, 0);
    }

    #[test]
    fn a_plain_record_serializes_without_the_split() {
        let json = serde_json::to_string(&rec(MS, None, 1)).unwrap();
        assert!(!json.contains("output_split"), "{json}");
        let with = rec(MS, split(Some(2 * MS), 1), 2);
        let back: RequestRecord =
            serde_json::from_str(&serde_json::to_string(&with).unwrap()).unwrap();
        assert_eq!(back, with);
    }
}
