//! A small SVG line/scatter chart: linear axes with "nice" ticks, series, horizontal
//! reference lines (SLOs) and labelled marks (the knee). Output is inline SVG plus an HTML
//! legend; every series is a `<g class="series" id=…>` so the page (and tests) can find it.

use std::fmt::Write as _;

use super::format::html_escape as esc;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 340.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 18.0;
const TOP: f64 = 14.0;
const BOTTOM: f64 = 46.0;

/// Series colours (Tableau 10: distinguishable, and readable on white).
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

/// The colour of the `i`-th series.
pub fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeriesKind {
    /// A polyline.
    Line,
    /// A polyline with a dot on every point.
    LineMarkers,
    /// Dots only.
    Scatter,
}

/// One data series.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Element id (unique in the page).
    pub id: String,
    /// Legend label.
    pub label: String,
    /// `(x, y)` points; non-finite points are skipped.
    pub points: Vec<(f64, f64)>,
    /// Tooltip per point (same length as `points`, or empty for none).
    pub tooltips: Vec<String>,
    /// Drawing style.
    pub kind: SeriesKind,
    /// Colour index into the palette.
    pub color: usize,
}

/// A horizontal reference line (an SLO threshold).
#[derive(Debug, Clone, PartialEq)]
pub struct RefLine {
    /// Its y value.
    pub y: f64,
    /// Label drawn at its right end.
    pub label: String,
    /// CSS class (`slo`).
    pub class: String,
}

/// A labelled point (the knee).
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    /// Element id.
    pub id: String,
    /// Position.
    pub x: f64,
    /// Position.
    pub y: f64,
    /// Label.
    pub label: String,
}

/// A chart ready to draw.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Chart {
    /// Element id of the `<figure>`.
    pub id: String,
    /// Caption.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// The series.
    pub series: Vec<Series>,
    /// Horizontal reference lines.
    pub ref_lines: Vec<RefLine>,
    /// Marked points.
    pub marks: Vec<Mark>,
    /// Start the x axis at 0.
    pub x_from_zero: bool,
    /// Logarithmic x axis (non-positive x values are left out).
    pub x_log: bool,
    /// Start the y axis at 0.
    pub y_from_zero: bool,
    /// A line under the chart (e.g. "every 3rd request shown").
    pub note: Option<String>,
    /// Extend the x axis to at least this value, so charts of one run share one time axis.
    pub x_max: Option<f64>,
    /// Vertical reference lines (a threshold on the x axis).
    pub v_lines: Vec<VLine>,
    /// Shaded ranges drawn beneath the series (percentile bands over time).
    pub bands: Vec<Band>,
    /// Uncertainty of single points (a CI, mean ± std across repeats), as whiskers.
    pub whiskers: Vec<Whisker>,
}

/// A shaded range: at each `x` the area from `lo` to `hi`.
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    /// Element id.
    pub id: String,
    /// Legend label.
    pub label: String,
    /// `(x, lo, hi)`, in x order; non-finite points split the band.
    pub points: Vec<(f64, f64, f64)>,
    /// Colour index into the palette.
    pub color: usize,
    /// Fill opacity (0–1): inner bands darker than outer ones.
    pub opacity: f64,
}

/// Error bars around one point: `[x_lo, x_hi]` across and `[y_lo, y_hi]` up and down (equal
/// bounds draw no bar on that axis).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Whisker {
    pub x: f64,
    pub y: f64,
    pub x_lo: f64,
    pub x_hi: f64,
    pub y_lo: f64,
    pub y_hi: f64,
    /// Colour index into the palette.
    pub color: usize,
}

/// A vertical reference line (an SLO threshold on the x axis).
#[derive(Debug, Clone, PartialEq)]
pub struct VLine {
    /// Its x value.
    pub x: f64,
    /// Label drawn at its top.
    pub label: String,
    /// CSS class (`slo`).
    pub class: String,
}

/// "Nice" tick positions (steps of 1, 2 or 5 × 10^k) covering `[lo, hi]`.
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> (f64, f64, f64) {
    let span = (hi - lo).max(f64::MIN_POSITIVE);
    let raw = span / target.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let start = (lo / step).floor() * step;
    let end = (hi / step).ceil() * step;
    (start, end, step)
}

fn tick_text(v: f64, step: f64) -> String {
    // As many decimals as the step needs (2.5 → 1, 0.25 → 2), so ticks never round together.
    let decimals = (0..=6)
        .find(|&d| {
            let scaled = step * 10f64.powi(d);
            (scaled - scaled.round()).abs() < 1e-6 * scaled.abs().max(1.0)
        })
        .unwrap_or(6) as usize;
    let s = format!("{v:.decimals$}");
    if s.trim_start_matches('-')
        .chars()
        .all(|c| c == '0' || c == '.')
    {
        "0".into()
    } else {
        s
    }
}

struct Scale {
    lo: f64,
    hi: f64,
    a: f64,
    b: f64,
    log: bool,
}

impl Scale {
    /// Pixel position of `v`; NaN for a non-positive value on a log scale.
    fn map(&self, v: f64) -> f64 {
        if self.log {
            if v <= 0.0 {
                return f64::NAN;
            }
            let (lo, hi) = (self.lo.log10(), self.hi.log10());
            return self.a + (v.log10() - lo) / (hi - lo) * (self.b - self.a);
        }
        self.a + (v - self.lo) / (self.hi - self.lo) * (self.b - self.a)
    }
}

/// Ticks of a log axis covering `[lo, hi]` (both > 0): 1-2-5 steps per decade over a few
/// decades, decades only over more.
pub fn log_ticks(lo: f64, hi: f64) -> (f64, f64, Vec<(f64, String)>) {
    let d0 = lo.log10().floor() as i32;
    let d1 = (hi.log10().ceil() as i32).max(d0 + 1);
    let multipliers: &[f64] = if d1 - d0 <= 3 {
        &[1.0, 2.0, 5.0]
    } else {
        &[1.0]
    };
    let mut ticks = Vec::new();
    for d in d0..=d1 {
        for &m in multipliers {
            let v = m * 10f64.powi(d);
            if v <= 10f64.powi(d1) * 1.000_001 {
                let decimals = usize::try_from(-d).unwrap_or(0);
                ticks.push((v, format!("{v:.decimals$}")));
            }
        }
    }
    (10f64.powi(d0), 10f64.powi(d1), ticks)
}

fn range(values: impl Iterator<Item = f64>, from_zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
            (l.min(v), h.max(v))
        });
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if from_zero {
        lo = lo.min(0.0);
        hi = hi.max(0.0);
    }
    if hi - lo < 1e-12 {
        let pad = if hi.abs() > 1e-12 {
            hi.abs() * 0.1
        } else {
            1.0
        };
        lo -= pad;
        hi += pad;
        if from_zero && lo < 0.0 && hi > 0.0 && lo > -pad * 1.01 {
            lo = 0.0;
        }
    }
    (lo, hi)
}

impl Chart {
    /// Does any series have a finite point?
    pub fn has_data(&self) -> bool {
        self.series
            .iter()
            .any(|s| s.points.iter().any(|(x, y)| x.is_finite() && y.is_finite()))
    }

    /// The chart as an HTML `<figure>` holding the SVG and its legend.
    pub fn render(&self) -> String {
        let finite = |&&(x, y): &&(f64, f64)| x.is_finite() && y.is_finite();
        let xs = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().filter(finite).map(|p| p.0))
            .chain(self.marks.iter().map(|m| m.x))
            .chain(self.x_max.filter(|x| x.is_finite()))
            .chain(self.bands.iter().flat_map(|b| b.points.iter().map(|p| p.0)))
            .chain(
                self.whiskers
                    .iter()
                    .flat_map(|w| [w.x_lo, w.x_hi])
                    .filter(|x| x.is_finite()),
            )
            .chain(self.v_lines.iter().map(|v| v.x).filter(|x| x.is_finite()));
        let xs: Vec<f64> = xs.filter(|&x| !self.x_log || x > 0.0).collect();
        let (x_lo, x_hi) = range(xs.into_iter(), self.x_from_zero && !self.x_log);
        let ys = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().filter(finite).map(|p| p.1))
            .chain(self.marks.iter().map(|m| m.y))
            .chain(
                self.bands
                    .iter()
                    .flat_map(|b| b.points.iter().flat_map(|p| [p.1, p.2])),
            )
            .chain(self.whiskers.iter().flat_map(|w| [w.y_lo, w.y_hi]));
        let (y_lo, data_hi) = range(ys, self.y_from_zero);
        // A threshold far above the data would flatten the curve: such a line is named at
        // the top edge instead of stretching the axis to it.
        let y_hi = self
            .ref_lines
            .iter()
            .map(|r| r.y)
            .filter(|&y| y.is_finite() && y <= data_hi + 2.0 * (data_hi - y_lo))
            .fold(data_hi, f64::max);
        let (x0, x1, xticks) = if self.x_log && x_lo > 0.0 {
            log_ticks(x_lo, x_hi)
        } else {
            let (x0, x1, step) = nice_ticks(x_lo, x_hi, 7);
            let mut ticks = Vec::new();
            let mut v = x0;
            while v <= x1 + step * 1e-6 {
                ticks.push((v, tick_text(v, step)));
                v += step;
            }
            (x0, x1, ticks)
        };
        let (y0, y1, ystep) = nice_ticks(y_lo, y_hi, 5);
        let sx = Scale {
            lo: x0,
            hi: x1,
            a: LEFT,
            b: WIDTH - RIGHT,
            log: self.x_log && x_lo > 0.0,
        };
        let sy = Scale {
            lo: y0,
            hi: y1,
            a: HEIGHT - BOTTOM,
            b: TOP,
            log: false,
        };

        let mut o = String::new();
        let _ = write!(
            o,
            "<figure class=\"chart\" id=\"{}\">\n<figcaption>{}</figcaption>\n\
             <svg viewBox=\"0 0 {WIDTH} {HEIGHT}\" xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\"{}\">\n",
            esc(&self.id),
            esc(&self.title),
            esc(&self.title)
        );
        // Grid and tick labels.
        o.push_str("<g class=\"grid\">");
        for (v, text) in &xticks {
            let x = sx.map(*v);
            let _ = write!(
                o,
                "<line x1=\"{x:.1}\" y1=\"{TOP}\" x2=\"{x:.1}\" y2=\"{:.1}\"/><text class=\"tx\" x=\"{x:.1}\" y=\"{:.1}\">{}</text>",
                HEIGHT - BOTTOM,
                HEIGHT - BOTTOM + 16.0,
                text
            );
        }
        let mut v = y0;
        while v <= y1 + ystep * 1e-6 {
            let y = sy.map(v);
            let _ = write!(
                o,
                "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\"/><text class=\"ty\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                WIDTH - RIGHT,
                LEFT - 6.0,
                y + 4.0,
                tick_text(v, ystep)
            );
            v += ystep;
        }
        o.push_str("</g>\n");
        let _ = writeln!(
            o,
            "<g class=\"axes\"><line x1=\"{LEFT}\" y1=\"{b:.1}\" x2=\"{r:.1}\" y2=\"{b:.1}\"/>\
             <line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{b:.1}\"/>\
             <text class=\"xl\" x=\"{cx:.1}\" y=\"{xl:.1}\">{}</text>\
             <text class=\"yl\" transform=\"translate(14 {cy:.1}) rotate(-90)\">{}</text></g>",
            esc(&self.x_label),
            esc(&self.y_label),
            b = HEIGHT - BOTTOM,
            r = WIDTH - RIGHT,
            cx = (LEFT + WIDTH - RIGHT) / 2.0,
            xl = HEIGHT - 8.0,
            cy = (TOP + HEIGHT - BOTTOM) / 2.0,
        );

        for b in &self.bands {
            draw_band(&mut o, b, &sx, &sy);
        }
        for w in &self.whiskers {
            draw_whisker(&mut o, w, &sx, &sy);
        }
        for s in &self.series {
            let c = color(s.color);
            let _ = write!(
                o,
                "<g class=\"series {}\" id=\"{}\" data-label=\"{}\" data-points=\"{}\" style=\"--c:{c}\">",
                match s.kind {
                    SeriesKind::Line => "line",
                    SeriesKind::LineMarkers => "line markers",
                    SeriesKind::Scatter => "scatter",
                },
                esc(&s.id),
                esc(&s.label),
                s.points.len()
            );
            let pts: Vec<(usize, f64, f64)> = s
                .points
                .iter()
                .enumerate()
                .filter(|(_, (x, y))| x.is_finite() && y.is_finite())
                .map(|(i, &(x, y))| (i, sx.map(x), sy.map(y)))
                .filter(|(_, x, y)| x.is_finite() && y.is_finite())
                .collect();
            if s.kind != SeriesKind::Scatter && pts.len() > 1 {
                o.push_str("<path d=\"");
                for (k, (_, x, y)) in pts.iter().enumerate() {
                    let _ = write!(o, "{}{x:.1} {y:.1}", if k == 0 { "M" } else { " L" });
                }
                o.push_str("\"/>");
            }
            if s.kind != SeriesKind::Line || pts.len() == 1 {
                let r = if s.kind == SeriesKind::Scatter {
                    2.0
                } else {
                    3.5
                };
                for (i, x, y) in &pts {
                    let _ = write!(o, "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"{r}\">");
                    if let Some(t) = s.tooltips.get(*i) {
                        let _ = write!(o, "<title>{}</title>", esc(t));
                    }
                    o.push_str("</circle>");
                }
            }
            o.push_str("</g>\n");
        }

        for r in &self.ref_lines {
            if !r.y.is_finite() {
                continue;
            }
            if r.y > y1 {
                let _ = writeln!(
                    o,
                    "<g class=\"ref {} above\"><text x=\"{:.1}\" y=\"{:.1}\">{} (above the chart) ↑</text></g>",
                    esc(&r.class),
                    WIDTH - RIGHT - 4.0,
                    TOP + 10.0,
                    esc(&r.label)
                );
                continue;
            }
            let y = sy.map(r.y);
            let _ = writeln!(
                o,
                "<g class=\"ref {}\"><line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\">{}</text></g>",
                esc(&r.class),
                WIDTH - RIGHT,
                WIDTH - RIGHT - 4.0,
                y - 5.0,
                esc(&r.label)
            );
        }
        for v in &self.v_lines {
            let x = sx.map(v.x);
            if !x.is_finite() {
                continue;
            }
            let _ = writeln!(
                o,
                "<g class=\"ref {}\"><line x1=\"{x:.1}\" y1=\"{TOP}\" x2=\"{x:.1}\" y2=\"{:.1}\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\">{}</text></g>",
                esc(&v.class),
                HEIGHT - BOTTOM,
                x - 4.0,
                TOP + 12.0,
                esc(&v.label)
            );
        }
        for m in &self.marks {
            if !(m.x.is_finite() && m.y.is_finite()) {
                continue;
            }
            let (x, y) = (sx.map(m.x), sy.map(m.y));
            if !(x.is_finite() && y.is_finite()) {
                continue;
            }
            let anchor = if x > WIDTH * 0.7 { "end" } else { "start" };
            let dx = if anchor == "end" { -10.0 } else { 10.0 };
            let _ = writeln!(
                o,
                "<g class=\"mark\" id=\"{}\"><circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"7\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{}</text></g>",
                esc(&m.id),
                x + dx,
                y - 10.0,
                esc(&m.label)
            );
        }
        o.push_str("</svg>\n<ul class=\"legend\">");
        for b in &self.bands {
            let _ = write!(
                o,
                "<li data-series=\"{}\" title=\"click to hide or show\"><span class=\"sw\" style=\"background:{};opacity:{:.2}\"></span>{}</li>",
                esc(&b.id),
                color(b.color),
                b.opacity.clamp(0.1, 1.0),
                esc(&b.label)
            );
        }
        for s in &self.series {
            let _ = write!(
                o,
                "<li data-series=\"{}\" title=\"click to hide or show\"><span class=\"sw\" style=\"background:{}\"></span>{}</li>",
                esc(&s.id),
                color(s.color),
                esc(&s.label)
            );
        }
        o.push_str("</ul>\n");
        if let Some(n) = &self.note {
            let _ = writeln!(o, "<p class=\"note\">{}</p>", esc(n));
        }
        o.push_str("</figure>\n");
        o
    }
}

/// A band as one closed path per run of finite points: along `hi`, back along `lo`.
fn draw_band(o: &mut String, b: &Band, sx: &Scale, sy: &Scale) {
    let _ = write!(
        o,
        "<g class=\"series band\" id=\"{}\" data-label=\"{}\" data-points=\"{}\" style=\"--c:{}\">",
        esc(&b.id),
        esc(&b.label),
        b.points.len(),
        color(b.color)
    );
    let mapped: Vec<Option<(f64, f64, f64)>> = b
        .points
        .iter()
        .map(|&(x, lo, hi)| {
            let p = (sx.map(x), sy.map(lo), sy.map(hi));
            (p.0.is_finite() && p.1.is_finite() && p.2.is_finite()).then_some(p)
        })
        .collect();
    for run in mapped.split(Option::is_none) {
        let pts: Vec<(f64, f64, f64)> = run.iter().flatten().copied().collect();
        if pts.is_empty() {
            continue;
        }
        o.push_str("<path d=\"");
        for (k, (x, _, hi)) in pts.iter().enumerate() {
            let _ = write!(o, "{}{x:.1} {hi:.1}", if k == 0 { "M" } else { " L" });
        }
        for (x, lo, _) in pts.iter().rev() {
            let _ = write!(o, " L{x:.1} {lo:.1}");
        }
        let _ = write!(
            o,
            " Z\" style=\"fill:var(--c);fill-opacity:{:.2};stroke:none\"/>",
            b.opacity.clamp(0.0, 1.0)
        );
    }
    o.push_str("</g>\n");
}

/// Error bars with short caps, in the point's colour.
fn draw_whisker(o: &mut String, w: &Whisker, sx: &Scale, sy: &Scale) {
    let (x, y) = (sx.map(w.x), sy.map(w.y));
    if !(x.is_finite() && y.is_finite()) {
        return;
    }
    let _ = write!(
        o,
        "<g class=\"whisker\" style=\"stroke:{};stroke-width:1.2\">",
        color(w.color)
    );
    let (y_lo, y_hi) = (sy.map(w.y_lo), sy.map(w.y_hi));
    if y_lo.is_finite() && y_hi.is_finite() && (y_lo - y_hi).abs() > 0.5 {
        let _ = write!(
            o,
            "<line x1=\"{x:.1}\" y1=\"{y_lo:.1}\" x2=\"{x:.1}\" y2=\"{y_hi:.1}\"/>\
             <line x1=\"{:.1}\" y1=\"{y_lo:.1}\" x2=\"{:.1}\" y2=\"{y_lo:.1}\"/>\
             <line x1=\"{:.1}\" y1=\"{y_hi:.1}\" x2=\"{:.1}\" y2=\"{y_hi:.1}\"/>",
            x - 4.0,
            x + 4.0,
            x - 4.0,
            x + 4.0
        );
    }
    let (x_lo, x_hi) = (sx.map(w.x_lo), sx.map(w.x_hi));
    if x_lo.is_finite() && x_hi.is_finite() && (x_hi - x_lo).abs() > 0.5 {
        let _ = write!(
            o,
            "<line x1=\"{x_lo:.1}\" y1=\"{y:.1}\" x2=\"{x_hi:.1}\" y2=\"{y:.1}\"/>\
             <line x1=\"{x_lo:.1}\" y1=\"{:.1}\" x2=\"{x_lo:.1}\" y2=\"{:.1}\"/>\
             <line x1=\"{x_hi:.1}\" y1=\"{:.1}\" x2=\"{x_hi:.1}\" y2=\"{:.1}\"/>",
            y - 4.0,
            y + 4.0,
            y - 4.0,
            y + 4.0
        );
    }
    o.push_str("</g>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_nice_and_cover_the_range() {
        assert_eq!(nice_ticks(0.0, 97.0, 5), (0.0, 100.0, 20.0));
        assert_eq!(nice_ticks(3.2, 3.9, 5), (3.2, 4.0, 0.2));
        let (lo, hi, step) = nice_ticks(12.0, 1840.0, 7);
        assert!(lo <= 12.0 && hi >= 1840.0);
        assert!(step == 250.0 || step == 500.0, "{step}");
        assert_eq!(tick_text(0.4, 0.2), "0.4");
        assert_eq!(tick_text(7.5, 2.5), "7.5");
        assert_eq!(tick_text(0.5, 0.25), "0.50");
        assert_eq!(tick_text(-0.0, 0.1), "0");
        assert_eq!(tick_text(1000.0, 500.0), "1000");
    }

    #[test]
    fn series_refs_and_marks_are_drawn_with_ids() {
        let chart = Chart {
            id: "c1".into(),
            title: "T <1>".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            series: vec![Series {
                id: "c1-a".into(),
                label: "row A".into(),
                points: vec![(0.0, 1.0), (1.0, f64::NAN), (2.0, 3.0)],
                tooltips: vec!["first".into(), "nan".into(), "third".into()],
                kind: SeriesKind::LineMarkers,
                color: 1,
            }],
            ref_lines: vec![RefLine {
                y: 2.5,
                label: "SLO 2.5 ms".into(),
                class: "slo".into(),
            }],
            marks: vec![Mark {
                id: "knee".into(),
                x: 2.0,
                y: 3.0,
                label: "knee".into(),
            }],
            ..Chart::default()
        };
        let svg = chart.render();
        assert!(svg.contains("<figcaption>T &lt;1&gt;</figcaption>"));
        assert!(svg.contains("id=\"c1-a\""));
        assert!(svg.contains("<title>third</title>"));
        assert!(
            !svg.contains("<title>nan</title>"),
            "non-finite points are skipped"
        );
        assert_eq!(svg.matches("<circle").count(), 3, "two points and the knee");
        assert!(svg.contains("class=\"ref slo\""));
        assert!(svg.contains("SLO 2.5 ms"));
        assert!(svg.contains("id=\"knee\""));
        assert!(svg.contains("data-series=\"c1-a\""));
        assert!(!svg.contains("NaN"));
    }

    #[test]
    fn log_axes_tick_by_decade() {
        let (lo, hi, ticks) = log_ticks(3.0, 250.0);
        assert_eq!((lo, hi), (1.0, 1000.0));
        let labels: Vec<&str> = ticks.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(
            labels,
            ["1", "2", "5", "10", "20", "50", "100", "200", "500", "1000"]
        );
        let (_, _, ticks) = log_ticks(0.05, 5000.0);
        let labels: Vec<&str> = ticks.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(labels, ["0.01", "0.1", "1", "10", "100", "1000", "10000"]);
        let chart = Chart {
            id: "l".into(),
            x_log: true,
            series: vec![Series {
                id: "l-a".into(),
                label: "a".into(),
                points: vec![(0.0, 0.1), (5.0, 0.5), (80.0, 1.0)],
                tooltips: Vec::new(),
                kind: SeriesKind::LineMarkers,
                color: 0,
            }],
            ..Chart::default()
        };
        let svg = chart.render();
        assert_eq!(
            svg.matches("<circle").count(),
            2,
            "x = 0 has no place on a log axis"
        );
        assert!(!svg.contains("NaN"));
    }

    #[test]
    fn empty_chart_still_renders_axes() {
        let svg = Chart {
            id: "e".into(),
            ..Chart::default()
        }
        .render();
        assert!(svg.contains("<svg"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }
}
