//! Arrival processes: when each request is meant to be sent, as offsets in
//! nanoseconds from one start instant, computed up front from the seed.
//!
//! Count-bounded schedules follow vLLM's `get_request` exactly:
//! - request `i` gets rate `r_i` — the fixed `--request-rate`, or with
//!   `--ramp-up-strategy` the ramp value at progress `i / max(n − 1, 1)`: linear
//!   `start + (end − start)·p`, exponential `start·(end/start)^p`;
//! - its gap before it is 0 when `r_i` is infinite, `1/r_i` when burstiness is
//!   infinite, otherwise gamma-distributed with shape `burstiness` and scale
//!   `1/(r_i·burstiness)` (exponential, i.e. Poisson arrivals, at burstiness 1);
//! - offsets are the running sums of the gaps (so the first request waits one gap);
//! - without ramp-up, the offsets are scaled so that the last one is exactly
//!   `n / rate`, which vLLM does to make runs of different seeds comparable.
//!
//! Duration-bounded schedules draw gaps the same way until `duration` is reached,
//! without rescaling; a ramp then progresses with time (`t / duration`) since the
//! request count is not known in advance.
//!
//! Gaps are drawn from a seeded ChaCha stream, not numpy's global generator: the
//! same seed always yields the same schedule, though not vLLM's exact one.

use std::time::Duration;

use rand_distr::{Distribution, Gamma};
use servebench_metrics::units::s_to_ns;

use crate::error::WorkloadError;
use crate::rng::{stream, Purpose};

/// Most arrivals a duration-bounded schedule may hold, to fail loudly instead of
/// exhausting memory on a mistyped rate.
pub const MAX_DURATION_ARRIVALS: usize = 50_000_000;

/// Shape of the request-rate ramp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RampUpStrategy {
    /// Rate grows by equal steps.
    Linear,
    /// Rate grows by equal factors.
    Exponential,
}

/// A request-rate ramp from `start_rps` to `end_rps` over the run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RampUp {
    /// `--ramp-up-strategy`.
    pub strategy: RampUpStrategy,
    /// `--ramp-up-start-rps`: the rate of the first request.
    pub start_rps: f64,
    /// `--ramp-up-end-rps`: the rate of the last request.
    pub end_rps: f64,
}

impl RampUp {
    /// The rate at `progress` in `[0, 1]`.
    pub fn rate_at(&self, progress: f64) -> f64 {
        match self.strategy {
            RampUpStrategy::Linear => self.start_rps + (self.end_rps - self.start_rps) * progress,
            RampUpStrategy::Exponential => {
                self.start_rps * (self.end_rps / self.start_rps).powf(progress)
            }
        }
    }
}

/// How requests arrive; defaults are vLLM's (infinite rate, burstiness 1, no ramp).
#[derive(Debug, Clone, PartialEq)]
pub struct ArrivalConfig {
    /// Requests per second (`--request-rate`); `f64::INFINITY` sends everything at once.
    pub request_rate: f64,
    /// Gamma shape of the gaps (`--burstiness`): below 1 burstier than Poisson, above 1
    /// more regular, infinite for evenly spaced arrivals.
    pub burstiness: f64,
    /// Optional ramp, which replaces `request_rate`.
    pub ramp_up: Option<RampUp>,
    /// Seed (`--seed`).
    pub seed: u64,
}

impl Default for ArrivalConfig {
    fn default() -> Self {
        Self {
            request_rate: f64::INFINITY,
            burstiness: 1.0,
            ramp_up: None,
            seed: 0,
        }
    }
}

impl ArrivalConfig {
    /// Checks rates and burstiness.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        let invalid = |m: String| Err(WorkloadError::InvalidConfig(m));
        if self.burstiness.is_nan() || self.burstiness <= 0.0 {
            return invalid(format!(
                "--burstiness must be positive, got {}",
                self.burstiness
            ));
        }
        match &self.ramp_up {
            None => {
                if self.request_rate.is_nan() || self.request_rate <= 0.0 {
                    return invalid(format!(
                        "--request-rate must be positive (or inf), got {}",
                        self.request_rate
                    ));
                }
            }
            Some(ramp) => {
                for (flag, v) in [
                    ("--ramp-up-start-rps", ramp.start_rps),
                    ("--ramp-up-end-rps", ramp.end_rps),
                ] {
                    if !v.is_finite() || v <= 0.0 {
                        return invalid(format!("{flag} must be a positive number, got {v}"));
                    }
                }
            }
        }
        Ok(())
    }

    /// The rate of request `index` out of `total`, as vLLM's `_get_current_request_rate`.
    pub fn rate_for_request(&self, index: usize, total: usize) -> f64 {
        match &self.ramp_up {
            Some(ramp) => {
                let progress = index as f64 / total.saturating_sub(1).max(1) as f64;
                ramp.rate_at(progress)
            }
            None => self.request_rate,
        }
    }

    /// Intended send offsets (ns from the start) of `n` requests; non-decreasing.
    pub fn schedule(&self, n: usize) -> Result<Vec<u64>, WorkloadError> {
        self.validate()?;
        let mut gaps = GapSampler::new(self)?;
        let mut offsets_s = Vec::with_capacity(n);
        let mut t = 0.0_f64;
        for i in 0..n {
            t += gaps.next(self.rate_for_request(i, n));
            offsets_s.push(t);
        }
        if self.ramp_up.is_none() && t > 0.0 && self.request_rate.is_finite() {
            let factor = (n as f64 / self.request_rate) / t;
            for o in &mut offsets_s {
                *o *= factor;
            }
        }
        Ok(offsets_s.into_iter().map(s_to_ns).collect())
    }

    /// Intended send offsets of every arrival before `duration`; the rate must be
    /// finite. With a ramp, the rate follows elapsed time over `duration`.
    pub fn schedule_for_duration(&self, duration: Duration) -> Result<Vec<u64>, WorkloadError> {
        self.validate()?;
        if self.ramp_up.is_none() && self.request_rate.is_infinite() {
            return Err(WorkloadError::InvalidConfig(
                "a duration-bounded run needs a finite --request-rate (or a ramp)".to_owned(),
            ));
        }
        let end = duration.as_secs_f64();
        let mut gaps = GapSampler::new(self)?;
        let mut offsets = Vec::new();
        let mut t = 0.0_f64;
        loop {
            let rate = match &self.ramp_up {
                Some(ramp) if end > 0.0 => ramp.rate_at((t / end).min(1.0)),
                Some(ramp) => ramp.start_rps,
                None => self.request_rate,
            };
            t += gaps.next(rate);
            if t >= end {
                return Ok(offsets);
            }
            if offsets.len() >= MAX_DURATION_ARRIVALS {
                return Err(WorkloadError::InvalidConfig(format!(
                    "more than {MAX_DURATION_ARRIVALS} arrivals in {end} s; lower the rate \
                     or the duration"
                )));
            }
            offsets.push(s_to_ns(t));
        }
    }
}

/// Draws gaps in seconds for a given rate.
struct GapSampler {
    rng: rand_chacha::ChaCha8Rng,
    burstiness: f64,
    /// Gamma(shape = burstiness, scale = 1); scaled per draw by `1 / (rate·burstiness)`.
    unit: Option<Gamma<f64>>,
}

impl GapSampler {
    fn new(cfg: &ArrivalConfig) -> Result<Self, WorkloadError> {
        let unit = if cfg.burstiness.is_finite() {
            Some(Gamma::new(cfg.burstiness, 1.0).map_err(|e| {
                WorkloadError::InvalidConfig(format!(
                    "--burstiness {} is not a usable gamma shape: {e}",
                    cfg.burstiness
                ))
            })?)
        } else {
            None
        };
        Ok(Self {
            rng: stream(cfg.seed, Purpose::Arrivals, 0),
            burstiness: cfg.burstiness,
            unit,
        })
    }

    fn next(&mut self, rate: f64) -> f64 {
        if rate.is_infinite() {
            return 0.0;
        }
        match &self.unit {
            Some(unit) => unit.sample(&mut self.rng) / (rate * self.burstiness),
            None => 1.0 / rate,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn cfg(rate: f64, burstiness: f64) -> ArrivalConfig {
        ArrivalConfig {
            request_rate: rate,
            burstiness,
            ramp_up: None,
            seed: 42,
        }
    }

    #[test]
    fn infinite_rate_sends_everything_at_zero() {
        assert_eq!(ArrivalConfig::default().schedule(5).unwrap(), vec![0; 5]);
    }

    #[test]
    fn infinite_burstiness_is_evenly_spaced() {
        let s = cfg(4.0, f64::INFINITY).schedule(4).unwrap();
        assert_eq!(
            s,
            vec![250_000_000, 500_000_000, 750_000_000, 1_000_000_000]
        );
    }

    #[test]
    fn fixed_rate_ends_exactly_at_n_over_rate() {
        let s = cfg(8.0, 1.0).schedule(100).unwrap();
        assert_eq!(*s.last().unwrap(), 12_500_000_000);
        assert!(s.windows(2).all(|w| w[0] <= w[1]));
        assert!(s[0] > 0);
    }

    #[test]
    fn invalid_settings_are_rejected() {
        assert!(cfg(0.0, 1.0).schedule(1).is_err());
        assert!(cfg(-1.0, 1.0).schedule(1).is_err());
        assert!(cfg(1.0, 0.0).schedule(1).is_err());
        assert!(cfg(f64::NAN, 1.0).schedule(1).is_err());
        assert!(cfg(f64::INFINITY, 1.0)
            .schedule_for_duration(Duration::from_secs(1))
            .is_err());
        let ramp = ArrivalConfig {
            ramp_up: Some(RampUp {
                strategy: RampUpStrategy::Exponential,
                start_rps: 0.0,
                end_rps: 10.0,
            }),
            ..ArrivalConfig::default()
        };
        assert!(ramp.schedule(3).is_err());
    }

    #[test]
    fn ramp_rates_match_vllm_formula() {
        let mut c = ArrivalConfig {
            ramp_up: Some(RampUp {
                strategy: RampUpStrategy::Linear,
                start_rps: 2.0,
                end_rps: 12.0,
            }),
            ..ArrivalConfig::default()
        };
        assert_eq!(c.rate_for_request(0, 11), 2.0);
        assert_eq!(c.rate_for_request(5, 11), 7.0);
        assert_eq!(c.rate_for_request(10, 11), 12.0);
        assert_eq!(c.rate_for_request(0, 1), 2.0);
        c.ramp_up = Some(RampUp {
            strategy: RampUpStrategy::Exponential,
            start_rps: 1.0,
            end_rps: 100.0,
        });
        assert!((c.rate_for_request(5, 11) - 10.0).abs() < 1e-9);
        assert!((c.rate_for_request(10, 11) - 100.0).abs() < 1e-9);
    }
}
