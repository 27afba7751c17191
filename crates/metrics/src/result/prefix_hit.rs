//! The prefix hit rate a run aimed at (`--prefix-hit-rate`) beside what the server reported.

use serde::{Deserialize, Serialize};

use super::ServerTelemetry;
use crate::RequestRecord;

/// vLLM's prefix-cache counters: prompt tokens looked up, and those found cached.
pub const QUERIES_COUNTER: &str = "vllm:prefix_cache_queries_total";
pub const HITS_COUNTER: &str = "vllm:prefix_cache_hits_total";

/// Achieved below this share of the achievable rate is called out loudly.
const FAR_BELOW: f64 = 0.75;

/// Target, achievable and achieved prefix hit rates of one run (shares in `[0, 1]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrefixHitCheck {
    /// `--prefix-hit-rate`.
    pub target: f64,
    /// `--prefix-pool`: distinct shared prefixes.
    pub pool: u64,
    /// Best rate for this run's requests in their order with an unbounded cache at token
    /// granularity: the first request of each prefix is a miss.
    pub achievable: f64,
    /// Σ `usage.prompt_tokens_details.cached_tokens` / Σ prompt tokens over successful
    /// requests that reported cached tokens; `None` when none did.
    #[serde(default)]
    pub achieved_usage: Option<f64>,
    /// Σ cached prompt tokens behind `achieved_usage`.
    #[serde(default)]
    pub cached_tokens: Option<u64>,
    /// Σ prompt tokens behind `achieved_usage`.
    #[serde(default)]
    pub prompt_tokens: Option<u64>,
    /// Increase of the server's prefix-cache hits / queries counters over the run; `None`
    /// when the server does not export them.
    #[serde(default)]
    pub achieved_counters: Option<f64>,
    /// Why the achieved rate is not to be trusted as the target's, when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

impl PrefixHitCheck {
    /// Compares the server's figures with the target. `records`: the measured requests;
    /// `telemetry`: the counters scraped over the run.
    pub fn measure(
        target: f64,
        pool: u64,
        achievable: f64,
        records: &[RequestRecord],
        telemetry: Option<&ServerTelemetry>,
    ) -> PrefixHitCheck {
        let (mut cached, mut prompt, mut reported) = (0u64, 0u64, false);
        for r in records.iter().filter(|r| r.is_success()) {
            if let Some(c) = r.cached_tokens {
                reported = true;
                cached += c;
                prompt += r.input_tokens;
            }
        }
        let achieved_usage = (reported && prompt > 0).then(|| cached as f64 / prompt as f64);
        let achieved_counters = telemetry.and_then(|t| {
            let queries = t.increase(QUERIES_COUNTER)?;
            let hits = t.increase(HITS_COUNTER)?;
            (queries > 0.0).then(|| hits / queries)
        });
        let mut check = PrefixHitCheck {
            target,
            pool,
            achievable,
            achieved_usage,
            cached_tokens: reported.then_some(cached),
            prompt_tokens: reported.then_some(prompt),
            achieved_counters,
            warning: None,
        };
        check.warning = check.judge();
        check
    }

    /// The best evidence of what the server reused: usage when given, else the counters.
    pub fn achieved(&self) -> Option<f64> {
        self.achieved_usage.or(self.achieved_counters)
    }

    fn judge(&self) -> Option<String> {
        let Some(achieved) = self.achieved() else {
            return Some(
                "the server reported no cached prompt tokens and no prefix-cache counters, \
                 so the hit rate could not be verified (vLLM: start the server with \
                 --enable-prompt-tokens-details)"
                    .to_owned(),
            );
        };
        if self.achievable > 0.01 && achieved < FAR_BELOW * self.achievable {
            return Some(format!(
                "the achieved prefix hit rate {:.1} % is far below the achievable {:.1} %: \
                 is prefix caching on (vLLM: --enable-prefix-caching), is the cache large \
                 enough for {} prefix(es), does the load evict them, or do requests of one \
                 prefix arrive together (a high rate or concurrency) before the first is \
                 prefilled?",
                achieved * 100.0,
                self.achievable * 100.0,
                self.pool
            ));
        }
        None
    }

    /// One line for the terminal and the report.
    pub fn describe(&self) -> String {
        let pct = |v: Option<f64>| v.map_or("–".to_owned(), |v| format!("{:.1} %", v * 100.0));
        format!(
            "target {:.1} %, achievable {:.1} % ({} prefix(es)), achieved {} (cached_tokens), {} (server counters)",
            self.target * 100.0,
            self.achievable * 100.0,
            self.pool,
            pct(self.achieved_usage),
            pct(self.achieved_counters)
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn rec(input: u64, cached: Option<u64>, ok: bool) -> RequestRecord {
        let mut r = crate::derived::tests::record(0, 0, &[1, 2], 2);
        r.input_tokens = input;
        r.cached_tokens = cached;
        if !ok {
            r.failure = Some(crate::Failure {
                kind: crate::FailureKind::EmptyOutput,
                status: None,
                message: String::new(),
            });
        }
        r
    }

    fn telemetry(queries: f64, hits: f64) -> ServerTelemetry {
        let mut t = ServerTelemetry::default();
        t.counter_increase.insert(QUERIES_COUNTER.into(), queries);
        t.counter_increase.insert(HITS_COUNTER.into(), hits);
        t
    }

    #[test]
    fn usage_and_counters_over_successful_requests() {
        let records = [
            rec(100, Some(0), true),
            rec(100, Some(50), true),
            rec(100, Some(100), false),
        ];
        let c = PrefixHitCheck::measure(0.5, 1, 0.25, &records, Some(&telemetry(400.0, 100.0)));
        assert_eq!(c.achieved_usage, Some(0.25));
        assert_eq!((c.cached_tokens, c.prompt_tokens), (Some(50), Some(200)));
        assert_eq!(c.achieved_counters, Some(0.25));
        assert!(c.warning.is_none(), "{:?}", c.warning);
        assert!(c.describe().contains("achieved 25.0 %"), "{}", c.describe());
    }

    #[test]
    fn far_below_and_unverified_are_loud() {
        let low = PrefixHitCheck::measure(0.5, 2, 0.45, &[rec(100, Some(5), true)], None);
        assert!(low.warning.unwrap().contains("far below"));
        let blind = PrefixHitCheck::measure(0.5, 2, 0.45, &[rec(100, None, true)], None);
        assert_eq!(blind.achieved(), None);
        assert!(blind.warning.unwrap().contains("could not be verified"));
        let zero = PrefixHitCheck::measure(0.0, 1, 0.0, &[rec(100, Some(0), true)], None);
        assert!(zero.warning.is_none());
    }
}
