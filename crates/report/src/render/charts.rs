//! The report's charts, built from the model: the sweep frontier, latency CDFs, and
//! throughput and latency over time. Values come from saved summaries or, for per-request
//! views, from the records through `servebench_metrics`' own derived metrics.

use servebench_metrics::stats::percentile_sorted;
use servebench_metrics::units::{ns_f64_to_ms, ns_to_ms, ns_to_s};
use servebench_metrics::RequestRecord;

use super::figures::{stat_label, sweep_axes, GroupFigures};
use super::format::{load, ms, rate, slug};
use super::svg::{Chart, Mark, RefLine, Series, SeriesKind};
use crate::model::{ExperimentReport, RunData, SweepReport};

/// Points kept on a CDF curve (quantiles); enough for a smooth line, small enough for a page.
const CDF_POINTS: usize = 200;
/// Most dots one scatter series draws; beyond this every k-th request is shown.
const SCATTER_MAX: usize = 1500;

/// A set of runs shown as one series: a matrix row, or a sweep point.
#[derive(Debug, Clone)]
pub struct Group<'a> {
    /// Unique key used in element ids (`A`, `point-3`).
    pub key: String,
    /// Legend label.
    pub label: String,
    /// The runs (repeats) of the group.
    pub runs: &'a [RunData],
}

/// The groups of a report: its rows that have runs, then its sweep points.
pub fn groups(report: &ExperimentReport) -> Vec<Group<'_>> {
    let mut out: Vec<Group<'_>> = report
        .rows
        .iter()
        .filter(|r| !r.runs.is_empty())
        .map(|r| Group {
            key: slug(&r.id),
            label: if r.name.is_empty() || r.name == r.id {
                r.id.clone()
            } else {
                format!("{} · {}", r.id, r.name)
            },
            runs: &r.runs,
        })
        .collect();
    if let Some(sweep) = &report.sweep {
        for (i, p) in sweep.points.iter().enumerate() {
            if p.runs.is_empty() {
                continue;
            }
            out.push(Group {
                key: format!("point-{i}"),
                label: point_label(sweep, p.value),
                runs: &p.runs,
            });
        }
    }
    out
}

/// `rate 4 req/s`, `concurrency 16`.
pub fn point_label(sweep: &SweepReport, value: f64) -> String {
    match sweep.variable.as_str() {
        "request_rate" if value.is_infinite() => "rate unlimited".into(),
        "request_rate" => format!("rate {} req/s", load(value)),
        "max_concurrency" => format!("concurrency {}", load(value)),
        other => format!("{other} {}", load(value)),
    }
}

/// One frontier chart per latency percentile the sweep's SLOs constrain (p99 TTFT without
/// SLOs), with the SLO thresholds as lines and the knee marked on the first.
pub fn frontier_charts(sweep: &SweepReport) -> Vec<Chart> {
    let axes = sweep_axes(sweep);
    let figures: Vec<GroupFigures> = sweep
        .points
        .iter()
        .map(|p| GroupFigures::of(&p.runs))
        .collect();
    axes.iter()
        .enumerate()
        .map(|(k, axis)| {
            let stat = stat_label(&axis.metric, axis.percentile);
            let id = format!("frontier-{}-p{}", axis.metric, slug(&load(axis.percentile)));
            let mut points = Vec::new();
            let mut tooltips = Vec::new();
            for (p, f) in sweep.points.iter().zip(&figures) {
                let x = f.output_throughput.value.unwrap_or(f64::NAN);
                let y = f
                    .latency(&axis.metric, axis.percentile)
                    .value
                    .unwrap_or(f64::NAN);
                points.push((x, y));
                tooltips.push(format!(
                    "{}: {} output tok/s, {stat} {} ms",
                    point_label(sweep, p.value),
                    rate(x),
                    ms(y)
                ));
            }
            let ref_lines = axis
                .slo_ms
                .iter()
                .map(|&t| RefLine {
                    y: t,
                    label: format!("SLO {stat} < {} ms", load(t)),
                    class: "slo".into(),
                })
                .collect();
            let marks = match sweep.knee {
                Some(i) if k == 0 && i < points.len() => vec![Mark {
                    id: "knee".into(),
                    x: points[i].0,
                    y: points[i].1,
                    label: format!("knee: {}", point_label(sweep, sweep.points[i].value)),
                }],
                _ => Vec::new(),
            };
            Chart {
                id: id.clone(),
                title: format!("Throughput–latency frontier: output tok/s vs {stat}"),
                x_label: "output throughput (tok/s)".into(),
                y_label: format!("{stat} (ms)"),
                series: vec![Series {
                    id: format!("{id}-points"),
                    label: format!("sweep of {} over row {}", sweep.variable, sweep.row),
                    points,
                    tooltips,
                    kind: SeriesKind::LineMarkers,
                    color: 0,
                }],
                ref_lines,
                marks,
                x_from_zero: true,
                x_log: false,
                y_from_zero: true,
                note: None,
                x_max: None,
                v_lines: Vec::new(),
                bands: Vec::new(),
                whiskers: Vec::new(),
            }
        })
        .collect()
}

/// Per-request samples of a latency metric, ms: `ttft`, `tpot`, `e2el` (one per completed
/// request) or `itl` (every gap).
pub fn samples_ms(records: &[RequestRecord], metric: &str) -> Vec<f64> {
    let ok = records.iter().filter(|r| r.is_success());
    match metric {
        "ttft" => ok.filter_map(|r| r.ttft_ns()).map(ns_to_ms).collect(),
        "tpot" => ok.filter_map(|r| r.tpot_ns()).map(ns_f64_to_ms).collect(),
        "e2el" => ok.filter_map(|r| r.e2el_ns()).map(ns_to_ms).collect(),
        "itl" => ok.flat_map(|r| r.itls_ns()).map(ns_to_ms).collect(),
        _ => Vec::new(),
    }
}

/// Empirical CDF points `(value, fraction ≤ value)`, reduced to at most `CDF_POINTS`
/// quantiles for large samples.
pub fn cdf_points(mut samples: Vec<f64>) -> Vec<(f64, f64)> {
    samples.retain(|v| v.is_finite());
    samples.sort_unstable_by(f64::total_cmp);
    let n = samples.len();
    if n == 0 {
        return Vec::new();
    }
    if n <= CDF_POINTS {
        return samples
            .iter()
            .enumerate()
            .map(|(i, &v)| (v, (i + 1) as f64 / n as f64))
            .collect();
    }
    (0..=CDF_POINTS)
        .filter_map(|k| {
            let q = k as f64 / CDF_POINTS as f64;
            percentile_sorted(&samples, q * 100.0).map(|v| (v, q))
        })
        .collect()
}

/// The CDF of one latency metric, one series per group (repeats pooled).
pub fn cdf_chart(groups: &[Group<'_>], metric: &str) -> Chart {
    let label = metric.to_ascii_uppercase();
    let mut missing = Vec::new();
    let series: Vec<Series> = groups
        .iter()
        .enumerate()
        .filter_map(|(i, g)| {
            let samples: Vec<f64> = g
                .runs
                .iter()
                .flat_map(|r| samples_ms(&r.records, metric))
                .collect();
            if samples.is_empty() {
                missing.push(g.label.clone());
                return None;
            }
            let n = samples.len();
            let points = cdf_points(samples);
            let tooltips = points
                .iter()
                .map(|(v, q)| format!("{}: {:.1} % ≤ {} ms (n = {n})", g.label, q * 100.0, ms(*v)))
                .collect();
            Some(Series {
                id: format!("cdf-{metric}-{}", g.key),
                label: g.label.clone(),
                points,
                tooltips,
                kind: SeriesKind::Line,
                color: i,
            })
        })
        .collect();
    // A long tail squeezes the body of a linear axis into one corner; past a 20× spread the
    // x axis turns logarithmic.
    let (lo, hi) = series
        .iter()
        .flat_map(|s: &Series| s.points.iter().map(|p| p.0))
        .filter(|v| *v > 0.0)
        .fold((f64::INFINITY, 0.0_f64), |(l, h), v| (l.min(v), h.max(v)));
    let x_log = lo.is_finite() && hi / lo > 20.0;
    Chart {
        id: format!("cdf-{metric}"),
        x_log,
        title: format!(
            "{label} distribution (CDF, per request{})",
            if metric == "itl" { " gap" } else { "" }
        ),
        x_label: format!("{label} (ms{})", if x_log { ", log scale" } else { "" }),
        y_label: "fraction of samples ≤ x".into(),
        series,
        x_from_zero: true,
        y_from_zero: true,
        note: (!missing.is_empty())
            .then(|| format!("no per-request records for: {}", missing.join(", "))),
        ..Chart::default()
    }
}

/// Output tokens per second over the run, one line per group (first run of each).
pub fn throughput_over_time(groups: &[Group<'_>]) -> Chart {
    let series = groups
        .iter()
        .enumerate()
        .filter_map(|(i, g)| {
            let ts = &g.runs.first()?.summary.time_series;
            let width = ns_to_s(ts.bucket_ns.max(1));
            let points: Vec<(f64, f64)> = ts
                .output_tokens
                .iter()
                .enumerate()
                .map(|(k, &tok)| ((k as f64 + 0.5) * width, tok / width))
                .collect();
            let tooltips = points
                .iter()
                .map(|(t, v)| format!("{}: {} tok/s around t = {:.1} s", g.label, rate(*v), t))
                .collect();
            Some(Series {
                id: format!("ts-output-{}", g.key),
                label: g.label.clone(),
                points,
                tooltips,
                kind: SeriesKind::Line,
                color: i,
            })
        })
        .collect();
    Chart {
        id: "ts-output".into(),
        title: "Output throughput over time (per 1 s bucket)".into(),
        x_label: "time since run start (s)".into(),
        y_label: "output tok/s".into(),
        series,
        x_from_zero: true,
        y_from_zero: true,
        note: repeat_note(groups),
        ..Chart::default()
    }
}

/// Requests in flight over the run (time-averaged per bucket), one line per group.
pub fn in_flight_over_time(groups: &[Group<'_>]) -> Chart {
    let series = groups
        .iter()
        .enumerate()
        .filter_map(|(i, g)| {
            let ts = &g.runs.first()?.summary.time_series;
            let width = ns_to_s(ts.bucket_ns.max(1));
            let points: Vec<(f64, f64)> = ts
                .in_flight_mean
                .iter()
                .enumerate()
                .map(|(k, &v)| ((k as f64 + 0.5) * width, v))
                .collect();
            let tooltips = points
                .iter()
                .map(|(t, v)| format!("{}: {v:.1} in flight around t = {t:.1} s", g.label))
                .collect();
            Some(Series {
                id: format!("ts-inflight-{}", g.key),
                label: g.label.clone(),
                points,
                tooltips,
                kind: SeriesKind::Line,
                color: i,
            })
        })
        .collect();
    Chart {
        id: "ts-inflight".into(),
        title: "Requests in flight over time (mean per 1 s bucket)".into(),
        x_label: "time since run start (s)".into(),
        y_label: "requests in flight".into(),
        series,
        x_from_zero: true,
        y_from_zero: true,
        note: repeat_note(groups),
        ..Chart::default()
    }
}

/// One dot per request: a latency metric (`ttft`, `tpot`, `e2el`) against the time the
/// request was sent, one series per group (first run of each).
pub fn latency_over_time(groups: &[Group<'_>], metric: &str) -> Chart {
    let label = metric.to_ascii_uppercase();
    let mut strides = Vec::new();
    let series = groups
        .iter()
        .enumerate()
        .filter_map(|(i, g)| {
            let run = g.runs.first()?;
            let origin = run.summary.time_series.origin_ns;
            let all: Vec<(f64, f64)> = run
                .records
                .iter()
                .filter(|r| r.is_success())
                .filter_map(|r| {
                    let v = match metric {
                        "ttft" => r.ttft_ns().map(|v| v as f64),
                        "tpot" => r.tpot_ns(),
                        "e2el" => r.e2el_ns().map(|v| v as f64),
                        _ => None,
                    }?;
                    Some((ns_to_s(r.sent.saturating_sub(origin)), ns_f64_to_ms(v)))
                })
                .collect();
            if all.is_empty() {
                return None;
            }
            let stride = all.len().div_ceil(SCATTER_MAX);
            if stride > 1 {
                strides.push(format!("{}: every {stride}th request", g.label));
            }
            let points: Vec<(f64, f64)> = all.into_iter().step_by(stride).collect();
            let tooltips = points
                .iter()
                .map(|(t, v)| format!("{}: {label} {} ms, sent at {t:.2} s", g.label, ms(*v)))
                .collect();
            Some(Series {
                id: format!("ts-{metric}-{}", g.key),
                label: g.label.clone(),
                points,
                tooltips,
                kind: SeriesKind::Scatter,
                color: i,
            })
        })
        .collect();
    let mut notes: Vec<String> = repeat_note(groups).into_iter().collect();
    if !strides.is_empty() {
        notes.push(format!("shown: {}", strides.join("; ")));
    }
    Chart {
        id: format!("ts-{metric}"),
        title: format!("{label} of each request over time"),
        x_label: "request sent at (s since run start)".into(),
        y_label: format!("{label} (ms)"),
        series,
        x_from_zero: true,
        y_from_zero: true,
        note: (!notes.is_empty()).then(|| notes.join(". ")),
        ..Chart::default()
    }
}

fn repeat_note(groups: &[Group<'_>]) -> Option<String> {
    groups
        .iter()
        .any(|g| g.runs.len() > 1)
        .then(|| "groups with repeated runs show their first run".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_samples_keep_every_step_of_the_cdf() {
        let pts = cdf_points(vec![3.0, 1.0, 2.0, f64::NAN]);
        assert_eq!(pts, vec![(1.0, 1.0 / 3.0), (2.0, 2.0 / 3.0), (3.0, 1.0)]);
        assert!(cdf_points(Vec::new()).is_empty());
    }

    #[test]
    fn large_samples_are_reduced_to_quantiles() {
        let pts = cdf_points((0..10_001).map(f64::from).collect());
        assert_eq!(pts.len(), CDF_POINTS + 1);
        assert_eq!(pts[0], (0.0, 0.0));
        assert_eq!(pts[CDF_POINTS], (10_000.0, 1.0));
        assert_eq!(pts[CDF_POINTS / 2], (5_000.0, 0.5));
    }
}
