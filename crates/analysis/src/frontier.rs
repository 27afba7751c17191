//! Sweep analysis: the throughput–latency Pareto frontier, its knee, the saturation point,
//! and the highest load that meets a set of latency SLOs, with a one-sentence headline.
//!
//! A sweep is a list of [`SweepPoint`]s, one per offered load (request rate or concurrency),
//! each with its achieved output throughput and latency percentiles in milliseconds.

use std::fmt;

use serde::Serialize;

use crate::{format_quantity, AnalysisError};

/// A latency objective: one type for goodput and for contracts on a percentile, with one
/// comparison rule (a value meets it when at most the threshold).
pub use servebench_metrics::Slo;
/// A latency metric of docs/metrics.md: the same metric an SLO constrains.
pub use servebench_metrics::SloMetric as LatencyMetric;

/// A percentile of a latency metric (`p99 TTFT`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LatencyStat {
    /// The metric.
    pub metric: LatencyMetric,
    /// The percentile, in (0, 100].
    pub percentile: f64,
}

impl LatencyStat {
    /// A percentile of a metric.
    pub fn new(metric: LatencyMetric, percentile: f64) -> LatencyStat {
        LatencyStat { metric, percentile }
    }

    fn same(&self, other: &LatencyStat) -> bool {
        self.metric == other.metric && (self.percentile - other.percentile).abs() < 1e-9
    }
}

impl fmt::Display for LatencyStat {
    /// `p99 TTFT`, `p99.9 ITL`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "p{} {}",
            trim_number(self.percentile),
            self.metric.label()
        )
    }
}

/// One load level of a sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepPoint {
    /// The offered load: requests per second (`f64::INFINITY` = unlimited) or concurrency.
    pub offered_load: f64,
    /// Achieved output tokens per second.
    pub throughput: f64,
    /// Latency percentiles measured at this load, milliseconds. TTFT and E2EL count from
    /// the intended send time when the client queued, so they are what a user saw.
    pub latencies: Vec<(LatencyStat, f64)>,
    /// The same percentiles from the send (the server's share alone), when they differ from
    /// `latencies`; empty means "the same". The saturation test reads these: it asks whether
    /// the server's own curve has bent, which the client queue would otherwise blur.
    pub server_latencies: Vec<(LatencyStat, f64)>,
    /// Requests actually sent per second, when measured (an open-loop point's honesty check
    /// against `offered_load`).
    pub achieved_rate: Option<f64>,
    /// The client fell behind the offered rate: such a point can never be the operating
    /// point, the knee or a capacity figure.
    pub overloaded: bool,
}

impl SweepPoint {
    /// A point that kept up with its offered load (no rate measured).
    pub fn new(offered_load: f64, throughput: f64, latencies: Vec<(LatencyStat, f64)>) -> Self {
        SweepPoint {
            offered_load,
            throughput,
            latencies,
            server_latencies: Vec::new(),
            achieved_rate: None,
            overloaded: false,
        }
    }

    /// The server's latency percentile (from the send), ms: `server_latencies` when given,
    /// else [`SweepPoint::latency`].
    pub fn server_latency(&self, stat: LatencyStat) -> Option<f64> {
        if self.server_latencies.is_empty() {
            return self.latency(stat);
        }
        self.server_latencies
            .iter()
            .find(|(s, _)| s.same(&stat))
            .map(|&(_, v)| v)
            .filter(|v| v.is_finite())
    }

    /// The measured value of a latency percentile, ms.
    pub fn latency(&self, stat: LatencyStat) -> Option<f64> {
        self.latencies
            .iter()
            .find(|(s, _)| s.same(&stat))
            .map(|&(_, v)| v)
            .filter(|v| v.is_finite())
    }
}

/// What the offered load of a sweep counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadKind {
    /// Requests per second (open loop).
    RequestRate,
    /// Concurrent users (closed loop).
    Concurrency,
}

impl LoadKind {
    /// `rate 8 req/s`, `rate unlimited`, `concurrency 16`.
    pub fn describe(self, load: f64) -> String {
        match self {
            LoadKind::RequestRate if load.is_infinite() => "rate unlimited".to_string(),
            LoadKind::RequestRate => format!("rate {} req/s", trim_number(load)),
            LoadKind::Concurrency => format!("concurrency {}", trim_number(load)),
        }
    }
}

/// A number with at most three decimals and no trailing zeros (`8`, `0.5`, `99.9`).
fn trim_number(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// Indices of the points on the Pareto frontier of (throughput ↑, latency ↓) for one latency
/// percentile, sorted by latency (and so by throughput) ascending. A point is on the
/// frontier when no other point has at least its throughput at no more latency, with one of
/// the two strictly better. Points lacking the percentile are ignored; of exact duplicates
/// the first is kept.
pub fn pareto_frontier(points: &[SweepPoint], stat: LatencyStat) -> Vec<usize> {
    let measured: Vec<(usize, f64, f64)> = points
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.latency(stat).map(|l| (i, p.throughput, l)))
        .filter(|&(_, t, _)| t.is_finite())
        .collect();
    let mut front: Vec<(usize, f64, f64)> = measured
        .iter()
        .copied()
        .filter(|&(i, t, l)| {
            !measured.iter().any(|&(j, t2, l2)| {
                let better = (t2 >= t && l2 <= l) && (t2 > t || l2 < l);
                let duplicate_before = t2 == t && l2 == l && j < i;
                j != i && (better || duplicate_before)
            })
        })
        .collect();
    front.sort_by(|a, b| a.2.total_cmp(&b.2).then(a.1.total_cmp(&b.1)));
    front.into_iter().map(|(i, _, _)| i).collect()
}

/// The knee of a sweep.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Knee {
    /// Index of the knee point in the sweep.
    pub index: usize,
    /// Its Kneedle difference `y_n − x_n` in [0, 1]: how far the curve bulges above the
    /// straight line from the first to the last frontier point.
    pub score: f64,
}

/// The knee of the throughput-versus-latency curve by the Kneedle method (Satopää et al.,
/// 2011): on the Pareto frontier sorted by latency, normalise latency `x` and throughput `y`
/// to [0, 1] and take the point that maximises `y_n − x_n`, the point farthest above the
/// chord from the lightest to the heaviest load. Past it, each gain in throughput costs a
/// growing amount of latency. `None` with fewer than three frontier points or when no point
/// lies above the chord (the curve has not bent yet: sweep higher loads).
///
/// Overloaded points take no part: their throughput is what the server sustained while a
/// queue grew, not an answer to the load offered, so the knee is never one of them.
pub fn knee(points: &[SweepPoint], stat: LatencyStat) -> Option<Knee> {
    let kept: Vec<usize> = (0..points.len())
        .filter(|&i| !points[i].overloaded)
        .collect();
    let subset: Vec<SweepPoint> = kept.iter().map(|&i| points[i].clone()).collect();
    knee_of(&subset, stat).map(|k| Knee {
        index: kept[k.index],
        score: k.score,
    })
}

fn knee_of(points: &[SweepPoint], stat: LatencyStat) -> Option<Knee> {
    let front = pareto_frontier(points, stat);
    if front.len() < 3 {
        return None;
    }
    let xy: Vec<(f64, f64)> = front
        .iter()
        .filter_map(|&i| points[i].latency(stat).map(|l| (l, points[i].throughput)))
        .collect();
    let (x0, x1) = (xy[0].0, xy[xy.len() - 1].0);
    let (y0, y1) = (xy[0].1, xy[xy.len() - 1].1);
    if x1 <= x0 || y1 <= y0 {
        return None;
    }
    let (k, score) = xy
        .iter()
        .enumerate()
        .map(|(k, &(x, y))| (k, (y - y0) / (y1 - y0) - (x - x0) / (x1 - x0)))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    (score > 0.0).then(|| Knee {
        index: front[k],
        score,
    })
}

/// The saturation test's thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SaturationRule {
    /// Throughput gains below this fraction count as "no longer rising" (0.05).
    pub min_gain: f64,
    /// Latency must grow by more than this factor (2.0).
    pub latency_factor: f64,
}

impl Default for SaturationRule {
    fn default() -> Self {
        SaturationRule {
            min_gain: 0.05,
            latency_factor: 2.0,
        }
    }
}

/// Where a sweep saturated.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Saturation {
    /// The first load (sweep index) found saturated.
    pub index: usize,
    /// The earlier load it is compared with.
    pub reference: usize,
    /// Relative throughput change from the reference (below `min_gain`, maybe negative).
    pub throughput_gain: f64,
    /// Latency at `index` over latency at `reference` (above `latency_factor`).
    pub latency_ratio: f64,
}

/// The saturation test: "achieved throughput no longer rises (< 5 % gain) while latency more
/// than doubles", on the server's latency (from the send, [`SweepPoint::server_latency`]). Points are taken in order of offered load; the first point `i` for which
/// some lighter point `j` has `throughput_i < (1 + min_gain)·throughput_j` and
/// `latency_i > latency_factor·latency_j` is saturated, compared with the lightest such `j`.
/// Comparing with every lighter point, not only the previous one, catches a plateau
/// reached in several small steps.
pub fn saturation(
    points: &[SweepPoint],
    stat: LatencyStat,
    rule: SaturationRule,
) -> Option<Saturation> {
    let mut order: Vec<usize> = (0..points.len()).collect();
    order.sort_by(|&a, &b| points[a].offered_load.total_cmp(&points[b].offered_load));
    for (pos, &i) in order.iter().enumerate() {
        let Some(li) = points[i].server_latency(stat) else {
            continue;
        };
        let ti = points[i].throughput;
        for &j in &order[..pos] {
            let Some(lj) = points[j].server_latency(stat) else {
                continue;
            };
            let tj = points[j].throughput;
            if tj <= 0.0 || lj <= 0.0 {
                continue;
            }
            if ti < (1.0 + rule.min_gain) * tj && li > rule.latency_factor * lj {
                return Some(Saturation {
                    index: i,
                    reference: j,
                    throughput_gain: ti / tj - 1.0,
                    latency_ratio: li / lj,
                });
            }
        }
    }
    None
}

/// What a sweep reads from an objective.
pub trait SloStat {
    /// The percentile the objective bounds. A per-request objective bounds every request,
    /// i.e. the maximum (p100).
    fn stat(&self) -> LatencyStat;
    /// Whether a point meets the objective ([`Slo::admits`] on the point's percentile); a
    /// point without the percentile does not.
    fn met_by(&self, point: &SweepPoint) -> bool;
}

impl SloStat for Slo {
    fn stat(&self) -> LatencyStat {
        LatencyStat::new(self.metric, self.percentile.unwrap_or(100.0))
    }

    fn met_by(&self, point: &SweepPoint) -> bool {
        point.latency(self.stat()).is_some_and(|v| self.admits(v))
    }
}

/// Parses SLOs such as `ttft:p99:500 tpot:p95:40` (items separated by spaces or commas;
/// percentiles `pNN`, `pNN.N` or `median`; thresholds in ms, an `ms` suffix allowed).
pub fn parse_slos(text: &str) -> Result<Vec<Slo>, AnalysisError> {
    let items: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|s| !s.is_empty())
        .collect();
    if items.is_empty() {
        return Err(AnalysisError::Slo {
            input: text.to_string(),
            message: "no objective given".into(),
        });
    }
    items.into_iter().map(parse_slo).collect()
}

fn parse_slo(item: &str) -> Result<Slo, AnalysisError> {
    let err = |message: String| AnalysisError::Slo {
        input: item.to_string(),
        message,
    };
    let mut parts: Vec<&str> = item.split(':').collect();
    // `ttft_p99:500` (the form `--goodput`-style contracts are often written in) is
    // `ttft:p99:500`.
    if let [head, ms] = parts.as_slice() {
        if let Some((metric, pct)) = head.rsplit_once('_') {
            parts = vec![metric, pct, ms];
        }
    }
    let [metric, pct, ms] = parts.as_slice() else {
        return Err(err(format!(
            "{} ':'-separated fields, expected 3",
            parts.len()
        )));
    };
    let metric: LatencyMetric = metric.parse().map_err(err)?;
    let pct_l = pct.to_ascii_lowercase();
    let percentile: f64 = if pct_l == "median" {
        50.0
    } else {
        pct_l
            .strip_prefix('p')
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| err(format!("percentile '{pct}' is not of the form pNN")))?
    };
    if !(percentile > 0.0 && percentile <= 100.0) {
        return Err(err(format!("percentile {percentile} is outside (0, 100]")));
    }
    let ms_text = ms.trim().trim_end_matches("ms");
    let threshold_ms: f64 = ms_text
        .parse()
        .map_err(|_| err(format!("threshold '{ms}' is not a number of milliseconds")))?;
    if !(threshold_ms.is_finite() && threshold_ms > 0.0) {
        return Err(err(format!("threshold {threshold_ms} ms must be positive")));
    }
    Ok(Slo::on_percentile(metric, percentile, threshold_ms))
}

/// The best load under a set of SLOs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SloOutcome {
    /// The objectives.
    pub slos: Vec<Slo>,
    /// The highest-throughput point meeting every objective (the lighter load on a tie);
    /// never an overloaded point.
    pub best: Option<usize>,
    /// One sentence: "X output tok/s at p99 TTFT < 500 ms and p95 TPOT < 40 ms (rate 8 req/s)".
    pub headline: String,
}

/// Finds the highest-throughput point that meets every SLO and states it in one sentence.
/// Fails when the sweep is empty, no SLO is given, or no point measured one of the SLO's
/// percentiles (a typo is more likely than a sweep that never met it).
pub fn best_under_slos(
    points: &[SweepPoint],
    slos: &[Slo],
    kind: LoadKind,
) -> Result<SloOutcome, AnalysisError> {
    if points.is_empty() {
        return Err(AnalysisError::Invalid("the sweep has no points".into()));
    }
    if slos.is_empty() {
        return Err(AnalysisError::Invalid("no SLO given".into()));
    }
    for slo in slos {
        if points.iter().all(|p| p.latency(slo.stat()).is_none()) {
            return Err(AnalysisError::Invalid(format!(
                "no sweep point measured {} (needed by the SLO {slo})",
                slo.stat()
            )));
        }
    }
    let conditions = slos
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" and ");
    let best = points
        .iter()
        .enumerate()
        .filter(|(_, p)| !p.overloaded && slos.iter().all(|s| s.met_by(p)))
        .max_by(|(_, a), (_, b)| {
            a.throughput
                .total_cmp(&b.throughput)
                .then(b.offered_load.total_cmp(&a.offered_load))
        })
        .map(|(i, _)| i);
    let headline = match best {
        Some(i) => format!(
            "{} output tok/s at {conditions} ({})",
            format_quantity(points[i].throughput.round(), ""),
            kind.describe(points[i].offered_load)
        ),
        None if points
            .iter()
            .any(|p| p.overloaded && slos.iter().all(|s| s.met_by(p))) =>
        {
            let overloaded: Vec<String> = points
                .iter()
                .filter(|p| p.overloaded)
                .map(|p| kind.describe(p.offered_load))
                .collect();
            format!(
                "no load that the client could send meets {conditions}; overloaded (achieved \
                 rate short of offered, never an operating point): {}",
                overloaded.join(", ")
            )
        }
        None => {
            let lightest = points
                .iter()
                .min_by(|a, b| a.offered_load.total_cmp(&b.offered_load))
                .unwrap_or(&points[0]);
            let measured = slos
                .iter()
                .map(|s| match lightest.latency(s.stat()) {
                    Some(v) => format!("{} {}", s.stat(), format_quantity(v / 1e3, "s")),
                    None => format!("{} unmeasured", s.stat()),
                })
                .collect::<Vec<_>>()
                .join(" and ");
            format!(
                "no load meets {conditions}; the lightest ({}) has {measured}",
                kind.describe(lightest.offered_load)
            )
        }
    };
    Ok(SloOutcome {
        slos: slos.to_vec(),
        best,
        headline,
    })
}

/// Everything a sweep report states about one latency percentile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepAnalysis {
    /// The percentile the frontier, knee and saturation use.
    pub stat: LatencyStat,
    /// Frontier indices, by latency ascending.
    pub frontier: Vec<usize>,
    /// The knee, if the curve has bent.
    pub knee: Option<Knee>,
    /// The saturation point, if reached.
    pub saturation: Option<Saturation>,
    /// The best point under the SLOs, when SLOs were given.
    pub slo: Option<SloOutcome>,
}

/// Runs every sweep analysis on one latency percentile (and the SLOs, if any).
pub fn analyze_sweep(
    points: &[SweepPoint],
    stat: LatencyStat,
    slos: &[Slo],
    kind: LoadKind,
) -> Result<SweepAnalysis, AnalysisError> {
    let slo = if slos.is_empty() {
        None
    } else {
        Some(best_under_slos(points, slos, kind)?)
    };
    Ok(SweepAnalysis {
        stat,
        frontier: pareto_frontier(points, stat),
        knee: knee(points, stat),
        saturation: saturation(points, stat, SaturationRule::default()),
        slo,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const P99_TTFT: LatencyStat = LatencyStat {
        metric: LatencyMetric::Ttft,
        percentile: 99.0,
    };
    const P95_TPOT: LatencyStat = LatencyStat {
        metric: LatencyMetric::Tpot,
        percentile: 95.0,
    };

    fn point(load: f64, tput: f64, ttft: f64, tpot: f64) -> SweepPoint {
        SweepPoint::new(load, tput, vec![(P99_TTFT, ttft), (P95_TPOT, tpot)])
    }

    /// A typical open-loop sweep: throughput follows the rate, then flattens while TTFT
    /// explodes past rate 16.
    fn sweep() -> Vec<SweepPoint> {
        vec![
            point(1.0, 250.0, 60.0, 7.0),
            point(2.0, 500.0, 65.0, 7.5),
            point(4.0, 1000.0, 80.0, 9.0),
            point(8.0, 1950.0, 140.0, 14.0),
            point(16.0, 3500.0, 420.0, 31.0),
            point(24.0, 3700.0, 2600.0, 45.0),
            point(32.0, 3720.0, 9000.0, 46.0),
        ]
    }

    #[test]
    fn frontier_drops_dominated_points() {
        let mut pts = sweep();
        // Same throughput as rate 16 at more latency: dominated.
        pts.push(point(20.0, 3500.0, 900.0, 35.0));
        // Less throughput at more latency than rate 4: dominated.
        pts.push(point(5.0, 900.0, 100.0, 10.0));
        let f = pareto_frontier(&pts, P99_TTFT);
        assert_eq!(f, vec![0, 1, 2, 3, 4, 5, 6]);
        // A point missing the percentile is ignored.
        let mut pts = sweep();
        pts[3].latencies.clear();
        assert!(!pareto_frontier(&pts, P99_TTFT).contains(&3));
    }

    #[test]
    fn knee_is_where_throughput_stops_paying_for_latency() {
        let k = knee(&sweep(), P99_TTFT).unwrap();
        // Rate 16: 3500/3720 of the throughput at 420/9000 of the latency range.
        assert_eq!(k.index, 4);
        let expected = (3500.0 - 250.0) / (3720.0 - 250.0) - (420.0 - 60.0) / (9000.0 - 60.0);
        assert!((k.score - expected).abs() < 1e-12);
        // Input order does not matter.
        let mut shuffled = sweep();
        shuffled.reverse();
        assert_eq!(knee(&shuffled, P99_TTFT).unwrap().index, 2);
    }

    /// Row D under a concurrency cap: every rate above 1 req/s achieves ≈ 0.94 req/s, and
    /// its latencies from the send look as good as the lightest point's.
    fn capped_sweep() -> Vec<SweepPoint> {
        let mut pts = vec![
            point(1.0, 912.0, 61.0, 8.3),
            point(2.0, 925.0, 57.0, 8.3),
            point(4.0, 945.0, 59.0, 8.3),
            point(8.0, 955.0, 64.0, 8.3),
            point(16.0, 959.0, 70.0, 8.3),
        ];
        for p in &mut pts[1..] {
            p.overloaded = true;
            p.achieved_rate = Some(0.94);
        }
        pts
    }

    #[test]
    fn an_overloaded_point_is_never_the_best_under_slos() {
        let slos = parse_slos("ttft:p99:500 tpot:p95:40").unwrap();
        let o = best_under_slos(&capped_sweep(), &slos, LoadKind::RequestRate).unwrap();
        assert_eq!(o.best, Some(0), "{}", o.headline);
        assert!(o.headline.ends_with("(rate 1 req/s)"), "{}", o.headline);
        let mut all = capped_sweep();
        all[0].overloaded = true;
        let o = best_under_slos(&all, &slos, LoadKind::RequestRate).unwrap();
        assert_eq!(o.best, None);
        assert!(o.headline.contains("overloaded"), "{}", o.headline);
        assert!(o.headline.contains("rate 16 req/s"), "{}", o.headline);
    }

    #[test]
    fn an_overloaded_point_is_never_the_knee() {
        let mut pts = sweep();
        assert_eq!(knee(&pts, P99_TTFT).unwrap().index, 4);
        pts[4].overloaded = true;
        let k = knee(&pts, P99_TTFT).unwrap();
        assert_ne!(k.index, 4);
        assert!(!pts[k.index].overloaded);
        assert_eq!(knee(&capped_sweep(), P99_TTFT), None);
    }

    #[test]
    fn saturation_reads_the_servers_latency_not_the_client_queue() {
        // User TTFT doubles with the client queue, the server's own TTFT does not.
        let mut pts = vec![
            point(10.0, 1000.0, 100.0, 1.0),
            point(20.0, 1010.0, 250.0, 1.0),
        ];
        assert!(saturation(&pts, P99_TTFT, SaturationRule::default()).is_some());
        pts[1].server_latencies = vec![(P99_TTFT, 110.0)];
        assert!(saturation(&pts, P99_TTFT, SaturationRule::default()).is_none());
    }

    #[test]
    fn no_knee_before_the_curve_bends() {
        // Throughput still grows linearly with latency: nothing lies above the chord.
        let pts = vec![
            point(1.0, 100.0, 10.0, 1.0),
            point(2.0, 200.0, 20.0, 1.0),
            point(3.0, 300.0, 30.0, 1.0),
        ];
        assert_eq!(knee(&pts, P99_TTFT), None);
        assert_eq!(knee(&sweep()[..2], P99_TTFT), None);
    }

    #[test]
    fn saturation_needs_flat_throughput_and_doubled_latency() {
        let s = saturation(&sweep(), P99_TTFT, SaturationRule::default()).unwrap();
        // Rate 24: +5.7 % over rate 16 is still a gain ≥ 5 %; rate 32 is +0.5 % over rate 24
        // while p99 TTFT goes 2.6 s → 9 s.
        assert_eq!((s.index, s.reference), (6, 5));
        assert!((s.throughput_gain - (3720.0 / 3700.0 - 1.0)).abs() < 1e-12);
        assert!((s.latency_ratio - 9000.0 / 2600.0).abs() < 1e-12);
        // A plateau reached in small steps: each step doubles no latency, but the third point
        // has < 5 % more throughput than the first at > 2× its latency.
        let pts = vec![
            point(10.0, 1000.0, 100.0, 1.0),
            point(11.0, 1020.0, 160.0, 1.0),
            point(12.0, 1030.0, 250.0, 1.0),
        ];
        let s = saturation(&pts, P99_TTFT, SaturationRule::default()).unwrap();
        assert_eq!((s.index, s.reference), (2, 0));
        // Healthy scaling never saturates.
        assert_eq!(
            saturation(&sweep()[..5], P99_TTFT, SaturationRule::default()),
            None
        );
    }

    #[test]
    fn slo_syntax() {
        let slos = parse_slos("ttft:p99:500 tpot:p95:40").unwrap();
        assert_eq!(slos.len(), 2);
        assert_eq!(slos[0].stat(), P99_TTFT);
        assert_eq!(slos[0].threshold_ms, 500.0);
        assert_eq!(slos[1].stat(), P95_TPOT);
        assert_eq!(slos[1].to_string(), "p95 TPOT < 40 ms");
        let slos = parse_slos("itl:p99.9:200ms,e2el:median:3000").unwrap();
        assert_eq!(slos[0].stat().percentile, 99.9);
        assert_eq!(slos[0].to_string(), "p99.9 ITL < 200 ms");
        assert_eq!(slos[1].stat(), LatencyStat::new(LatencyMetric::E2el, 50.0));
        assert_eq!(parse_slos("TTFT:P99:500").unwrap()[0].stat(), P99_TTFT);
        let short = parse_slos("ttft_p99:500,tpot_p95:40").unwrap();
        assert_eq!(short, parse_slos("ttft:p99:500 tpot:p95:40").unwrap());
    }

    #[test]
    fn slo_syntax_errors_name_the_item() {
        let e = |s: &str| parse_slos(s).unwrap_err().to_string();
        assert!(e("ttft:p99").contains("'ttft:p99': 2 ':'-separated fields"));
        assert!(e("ttfb:p99:500").contains("unknown metric 'ttfb'"));
        assert!(e("ttft:99:500").contains("not of the form pNN"));
        assert!(e("ttft:p0:500").contains("outside (0, 100]"));
        assert!(e("ttft:p99:fast").contains("not a number"));
        assert!(e("ttft:p99:-5").contains("must be positive"));
        assert!(e("  ").contains("no objective"));
    }

    #[test]
    fn best_point_under_slos_and_its_headline() {
        let slos = parse_slos("ttft:p99:500 tpot:p95:40").unwrap();
        let out = best_under_slos(&sweep(), &slos, LoadKind::RequestRate).unwrap();
        assert_eq!(out.best, Some(4));
        assert_eq!(
            out.headline,
            "3,500 output tok/s at p99 TTFT < 500 ms and p95 TPOT < 40 ms (rate 16 req/s)"
        );
        // A tighter TPOT bound moves the answer down to rate 8.
        let slos = parse_slos("ttft:p99:500 tpot:p95:20").unwrap();
        let out = best_under_slos(&sweep(), &slos, LoadKind::RequestRate).unwrap();
        assert_eq!(out.best, Some(3));
        assert!(
            out.headline.starts_with("1,950 output tok/s"),
            "{}",
            out.headline
        );
        assert!(out.headline.ends_with("(rate 8 req/s)"));
        // The bound is inclusive, as vLLM's goodput: rate 16's p99 TTFT of exactly 420 ms
        // meets 420 ms, and misses anything below it.
        let slos = parse_slos("ttft:p99:420").unwrap();
        let out = best_under_slos(&sweep(), &slos, LoadKind::Concurrency).unwrap();
        assert_eq!(out.best, Some(4));
        assert!(
            out.headline.ends_with("(concurrency 16)"),
            "{}",
            out.headline
        );
        let slos = parse_slos("ttft:p99:419.9").unwrap();
        let out = best_under_slos(&sweep(), &slos, LoadKind::Concurrency).unwrap();
        assert_eq!(out.best, Some(3));
        assert!(
            out.headline.ends_with("(concurrency 8)"),
            "{}",
            out.headline
        );
    }

    #[test]
    fn no_point_meeting_the_slos_says_how_far_off_the_lightest_is() {
        let slos = parse_slos("ttft:p99:50").unwrap();
        let out = best_under_slos(&sweep(), &slos, LoadKind::RequestRate).unwrap();
        assert_eq!(out.best, None);
        assert_eq!(
            out.headline,
            "no load meets p99 TTFT < 50 ms; the lightest (rate 1 req/s) has p99 TTFT 60.0 ms"
        );
        // An SLO on a percentile nobody measured is an error, not a silent "no".
        let slos = parse_slos("itl:p99:50").unwrap();
        let e = best_under_slos(&sweep(), &slos, LoadKind::RequestRate).unwrap_err();
        assert!(
            e.to_string().contains("no sweep point measured p99 ITL"),
            "{e}"
        );
    }

    #[test]
    fn unlimited_rate_reads_as_such() {
        let mut pts = sweep();
        pts[6].offered_load = f64::INFINITY;
        let slos = parse_slos("tpot:p95:50").unwrap();
        let out = best_under_slos(&pts, &slos, LoadKind::RequestRate).unwrap();
        assert_eq!(out.best, Some(6));
        assert!(
            out.headline.ends_with("(rate unlimited)"),
            "{}",
            out.headline
        );
    }

    #[test]
    fn analyze_sweep_combines_everything() {
        let slos = parse_slos("ttft:p99:500").unwrap();
        let a = analyze_sweep(&sweep(), P99_TTFT, &slos, LoadKind::RequestRate).unwrap();
        assert_eq!(a.frontier.len(), 7);
        assert_eq!(a.knee.unwrap().index, 4);
        assert_eq!(a.saturation.unwrap().index, 6);
        assert_eq!(a.slo.unwrap().best, Some(4));
        let json = serde_json::to_value(
            analyze_sweep(&sweep(), P99_TTFT, &[], LoadKind::RequestRate).unwrap(),
        )
        .unwrap();
        assert_eq!(json["stat"]["metric"], "ttft");
        assert!(json["slo"].is_null());
    }
}
