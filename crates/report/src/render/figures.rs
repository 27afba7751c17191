//! The headline figures of a group of runs (a row's repeats, or a sweep point's), read from
//! the saved summaries. With several runs each figure is the mean ± std across them
//! (`servebench_metrics::aggregate`); nothing is recomputed from records here.

use servebench_metrics::{aggregate, RunSummary};

use super::format::Figure;
use crate::model::{RunData, SweepReport};

/// Headline figures of one group of runs.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupFigures {
    /// Number of runs.
    pub runs: usize,
    /// Completed requests, summed over runs.
    pub completed: u64,
    /// Failed requests, summed over runs.
    pub failed: u64,
    /// Requests per second.
    pub request_throughput: Figure,
    /// Output tokens per second.
    pub output_throughput: Figure,
    /// Prompt tokens per second.
    pub prompt_throughput: Figure,
    /// Percentile figures by `(metric, percentile)`, e.g. `("ttft", 99.0)`.
    latencies: Vec<((&'static str, f64), Figure)>,
}

/// Percentiles shown in reports (every one of them is in a default summary and in repeats).
pub const REPORT_PERCENTILES: [f64; 3] = [50.0, 90.0, 99.0];

/// Latency metrics shown in reports.
pub const REPORT_METRICS: [&str; 4] = ["ttft", "tpot", "itl", "e2el"];

impl GroupFigures {
    /// Figures of the given runs (empty runs give absent figures).
    pub fn of(runs: &[RunData]) -> GroupFigures {
        let summaries: Vec<&RunSummary> = runs.iter().map(|r| &r.summary).collect();
        Self::of_summaries(&summaries)
    }

    /// Figures of the given summaries.
    pub fn of_summaries(summaries: &[&RunSummary]) -> GroupFigures {
        let completed = summaries.iter().map(|s| s.completed).sum();
        let failed = summaries.iter().map(|s| s.failed).sum();
        let mut latencies = Vec::new();
        match summaries {
            [] => GroupFigures {
                runs: 0,
                completed,
                failed,
                request_throughput: Figure::default(),
                output_throughput: Figure::default(),
                prompt_throughput: Figure::default(),
                latencies,
            },
            [one] => {
                for metric in REPORT_METRICS {
                    for p in REPORT_PERCENTILES {
                        let v = one
                            .metric(metric)
                            .and_then(|m| m.percentile(p))
                            .map(|s| s.value);
                        latencies.push(((metric, p), Figure::single(v)));
                    }
                }
                GroupFigures {
                    runs: 1,
                    completed,
                    failed,
                    request_throughput: Figure::single(Some(one.request_throughput)),
                    output_throughput: Figure::single(Some(one.output_throughput)),
                    prompt_throughput: Figure::single(Some(one.prompt_throughput)),
                    latencies,
                }
            }
            many => {
                let owned: Vec<RunSummary> = many.iter().map(|s| (*s).clone()).collect();
                let agg = aggregate(&owned);
                let fig = |name: &str| {
                    agg.figure(name).map_or(Figure::default(), |f| Figure {
                        value: f.mean,
                        std: f.std,
                    })
                };
                for metric in REPORT_METRICS {
                    for p in REPORT_PERCENTILES {
                        latencies.push(((metric, p), fig(&format!("{metric}.p{p}"))));
                    }
                }
                GroupFigures {
                    runs: many.len(),
                    completed,
                    failed,
                    request_throughput: fig("request_throughput"),
                    output_throughput: fig("output_throughput"),
                    prompt_throughput: fig("prompt_throughput"),
                    latencies,
                }
            }
        }
    }

    /// A latency percentile figure, ms (`latency("ttft", 99.0)`).
    pub fn latency(&self, metric: &str, p: f64) -> Figure {
        self.latencies
            .iter()
            .find(|((m, q), _)| *m == metric && (*q - p).abs() < 1e-9)
            .map_or(Figure::default(), |(_, f)| *f)
    }
}

/// The value of a latency percentile in one summary, when it was computed.
pub fn percentile_of(summary: &RunSummary, metric: &str, p: f64) -> Option<f64> {
    summary
        .metric(metric)
        .and_then(|m| m.percentile(p))
        .map(|s| s.value)
}

/// The latency percentile a sweep's frontier is drawn for, with the SLO thresholds that
/// constrain that same percentile.
#[derive(Debug, Clone, PartialEq)]
pub struct FrontierAxis {
    /// `ttft`, `tpot`, `itl` or `e2el`.
    pub metric: String,
    /// The percentile (e.g. 99).
    pub percentile: f64,
    /// SLO thresholds on this percentile, ms.
    pub slo_ms: Vec<f64>,
}

/// Reads an SLO string `metric:pNN:ms` (or `metric:median:ms`); `None` if it is not one.
pub fn parse_slo(text: &str) -> Option<(String, f64, f64)> {
    // `ttft_p99:500` is `ttft:p99:500`.
    let text = match text.trim().split_once(':') {
        Some((head, rest)) if !rest.contains(':') && head.contains('_') => {
            let (metric, pct) = head.rsplit_once('_')?;
            format!("{metric}:{pct}:{rest}")
        }
        _ => text.to_owned(),
    };
    let mut parts = text.trim().split(':');
    let metric = parts.next()?.trim().to_ascii_lowercase();
    let pct = parts.next()?.trim().to_ascii_lowercase();
    let ms = parts
        .next()?
        .trim()
        .trim_end_matches("ms")
        .parse::<f64>()
        .ok()?;
    if parts.next().is_some() || !REPORT_METRICS.contains(&metric.as_str()) {
        return None;
    }
    let p = if pct == "median" {
        50.0
    } else {
        pct.strip_prefix('p')?.parse::<f64>().ok()?
    };
    Some((metric, p, ms))
}

/// The frontier axes of a sweep: one per distinct SLO percentile, in SLO order, or p99 TTFT
/// when no SLO was given. The first is the one the knee refers to.
pub fn frontier_axes(slos: &[String]) -> Vec<FrontierAxis> {
    let mut axes: Vec<FrontierAxis> = Vec::new();
    for (metric, p, ms) in slos.iter().filter_map(|s| parse_slo(s)) {
        match axes
            .iter_mut()
            .find(|a| a.metric == metric && (a.percentile - p).abs() < 1e-9)
        {
            Some(a) => a.slo_ms.push(ms),
            None => axes.push(FrontierAxis {
                metric,
                percentile: p,
                slo_ms: vec![ms],
            }),
        }
    }
    if axes.is_empty() {
        axes.push(FrontierAxis {
            metric: "ttft".into(),
            percentile: 99.0,
            slo_ms: Vec::new(),
        });
    }
    axes
}

/// The frontier axes of a sweep: its `latency_metric` first (when it names a percentile,
/// `ttft:p99`), then the SLOs' percentiles; see [`frontier_axes`]. The first axis is the one
/// the knee refers to.
pub fn sweep_axes(sweep: &SweepReport) -> Vec<FrontierAxis> {
    let mut axes = frontier_axes(&sweep.slos);
    let primary = sweep
        .latency_metric
        .as_deref()
        .and_then(|m| parse_slo(&format!("{m}:1")))
        .map(|(metric, p, _)| (metric, p));
    if let Some((metric, p)) = primary {
        let same = |a: &FrontierAxis| a.metric == metric && (a.percentile - p).abs() < 1e-9;
        if sweep.slos.iter().all(|s| parse_slo(s).is_none()) {
            axes.clear();
        }
        match axes.iter().position(same) {
            Some(i) => {
                let axis = axes.remove(i);
                axes.insert(0, axis);
            }
            None => axes.insert(
                0,
                FrontierAxis {
                    metric,
                    percentile: p,
                    slo_ms: Vec::new(),
                },
            ),
        }
    }
    axes
}

/// `p99 TTFT`.
pub fn stat_label(metric: &str, p: f64) -> String {
    format!(
        "p{} {}",
        super::format::load(p),
        metric.to_ascii_uppercase()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slo_strings_give_frontier_axes() {
        let axes = frontier_axes(&[
            "ttft:p99:500".into(),
            "tpot:p95:40ms".into(),
            "ttft:p99:800".into(),
            "bogus".into(),
        ]);
        assert_eq!(axes.len(), 2);
        assert_eq!(axes[0].metric, "ttft");
        assert_eq!(axes[0].slo_ms, vec![500.0, 800.0]);
        assert_eq!(axes[1].percentile, 95.0);
        assert_eq!(stat_label("tpot", 95.0), "p95 TPOT");
        let default = frontier_axes(&[]);
        assert_eq!(
            (default[0].metric.as_str(), default[0].percentile),
            ("ttft", 99.0)
        );
        assert_eq!(
            parse_slo("e2el:median:2000"),
            Some(("e2el".into(), 50.0, 2000.0))
        );
        assert_eq!(parse_slo("tpot_p99:40"), Some(("tpot".into(), 99.0, 40.0)));
        assert_eq!(parse_slo("tpot_p99"), None);
    }

    #[test]
    fn the_sweep_latency_metric_comes_first() {
        let mut sweep = SweepReport {
            row: "D".into(),
            variable: "request_rate".into(),
            slos: vec!["ttft:p99:500".into(), "tpot:p90:40".into()],
            latency_metric: Some("tpot:p90".into()),
            points: Vec::new(),
            knee: None,
            headline: None,
            stop_reason: None,
            search: None,
            gpus: None,
        };
        let axes = sweep_axes(&sweep);
        assert_eq!(
            (axes[0].metric.as_str(), axes[0].percentile),
            ("tpot", 90.0)
        );
        assert_eq!(axes[0].slo_ms, vec![40.0]);
        assert_eq!(axes.len(), 2);
        sweep.slos.clear();
        sweep.latency_metric = Some("e2el:p50".into());
        let axes = sweep_axes(&sweep);
        assert_eq!(axes.len(), 1);
        assert_eq!(
            (axes[0].metric.as_str(), axes[0].percentile),
            ("e2el", 50.0)
        );
    }
}
