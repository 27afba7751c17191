//! Waiting for a request's intended time more precisely than tokio's timer.
//!
//! tokio's timer wheel ticks every millisecond and fires on the first tick at or after the
//! deadline, so a request is released up to a millisecond late (p99 ≈ 1.9 ms at 1,000 req/s
//! with the wakeup on top). The dispatcher instead hands each wait to a timer thread of its
//! own, which sleeps with the OS's high-resolution sleep (on Linux an hrtimer, late by the
//! thread's timer slack, 50 µs by default) until `SPIN` before the deadline and wakes the
//! dispatcher; the dispatcher yields to the runtime for the last stretch, reading the clock
//! each time it gets the CPU back. A thread rather than a `timerfd` under tokio's `AsyncFd`,
//! whose registration is `unsafe`.
//!
//! Under a paused tokio clock (virtual-time tests) tokio's timer is exact already and an OS
//! sleep knows nothing of virtual time: the plain tokio sleep is used.

use std::sync::mpsc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

/// The last stretch before a deadline spent yielding instead of sleeping: covers the sleep's
/// slack and the wakeup of the dispatcher.
const SPIN: Duration = Duration::from_micros(120);

type Wake = (std::time::Instant, oneshot::Sender<()>);

/// Waits until deadlines; one per dispatch loop (its timer thread ends with it).
#[derive(Debug)]
pub(crate) struct PreciseWait {
    timer: Option<mpsc::Sender<Wake>>,
}

impl PreciseWait {
    /// Precise where time is real; tokio's timer under a paused clock or when no thread
    /// could be started.
    pub(crate) fn new() -> Self {
        PreciseWait {
            // `SERVEBENCH_PRECISE_DISPATCH=off`: tokio's timer, to compare.
            timer: if time_is_paused()
                || std::env::var_os("SERVEBENCH_PRECISE_DISPATCH").is_some_and(|v| v == "off")
            {
                None
            } else {
                timer_thread()
            },
        }
    }

    /// Returns at `deadline` (or right after). Cancel-safe: a dropped wait's wakeup goes
    /// nowhere.
    pub(crate) async fn until(&mut self, deadline: Instant) {
        if let Some(timer) = &self.timer {
            let wake = deadline.into_std().checked_sub(SPIN);
            if let Some(wake) = wake.filter(|w| *w > std::time::Instant::now()) {
                let (tx, rx) = oneshot::channel();
                if timer.send((wake, tx)).is_err() || rx.await.is_err() {
                    // The timer thread is gone: tokio's timer finishes the wait.
                    self.timer = None;
                    return tokio::time::sleep_until(deadline).await;
                }
            }
            while Instant::now() < deadline {
                tokio::task::yield_now().await;
            }
            return;
        }
        tokio::time::sleep_until(deadline).await;
    }
}

/// Sleeps until each wake time it is sent and then signals; ends when its sender is dropped.
fn timer_thread() -> Option<mpsc::Sender<Wake>> {
    let (tx, rx) = mpsc::channel::<Wake>();
    std::thread::Builder::new()
        .name("servebench-timer".into())
        .spawn(move || {
            crate::realtime::apply_to_current_thread();
            while let Ok((wake, done)) = rx.recv() {
                let left = wake.saturating_duration_since(std::time::Instant::now());
                if !left.is_zero() {
                    std::thread::sleep(left);
                }
                let _ = done.send(());
            }
        })
        .ok()?;
    Some(tx)
}

/// Is tokio's clock paused (`tokio::time::pause`, `start_paused`)? A paused clock does not move
/// by itself, a real one moves within microseconds.
fn time_is_paused() -> bool {
    let t0 = Instant::now();
    let s0 = std::time::Instant::now();
    while s0.elapsed() < Duration::from_micros(5) {
        std::hint::spin_loop();
    }
    Instant::now() == t0
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn paused_time_is_detected_and_waits_exactly() {
        assert!(time_is_paused());
        let mut w = PreciseWait::new();
        let start = Instant::now();
        w.until(start + Duration::from_millis(7)).await;
        assert_eq!(Instant::now() - start, Duration::from_millis(7));
    }

    /// Real time: never early, and late by far less than tokio's millisecond tick (the bound
    /// is generous for a loaded machine; the benchmark measures the real figure).
    #[tokio::test]
    async fn real_time_waits_end_at_the_deadline() {
        assert!(!time_is_paused());
        let mut w = PreciseWait::new();
        let mut late = Vec::new();
        for _ in 0..50 {
            let deadline = Instant::now() + Duration::from_micros(1_300);
            w.until(deadline).await;
            let now = Instant::now();
            assert!(now >= deadline);
            late.push(now - deadline);
        }
        late.sort();
        let median = late[late.len() / 2];
        assert!(
            median < Duration::from_micros(500),
            "median lateness {median:?}"
        );
    }

    /// A wait dropped before its deadline leaves the timer armed; the next one is not fooled
    /// into returning early.
    #[tokio::test]
    async fn a_cancelled_wait_does_not_end_the_next_one_early() {
        let mut w = PreciseWait::new();
        let _ = tokio::time::timeout(
            Duration::from_micros(100),
            w.until(Instant::now() + Duration::from_millis(2)),
        )
        .await;
        let deadline = Instant::now() + Duration::from_millis(5);
        w.until(deadline).await;
        assert!(Instant::now() >= deadline);
    }
}
