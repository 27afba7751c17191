//! The report's tables as plain cells, shared by the terminal, Markdown and HTML renderers.

use std::fmt::Write as _;

use super::charts::point_label;
use super::figures::{stat_label, sweep_axes, GroupFigures};
use super::format::{figure, html_escape, load, md_cell, ms, opt, rate, slug};
use crate::model::{ExperimentReport, RunData, SweepReport};

/// A table of text cells.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Table {
    /// Column headers.
    pub headers: Vec<String>,
    /// Which columns hold numbers (right-aligned).
    pub numeric: Vec<bool>,
    /// Body rows (each as long as `headers`).
    pub rows: Vec<Vec<String>>,
}

impl Table {
    fn new(columns: &[(&str, bool)]) -> Table {
        Table {
            headers: columns.iter().map(|(h, _)| (*h).to_owned()).collect(),
            numeric: columns.iter().map(|(_, n)| *n).collect(),
            rows: Vec::new(),
        }
    }

    /// Plain text with space-padded columns.
    pub fn to_text(&self) -> String {
        let width = |i: usize| {
            self.rows
                .iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .chain(std::iter::once(self.headers[i].chars().count()))
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..self.headers.len()).map(width).collect();
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, w) in widths.iter().enumerate() {
                let c = cells.get(i).map_or("", String::as_str);
                let pad = w.saturating_sub(c.chars().count());
                if i > 0 {
                    s.push_str("  ");
                }
                if self.numeric[i] {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(c);
                } else {
                    s.push_str(c);
                    s.push_str(&" ".repeat(pad));
                }
            }
            s.trim_end().to_owned() + "\n"
        };
        let mut out = line(&self.headers);
        for r in &self.rows {
            out.push_str(&line(r));
        }
        out
    }

    /// A GitHub-flavoured Markdown table.
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let cells = |c: &[String]| c.iter().map(|s| md_cell(s)).collect::<Vec<_>>().join(" | ");
        let _ = writeln!(out, "| {} |", cells(&self.headers));
        let rule: Vec<&str> = self
            .numeric
            .iter()
            .map(|&n| if n { "---:" } else { "---" })
            .collect();
        let _ = writeln!(out, "| {} |", rule.join(" | "));
        for r in &self.rows {
            let _ = writeln!(out, "| {} |", cells(r));
        }
        out
    }

    /// An HTML `<table>` with the given id.
    pub fn to_html(&self, id: &str) -> String {
        let mut out = format!("<table id=\"{}\">\n<thead><tr>", html_escape(id));
        let classes: Vec<String> = self
            .headers
            .iter()
            .zip(&self.numeric)
            .map(|(h, &n)| {
                let col = format!("col-{}", slug(h).to_ascii_lowercase());
                if n {
                    format!("num {col}")
                } else {
                    col
                }
            })
            .collect();
        for (h, class) in self.headers.iter().zip(&classes) {
            let _ = write!(out, "<th class=\"{class}\">{}</th>", html_escape(h));
        }
        out.push_str("</tr></thead>\n<tbody>\n");
        for r in &self.rows {
            out.push_str("<tr>");
            for (c, class) in r.iter().zip(&classes) {
                let _ = write!(out, "<td class=\"{class}\">{}</td>", html_escape(c));
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody></table>\n");
        out
    }
}

fn latency_cells(f: &GroupFigures) -> Vec<String> {
    vec![
        figure(f.latency("ttft", 50.0), ms),
        figure(f.latency("ttft", 99.0), ms),
        figure(f.latency("tpot", 50.0), ms),
        figure(f.latency("tpot", 99.0), ms),
        figure(f.latency("itl", 99.0), ms),
    ]
}

fn failures_cell(f: &GroupFigures) -> String {
    if f.failed == 0 {
        "0".into()
    } else {
        let total = f.failed + f.completed;
        format!(
            "{} ({:.1} %)",
            f.failed,
            100.0 * f.failed as f64 / total.max(1) as f64
        )
    }
}

/// One line per row that has runs: id, name (and the row's question when `questions`),
/// throughputs, p50/p99 TTFT and TPOT, p99 ITL, failures. Repeats show mean ± std.
pub fn rows_table(report: &ExperimentReport, questions: bool) -> Table {
    let mut cols = vec![("row", false), ("name", false)];
    if questions {
        cols.push(("question", false));
    }
    cols.extend([
        ("runs", true),
        ("req/s", true),
        ("output tok/s", true),
        ("TTFT p50 ms", true),
        ("TTFT p99 ms", true),
        ("TPOT p50 ms", true),
        ("TPOT p99 ms", true),
        ("ITL p99 ms", true),
        ("failed", true),
    ]);
    // Results written before verdicts existed have none: no empty column for them.
    let judged = report
        .rows
        .iter()
        .any(|r| r.runs.iter().any(|x| x.validity.is_some()));
    if judged {
        cols.push(("verdict", false));
    }
    let mut t = Table::new(&cols);
    for row in report.rows.iter().filter(|r| !r.runs.is_empty()) {
        let f = GroupFigures::of(&row.runs);
        let mut cells = vec![row.id.clone(), row.name.clone()];
        if questions {
            cells.push(row.hypothesis.clone());
        }
        cells.push(f.runs.to_string());
        cells.push(figure(f.request_throughput, rate));
        cells.push(figure(f.output_throughput, rate));
        cells.extend(latency_cells(&f));
        cells.push(failures_cell(&f));
        if judged {
            cells.push(row_verdict(row));
        }
        t.rows.push(cells);
    }
    t
}

/// A row's verdict: its runs' worst status (NOT STEADY over NOT ENOUGH DATA over VALID),
/// marked overloaded when any run was.
fn row_verdict(row: &crate::model::RowReport) -> String {
    use servebench_metrics::validity::VerdictStatus;
    let rank = |s: VerdictStatus| match s {
        VerdictStatus::Valid => 0,
        VerdictStatus::NotEnoughData => 1,
        VerdictStatus::NotSteady => 2,
    };
    row.runs
        .iter()
        .filter_map(|r| r.validity.as_ref())
        .max_by_key(|v| rank(v.verdict.status))
        .map_or_else(
            || "-".to_owned(),
            |worst| {
                let mut cell = worst.verdict.status.label().to_owned();
                if row
                    .runs
                    .iter()
                    .any(|r| r.validity.as_ref().is_some_and(|v| v.overloaded()))
                {
                    cell.push_str(" (overloaded)");
                }
                cell
            },
        )
}

/// One line per sweep point: the load, throughputs, the frontier percentiles, p50/p99 TTFT
/// and TPOT, failures, and the knee marked.
pub fn sweep_table(sweep: &SweepReport) -> Table {
    let axes = sweep_axes(sweep);
    let extra: Vec<(String, f64, String)> = axes
        .iter()
        .filter(|a| {
            !matches!(
                (a.metric.as_str(), a.percentile as u32),
                ("ttft", 50 | 99) | ("tpot", 50 | 99) | ("itl", 99)
            ) || (a.percentile.fract() != 0.0)
        })
        .map(|a| {
            (
                a.metric.clone(),
                a.percentile,
                format!("{} ms", stat_label(&a.metric, a.percentile)),
            )
        })
        .collect();
    let mut headers: Vec<(String, bool)> = vec![
        (sweep.variable.clone(), true),
        ("runs".into(), true),
        ("req/s".into(), true),
        ("output tok/s".into(), true),
    ];
    headers.extend(extra.iter().map(|(_, _, h)| (h.clone(), true)));
    for h in [
        "TTFT p50 ms",
        "TTFT p99 ms",
        "TPOT p50 ms",
        "TPOT p99 ms",
        "ITL p99 ms",
        "failed",
    ] {
        headers.push((h.into(), true));
    }
    // Results written before verdicts existed keep the table they had.
    let judged = sweep
        .points
        .iter()
        .any(|p| p.runs.iter().any(|r| r.validity.is_some()));
    if judged {
        headers.push(("offered → achieved req/s".into(), false));
        headers.push(("verdict".into(), false));
    }
    headers.push(("".into(), false));
    let cols: Vec<(&str, bool)> = headers.iter().map(|(h, n)| (h.as_str(), *n)).collect();
    let mut t = Table::new(&cols);
    for (i, p) in sweep.points.iter().enumerate() {
        let f = GroupFigures::of(&p.runs);
        let mut cells = vec![load(p.value), f.runs.to_string()];
        cells.push(figure(f.request_throughput, rate));
        cells.push(figure(f.output_throughput, rate));
        for (m, q, _) in &extra {
            cells.push(figure(f.latency(m, *q), ms));
        }
        cells.extend(latency_cells(&f));
        cells.push(failures_cell(&f));
        if judged {
            let first = p.runs.iter().find_map(|r| r.validity.as_ref());
            cells.push(
                first
                    .and_then(|v| v.load.as_ref())
                    .map_or_else(|| "-".to_owned(), crate::verdict::rate_cell),
            );
            cells.push(first.map_or_else(|| "-".to_owned(), crate::verdict::status_cell));
        }
        cells.push(if sweep.knee == Some(i) {
            "◀ knee".into()
        } else {
            String::new()
        });
        t.rows.push(cells);
    }
    t
}

/// Every latency statistic of one run: n, mean, p50/p90/p95/p99 with the p99's 95 % CI, max.
pub fn run_metrics_table(run: &RunData) -> Table {
    let mut t = Table::new(&[
        ("metric", false),
        ("n", true),
        ("mean", true),
        ("p50", true),
        ("p90", true),
        ("p95", true),
        ("p99", true),
        ("p99 95% CI", true),
        ("max", true),
    ]);
    let names = [
        ("ttft", "TTFT"),
        // Present only when the run reasoned or called tools.
        ("ttfat", "TTFAT (first answer)"),
        ("tpot", "TPOT"),
        ("itl", "ITL"),
        ("e2el", "E2EL"),
        ("queue", "client queue"),
        ("user_ttft", "user TTFT (+queue)"),
        ("user_e2el", "user E2EL (+queue)"),
        ("dispatch_lag", "dispatch lag"),
    ];
    for (key, label) in names {
        let Some(m) = run.summary.metric(key) else {
            continue;
        };
        let pct = |p: f64| {
            m.percentile(p).map_or("–".to_owned(), |s| {
                if s.unstable {
                    format!("{}*", ms(s.value))
                } else {
                    ms(s.value)
                }
            })
        };
        let ci = m.percentile(99.0).map_or("–".to_owned(), |s| {
            // Too few samples above the p99 to bound it: the interval is open above, and
            // says so rather than showing a bare dash.
            let hi = s.ci_high.map_or_else(
                || "∞) too few samples".to_owned(),
                |h| format!("{}]", ms(h)),
            );
            format!("[{}, {hi}", opt(s.ci_low, ms))
        });
        t.rows.push(vec![
            format!("{label} (ms)"),
            m.n.to_string(),
            opt(m.mean, ms),
            pct(50.0),
            pct(90.0),
            pct(95.0),
            pct(99.0),
            ci,
            opt(m.max, ms),
        ]);
    }
    t
}

/// The run-level facts of one run, as `(name, value)` lines.
pub fn run_facts(run: &RunData) -> Vec<(String, String)> {
    let s = &run.summary;
    let mut out = Vec::new();
    if let Some(v) = &run.validity {
        out.push(("verdict".to_owned(), v.verdict.to_string()));
        if let Some(l) = &v.load {
            out.push((
                "offered → achieved rate".to_owned(),
                format!("{} req/s", crate::verdict::rate_cell(l)),
            ));
        }
    }
    out.extend([
        (
            "completed / failed".to_owned(),
            format!("{} / {}", s.completed, s.failed),
        ),
        ("duration".to_owned(), format!("{:.2} s", s.duration_s)),
        (
            "request throughput".to_owned(),
            format!("{} req/s", rate(s.request_throughput)),
        ),
        (
            "output throughput".to_owned(),
            format!("{} tok/s", rate(s.output_throughput)),
        ),
        (
            "prompt throughput".to_owned(),
            format!("{} tok/s", rate(s.prompt_throughput)),
        ),
        (
            "total token throughput".to_owned(),
            format!("{} tok/s", rate(s.total_token_throughput)),
        ),
        (
            "peak output tok/s (1 s window)".to_owned(),
            rate(s.peak_output_tokens_per_s),
        ),
        (
            "peak concurrency".to_owned(),
            s.peak_concurrency.to_string(),
        ),
        (
            "tokens in / out".to_owned(),
            format!("{} / {}", s.total_input_tokens, s.total_output_tokens),
        ),
    ]);
    if let Some(c) = s.total_cached_tokens {
        out.push(("cached prompt tokens".into(), c.to_string()));
    }
    if let Some(r) = &s.reasoning {
        out.push((
            "reasoning share of output".into(),
            format!(
                "{:.1} % ({} reasoning / {} answer tokens)",
                r.reasoning_share * 100.0,
                r.reasoning_tokens,
                r.answer_tokens
            ),
        ));
        out.push((
            "requests reasoning / with tool calls".into(),
            format!(
                "{} / {}",
                r.requests_with_reasoning, r.requests_with_tool_calls
            ),
        ));
    }
    if let Some(p) = &run.prefix_hit {
        out.push(("prefix hit rate".into(), p.describe()));
        if let Some(w) = &p.warning {
            out.push(("prefix hit warning".into(), w.clone()));
        }
    }
    if let Some(g) = &s.goodput {
        let slos: Vec<String> = g
            .slos
            .iter()
            .map(|x| format!("{} ≤ {} ms", x.metric.as_str(), load(x.threshold_ms)))
            .collect();
        out.push((
            "goodput".into(),
            format!(
                "{} req/s, {} tok/s, attainment {} ({})",
                rate(g.requests_per_s),
                rate(g.output_tokens_per_s),
                g.attainment_pct.map_or("–".into(), |a| format!("{a:.1} %")),
                slos.join(", ")
            ),
        ));
    }
    if !s.failures_by_kind.is_empty() {
        let kinds: Vec<String> = s
            .failures_by_kind
            .iter()
            .map(|(k, n)| format!("{k}: {n}"))
            .collect();
        out.push(("failures by kind".into(), kinds.join(", ")));
    }
    if let Some(c) = &s.answer_checks {
        out.push((
            "answer validity".into(),
            format!(
                "{:.1} % ({} of {} checked answers passed, {} failed the check)",
                c.validity_pct(),
                c.passed,
                c.checked,
                c.failed
            ),
        ));
    }
    if let Some(e) = &s.energy {
        out.push(("energy".into(), e.describe()));
    }
    if let Some(c) = &s.connections {
        out.push((
            "connections".into(),
            c.line().trim_start_matches("Connections: ").to_owned(),
        ));
    }
    out.push((
        "stalls".into(),
        format!(
            "{} in {} requests; longest gap {} ms",
            s.total_stalls,
            s.requests_with_stalls,
            opt(s.longest_stall_ms, ms)
        ),
    ));
    let md = &run.metadata;
    let present = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    if let Some(m) = present(&md.model_id) {
        out.push(("model".into(), m));
    }
    let target = &md.target;
    if let Some(mut v) = present(&target.kind) {
        let clock = target.clock.as_deref().unwrap_or_default();
        let spec = target.sim_spec.as_deref().unwrap_or_default();
        if !spec.is_empty() {
            let _ = write!(v, " ({spec})");
        }
        if !clock.is_empty() {
            let _ = write!(v, ", {clock} clock");
        }
        out.push(("target".into(), v));
    }
    if let Some(d) = present(&md.date) {
        out.push(("date".into(), d));
    }
    if !md.command_line.is_empty() {
        out.push(("command line".into(), md.command_line.join(" ")));
    }
    out
}

/// Label for a sweep point in prose.
pub fn sweep_point_label(sweep: &SweepReport, i: usize) -> String {
    sweep
        .points
        .get(i)
        .map_or_else(String::new, |p| point_label(sweep, p.value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_table_columns_never_run_together_for_huge_values() {
        let mut t = Table::new(&[("row", false), ("TTFT p50 ms", true), ("p99", true)]);
        t.rows.push(vec![
            "a-very-long-row-name".into(),
            "3295997.02".into(),
            "3285490.41".into(),
        ]);
        t.rows
            .push(vec!["b".into(), "1.00".into(), "123456789012.50".into()]);
        let text = t.to_text();
        for line in text.lines().skip(1) {
            assert_eq!(line.split_whitespace().count(), 3, "{text}");
        }
        // Every column is as wide as its widest cell; numbers end at the header's right edge.
        let lines: Vec<&str> = text.lines().collect();
        let right = |l: &str, w: &str| l.find(w).map(|i| i + w.len());
        assert_eq!(
            right(lines[0], "TTFT p50 ms"),
            right(lines[1], "3295997.02")
        );
        assert_eq!(right(lines[0], "p99"), right(lines[2], "123456789012.50"));
    }
}
