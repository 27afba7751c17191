//! The HTML rendering: one self-contained file (inline CSS, SVG and a few lines of script;
//! a Content-Security-Policy forbids every network fetch) with the frontier, latency CDFs,
//! throughput and latency over time, and every table.

use std::fmt::Write as _;

use super::charts::{
    cdf_chart, frontier_charts, groups, in_flight_over_time, latency_over_time,
    throughput_over_time,
};
use super::figures::{stat_label, sweep_axes};
use super::format::{html_escape as esc, slug};
use super::mdhtml::markdown_to_html;
use super::tables::{rows_table, run_facts, run_metrics_table, sweep_point_label, sweep_table};
use super::timeline::group_timeline_html;
use crate::model::{ExperimentReport, RunData};

const STYLE: &str = r#"
:root { --fg: #1d2330; --muted: #5b6474; --line: #d8dce3; --bg: #ffffff; --accent: #4e79a7; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       background: var(--bg); margin: 0 auto; padding: 24px 32px 64px; max-width: 1280px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 36px 0 10px; padding-bottom: 4px; border-bottom: 2px solid var(--line); }
h3 { font-size: 16px; margin: 22px 0 8px; }
.sub { color: var(--muted); margin: 0 0 14px; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; background: #eef1f6;
         color: var(--muted); font-size: 12px; margin-right: 6px; }
.quick { background: #fff4d6; border: 1px solid #f0c36d; padding: 8px 12px; border-radius: 6px; margin: 10px 0; }
.headline { font-size: 17px; background: #edf4fb; border-left: 4px solid var(--accent);
            padding: 10px 14px; margin: 12px 0; }
ul.notes { margin: 8px 0; padding-left: 20px; color: var(--muted); }
table { border-collapse: collapse; margin: 8px 0 16px; font-variant-numeric: tabular-nums; }
th, td { padding: 4px 10px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { background: #f5f7fa; font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; white-space: nowrap; }
td.col-question { min-width: 22em; max-width: 36em; font-size: 12.5px; color: var(--muted); }
td.col-name { min-width: 9em; }
tbody tr:hover { background: #f8fafc; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 18px; }
figure.chart { margin: 0; border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px; background: #fff; }
figure.chart figcaption { font-weight: 600; margin-bottom: 4px; }
figure.chart svg { width: 100%; height: auto; display: block; }
svg .grid line { stroke: #eceef2; stroke-width: 1; }
svg .grid text, svg .axes text { fill: var(--muted); font-size: 11px; }
svg .grid text.tx { text-anchor: middle; }
svg .grid text.ty { text-anchor: end; }
svg .axes line { stroke: #9aa3b2; stroke-width: 1; }
svg .axes text.xl, svg .axes text.yl { text-anchor: middle; font-size: 12px; fill: var(--fg); }
svg .series path { fill: none; stroke: var(--c); stroke-width: 2; }
svg .series circle { fill: var(--c); stroke: #fff; stroke-width: 0.5; }
svg .series.scatter circle { fill-opacity: 0.65; stroke: none; }
svg .series.off { display: none; }
svg .ref line { stroke: #d62728; stroke-width: 1.5; stroke-dasharray: 6 4; }
svg .ref text { fill: #d62728; font-size: 11px; text-anchor: end; }
svg .mark circle { fill: none; stroke: #111; stroke-width: 2; }
svg .mark text { font-size: 12px; font-weight: 600; fill: #111; }
ul.legend { list-style: none; margin: 6px 0 0; padding: 0; display: flex; flex-wrap: wrap; gap: 4px 14px; font-size: 12px; }
ul.legend li { cursor: pointer; user-select: none; }
ul.legend li.off { opacity: 0.4; text-decoration: line-through; }
ul.legend .sw { display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 5px; vertical-align: -1px; }
p.note { color: var(--muted); font-size: 12px; margin: 4px 0 0; }
details { margin: 8px 0; }
summary { cursor: pointer; font-weight: 600; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 8px 0; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; overflow-wrap: anywhere; }
code { background: #f3f4f7; padding: 0 4px; border-radius: 3px; }
.extra table { font-size: 13px; }
footer { margin-top: 40px; color: var(--muted); font-size: 12px; }
"#;

/// Legend clicks hide or show a series; the final attribute tells a headless check that the
/// script ran to the end.
const SCRIPT: &str = r#"
(function () {
  var items = document.querySelectorAll('ul.legend li[data-series]');
  for (var i = 0; i < items.length; i++) {
    items[i].addEventListener('click', function (ev) {
      var li = ev.currentTarget;
      var g = document.getElementById(li.getAttribute('data-series'));
      if (!g) { return; }
      var off = g.classList.toggle('off');
      li.classList.toggle('off', off);
    });
  }
  // A link to a folded run's timeline unfolds it (and whatever holds it).
  function openTarget() {
    var id = decodeURIComponent(location.hash.slice(1));
    var el = id ? document.getElementById(id) : null;
    for (; el; el = el.parentElement) { if (el.tagName === 'DETAILS') { el.open = true; } }
  }
  window.addEventListener('hashchange', openTarget);
  openTarget();
  var charts = document.querySelectorAll('figure.chart svg').length;
  document.documentElement.setAttribute('data-report-ready', String(charts));
})();
"#;

/// The loads a `--search` measured, in the order it measured them, with its answer.
fn search_table(
    out: &mut String,
    sweep: &crate::model::SweepReport,
    search: &servebench_metrics::result::SearchEntry,
) {
    let _ = writeln!(
        out,
        "<h3>Operating-point search</h3>\n<p id=\"search-answer\"><strong>{}</strong></p>",
        esc(&search.headline)
    );
    out.push_str("<table id=\"search-table\"><thead><tr><th class=\"num\">step</th><th>load</th><th>verdict</th><th>SLO percentiles, ms: mean [95 % interval]</th><th>why it failed</th></tr></thead><tbody>\n");
    for (i, t) in search.tried.iter().enumerate() {
        let slos: Vec<String> = t
            .slo_values
            .iter()
            .map(|(name, [mean, lo, hi])| {
                let stat = name.split(" <").next().unwrap_or(name);
                if hi > lo {
                    format!("{stat} {mean:.1} [{lo:.1}, {hi:.1}]")
                } else {
                    format!("{stat} {mean:.1}")
                }
            })
            .collect();
        let verdict = match (t.passed, t.over_saturated.is_some()) {
            (true, _) => "meets",
            (false, true) if t.stopped_early.is_some() => "over-saturated (stopped early)",
            (false, true) => "over-saturated",
            (false, false) => "fails",
        };
        let _ = writeln!(
            out,
            "<tr><td class=\"num\">{i}</td><td><a href=\"#timeline-details-point-{}\">{}</a></td><td>{verdict}</td><td>{}</td><td>{}</td></tr>",
            t.point,
            esc(&super::charts::point_label(sweep, t.value)),
            esc(&slos.join("; ")),
            esc(t.reason.as_deref().unwrap_or(""))
        );
    }
    out.push_str("</tbody></table>\n");
}

/// A sweep's links to each point's timeline (in the "Every run" section).
fn timeline_links(out: &mut String, report: &ExperimentReport) {
    let points: Vec<_> = groups(report)
        .into_iter()
        .filter(|g| g.key.starts_with("point-"))
        .collect();
    if points.is_empty() {
        return;
    }
    out.push_str("<p id=\"timeline-links\">Timeline of each point (latency beside server and GPU telemetry): ");
    for (i, g) in points.iter().enumerate() {
        let _ = write!(
            out,
            "{}<a href=\"#timeline-details-{}\">{}</a>",
            if i == 0 { "" } else { " · " },
            esc(&g.key),
            esc(&g.label)
        );
    }
    out.push_str("</p>\n");
}

fn section(out: &mut String, id: &str, title: &str) {
    let _ = writeln!(out, "<section id=\"{}\">\n<h2>{}</h2>", esc(id), esc(title));
}

fn run_details(out: &mut String, label: &str, run: &RunData, id: &str, open: bool) {
    let _ = writeln!(
        out,
        "<details id=\"{}\"{}><summary>{} <span class=\"badge\">{}</span></summary>",
        esc(id),
        if open { " open" } else { "" },
        esc(label),
        esc(&run.path)
    );
    out.push_str(&run_metrics_table(run).to_html(&format!("{id}-metrics")));
    out.push_str("<p class=\"note\">* percentile backed by too few samples to be stable.</p>\n<dl class=\"facts\">");
    for (k, v) in run_facts(run) {
        let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", esc(&k), esc(&v));
    }
    out.push_str("</dl>\n");
    if let Some(p) = &run.summary.phases {
        out.push_str("<h3>Where the time went</h3>\n");
        out.push_str(&super::phases::phase_table(p).to_html(&format!("{id}-phases")));
        if let Some(n) = super::phases::reuse_note(p) {
            let _ = writeln!(out, "<p class=\"note\">{}</p>", esc(&n));
        }
    }
    let turns = servebench_metrics::by_turn(&run.records);
    if !turns.is_empty() {
        out.push_str("<h3>By turn</h3>\n");
        out.push_str(&super::turns::turn_table(&turns).to_html(&format!("{id}-turns")));
    }
    if let Some(agents) = &run.agents {
        out.push_str("<h3>Agent sessions by depth</h3>\n");
        out.push_str(&super::agents::depth_table(agents).to_html(&format!("{id}-depths")));
        out.push_str("<h3>Sessions over time</h3>\n");
        out.push_str(&super::agents::swimlanes_svg(agents, &run.records));
    }
    if !run.summary.warnings.is_empty() {
        out.push_str("<ul class=\"notes\">");
        for w in &run.summary.warnings {
            let _ = write!(out, "<li>{}</li>", esc(w));
        }
        out.push_str("</ul>\n");
    }
    out.push_str("</details>\n");
}

/// The experiment as one self-contained HTML page.
pub fn render_html(report: &ExperimentReport) -> String {
    let mut out = String::with_capacity(64 * 1024);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<header>\n<h1>{}</h1>\n<p class=\"sub\">",
        esc(&report.title),
        esc(&report.title)
    );
    let _ = write!(out, "<span class=\"badge\">{}</span>", report.kind.as_str());
    let runs: usize = report.rows.iter().map(|r| r.runs.len()).sum::<usize>()
        + report
            .sweep
            .as_ref()
            .map_or(0, |s| s.points.iter().map(|p| p.runs.len()).sum());
    let _ = write!(
        out,
        "<span class=\"badge\">{runs} run{}</span>",
        if runs == 1 { "" } else { "s" }
    );
    out.push_str("</p>\n");
    if report.quick {
        out.push_str(
            "<div class=\"quick\" id=\"quick-note\"><strong>Numbers from a quick run</strong> \
             (shortened workload): indicative only, not for capacity decisions.</div>\n",
        );
    }
    if let Some(h) = report.sweep.as_ref().and_then(|s| s.headline.as_ref()) {
        let _ = writeln!(
            out,
            "<div class=\"headline\" id=\"headline\">{}</div>",
            esc(h)
        );
    }
    if !report.notes.is_empty() {
        out.push_str("<ul class=\"notes\" id=\"notes\">");
        for n in &report.notes {
            let _ = write!(out, "<li>{}</li>", esc(n));
        }
        out.push_str("</ul>\n");
    }
    out.push_str("</header>\n");

    let rows = rows_table(report, true);
    if !rows.rows.is_empty() {
        section(&mut out, "rows", "Rows");
        out.push_str(&rows.to_html("rows-table"));
        out.push_str("<p class=\"note\">Latencies in ms; with repeated runs each figure is the mean ± std across runs.</p>\n</section>\n");
    }

    if let Some(sweep) = &report.sweep {
        section(
            &mut out,
            "sweep",
            &format!("Sweep: {} over row {}", sweep.variable, sweep.row),
        );
        if !sweep.slos.is_empty() {
            let _ = writeln!(
                out,
                "<p>SLOs: <code>{}</code></p>",
                esc(&sweep.slos.join(", "))
            );
        }
        out.push_str("<div class=\"charts\">\n");
        for c in frontier_charts(sweep) {
            out.push_str(&c.render());
        }
        out.push_str(&super::interactivity::interactivity_chart(sweep).render());
        out.push_str("</div>\n");
        if let Some(search) = &sweep.search {
            search_table(&mut out, sweep, search);
        }
        out.push_str(&sweep_table(sweep).to_html("sweep-table"));
        let axis = &sweep_axes(sweep)[0];
        let stat = stat_label(&axis.metric, axis.percentile);
        match sweep.knee {
            Some(k) => {
                let _ = writeln!(
                    out,
                    "<p id=\"knee-text\">Knee of the output-throughput vs {} frontier: <strong>{}</strong>.</p>",
                    esc(&stat),
                    esc(&sweep_point_label(sweep, k))
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "<p id=\"knee-text\">No knee on the output-throughput vs {} frontier (the curve has not bent).</p>",
                    esc(&stat)
                );
            }
        }
        if let Some(r) = &sweep.stop_reason {
            let _ = writeln!(out, "<p>Stopped early: {}</p>", esc(r));
        }
        timeline_links(&mut out, report);
        out.push_str("</section>\n");
    }

    let gs = groups(report);
    if !gs.is_empty() {
        section(&mut out, "latency", "Latency distributions");
        out.push_str("<div class=\"charts\">\n");
        for metric in ["ttft", "tpot", "itl"] {
            out.push_str(&cdf_chart(&gs, metric).render());
        }
        out.push_str("</div>\n</section>\n");
        section(&mut out, "over-time", "Over time");
        out.push_str("<div class=\"charts\">\n");
        out.push_str(&throughput_over_time(&gs).render());
        out.push_str(&in_flight_over_time(&gs).render());
        out.push_str(&latency_over_time(&gs, "ttft").render());
        out.push_str(&latency_over_time(&gs, "tpot").render());
        out.push_str("</div>\n");
        out.push_str("<h3 id=\"slices\">Per time window</h3>\n<p class=\"note\">Each window's percentiles of the samples observed in it (a TTFT at its first token, a gap at its later token, an E2EL or TPOT at the last token): the median as a line, p50–p90 and p90–p99 shaded.</p>\n");
        for g in &gs {
            out.push_str(&super::slices::group_slices_html(g, gs.len() == 1));
        }
        out.push_str("</section>\n");

        section(&mut out, "runs", "Every run");
        for g in &gs {
            let _ = writeln!(out, "<h3>{}</h3>", esc(&g.label));
            if let Some(row) = report.rows.iter().find(|r| slug(&r.id) == g.key) {
                if !row.hypothesis.is_empty() {
                    let _ = writeln!(out, "<p class=\"sub\">{}</p>", esc(&row.hypothesis));
                }
            }
            let _ = writeln!(
                out,
                "<details class=\"timeline\" id=\"timeline-details-{}\"{}><summary>Timeline: client latency, load, server and GPU telemetry on one time axis{}</summary>",
                esc(&g.key),
                if runs <= 2 { " open" } else { "" },
                if g.runs.len() > 1 { " (first run)" } else { "" }
            );
            out.push_str(&group_timeline_html(g));
            out.push_str("</details>\n");
            for (i, run) in g.runs.iter().enumerate() {
                let label = if g.runs.len() > 1 {
                    format!("run {} of {}", i + 1, g.runs.len())
                } else {
                    "run".to_owned()
                };
                // A short report shows its runs' tables open; a long one keeps them folded.
                run_details(
                    &mut out,
                    &label,
                    run,
                    &format!("run-{}-{i}", g.key),
                    runs <= 2,
                );
            }
        }
        out.push_str("</section>\n");
    }

    for (i, (heading, body)) in report.extra_sections.iter().enumerate() {
        section(&mut out, &format!("extra-{i}"), heading);
        let _ = writeln!(
            out,
            "<div class=\"extra\">{}</div>\n</section>",
            markdown_to_html(body)
        );
    }
    let _ = write!(
        out,
        "<footer>servebench report · self-contained file, no network access.</footer>\n\
         <script>{SCRIPT}</script>\n</body>\n</html>\n"
    );
    out
}
