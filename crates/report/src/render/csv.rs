//! The CSV rendering: one line per run (matrix rows, their repeats, sweep points), with
//! stable column names for pandas. Empty cells mean "not measured".

use servebench_metrics::RunSummary;

use crate::model::{ExperimentReport, RunData};

/// Columns before the latency statistics.
const RUN_COLUMNS: [&str; 30] = [
    "experiment",
    "kind",
    "quick",
    "row_id",
    "row_name",
    "sweep_variable",
    "sweep_value",
    "run_index",
    "run_path",
    "model",
    "target",
    "date",
    "completed",
    "failed",
    "duration_s",
    "request_throughput",
    "output_throughput",
    "prompt_throughput",
    "total_token_throughput",
    "peak_output_tokens_per_s",
    "peak_concurrency",
    "total_input_tokens",
    "total_output_tokens",
    "goodput_request_throughput",
    "goodput_output_throughput",
    "slo_attainment_pct",
    "longest_stall_ms",
    "verdict",
    "overloaded",
    "verdict_reasons",
];

/// Latency metrics with a column group each.
const METRICS: [&str; 7] = [
    "ttft",
    "tpot",
    "itl",
    "e2el",
    "queue",
    "user_ttft",
    "user_e2el",
];

/// Statistics per latency metric.
const STATS: [&str; 8] = ["mean", "median", "std", "p50", "p90", "p95", "p99", "max"];

/// The CSV header, in order: run columns, then `<metric>_<stat>_ms` for each latency metric.
pub fn csv_columns() -> Vec<String> {
    let mut cols: Vec<String> = RUN_COLUMNS.iter().map(|c| (*c).to_owned()).collect();
    for m in METRICS {
        for s in STATS {
            cols.push(format!("{m}_{s}_ms"));
        }
    }
    cols
}

struct Context<'a> {
    report: &'a ExperimentReport,
    row_id: &'a str,
    row_name: &'a str,
    sweep: Option<(&'a str, f64)>,
    index: usize,
}

fn num(v: f64) -> String {
    if v.is_finite() {
        v.to_string()
    } else if v.is_infinite() && v > 0.0 {
        "inf".into()
    } else {
        String::new()
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(String::new, num)
}

fn latency_cell(s: &RunSummary, metric: &str, stat: &str) -> String {
    let Some(m) = s.metric(metric) else {
        return String::new();
    };
    match stat {
        "mean" => opt(m.mean),
        "median" => opt(m.median),
        "std" => opt(m.std),
        "max" => opt(m.max),
        p => opt(p
            .strip_prefix('p')
            .and_then(|q| q.parse::<f64>().ok())
            .and_then(|q| m.percentile(q))
            .map(|x| x.value)),
    }
}

fn cell(name: &str, ctx: &Context<'_>, run: &RunData) -> String {
    let s = &run.summary;
    match name {
        "experiment" => ctx.report.title.clone(),
        "kind" => ctx.report.kind.as_str().to_owned(),
        "quick" => ctx.report.quick.to_string(),
        "row_id" => ctx.row_id.to_owned(),
        "row_name" => ctx.row_name.to_owned(),
        "sweep_variable" => ctx.sweep.map_or_else(String::new, |(v, _)| v.to_owned()),
        "sweep_value" => ctx.sweep.map_or_else(String::new, |(_, x)| num(x)),
        "run_index" => ctx.index.to_string(),
        "run_path" => run.path.clone(),
        "model" => run.metadata.model_id.clone(),
        "target" => match &run.metadata.target.sim_spec {
            Some(spec) if !spec.is_empty() => format!("sim: {spec}"),
            _ => run.metadata.target.kind.clone(),
        },
        "date" => run.metadata.date.clone(),
        "completed" => s.completed.to_string(),
        "failed" => s.failed.to_string(),
        "duration_s" => num(s.duration_s),
        "request_throughput" => num(s.request_throughput),
        "output_throughput" => num(s.output_throughput),
        "prompt_throughput" => num(s.prompt_throughput),
        "total_token_throughput" => num(s.total_token_throughput),
        "peak_output_tokens_per_s" => num(s.peak_output_tokens_per_s),
        "peak_concurrency" => s.peak_concurrency.to_string(),
        "total_input_tokens" => s.total_input_tokens.to_string(),
        "total_output_tokens" => s.total_output_tokens.to_string(),
        "goodput_request_throughput" => opt(s.goodput.as_ref().map(|g| g.requests_per_s)),
        "goodput_output_throughput" => opt(s.goodput.as_ref().map(|g| g.output_tokens_per_s)),
        "slo_attainment_pct" => opt(s.goodput.as_ref().and_then(|g| g.attainment_pct)),
        "longest_stall_ms" => opt(s.longest_stall_ms),
        // Empty for results written before verdicts existed.
        "verdict" => run
            .validity
            .as_ref()
            .map_or_else(String::new, |v| v.verdict.status.as_str().to_owned()),
        "overloaded" => run
            .validity
            .as_ref()
            .map_or_else(String::new, |v| v.overloaded().to_string()),
        "verdict_reasons" => run.validity.as_ref().map_or_else(String::new, |v| {
            v.verdict
                .reasons
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        }),
        other => {
            let Some(body) = other.strip_suffix("_ms") else {
                return String::new();
            };
            match body.rsplit_once('_') {
                Some((metric, stat)) => latency_cell(s, metric, stat),
                None => String::new(),
            }
        }
    }
}

/// Quotes a CSV field when it holds a comma, quote or line break (RFC 4180).
fn field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// The experiment as CSV: a header, then one line per run.
pub fn render_csv(report: &ExperimentReport) -> String {
    let cols = csv_columns();
    let mut out = cols.join(",");
    out.push('\n');
    let mut line = |ctx: Context<'_>, run: &RunData| {
        let cells: Vec<String> = cols.iter().map(|c| field(&cell(c, &ctx, run))).collect();
        out.push_str(&cells.join(","));
        out.push('\n');
    };
    for row in &report.rows {
        for (index, run) in row.runs.iter().enumerate() {
            let ctx = Context {
                report,
                row_id: &row.id,
                row_name: &row.name,
                sweep: None,
                index,
            };
            line(ctx, run);
        }
    }
    if let Some(sweep) = &report.sweep {
        let name = report
            .rows
            .iter()
            .find(|r| r.id == sweep.row)
            .map_or("", |r| r.name.as_str());
        for p in &sweep.points {
            for (index, run) in p.runs.iter().enumerate() {
                let ctx = Context {
                    report,
                    row_id: &sweep.row,
                    row_name: name,
                    sweep: Some((&sweep.variable, p.value)),
                    index,
                };
                line(ctx, run);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_unique_and_stable() {
        let cols = csv_columns();
        assert_eq!(cols.len(), RUN_COLUMNS.len() + METRICS.len() * STATS.len());
        let mut sorted = cols.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), cols.len());
        assert!(cols.contains(&"user_ttft_p99_ms".to_owned()));
    }

    #[test]
    fn fields_are_quoted_only_when_needed() {
        assert_eq!(field("plain"), "plain");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(num(f64::INFINITY), "inf");
        assert_eq!(num(f64::NAN), "");
    }
}
