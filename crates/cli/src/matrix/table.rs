//! Terminal tables of an experiment: one line per row (or sweep point), figures as mean ± std
//! when runs were repeated.

use servebench_metrics::repeat::{aggregate, RepeatSummary};
use servebench_metrics::RunSummary;

/// The figures shown per row: (column header, repeat-figure name, decimals).
pub const COLUMNS: [(&str, &str, usize); 9] = [
    ("req/s", "request_throughput", 2),
    ("out tok/s", "output_throughput", 1),
    ("TTFT p50", "ttft.median", 1),
    ("TTFT p99", "ttft.p99", 1),
    ("TPOT p50", "tpot.median", 2),
    ("TPOT p99", "tpot.p99", 2),
    ("E2EL p99", "e2el.p99", 1),
    ("ok", "completed", 0),
    ("failed", "failed", 0),
];

/// A figure across runs: `12.3` for one run, `12.3 ± 0.4` for several, `-` when absent.
pub fn cell(agg: &RepeatSummary, name: &str, decimals: usize) -> String {
    let Some(f) = agg.figure(name) else {
        return "-".to_owned();
    };
    match (f.mean, f.std) {
        (Some(m), Some(s)) if agg.runs > 1 => format!("{m:.decimals$} ± {s:.decimals$}"),
        (Some(m), _) => format!("{m:.decimals$}"),
        _ => "-".to_owned(),
    }
}

/// One table line's leading columns and its runs.
pub struct Line<'a> {
    /// Leading cells (row id, shape, load ...).
    pub lead: Vec<String>,
    /// The runs behind the figures.
    pub runs: &'a [RunSummary],
}

/// A fixed-width table with `lead_headers` then [`COLUMNS`]. Latencies are in ms.
pub fn render(lead_headers: &[&str], lines: &[Line<'_>]) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut header: Vec<String> = lead_headers.iter().map(|h| (*h).to_owned()).collect();
    header.extend(COLUMNS.iter().map(|(h, _, _)| (*h).to_owned()));
    rows.push(header);
    for l in lines {
        let agg = aggregate(l.runs);
        let mut r = l.lead.clone();
        r.extend(COLUMNS.iter().map(|(_, name, d)| cell(&agg, name, *d)));
        rows.push(r);
    }
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for (i, r) in rows.iter().enumerate() {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, s)| {
                let pad = widths[c].saturating_sub(s.chars().count());
                if c < lead_headers.len() {
                    format!("{s}{}", " ".repeat(pad))
                } else {
                    format!("{}{s}", " ".repeat(pad))
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
        if i == 0 {
            out.push_str(&"-".repeat(widths.iter().sum::<usize>() + 2 * cols.saturating_sub(1)));
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use servebench_metrics::repeat::RepeatFigure;

    fn agg(values: &[f64]) -> RepeatSummary {
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let std = (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
        RepeatSummary {
            runs: values.len() as u64,
            figures: vec![RepeatFigure {
                name: "x".into(),
                n: values.len() as u64,
                mean: Some(mean),
                std: Some(std),
                values: values.iter().map(|v| Some(*v)).collect(),
            }],
        }
    }

    #[test]
    fn cells_show_mean_and_std_only_when_repeated() {
        assert_eq!(cell(&agg(&[10.0]), "x", 1), "10.0");
        assert_eq!(cell(&agg(&[10.0, 12.0]), "x", 1), "11.0 ± 1.0");
        assert_eq!(cell(&agg(&[10.0]), "missing", 1), "-");
    }
}
