//! The live terminal view (`--ui dashboard`, the default on a terminal): progress and ETA,
//! requests in flight, throughput over the last seconds, TTFT/TPOT over the run and TTFT/ITL
//! over the last seconds, failures by kind, the server's telemetry when scraped, and the rows
//! or points already done with their verdicts (docs/live-and-slices.md).
//!
//! The collector feeds [`LiveStats`] with each finished record (off the request path); the
//! progress thread builds a [`DashboardView`] from it a few times a second and draws it with
//! ratatui on stderr. Its figures come from the same records by the same definitions as the
//! result file (TTFT of completed requests, NumPy-linear percentiles), so a finished run's
//! view shows the file's numbers. `q` or Ctrl-C raise SIGINT, the signal the run already
//! stops on (exit 130).

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::sync::mpsc as std_mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Gauge, Paragraph, Row, Sparkline, Table};
use ratatui::Frame;
use servebench_metrics::result::TelemetrySample;
use servebench_metrics::stats::percentile_sorted;
use servebench_metrics::units::{ns_f64_to_ms, ns_to_ms, NS_PER_S};
use servebench_metrics::RequestRecord;

use crate::progress::{clock_text, Live, Progress};

/// The "last seconds" the live rates and recent percentiles cover.
pub const RECENT: Duration = Duration::from_secs(10);
/// Frames per second: enough to follow, cheap to draw.
const FRAME_EVERY: Duration = Duration::from_millis(250);
/// Lines kept of the rows or points already done.
const FINISHED_KEPT: usize = 50;
/// Seconds of per-second throughput kept for the sparkline.
const HISTORY_SECONDS: usize = 24 * 3600;

/// The percentiles the view shows.
pub const VIEW_PERCENTILES: [f64; 3] = [50.0, 90.0, 99.0];

static FINISHED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// A row or point finished (`Row B — 1429 output tok/s, p99 E2EL …, VALID (12.3 s)`): shown
/// under the next ones' live view.
pub fn note_finished(line: String) {
    if let Ok(mut v) = FINISHED.lock() {
        v.push(line);
        let over = v.len().saturating_sub(FINISHED_KEPT);
        v.drain(..over);
    }
}

fn finished_lines() -> Vec<String> {
    FINISHED.lock().map(|v| v.clone()).unwrap_or_default()
}

/// The figures the collector feeds as records arrive.
#[derive(Debug, Default)]
pub(crate) struct LiveStats {
    inner: Mutex<Window>,
}

#[derive(Debug, Default)]
struct Window {
    /// TTFT and TPOT of every completed request, ms (as the summary takes them).
    ttft_ms: Vec<f64>,
    tpot_ms: Vec<f64>,
    failures: BTreeMap<&'static str, u64>,
    /// `(time, value)` of the last [`RECENT`]: TTFT at the first token, each gap at its later
    /// token, output tokens at their events, completions at `done`.
    recent_ttft: VecDeque<(u64, f64)>,
    recent_itl: VecDeque<(u64, f64)>,
    recent_tokens: VecDeque<(u64, f64)>,
    recent_done: VecDeque<u64>,
    /// Output tokens per second of the run.
    per_second: Vec<f64>,
    /// The latest time any record reached (ns on the run clock).
    latest: u64,
    server: Option<TelemetrySample>,
}

fn prune<T>(q: &mut VecDeque<(u64, T)>, from: u64) {
    while q.front().is_some_and(|(t, _)| *t < from) {
        q.pop_front();
    }
}

impl LiveStats {
    /// One finished record (on the collector's task).
    pub(crate) fn feed(&self, r: &RequestRecord) {
        let Ok(mut w) = self.inner.lock() else {
            return;
        };
        let stop = r.end.max(r.done).unwrap_or(r.sent);
        w.latest = w.latest.max(stop);
        if !r.is_success() {
            let kind = r
                .failure
                .as_ref()
                .map_or("empty_output", |f| f.kind.as_str());
            *w.failures.entry(kind).or_insert(0) += 1;
            return;
        }
        if let (Some(v), Some(t)) = (r.ttft_ns(), r.first_token) {
            w.ttft_ms.push(ns_to_ms(v));
            w.recent_ttft.push_back((t, ns_to_ms(v)));
        }
        if let Some(v) = r.tpot_ns() {
            w.tpot_ms.push(ns_f64_to_ms(v));
        }
        for pair in r.events.windows(2) {
            w.recent_itl
                .push_back((pair[1].t, ns_to_ms(pair[1].t.saturating_sub(pair[0].t))));
        }
        let share = r.tokens_per_event();
        for e in &r.events {
            w.recent_tokens.push_back((e.t, share));
            let s = (e.t / NS_PER_S) as usize;
            if s < HISTORY_SECONDS {
                if w.per_second.len() <= s {
                    w.per_second.resize(s + 1, 0.0);
                }
                w.per_second[s] += share;
            }
        }
        w.recent_done.push_back(r.done.or(r.end).unwrap_or(stop));
        let from = w.latest.saturating_sub(RECENT.as_nanos() as u64);
        prune(&mut w.recent_ttft, from);
        prune(&mut w.recent_itl, from);
        prune(&mut w.recent_tokens, from);
        while w.recent_done.front().is_some_and(|t| *t < from) {
            w.recent_done.pop_front();
        }
    }

    /// The server's latest scrape.
    pub(crate) fn server(&self, s: &TelemetrySample) {
        if let Ok(mut w) = self.inner.lock() {
            w.server = Some(s.clone());
        }
    }
}

/// The p50, p90 and p99 of `samples` (NumPy's linear percentile, as the summary's).
pub fn view_percentiles(mut samples: Vec<f64>) -> [Option<f64>; 3] {
    samples.sort_unstable_by(f64::total_cmp);
    VIEW_PERCENTILES.map(|p| percentile_sorted(&samples, p))
}

/// What the dashboard shows at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DashboardView {
    /// The run, row or point measured.
    pub label: String,
    pub done: u64,
    pub total: Option<u64>,
    pub failed: u64,
    pub in_flight: u64,
    pub elapsed: Duration,
    pub eta: Option<Duration>,
    /// Seconds the recent rates and percentiles cover (less at the start of a run).
    pub recent_s: f64,
    /// Completions per second over the recent seconds.
    pub requests_per_s: f64,
    /// Output tokens per second over the recent seconds.
    pub output_tokens_per_s: f64,
    /// p50, p90, p99 over the run, ms.
    pub ttft: [Option<f64>; 3],
    pub tpot: [Option<f64>; 3],
    /// p50, p90, p99 over the recent seconds, ms.
    pub ttft_recent: [Option<f64>; 3],
    pub itl_recent: [Option<f64>; 3],
    /// Failed requests by kind.
    pub failures: Vec<(String, u64)>,
    /// The server's latest scrape.
    pub server: Option<TelemetrySample>,
    /// Output tokens per second of the run, second by second.
    pub throughput: Vec<u64>,
    /// The rows or points already done, with their verdicts.
    pub finished: Vec<String>,
}

impl DashboardView {
    /// The view of `stats` with the progress counters of `snapshot`; `now_ns` is the run
    /// clock's present (the recent window ends there).
    pub(crate) fn build(
        label: &str,
        snapshot: &crate::progress::Snapshot,
        stats: &LiveStats,
        finished: Vec<String>,
    ) -> DashboardView {
        let now_ns = u64::try_from(snapshot.elapsed.as_nanos()).unwrap_or(u64::MAX);
        let (ttft, tpot, rt, ri, tokens, done, failures, server, per_second, latest) = {
            let Ok(w) = stats.inner.lock() else {
                return DashboardView::default();
            };
            (
                w.ttft_ms.clone(),
                w.tpot_ms.clone(),
                w.recent_ttft.clone(),
                w.recent_itl.clone(),
                w.recent_tokens.clone(),
                w.recent_done.clone(),
                w.failures.clone(),
                w.server.clone(),
                w.per_second.clone(),
                w.latest,
            )
        };
        // The window ends now, or at the last record of a run that has ended.
        let end = now_ns.max(latest);
        let recent_ns = (RECENT.as_nanos() as u64).min(end);
        let from = end - recent_ns;
        let recent_s = recent_ns as f64 / NS_PER_S as f64;
        let per_s = |x: f64| if recent_s > 0.0 { x / recent_s } else { 0.0 };
        let since = |q: &VecDeque<(u64, f64)>| -> Vec<f64> {
            q.iter()
                .filter(|(t, _)| *t >= from)
                .map(|(_, v)| *v)
                .collect()
        };
        DashboardView {
            label: label.to_owned(),
            done: snapshot.done,
            total: snapshot.total,
            failed: snapshot.failed,
            in_flight: snapshot.in_flight,
            elapsed: snapshot.elapsed,
            eta: snapshot.eta(),
            recent_s,
            requests_per_s: per_s(done.iter().filter(|t| **t >= from).count() as f64),
            output_tokens_per_s: per_s(since(&tokens).iter().sum()),
            ttft: view_percentiles(ttft),
            tpot: view_percentiles(tpot),
            ttft_recent: view_percentiles(since(&rt)),
            itl_recent: view_percentiles(since(&ri)),
            failures: failures
                .into_iter()
                .map(|(k, n)| (k.to_owned(), n))
                .collect(),
            server,
            // Whole seconds only: the one still filling would show as a dip.
            throughput: per_second
                .iter()
                .take((end / NS_PER_S) as usize)
                .map(|v| v.round() as u64)
                .collect(),
            finished,
        }
    }
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_owned(), |x| format!("{x:.1}"))
}

const TITLE: Style = Style::new().add_modifier(Modifier::BOLD);

fn block(title: &str) -> Block<'_> {
    Block::default()
        .borders(Borders::ALL)
        .title(Span::styled(format!(" {title} "), TITLE))
}

/// Draws `v` into the whole frame (any size; a small terminal gets the first panels).
pub fn render(f: &mut Frame<'_>, v: &DashboardView) {
    let finished_rows = v.finished.len().min(8) as u16;
    let mut constraints = vec![
        Constraint::Length(3),
        Constraint::Length(7),
        Constraint::Length(4),
        Constraint::Min(3),
    ];
    if finished_rows > 0 {
        constraints.push(Constraint::Length(finished_rows + 2));
    }
    constraints.push(Constraint::Length(1));
    let area = f.area();
    let parts = Layout::default()
        .direction(Direction::Vertical)
        .constraints(constraints)
        .split(area);
    progress_panel(f, parts[0], v);
    let middle = Layout::default()
        .direction(Direction::Horizontal)
        .constraints([Constraint::Percentage(42), Constraint::Percentage(58)])
        .split(parts[1]);
    load_panel(f, middle[0], v);
    latency_panel(f, middle[1], v);
    server_panel(f, parts[2], v);
    throughput_panel(f, parts[3], v);
    if finished_rows > 0 {
        let shown = &v.finished[v.finished.len() - finished_rows as usize..];
        let lines: Vec<Line<'_>> = shown.iter().map(|l| Line::from(l.as_str())).collect();
        f.render_widget(
            Paragraph::new(lines).block(block("Done, with verdicts")),
            parts[4],
        );
    }
    let footer = parts[parts.len() - 1];
    f.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled("q", TITLE),
            Span::raw(" or "),
            Span::styled("Ctrl-C", TITLE),
            Span::raw(": stop (what was measured is kept; exit 130)"),
        ])),
        footer,
    );
}

fn progress_panel(f: &mut Frame<'_>, area: Rect, v: &DashboardView) {
    let ratio = match v.total {
        Some(t) if t > 0 => (v.done as f64 / t as f64).clamp(0.0, 1.0),
        _ => 0.0,
    };
    let total = v.total.map(|t| format!("/{t}")).unwrap_or_default();
    let eta = v
        .eta
        .map_or_else(|| "ETA ?".to_owned(), |e| format!("ETA {}", clock_text(e)));
    let text = format!(
        "{}{total} requests · {:.1} s · {eta}",
        v.done,
        v.elapsed.as_secs_f64()
    );
    f.render_widget(
        Gauge::default()
            .block(block(&format!("servebench · {}", v.label)))
            .gauge_style(Style::new().fg(Color::Blue))
            .ratio(ratio)
            .label(text),
        area,
    );
}

fn load_panel(f: &mut Frame<'_>, area: Rect, v: &DashboardView) {
    let recent = format!("(last {:.0} s)", v.recent_s);
    let lines = vec![
        Line::from(format!("In flight     {}", v.in_flight)),
        Line::from(format!("Done          {} ({} failed)", v.done, v.failed)),
        Line::from(format!("Req/s         {:.1} {recent}", v.requests_per_s)),
        Line::from(format!(
            "Output tok/s  {:.0} {recent}",
            v.output_tokens_per_s
        )),
    ];
    f.render_widget(Paragraph::new(lines).block(block("Load")), area);
}

fn latency_panel(f: &mut Frame<'_>, area: Rect, v: &DashboardView) {
    let recent = format!("{:.0} s", v.recent_s);
    let row = |name: String, p: &[Option<f64>; 3]| {
        Row::new(vec![
            Cell::from(name),
            Cell::from(ms(p[0])),
            Cell::from(ms(p[1])),
            Cell::from(ms(p[2])),
        ])
    };
    let rows = vec![
        row("TTFT run".into(), &v.ttft),
        row(format!("TTFT {recent}"), &v.ttft_recent),
        row(format!("ITL {recent}"), &v.itl_recent),
        row("TPOT run".into(), &v.tpot),
    ];
    let table = Table::new(
        rows,
        [
            Constraint::Length(10),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(8),
        ],
    )
    .header(Row::new(vec!["ms", "p50", "p90", "p99"]).style(TITLE))
    .block(block("Latency (completed requests)"));
    f.render_widget(table, area);
}

fn server_panel(f: &mut Frame<'_>, area: Rect, v: &DashboardView) {
    let failures = if v.failures.is_empty() {
        "none".to_owned()
    } else {
        v.failures
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let server = match &v.server {
        None => "not scraped (no /metrics, or not yet)".to_owned(),
        Some(s) => {
            let n = |x: Option<f64>| x.map_or_else(|| "–".to_owned(), |v| format!("{v:.0}"));
            format!(
                "running {} · waiting {} · KV cache {}{}",
                n(s.running),
                n(s.waiting),
                s.kv_usage
                    .map_or_else(|| "–".to_owned(), |k| format!("{:.1} %", k * 100.0)),
                s.preemptions
                    .map_or_else(String::new, |p| format!(" · preemptions {p:.0}")),
            )
        }
    };
    let lines = vec![
        Line::from(format!("Failures  {failures}")),
        Line::from(format!("Server    {server}")),
    ];
    f.render_widget(
        Paragraph::new(lines).block(block("Failures by kind · server telemetry")),
        area,
    );
}

fn throughput_panel(f: &mut Frame<'_>, area: Rect, v: &DashboardView) {
    let width = usize::from(area.width.saturating_sub(2));
    let tail = &v.throughput[v.throughput.len().saturating_sub(width)..];
    let peak = tail.iter().copied().max().unwrap_or(0);
    f.render_widget(
        Sparkline::default()
            .block(block(&format!(
                "Output tok/s, second by second (peak {peak})"
            )))
            .style(Style::new().fg(Color::Green))
            .data(tail),
        area,
    );
}

/// Restores the terminal when the view ends, however it ends.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        use ratatui::crossterm::{cursor, execute, terminal};
        let _ = execute!(io::stderr(), terminal::LeaveAlternateScreen, cursor::Show);
        let _ = terminal::disable_raw_mode();
    }
}

/// Stops the run as Ctrl-C does: the terminal is in raw mode, so the key sends no signal.
fn interrupt() {
    #[cfg(target_os = "linux")]
    {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGINT);
    }
}

/// Draws the view on stderr until `stopped`; an error before the first frame leaves the
/// terminal as it was (the caller falls back to the bar).
pub(crate) fn draw(
    p: &Progress,
    live: &Live,
    last_arrival: Option<Duration>,
    stopped: &std_mpsc::Receiver<()>,
) -> io::Result<()> {
    use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
    use ratatui::crossterm::{cursor, execute, terminal};
    let Some(stats) = live.stats.get() else {
        return Err(io::Error::other("no live figures"));
    };
    terminal::enable_raw_mode()?;
    let restore = Restore;
    execute!(io::stderr(), terminal::EnterAlternateScreen, cursor::Hide)?;
    let mut term = ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(io::stderr()))?;
    term.clear()?;
    loop {
        let snap = live.snapshot(p.total, last_arrival);
        let view = DashboardView::build(&p.label, &snap, stats, finished_lines());
        term.draw(|f| render(f, &view))?;
        let until = Instant::now() + FRAME_EVERY;
        loop {
            match stopped.try_recv() {
                Err(std_mpsc::TryRecvError::Empty) => {}
                _ => {
                    drop(restore);
                    return Ok(());
                }
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if !event::poll(left.min(Duration::from_millis(50)))? {
                continue;
            }
            if let Event::Key(k) = event::read()? {
                let ctrl_c =
                    k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                if k.kind == KeyEventKind::Press && (k.code == KeyCode::Char('q') || ctrl_c) {
                    interrupt();
                    // The run's own notice lands on the screen: the next frame redraws all.
                    term.clear()?;
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::progress::Snapshot;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    use servebench_metrics::summary::{summarize, SummaryOptions};
    use servebench_metrics::{Failure, FailureKind};

    const MS: u64 = 1_000_000;

    /// 300 requests over 15 s, TTFT and gaps varying, 6 failures of two kinds.
    fn records() -> Vec<RequestRecord> {
        (0..300u64)
            .map(|i| {
                let sent = i * 50 * MS;
                let ttft = (40 + (i * 37) % 90) * MS;
                let times: Vec<u64> = (0..8).map(|k| sent + ttft + k * (9 + i % 5) * MS).collect();
                let mut r = RequestRecord::streamed(i, sent, &times, 16);
                if i % 50 == 7 {
                    r.failure = Some(Failure {
                        kind: if i < 150 {
                            FailureKind::Timeout
                        } else {
                            FailureKind::HttpStatus
                        },
                        status: None,
                        message: "x".into(),
                    });
                }
                r
            })
            .collect()
    }

    fn view_of(records: &[RequestRecord], finished: Vec<String>) -> DashboardView {
        let stats = LiveStats::default();
        for r in records {
            stats.feed(r);
        }
        stats.server(&TelemetrySample {
            t: 0,
            running: Some(12.0),
            waiting: Some(3.0),
            kv_usage: Some(0.425),
            preemptions: None,
        });
        let failed = records.iter().filter(|r| !r.is_success()).count() as u64;
        let snap = Snapshot {
            done: records.len() as u64,
            total: Some(records.len() as u64),
            failed,
            in_flight: 0,
            output_tokens: 0,
            elapsed: Duration::from_secs(16),
            last_arrival: None,
        };
        DashboardView::build("run", &snap, &stats, finished)
    }

    fn screen(v: &DashboardView, w: u16, h: u16) -> String {
        let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
        term.draw(|f| render(f, v)).unwrap();
        let buf = term.backend().buffer().clone();
        (0..h)
            .map(|y| {
                (0..w)
                    .map(|x| buf[(x, y)].symbol().to_owned())
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The run's figures in the view are the summary's, by the same definitions.
    #[test]
    fn the_view_shows_the_result_files_figures() {
        let recs = records();
        let v = view_of(&recs, Vec::new());
        let s = summarize(&recs, &SummaryOptions::default());
        for (i, p) in VIEW_PERCENTILES.iter().enumerate() {
            assert_eq!(
                v.ttft[i],
                s.ttft.percentile(*p).map(|x| x.value),
                "TTFT p{p}"
            );
            assert_eq!(
                v.tpot[i],
                s.tpot.percentile(*p).map(|x| x.value),
                "TPOT p{p}"
            );
        }
        let kinds: Vec<(String, u64)> = s.failures_by_kind.clone().into_iter().collect();
        assert_eq!(v.failures, kinds);
        assert_eq!(v.done - v.failed, s.completed);
        // Output tokens second by second add up to the run's.
        let total: u64 = v.throughput.iter().sum();
        assert!(total.abs_diff(s.total_output_tokens) <= v.throughput.len() as u64);
        // The recent window: the last 10 s of the run's clock.
        assert_eq!(v.recent_s, 10.0);
        assert!(v.itl_recent[0].is_some());

        for (w, h) in [(80, 24), (200, 60)] {
            let text = screen(&v, w, h);
            for p in [0, 2] {
                let shown = format!("{:.1}", v.ttft[p].unwrap());
                assert!(text.contains(&shown), "{w}x{h} shows TTFT {shown}:\n{text}");
                let tpot = format!(
                    "{:.1}",
                    s.tpot.percentile(VIEW_PERCENTILES[p]).unwrap().value
                );
                assert!(text.contains(&tpot), "{w}x{h} shows TPOT {tpot}:\n{text}");
            }
            assert!(text.contains("300/300 requests"), "{text}");
            assert!(text.contains("http_status 3, timeout 3"), "{text}");
            assert!(text.contains("KV cache 42.5 %"), "{text}");
            assert!(text.contains("q or Ctrl-C"), "{text}");
        }
    }

    #[test]
    fn any_size_renders_without_panicking_and_done_rows_show_their_verdicts() {
        let finished = vec![
            "Row A — 1429 output tok/s, p99 E2EL 1409.8 ms, 0 failed, VALID (12.3 s)".to_owned(),
            "Row B — 880 output tok/s, p99 E2EL 2210.0 ms, 2 failed, NOT STEADY (14.0 s)"
                .to_owned(),
        ];
        let v = view_of(&records(), finished);
        let big = screen(&v, 200, 60);
        assert!(big.contains("Row B — 880 output tok/s"), "{big}");
        assert!(big.contains("NOT STEADY"), "{big}");
        for (w, h) in [(80, 24), (200, 60), (40, 10), (1, 1), (0, 0), (300, 5)] {
            let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
            term.draw(|f| render(f, &v)).unwrap();
        }
        // An empty run (nothing finished yet) draws too.
        let mut term = Terminal::new(TestBackend::new(80, 24)).unwrap();
        term.draw(|f| render(f, &DashboardView::default())).unwrap();
    }

    #[test]
    fn finished_lines_are_bounded() {
        for i in 0..(FINISHED_KEPT + 5) {
            note_finished(format!("line {i}"));
        }
        let lines = finished_lines();
        assert_eq!(lines.len(), FINISHED_KEPT);
        assert_eq!(lines.last().map(String::as_str), Some("line 54"));
    }
}
