//! vLLM's `--plot-timeline` and `--plot-dataset-stats`, as self-contained files beside the
//! result JSON: the request timeline (one row per request: the wait for its first token in
//! grey, then each inter-token gap coloured by `--timeline-itl-thresholds`, as vLLM's plotly
//! figure colours them) as HTML with an inline SVG, and the prompt and output length
//! histograms as SVG.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use servebench_metrics::RequestRecord;

const WIDTH: f64 = 1000.0;
const ROW: f64 = 6.0;
const LEFT: f64 = 60.0;

/// `base` with its extension replaced by `suffix` (vLLM's `Path.with_suffix`).
pub fn beside(base: &Path, suffix: &str) -> PathBuf {
    let name = base
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = match name.rsplit_once('.') {
        Some((stem, _)) if !stem.is_empty() => stem.to_owned(),
        _ => name,
    };
    base.with_file_name(format!("{stem}.{}", suffix.trim_start_matches('.')))
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The timeline of `records` (those that got a first token), ITLs coloured below `t1`,
/// between, and above `t2` ms.
pub fn timeline_html(records: &[RequestRecord], title: &str, (t1, t2): (f64, f64)) -> String {
    let rows: Vec<&RequestRecord> = {
        let mut r: Vec<&RequestRecord> =
            records.iter().filter(|r| r.first_token.is_some()).collect();
        r.sort_by_key(|r| r.started.unwrap_or(r.sent));
        r
    };
    let t0 = rows
        .iter()
        .map(|r| r.started.unwrap_or(r.sent))
        .min()
        .unwrap_or(0);
    let t_end = rows
        .iter()
        .map(|r| r.end.or(r.done).unwrap_or(r.sent))
        .max()
        .unwrap_or(t0)
        .max(t0 + 1);
    let span = (t_end - t0) as f64;
    let x = |t: u64| LEFT + (t.saturating_sub(t0)) as f64 / span * (WIDTH - LEFT - 10.0);
    let height = 40.0 + ROW * rows.len() as f64;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="10">"#
    );
    let _ = write!(
        svg,
        r#"<text x="{LEFT}" y="12">time (s) 0 to {:.3}</text>"#,
        span / 1e9
    );
    for (i, r) in rows.iter().enumerate() {
        let y = 20.0 + ROW * i as f64;
        let start = r.started.unwrap_or(r.sent);
        let first = r.first_token.unwrap_or(start);
        let _ = write!(
            svg,
            r##"<rect x="{:.2}" y="{y:.1}" width="{:.2}" height="{:.1}" fill="#bbbbbb"><title>request {}: TTFT {:.1} ms, {} prompt tokens</title></rect>"##,
            x(start),
            (x(first) - x(start)).max(0.5),
            ROW - 1.0,
            r.id,
            (first - start) as f64 / 1e6,
            r.input_tokens
        );
        let mut prev = first;
        for e in r.events.iter().map(|e| e.t).filter(|&t| t > first) {
            let itl_ms = (e - prev) as f64 / 1e6;
            let colour = if itl_ms < t1 {
                "#2ca02c"
            } else if itl_ms <= t2 {
                "#ff7f0e"
            } else {
                "#d62728"
            };
            let _ = write!(
                svg,
                r#"<rect x="{:.2}" y="{y:.1}" width="{:.2}" height="{:.1}" fill="{colour}"><title>ITL {itl_ms:.1} ms</title></rect>"#,
                x(prev),
                (x(e) - x(prev)).max(0.2),
                ROW - 1.0
            );
            prev = e;
        }
    }
    svg.push_str("</svg>");
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title></head><body>\n\
         <h3>{t}</h3>\n<p>One row per request: grey until its first token, then each \
         inter-token gap green below {t1} ms, orange up to {t2} ms, red above. Hover for \
         values.</p>\n{svg}\n</body></html>\n",
        t = escape(title)
    )
}

/// Histograms of the prompt and output tokens of `records` (vLLM's dataset statistics).
pub fn dataset_stats_svg(records: &[RequestRecord]) -> String {
    let prompts: Vec<u64> = records.iter().map(|r| r.input_tokens).collect();
    let outputs: Vec<u64> = records.iter().map(|r| r.output_tokens).collect();
    let mut svg = String::from(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="820" height="260" font-family="sans-serif" font-size="11">"#,
    );
    for (k, (name, v)) in [("prompt tokens", &prompts), ("output tokens", &outputs)]
        .into_iter()
        .enumerate()
    {
        let ox = 10.0 + 410.0 * k as f64;
        histogram(&mut svg, ox, name, v);
    }
    svg.push_str("</svg>\n");
    svg
}

fn histogram(svg: &mut String, ox: f64, name: &str, v: &[u64]) {
    const BINS: usize = 20;
    let (lo, hi) = (
        v.iter().copied().min().unwrap_or(0),
        v.iter().copied().max().unwrap_or(0),
    );
    let width = ((hi - lo) as f64 / BINS as f64).max(1.0);
    let mut counts = [0u64; BINS];
    for &x in v {
        let b = (((x - lo) as f64 / width) as usize).min(BINS - 1);
        counts[b] += 1;
    }
    let top = counts.iter().copied().max().unwrap_or(1).max(1) as f64;
    let mean = if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<u64>() as f64 / v.len() as f64
    };
    let _ = write!(
        svg,
        r#"<text x="{ox}" y="15">{name}: {} requests, {lo} to {hi}, mean {mean:.1}</text>"#,
        v.len()
    );
    for (i, c) in counts.iter().enumerate() {
        let h = *c as f64 / top * 200.0;
        let _ = write!(
            svg,
            r##"<rect x="{:.1}" y="{:.1}" width="18" height="{h:.1}" fill="#1f77b4"><title>{:.0}-{:.0}: {c}</title></rect>"##,
            ox + 19.0 * i as f64,
            230.0 - h,
            lo as f64 + width * i as f64,
            lo as f64 + width * (i + 1) as f64
        );
    }
}

/// Writes the files `--plot-timeline` and `--plot-dataset-stats` ask for beside `result`
/// (the result JSON's path); returns what was written.
pub fn write_plots(
    flags: &super::vllm_extras::VllmServeFlags,
    result: &Path,
    records: &[RequestRecord],
) -> Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    if flags.plot_timeline {
        let path = beside(result, "timeline.html");
        let title = result
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        std::fs::write(
            &path,
            timeline_html(records, &title, flags.itl_thresholds_ms()?),
        )
        .with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    if flags.plot_dataset_stats {
        let path = beside(result, "dataset_stats.svg");
        std::fs::write(&path, dataset_stats_svg(records))
            .with_context(|| format!("writing {}", path.display()))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn files_go_beside_the_result() {
        assert_eq!(
            beside(Path::new("d/vllm-1.0qps-m.json"), "timeline.html"),
            PathBuf::from("d/vllm-1.0qps-m.timeline.html")
        );
    }
}
