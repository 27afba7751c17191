//! Metrics over time, per window (`--slice-duration`): the slices CSV and the report's time
//! plots with percentile bands. A run's saved slices are drawn as saved; a run without them
//! is sliced from its records at an automatic width (about 30 windows), by the same function.

use std::fmt::Write as _;

use servebench_metrics::slices::{auto_width_s, Slice, SliceOptions, Slices};

use super::charts::Group;
use super::svg::{Band, Chart, Series, SeriesKind};
use crate::model::RunData;

/// The slices of a run: its saved ones, else computed from its records (`None` without
/// records).
pub fn run_slices(run: &RunData) -> Option<Slices> {
    if let Some(s) = &run.slices {
        return Some(s.clone());
    }
    if run.records.is_empty() {
        return None;
    }
    let opts = SliceOptions {
        origin_ns: Some(run.summary.time_series.origin_ns),
        ..SliceOptions::every(auto_width_s(run.summary.duration_s))
    };
    Some(servebench_metrics::slices(
        &run.records,
        run.telemetry.as_ref(),
        &opts,
    ))
}

fn num(v: f64) -> String {
    if v.is_finite() {
        v.to_string()
    } else {
        String::new()
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(String::new, num)
}

/// `50` → `p50`, `99.9` → `p99.9`.
fn pname(p: f64) -> String {
    let s = format!("{p}");
    format!("p{}", s.trim_end_matches(".0"))
}

/// The slices as CSV, one line per window: counts, throughputs, in flight, then per latency
/// metric `n, mean, min, max` and each kept percentile (ms), then failures by kind and the
/// server's telemetry. Empty cells mean "no sample in the window".
pub fn render_slices_csv(s: &Slices) -> String {
    let mut cols: Vec<String> = [
        "window",
        "start_s",
        "end_s",
        "started",
        "completed",
        "failed",
        "output_tokens",
        "output_throughput",
        "request_throughput",
        "in_flight_mean",
        "in_flight_max",
    ]
    .map(str::to_owned)
    .to_vec();
    for m in Slices::METRICS {
        cols.push(format!("{m}_n"));
        for stat in ["mean", "min", "max"] {
            cols.push(format!("{m}_{stat}_ms"));
        }
        for &p in &s.percentiles {
            cols.push(format!("{m}_{}_ms", pname(p)));
        }
    }
    cols.extend(
        [
            "failures_by_kind",
            "server_samples",
            "server_running_mean",
            "server_waiting_mean",
            "server_waiting_max",
            "server_kv_usage_mean",
            "server_kv_usage_max",
            "server_preemptions",
        ]
        .map(str::to_owned),
    );
    let mut out = cols.join(",");
    out.push('\n');
    for (i, w) in s.windows.iter().enumerate() {
        let mut cells = vec![
            i.to_string(),
            num(w.start_s),
            num(w.end_s),
            w.started.to_string(),
            w.completed.to_string(),
            w.failed.to_string(),
            num(w.output_tokens),
            num(w.output_throughput),
            num(w.request_throughput),
            num(w.in_flight_mean),
            w.in_flight_max.to_string(),
        ];
        for m in Slices::METRICS {
            let st = w.metric(m).cloned().unwrap_or_default();
            cells.push(st.n.to_string());
            cells.extend([opt(st.mean), opt(st.min), opt(st.max)]);
            for &p in &s.percentiles {
                cells.push(opt(st.percentile(p)));
            }
        }
        // `kind=n` pairs joined by `;`: no comma, so the cell needs no quoting.
        cells.push(
            w.failures_by_kind
                .iter()
                .map(|(k, n)| format!("{k}={n}"))
                .collect::<Vec<_>>()
                .join(";"),
        );
        let sv = w.server.clone().unwrap_or_default();
        cells.push(if w.server.is_some() {
            sv.samples.to_string()
        } else {
            String::new()
        });
        cells.extend([
            opt(sv.running_mean),
            opt(sv.waiting_mean),
            opt(sv.waiting_max),
            opt(sv.kv_usage_mean),
            opt(sv.kv_usage_max),
            opt(sv.preemptions),
        ]);
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out
}

/// Mid-point of a window, s.
fn mid(w: &Slice) -> f64 {
    (w.start_s + w.end_s) / 2.0
}

fn line(id: String, label: String, points: Vec<(f64, f64)>, color: usize) -> Series {
    Series {
        id,
        label,
        points,
        tooltips: Vec::new(),
        kind: SeriesKind::LineMarkers,
        color,
    }
}

/// A latency metric over time: the median as a line, p50–p90 and p90–p99 (or the highest
/// percentile kept) as bands above it.
pub fn latency_slices_chart(s: &Slices, metric: &str, key: &str) -> Chart {
    let label = metric.to_ascii_uppercase();
    let have = |p: f64| s.percentiles.contains(&p);
    let top = s
        .percentiles
        .iter()
        .copied()
        .filter(|p| *p > 90.0)
        .fold(None, |m: Option<f64>, p| Some(m.map_or(p, |m| m.max(p))));
    let stat = |w: &Slice, p: f64| w.metric(metric).and_then(|m| m.percentile(p));
    let band = |lo: f64, hi: f64, opacity: f64, id: &str| Band {
        id: format!("slices-{metric}-{key}-{id}"),
        label: format!("{}–{}", pname(lo), pname(hi)),
        points: s
            .windows
            .iter()
            .map(|w| {
                (
                    mid(w),
                    stat(w, lo).unwrap_or(f64::NAN),
                    stat(w, hi).unwrap_or(f64::NAN),
                )
            })
            .collect(),
        color: 0,
        opacity,
    };
    let mut bands = Vec::new();
    if have(50.0) && have(90.0) {
        bands.push(band(50.0, 90.0, 0.35, "p50-p90"));
    }
    if let Some(top) = top.filter(|_| have(90.0)) {
        bands.push(band(90.0, top, 0.15, "p90-top"));
    }
    let median: Vec<(f64, f64)> = s
        .windows
        .iter()
        .map(|w| (mid(w), stat(w, 50.0).unwrap_or(f64::NAN)))
        .collect();
    let mut series = vec![Series {
        tooltips: s
            .windows
            .iter()
            .map(|w| {
                let m = w.metric(metric).cloned().unwrap_or_default();
                let pcts: Vec<String> = m
                    .percentiles
                    .iter()
                    .map(|p| format!("{} {:.1}", pname(p.p), p.value))
                    .collect();
                format!(
                    "{label} {:.1}–{:.1} s: n = {}, {} ms",
                    w.start_s,
                    w.end_s,
                    m.n,
                    pcts.join(", ")
                )
            })
            .collect(),
        ..line(
            format!("slices-{metric}-{key}-p50"),
            format!("{label} median"),
            median,
            0,
        )
    }];
    if let Some(top) = top {
        series.push(Series {
            kind: SeriesKind::Line,
            ..line(
                format!("slices-{metric}-{key}-top"),
                format!("{label} {}", pname(top)),
                s.windows
                    .iter()
                    .map(|w| (mid(w), stat(w, top).unwrap_or(f64::NAN)))
                    .collect(),
                2,
            )
        });
    }
    Chart {
        id: format!("slices-{metric}-{key}"),
        title: format!(
            "{label} per {} s window{}",
            num(s.width_s),
            if metric == "itl" { " (every gap)" } else { "" }
        ),
        x_label: "time since run start (s)".into(),
        y_label: format!("{label} (ms)"),
        series,
        bands,
        x_from_zero: true,
        y_from_zero: true,
        ..Chart::default()
    }
}

/// Throughput (output tok/s), completions and failures per window.
pub fn throughput_slices_chart(s: &Slices, key: &str) -> Chart {
    let pts = |f: fn(&Slice) -> f64| -> Vec<(f64, f64)> {
        s.windows.iter().map(|w| (mid(w), f(w))).collect()
    };
    Chart {
        id: format!("slices-throughput-{key}"),
        title: format!("Output throughput per {} s window", num(s.width_s)),
        x_label: "time since run start (s)".into(),
        y_label: "output tok/s".into(),
        series: vec![line(
            format!("slices-throughput-{key}-output"),
            "output tok/s".into(),
            pts(|w| w.output_throughput),
            0,
        )],
        x_from_zero: true,
        y_from_zero: true,
        ..Chart::default()
    }
}

/// Requests in flight (mean, with the window's maximum as a band), completions and failures
/// per second.
pub fn load_slices_chart(s: &Slices, key: &str) -> Chart {
    let secs = |w: &Slice| (w.end_s - w.start_s).max(f64::MIN_POSITIVE);
    Chart {
        id: format!("slices-load-{key}"),
        title: format!(
            "In flight, completions and failures per {} s window",
            num(s.width_s)
        ),
        x_label: "time since run start (s)".into(),
        y_label: "requests (in flight) · requests/s".into(),
        bands: vec![Band {
            id: format!("slices-load-{key}-inflight-max"),
            label: "in flight: mean to max".into(),
            points: s
                .windows
                .iter()
                .map(|w| (mid(w), w.in_flight_mean, w.in_flight_max as f64))
                .collect(),
            color: 0,
            opacity: 0.2,
        }],
        series: vec![
            line(
                format!("slices-load-{key}-inflight"),
                "in flight (mean)".into(),
                s.windows
                    .iter()
                    .map(|w| (mid(w), w.in_flight_mean))
                    .collect(),
                0,
            ),
            line(
                format!("slices-load-{key}-completed"),
                "completed/s".into(),
                s.windows
                    .iter()
                    .map(|w| (mid(w), w.request_throughput))
                    .collect(),
                4,
            ),
            line(
                format!("slices-load-{key}-failed"),
                "failed/s".into(),
                s.windows
                    .iter()
                    .map(|w| (mid(w), w.failed as f64 / secs(w)))
                    .collect(),
                2,
            ),
        ],
        x_from_zero: true,
        y_from_zero: true,
        ..Chart::default()
    }
}

/// The server's running and waiting requests and KV usage (in %) per window; `None` when no
/// window has a scrape.
pub fn server_slices_chart(s: &Slices, key: &str) -> Option<Chart> {
    if s.windows.iter().all(|w| w.server.is_none()) {
        return None;
    }
    let pts = |f: fn(&servebench_metrics::slices::SliceServer) -> Option<f64>| {
        s.windows
            .iter()
            .map(|w| (mid(w), w.server.as_ref().and_then(f).unwrap_or(f64::NAN)))
            .collect::<Vec<_>>()
    };
    Some(Chart {
        id: format!("slices-server-{key}"),
        title: format!("Server telemetry per {} s window", num(s.width_s)),
        x_label: "time since run start (s)".into(),
        y_label: "requests · KV cache %".into(),
        series: vec![
            line(
                format!("slices-server-{key}-running"),
                "running (mean)".into(),
                pts(|v| v.running_mean),
                0,
            ),
            line(
                format!("slices-server-{key}-waiting"),
                "waiting (mean)".into(),
                pts(|v| v.waiting_mean),
                1,
            ),
            line(
                format!("slices-server-{key}-kv"),
                "KV cache usage, max (%)".into(),
                pts(|v| v.kv_usage_max.map(|k| k * 100.0)),
                2,
            ),
        ],
        x_from_zero: true,
        y_from_zero: true,
        ..Chart::default()
    })
}

/// Every slice chart of one run.
pub fn slice_charts(s: &Slices, key: &str) -> Vec<Chart> {
    let mut out = vec![
        latency_slices_chart(s, "ttft", key),
        latency_slices_chart(s, "itl", key),
        latency_slices_chart(s, "tpot", key),
        throughput_slices_chart(s, key),
        load_slices_chart(s, key),
    ];
    out.extend(server_slices_chart(s, key));
    out
}

/// The "Over time, per window" block of one group (its first run): its charts, or nothing
/// without records or slices.
pub fn group_slices_html(g: &Group<'_>, open: bool) -> String {
    let Some(run) = g.runs.first() else {
        return String::new();
    };
    let Some(s) = run_slices(run) else {
        return String::new();
    };
    if s.windows.is_empty() {
        return String::new();
    }
    let mut o = String::new();
    let _ = writeln!(
        o,
        "<details class=\"slices\" id=\"slices-details-{}\"{}><summary>{}: {} windows of {} s{}{}</summary>\n<div class=\"charts\">",
        super::format::html_escape(&g.key),
        if open { " open" } else { "" },
        super::format::html_escape(&g.label),
        s.windows.len(),
        num(s.width_s),
        if run.slices.is_some() {
            " (as saved)"
        } else {
            " (automatic width; --slice-duration sets it)"
        },
        if g.runs.len() > 1 { ", first run" } else { "" },
    );
    for c in slice_charts(&s, &g.key) {
        o.push_str(&c.render());
    }
    o.push_str("</div>\n</details>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_metrics::RequestRecord;

    fn records() -> Vec<RequestRecord> {
        (0..20u64)
            .map(|i| {
                let sent = i * 250_000_000;
                let times: Vec<u64> = (1..=4).map(|k| sent + 50_000_000 * k).collect();
                RequestRecord::streamed(i, sent, &times, 10)
            })
            .collect()
    }

    #[test]
    fn the_csv_has_one_line_per_window_and_the_saved_figures() {
        let s = servebench_metrics::slices(&records(), None, &SliceOptions::every(1.0));
        let csv = render_slices_csv(&s);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 1 + s.windows.len());
        let header: Vec<&str> = lines[0].split(',').collect();
        assert!(header.contains(&"ttft_p99_ms"));
        assert!(header.contains(&"itl_p50_ms"));
        let row: Vec<&str> = lines[1].split(',').collect();
        assert_eq!(row.len(), header.len());
        let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
        assert_eq!(row[col("ttft_p50_ms")], "50");
        assert_eq!(row[col("started")], s.windows[0].started.to_string());
        assert_eq!(row[col("server_samples")], "");
    }

    #[test]
    fn latency_charts_have_a_median_line_and_percentile_bands() {
        let s = servebench_metrics::slices(&records(), None, &SliceOptions::every(1.0));
        let c = latency_slices_chart(&s, "ttft", "A");
        assert_eq!(c.bands.len(), 2);
        assert_eq!(c.bands[0].label, "p50–p90");
        assert_eq!(c.bands[1].label, "p90–p99");
        let html = c.render();
        assert!(html.contains("id=\"slices-ttft-A-p50-p90\""));
        assert!(html.contains("class=\"series band\""));
        assert!(!html.contains("NaN"));
        assert!(server_slices_chart(&s, "A").is_none());
    }
}
