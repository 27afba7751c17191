//! Injected faults (docs/simulator.md §9): immediate errors, stalled streams, dropped connections
//! and malformed chunks. They draw from their own RNG stream, split per request, so enabling
//! them never shifts the engine's draws, and they are counted per kind for `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The kinds of injected fault, as `sim:faults_injected_total{kind}` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// A request rejected at once with `--fault-error-status`.
    Error,
    /// A streamed chunk held for `--fault-stall-ms`.
    Stall,
    /// A stream cut after a random token, without `[DONE]`.
    Disconnect,
    /// A chunk sent as truncated JSON.
    Malformed,
}

impl FaultKind {
    /// Every kind, in the order `/metrics` lists them.
    pub const ALL: [FaultKind; 4] = [
        FaultKind::Error,
        FaultKind::Stall,
        FaultKind::Disconnect,
        FaultKind::Malformed,
    ];

    /// The `kind` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::Error => "error",
            FaultKind::Stall => "stall",
            FaultKind::Disconnect => "disconnect",
            FaultKind::Malformed => "malformed",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Fault probabilities and parameters (`--fault-*`).
#[derive(Debug, Clone, PartialEq)]
pub struct FaultConfig {
    /// Per request: probability of an immediate error response.
    pub error_rate: f64,
    /// HTTP status of injected errors.
    pub error_status: u16,
    /// Per streamed chunk: probability of a stall.
    pub stall_prob: f64,
    /// Length of a stall.
    pub stall: Duration,
    /// Per streaming request: probability of a cut connection.
    pub disconnect_prob: f64,
    /// Per streaming request: probability of one truncated chunk.
    pub malformed_prob: f64,
}

impl FaultConfig {
    /// No faults at all.
    pub fn none() -> Self {
        FaultConfig {
            error_rate: 0.0,
            error_status: 500,
            stall_prob: 0.0,
            stall: Duration::from_secs(2),
            disconnect_prob: 0.0,
            malformed_prob: 0.0,
        }
    }

    /// Whether any fault can fire.
    pub fn any(&self) -> bool {
        self.error_rate > 0.0
            || self.stall_prob > 0.0
            || self.disconnect_prob > 0.0
            || self.malformed_prob > 0.0
    }
}

/// What fault, if any, a request is subject to; drawn once when the request arrives.
#[derive(Debug)]
pub struct RequestFaults {
    /// Reject the request at once.
    pub error: bool,
    /// Close the stream right after the chunk carrying this output token (1-based).
    pub disconnect_after: Option<u32>,
    /// Truncate the chunk carrying this output token (1-based).
    pub malformed_at: Option<u32>,
    stall_prob: f64,
    stall: Duration,
    rng: Option<ChaCha8Rng>,
}

impl RequestFaults {
    /// A request without faults.
    pub fn none() -> Self {
        RequestFaults {
            error: false,
            disconnect_after: None,
            malformed_at: None,
            stall_prob: 0.0,
            stall: Duration::ZERO,
            rng: None,
        }
    }

    /// Per streamed chunk: how long to hold it (and thereby all later ones), if at all.
    pub fn stall_before_chunk(&mut self) -> Option<Duration> {
        let rng = self.rng.as_mut()?;
        if self.stall_prob > 0.0 && rng.random::<f64>() < self.stall_prob {
            Some(self.stall)
        } else {
            None
        }
    }
}

/// The server's fault source: configuration, the fault RNG stream and the counters.
#[derive(Debug)]
pub struct FaultInjector {
    config: FaultConfig,
    rng: Mutex<ChaCha8Rng>,
    counts: [AtomicU64; 4],
}

/// Stream id of the fault RNG, apart from the engine's per-request and jitter streams.
const FAULT_STREAM: u64 = 0xfa17;

impl FaultInjector {
    /// Faults seeded from the global `--seed`.
    pub fn new(config: FaultConfig, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(FAULT_STREAM);
        FaultInjector {
            config,
            rng: Mutex::new(rng),
            counts: Default::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &FaultConfig {
        &self.config
    }

    /// Draws a request's faults. `max_tokens` bounds the token a disconnect or malformed chunk
    /// lands on; one that lands past the request's actual end never fires.
    pub fn draw(&self, max_tokens: u32) -> RequestFaults {
        if !self.config.any() {
            return RequestFaults::none();
        }
        // One draw under the lock seeds the request's own stream, so per-chunk draws are
        // lock-free and a request's faults do not depend on other requests' chunk counts.
        let seed = match self.rng.lock() {
            Ok(mut rng) => rng.next_u64(),
            Err(poisoned) => poisoned.into_inner().next_u64(),
        };
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let c = &self.config;
        let max_tokens = max_tokens.max(1);
        let error = c.error_rate > 0.0 && rng.random::<f64>() < c.error_rate;
        let disconnect_after = (c.disconnect_prob > 0.0 && rng.random::<f64>() < c.disconnect_prob)
            .then(|| rng.random_range(1..=max_tokens));
        let malformed_at = (c.malformed_prob > 0.0 && rng.random::<f64>() < c.malformed_prob)
            .then(|| rng.random_range(1..=max_tokens));
        RequestFaults {
            error,
            disconnect_after,
            malformed_at,
            stall_prob: c.stall_prob,
            stall: c.stall,
            rng: Some(rng),
        }
    }

    /// Counts one injected fault.
    pub fn record(&self, kind: FaultKind) {
        self.counts[kind.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Injected faults per kind, in [`FaultKind::ALL`] order.
    pub fn counts(&self) -> [u64; 4] {
        std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> FaultConfig {
        FaultConfig {
            error_rate: 0.5,
            disconnect_prob: 0.5,
            malformed_prob: 0.5,
            stall_prob: 0.5,
            stall: Duration::from_millis(3),
            ..FaultConfig::none()
        }
    }

    #[test]
    fn no_faults_configured_draws_nothing() {
        let f = FaultInjector::new(FaultConfig::none(), 1);
        for _ in 0..100 {
            let mut r = f.draw(10);
            assert!(!r.error && r.disconnect_after.is_none() && r.malformed_at.is_none());
            assert!(r.stall_before_chunk().is_none());
        }
    }

    #[test]
    fn draws_follow_the_rates_and_stay_in_range() {
        let f = FaultInjector::new(config(), 7);
        let (mut errors, mut disconnects, mut stalls) = (0, 0, 0);
        for _ in 0..2000 {
            let mut r = f.draw(20);
            errors += usize::from(r.error);
            if let Some(k) = r.disconnect_after {
                assert!((1..=20).contains(&k));
                disconnects += 1;
            }
            if let Some(k) = r.malformed_at {
                assert!((1..=20).contains(&k));
            }
            if let Some(d) = r.stall_before_chunk() {
                assert_eq!(d, Duration::from_millis(3));
                stalls += 1;
            }
        }
        for n in [errors, disconnects, stalls] {
            assert!((850..1150).contains(&n), "{n} of 2000 at p = 0.5");
        }
    }

    #[test]
    fn same_seed_same_faults() {
        let a = FaultInjector::new(config(), 3);
        let b = FaultInjector::new(config(), 3);
        for _ in 0..50 {
            let (x, y) = (a.draw(100), b.draw(100));
            assert_eq!(
                (x.error, x.disconnect_after, x.malformed_at),
                (y.error, y.disconnect_after, y.malformed_at)
            );
        }
    }

    #[test]
    fn counts_are_per_kind() {
        let f = FaultInjector::new(config(), 0);
        f.record(FaultKind::Stall);
        f.record(FaultKind::Stall);
        f.record(FaultKind::Malformed);
        assert_eq!(f.counts(), [0, 2, 0, 1]);
    }
}
