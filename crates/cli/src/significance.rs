//! Whether two groups of runs differ on a latency metric: the per-request samples pooled over
//! each side's runs and a Mann–Whitney U test on them. `compare` and `sweep serve`'s decision
//! both judge with this, so one difference reads the same in both.

use serde::Serialize;
use servebench_analysis::compare::{mann_whitney_u, MannWhitney};
use servebench_report::render::charts::samples_ms;
use servebench_report::RunData;

/// The latency metrics tested per request, with their labels.
pub const LATENCY: [(&str, &str); 4] = [
    ("ttft", "TTFT"),
    ("tpot", "TPOT"),
    ("itl", "ITL"),
    ("e2el", "E2EL"),
];

/// A Mann–Whitney U test of one metric's samples.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricTest {
    /// `ttft`, `tpot`, `itl`, `e2el` (per-request samples, ITL per gap) or a throughput
    /// name (per-run samples, needs repeats).
    pub metric: String,
    /// What one sample is.
    pub sample: String,
    /// The test (`None` when a side had no samples).
    pub result: Option<MannWhitney>,
    /// Probability that a sample of B exceeds one of A (ties count half).
    pub p_b_greater: Option<f64>,
    /// `p_value < alpha`.
    pub significant: Option<bool>,
}

/// Per-request samples of a latency metric, ms. ITL gaps within one request are strongly
/// correlated (one batch paces them all), so pooling every gap would make a test see
/// "significant" differences between two repeats of one configuration; ITL is therefore
/// tested on each request's median gap, like the other metrics on one value per request.
pub fn test_samples(runs: &[RunData], metric: &str) -> Vec<f64> {
    if metric != "itl" {
        return runs
            .iter()
            .flat_map(|r| samples_ms(&r.records, metric))
            .collect();
    }
    runs.iter()
        .flat_map(|r| r.records.iter().filter(|x| x.is_success()))
        .filter_map(|r| {
            let gaps: Vec<f64> = r.itls_ns().map(|g| g as f64 / 1e6).collect();
            servebench_metrics::stats::median(&gaps)
        })
        .collect()
}

/// What one sample of `metric` is, as tables print it.
pub fn sample_name(metric: &str) -> &'static str {
    if metric == "itl" {
        "request (median gap)"
    } else {
        "request"
    }
}

/// The test of one latency metric, A's runs against B's.
pub fn latency_test(a: &[RunData], b: &[RunData], metric: &str, alpha: f64) -> MetricTest {
    let sa = test_samples(a, metric);
    let sb = test_samples(b, metric);
    finish_test(metric, sample_name(metric), &sa, &sb, alpha)
}

/// The test of two samples already drawn.
pub fn finish_test(metric: &str, sample: &str, a: &[f64], b: &[f64], alpha: f64) -> MetricTest {
    let result = mann_whitney_u(a, b).ok();
    MetricTest {
        metric: metric.to_owned(),
        sample: sample.to_owned(),
        p_b_greater: result.map(|r| 1.0 - r.effect_size),
        significant: result.map(|r| r.p_value < alpha),
        result,
    }
}

/// A p-value as the tables print it: three decimals, or scientific below 0.001.
pub fn p_text(p: f64) -> String {
    if p < 1e-3 {
        format!("{p:.1e}")
    } else {
        format!("{p:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn p_values_print_as_compare_prints_them() {
        assert_eq!(p_text(0.5), "0.500");
        assert_eq!(p_text(0.001), "0.001");
        assert_eq!(p_text(0.000_123), "1.2e-4");
    }
}
