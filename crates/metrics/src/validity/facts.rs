//! The facts a verdict rests on, computed from a run's records and its summary.

use serde::{Deserialize, Serialize};

use super::{
    load_verdict, thresholds, OutputLengthFacts, PercentileSamples, RunFacts, ThroughputHalves,
};
use crate::record::{CountSource, RequestRecord};
use crate::stats;
use crate::steady_state::{steady_state, SteadyStateMode};
use crate::summary::RunSummary;

const NS_PER_S: f64 = 1e9;
const NS_PER_MS: f64 = 1e6;

/// What the run asked for, beyond what its records say.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FactsOptions {
    /// Metrics whose percentiles the run reports (names as in [`RunSummary::METRICS`]; an
    /// unknown name is skipped). Default: vLLM's `ttft,tpot,itl`.
    pub metrics: Vec<String>,
    /// Percentiles the run reports, in %. Default: vLLM's `99`.
    pub percentiles: Vec<f64>,
    /// The request rate asked for, req/s; `None` = unlimited.
    pub offered_rate: Option<f64>,
    /// Client CPU time / (wall time × cores available), when measured.
    pub client_cpu_share: Option<f64>,
    /// Every request fixed its output length (`ignore_eos` with `max_tokens`), so a
    /// server-counted length other than `max_tokens` means the server ignored the request.
    /// The records cannot tell: `max_tokens` alone is only a cap.
    pub output_length_fixed: bool,
    /// Whether the detected warm-up is excluded from the window judged for drift.
    pub steady_state: SteadyStateMode,
}

impl Default for FactsOptions {
    fn default() -> Self {
        FactsOptions {
            metrics: vec!["ttft".into(), "tpot".into(), "itl".into()],
            percentiles: vec![99.0],
            offered_rate: None,
            client_cpu_share: None,
            output_length_fixed: false,
            steady_state: SteadyStateMode::Auto,
        }
    }
}

/// Gather the facts [`super::judge`] needs from one run's records and the summary made of
/// them.
pub fn run_facts(records: &[RequestRecord], summary: &RunSummary, opts: &FactsOptions) -> RunFacts {
    let percentiles = opts
        .metrics
        .iter()
        .filter_map(|m| Some((m, summary.metric(m)?.n)))
        .flat_map(|(m, n)| {
            opts.percentiles.iter().map(move |&p| PercentileSamples {
                metric: m.clone(),
                p,
                samples: n,
            })
        })
        .collect();

    // Lag is the client's own health, so every record counts, failed or not. At an
    // unlimited rate every request is due at once: its "lag" is how long releasing the burst
    // takes, which no schedule asked the client to beat, so it is not judged.
    let lags: Vec<f64> = records
        .iter()
        .filter(|_| opts.offered_rate.is_some_and(f64::is_finite))
        .filter_map(RequestRecord::dispatch_lag_ns)
        .map(|l| l as f64 / NS_PER_MS)
        .collect();

    // The arrival phase ends at the last send; what follows is the drain.
    let last_sent = records.iter().map(|r| r.sent).max();
    let ts = &summary.time_series;
    let steady =
        (!ts.in_flight_mean.is_empty()).then(|| steady_state(ts, last_sent, opts.steady_state));
    let window_start = ts.origin_ns + (steady.map_or(0.0, |s| s.excluded_s) * NS_PER_S) as u64;
    let halves =
        last_sent.and_then(|end| throughput_halves(records, window_start, end, ts.origin_ns));

    RunFacts {
        requests: records.len() as u64,
        failed: summary.failed,
        duration_s: summary.duration_s,
        percentiles,
        dispatch_lag_p99_ms: stats::percentile(&lags, 99.0),
        client_cpu_share: opts.client_cpu_share,
        load: (!records.is_empty()).then(|| load_verdict(opts.offered_rate, records)),
        halves,
        output_lengths: opts.output_length_fixed.then(|| output_lengths(records)),
        steady_state: steady,
    }
}

/// Output tokens per second of completed requests in `[start, mid)` and `[mid, end)`, each
/// event weighted by its request's token share; `None` for a window shorter than
/// [`thresholds::MIN_DRIFT_WINDOW_S`].
fn throughput_halves(
    records: &[RequestRecord],
    start: u64,
    end: u64,
    origin: u64,
) -> Option<ThroughputHalves> {
    let window_s = end.saturating_sub(start) as f64 / NS_PER_S;
    if window_s < thresholds::MIN_DRIFT_WINDOW_S {
        return None;
    }
    let mid = start + (end - start) / 2;
    let (mut first, mut second) = (0.0f64, 0.0f64);
    for r in records.iter().filter(|r| r.is_success()) {
        let w = r.tokens_per_event();
        for e in &r.events {
            if (start..mid).contains(&e.t) {
                first += w;
            } else if (mid..end).contains(&e.t) {
                second += w;
            }
        }
    }
    let half_s = window_s / 2.0;
    Some(ThroughputHalves {
        window_start_s: start.saturating_sub(origin) as f64 / NS_PER_S,
        window_s,
        first_tok_s: first / half_s,
        second_tok_s: second / half_s,
    })
}

/// Completed requests with a fixed length whose output the server itself counted: only its
/// `usage` can prove the request was ignored, since a client-side re-count of the text may
/// differ by tokenization alone.
fn output_lengths(records: &[RequestRecord]) -> OutputLengthFacts {
    let mut f = OutputLengthFacts::default();
    for r in records
        .iter()
        .filter(|r| r.is_success() && r.output_source == CountSource::Usage)
    {
        let Some(asked) = r.max_tokens else { continue };
        f.checked += 1;
        f.requested_tokens += asked;
        f.received_tokens += r.output_tokens;
        if r.output_tokens != asked {
            f.missed += 1;
        }
    }
    f
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::derived::tests::record;
    use crate::summary::{summarize, SummaryOptions};
    use crate::validity::load::tests::capped_run;
    use crate::validity::{judge, Reason, Thresholds, VerdictStatus};

    /// `n` requests, one every `gap_ms`, each streaming `tokens` events 20 ms apart after a
    /// 100 ms TTFT, with `max_tokens = tokens`.
    fn steady_run(n: u64, gap_ms: u64, tokens: u64) -> Vec<RequestRecord> {
        (0..n)
            .map(|i| {
                let sent = i * gap_ms;
                let times: Vec<u64> = (0..tokens).map(|k| sent + 100 + 20 * k).collect();
                let mut r = record(i, sent, &times, tokens);
                r.max_tokens = Some(tokens);
                r
            })
            .collect()
    }

    fn facts(records: &[RequestRecord], opts: &FactsOptions) -> RunFacts {
        let summary = summarize(records, &SummaryOptions::default());
        run_facts(records, &summary, opts)
    }

    #[test]
    fn twenty_requests_at_p99_say_not_enough_data_and_how_many_more() {
        let records = steady_run(20, 1000, 10);
        let f = facts(&records, &FactsOptions::default());
        let ttft = f.percentiles.iter().find(|p| p.metric == "ttft").unwrap();
        assert_eq!((ttft.p, ttft.samples), (99.0, 20));
        let v = judge(&f, &Thresholds::default());
        assert_eq!(v.status, VerdictStatus::NotEnoughData);
        assert_eq!(v.needed.unwrap().more_requests, 980);
        let line = v.to_string();
        assert!(
            line.starts_with("NOT ENOUGH DATA: p99 TTFT rests on 20 samples, needs 1000"),
            "{line}"
        );
        assert!(line.contains("(980 more requests"), "{line}");
    }

    #[test]
    fn a_long_steady_run_is_valid() {
        // 2000 requests at 10 req/s, 10 tokens each: 200 s, p99 on 2000 TTFT samples.
        let records = steady_run(2000, 100, 10);
        let opts = FactsOptions {
            offered_rate: Some(10.0),
            output_length_fixed: true,
            ..FactsOptions::default()
        };
        let f = facts(&records, &opts);
        assert_eq!(f.requests, 2000);
        assert_eq!(f.dispatch_lag_p99_ms, Some(0.0));
        let h = f.halves.unwrap();
        assert!((h.first_tok_s - 100.0).abs() < 1.0, "{h:?}");
        assert!(h.drift() < 0.02, "{h:?}");
        assert_eq!(f.output_lengths.unwrap().missed, 0);
        assert!(!f.load.unwrap().overloaded);
        let ss = f.steady_state.unwrap();
        assert!(ss.warmup_s <= 5.0, "{ss:?}");
        let v = judge(&f, &Thresholds::default());
        assert!(v.is_valid(), "{v}");
    }

    /// A burst released at once (an unlimited rate) is late by its own length: no schedule
    /// asked for better, so its dispatch lag is no verdict; a paced run's is.
    #[test]
    fn dispatch_lag_is_judged_only_for_a_paced_schedule() {
        let mut records = steady_run(2000, 100, 10);
        for r in &mut records {
            r.released = r.intended + 50 * 1_000_000;
        }
        let unlimited = facts(&records, &FactsOptions::default());
        assert_eq!(unlimited.dispatch_lag_p99_ms, None);
        assert!(!judge(&unlimited, &Thresholds::default())
            .to_string()
            .contains("dispatch lag"));
        let paced = facts(
            &records,
            &FactsOptions {
                offered_rate: Some(10.0),
                ..FactsOptions::default()
            },
        );
        assert_eq!(paced.dispatch_lag_p99_ms, Some(50.0));
    }

    #[test]
    fn ignored_output_lengths_are_caught_only_when_the_run_fixed_them() {
        let mut records = steady_run(2000, 100, 10);
        for r in records.iter_mut().step_by(10) {
            r.max_tokens = Some(64); // asked for 64, the server stopped at 10
        }
        let fixed = FactsOptions {
            output_length_fixed: true,
            ..FactsOptions::default()
        };
        let f = facts(&records, &fixed);
        let len = f.output_lengths.unwrap();
        assert_eq!((len.checked, len.missed), (2000, 200));
        let v = judge(&f, &Thresholds::default());
        assert_eq!(v.status, VerdictStatus::NotSteady);
        assert!(
            v.to_string().contains("ignored ignore_eos/max_tokens"),
            "{v}"
        );
        // A cap alone (no ignore_eos) allows shorter answers.
        let f = facts(&records, &FactsOptions::default());
        assert_eq!(f.output_lengths, None);
        assert!(judge(&f, &Thresholds::default()).is_valid());
        // Counts re-made by the client's tokenizer prove nothing.
        for r in &mut records {
            r.output_source = CountSource::Tokenizer;
        }
        assert_eq!(facts(&records, &fixed).output_lengths.unwrap().checked, 0);
    }

    #[test]
    fn throughput_that_falls_in_the_second_half_is_drift() {
        // 10 tokens per request for the first 100 s, 5 after.
        let mut records = steady_run(1000, 100, 10);
        records.extend(steady_run(1000, 100, 5).into_iter().map(|mut r| {
            let shift = 100_000 * 1_000_000;
            r.id += 1000;
            r.intended += shift;
            r.released += shift;
            r.sent += shift;
            r.first_token = r.first_token.map(|t| t + shift);
            r.end = r.end.map(|t| t + shift);
            r.done = r.done.map(|t| t + shift);
            for e in &mut r.events {
                e.t += shift;
            }
            r
        }));
        let f = facts(&records, &FactsOptions::default());
        let h = f.halves.unwrap();
        assert!(h.drift() > 0.4, "{h:?}");
        let v = judge(&f, &Thresholds::default());
        assert_eq!(v.status, VerdictStatus::NotSteady);
        assert!(
            matches!(v.reasons[0], Reason::ThroughputDrift { .. }),
            "{v}"
        );
    }

    #[test]
    fn the_row_d_overload_reaches_the_verdict() {
        let due: Vec<u64> = (0..1200).map(|i| i * 1000 / 16).collect();
        let records = capped_run(&due, 8_500, 8);
        let opts = FactsOptions {
            offered_rate: Some(16.0),
            metrics: vec!["ttft".into()],
            ..FactsOptions::default()
        };
        let f = facts(&records, &opts);
        assert!(f.load.unwrap().overloaded);
        let v = judge(&f, &Thresholds::default());
        assert_eq!(v.status, VerdictStatus::NotSteady, "{v}");
        assert!(v.to_string().contains("overloaded: sent 0.9"), "{v}");
    }

    #[test]
    fn no_records_give_empty_facts() {
        let f = facts(&[], &FactsOptions::default());
        assert_eq!(f.requests, 0);
        assert_eq!((f.load, f.halves, f.steady_state), (None, None, None));
        assert_eq!(
            judge(&f, &Thresholds::default()).status,
            VerdictStatus::NotEnoughData
        );
    }
}
