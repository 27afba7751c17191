//! Validity verdicts: is a run (or a sweep point) worth acting on?
//!
//! A figure is only as good as the samples behind it and the window it was measured over.
//! [`judge`] turns the facts of a run ([`RunFacts`], computed from the records by
//! [`run_facts`]) into one of three statuses with the reasons behind it:
//!
//! - **NOT ENOUGH DATA**: a requested percentile rests on fewer than `10 / (1 − p)` samples
//!   (the rule behind the per-percentile "unstable" flag), or the run was shorter than
//!   [`thresholds::MIN_DURATION_S`]. The verdict then says how many more requests, and about
//!   how many more seconds at this run's pace, would make it valid.
//! - **NOT STEADY**: the run measured something other than the steady workload it asked for:
//!   the client could not send at the offered rate (overload), the client itself was the
//!   bottleneck (dispatch lag, CPU), too many requests failed, output throughput drifted
//!   between the first and second half of the steady window, or the server ignored the
//!   requested output length.
//! - **VALID**: none of the above.
//!
//! **Precedence.** Every reason that applies is listed, but the status names the one to fix
//! first: NOT ENOUGH DATA wins over NOT STEADY, because the steadiness tests themselves rest
//! on the same data (the drift between two halves of a short run is mostly noise), and
//! because the remedy for a short run (more requests) must be applied before any steadiness
//! question can be settled.

mod facts;
mod load;

use std::fmt;

use serde::{Deserialize, Serialize};

pub use facts::{run_facts, FactsOptions};
pub use load::{
    load_verdict, LoadVerdict, ServerBacklog, BACKLOG_MIN_RISE_MS, MIN_BACKLOG_REQUESTS,
    OVERLOAD_TOLERANCE, QUEUE_GROWTH_LIMIT,
};

use crate::steady_state::SteadyState;

/// The default limits of every validity rule, in one place.
pub mod thresholds {
    /// Shortest run, seconds, whose figures count: one minute holds 12 batches of MSER-5 on
    /// the per-second series and several cycles of any periodic server behaviour (scheduler
    /// preemption waves, cache evictions).
    pub const MIN_DURATION_S: f64 = 60.0;
    /// Largest share of failed requests: 1 %. Latency statistics cover completed requests
    /// only, so more failures than that bias them towards the requests the server managed.
    pub const MAX_FAILURE_SHARE: f64 = 0.01;
    /// Largest relative change of output throughput between the first and second half of the
    /// steady window, `|a − b| / max(a, b)`: 20 %. Random arrivals alone move a half's
    /// throughput by about `1/√n` (10 % at 100 requests per half), so a tighter limit would
    /// flag honest open-loop runs.
    pub const MAX_THROUGHPUT_DRIFT: f64 = 0.20;
    /// Largest p99 dispatch lag (how late the client's own timer released requests), ms; the
    /// same limit the client-health block uses to call a run client-limited.
    pub const MAX_DISPATCH_LAG_P99_MS: f64 = 10.0;
    /// Largest client CPU use as a share of the cores available to it: 90 %, the
    /// client-health block's limit.
    pub const MAX_CLIENT_CPU_SHARE: f64 = 0.90;
    /// Largest share of requests whose server-counted output length differs from the fixed
    /// length they asked for: 1 %.
    pub const MAX_LENGTH_MISS_SHARE: f64 = 0.01;
    /// Shortest steady window, seconds, on which throughput drift is judged at all.
    pub const MIN_DRIFT_WINDOW_S: f64 = 10.0;
}

/// The limits [`judge`] applies; [`Default`] takes them from [`thresholds`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// See [`thresholds::MIN_DURATION_S`].
    pub min_duration_s: f64,
    /// See [`thresholds::MAX_FAILURE_SHARE`].
    pub max_failure_share: f64,
    /// See [`thresholds::MAX_THROUGHPUT_DRIFT`].
    pub max_throughput_drift: f64,
    /// See [`thresholds::MAX_DISPATCH_LAG_P99_MS`].
    pub max_dispatch_lag_p99_ms: f64,
    /// See [`thresholds::MAX_CLIENT_CPU_SHARE`].
    pub max_client_cpu_share: f64,
    /// See [`thresholds::MAX_LENGTH_MISS_SHARE`].
    pub max_length_miss_share: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            min_duration_s: thresholds::MIN_DURATION_S,
            max_failure_share: thresholds::MAX_FAILURE_SHARE,
            max_throughput_drift: thresholds::MAX_THROUGHPUT_DRIFT,
            max_dispatch_lag_p99_ms: thresholds::MAX_DISPATCH_LAG_P99_MS,
            max_client_cpu_share: thresholds::MAX_CLIENT_CPU_SHARE,
            max_length_miss_share: thresholds::MAX_LENGTH_MISS_SHARE,
        }
    }
}

/// The three outcomes, in precedence order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictStatus {
    /// Enough samples over a steady window.
    Valid,
    /// Too few samples for a requested percentile, or too short a run.
    NotEnoughData,
    /// The run did not measure the steady workload it asked for.
    NotSteady,
}

impl VerdictStatus {
    /// The serialized name (`valid`, `not_enough_data`, `not_steady`).
    pub fn as_str(self) -> &'static str {
        match self {
            VerdictStatus::Valid => "valid",
            VerdictStatus::NotEnoughData => "not_enough_data",
            VerdictStatus::NotSteady => "not_steady",
        }
    }

    /// The terminal label (`VALID`, `NOT ENOUGH DATA`, `NOT STEADY`).
    pub fn label(self) -> &'static str {
        match self {
            VerdictStatus::Valid => "VALID",
            VerdictStatus::NotEnoughData => "NOT ENOUGH DATA",
            VerdictStatus::NotSteady => "NOT STEADY",
        }
    }
}

impl fmt::Display for VerdictStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// One rule a run broke, with the numbers that broke it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reason {
    /// Nothing was recorded.
    NoRequests,
    /// A requested percentile rests on fewer samples than `10 / (1 − p)`.
    TooFewSamples {
        /// Metric name as in [`crate::RunSummary::METRICS`] (`ttft`, `tpot`, `itl`, ...).
        metric: String,
        /// The percentile, in %.
        p: f64,
        /// Samples behind it.
        samples: u64,
        /// Samples the rule asks for.
        required: u64,
    },
    /// The run was shorter than the minimum duration.
    TooShort {
        duration_s: f64,
        min_duration_s: f64,
    },
    /// The client could not send at the scheduled rate, or its queue kept growing.
    Overloaded {
        /// The rate the achieved one is held to (the schedule's own), req/s.
        reference_rate: Option<f64>,
        /// Requests actually sent per second.
        achieved_rate: Option<f64>,
        /// Longest client queue time, ms.
        queue_max_ms: Option<f64>,
        /// Queue seconds gained per second of schedule.
        queue_growth: Option<f64>,
        /// The server's backlog when it fell behind the arrivals (the client kept up).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        server: Option<load::ServerBacklog>,
    },
    /// The client's timer released requests late.
    DispatchLag { p99_ms: f64, max_p99_ms: f64 },
    /// The client used (nearly) all the CPU it had.
    ClientCpu { share: f64, max_share: f64 },
    /// Too many requests failed.
    Failures {
        failed: u64,
        total: u64,
        max_share: f64,
    },
    /// Output throughput changed between the halves of the steady window.
    ThroughputDrift {
        first_half_tok_s: f64,
        second_half_tok_s: f64,
        /// `|a − b| / max(a, b)`.
        drift: f64,
        max_drift: f64,
    },
    /// Requests came back with another output length than the fixed one they asked for: the
    /// server ignored `ignore_eos` or `max_tokens`, so the workload was not the one asked for.
    OutputLengthMiss {
        missed: u64,
        checked: u64,
        requested_tokens: u64,
        received_tokens: u64,
        max_share: f64,
    },
}

impl Reason {
    /// The status this reason leads to on its own.
    pub fn status(&self) -> VerdictStatus {
        match self {
            Reason::NoRequests | Reason::TooFewSamples { .. } | Reason::TooShort { .. } => {
                VerdictStatus::NotEnoughData
            }
            Reason::Overloaded { .. }
            | Reason::DispatchLag { .. }
            | Reason::ClientCpu { .. }
            | Reason::Failures { .. }
            | Reason::ThroughputDrift { .. }
            | Reason::OutputLengthMiss { .. } => VerdictStatus::NotSteady,
        }
    }
}

/// How a metric is named in a sentence.
fn metric_label(metric: &str) -> String {
    match metric {
        "ttft" => "TTFT".into(),
        "tpot" => "TPOT".into(),
        "itl" => "ITL".into(),
        "e2el" => "E2EL".into(),
        "user_ttft" => "user TTFT".into(),
        "user_e2el" => "user E2EL".into(),
        "queue" => "queue time".into(),
        "dispatch_lag" => "dispatch lag".into(),
        other => other.into(),
    }
}

fn pct(share: f64) -> String {
    format!("{:.1} %", share * 100.0)
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NoRequests => f.write_str("no requests were recorded"),
            Reason::TooFewSamples {
                metric,
                p,
                samples,
                required,
            } => write!(
                f,
                "p{p} {} rests on {samples} samples, needs {required}",
                metric_label(metric)
            ),
            Reason::TooShort {
                duration_s,
                min_duration_s,
            } => write!(
                f,
                "the run lasted {duration_s:.1} s, needs at least {min_duration_s:.0} s"
            ),
            Reason::Overloaded {
                reference_rate,
                achieved_rate,
                queue_max_ms,
                queue_growth,
                server,
            } => {
                f.write_str("overloaded: ")?;
                let short = matches!((achieved_rate, reference_rate),
                    (Some(a), Some(r)) if *a < r * (1.0 - load::OVERLOAD_TOLERANCE));
                let growing = queue_growth.is_some_and(|g| g > load::QUEUE_GROWTH_LIMIT);
                let server_behind = server.filter(|b| b.behind);
                if short || growing || server_behind.is_none() {
                    match (achieved_rate, reference_rate) {
                        (Some(a), Some(r)) => write!(f, "sent {a:.2} req/s of {r:.2} scheduled")?,
                        _ => f.write_str("the client fell behind its schedule")?,
                    }
                    if let Some(q) = queue_max_ms {
                        write!(f, ", requests waited up to {:.1} s in the client", q / 1e3)?;
                    }
                    if let Some(g) = queue_growth {
                        write!(f, " (queue grew {g:.2} s per s)")?;
                    }
                    if server_behind.is_some() {
                        f.write_str("; ")?;
                    }
                }
                if let Some(b) = server_behind {
                    write!(f, "{b}")?;
                }
                Ok(())
            }
            Reason::DispatchLag { p99_ms, max_p99_ms } => write!(
                f,
                "dispatch lag p99 {p99_ms:.1} ms exceeds {max_p99_ms:.0} ms: requests left late, so the server was not driven as planned"
            ),
            Reason::ClientCpu { share, max_share } => write!(
                f,
                "client CPU at {} of its cores (limit {}): the client limited the run",
                pct(*share),
                pct(*max_share)
            ),
            Reason::Failures {
                failed,
                total,
                max_share,
            } => write!(
                f,
                "{failed} of {total} requests failed ({}, limit {})",
                pct(*failed as f64 / (*total).max(1) as f64),
                pct(*max_share)
            ),
            Reason::ThroughputDrift {
                first_half_tok_s,
                second_half_tok_s,
                drift,
                max_drift,
            } => write!(
                f,
                "output throughput drifted from {first_half_tok_s:.0} tok/s in the first half to \
                 {second_half_tok_s:.0} in the second ({}, limit {})",
                pct(*drift),
                pct(*max_drift)
            ),
            Reason::OutputLengthMiss {
                missed,
                checked,
                requested_tokens,
                received_tokens,
                max_share,
            } => write!(
                f,
                "{missed} of {checked} requests came back with another output length than \
                 requested ({received_tokens} tokens received of {requested_tokens} requested, \
                 limit {} of requests): the server ignored ignore_eos/max_tokens",
                pct(*max_share)
            ),
        }
    }
}

/// What it would take to turn NOT ENOUGH DATA into enough.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Needed {
    /// More requests, at this run's mix of failures and token counts.
    pub more_requests: u64,
    /// More seconds of run at this run's pace (requests recorded per second); `None` when the
    /// run has no duration to take a pace from.
    pub more_seconds: Option<f64>,
}

/// The verdict on one run or one sweep point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The status, by the precedence in the module documentation.
    pub status: VerdictStatus,
    /// Every rule the run broke, NOT ENOUGH DATA reasons first.
    pub reasons: Vec<Reason>,
    /// Present when the status is NOT ENOUGH DATA and the shortfall can be quantified.
    pub needed: Option<Needed>,
}

impl Verdict {
    /// `true` for VALID.
    pub fn is_valid(&self) -> bool {
        self.status == VerdictStatus::Valid
    }
}

impl fmt::Display for Verdict {
    /// One line for a terminal: `NOT ENOUGH DATA: p99 TTFT rests on 20 samples, needs 1000
    /// (980 more requests, ≈ 980 s)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.status.label())?;
        for (i, r) in self.reasons.iter().enumerate() {
            f.write_str(if i == 0 { ": " } else { "; " })?;
            write!(f, "{r}")?;
        }
        if let Some(n) = &self.needed {
            let plural = if n.more_requests == 1 { "" } else { "s" };
            write!(f, " ({} more request{plural}", n.more_requests)?;
            if let Some(s) = n.more_seconds {
                write!(f, ", ≈ {:.0} s", s.ceil())?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// Samples behind one requested percentile of one metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PercentileSamples {
    /// Metric name as in [`crate::RunSummary::METRICS`].
    pub metric: String,
    /// The percentile, in %.
    pub p: f64,
    /// Samples behind it: per completed request for TTFT and E2EL, per completed request
    /// with more than one output token for TPOT, per inter-token gap for ITL.
    pub samples: u64,
}

/// Output lengths of the requests that fixed theirs (`ignore_eos` with `max_tokens`), as the
/// server counted them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputLengthFacts {
    /// Completed requests checked.
    pub checked: u64,
    /// Those whose count differs from the requested length.
    pub missed: u64,
    /// Σ requested lengths of the checked requests.
    pub requested_tokens: u64,
    /// Σ received lengths of the checked requests.
    pub received_tokens: u64,
}

/// Output throughput in the two halves of the steady window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ThroughputHalves {
    /// Start of the steady window, seconds from the series origin.
    pub window_start_s: f64,
    /// Length of the steady window, seconds.
    pub window_s: f64,
    /// Output tokens per second in the first half.
    pub first_tok_s: f64,
    /// Output tokens per second in the second half.
    pub second_tok_s: f64,
}

impl ThroughputHalves {
    /// `|a − b| / max(a, b)`; 0 when both are 0.
    pub fn drift(&self) -> f64 {
        let hi = self.first_tok_s.max(self.second_tok_s);
        if hi > 0.0 {
            (self.first_tok_s - self.second_tok_s).abs() / hi
        } else {
            0.0
        }
    }
}

/// Everything [`judge`] looks at, as plain data (so a caller can also build it by hand).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunFacts {
    /// Requests recorded, completed or failed.
    pub requests: u64,
    /// Requests that failed.
    pub failed: u64,
    /// Run duration, seconds.
    pub duration_s: f64,
    /// The requested percentiles with their sample counts.
    pub percentiles: Vec<PercentileSamples>,
    /// p99 dispatch lag, ms; `None` when no request was released on its own timer.
    pub dispatch_lag_p99_ms: Option<f64>,
    /// Client CPU time / (wall time × cores available); `None` when not measured (a
    /// virtual-time run has no client CPU to speak of).
    pub client_cpu_share: Option<f64>,
    /// Offered against achieved rate and the client queue.
    pub load: Option<LoadVerdict>,
    /// Output throughput in the halves of the steady window; `None` when the window is
    /// shorter than [`thresholds::MIN_DRIFT_WINDOW_S`].
    pub halves: Option<ThroughputHalves>,
    /// Output lengths of requests that fixed theirs; `None` when the run did not fix them.
    pub output_lengths: Option<OutputLengthFacts>,
    /// The warm-up transient that was excluded (or, with `--steady-state off`, that should
    /// have been).
    pub steady_state: Option<SteadyState>,
}

/// What a result file keeps of a run's judgement: the verdict, the offered against achieved
/// load, and the warm-up transient found (excluded in `auto` mode, only reported in `off`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunValidity {
    /// VALID / NOT ENOUGH DATA / NOT STEADY with the reasons.
    pub verdict: Verdict,
    /// Offered, scheduled and achieved rate and the client queue; `None` without requests.
    #[serde(default)]
    pub load: Option<LoadVerdict>,
    /// The warm-up transient; `None` when the run had no time series.
    #[serde(default)]
    pub steady_state: Option<SteadyState>,
}

impl RunValidity {
    /// Judge a run's facts with the default thresholds and keep what a reader needs.
    pub fn from_facts(facts: &RunFacts) -> RunValidity {
        RunValidity {
            verdict: judge(facts, &Thresholds::default()),
            load: facts.load,
            steady_state: facts.steady_state,
        }
    }

    /// Whether the client fell behind the offered rate.
    pub fn overloaded(&self) -> bool {
        self.load.is_some_and(|l| l.overloaded)
    }
}

/// Share of a run's duration that a mean latency may take before the run's latencies are
/// called absurd: a user who waits a tenth of the whole run for a first token is not being
/// served at the load asked for, whatever the percentiles say.
pub const ABSURD_LATENCY_SHARE: f64 = 0.10;

/// A warning for a run whose latencies are absurd relative to its length (mean user TTFT or
/// mean client queue time at least [`ABSURD_LATENCY_SHARE`] of the duration) or that was
/// overloaded: its figures describe a queue, not the server at the offered load. `None` when
/// neither holds.
pub fn absurd_latency_warning(
    summary: &crate::RunSummary,
    validity: &RunValidity,
) -> Option<String> {
    let duration_s = summary.duration_s;
    let mut why = Vec::new();
    if duration_s > 0.0 {
        let limit_ms = ABSURD_LATENCY_SHARE * duration_s * 1e3;
        if let Some(m) = summary.user_ttft.mean.or(summary.ttft.mean) {
            if m >= limit_ms {
                why.push(format!(
                    "mean TTFT from the intended send time is {:.1} s, {:.0} % of the {:.0} s run",
                    m / 1e3,
                    100.0 * m / (duration_s * 1e3),
                    duration_s
                ));
            }
        }
        if let Some(q) = summary.queue.mean.filter(|q| *q >= limit_ms) {
            why.push(format!(
                "requests waited {:.1} s on average in the client queue",
                q / 1e3
            ));
        }
    }
    if let Some(l) = validity.load.filter(|l| l.overloaded) {
        match (
            l.server.filter(|b| b.behind),
            l.offered_rate,
            l.achieved_rate,
        ) {
            (Some(b), _, _) => why.push(format!("overloaded: {b}")),
            (None, Some(o), Some(a)) => why.push(format!(
                "overloaded: offered {o:.2} req/s, achieved {a:.2} req/s"
            )),
            _ => why.push("overloaded: the client fell behind its schedule".to_owned()),
        }
    }
    let server_behind = validity
        .load
        .is_some_and(|l| l.server.is_some_and(|b| b.behind));
    let advice = if server_behind {
        "Lower the request rate or give the server more capacity, or sweep the rate to find it."
    } else {
        "Lower the request rate or raise --max-concurrency, or sweep the rate to find capacity."
    };
    (!why.is_empty()).then(|| {
        format!(
            "WARNING: these latencies are not the server's at the offered load: {}. {advice}",
            why.join("; ")
        )
    })
}

pub use crate::stats::required_samples;

/// More requests needed to lift `samples` to `required`, if each request yields
/// `samples / requests` samples as it did in this run; `None` when the run yielded no sample
/// (more of the same would not help).
pub fn more_requests_for(samples: u64, requests: u64, required: u64) -> Option<u64> {
    if samples >= required {
        return Some(0);
    }
    if samples == 0 || requests == 0 {
        return None;
    }
    // ceil((required − samples) · requests / samples), exactly.
    let short = u128::from(required - samples) * u128::from(requests);
    let more = short.div_ceil(u128::from(samples));
    Some(u64::try_from(more).unwrap_or(u64::MAX))
}

/// Apply the rules to the facts.
pub fn judge(facts: &RunFacts, t: &Thresholds) -> Verdict {
    let (mut reasons, needed) = data_shortfall(facts, t);
    reasons.extend(steadiness(facts, t));
    let status = if reasons
        .iter()
        .any(|r| r.status() == VerdictStatus::NotEnoughData)
    {
        VerdictStatus::NotEnoughData
    } else if reasons.is_empty() {
        VerdictStatus::Valid
    } else {
        VerdictStatus::NotSteady
    };
    Verdict {
        status,
        reasons,
        needed,
    }
}

/// The NOT ENOUGH DATA rules, and the largest shortfall among them.
fn data_shortfall(facts: &RunFacts, t: &Thresholds) -> (Vec<Reason>, Option<Needed>) {
    if facts.requests == 0 {
        // Nothing to count samples of: one reason says it all.
        return (vec![Reason::NoRequests], None);
    }
    let mut reasons = Vec::new();
    let mut more_requests = 0u64;
    let mut more_seconds: Option<f64> = None;
    let pace = (facts.duration_s > 0.0).then(|| facts.requests as f64 / facts.duration_s);

    for ps in &facts.percentiles {
        let Some(required) = required_samples(ps.p) else {
            continue;
        };
        if ps.samples >= required {
            continue;
        }
        reasons.push(Reason::TooFewSamples {
            metric: ps.metric.clone(),
            p: ps.p,
            samples: ps.samples,
            required,
        });
        if let Some(more) = more_requests_for(ps.samples, facts.requests, required) {
            more_requests = more_requests.max(more);
        }
    }
    if facts.duration_s < t.min_duration_s {
        reasons.push(Reason::TooShort {
            duration_s: facts.duration_s,
            min_duration_s: t.min_duration_s,
        });
        let short_s = t.min_duration_s - facts.duration_s;
        more_seconds = Some(short_s);
        if let Some(pace) = pace {
            more_requests = more_requests.max((short_s * pace).ceil() as u64);
        }
    }

    // A run whose every request failed needs a working server, not more of the same.
    let needed = (more_requests > 0 && facts.failed < facts.requests).then(|| {
        let by_requests = pace.map(|pace| more_requests as f64 / pace);
        Needed {
            more_requests,
            more_seconds: match (by_requests, more_seconds) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            },
        }
    });
    (reasons, needed)
}

/// The NOT STEADY rules.
fn steadiness(facts: &RunFacts, t: &Thresholds) -> Vec<Reason> {
    let mut reasons = Vec::new();
    if let Some(load) = facts.load.filter(|l| l.overloaded) {
        reasons.push(Reason::Overloaded {
            reference_rate: load.reference_rate(),
            achieved_rate: load.achieved_rate,
            queue_max_ms: load.queue_max_ms,
            queue_growth: load.queue_growth,
            server: load.server.filter(|b| b.behind),
        });
    }
    if let Some(lag) = facts
        .dispatch_lag_p99_ms
        .filter(|&l| l > t.max_dispatch_lag_p99_ms)
    {
        reasons.push(Reason::DispatchLag {
            p99_ms: lag,
            max_p99_ms: t.max_dispatch_lag_p99_ms,
        });
    }
    if let Some(cpu) = facts
        .client_cpu_share
        .filter(|&c| c > t.max_client_cpu_share)
    {
        reasons.push(Reason::ClientCpu {
            share: cpu,
            max_share: t.max_client_cpu_share,
        });
    }
    if facts.requests > 0 && facts.failed as f64 > t.max_failure_share * facts.requests as f64 {
        reasons.push(Reason::Failures {
            failed: facts.failed,
            total: facts.requests,
            max_share: t.max_failure_share,
        });
    }
    if let Some(h) = facts.halves.filter(|h| h.drift() > t.max_throughput_drift) {
        reasons.push(Reason::ThroughputDrift {
            first_half_tok_s: h.first_tok_s,
            second_half_tok_s: h.second_tok_s,
            drift: h.drift(),
            max_drift: t.max_throughput_drift,
        });
    }
    if let Some(len) = facts
        .output_lengths
        .filter(|l| l.checked > 0 && l.missed as f64 > t.max_length_miss_share * l.checked as f64)
    {
        reasons.push(Reason::OutputLengthMiss {
            missed: len.missed,
            checked: len.checked,
            requested_tokens: len.requested_tokens,
            received_tokens: len.received_tokens,
            max_share: t.max_length_miss_share,
        });
    }
    reasons
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::stats::is_unstable;

    /// A run that passes every rule: 2000 requests over 100 s, p99 of TTFT and ITL.
    fn good() -> RunFacts {
        RunFacts {
            requests: 2000,
            failed: 0,
            duration_s: 100.0,
            percentiles: vec![
                PercentileSamples {
                    metric: "ttft".into(),
                    p: 99.0,
                    samples: 2000,
                },
                PercentileSamples {
                    metric: "itl".into(),
                    p: 99.0,
                    samples: 250_000,
                },
            ],
            dispatch_lag_p99_ms: Some(0.4),
            client_cpu_share: Some(0.2),
            load: None,
            halves: Some(ThroughputHalves {
                window_start_s: 5.0,
                window_s: 90.0,
                first_tok_s: 1000.0,
                second_tok_s: 1040.0,
            }),
            output_lengths: Some(OutputLengthFacts {
                checked: 2000,
                missed: 0,
                requested_tokens: 256_000,
                received_tokens: 256_000,
            }),
            steady_state: None,
        }
    }

    /// Every request failed in a short run: more requests of the same would not help, so
    /// the verdict asks for none.
    #[test]
    fn an_all_failed_run_asks_for_no_more_requests() {
        let mut f = good();
        f.failed = f.requests;
        f.duration_s = 5.0;
        for p in &mut f.percentiles {
            p.samples = 0;
        }
        let v = judge(&f, &Thresholds::default());
        assert_eq!(v.status, VerdictStatus::NotEnoughData);
        assert_eq!(v.needed, None, "{v}");
        assert!(!v.to_string().contains("more request"), "{v}");
    }

    #[test]
    fn a_good_run_is_valid() {
        let v = judge(&good(), &Thresholds::default());
        assert!(v.is_valid(), "{v}");
        assert_eq!(v.to_string(), "VALID");
        assert_eq!(v.needed, None);
    }

    #[test]
    fn twenty_requests_at_p99_is_not_enough_data_with_the_number_needed() {
        // 20 requests at 1 req/s: TTFT p99 on 20 samples needs 1000 → 980 more requests.
        let facts = RunFacts {
            requests: 20,
            duration_s: 20.0,
            percentiles: vec![PercentileSamples {
                metric: "ttft".into(),
                p: 99.0,
                samples: 20,
            }],
            ..good()
        };
        let v = judge(&facts, &Thresholds::default());
        assert_eq!(v.status, VerdictStatus::NotEnoughData);
        assert_eq!(
            v.needed,
            Some(Needed {
                more_requests: 980,
                more_seconds: Some(980.0)
            })
        );
        assert_eq!(
            v.to_string(),
            "NOT ENOUGH DATA: p99 TTFT rests on 20 samples, needs 1000; the run lasted 20.0 s, \
             needs at least 60 s (980 more requests, ≈ 980 s)"
        );
    }

    #[test]
    fn the_shortfall_is_the_largest_of_all_rules() {
        // TPOT comes from only half the requests (the others had one token): 500 samples of
        // 1000 requests → 1000 more requests; duration alone would ask for 10 s ≈ 100.
        let facts = RunFacts {
            requests: 1000,
            duration_s: 50.0,
            percentiles: vec![
                PercentileSamples {
                    metric: "ttft".into(),
                    p: 99.0,
                    samples: 1000,
                },
                PercentileSamples {
                    metric: "tpot".into(),
                    p: 99.0,
                    samples: 500,
                },
            ],
            ..good()
        };
        let v = judge(&facts, &Thresholds::default());
        let n = v.needed.unwrap();
        assert_eq!(n.more_requests, 1000);
        assert_eq!(n.more_seconds, Some(50.0));
        // Only the duration short: 10 s at 20 req/s.
        let facts = RunFacts {
            requests: 1000,
            duration_s: 50.0,
            ..good()
        };
        let n = judge(&facts, &Thresholds::default()).needed.unwrap();
        assert_eq!((n.more_requests, n.more_seconds), (200, Some(10.0)));
    }

    #[test]
    fn a_metric_without_samples_is_reported_without_a_number_needed() {
        let facts = RunFacts {
            percentiles: vec![PercentileSamples {
                metric: "tpot".into(),
                p: 99.0,
                samples: 0,
            }],
            ..good()
        };
        let v = judge(&facts, &Thresholds::default());
        assert_eq!(v.status, VerdictStatus::NotEnoughData);
        assert_eq!(v.needed, None);
        assert_eq!(
            v.to_string(),
            "NOT ENOUGH DATA: p99 TPOT rests on 0 samples, needs 1000"
        );
    }

    #[test]
    fn p100_takes_no_part_and_no_requests_is_not_enough_data() {
        let facts = RunFacts {
            percentiles: vec![PercentileSamples {
                metric: "e2el".into(),
                p: 100.0,
                samples: 3,
            }],
            ..good()
        };
        assert!(judge(&facts, &Thresholds::default()).is_valid());
        let empty = RunFacts {
            requests: 0,
            duration_s: 0.0,
            ..good()
        };
        let v = judge(&empty, &Thresholds::default());
        assert_eq!(v.status, VerdictStatus::NotEnoughData);
        assert_eq!(v.reasons, vec![Reason::NoRequests]);
        assert_eq!(v.needed, None);
    }

    #[test]
    fn every_steadiness_rule_fires_on_its_own() {
        let t = Thresholds::default();
        let cases: Vec<(RunFacts, &str)> = vec![
            (
                RunFacts {
                    dispatch_lag_p99_ms: Some(25.0),
                    ..good()
                },
                "dispatch lag p99 25.0 ms exceeds 10 ms",
            ),
            (
                RunFacts {
                    client_cpu_share: Some(0.97),
                    ..good()
                },
                "client CPU at 97.0 %",
            ),
            (
                RunFacts {
                    failed: 30,
                    ..good()
                },
                "30 of 2000 requests failed (1.5 %, limit 1.0 %)",
            ),
            (
                RunFacts {
                    halves: Some(ThroughputHalves {
                        window_start_s: 0.0,
                        window_s: 90.0,
                        first_tok_s: 1000.0,
                        second_tok_s: 700.0,
                    }),
                    ..good()
                },
                "drifted from 1000 tok/s in the first half to 700 in the second (30.0 %",
            ),
            (
                RunFacts {
                    output_lengths: Some(OutputLengthFacts {
                        checked: 2000,
                        missed: 300,
                        requested_tokens: 256_000,
                        received_tokens: 200_000,
                    }),
                    ..good()
                },
                "300 of 2000 requests came back with another output length",
            ),
            (
                RunFacts {
                    load: Some(LoadVerdict {
                        offered_rate: Some(16.0),
                        scheduled_rate: Some(16.0),
                        achieved_rate: Some(0.94),
                        queue_p99_ms: Some(150_000.0),
                        queue_max_ms: Some(153_000.0),
                        queue_growth: Some(15.0),
                        overloaded: true,
                        server: None,
                    }),
                    ..good()
                },
                "overloaded: sent 0.94 req/s of 16.00 scheduled, requests waited up to 153.0 s",
            ),
        ];
        for (facts, text) in cases {
            let v = judge(&facts, &t);
            assert_eq!(v.status, VerdictStatus::NotSteady, "{v}");
            assert_eq!(v.reasons.len(), 1, "{v}");
            assert_eq!(v.needed, None);
            let line = v.to_string();
            assert!(line.starts_with("NOT STEADY: "), "{line}");
            assert!(line.contains(text), "{line} lacks {text}");
        }
        // At the limits, nothing fires (limits are inclusive).
        let edge = RunFacts {
            failed: 20,
            dispatch_lag_p99_ms: Some(10.0),
            client_cpu_share: Some(0.9),
            ..good()
        };
        assert!(judge(&edge, &t).is_valid());
    }

    #[test]
    fn not_enough_data_wins_and_every_reason_is_kept() {
        let facts = RunFacts {
            requests: 20,
            failed: 5,
            duration_s: 20.0,
            dispatch_lag_p99_ms: Some(50.0),
            ..good()
        };
        let v = judge(&facts, &Thresholds::default());
        assert_eq!(v.status, VerdictStatus::NotEnoughData);
        let kinds: Vec<VerdictStatus> = v.reasons.iter().map(Reason::status).collect();
        assert!(kinds.contains(&VerdictStatus::NotSteady));
        // Data reasons come first.
        assert_eq!(kinds[0], VerdictStatus::NotEnoughData);
        assert!(v.needed.is_some());
    }

    #[test]
    fn verdicts_serialize_with_stable_snake_case_names() {
        let facts = RunFacts {
            requests: 20,
            duration_s: 20.0,
            percentiles: vec![PercentileSamples {
                metric: "ttft".into(),
                p: 99.0,
                samples: 20,
            }],
            ..good()
        };
        let v = judge(&facts, &Thresholds::default());
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["status"], "not_enough_data");
        assert_eq!(json["reasons"][0]["kind"], "too_few_samples");
        assert_eq!(json["reasons"][0]["metric"], "ttft");
        assert_eq!(json["reasons"][0]["required"], 1000);
        assert_eq!(json["reasons"][1]["kind"], "too_short");
        assert_eq!(json["needed"]["more_requests"], 980);
        // The example in docs/verdicts.md.
        assert_eq!(
            json,
            serde_json::json!({"status": "not_enough_data",
             "reasons": [{"kind": "too_few_samples", "metric": "ttft", "p": 99.0, "samples": 20, "required": 1000},
                         {"kind": "too_short", "duration_s": 20.0, "min_duration_s": 60.0}],
             "needed": {"more_requests": 980, "more_seconds": 980.0}})
        );
        let back: Verdict = serde_json::from_value(json).unwrap();
        assert_eq!(back, v);
        let valid = serde_json::to_value(judge(&good(), &Thresholds::default())).unwrap();
        assert_eq!(
            valid,
            serde_json::json!({"status": "valid", "reasons": [], "needed": null})
        );
    }

    #[test]
    fn required_samples_follows_the_ten_over_one_minus_p_rule() {
        assert_eq!(required_samples(99.0), Some(1000));
        assert_eq!(required_samples(99.9), Some(10_000));
        assert_eq!(required_samples(99.99), Some(100_000));
        assert_eq!(required_samples(50.0), Some(20));
        assert_eq!(required_samples(90.0), Some(100));
        assert_eq!(required_samples(95.0), Some(200));
        assert_eq!(required_samples(75.0), Some(40));
        assert_eq!(required_samples(0.0), Some(10));
        // Not a whole number: 10 / (1 − 0.97) = 333.3…
        assert_eq!(required_samples(97.0), Some(334));
        assert_eq!(required_samples(100.0), None);
        // One sample fewer is always flagged by the summary's rule.
        for p in [
            0.0, 25.0, 50.0, 75.0, 90.0, 95.0, 97.0, 99.0, 99.5, 99.9, 99.99,
        ] {
            let n = required_samples(p).unwrap() as usize;
            assert!(is_unstable(n - 1, p), "p{p}");
        }
    }

    #[test]
    fn more_requests_for_edges() {
        assert_eq!(more_requests_for(20, 20, 1000), Some(980));
        assert_eq!(more_requests_for(1000, 20, 1000), Some(0));
        assert_eq!(more_requests_for(0, 20, 1000), None);
        // 4000 ITL gaps from 20 requests: 200 per request, so 10 000 needs 30 more.
        assert_eq!(more_requests_for(4000, 20, 10_000), Some(30));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn more_requests_is_the_fewest_that_reach_the_required_count(
            samples in 1u64..2_000_000,
            requests in 1u64..200_000,
            required in 1u64..2_000_000,
        ) {
            let more = more_requests_for(samples, requests, required).unwrap();
            // At this run's yield of samples per request, `requests + more` reach `required`
            // and one fewer does not.
            let reach = |extra: u64| {
                u128::from(samples) * u128::from(requests + extra)
                    >= u128::from(required) * u128::from(requests)
            };
            prop_assert!(reach(more));
            if more > 0 {
                prop_assert!(!reach(more - 1));
            } else {
                prop_assert!(samples >= required);
            }
        }

        #[test]
        fn required_samples_is_ten_over_one_minus_p(p in 0.0f64..99.99) {
            let n = required_samples(p).unwrap() as f64;
            let exact = 10.0 / (1.0 - p / 100.0);
            prop_assert!(n >= exact * (1.0 - 1e-9), "p{}: {} < {}", p, n, exact);
            prop_assert!(n - 1.0 < exact, "p{}: {} not the fewest for {}", p, n, exact);
        }

        #[test]
        fn adding_samples_never_hurts_the_verdict(
            samples in 0u64..3000,
            extra in 0u64..3000,
        ) {
            let facts = |n: u64| RunFacts {
                requests: 3000,
                failed: 0,
                duration_s: 300.0,
                percentiles: vec![PercentileSamples { metric: "ttft".into(), p: 99.0, samples: n }],
                dispatch_lag_p99_ms: None,
                client_cpu_share: None,
                load: None,
                halves: None,
                output_lengths: None,
                steady_state: None,
            };
            let t = Thresholds::default();
            let (a, b) = (judge(&facts(samples), &t), judge(&facts(samples + extra), &t));
            prop_assert!(!a.is_valid() || b.is_valid());
            prop_assert_eq!(a.is_valid(), samples >= 1000);
            // No number at all (no sample yet) is the largest shortfall.
            let more = |v: &Verdict| match v.needed {
                _ if v.is_valid() => 0,
                Some(n) => n.more_requests,
                None => u64::MAX,
            };
            prop_assert!(more(&b) <= more(&a));
        }
    }
}
