//! One figure of one configuration over time, and whether its latest change stands out from
//! the run-to-run noise of the runs before it.
//!
//! The newest run (or the newest `recent` runs) is the candidate; up to `baseline` runs before
//! it are the baseline, whose spread is the run-to-run noise. One candidate is judged by the
//! two-sided prediction-interval t-test (does it fit the distribution the baseline runs come
//! from?), several by Welch's t-test against the baseline (the tests of
//! `servebench_analysis::compare`). A change is a regression when the test is significant at
//! `alpha`, the figure moved in its worse direction, and by at least `min_change` of the
//! baseline's mean; the same in the better direction is an improvement; anything else is noise.

use serde::Serialize;
use servebench_analysis::compare::{prediction_t_test, welch_t_test, Welch};

use crate::db::StoredRun;

/// How the latest runs are judged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrendOptions {
    /// Runs before the candidates that make the baseline (the newest of them).
    pub baseline: usize,
    /// The newest runs judged together as the candidate.
    pub recent: usize,
    /// Significance level.
    pub alpha: f64,
    /// Smallest relative change (a fraction of the baseline's mean) that counts, however
    /// significant.
    pub min_change: f64,
}

impl Default for TrendOptions {
    fn default() -> Self {
        TrendOptions {
            baseline: 10,
            recent: 1,
            alpha: 0.01,
            min_change: 0.0,
        }
    }
}

/// A run's part in the trend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Older than the baseline: shown, not tested.
    Earlier,
    /// The run-to-run noise the candidate is judged against.
    Baseline,
    /// The newest run(s), judged.
    Candidate,
}

/// One run of the series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrendPoint {
    pub id: i64,
    pub started_unix: Option<f64>,
    pub value: f64,
    pub role: Role,
    pub server_version: Option<String>,
    pub verdict: Option<String>,
}

/// Mean and spread of some runs' values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub n: usize,
    pub mean: f64,
    /// Sample standard deviation (0 for one value).
    pub sd: f64,
}

impl Spread {
    fn of(values: &[f64]) -> Option<Spread> {
        let n = values.len();
        if n == 0 {
            return None;
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let sd = if n > 1 {
            (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        Some(Spread { n, mean, sd })
    }
}

/// The verdict on the latest change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Fewer than two baseline runs before the candidate: no noise to judge against.
    NotEnoughHistory,
    /// Within the run-to-run noise (or below `min_change`).
    Noise,
    /// Significantly worse.
    Regression,
    /// Significantly better.
    Improvement,
}

impl Status {
    /// `NOT ENOUGH HISTORY`, `NOISE`, `REGRESSION`, `IMPROVEMENT`.
    pub fn label(self) -> &'static str {
        match self {
            Status::NotEnoughHistory => "NOT ENOUGH HISTORY",
            Status::Noise => "NOISE",
            Status::Regression => "REGRESSION",
            Status::Improvement => "IMPROVEMENT",
        }
    }
}

/// The test that judged the candidate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrendTest {
    /// `prediction t-test` (one candidate) or `Welch t-test` (several).
    pub name: String,
    pub t: f64,
    pub df: f64,
    pub p_value: f64,
}

/// A figure's trend and the verdict on its latest change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trend {
    pub metric: String,
    pub config: String,
    /// Whether a lower value is better (latencies, energy, failures).
    pub lower_is_better: bool,
    pub points: Vec<TrendPoint>,
    pub baseline: Option<Spread>,
    pub candidate: Option<Spread>,
    /// `(candidate mean − baseline mean) / |baseline mean|`.
    pub change: Option<f64>,
    pub test: Option<TrendTest>,
    /// The test's p-value is below `alpha`.
    pub significant: bool,
    pub status: Status,
    pub alpha: f64,
    pub min_change: f64,
    /// One sentence.
    pub message: String,
}

/// Whether a lower value of `metric` is the better one: latencies (`*_ms`), energy per token,
/// power and energy, failures and durations; throughputs, goodput, completions and tokens per
/// joule are better higher.
pub fn lower_is_better(metric: &str) -> bool {
    metric.ends_with("_ms")
        || metric.contains("joules_per")
        || metric == "avg_power_w"
        || metric == "energy_j"
        || metric == "failed"
        || metric == "duration"
}

/// A p-value as the tables print it: three decimals, or scientific below 0.001.
pub fn p_text(p: f64) -> String {
    if p < 1e-3 {
        format!("{p:.1e}")
    } else {
        format!("{p:.3}")
    }
}

/// `v` with the decimals a figure of the size of `reference` needs (a trend's column and
/// its sentences read alike: 10.00, 10.20, 12.00).
pub fn scaled_text(v: f64, reference: f64) -> String {
    let a = reference.abs();
    let decimals = if a >= 1000.0 {
        0
    } else if a >= 100.0 {
        1
    } else if a >= 1.0 {
        2
    } else {
        4
    };
    format!("{v:.decimals$}")
}

/// A figure with a few significant digits (a whole number without decimals).
pub fn value_text(v: f64) -> String {
    let a = v.abs();
    if (v == v.trunc() && a < 1e15) || a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

/// Judges the latest change of `series` (oldest first; interrupted runs are left out: their
/// figures cover only part of the schedule).
pub fn analyse(metric: &str, config: &str, series: &[(StoredRun, f64)], o: &TrendOptions) -> Trend {
    let kept: Vec<&(StoredRun, f64)> = series
        .iter()
        .filter(|(r, v)| !r.entry.interrupted && v.is_finite())
        .collect();
    let recent = o.recent.max(1).min(kept.len());
    let split = kept.len() - recent;
    let base_from = split.saturating_sub(o.baseline.max(2));
    let points: Vec<TrendPoint> = kept
        .iter()
        .enumerate()
        .map(|(i, (r, v))| TrendPoint {
            id: r.id,
            started_unix: r.entry.started_unix,
            value: *v,
            role: if i >= split {
                Role::Candidate
            } else if i >= base_from {
                Role::Baseline
            } else {
                Role::Earlier
            },
            server_version: r.entry.server_version.clone(),
            verdict: r.entry.verdict.clone(),
        })
        .collect();
    let values = |role: Role| -> Vec<f64> {
        points
            .iter()
            .filter(|p| p.role == role)
            .map(|p| p.value)
            .collect()
    };
    let (base, cand) = (values(Role::Baseline), values(Role::Candidate));
    let baseline = Spread::of(&base);
    let candidate = Spread::of(&cand);
    let lower = lower_is_better(metric);
    let change = match (baseline, candidate) {
        (Some(b), Some(c)) if b.mean != 0.0 => Some((c.mean - b.mean) / b.mean.abs()),
        (Some(b), Some(c)) if c.mean == b.mean => Some(0.0),
        _ => None,
    };
    let mut trend = Trend {
        metric: metric.to_owned(),
        config: config.to_owned(),
        lower_is_better: lower,
        points,
        baseline,
        candidate,
        change,
        test: None,
        significant: false,
        status: Status::NotEnoughHistory,
        alpha: o.alpha,
        min_change: o.min_change,
        message: String::new(),
    };
    if base.len() < 2 || cand.is_empty() {
        trend.message = format!(
            "NOT ENOUGH HISTORY: {} earlier run(s) of this configuration have {metric}; at least 2 are needed to tell a change from run-to-run noise",
            base.len()
        );
        return trend;
    }
    let tested: Option<(&str, Welch)> = if cand.len() == 1 {
        prediction_t_test(&base, cand[0])
            .ok()
            .map(|w| ("prediction t-test", w))
    } else {
        welch_t_test(&base, &cand).ok().map(|w| ("Welch t-test", w))
    };
    let Some((name, w)) = tested else {
        trend.message = "the values could not be tested".into();
        return trend;
    };
    trend.test = Some(TrendTest {
        name: name.to_owned(),
        t: w.t,
        df: w.df,
        p_value: w.p_value,
    });
    trend.significant = w.p_value < o.alpha;
    let (b, c) = match (baseline, candidate) {
        (Some(b), Some(c)) => (b, c),
        _ => return trend,
    };
    let rel = change.unwrap_or(0.0);
    let big_enough = rel.abs() >= o.min_change;
    let worse = if lower {
        c.mean > b.mean
    } else {
        c.mean < b.mean
    };
    trend.status = match (trend.significant && big_enough, worse) {
        (true, true) => Status::Regression,
        (true, false) => Status::Improvement,
        (false, _) => Status::Noise,
    };
    let moved = format!(
        "{} {:.1} % ({} → {})",
        if c.mean >= b.mean { "rose" } else { "fell" },
        rel.abs() * 100.0,
        scaled_text(b.mean, b.mean),
        scaled_text(c.mean, b.mean)
    );
    trend.message = match trend.status {
        Status::Regression | Status::Improvement => format!(
            "{}: {metric} {moved}, beyond run-to-run noise (p = {} < {})",
            trend.status.label(),
            p_text(w.p_value),
            o.alpha
        ),
        _ if trend.significant => format!(
            "NOISE: {metric} {moved}: significant (p = {}) but below --min-change {:.1} %",
            p_text(w.p_value),
            o.min_change * 100.0
        ),
        _ => format!(
            "NOISE: {metric} {moved}, within run-to-run noise (p = {} ≥ {})",
            p_text(w.p_value),
            o.alpha
        ),
    };
    trend
}

/// The trend as a table and its verdict, for a terminal.
pub fn render_text(t: &Trend, describe: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "trend of {} ({} is better) for configuration {}",
        t.metric,
        if t.lower_is_better { "lower" } else { "higher" },
        t.config
    );
    if !describe.is_empty() {
        let _ = writeln!(out, "  {describe}");
    }
    out.push('\n');
    // One scale for the whole column: the baseline's, else the latest value's.
    let reference = t
        .baseline
        .or(t.candidate)
        .map_or_else(|| t.points.last().map_or(0.0, |p| p.value), |s| s.mean);
    let _ = writeln!(
        out,
        "{:>6}  {:<19}  {:>12}  {:<9}  {:<16}  verdict",
        "id", "started", t.metric, "role", "server version"
    );
    for p in &t.points {
        let _ = writeln!(
            out,
            "{:>6}  {:<19}  {:>12}  {:<9}  {:<16}  {}",
            p.id,
            p.started_unix.map(date_text).unwrap_or_default(),
            scaled_text(p.value, reference),
            match p.role {
                Role::Earlier => "earlier",
                Role::Baseline => "baseline",
                Role::Candidate => "latest",
            },
            p.server_version.as_deref().unwrap_or("-"),
            p.verdict.as_deref().unwrap_or("-"),
        );
    }
    out.push('\n');
    if let Some(b) = t.baseline {
        let cv = if b.mean != 0.0 {
            format!(" ({:.1} %)", 100.0 * b.sd / b.mean.abs())
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "baseline: {} run(s), mean {}, sd {}{cv}",
            b.n,
            scaled_text(b.mean, reference),
            scaled_text(b.sd, reference)
        );
    }
    if let Some(c) = t.candidate {
        let _ = writeln!(
            out,
            "latest: {} run(s), mean {}{}",
            c.n,
            scaled_text(c.mean, reference),
            t.change
                .map(|r| format!(" ({:+.1} %)", r * 100.0))
                .unwrap_or_default()
        );
    }
    if let Some(test) = &t.test {
        let _ = writeln!(
            out,
            "{}: t = {:.2}, df = {:.1}, p = {} (alpha {})",
            test.name,
            test.t,
            test.df,
            p_text(test.p_value),
            t.alpha
        );
    }
    let _ = writeln!(out, "{}", t.message);
    out
}

/// Local `YYYY-MM-DD HH:MM:SS` of seconds since the epoch.
pub fn date_text(unix: f64) -> String {
    use chrono::TimeZone;
    chrono::Local
        .timestamp_opt(unix.floor() as i64, 0)
        .single()
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::entry::{Context, Entry};
    use std::collections::BTreeMap;

    fn run(id: i64, interrupted: bool) -> StoredRun {
        StoredRun {
            id,
            indexed_at: String::new(),
            entry: Entry {
                path: format!("/r/{id}.servebench.json"),
                started_unix: Some(1_700_000_000.0 + id as f64 * 3600.0),
                date: String::new(),
                context: Context::run(),
                config: "c".into(),
                config_text: String::new(),
                model: "m".into(),
                backend: "vllm".into(),
                label: None,
                target_kind: "server".into(),
                target: String::new(),
                server_version: None,
                servebench_version: String::new(),
                simulated: false,
                dataset: "random".into(),
                request_rate: "4.0".into(),
                max_concurrency: None,
                num_prompts: 100,
                input_len: 1,
                output_len: 1,
                verdict: Some("valid".into()),
                verdict_text: None,
                interrupted,
                completed: 100,
                failed: 0,
                duration_s: 1.0,
                host: String::new(),
                command_line: String::new(),
                figures: BTreeMap::new(),
            },
        }
    }

    /// Eight baseline runs with about 2 % run-to-run noise, then the latest.
    fn series(latest: f64) -> Vec<(StoredRun, f64)> {
        let base = [10.0, 10.2, 9.8, 10.1, 9.9, 10.3, 9.7, 10.0];
        base.iter()
            .chain(std::iter::once(&latest))
            .enumerate()
            .map(|(i, v)| (run(i as i64 + 1, false), *v))
            .collect()
    }

    #[test]
    fn a_planted_regression_is_flagged_and_a_small_change_is_noise() {
        let o = TrendOptions::default();
        let t = analyse("mean_tpot_ms", "c", &series(12.0), &o);
        assert_eq!(t.status, Status::Regression, "{}", t.message);
        assert!(t.test.as_ref().unwrap().p_value < 1e-4);
        assert!((t.change.unwrap() - 0.2).abs() < 1e-9);
        let t = analyse("mean_tpot_ms", "c", &series(10.1), &o);
        assert_eq!(t.status, Status::Noise, "{}", t.message);
        // Throughput falling is the regression; rising, an improvement.
        let t = analyse("output_throughput", "c", &series(8.0), &o);
        assert_eq!(t.status, Status::Regression);
        let t = analyse("output_throughput", "c", &series(12.0), &o);
        assert_eq!(t.status, Status::Improvement);
        // Significant but below --min-change: noise.
        let small = TrendOptions {
            min_change: 0.25,
            ..o
        };
        assert_eq!(
            analyse("mean_tpot_ms", "c", &series(12.0), &small).status,
            Status::Noise
        );
    }

    #[test]
    fn roles_and_history() {
        let o = TrendOptions {
            baseline: 3,
            recent: 2,
            ..TrendOptions::default()
        };
        let s = series(12.0);
        let t = analyse("mean_tpot_ms", "c", &s, &o);
        let roles: Vec<Role> = t.points.iter().map(|p| p.role).collect();
        assert_eq!(roles[..4], [Role::Earlier; 4]);
        assert_eq!(roles[4..7], [Role::Baseline; 3]);
        assert_eq!(roles[7..], [Role::Candidate; 2]);
        assert_eq!(t.test.as_ref().unwrap().name, "Welch t-test");
        // Two runs: one baseline value is no noise estimate.
        let t = analyse("mean_tpot_ms", "c", &s[..2], &TrendOptions::default());
        assert_eq!(t.status, Status::NotEnoughHistory);
        // An interrupted run is left out.
        let mut s = series(10.0);
        s.push((run(99, true), 50.0));
        let t = analyse("mean_tpot_ms", "c", &s, &TrendOptions::default());
        assert_eq!(t.status, Status::Noise);
        assert!(render_text(&t, "").contains("NOISE"));
    }

    #[test]
    fn directions() {
        assert!(lower_is_better("p99_ttft_ms"));
        assert!(lower_is_better("joules_per_output_token"));
        assert!(!lower_is_better("output_tokens_per_joule"));
        assert!(!lower_is_better("output_throughput"));
    }
}
