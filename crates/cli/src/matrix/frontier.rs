//! From measured sweep points (run summaries) to the analysis layer's [`SweepPoint`]s, the
//! early-stop rule, and the terminal frontier table.

use anyhow::{bail, Result};
use servebench_analysis::frontier::LatencyMetric;
use servebench_analysis::frontier::{
    parse_slos, saturation, LatencyStat, LoadKind, SaturationRule, Slo, SloStat, SweepAnalysis,
    SweepPoint,
};
use servebench_metrics::validity::RunValidity;
use servebench_metrics::RunSummary;

/// Parses a latency percentile such as `ttft:p99` (or `e2el:median`).
pub fn parse_stat(text: &str) -> Result<LatencyStat> {
    let slos = parse_slos(&format!("{}:1", text.trim()))
        .map_err(|e| anyhow::anyhow!("--latency-metric {text:?}: {e}"))?;
    match slos.as_slice() {
        [one] => Ok(one.stat()),
        _ => bail!("--latency-metric {text:?}: expected one METRIC:pNN, e.g. ttft:p99"),
    }
}

/// The percentiles a run must report for `stats` beyond the always-reported 50/90/95/99,
/// as a `--metric-percentiles` value (`None` when nothing extra is needed).
pub fn extra_percentiles(stats: &[LatencyStat]) -> Option<String> {
    let mut extra: Vec<f64> = Vec::new();
    for s in stats {
        let p = s.percentile;
        let standard = [50.0, 90.0, 95.0, 99.0]
            .iter()
            .any(|q| (q - p).abs() < 1e-9);
        if !standard && !extra.iter().any(|q| (q - p).abs() < 1e-9) {
            extra.push(p);
        }
    }
    if extra.is_empty() {
        return None;
    }
    extra.insert(0, 99.0);
    Some(
        extra
            .iter()
            .map(|p| format!("{p}"))
            .collect::<Vec<_>>()
            .join(","),
    )
}

/// The value of a latency percentile in one run, ms.
pub fn latency(summary: &RunSummary, stat: LatencyStat) -> Option<f64> {
    let v = summary
        .metric(stat.metric.as_str())?
        .percentile(stat.percentile)?
        .value;
    v.is_finite().then_some(v)
}

/// The value of a latency percentile as the run's users saw it, ms: when the client queued
/// any request, TTFT and E2EL count from the intended send time (user TTFT = queue + TTFT),
/// so a point whose requests waited in the client is not judged on the server's share alone.
pub fn user_latency(summary: &RunSummary, stat: LatencyStat) -> Option<f64> {
    let queued = summary.queue.max.is_some_and(|q| q > 0.0);
    let name = match (stat.metric, queued) {
        (LatencyMetric::Ttft, true) => "user_ttft",
        (LatencyMetric::E2el, true) => "user_e2el",
        (m, _) => m.as_str(),
    };
    let v = summary.metric(name)?.percentile(stat.percentile)?.value;
    v.is_finite().then_some(v)
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = values.collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// One sweep point from its runs: output throughput and each percentile (as users saw it,
/// see [`user_latency`]) averaged across the repeats (a percentile absent from every run is
/// left out); the achieved rate averaged, and overloaded when any run was.
pub fn sweep_point(
    offered_load: f64,
    runs: &[RunSummary],
    validity: &[Option<RunValidity>],
    stats: &[LatencyStat],
) -> SweepPoint {
    let mut p = SweepPoint::new(
        offered_load,
        mean(runs.iter().map(|r| r.output_throughput)).unwrap_or(0.0),
        stats
            .iter()
            .filter_map(|&s| mean(runs.iter().filter_map(|r| user_latency(r, s))).map(|v| (s, v)))
            .collect(),
    );
    let queued = runs.iter().any(|r| r.queue.max.is_some_and(|q| q > 0.0));
    if queued {
        p.server_latencies = stats
            .iter()
            .filter_map(|&s| mean(runs.iter().filter_map(|r| latency(r, s))).map(|v| (s, v)))
            .collect();
    }
    let loads = validity.iter().flatten().filter_map(|v| v.load);
    p.achieved_rate = mean(loads.clone().filter_map(|l| l.achieved_rate));
    p.overloaded = validity.iter().flatten().any(RunValidity::overloaded);
    p
}

/// Whether the newest point is past saturation, and the sentence saying so.
pub fn past_saturation(points: &[SweepPoint], stat: LatencyStat, kind: LoadKind) -> Option<String> {
    let s = saturation(points, stat, SaturationRule::default())?;
    Some(format!(
        "{} is past saturation: output throughput {:+.0}% over {} while {stat} grew ×{:.1}",
        kind.describe(points[s.index].offered_load),
        s.throughput_gain * 100.0,
        kind.describe(points[s.reference].offered_load),
        s.latency_ratio,
    ))
}

/// The frontier table: every point with its offered load, achieved rate, throughput,
/// percentiles (as users saw them) and verdict, marked overloaded / frontier / knee /
/// saturated / best under the SLOs.
pub fn render_table(
    points: &[SweepPoint],
    analysis: &SweepAnalysis,
    slos: &[Slo],
    kind: LoadKind,
    verdicts: &[String],
) -> String {
    let mut stats = vec![analysis.stat];
    for s in slos {
        if !stats.iter().any(|t| {
            t.metric == s.stat().metric && (t.percentile - s.stat().percentile).abs() < 1e-9
        }) {
            stats.push(s.stat());
        }
    }
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut header = vec![
        "#".to_owned(),
        "load".to_owned(),
        "achieved req/s".to_owned(),
        "out tok/s".to_owned(),
    ];
    header.extend(stats.iter().map(|s| format!("{s} ms")));
    header.push("verdict".to_owned());
    header.push(String::new());
    rows.push(header);
    for (i, p) in points.iter().enumerate() {
        let mut r = vec![
            i.to_string(),
            kind.describe(p.offered_load),
            p.achieved_rate
                .map_or_else(|| "-".to_owned(), |a| format!("{a:.2}")),
            format!("{:.1}", p.throughput),
        ];
        r.extend(stats.iter().map(|&s| {
            p.latency(s)
                .map(|v| format!("{v:.1}"))
                .unwrap_or_else(|| "-".into())
        }));
        r.push(verdicts.get(i).cloned().unwrap_or_else(|| "-".to_owned()));
        let mut marks = Vec::new();
        if p.overloaded {
            marks.push("OVERLOADED");
        }
        if analysis.frontier.contains(&i) {
            marks.push("frontier");
        }
        if analysis.knee.map(|k| k.index) == Some(i) {
            marks.push("KNEE");
        }
        if analysis.saturation.map(|s| s.index) == Some(i) {
            marks.push("saturated");
        }
        if analysis.slo.as_ref().and_then(|o| o.best) == Some(i) {
            marks.push("best under SLO");
        }
        r.push(marks.join(", "));
        rows.push(r);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in &rows {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, s)| {
                let pad = " ".repeat(widths[c].saturating_sub(s.chars().count()));
                if c == 1 || c + 2 >= r.len() {
                    format!("{s}{pad}")
                } else {
                    format!("{pad}{s}")
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use servebench_metrics::{summarize, MetricSummary, SummaryOptions};

    fn summary(ttft_ms: f64, queue_ms: f64) -> RunSummary {
        let ms = |v: f64| MetricSummary::from_ms(vec![v; 10], &[99.0]);
        let mut s = summarize(&[], &SummaryOptions::default());
        s.output_throughput = 900.0;
        s.ttft = ms(ttft_ms);
        s.queue = ms(queue_ms);
        s.user_ttft = ms(ttft_ms + queue_ms);
        s
    }

    #[test]
    fn sweep_points_judge_ttft_from_the_intended_send_when_the_client_queued() {
        let stat = LatencyStat::new(LatencyMetric::Ttft, 99.0);
        let p = sweep_point(4.0, &[summary(60.0, 0.0)], &[None], &[stat]);
        assert_eq!(p.latency(stat), Some(60.0));
        let p = sweep_point(4.0, &[summary(60.0, 150_000.0)], &[None], &[stat]);
        assert_eq!(p.latency(stat), Some(150_060.0));
        assert_eq!(p.server_latency(stat), Some(60.0));
        assert!(!p.overloaded && p.achieved_rate.is_none());
    }

    #[test]
    fn parses_latency_metrics() {
        let s = parse_stat("ttft:p99").unwrap();
        assert_eq!((s.metric, s.percentile), (LatencyMetric::Ttft, 99.0));
        assert_eq!(parse_stat("e2el:median").unwrap().percentile, 50.0);
        assert!(parse_stat("ttft").is_err());
        assert!(parse_stat("bogus:p99").is_err());
    }

    #[test]
    fn asks_only_for_percentiles_summaries_lack() {
        let p = |m, q| LatencyStat::new(m, q);
        assert_eq!(
            extra_percentiles(&[p(LatencyMetric::Ttft, 99.0), p(LatencyMetric::Tpot, 95.0)]),
            None
        );
        assert_eq!(
            extra_percentiles(&[p(LatencyMetric::Ttft, 99.9)]).as_deref(),
            Some("99,99.9")
        );
    }

    #[test]
    fn stops_at_the_first_point_past_saturation() {
        let stat = LatencyStat::new(LatencyMetric::Ttft, 99.0);
        let pt = |load: f64, tput: f64, lat: f64| SweepPoint::new(load, tput, vec![(stat, lat)]);
        let mut pts = vec![pt(1.0, 100.0, 50.0), pt(2.0, 200.0, 55.0)];
        assert!(past_saturation(&pts, stat, LoadKind::RequestRate).is_none());
        pts.push(pt(4.0, 205.0, 400.0));
        let why = past_saturation(&pts, stat, LoadKind::RequestRate).unwrap();
        assert!(why.starts_with("rate 4 req/s is past saturation"), "{why}");
    }
}
