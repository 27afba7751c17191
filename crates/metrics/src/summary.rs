//! `RequestRecord`s → `RunSummary`, following docs/metrics.md.
//!
//! Latency statistics use completed requests only (a failed request never enters them);
//! throughputs divide completed requests' tokens by the run duration. Peak concurrency and the
//! in-flight series count every request that was on a connection, failed or not, because it
//! occupied the server all the same.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::record::{RequestRecord, TokenEvent};
use crate::stats::{self, PercentileStat};

use crate::units::{ms_to_ns, ns_f64_to_ms, ns_to_ms, ns_to_s, NS_PER_S};

/// A latency metric an SLO can constrain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SloMetric {
    /// Time to first token.
    Ttft,
    /// Time per output token (vLLM: 0 for a one-token request).
    Tpot,
    /// End-to-end latency.
    E2el,
    /// Every inter-token gap of the request (servebench's own).
    Itl,
}

impl SloMetric {
    /// The name used on the command line and in files.
    pub fn as_str(self) -> &'static str {
        match self {
            SloMetric::Ttft => "ttft",
            SloMetric::Tpot => "tpot",
            SloMetric::E2el => "e2el",
            SloMetric::Itl => "itl",
        }
    }

    /// The name in prose (`TTFT`).
    pub fn label(self) -> &'static str {
        match self {
            SloMetric::Ttft => "TTFT",
            SloMetric::Tpot => "TPOT",
            SloMetric::E2el => "E2EL",
            SloMetric::Itl => "ITL",
        }
    }
}

impl std::str::FromStr for SloMetric {
    type Err = String;

    /// `ttft`, `tpot`, `e2el` or `itl`, in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "ttft" => Ok(SloMetric::Ttft),
            "tpot" => Ok(SloMetric::Tpot),
            "e2el" => Ok(SloMetric::E2el),
            "itl" => Ok(SloMetric::Itl),
            other => Err(format!("unknown metric '{other}'")),
        }
    }
}

/// One service-level objective: a latency metric bounded by `threshold_ms`.
///
/// Every use applies one comparison, vLLM's goodput rule: a value meets the objective when it
/// is **at most** the threshold ([`Slo::admits`]). A per-request objective (`--goodput
/// ttft:500`, no percentile) judges each request's own value; an objective on a percentile
/// (`--slo ttft:p99:500`) judges a run's percentile, and each request's value when goodput is
/// counted under it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    /// The constrained metric.
    pub metric: SloMetric,
    /// The percentile of a run the objective bounds (`99.0` for `ttft:p99:500`); `None` for a
    /// per-request objective.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentile: Option<f64>,
    /// Inclusive upper bound, in milliseconds.
    pub threshold_ms: f64,
}

impl Slo {
    /// An objective each request must meet on its own (goodput's).
    pub fn per_request(metric: SloMetric, threshold_ms: f64) -> Slo {
        Slo {
            metric,
            percentile: None,
            threshold_ms,
        }
    }

    /// An objective on a run's percentile (`p99 TTFT` at most 500 ms).
    pub fn on_percentile(metric: SloMetric, percentile: f64, threshold_ms: f64) -> Slo {
        Slo {
            metric,
            percentile: Some(percentile),
            threshold_ms,
        }
    }

    /// The comparison rule: `value_ms ≤ threshold_ms`, as vLLM's goodput counts a request.
    pub fn admits(&self, value_ms: f64) -> bool {
        value_ms <= self.threshold_ms
    }

    /// Does a completed request meet this objective? Each of its values is judged by
    /// [`Slo::admits`]; a percentile objective contributes its threshold.
    pub fn is_met_by(&self, r: &RequestRecord) -> bool {
        match self.metric {
            SloMetric::Ttft => r.ttft_ns().is_some_and(|v| self.admits(ns_to_ms(v))),
            SloMetric::E2el => r.e2el_ns().is_some_and(|v| self.admits(ns_to_ms(v))),
            SloMetric::Tpot => self.admits(ns_f64_to_ms(r.tpot_for_goodput_ns())),
            SloMetric::Itl => r.itls_ns().all(|g| self.admits(ns_to_ms(g))),
        }
    }
}

impl Slo {
    /// [`Slo::is_met_by`] for a record whose token events are given beside it (a view made
    /// by `vllm::view_sharing_events`, whose own `events` may be left empty).
    pub fn is_met_by_with_events(&self, r: &RequestRecord, events: &[TokenEvent]) -> bool {
        match self.metric {
            SloMetric::Itl => events
                .windows(2)
                .all(|w| self.admits(ns_to_ms(w[1].t.saturating_sub(w[0].t)))),
            _ => self.is_met_by(r),
        }
    }

    /// Does a completed request meet this objective as its user saw it? TTFT and E2EL count
    /// from the intended send time (queue time included): a request that waited in the
    /// client queue kept its user waiting too. Without queueing this is [`Slo::is_met_by`].
    /// servebench's goodput uses this rule; the vLLM-format result keeps vLLM's.
    pub fn is_met_by_user(&self, r: &RequestRecord) -> bool {
        match self.metric {
            SloMetric::Ttft => r.user_ttft_ns().is_some_and(|v| self.admits(ns_to_ms(v))),
            SloMetric::E2el => r.user_e2el_ns().is_some_and(|v| self.admits(ns_to_ms(v))),
            SloMetric::Tpot | SloMetric::Itl => self.is_met_by(r),
        }
    }
}

impl std::fmt::Display for Slo {
    /// `p99 TTFT < 500 ms` (`TTFT < 500 ms` per request). The `<` reads "within" in
    /// headlines; the comparison is [`Slo::admits`]'s `≤`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(p) = self.percentile {
            write!(f, "p{} ", trim_number(p))?;
        }
        write!(
            f,
            "{} < {} ms",
            self.metric.label(),
            trim_number(self.threshold_ms)
        )
    }
}

/// `99`, `99.9`, `0.125`: at most three decimals, no trailing zeros.
fn trim_number(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// How to summarize.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryOptions {
    /// Run duration; default: from the earliest `intended` to the latest `done`/`end`.
    #[serde(default)]
    pub duration_ns: Option<u64>,
    /// Start of time-series bucket 0; default: the earliest `intended`.
    #[serde(default)]
    pub origin_ns: Option<u64>,
    /// Percentiles to report, in % (e.g. `[50, 90, 95, 99]`).
    pub percentiles: Vec<f64>,
    /// SLOs for goodput; empty means no goodput.
    #[serde(default)]
    pub goodput: Vec<Slo>,
    /// Absolute floor of the stall threshold (the threshold is `max(5 × median ITL, this)`).
    pub stall_threshold_ms: f64,
}

impl Default for SummaryOptions {
    fn default() -> Self {
        SummaryOptions {
            duration_ns: None,
            origin_ns: None,
            percentiles: vec![50.0, 90.0, 95.0, 99.0],
            goodput: Vec::new(),
            stall_threshold_ms: crate::derived::DEFAULT_STALL_FLOOR_NS as f64 / 1e6,
        }
    }
}

/// Statistics of one metric, in milliseconds. Every field is `None` without samples.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricSummary {
    /// Number of samples.
    pub n: u64,
    /// `np.mean`.
    pub mean: Option<f64>,
    /// `np.median`.
    pub median: Option<f64>,
    /// `np.std` (ddof = 0).
    pub std: Option<f64>,
    /// Smallest sample.
    pub min: Option<f64>,
    /// Largest sample.
    pub max: Option<f64>,
    /// The requested percentiles with CIs (empty without samples).
    pub percentiles: Vec<PercentileStat>,
}

impl MetricSummary {
    /// Summarize samples given in milliseconds.
    pub fn from_ms(mut samples: Vec<f64>, percentiles: &[f64]) -> Self {
        let mean = stats::mean(&samples);
        let std = stats::std_dev(&samples);
        samples.sort_unstable_by(f64::total_cmp);
        MetricSummary {
            n: samples.len() as u64,
            mean,
            median: stats::median_sorted(&samples),
            std,
            min: samples.first().copied(),
            max: samples.last().copied(),
            percentiles: percentiles
                .iter()
                .filter_map(|&p| stats::percentile_stat(&samples, p))
                .collect(),
        }
    }

    /// The entry for percentile `p`, if it was requested.
    pub fn percentile(&self, p: f64) -> Option<&PercentileStat> {
        self.percentiles.iter().find(|s| s.p == p)
    }
}

/// Answer checks of a run: how many answers were checked and how many passed. A failed
/// check is also a failure of kind `invalid_output` (counted in `failed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnswerCheckSummary {
    /// Completed responses whose text went through at least one check.
    pub checked: u64,
    /// Of those, the ones that passed every check.
    pub passed: u64,
    /// Of those, the ones that failed a check (`invalid_output`).
    pub failed: u64,
}

impl AnswerCheckSummary {
    /// From a run's records; `None` when no answer was checked.
    pub fn from_records(records: &[RequestRecord]) -> Option<AnswerCheckSummary> {
        let checked: Vec<&RequestRecord> = records.iter().filter(|r| r.answer_checked).collect();
        if checked.is_empty() {
            return None;
        }
        let failed = checked
            .iter()
            .filter(|r| {
                r.failure
                    .as_ref()
                    .is_some_and(|f| f.kind == crate::record::FailureKind::InvalidOutput)
            })
            .count() as u64;
        Some(AnswerCheckSummary {
            checked: checked.len() as u64,
            passed: checked.len() as u64 - failed,
            failed,
        })
    }

    /// Passed answers as a % of checked ones.
    pub fn validity_pct(&self) -> f64 {
        if self.checked == 0 {
            0.0
        } else {
            self.passed as f64 * 100.0 / self.checked as f64
        }
    }
}

/// Goodput: completed requests that met every SLO.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoodputSummary {
    /// The objectives applied.
    pub slos: Vec<Slo>,
    /// Requests that met all of them.
    pub good_requests: u64,
    /// Good requests per second (vLLM's `request_goodput`).
    pub requests_per_s: f64,
    /// Output tokens of good requests per second.
    pub output_tokens_per_s: f64,
    /// Good requests as a % of all requests (failed ones count as missed); `None` without
    /// requests.
    pub attainment_pct: Option<f64>,
}

/// Per-second series, bucket `i` covering `[origin + i s, origin + (i+1) s)`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeSeries {
    /// Start of bucket 0, ns from run start.
    pub origin_ns: u64,
    /// Bucket width (1 s).
    pub bucket_ns: u64,
    /// Requests that completed (successfully) in the bucket, by `done` time.
    pub completions: Vec<u64>,
    /// Output tokens received in the bucket (each event weighted by its token share).
    pub output_tokens: Vec<f64>,
    /// Time-averaged number of requests in flight during the bucket.
    pub in_flight_mean: Vec<f64>,
    /// Largest number of requests in flight at any instant of the bucket.
    pub in_flight_max: Vec<u64>,
}

/// Everything servebench reports about one run (one workload row).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// Requests that completed with output.
    pub completed: u64,
    /// Requests that did not.
    pub failed: u64,
    /// Failed requests by [`crate::FailureKind`] name.
    pub failures_by_kind: BTreeMap<String, u64>,
    /// Σ input tokens of completed requests.
    pub total_input_tokens: u64,
    /// Σ output tokens of completed requests.
    pub total_output_tokens: u64,
    /// Σ prefix-cached prompt tokens of completed requests that reported them.
    #[serde(default)]
    pub total_cached_tokens: Option<u64>,
    /// Run duration, seconds.
    pub duration_s: f64,
    /// Completed requests / duration.
    pub request_throughput: f64,
    /// Output tokens / duration.
    pub output_throughput: f64,
    /// Input tokens / duration.
    pub prompt_throughput: f64,
    /// (Input + output tokens) / duration.
    pub total_token_throughput: f64,
    /// `None` when no SLO was given.
    pub goodput: Option<GoodputSummary>,
    /// Answer checks (`--expect-regex`, `--expect-json-schema`, per-request `expected`);
    /// `None` when no answer was checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_checks: Option<AnswerCheckSummary>,
    /// Time to first token.
    pub ttft: MetricSummary,
    /// Time per output token (requests with more than one output token).
    pub tpot: MetricSummary,
    /// Inter-token latency, all gaps of all requests pooled.
    pub itl: MetricSummary,
    /// End-to-end latency.
    pub e2el: MetricSummary,
    /// Client-side queue time (`sent − intended`).
    pub queue: MetricSummary,
    /// TTFT seen by a user arriving at `intended`.
    pub user_ttft: MetricSummary,
    /// E2EL seen by a user arriving at `intended`.
    pub user_e2el: MetricSummary,
    /// How late the dispatcher released requests that did not wait for a slot.
    pub dispatch_lag: MetricSummary,
    /// Most output tokens in any sliding 1 s window.
    pub peak_output_tokens_per_s: f64,
    /// Exact peak of requests in flight (`[sent, end-or-done)`, all requests).
    pub peak_concurrency: u64,
    /// Largest ITL of any completed request, ms.
    pub longest_stall_ms: Option<f64>,
    /// Σ stalls over completed requests.
    pub total_stalls: u64,
    /// Completed requests with at least one stall.
    pub requests_with_stalls: u64,
    /// Where the input counts of completed requests came from.
    pub input_sources: BTreeMap<String, u64>,
    /// Where the output counts of completed requests came from.
    pub output_sources: BTreeMap<String, u64>,
    /// Per-second series.
    pub time_series: TimeSeries,
    /// Things a reader should know (count disagreements, unstable percentiles, ...).
    pub warnings: Vec<String>,
    /// Time to first answer token and the reasoning share of output; only when some
    /// completed request reasoned or called tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<crate::ReasoningSummary>,
    /// Records by the clock that stamped their response bytes (`kernel_rx`, `user`, `mixed`);
    /// absent when no record says (virtual-time runs, older files).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub stamp_clocks: BTreeMap<String, u64>,
    /// Latency per pool of a simulated fleet; absent against a single server.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub per_pool: BTreeMap<String, crate::per_pool::PoolSummary>,
    /// New connections, their TCP connect and TLS handshake times and protocol; absent from
    /// plain HTTP/1.1 runs and older files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections: Option<crate::ConnectionSummary>,
    /// Where the requests' time went, phase by phase, and connection reuse; absent where no
    /// connection stamped them (virtual time, older files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phases: Option<crate::PhaseSummary>,
}

impl RunSummary {
    /// The named metric (`ttft`, `tpot`, `itl`, `e2el`, `queue`, `user_ttft`, `user_e2el`,
    /// `dispatch_lag`, and `ttfat` when the run had reasoning or tool calls).
    pub fn metric(&self, name: &str) -> Option<&MetricSummary> {
        Some(match name {
            "ttft" => &self.ttft,
            "tpot" => &self.tpot,
            "itl" => &self.itl,
            "e2el" => &self.e2el,
            "queue" => &self.queue,
            "user_ttft" => &self.user_ttft,
            "user_e2el" => &self.user_e2el,
            "dispatch_lag" => &self.dispatch_lag,
            "ttfat" => return self.reasoning.as_ref().map(|r| &r.ttfat),
            _ => return None,
        })
    }

    /// The metric names [`Self::metric`] knows, in report order.
    pub const METRICS: [&'static str; 8] = [
        "ttft",
        "tpot",
        "itl",
        "e2el",
        "queue",
        "user_ttft",
        "user_e2el",
        "dispatch_lag",
    ];
}

/// Summarize one run's records.
pub fn summarize(records: &[RequestRecord], opts: &SummaryOptions) -> RunSummary {
    let ok: Vec<&RequestRecord> = records.iter().filter(|r| r.is_success()).collect();
    let completed = ok.len() as u64;
    let failed = records.len() as u64 - completed;

    let mut failures_by_kind = BTreeMap::new();
    for r in records.iter().filter(|r| !r.is_success()) {
        let kind = r
            .failure
            .as_ref()
            .map_or("empty_output", |f| f.kind.as_str());
        *failures_by_kind.entry(kind.to_owned()).or_insert(0) += 1;
    }

    let total_input_tokens: u64 = ok.iter().map(|r| r.input_tokens).sum();
    let total_output_tokens: u64 = ok.iter().map(|r| r.output_tokens).sum();
    let cached: Vec<u64> = ok.iter().filter_map(|r| r.cached_tokens).collect();
    let total_cached_tokens = (!cached.is_empty()).then(|| cached.iter().sum());

    let earliest_intended = records.iter().map(|r| r.intended).min();
    let latest_stop = records
        .iter()
        .filter_map(|r| match (r.done, r.end) {
            (Some(d), Some(e)) => Some(d.max(e)),
            (d, e) => d.or(e),
        })
        .max();
    let duration_ns = opts
        .duration_ns
        .unwrap_or_else(|| match (earliest_intended, latest_stop) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => 0,
        });
    let duration_s = ns_to_s(duration_ns);
    let per_s = |x: f64| {
        if duration_s > 0.0 {
            x / duration_s
        } else {
            0.0
        }
    };

    let p = &opts.percentiles;
    let collect = |f: &dyn Fn(&RequestRecord) -> Option<u64>| -> Vec<f64> {
        ok.iter().filter_map(|r| f(r)).map(ns_to_ms).collect()
    };
    let ttft = MetricSummary::from_ms(collect(&RequestRecord::ttft_ns), p);
    let e2el = MetricSummary::from_ms(collect(&RequestRecord::e2el_ns), p);
    let queue = MetricSummary::from_ms(collect(&RequestRecord::queue_ns), p);
    let user_ttft = MetricSummary::from_ms(collect(&RequestRecord::user_ttft_ns), p);
    let user_e2el = MetricSummary::from_ms(collect(&RequestRecord::user_e2el_ns), p);
    let dispatch_lag = MetricSummary::from_ms(collect(&RequestRecord::dispatch_lag_ns), p);
    let tpot = MetricSummary::from_ms(
        ok.iter()
            .filter_map(|r| r.tpot_ns())
            .map(ns_f64_to_ms)
            .collect(),
        p,
    );
    let itl = MetricSummary::from_ms(
        ok.iter().flat_map(|r| r.itls_ns()).map(ns_to_ms).collect(),
        p,
    );

    let goodput = (!opts.goodput.is_empty()).then(|| {
        let good: Vec<&&RequestRecord> = ok
            .iter()
            .filter(|r| opts.goodput.iter().all(|s| s.is_met_by_user(r)))
            .collect();
        let good_requests = good.len() as u64;
        let good_tokens: u64 = good.iter().map(|r| r.output_tokens).sum();
        GoodputSummary {
            slos: opts.goodput.clone(),
            good_requests,
            requests_per_s: per_s(good_requests as f64),
            output_tokens_per_s: per_s(good_tokens as f64),
            attainment_pct: (!records.is_empty())
                .then(|| good_requests as f64 * 100.0 / records.len() as f64),
        }
    });

    let floor_ns = ms_to_ns(opts.stall_threshold_ms.max(0.0));
    let stalls: Vec<u64> = ok.iter().map(|r| r.stall_count(floor_ns)).collect();
    let longest_stall_ms = ok
        .iter()
        .filter_map(|r| r.longest_stall_ns())
        .max()
        .map(ns_to_ms);

    let mut input_sources = BTreeMap::new();
    let mut output_sources = BTreeMap::new();
    for r in &ok {
        *input_sources
            .entry(r.input_source.as_str().to_owned())
            .or_insert(0) += 1;
        *output_sources
            .entry(r.output_source.as_str().to_owned())
            .or_insert(0) += 1;
    }

    let origin_ns = opts.origin_ns.or(earliest_intended).unwrap_or(0);
    let time_series = time_series(records, &ok, origin_ns, latest_stop);

    let mut summary = RunSummary {
        completed,
        failed,
        failures_by_kind,
        total_input_tokens,
        total_output_tokens,
        total_cached_tokens,
        duration_s,
        request_throughput: per_s(completed as f64),
        output_throughput: per_s(total_output_tokens as f64),
        prompt_throughput: per_s(total_input_tokens as f64),
        total_token_throughput: per_s((total_input_tokens + total_output_tokens) as f64),
        goodput,
        answer_checks: AnswerCheckSummary::from_records(records),
        ttft,
        tpot,
        itl,
        e2el,
        queue,
        user_ttft,
        user_e2el,
        dispatch_lag,
        peak_output_tokens_per_s: peak_output_tokens_per_s(&ok),
        peak_concurrency: peak_concurrency(records),
        longest_stall_ms,
        total_stalls: stalls.iter().sum(),
        requests_with_stalls: stalls.iter().filter(|&&s| s > 0).count() as u64,
        input_sources,
        output_sources,
        time_series,
        warnings: Vec::new(),
        reasoning: crate::ReasoningSummary::from_completed(&ok, p),
        stamp_clocks: stamp_clocks(records),
        per_pool: crate::per_pool::per_pool(records, p),
        connections: None,
        phases: crate::phases::phase_summary(records),
    };
    summary.warnings = warnings(records, &ok, &summary, duration_ns);
    summary
}

/// Records per stamping clock, all records (a failed request's stamps are on a clock too).
fn stamp_clocks(records: &[RequestRecord]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for c in records.iter().filter_map(|r| r.stamp_clock) {
        *counts.entry(c.as_str().to_owned()).or_insert(0) += 1;
    }
    counts
}

/// Token events of completed requests as `(time, tokens)`, sorted by time.
fn weighted_events(ok: &[&RequestRecord]) -> Vec<(u64, f64)> {
    let mut ev: Vec<(u64, f64)> = ok
        .iter()
        .flat_map(|r| {
            let w = r.tokens_per_event();
            r.events.iter().map(move |e| (e.t, w))
        })
        .collect();
    ev.sort_unstable_by_key(|e| e.0);
    ev
}

/// Most output tokens in any window `[t, t + 1 s)`; the maximum is reached with `t` at an
/// event, so only those windows are tried. Each event weighs its request's token share.
pub fn peak_output_tokens_per_s(ok: &[&RequestRecord]) -> f64 {
    let ev = weighted_events(ok);
    // `at_i` and `at_j` are the prefix sums of the weights before events i and j, added in
    // event order as a prefix array would hold them, without holding one (8 bytes a token).
    let mut best = 0.0f64;
    let (mut j, mut at_i, mut at_j) = (0, 0.0f64, 0.0f64);
    for i in 0..ev.len() {
        let limit = ev[i].0.saturating_add(NS_PER_S);
        while j < ev.len() && ev[j].0 < limit {
            at_j += ev[j].1;
            j += 1;
        }
        best = best.max(at_j - at_i);
        at_i += ev[i].1;
    }
    best
}

/// Sweep events `(time, ±1)` of the in-flight intervals, departures first at equal times.
fn flight_events(records: &[RequestRecord]) -> Vec<(u64, i64)> {
    let mut ev: Vec<(u64, i64)> = records
        .iter()
        .filter_map(RequestRecord::in_flight_ns)
        .flat_map(|(s, e)| [(s, 1), (e, -1)])
        .collect();
    ev.sort_unstable();
    ev
}

/// Exact peak of requests in flight over half-open `[sent, end-or-done)` intervals.
pub fn peak_concurrency(records: &[RequestRecord]) -> u64 {
    let mut cur = 0i64;
    let mut peak = 0i64;
    for (_, d) in flight_events(records) {
        cur += d;
        peak = peak.max(cur);
    }
    u64::try_from(peak).unwrap_or(0)
}

fn time_series(
    records: &[RequestRecord],
    ok: &[&RequestRecord],
    origin_ns: u64,
    latest_stop: Option<u64>,
) -> TimeSeries {
    let bucket_of = |t: u64| (t.saturating_sub(origin_ns) / NS_PER_S) as usize;
    let len = latest_stop.map_or(0, |s| {
        (s.saturating_sub(origin_ns).div_ceil(NS_PER_S) as usize).max(1)
    });
    let mut completions = vec![0u64; len];
    let mut output_tokens = vec![0.0f64; len];
    if len == 0 {
        return TimeSeries {
            origin_ns,
            bucket_ns: NS_PER_S,
            ..TimeSeries::default()
        };
    }
    let clamp = |b: usize| b.min(len - 1);

    for r in ok {
        if let Some(t) = r.done.or(r.end_ns()) {
            completions[clamp(bucket_of(t))] += 1;
        }
        let w = r.tokens_per_event();
        for e in &r.events {
            output_tokens[clamp(bucket_of(e.t))] += w;
        }
    }

    // Time-weighted occupancy and the instantaneous maximum, as the slices compute them.
    let (in_flight_mean, in_flight_max) =
        crate::slices::occupancy(records, origin_ns, NS_PER_S, len);

    TimeSeries {
        origin_ns,
        bucket_ns: NS_PER_S,
        completions,
        output_tokens,
        in_flight_mean,
        in_flight_max,
    }
}

fn warnings(
    records: &[RequestRecord],
    ok: &[&RequestRecord],
    s: &RunSummary,
    duration_ns: u64,
) -> Vec<String> {
    let mut w = Vec::new();
    if records.is_empty() {
        w.push("no requests were recorded".to_owned());
        return w;
    }
    if s.completed == 0 {
        w.push(format!(
            "no request completed ({} failed): latency statistics are empty",
            s.failed
        ));
    } else if s.failed > 0 {
        let kinds: Vec<String> = s
            .failures_by_kind
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        w.push(format!(
            "{} of {} requests failed ({})",
            s.failed,
            records.len(),
            kinds.join(", ")
        ));
    }
    if duration_ns == 0 {
        w.push("run duration is zero: throughputs are reported as 0".to_owned());
    }

    // Server-counted prompts against the lengths the dataset meant to send.
    let checked: Vec<&&RequestRecord> = ok
        .iter()
        .filter(|r| r.input_source == crate::CountSource::Usage && r.intended_input_tokens > 0)
        .collect();
    if !checked.is_empty() {
        // A chat template (or a BOS token) adds the same few tokens to every prompt: the
        // prompts are the lengths intended and the tokenizers agree, so that constant is
        // taken off before the lengths are compared.
        let overhead = per_request_overhead(
            checked
                .iter()
                .map(|r| i128::from(r.input_tokens) - i128::from(r.intended_input_tokens)),
        );
        let server: u64 = checked
            .iter()
            .map(|r| r.input_tokens.saturating_sub(overhead))
            .sum();
        let intended: u64 = checked.iter().map(|r| r.intended_input_tokens).sum();
        let off = checked
            .iter()
            .filter(|r| {
                r.input_tokens
                    .saturating_sub(overhead)
                    .abs_diff(r.intended_input_tokens) as f64
                    > 0.01 * r.intended_input_tokens as f64
            })
            .count();
        if server.abs_diff(intended) as f64 > 0.01 * intended as f64 {
            w.push(format!(
                "server counted {server} prompt tokens where the dataset intended {intended} \
                 ({:+.1} %; {off} of {} requests differ by more than 1 %): the client and \
                 server tokenizers likely differ",
                (server as f64 - intended as f64) * 100.0 / intended as f64,
                checked.len()
            ));
        } else if off > 0 {
            w.push(format!(
                "{off} of {} requests have a server prompt count more than 1 % away from the \
                 intended length (totals agree)",
                checked.len()
            ));
        }
    }

    let not_usage = s
        .output_sources
        .iter()
        .filter(|(k, _)| k.as_str() != crate::CountSource::Usage.as_str())
        .map(|(k, n)| format!("{n} from {k}"))
        .collect::<Vec<_>>();
    if !not_usage.is_empty() {
        w.push(format!(
            "output token counts not reported by the server's usage: {}",
            not_usage.join(", ")
        ));
    }

    let mut unstable = Vec::new();
    for name in ["ttft", "tpot", "itl", "e2el"] {
        let Some(m) = s.metric(name) else { continue };
        for p in m.percentiles.iter().filter(|p| p.unstable) {
            unstable.push(format!(
                "{name} p{} (n={}, needs {})",
                p.p,
                m.n,
                stats::required_samples(p.p).map_or_else(|| "more".to_owned(), |k| k.to_string())
            ));
        }
    }
    if !unstable.is_empty() {
        w.push(format!(
            "percentiles backed by too few samples to be stable: {}",
            unstable.join(", ")
        ));
    }
    w
}

/// Requests needed before a constant excess is taken for a chat template.
const MIN_TEMPLATE_REQUESTS: usize = 5;

/// The most prompt tokens a chat template or special tokens add to each request.
const MAX_TEMPLATE_TOKENS: i128 = 256;

/// The constant a server adds to every prompt's length (a chat template, a BOS token): the
/// median of `server − intended` when every request's excess lies within 2 tokens of it
/// (token merges at the template's edge) and it is between 1 and [`MAX_TEMPLATE_TOKENS`];
/// 0 otherwise, when the excess varies as it does when the tokenizers differ.
fn per_request_overhead(excess: impl Iterator<Item = i128>) -> u64 {
    let mut e: Vec<i128> = excess.collect();
    // A constant shows only across requests: one or two cannot tell a template from a
    // tokenizer that differs.
    if e.len() < MIN_TEMPLATE_REQUESTS {
        return 0;
    }
    e.sort_unstable();
    let median = e[e.len() / 2];
    let (lo, hi) = (e[0], e[e.len() - 1]);
    if (1..=MAX_TEMPLATE_TOKENS).contains(&median) && median - lo <= 2 && hi - median <= 2 {
        u64::try_from(median).unwrap_or(0)
    } else {
        0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::derived::tests::record;
    use crate::record::{CountSource, Failure, FailureKind};

    const MS: u64 = 1_000_000;

    fn failed(id: u64, sent_ms: u64, done_ms: u64, kind: FailureKind) -> RequestRecord {
        let mut r = record(id, sent_ms, &[], 0);
        r.done = Some(done_ms * MS);
        r.failure = Some(Failure {
            kind,
            status: Some(500),
            message: "boom".into(),
        });
        r
    }

    fn opts() -> SummaryOptions {
        SummaryOptions {
            percentiles: vec![50.0, 99.0],
            ..SummaryOptions::default()
        }
    }

    /// Records whose server prompt counts exceed the intended 100 tokens by `excess(i)`.
    fn prompts(excess: impl Fn(u64) -> u64) -> Vec<RequestRecord> {
        (0..40)
            .map(|i| {
                let mut r = record(i, i * 10, &[i * 10 + 5, i * 10 + 8], 2);
                r.intended_input_tokens = 100 + i;
                r.input_tokens = 100 + i + excess(i);
                r
            })
            .collect()
    }

    fn tokenizer_warning(records: &[RequestRecord]) -> Option<String> {
        summarize(records, &opts())
            .warnings
            .into_iter()
            .find(|w| w.contains("prompt"))
    }

    /// A chat template adds the same tokens to every prompt: no tokenizer mismatch. Counts
    /// that drift per request still warn.
    #[test]
    fn a_constant_chat_template_overhead_is_not_a_tokenizer_mismatch() {
        assert_eq!(tokenizer_warning(&prompts(|_| 8)), None);
        // Token merges at the template's edge: within 2 tokens of the constant.
        assert_eq!(tokenizer_warning(&prompts(|i| 8 + i % 3)), None);
        let drift = tokenizer_warning(&prompts(|i| i / 2)).expect("warned");
        assert!(drift.contains("tokenizers likely differ"), "{drift}");
        // A template on top of a tokenizer mismatch still warns.
        assert!(tokenizer_warning(&prompts(|i| 8 + i)).is_some());
        assert_eq!(per_request_overhead([5, 5, 6, 5, 4].into_iter()), 5);
        assert_eq!(per_request_overhead([0; 6].into_iter()), 0);
        assert_eq!(per_request_overhead([400; 6].into_iter()), 0);
        // Too few requests to tell a template from a tokenizer.
        assert_eq!(per_request_overhead([5, 5].into_iter()), 0);
    }

    #[test]
    fn empty_input_yields_none_and_no_panic() {
        let s = summarize(&[], &opts());
        assert_eq!(s.completed, 0);
        assert_eq!(s.duration_s, 0.0);
        assert_eq!(s.ttft.mean, None);
        assert_eq!(s.itl.n, 0);
        assert!(s.ttft.percentiles.is_empty());
        assert_eq!(s.peak_concurrency, 0);
        assert_eq!(s.peak_output_tokens_per_s, 0.0);
        assert!(s.time_series.completions.is_empty());
        assert!(s.goodput.is_none());
        assert_eq!(s.warnings, vec!["no requests were recorded".to_owned()]);
        // Only failures: still no panic, and the failure is counted.
        let s = summarize(&[failed(0, 0, 10, FailureKind::Connect)], &opts());
        assert_eq!(s.failed, 1);
        assert_eq!(s.failures_by_kind.get("connect"), Some(&1));
        assert_eq!(s.e2el.max, None);
    }

    #[test]
    fn an_answer_that_failed_its_check_is_a_failed_request_and_lowers_validity() {
        let mut good = record(0, 0, &[100, 200], 2);
        good.answer_checked = true;
        let mut bad = record(1, 0, &[100, 200], 2);
        bad.answer_checked = true;
        bad.failure = Some(Failure {
            kind: FailureKind::InvalidOutput,
            status: None,
            message: "answer does not match --expect-regex \"x\"".into(),
        });
        let unchecked = record(2, 0, &[100, 200], 2);
        let s = summarize(
            &[good, bad, unchecked],
            &SummaryOptions {
                goodput: vec![Slo {
                    metric: SloMetric::Ttft,
                    percentile: None,
                    threshold_ms: 1_000.0,
                }],
                ..opts()
            },
        );
        assert_eq!((s.completed, s.failed), (2, 1));
        assert_eq!(s.failures_by_kind.get("invalid_output"), Some(&1));
        assert_eq!(s.goodput.as_ref().unwrap().good_requests, 2);
        let c = s.answer_checks.unwrap();
        assert_eq!((c.checked, c.passed, c.failed), (2, 1, 1));
        assert_eq!(c.validity_pct(), 50.0);
        assert_eq!(s.ttft.n, 2);
        // No check in the run: no block at all (and none in the serialized summary).
        let s = summarize(&[record(0, 0, &[100], 1)], &opts());
        assert!(s.answer_checks.is_none());
        assert!(!serde_json::to_string(&s).unwrap().contains("answer_checks"));
    }

    #[test]
    fn records_are_counted_by_the_clock_that_stamped_them() {
        use crate::record::StampClock;
        let mut recs: Vec<RequestRecord> = (0..4).map(|i| record(i, 0, &[100, 200], 2)).collect();
        recs[0].stamp_clock = Some(StampClock::KernelRx);
        recs[1].stamp_clock = Some(StampClock::KernelRx);
        recs[2].stamp_clock = Some(StampClock::User);
        let s = summarize(&recs, &opts());
        assert_eq!(s.stamp_clocks.get("kernel_rx"), Some(&2));
        assert_eq!(s.stamp_clocks.get("user"), Some(&1));
        assert_eq!(s.stamp_clocks.len(), 2);
        // No record says (virtual time, older files): nothing in the serialized summary.
        let s = summarize(&[record(0, 0, &[100], 1)], &opts());
        assert!(!serde_json::to_string(&s).unwrap().contains("stamp_clocks"));
        // The record field: absent when unknown, snake_case when known, read back the same.
        let mut r = record(0, 0, &[100], 1);
        assert!(!serde_json::to_string(&r).unwrap().contains("stamp_clock"));
        r.stamp_clock = Some(StampClock::KernelRx);
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains(r#""stamp_clock":"kernel_rx""#), "{json}");
        let back: RequestRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(back.stamp_clock, Some(StampClock::KernelRx));
    }

    #[test]
    fn totals_throughputs_and_latencies() {
        // Request 0: sent 0, tokens at 100, 150, 200 ms, 3 tokens.
        // Request 1: sent 50, tokens at 250, 450 ms, 2 tokens.
        let a = record(0, 0, &[100, 150, 200], 3);
        let b = record(1, 50, &[250, 450], 2);
        let f = failed(2, 60, 70, FailureKind::HttpStatus);
        let s = summarize(
            &[a, b, f],
            &SummaryOptions {
                duration_ns: Some(2_000 * MS),
                ..opts()
            },
        );
        assert_eq!((s.completed, s.failed), (2, 1));
        assert_eq!(s.total_output_tokens, 5);
        assert_eq!(s.total_input_tokens, 200);
        assert_eq!(s.request_throughput, 1.0);
        assert_eq!(s.output_throughput, 2.5);
        assert_eq!(s.prompt_throughput, 100.0);
        assert_eq!(s.total_token_throughput, 102.5);
        // TTFTs 100, 200; E2ELs 200, 400; ITLs 50, 50, 200; TPOTs 50, 200.
        assert_eq!(s.ttft.mean, Some(150.0));
        assert_eq!(s.e2el.median, Some(300.0));
        assert_eq!(s.itl.n, 3);
        assert_eq!(s.itl.max, Some(200.0));
        assert_eq!(s.tpot.min, Some(50.0));
        assert_eq!(s.tpot.max, Some(200.0));
        assert_eq!(s.longest_stall_ms, Some(200.0));
        assert_eq!(s.ttft.percentile(50.0).unwrap().value, 150.0);
        assert!(s.ttft.percentile(99.0).unwrap().unstable);
        assert!(s
            .warnings
            .iter()
            .any(|w| w.contains("1 of 3 requests failed")));
        assert!(s
            .warnings
            .iter()
            .any(|w| w.contains("ttft p99 (n=2, needs 1000)")));
    }

    #[test]
    fn duration_defaults_to_intended_through_last_done() {
        let mut a = record(0, 100, &[300], 1);
        a.intended = 50 * MS;
        let b = record(1, 200, &[600], 1); // done at 601 ms
        let s = summarize(&[a, b], &opts());
        assert!((s.duration_s - 0.551).abs() < 1e-12, "{}", s.duration_s);
    }

    #[test]
    fn goodput_follows_vllm_semantics() {
        // a: ttft 100, tpot 50 (ITLs 50, 50). b: one token, ttft 300 (TPOT counts as 0).
        // c: ttft 100, ITLs 10 and 400 → tpot 205.
        let a = record(0, 0, &[100, 150, 200], 3);
        let b = record(1, 0, &[300], 1);
        let c = record(2, 0, &[100, 110, 510], 3);
        let recs = [a, b, c];
        let run = |slos: Vec<Slo>| {
            summarize(
                &recs,
                &SummaryOptions {
                    duration_ns: Some(1_000 * MS),
                    goodput: slos,
                    ..opts()
                },
            )
            .goodput
            .unwrap()
        };
        let slo = Slo::per_request;
        let g = run(vec![slo(SloMetric::Tpot, 60.0)]);
        assert_eq!(g.good_requests, 2); // a and the one-token b
        assert_eq!(g.output_tokens_per_s, 4.0);
        let g = run(vec![
            slo(SloMetric::Ttft, 200.0),
            slo(SloMetric::Tpot, 300.0),
        ]);
        assert_eq!(g.good_requests, 2); // a and c
        let g = run(vec![slo(SloMetric::Itl, 100.0)]);
        assert_eq!(g.good_requests, 2); // a, and b with no ITL at all
        let g = run(vec![slo(SloMetric::E2el, 200.0)]);
        assert_eq!(g.good_requests, 1); // threshold inclusive: a's 200 ms counts
        assert_eq!(g.requests_per_s, 1.0);
        assert!((g.attainment_pct.unwrap() - 100.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn goodput_counts_the_client_queue_against_ttft() {
        // Sent 400 ms after its intended time, first token 100 ms after the send: its user
        // waited 500 ms.
        let mut queued = record(0, 400, &[500, 550], 2);
        queued.intended = 0;
        queued.released = 0;
        let slo = Slo::per_request(SloMetric::Ttft, 200.0);
        assert!(slo.is_met_by(&queued), "vLLM's rule counts from the send");
        assert!(!slo.is_met_by_user(&queued));
        let s = summarize(
            std::slice::from_ref(&queued),
            &SummaryOptions {
                goodput: vec![slo],
                ..opts()
            },
        );
        assert_eq!(s.goodput.unwrap().good_requests, 0);
        let e2el = Slo::per_request(SloMetric::E2el, 200.0);
        assert!(e2el.is_met_by(&queued) && !e2el.is_met_by_user(&queued));
    }

    #[test]
    fn one_comparison_rule_at_most_the_threshold() {
        let per_request = Slo::per_request(SloMetric::Ttft, 500.0);
        let p99 = Slo::on_percentile(SloMetric::Ttft, 99.0, 500.0);
        for slo in [per_request, p99] {
            assert!(slo.admits(500.0));
            assert!(!slo.admits(500.000_001));
        }
        // A request's TTFT of exactly the threshold meets both kinds.
        let r = record(0, 0, &[500, 510], 2);
        assert!(per_request.is_met_by(&r) && p99.is_met_by(&r));
        assert_eq!(p99.to_string(), "p99 TTFT < 500 ms");
        assert_eq!(
            Slo::on_percentile(SloMetric::Itl, 99.9, 0.5).to_string(),
            "p99.9 ITL < 0.5 ms"
        );
        assert_eq!(per_request.to_string(), "TTFT < 500 ms");
    }

    #[test]
    fn a_per_request_slo_keeps_its_file_shape() {
        let slo = Slo::per_request(SloMetric::Tpot, 50.0);
        let json = serde_json::to_value(slo).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"metric": "tpot", "threshold_ms": 50.0})
        );
        let back: Slo = serde_json::from_value(json).unwrap();
        assert_eq!(back, slo);
        assert_eq!("E2EL".parse::<SloMetric>(), Ok(SloMetric::E2el));
        assert!("ttfb".parse::<SloMetric>().is_err());
    }

    #[test]
    fn peak_concurrency_is_exact_and_half_open() {
        // [0,100) [100,200) touch; [50,150) overlaps both; failed [60, 70) counts too.
        let a = record(0, 0, &[100], 1);
        let b = record(1, 100, &[200], 1);
        let c = record(2, 50, &[150], 1);
        assert_eq!(peak_concurrency(&[a.clone(), b.clone()]), 1);
        assert_eq!(peak_concurrency(&[a.clone(), b.clone(), c.clone()]), 2);
        let f = failed(3, 60, 70, FailureKind::Timeout);
        assert_eq!(peak_concurrency(&[a, b, c, f]), 3);
    }

    #[test]
    fn sliding_peak_sees_a_burst_across_a_second_boundary() {
        let a = record(0, 0, &[900, 900, 900], 3);
        let b = record(1, 0, &[1100, 1100, 1100], 3);
        let c = record(2, 0, &[2200], 1);
        let ok: Vec<&RequestRecord> = vec![&a, &b, &c];
        assert_eq!(peak_output_tokens_per_s(&ok), 6.0);
        // Token shares: 2 events carrying 10 tokens weigh 5 each.
        let d = record(3, 0, &[100, 200], 10);
        assert_eq!(peak_output_tokens_per_s(&[&d]), 10.0);
    }

    #[test]
    fn time_series_buckets() {
        // origin 0. a: in flight [0, 1.5 s), tokens 0.5 s and 1.5 s. b: [0.5 s, 2.5 s).
        let a = record(0, 0, &[500, 1500], 2);
        let b = record(1, 500, &[2500], 1);
        let s = summarize(&[a, b], &opts());
        let ts = &s.time_series;
        assert_eq!(ts.bucket_ns, NS_PER_S);
        // Last done is b at 2.501 s → 3 buckets.
        assert_eq!(ts.completions, vec![0, 1, 1]);
        assert_eq!(ts.output_tokens, vec![1.0, 1.0, 1.0]);
        assert_eq!(ts.in_flight_max, vec![2, 2, 1]);
        let mean: Vec<f64> = ts
            .in_flight_mean
            .iter()
            .map(|x| (x * 1e6).round() / 1e6)
            .collect();
        assert_eq!(mean, vec![1.5, 1.5, 0.5]);
    }

    #[test]
    fn count_sources_and_disagreement_warning() {
        let mut a = record(0, 0, &[100], 1);
        a.input_tokens = 110; // server counted 10 % more
        let mut b = record(1, 0, &[100], 1);
        b.output_source = CountSource::Tokenizer;
        b.input_source = CountSource::Dataset;
        let s = summarize(&[a, b], &opts());
        assert_eq!(s.input_sources.get("usage"), Some(&1));
        assert_eq!(s.input_sources.get("dataset"), Some(&1));
        assert_eq!(s.output_sources.get("tokenizer"), Some(&1));
        assert!(
            s.warnings
                .iter()
                .any(|w| w.contains("110 prompt tokens") && w.contains("100")),
            "{:?}",
            s.warnings
        );
        assert!(s.warnings.iter().any(|w| w.contains("1 from tokenizer")));
    }

    #[test]
    fn stalls_are_counted_over_completed_requests() {
        let a = record(0, 0, &[100, 110, 120, 130, 700], 5); // one 570 ms gap
        let b = record(1, 0, &[100, 110], 2);
        let s = summarize(&[a, b], &opts());
        assert_eq!(s.total_stalls, 1);
        assert_eq!(s.requests_with_stalls, 1);
        assert_eq!(s.longest_stall_ms, Some(570.0));
    }

    #[test]
    fn summary_round_trips_through_json() {
        let s = summarize(&[record(0, 0, &[100, 200], 2)], &opts());
        let json = serde_json::to_string(&s).unwrap();
        let back: RunSummary = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
    }
}
