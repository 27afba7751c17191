//! One run's timeline: client latency, load, server telemetry and GPU telemetry drawn on one
//! time axis (seconds from the run's time zero, the clock every record and every telemetry
//! sample is stamped on), one chart per unit so each keeps a readable scale.

use servebench_metrics::result::{GpuSample, GpuTelemetry, ServerTelemetry, NO_GPU_TELEMETRY};
use servebench_metrics::units::{ns_to_ms, ns_to_s};

use super::charts::Group;
use super::format::ms;
use super::svg::{Chart, Series, SeriesKind};
use crate::model::RunData;

/// Most TTFT dots drawn; beyond this every k-th request is shown.
const SCATTER_MAX: usize = 1500;

/// Why a run has no GPU series.
fn gpu_absence(run: &RunData) -> String {
    match &run.gpu {
        Some(g) => g
            .describe_absence()
            .unwrap_or_else(|| "no GPU telemetry".into()),
        None if run.metadata.target.clock.as_deref() == Some("virtual") => {
            "no GPU telemetry (virtual-time simulation: no GPU ran)".into()
        }
        None => NO_GPU_TELEMETRY.into(),
    }
}

fn secs(ns: u64) -> f64 {
    ns_to_s(ns)
}

/// The end of the run's time axis: its last record, telemetry sample, GPU sample or
/// in-flight bucket.
fn horizon_s(run: &RunData) -> f64 {
    let records = run.records.iter().filter_map(|r| r.end.or(r.done)).max();
    let server = run
        .telemetry
        .as_ref()
        .and_then(|t| t.samples.iter().map(|s| s.t).max());
    let gpu = run.gpu.as_ref().and_then(|g| {
        g.gpus
            .iter()
            .flat_map(|s| s.samples.iter().map(|x| x.t))
            .max()
    });
    let ts = &run.summary.time_series;
    let buckets = ts.origin_ns + ts.bucket_ns * ts.in_flight_mean.len() as u64;
    secs(
        records
            .into_iter()
            .chain(server)
            .chain(gpu)
            .chain([buckets])
            .max()
            .unwrap_or(0),
    )
}

fn line(id: String, label: String, points: Vec<(f64, f64)>, unit: &str, color: usize) -> Series {
    let tooltips = points
        .iter()
        .map(|(t, v)| format!("{label}: {} {unit} at {t:.1} s", ms(*v)))
        .collect();
    Series {
        id,
        label,
        points,
        tooltips,
        // Dots carry the tooltips: a reader hovers a sample to read its value and time.
        kind: SeriesKind::LineMarkers,
        color,
    }
}

fn server_series(
    t: &ServerTelemetry,
    pick: fn(&servebench_metrics::result::TelemetrySample) -> Option<f64>,
) -> Vec<(f64, f64)> {
    t.samples
        .iter()
        .filter_map(|s| Some((secs(s.t), pick(s)?)))
        .collect()
}

fn gpu_series(
    gpu: &GpuTelemetry,
    key: &str,
    what: &str,
    unit: &str,
    first_color: usize,
    pick: fn(&GpuSample) -> Option<f64>,
) -> Vec<Series> {
    gpu.gpus
        .iter()
        .enumerate()
        .filter_map(|(i, g)| {
            let points: Vec<(f64, f64)> = g
                .samples
                .iter()
                .filter_map(|s| Some((secs(s.t), pick(s)?)))
                .collect();
            (!points.is_empty()).then(|| {
                line(
                    format!("{key}-gpu{}-{what}", g.gpu),
                    format!("GPU {} {what}", g.gpu),
                    points,
                    unit,
                    first_color + i,
                )
            })
        })
        .collect()
}

fn chart(id: String, title: &str, y_label: &str, series: Vec<Series>, x_max: f64) -> Chart {
    Chart {
        id,
        title: title.into(),
        x_label: "time since run start (s)".into(),
        y_label: y_label.into(),
        series,
        x_from_zero: true,
        y_from_zero: true,
        x_max: Some(x_max),
        ..Chart::default()
    }
}

/// The timeline charts of one run (`key` makes element ids unique): TTFT of each request;
/// requests in flight beside the server's running and waiting counts and preemptions; KV-cache
/// usage beside GPU utilization; GPU power; GPU memory.
pub fn run_timeline(run: &RunData, key: &str) -> Vec<Chart> {
    let x_max = horizon_s(run);
    let key = format!("timeline-{key}");

    let mut ttft: Vec<(f64, f64)> = run
        .records
        .iter()
        .filter(|r| r.is_success())
        .filter_map(|r| Some((secs(r.sent), ns_to_ms(r.ttft_ns()?))))
        .collect();
    let stride = ttft.len().div_ceil(SCATTER_MAX).max(1);
    if stride > 1 {
        ttft = ttft.into_iter().step_by(stride).collect();
    }
    let ttft_tips = ttft
        .iter()
        .map(|(t, v)| format!("TTFT {} ms, sent at {t:.2} s", ms(*v)))
        .collect();
    let mut latency = chart(
        format!("{key}-ttft"),
        "TTFT of each request",
        "TTFT (ms)",
        vec![Series {
            id: format!("{key}-ttft-points"),
            label: "TTFT".into(),
            points: ttft,
            tooltips: ttft_tips,
            kind: SeriesKind::Scatter,
            color: 0,
        }],
        x_max,
    );
    latency.x_label = "request sent at (s since run start)".into();
    if stride > 1 {
        latency.note = Some(format!("every {stride}th request shown"));
    }

    let ts = &run.summary.time_series;
    let width = ns_to_s(ts.bucket_ns.max(1));
    let origin = secs(ts.origin_ns);
    let in_flight: Vec<(f64, f64)> = ts
        .in_flight_mean
        .iter()
        .enumerate()
        .map(|(k, &v)| (origin + (k as f64 + 0.5) * width, v))
        .collect();
    let mut load_series = vec![line(
        format!("{key}-inflight"),
        "in flight (client)".into(),
        in_flight,
        "requests",
        0,
    )];
    let mut util_series = Vec::new();
    let server_note = match &run.telemetry {
        Some(t) if !t.samples.is_empty() => {
            let first_preemptions = t.samples.iter().find_map(|s| s.preemptions);
            for (what, color, pick) in [
                (
                    "running",
                    1,
                    (|s| s.running) as fn(&servebench_metrics::result::TelemetrySample) -> _,
                ),
                ("waiting", 2, |s| s.waiting),
            ] {
                let pts = server_series(t, pick);
                if !pts.is_empty() {
                    load_series.push(line(
                        format!("{key}-{what}"),
                        format!("{what} (server)"),
                        pts,
                        "requests",
                        color,
                    ));
                }
            }
            if let Some(base) = first_preemptions {
                let pts: Vec<(f64, f64)> = t
                    .samples
                    .iter()
                    .filter_map(|s| Some((secs(s.t), s.preemptions? - base)))
                    .collect();
                load_series.push(line(
                    format!("{key}-preemptions"),
                    "preemptions since start (server)".into(),
                    pts,
                    "preemptions",
                    3,
                ));
            }
            let kv: Vec<(f64, f64)> = t
                .samples
                .iter()
                .filter_map(|s| Some((secs(s.t), s.kv_usage? * 100.0)))
                .collect();
            if !kv.is_empty() {
                util_series.push(line(
                    format!("{key}-kv"),
                    "KV-cache usage (server)".into(),
                    kv,
                    "%",
                    4,
                ));
            }
            None
        }
        Some(_) => Some("the server's /metrics gave no sample".to_owned()),
        None => Some("no server telemetry (/metrics was not scraped)".to_owned()),
    };
    let gpu_note = gpu_absence(run);
    let (power, memory) = match run.gpu.as_ref().filter(|g| g.has_samples()) {
        Some(g) => {
            util_series.extend(gpu_series(g, &key, "util", "%", 5, |s| s.util_percent));
            (
                gpu_series(g, &key, "power", "W", 5, |s| s.power_w),
                gpu_series(g, &key, "memory", "MiB", 5, |s| s.memory_used_mib),
            )
        }
        None => (Vec::new(), Vec::new()),
    };
    let has_gpu = !power.is_empty() || !memory.is_empty() || util_series.len() > 1;

    let mut load = chart(
        format!("{key}-load"),
        "Requests: in flight, running, waiting, preemptions",
        "requests",
        load_series,
        x_max,
    );
    load.note = server_note.clone();
    let mut util = chart(
        format!("{key}-util"),
        "KV-cache usage and GPU utilization",
        "percent",
        util_series,
        x_max,
    );
    util.note = match (&server_note, has_gpu) {
        (Some(s), false) => Some(format!("{s}; {gpu_note}")),
        (Some(s), true) => Some(s.clone()),
        (None, false) => Some(gpu_note.clone()),
        (None, true) => None,
    };
    let mut charts = vec![latency, load, util];
    if has_gpu {
        charts.push(chart(
            format!("{key}-power"),
            "GPU power draw",
            "W",
            power,
            x_max,
        ));
        charts.push(chart(
            format!("{key}-memory"),
            "GPU memory used",
            "MiB",
            memory,
            x_max,
        ));
    }
    charts
}

/// Most requests drawn on a request timeline; beyond this every k-th is shown.
const TIMELINE_REQUESTS: usize = 200;

/// One bar per request (every k-th past `TIMELINE_REQUESTS`), in order of sending, on the
/// run's time axis: queued (intended → sent), to first token (sent → first token), streaming
/// (first → last token); a failed request as one bar from its send to its failure. `None`
/// without records.
pub fn request_timeline(run: &RunData, key: &str) -> Option<Chart> {
    let mut recs: Vec<&servebench_metrics::RequestRecord> = run.records.iter().collect();
    if recs.is_empty() {
        return None;
    }
    recs.sort_by_key(|r| (r.sent, r.id));
    let stride = recs.len().div_ceil(TIMELINE_REQUESTS);
    // The run's time axis, as the other timeline charts draw it.
    let s = secs;
    let (mut queued, mut waiting, mut streaming, mut failed) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (row, r) in recs.iter().step_by(stride).enumerate() {
        let y = row as f64;
        let bar = |v: &mut Vec<(f64, f64)>, a: u64, b: u64| {
            if b >= a {
                v.extend([(s(a), y), (s(b), y)]);
            }
        };
        if r.sent > r.intended {
            bar(&mut queued, r.intended, r.sent);
        }
        if !r.is_success() {
            bar(&mut failed, r.sent, r.done.or(r.end).unwrap_or(r.sent));
            continue;
        }
        if let Some(ft) = r.first_token {
            bar(&mut waiting, r.sent, ft);
            if let Some(end) = r.end {
                bar(&mut streaming, ft, end);
            }
        }
    }
    let series = |id: &str, label: &str, points: Vec<(f64, f64)>, color: usize| Series {
        id: format!("reqtl-{key}-{id}"),
        label: label.into(),
        points,
        tooltips: Vec::new(),
        kind: SeriesKind::Segments,
        color,
    };
    Some(Chart {
        id: format!("reqtl-{key}"),
        title: "Request timeline: each request's queue, wait for its first token and stream".into(),
        x_label: "time since run start (s)".into(),
        y_label: "request (in order of sending)".into(),
        series: vec![
            series("queued", "queued (intended → sent)", queued, 9),
            series(
                "first-token",
                "to first token (sent → first token)",
                waiting,
                1,
            ),
            series("streaming", "streaming (first → last token)", streaming, 0),
            series("failed", "failed (sent → failure)", failed, 2),
        ],
        x_from_zero: true,
        y_from_zero: true,
        note: (stride > 1).then(|| format!("every {stride}th request of {} shown", recs.len())),
        x_max: Some(horizon_s(run)),
        ..Chart::default()
    })
}

/// The timeline of a group's first run, as HTML: the charts side by side under one heading.
pub fn group_timeline_html(g: &Group<'_>) -> String {
    let Some(run) = g.runs.first() else {
        return String::new();
    };
    let mut out = format!(
        "<div class=\"charts timeline\" id=\"timeline-{}\" data-run=\"{}\">\n",
        super::format::html_escape(&g.key),
        super::format::html_escape(&run.path)
    );
    for c in run_timeline(run, &g.key)
        .into_iter()
        .chain(request_timeline(run, &g.key))
    {
        out.push_str(&c.render());
    }
    out.push_str("</div>\n");
    out
}
