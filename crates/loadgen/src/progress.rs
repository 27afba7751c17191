//! Live progress on stderr: a bar on a terminal, plain lines elsewhere (CI, pipes, tests).
//!
//! The run only bumps the atomics of [`Live`]; a drawing thread of its own reads them on a
//! timer. Drawing therefore never runs on the request path nor on the runtime's workers (a
//! slow terminal cannot delay a release or a timestamp), and it ticks the same way whether
//! the runtime's clock runs or is paused.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Live progress on stderr.
#[derive(Debug, Clone)]
pub struct Progress {
    pub total: Option<usize>,
    pub label: String,
    /// How progress is shown (`--ui`).
    pub ui: Ui,
}

/// How live progress is shown on stderr (`--ui`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ui {
    /// The dashboard on a terminal, plain lines elsewhere.
    #[default]
    Auto,
    /// The full-screen live view (plain lines when stderr is no terminal).
    Dashboard,
    /// One progress bar line (plain lines when stderr is no terminal).
    Bar,
    /// Plain lines, every 10 s.
    Simple,
}

impl Ui {
    /// What is drawn when stderr is (`tty`) or is not a terminal.
    fn resolve(self, tty: bool) -> Ui {
        match (self, tty) {
            (_, false) | (Ui::Simple, _) => Ui::Simple,
            (Ui::Auto | Ui::Dashboard, true) => Ui::Dashboard,
            (Ui::Bar, true) => Ui::Bar,
        }
    }
}

/// Counters the run bumps as it goes (relaxed atomics: the drawer only needs a recent
/// value, never a consistent one) and the drawer reads.
#[derive(Debug, Default)]
pub(crate) struct Live {
    /// Requests handed to the backend (sent or being sent).
    released: AtomicU64,
    /// Requests that ended, failed or not.
    finished: AtomicU64,
    failed: AtomicU64,
    /// Output tokens of the requests that succeeded.
    output_tokens: AtomicU64,
    /// The run's time zero, once dispatch began (a `--start-at` run waits before it).
    began: OnceLock<Instant>,
    /// The dashboard's figures, fed only while a dashboard draws.
    pub(crate) stats: OnceLock<crate::dashboard::LiveStats>,
}

impl Live {
    /// Dispatch begins now: elapsed time and rates count from here.
    pub(crate) fn begin(&self) {
        let _ = self.began.set(Instant::now());
    }

    pub(crate) fn released(&self) {
        self.released.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn finished(&self, failed: bool, output_tokens: u64) {
        self.finished.fetch_add(1, Ordering::Relaxed);
        if failed {
            self.failed.fetch_add(1, Ordering::Relaxed);
        } else {
            self.output_tokens
                .fetch_add(output_tokens, Ordering::Relaxed);
        }
    }

    /// A record arrived at the collector: the counters, and the dashboard's figures when one
    /// draws (off the request path: the collector's task).
    pub(crate) fn finished_record(&self, r: &servebench_metrics::RequestRecord) {
        self.finished(r.failure.is_some(), r.output_tokens);
        if let Some(s) = self.stats.get() {
            s.feed(r);
        }
    }

    /// The server's latest scrape, for the dashboard.
    pub(crate) fn scraped(&self, sample: &servebench_metrics::result::TelemetrySample) {
        if let Some(s) = self.stats.get() {
            s.server(sample);
        }
    }

    pub(crate) fn snapshot(
        &self,
        total: Option<usize>,
        last_arrival: Option<Duration>,
    ) -> Snapshot {
        let done = self.finished.load(Ordering::Relaxed);
        Snapshot {
            done,
            total: total.map(|t| t as u64),
            failed: self.failed.load(Ordering::Relaxed),
            // Read apart from `finished`, so briefly behind it.
            in_flight: self.released.load(Ordering::Relaxed).saturating_sub(done),
            output_tokens: self.output_tokens.load(Ordering::Relaxed),
            elapsed: self.began.get().map_or(Duration::ZERO, Instant::elapsed),
            last_arrival,
        }
    }
}

/// What progress shows at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Snapshot {
    pub done: u64,
    pub total: Option<u64>,
    pub failed: u64,
    pub in_flight: u64,
    pub output_tokens: u64,
    /// Since the run's time zero.
    pub elapsed: Duration,
    /// The schedule's last arrival (open loops): the run cannot end before it.
    pub last_arrival: Option<Duration>,
}

impl Snapshot {
    /// Time left: the later of the schedule's remaining arrivals (an open loop, `--duration`
    /// included, cannot end before its last arrival) and what the completion rate so far
    /// needs for the requests left (a closed loop's only clue; an open loop whose server
    /// falls behind needs longer than its schedule). `None` before anything to go on.
    pub fn eta(&self) -> Option<Duration> {
        let schedule = self.last_arrival.map(|t| t.saturating_sub(self.elapsed));
        let by_rate = self.total.and_then(|total| {
            let left = total.saturating_sub(self.done);
            if left == 0 {
                Some(Duration::ZERO)
            } else if self.done == 0 {
                None
            } else {
                Some(self.elapsed.mul_f64(left as f64 / self.done as f64))
            }
        });
        match (schedule, by_rate) {
            (Some(s), Some(r)) => Some(s.max(r)),
            (s, r) => s.or(r),
        }
    }

    /// Failures, requests in flight and throughput.
    fn rates(&self) -> String {
        let secs = self.elapsed.as_secs_f64();
        let per_s = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        let mut s = format!(
            "{} failed, {} in flight, {:.1} req/s",
            self.failed,
            self.in_flight,
            per_s(self.done)
        );
        // Embeddings and scoring answer no tokens: the figure would only say 0.
        if self.output_tokens > 0 {
            s.push_str(&format!(", {:.0} output tok/s", per_s(self.output_tokens)));
        }
        s
    }

    fn eta_text(&self) -> String {
        match self.eta() {
            Some(eta) => format!("ETA {}", clock_text(eta)),
            None => "ETA ?".to_owned(),
        }
    }

    /// What follows the bar on a terminal: time and ETA first, as a narrow terminal cuts
    /// the end of the line.
    pub fn bar_message(&self) -> String {
        format!(
            "{:.1} s, {}, {}",
            self.elapsed.as_secs_f64(),
            self.eta_text(),
            self.rates()
        )
    }

    /// The plain progress line: `run  50% 30/60 requests, 0 failed, 4 in flight, 10.0 req/s,
    /// 1280 output tok/s, 3.0 s, ETA 3 s`.
    pub fn line(&self, label: &str, last: bool) -> String {
        let total = self.total.map(|t| format!("/{t}")).unwrap_or_default();
        let pct = self
            .total
            .filter(|t| *t > 0)
            .map(|t| format!(" {:3.0}%", 100.0 * self.done as f64 / t as f64))
            .unwrap_or_default();
        let eta = if last {
            // The last line says how the run ended, not a countdown to 0.
            String::new()
        } else {
            format!(", {}", self.eta_text())
        };
        format!(
            "{label}{pct} {}{total} requests, {}, {:.1} s{eta}",
            self.done,
            self.rates(),
            self.elapsed.as_secs_f64()
        )
    }
}

/// A duration as a person reads a countdown: `42 s`, `3m05s`, `1h02m`.
pub(crate) fn clock_text(d: Duration) -> String {
    let s = d.as_secs_f64().round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// The first plain line comes this long after the start (a short run still shows one, with
/// its ETA), the next ones every [`PLAIN_EVERY`] (a log stays readable).
const PLAIN_FIRST: Duration = Duration::from_secs(2);
const PLAIN_EVERY: Duration = Duration::from_secs(10);
/// How often the bar takes new figures on a terminal.
const BAR_EVERY: Duration = Duration::from_millis(200);

/// The drawing thread of one run; [`Drawer::finish`] prints the last line.
pub(crate) struct Drawer {
    stop: std_mpsc::Sender<()>,
    thread: Option<JoinHandle<()>>,
}

impl Drawer {
    /// Start drawing `live` on stderr: a bar on a terminal, plain lines elsewhere.
    /// `last_arrival` is the schedule's last intended send (open loops).
    pub(crate) fn start(
        progress: Progress,
        live: Arc<Live>,
        last_arrival: Option<Duration>,
    ) -> Drawer {
        let (stop, stopped) = std_mpsc::channel();
        let ui = progress.ui.resolve(std::io::stderr().is_terminal());
        if ui == Ui::Dashboard {
            let _ = live.stats.set(crate::dashboard::LiveStats::default());
        }
        let thread = std::thread::Builder::new()
            .name("progress".into())
            .spawn(move || {
                match ui {
                    Ui::Dashboard => {
                        // A terminal the view cannot take over still shows the bar.
                        if crate::dashboard::draw(&progress, &live, last_arrival, &stopped).is_err()
                        {
                            draw_bar(&progress, &live, last_arrival, &stopped);
                        }
                    }
                    Ui::Bar | Ui::Auto => draw_bar(&progress, &live, last_arrival, &stopped),
                    Ui::Simple => draw_lines(&progress, &live, last_arrival, &stopped),
                }
                let last = live.snapshot(progress.total, last_arrival);
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "{}",
                    last.line(&progress.label, true)
                );
            })
            .ok();
        Drawer { stop, thread }
    }

    /// Stop drawing and print the final line (returns once it is printed, so whatever the
    /// run prints next comes after it).
    pub(crate) fn finish(mut self) {
        let _ = self.stop.send(());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn draw_bar(
    p: &Progress,
    live: &Live,
    last_arrival: Option<Duration>,
    stopped: &std_mpsc::Receiver<()>,
) {
    let bar = match p.total {
        Some(t) => ProgressBar::with_draw_target(Some(t as u64), ProgressDrawTarget::stderr()),
        None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
    };
    let template = if p.total.is_some() {
        "{prefix} [{bar:20}] {pos}/{len} {wide_msg}"
    } else {
        "{prefix} {spinner} {pos} requests {wide_msg}"
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(p.label.clone());
    loop {
        let s = live.snapshot(p.total, last_arrival);
        bar.set_position(s.done);
        bar.set_message(s.bar_message());
        match stopped.recv_timeout(BAR_EVERY) {
            Err(std_mpsc::RecvTimeoutError::Timeout) => {}
            _ => break,
        }
    }
    // The plain last line replaces the bar, so the scrollback keeps the figures.
    bar.finish_and_clear();
}

fn draw_lines(
    p: &Progress,
    live: &Live,
    last_arrival: Option<Duration>,
    stopped: &std_mpsc::Receiver<()>,
) {
    let started = Instant::now();
    let mut next = PLAIN_FIRST;
    loop {
        let wait = next.saturating_sub(started.elapsed());
        match stopped.recv_timeout(wait) {
            Err(std_mpsc::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let s = live.snapshot(p.total, last_arrival);
        let _ = writeln!(std::io::stderr().lock(), "{}", s.line(&p.label, false));
        next += PLAIN_EVERY;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(done: u64, total: u64, elapsed_s: f64) -> Snapshot {
        Snapshot {
            done,
            total: Some(total),
            failed: 1,
            in_flight: 4,
            output_tokens: done * 128,
            elapsed: Duration::from_secs_f64(elapsed_s),
            last_arrival: None,
        }
    }

    /// The plain line a log shows: count, failures, in flight, throughput, elapsed and the
    /// ETA from the completion rate (30 of 60 in 3 s: 3 s more).
    #[test]
    fn the_plain_line_shows_rates_in_flight_and_an_eta_from_the_completion_rate() {
        assert_eq!(
            at(30, 60, 3.0).line("run", false),
            "run  50% 30/60 requests, 1 failed, 4 in flight, 10.0 req/s, 1280 output tok/s, 3.0 s, ETA 3 s"
        );
        assert_eq!(
            at(30, 60, 3.0).bar_message(),
            "3.0 s, ETA 3 s, 1 failed, 4 in flight, 10.0 req/s, 1280 output tok/s"
        );
        // The last line says how it ended, not a countdown to 0.
        assert_eq!(
            at(60, 60, 6.0).line("point 2", true),
            "point 2 100% 60/60 requests, 1 failed, 4 in flight, 10.0 req/s, 1280 output tok/s, 6.0 s"
        );
        // Nothing finished yet: no rate to go on.
        let none = Snapshot {
            output_tokens: 0,
            ..at(0, 60, 1.0)
        };
        assert_eq!(
            none.line("run", false),
            "run   0% 0/60 requests, 1 failed, 4 in flight, 0.0 req/s, 1.0 s, ETA ?"
        );
    }

    /// An open loop ends after its last arrival, however fast its answers come; one whose
    /// server falls behind ends later than its schedule says.
    #[test]
    fn an_open_loop_eta_is_the_later_of_its_schedule_and_its_completion_rate() {
        // 590 left at 1 req/s: 590 s, though the schedule ends in 50 s.
        let behind = Snapshot {
            last_arrival: Some(Duration::from_secs(60)),
            ..at(10, 600, 10.0)
        };
        assert_eq!(behind.eta(), Some(Duration::from_secs(590)));
        // 500 left at 10 req/s would be 50 s, but arrivals go on for 60 s more.
        let keeping_up = Snapshot {
            last_arrival: Some(Duration::from_secs(70)),
            ..at(100, 600, 10.0)
        };
        assert_eq!(keeping_up.eta(), Some(Duration::from_secs(60)));
        let waiting = Snapshot {
            last_arrival: Some(Duration::from_secs(60)),
            ..at(0, 600, 10.0)
        };
        assert_eq!(waiting.eta(), Some(Duration::from_secs(50)));
        assert_eq!(at(600, 600, 70.0).eta(), Some(Duration::ZERO));
    }

    #[test]
    fn countdowns_read_as_seconds_minutes_or_hours() {
        assert_eq!(clock_text(Duration::from_secs_f64(2.6)), "3 s");
        assert_eq!(clock_text(Duration::from_secs(185)), "3m05s");
        assert_eq!(clock_text(Duration::from_secs(3720)), "1h02m");
    }
}
