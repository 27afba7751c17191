//! One monotonic clock per run: every clock point is an offset from its start.

use tokio::time::Instant;

/// The run's time origin. `tokio::time::Instant` so that tests under a paused clock see
/// virtual time; in a normal runtime it is the OS monotonic clock.
#[derive(Debug, Clone, Copy)]
pub struct RunClock {
    start: Instant,
}

impl RunClock {
    pub fn start_now() -> Self {
        RunClock {
            start: Instant::now(),
        }
    }

    pub fn starting_at(start: Instant) -> Self {
        RunClock { start }
    }

    pub fn start(&self) -> Instant {
        self.start
    }

    /// Nanoseconds since the run started.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.ns_at(Instant::now())
    }

    #[inline]
    pub fn ns_at(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.start).as_nanos()).unwrap_or(u64::MAX)
    }

    pub fn instant_at(&self, ns: u64) -> Instant {
        self.start + std::time::Duration::from_nanos(ns)
    }
}
