//! Per-request metrics, derived from a record's clock points exactly as docs/metrics.md defines
//! them. All durations are nanoseconds; a metric whose clock points are missing (or out of
//! order, which a correct collector never produces) is `None`.

use crate::record::RequestRecord;

/// The fixed part of the stall rule: an ITL is a stall above this many times the request's
/// median ITL (and above the absolute floor given by the caller).
pub const STALL_MEDIAN_FACTOR: u64 = 5;

/// Default absolute stall floor (docs/metrics.md: at least 250 ms).
pub const DEFAULT_STALL_FLOOR_NS: u64 = 250_000_000;

impl RequestRecord {
    /// TTFT = `first_token − sent` (vLLM parity).
    pub fn ttft_ns(&self) -> Option<u64> {
        self.first_token?.checked_sub(self.sent)
    }

    /// The time E2EL ends at: the last token-bearing event (vLLM parity), falling back to the
    /// first token for a record that kept no `end`.
    pub fn end_ns(&self) -> Option<u64> {
        self.end.or(self.first_token)
    }

    /// E2EL = `end − sent` (vLLM parity).
    pub fn e2el_ns(&self) -> Option<u64> {
        self.end_ns()?.checked_sub(self.sent)
    }

    /// ITLs: one gap per token-bearing event after the first (vLLM parity: an event carrying
    /// several tokens is still one gap).
    pub fn itls_ns(&self) -> impl Iterator<Item = u64> + '_ {
        self.events
            .windows(2)
            .map(|w| w[1].t.saturating_sub(w[0].t))
    }

    /// TPOT = `(E2EL − TTFT) / (output_tokens − 1)`, only when `output_tokens > 1`.
    pub fn tpot_ns(&self) -> Option<f64> {
        if self.output_tokens <= 1 {
            return None;
        }
        let decode = self.e2el_ns()?.checked_sub(self.ttft_ns()?)?;
        Some(decode as f64 / (self.output_tokens - 1) as f64)
    }

    /// TPOT as vLLM's goodput sees it: 0 for a request with at most one output token.
    pub fn tpot_for_goodput_ns(&self) -> f64 {
        self.tpot_ns().unwrap_or(0.0)
    }

    /// Queue time = `sent − intended`: how long the request waited on the client side.
    pub fn queue_ns(&self) -> Option<u64> {
        self.sent.checked_sub(self.intended)
    }

    /// User TTFT = TTFT + queue time = `first_token − intended`.
    pub fn user_ttft_ns(&self) -> Option<u64> {
        Some(self.ttft_ns()? + self.queue_ns()?)
    }

    /// User E2EL = E2EL + queue time = `end − intended`.
    pub fn user_e2el_ns(&self) -> Option<u64> {
        Some(self.e2el_ns()? + self.queue_ns()?)
    }

    /// Dispatch lag = `released − intended`, only for a request that did not wait for a
    /// concurrency slot (otherwise the gap is queueing, not the client's timer being late).
    pub fn dispatch_lag_ns(&self) -> Option<u64> {
        if self.waited_for_slot {
            return None;
        }
        self.released.checked_sub(self.intended)
    }

    /// The largest ITL of the request.
    pub fn longest_stall_ns(&self) -> Option<u64> {
        self.itls_ns().max()
    }

    /// The stall threshold of this request: `max(5 × median ITL, floor_ns)`; `None` without
    /// any ITL. The median is NumPy's (mean of the middle two for an even count).
    pub fn stall_threshold_ns(&self, floor_ns: u64) -> Option<f64> {
        let mut itls: Vec<u64> = self.itls_ns().collect();
        if itls.is_empty() {
            return None;
        }
        itls.sort_unstable();
        let n = itls.len();
        let median = if n % 2 == 1 {
            itls[n / 2] as f64
        } else {
            (itls[n / 2 - 1] as f64 + itls[n / 2] as f64) / 2.0
        };
        Some((STALL_MEDIAN_FACTOR as f64 * median).max(floor_ns as f64))
    }

    /// Number of ITLs above [`Self::stall_threshold_ns`].
    pub fn stall_count(&self, floor_ns: u64) -> u64 {
        let Some(threshold) = self.stall_threshold_ns(floor_ns) else {
            return 0;
        };
        self.itls_ns().filter(|&g| g as f64 > threshold).count() as u64
    }

    /// The interval during which the request occupied a connection: `[sent, end-or-done)`.
    /// `None` when it never got as far as an end or done time.
    pub fn in_flight_ns(&self) -> Option<(u64, u64)> {
        let stop = self.end.or(self.done)?;
        (stop >= self.sent).then_some((self.sent, stop))
    }

    /// Output tokens carried by each token event: `output_tokens / events` (1 when they
    /// agree), so that the events of a request add up to its output token count.
    pub fn tokens_per_event(&self) -> f64 {
        if self.events.is_empty() {
            return 0.0;
        }
        self.output_tokens as f64 / self.events.len() as f64
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;
    use crate::record::{CountSource, TokenEvent};

    const MS: u64 = 1_000_000;

    /// A successful record: intended 0, released/sent as given, tokens at `times_ms`.
    pub(crate) fn record(
        id: u64,
        sent_ms: u64,
        times_ms: &[u64],
        output_tokens: u64,
    ) -> RequestRecord {
        let events: Vec<TokenEvent> = times_ms
            .iter()
            .map(|&t| TokenEvent {
                t: t * MS,
                chars: 4,
            })
            .collect();
        RequestRecord {
            phases: None,
            images: None,
            id,
            intended: sent_ms * MS,
            released: sent_ms * MS,
            sent: sent_ms * MS,
            started: None,
            bare_events: Vec::new(),
            first_token: events.first().map(|e| e.t),
            end: events.last().map(|e| e.t),
            done: events.last().map(|e| e.t + MS),
            waited_for_slot: false,
            events,
            input_tokens: 100,
            input_source: CountSource::Usage,
            output_tokens,
            output_source: CountSource::Usage,
            intended_input_tokens: 100,
            max_tokens: None,
            cached_tokens: None,
            finish_reason: None,
            text: None,
            failure: None,
            resent: 0,
            answer_checked: false,
            output_split: None,
            session_id: None,
            turn: None,
            stamp_clock: None,
            lora: None,
            served_by: None,
        }
    }

    #[test]
    fn e2el_minus_ttft_is_the_sum_of_itls() {
        let r = record(0, 10, &[50, 60, 75, 200], 4);
        let sum: u64 = r.itls_ns().sum();
        assert_eq!(r.ttft_ns(), Some(40 * MS));
        assert_eq!(r.e2el_ns(), Some(190 * MS));
        assert_eq!(r.e2el_ns().unwrap() - r.ttft_ns().unwrap(), sum);
        assert_eq!(
            r.itls_ns().collect::<Vec<_>>(),
            vec![10 * MS, 15 * MS, 125 * MS]
        );
        assert_eq!(r.longest_stall_ns(), Some(125 * MS));
    }

    #[test]
    fn tpot_uses_output_tokens_not_events() {
        // 3 events but 7 tokens (the server merged some): (E2EL 190 − TTFT 40) ms / 6.
        let r = record(0, 10, &[50, 100, 200], 7);
        assert_eq!(r.tpot_ns(), Some(25.0 * MS as f64));
        let one = record(0, 10, &[50], 1);
        assert_eq!(one.tpot_ns(), None);
        assert_eq!(one.tpot_for_goodput_ns(), 0.0);
        assert_eq!(one.itls_ns().count(), 0);
    }

    #[test]
    fn queue_versus_dispatch_lag() {
        let mut r = record(0, 0, &[500], 1);
        r.intended = 100 * MS;
        r.released = 103 * MS; // the timer fired 3 ms late
        r.sent = 104 * MS;
        assert_eq!(r.queue_ns(), Some(4 * MS));
        assert_eq!(r.dispatch_lag_ns(), Some(3 * MS));
        assert_eq!(r.user_ttft_ns(), Some(400 * MS));
        assert_eq!(r.user_e2el_ns(), Some(400 * MS));
        // Waiting for a concurrency slot is queueing, not lag.
        r.waited_for_slot = true;
        r.released = 300 * MS;
        r.sent = 300 * MS;
        assert_eq!(r.dispatch_lag_ns(), None);
        assert_eq!(r.queue_ns(), Some(200 * MS));
        assert_eq!(r.ttft_ns(), Some(200 * MS));
        assert_eq!(r.user_ttft_ns(), Some(400 * MS));
    }

    #[test]
    fn stalls_use_the_median_rule_and_the_floor() {
        // ITLs: 10, 10, 10, 300, 10 ms → median 10 → threshold max(50, 250) = 250 ms.
        let r = record(0, 0, &[100, 110, 120, 130, 430, 440], 6);
        assert_eq!(r.stall_count(DEFAULT_STALL_FLOOR_NS), 1);
        assert_eq!(r.stall_count(400 * MS), 0);
        // With a low floor, 5 × median (50 ms) decides.
        assert_eq!(r.stall_threshold_ns(MS), Some(50.0 * MS as f64));
        let slow = record(0, 0, &[100, 400, 700, 1000, 2700], 5);
        // ITLs 300, 300, 300, 1700 → median 300 → threshold 1500 ms.
        assert_eq!(slow.stall_count(DEFAULT_STALL_FLOOR_NS), 1);
        assert_eq!(record(0, 0, &[5], 1).stall_count(0), 0);
    }

    #[test]
    fn missing_points_give_none() {
        let mut r = record(0, 10, &[], 0);
        r.done = Some(20 * MS);
        assert_eq!(r.ttft_ns(), None);
        assert_eq!(r.e2el_ns(), None);
        assert_eq!(r.tpot_ns(), None);
        assert_eq!(r.in_flight_ns(), Some((10 * MS, 20 * MS)));
        assert_eq!(r.tokens_per_event(), 0.0);
    }
}
