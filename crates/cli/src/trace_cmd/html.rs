//! The `--html` page of `trace inspect`: one self-contained file, the plots drawn as inline
//! SVG here, so it opens offline and needs no script.

use servebench_report::render::format::html_escape;
use std::fmt::Write as _;

use servebench_workload::trace::inspect::{Histogram, Inspection};

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 260.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 44.0;

/// The page for the trace named `file`.
pub fn render(file: &str, i: &Inspection) -> String {
    let s = &i.summary;
    let a = &s.arrivals;
    let mut rows = vec![
        ("format", s.format.clone()),
        ("requests", s.requests.to_string()),
        ("span", format!("{:.3} s", s.span_s)),
        (
            "mean rate",
            a.mean_per_s
                .map_or_else(|| "n/a".to_owned(), |r| format!("{r:.3} req/s")),
        ),
        (
            "peak rate",
            format!(
                "{} req/s (1-s bucket at +{} s)",
                a.peak_per_s, a.peak_second
            ),
        ),
        (
            "inter-arrival CV",
            a.interarrival_cv
                .map_or_else(|| "n/a".to_owned(), |c| format!("{c:.3}")),
        ),
    ];
    for (label, l) in [
        ("input tokens", &s.input_tokens),
        ("output tokens", &s.output_tokens),
    ] {
        rows.push((
            label,
            format!(
                "p50 {:.1} · p90 {:.1} · p99 {:.1} · max {} · mean {:.1}",
                l.p50, l.p90, l.p99, l.max, l.mean
            ),
        ));
    }
    if let Some(r) = &s.prefix_reuse {
        rows.push((
            "ideal prefix reuse",
            format!(
                "{:.2} % ({} of {} prompt tokens; block {} tokens)",
                r.ratio * 100.0,
                r.reused_tokens,
                r.prompt_tokens,
                r.block_size
            ),
        ));
    }
    if s.out_of_order > 0 {
        rows.push((
            "out of order",
            format!("{} entries (sorted)", s.out_of_order),
        ));
    }

    let mut page = String::new();
    let title = format!("Trace {}", html_escape(file));
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{title}</title>\n<style>\n\
         body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}\n\
         table {{ border-collapse: collapse; }}\n\
         th, td {{ text-align: left; padding: 0.2em 1em 0.2em 0; }}\n\
         svg text {{ font-size: 11px; fill: #444; }}\n\
         </style>\n</head>\n<body>\n<h1>Trace inspection</h1>\n<p><code>{}</code></p>\n<table>\n",
        html_escape(file)
    );
    for (k, v) in rows {
        let _ = writeln!(page, "<tr><th>{}</th><td>{}</td></tr>", k, html_escape(&v));
    }
    page.push_str("</table>\n");

    let bin = i.rate.bin_seconds as f64;
    let _ = write!(
        page,
        "<h2>Arrival rate</h2>\n<p>Requests per second, mean over {}-s bins.</p>\n{}",
        i.rate.bin_seconds,
        bars(
            "arrival-rate",
            &i.rate.requests_per_s,
            bin,
            "seconds after the first arrival",
            "req/s",
        )
    );
    for (id, name, h) in [
        ("input-lengths", "Input length", &i.input_histogram),
        ("output-lengths", "Output length", &i.output_histogram),
    ] {
        let _ = write!(
            page,
            "<h2>{name}</h2>\n<p>Requests per {}-token bin.</p>\n{}",
            h.bin_width,
            histogram(id, h)
        );
    }
    page.push_str("</body>\n</html>\n");
    page
}

fn histogram(id: &str, h: &Histogram) -> String {
    let counts: Vec<f64> = h.counts.iter().map(|c| *c as f64).collect();
    bars(id, &counts, h.bin_width as f64, "tokens", "requests")
}

/// A bar chart of `values`, bar `k` spanning `[k·step, (k+1)·step)` on the x axis.
fn bars(id: &str, values: &[f64], step: f64, x_label: &str, y_label: &str) -> String {
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let y_max = values.iter().copied().fold(0.0, f64::max);
    let y_top = if y_max > 0.0 { y_max } else { 1.0 };
    let x_end = values.len() as f64 * step;
    let bar_w = plot_w / values.len().max(1) as f64;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        "<svg id=\"{id}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" \
         height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" role=\"img\">"
    );
    for (k, v) in values.iter().enumerate() {
        if *v <= 0.0 {
            continue;
        }
        let h = v / y_top * plot_h;
        let _ = writeln!(
            svg,
            "<rect x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"#3b6fb6\">\
             <title>{}: {}</title></rect>",
            LEFT + k as f64 * bar_w,
            TOP + plot_h - h,
            bar_w.max(0.5),
            h,
            number(k as f64 * step),
            number(*v)
        );
    }
    let (x0, y0) = (LEFT, TOP + plot_h);
    let _ = writeln!(
        svg,
        "<line x1=\"{x0}\" y1=\"{y0}\" x2=\"{:.2}\" y2=\"{y0}\" stroke=\"#444\"/>\
         <line x1=\"{x0}\" y1=\"{TOP}\" x2=\"{x0}\" y2=\"{y0}\" stroke=\"#444\"/>",
        LEFT + plot_w
    );
    for f in [0.0, 0.5, 1.0] {
        let _ = writeln!(
            svg,
            "<text x=\"{:.2}\" y=\"{:.2}\" text-anchor=\"end\">{}</text>\
             <text x=\"{:.2}\" y=\"{:.2}\" text-anchor=\"middle\">{}</text>",
            LEFT - 6.0,
            TOP + plot_h * (1.0 - f) + 4.0,
            number(y_top * f),
            LEFT + plot_w * f,
            y0 + 16.0,
            number(x_end * f)
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{:.2}\" y=\"{:.2}\" text-anchor=\"middle\">{}</text>\
         <text x=\"12\" y=\"{:.2}\" text-anchor=\"middle\" \
         transform=\"rotate(-90 12 {:.2})\">{}</text>\n</svg>",
        LEFT + plot_w / 2.0,
        HEIGHT - 6.0,
        html_escape(x_label),
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0,
        html_escape(y_label)
    );
    svg
}

/// A figure for an axis label: whole numbers as such, others with two decimals.
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_workload::trace::inspect::{inspect_reader, InspectOptions};
    use std::path::Path;

    #[test]
    fn page_is_self_contained_with_three_plots_and_escaped_names() {
        let trace = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
                     0,ChatGPT,100,10,110,Conversation log\n\
                     0.5,ChatGPT,300,30,330,Conversation log\n\
                     2,GPT-4,200,20,220,API log\n";
        let i = inspect_reader(
            trace.as_bytes(),
            Path::new("b.csv"),
            &InspectOptions::default(),
        )
        .expect("inspect");
        let page = render("<b&w>.csv", &i);
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.contains("&lt;b&amp;w&gt;.csv"));
        assert!(!page.contains("<b&w>"));
        for id in ["arrival-rate", "input-lengths", "output-lengths"] {
            assert!(page.contains(&format!("<svg id=\"{id}\"")), "{id}");
        }
        assert!(!page.contains("<script"));
        assert!(!page.contains("src=") && !page.contains("href="));
        // Rate bars for seconds 0 and 2 (second 1 is empty), three bars per histogram.
        assert_eq!(page.matches("fill=\"#3b6fb6\"").count(), 2 + 3 + 3);
        assert!(page.contains("<title>0: 2</title>"), "{page}");
        assert!(page.contains("<title>2: 1</title>"), "{page}");
    }

    #[test]
    fn numbers_read_as_whole_or_two_decimals() {
        assert_eq!(number(3.0), "3");
        assert_eq!(number(0.126), "0.13");
        assert_eq!(html_escape("a\"b'c"), "a&quot;b&#39;c");
    }
}
