//! The terminal rendering: one compact line per row (and per sweep point).

use std::fmt::Write as _;

use super::tables::{rows_table, sweep_point_label, sweep_table};
use crate::model::ExperimentReport;

/// The experiment as plain text for a terminal.
pub fn render_terminal(report: &ExperimentReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "== {} ==", report.title);
    if report.quick {
        out.push_str("note: numbers from a quick run (shortened workload): indicative only\n");
    }
    for n in &report.notes {
        let _ = writeln!(out, "note: {n}");
    }
    let rows = rows_table(report, false);
    if !rows.rows.is_empty() {
        out.push_str(&rows.to_text());
    }
    if let Some(sweep) = &report.sweep {
        let _ = writeln!(
            out,
            "-- sweep of {} over row {} --",
            sweep.variable, sweep.row
        );
        out.push_str(&sweep_table(sweep).to_text());
        if !sweep.slos.is_empty() {
            let _ = writeln!(out, "SLOs: {}", sweep.slos.join(", "));
        }
        if let Some(k) = sweep.knee {
            let _ = writeln!(out, "knee: {}", sweep_point_label(sweep, k));
        }
        if let Some(h) = &sweep.headline {
            let _ = writeln!(out, "headline: {h}");
        }
        if let Some(r) = &sweep.stop_reason {
            let _ = writeln!(out, "stopped early: {r}");
        }
    }
    out
}
