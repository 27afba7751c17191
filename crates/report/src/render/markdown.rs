//! The Markdown rendering, for pull requests: notes, the headline, each row's question beside
//! its numbers, the sweep frontier, then any extra sections.

use std::fmt::Write as _;

use super::figures::{stat_label, sweep_axes};
use super::tables::{rows_table, sweep_point_label, sweep_table};
use crate::model::ExperimentReport;

/// The experiment as GitHub-flavoured Markdown.
pub fn render_markdown(report: &ExperimentReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {}\n", report.title);
    if report.quick {
        out.push_str(
            "> **Note:** numbers from a quick run (shortened workload): indicative only, \
             not for capacity decisions.\n\n",
        );
    }
    if let Some(h) = report.sweep.as_ref().and_then(|s| s.headline.as_ref()) {
        let _ = writeln!(out, "**Headline:** {h}\n");
    }
    for n in &report.notes {
        let _ = writeln!(out, "- {n}");
    }
    if !report.notes.is_empty() {
        out.push('\n');
    }
    let rows = rows_table(report, true);
    if !rows.rows.is_empty() {
        out.push_str("## Rows\n\n");
        out.push_str(&rows.to_markdown());
        out.push_str(
            "\nLatencies in ms; with repeated runs each figure is the mean ± std across runs.\n\n",
        );
        // Each verdict with every rule it broke: the table says which rows to trust, this
        // says why the others fall short and what they need.
        let verdicts: Vec<String> = report
            .rows
            .iter()
            .flat_map(|r| {
                r.runs.iter().enumerate().filter_map(move |(i, run)| {
                    let v = run.validity.as_ref()?;
                    let which = if r.runs.len() > 1 {
                        format!("{} (run {})", r.id, i + 1)
                    } else {
                        r.id.clone()
                    };
                    Some(format!("- **{which}**: {}", v.verdict))
                })
            })
            .collect();
        if !verdicts.is_empty() {
            out.push_str("### Verdicts\n\n");
            for v in &verdicts {
                let _ = writeln!(out, "{v}");
            }
            out.push('\n');
        }
    }
    if let Some(sweep) = &report.sweep {
        let _ = writeln!(out, "## Sweep: {} over row {}\n", sweep.variable, sweep.row);
        if !sweep.slos.is_empty() {
            let _ = writeln!(out, "SLOs: `{}`\n", sweep.slos.join("`, `"));
        }
        out.push_str(&sweep_table(sweep).to_markdown());
        out.push('\n');
        let axis = &sweep_axes(sweep)[0];
        match sweep.knee {
            Some(k) => {
                let _ = writeln!(
                    out,
                    "Knee of the output-throughput vs {} frontier: **{}**.\n",
                    stat_label(&axis.metric, axis.percentile),
                    sweep_point_label(sweep, k)
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "No knee on the output-throughput vs {} frontier (the curve has not bent).\n",
                    stat_label(&axis.metric, axis.percentile)
                );
            }
        }
        if let Some(r) = &sweep.stop_reason {
            let _ = writeln!(out, "Stopped early: {r}\n");
        }
    }
    if let Some(t) = super::energy::energy_table(report) {
        out.push_str("## Energy\n\n");
        out.push_str(&t.to_markdown());
        let _ = writeln!(out, "\n{}\n", super::energy::ENERGY_NOTE);
    }
    for (heading, body) in &report.extra_sections {
        let _ = writeln!(out, "## {heading}\n\n{}\n", body.trim_end());
    }
    out
}
