//! The report's plots as image files (`plots/<chart id>.svg`): each chart of the HTML page
//! drawn on its own, for slides and pull requests.

use super::charts::{
    cdf_chart, frontier_charts, groups, in_flight_over_time, latency_over_time,
    throughput_over_time,
};
use super::svg::Chart;
use crate::model::ExperimentReport;

/// Every chart the page draws once: the sweep's frontiers (latency against throughput with
/// their uncertainty, tok/s per GPU against tok/s per user with the Pareto front), the CDFs,
/// the series over time, and each group's windows.
pub fn report_charts(report: &ExperimentReport) -> Vec<Chart> {
    let mut out = Vec::new();
    if let Some(sweep) = &report.sweep {
        out.extend(frontier_charts(sweep));
        out.push(super::interactivity::interactivity_chart(sweep));
    }
    let gs = groups(report);
    if gs.is_empty() {
        return out;
    }
    for metric in ["ttft", "tpot", "itl"] {
        out.push(cdf_chart(&gs, metric));
    }
    out.push(throughput_over_time(&gs));
    out.push(in_flight_over_time(&gs));
    out.push(latency_over_time(&gs, "ttft"));
    out.push(latency_over_time(&gs, "tpot"));
    for g in &gs {
        if let Some(s) = g.runs.first().and_then(super::slices::run_slices) {
            if !s.windows.is_empty() {
                out.extend(super::slices::slice_charts(&s, &g.key));
            }
        }
        if let Some(run) = g.runs.first() {
            out.extend(super::timeline::request_timeline(run, &g.key));
        }
    }
    out.retain(Chart::has_data);
    out
}

/// `(file name, SVG)` of each chart: `<chart id>.svg`, the id made file-safe.
pub fn plot_files(report: &ExperimentReport) -> Vec<(String, String)> {
    report_charts(report)
        .iter()
        .map(|c| {
            let name: String =
                c.id.chars()
                    .map(|ch| {
                        if ch.is_ascii_alphanumeric() || ch == '-' || ch == '_' {
                            ch
                        } else {
                            '_'
                        }
                    })
                    .collect();
            (format!("{name}.svg"), c.to_svg_document())
        })
        .collect()
}
