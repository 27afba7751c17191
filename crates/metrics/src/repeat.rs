//! Repeated runs (`--repeat N`): each headline figure as mean ± std across runs, beside the
//! per-run values. The std is NumPy's default, ddof = 0, like every std servebench reports
//! (docs/metrics.md "Statistics"); `n` is given so a reader can rescale it.

use serde::{Deserialize, Serialize};

use crate::stats;
use crate::summary::RunSummary;

/// One figure across runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepeatFigure {
    /// Figure name, e.g. `output_throughput` or `ttft.p99`.
    pub name: String,
    /// Runs that had a value.
    pub n: u64,
    /// Mean across those runs.
    pub mean: Option<f64>,
    /// Standard deviation across those runs (ddof = 0).
    pub std: Option<f64>,
    /// Value of each run, in run order (`None` where a run had none).
    pub values: Vec<Option<f64>>,
}

/// The headline figures of several runs of one workload row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepeatSummary {
    /// Number of runs.
    pub runs: u64,
    /// The figures, in report order.
    pub figures: Vec<RepeatFigure>,
}

impl RepeatSummary {
    /// The figure with this name.
    pub fn figure(&self, name: &str) -> Option<&RepeatFigure> {
        self.figures.iter().find(|f| f.name == name)
    }
}

/// Percentiles reported per metric across runs (absent from a run unless it was asked for).
const REPEAT_PERCENTILES: [f64; 3] = [50.0, 90.0, 99.0];

/// Aggregate runs figure by figure.
pub fn aggregate(runs: &[RunSummary]) -> RepeatSummary {
    let mut figures = Vec::new();
    let mut add = |name: String, get: &dyn Fn(&RunSummary) -> Option<f64>| {
        let values: Vec<Option<f64>> = runs.iter().map(get).collect();
        let present: Vec<f64> = values.iter().flatten().copied().collect();
        figures.push(RepeatFigure {
            name,
            n: present.len() as u64,
            mean: stats::mean(&present),
            std: stats::std_dev(&present),
            values,
        });
    };

    add("request_throughput".into(), &|r| Some(r.request_throughput));
    add("output_throughput".into(), &|r| Some(r.output_throughput));
    add("prompt_throughput".into(), &|r| Some(r.prompt_throughput));
    add("total_token_throughput".into(), &|r| {
        Some(r.total_token_throughput)
    });
    add("goodput_requests_per_s".into(), &|r| {
        r.goodput.as_ref().map(|g| g.requests_per_s)
    });
    add("goodput_output_tokens_per_s".into(), &|r| {
        r.goodput.as_ref().map(|g| g.output_tokens_per_s)
    });
    add("peak_output_tokens_per_s".into(), &|r| {
        Some(r.peak_output_tokens_per_s)
    });
    add("peak_concurrency".into(), &|r| {
        Some(r.peak_concurrency as f64)
    });
    add("completed".into(), &|r| Some(r.completed as f64));
    add("failed".into(), &|r| Some(r.failed as f64));

    for metric in RunSummary::METRICS {
        add(format!("{metric}.mean"), &|r| r.metric(metric)?.mean);
        add(format!("{metric}.median"), &|r| r.metric(metric)?.median);
        for p in REPEAT_PERCENTILES {
            add(format!("{metric}.p{p}"), &|r| {
                Some(r.metric(metric)?.percentile(p)?.value)
            });
        }
    }

    RepeatSummary {
        runs: runs.len() as u64,
        figures,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::derived::tests::record;
    use crate::summary::{summarize, SummaryOptions};

    const MS: u64 = 1_000_000;

    fn run(ttft_ms: u64, duration_ms: u64) -> RunSummary {
        summarize(
            &[record(0, 0, &[ttft_ms, ttft_ms + 10], 2)],
            &SummaryOptions {
                duration_ns: Some(duration_ms * MS),
                percentiles: vec![50.0, 99.0],
                ..SummaryOptions::default()
            },
        )
    }

    #[test]
    fn mean_and_std_across_runs_with_per_run_values() {
        let agg = aggregate(&[run(100, 1000), run(300, 2000)]);
        assert_eq!(agg.runs, 2);
        let t = agg.figure("ttft.mean").unwrap();
        assert_eq!(t.values, vec![Some(100.0), Some(300.0)]);
        assert_eq!(t.mean, Some(200.0));
        assert_eq!(t.std, Some(100.0));
        let thr = agg.figure("request_throughput").unwrap();
        assert_eq!(thr.values, vec![Some(1.0), Some(0.5)]);
        assert_eq!(thr.mean, Some(0.75));
        // p90 was not requested: absent, not invented.
        let p90 = agg.figure("ttft.p90").unwrap();
        assert_eq!((p90.n, p90.mean), (0, None));
        assert_eq!(agg.figure("ttft.p99").unwrap().n, 2);
        assert_eq!(agg.figure("goodput_requests_per_s").unwrap().mean, None);
    }

    #[test]
    fn no_runs() {
        let agg = aggregate(&[]);
        assert_eq!(agg.runs, 0);
        assert!(agg
            .figures
            .iter()
            .all(|f| f.mean.is_none() && f.values.is_empty()));
    }
}
