//! Arrival schedules: mean rate and variability of Poisson and gamma processes,
//! reproducibility, vLLM's normalisation, ramp-up, and duration-bounded runs.
//!
//! Statistical tolerances: with 20 000 gaps, the sample CV of exponential gaps has a
//! standard error of about 0.7 %; for gamma shape 0.25 (CV 2) about 1.8 %; for shape
//! 4 about 0.7 %. Bounds below are 4–5 standard errors, and the seeds are fixed, so
//! the tests are deterministic; the bounds document how close the process must be.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use proptest::prelude::*;
use servebench_workload::{ArrivalConfig, RampUp, RampUpStrategy};

fn gaps_s(offsets: &[u64]) -> Vec<f64> {
    let mut prev = 0u64;
    offsets
        .iter()
        .map(|&o| {
            let g = (o - prev) as f64 / 1e9;
            prev = o;
            g
        })
        .collect()
}

fn mean_cv(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt() / mean)
}

fn fixed(rate: f64, burstiness: f64, seed: u64) -> ArrivalConfig {
    ArrivalConfig {
        request_rate: rate,
        burstiness,
        ramp_up: None,
        seed,
    }
}

#[test]
fn poisson_and_gamma_match_rate_and_cv() {
    let n = 20_000;
    for (shape, cv_tol) in [(1.0, 0.04), (0.25, 0.08), (4.0, 0.04)] {
        let rate = 25.0;
        let s = fixed(rate, shape, 11).schedule(n).unwrap();
        let (mean, cv) = mean_cv(&gaps_s(&s));
        // vLLM rescales so the last arrival is exactly n / rate.
        assert_eq!(*s.last().unwrap(), (n as f64 / rate * 1e9) as u64);
        assert!(
            (mean * rate - 1.0).abs() < 1e-6,
            "shape {shape}: mean gap {mean}"
        );
        let want_cv = 1.0 / f64::sqrt(shape);
        assert!(
            (cv / want_cv - 1.0).abs() < cv_tol,
            "shape {shape}: cv {cv}, want {want_cv}"
        );
    }
}

#[test]
fn duration_mode_keeps_the_raw_rate() {
    // Without rescaling, the count over 400 s at 50 req/s is 20 000 on average with a
    // standard deviation of sqrt(20 000 · CV²): ~141 for Poisson, ~283 at shape 0.25.
    for (shape, tol) in [(1.0, 0.03), (0.25, 0.06)] {
        let s = fixed(50.0, shape, 3)
            .schedule_for_duration(Duration::from_secs(400))
            .unwrap();
        let n = s.len() as f64;
        assert!(
            (n / 20_000.0 - 1.0).abs() < tol,
            "shape {shape}: {n} arrivals"
        );
        assert!(*s.last().unwrap() < 400_000_000_000);
        assert!(s.windows(2).all(|w| w[0] <= w[1]));
        let (_, cv) = mean_cv(&gaps_s(&s));
        assert!(
            (cv * shape.sqrt() - 1.0).abs() < 2.0 * tol,
            "shape {shape}: cv {cv}"
        );
    }
}

#[test]
fn same_seed_same_schedule() {
    let a = fixed(10.0, 0.5, 99).schedule(1000).unwrap();
    let b = fixed(10.0, 0.5, 99).schedule(1000).unwrap();
    let c = fixed(10.0, 0.5, 100).schedule(1000).unwrap();
    assert_eq!(a, b);
    assert_ne!(a, c);
    let d = fixed(10.0, 0.5, 99)
        .schedule_for_duration(Duration::from_secs(60))
        .unwrap();
    assert_eq!(
        d,
        fixed(10.0, 0.5, 99)
            .schedule_for_duration(Duration::from_secs(60))
            .unwrap()
    );
}

#[test]
fn infinite_rate_and_infinite_burstiness() {
    assert!(fixed(f64::INFINITY, 1.0, 0)
        .schedule(100)
        .unwrap()
        .iter()
        .all(|&o| o == 0));
    let even = fixed(5.0, f64::INFINITY, 0).schedule(10).unwrap();
    assert_eq!(
        even,
        (1..=10).map(|i| i * 200_000_000).collect::<Vec<u64>>()
    );
}

/// Each gap times its request's rate is a unit-mean gamma draw, so its average over
/// any stretch of a ramp is 1: the ramp's per-request rate is what the gaps follow.
fn assert_ramp_follows_rates(cfg: &ArrivalConfig, n: usize) {
    let s = cfg.schedule(n).unwrap();
    let gaps = gaps_s(&s);
    let scaled: Vec<f64> = gaps
        .iter()
        .enumerate()
        .map(|(i, g)| g * cfg.rate_for_request(i, n))
        .collect();
    for (label, part) in [
        ("all", &scaled[..]),
        ("first 4000", &scaled[..4000]),
        ("last 4000", &scaled[n - 4000..]),
    ] {
        let (mean, _) = mean_cv(part);
        assert!((mean - 1.0).abs() < 0.05, "{label}: {mean}");
    }
}

#[test]
fn linear_ramp_runs_from_start_to_end_rate() {
    let n = 20_000;
    let cfg = ArrivalConfig {
        request_rate: f64::INFINITY,
        burstiness: 1.0,
        ramp_up: Some(RampUp {
            strategy: RampUpStrategy::Linear,
            start_rps: 2.0,
            end_rps: 200.0,
        }),
        seed: 5,
    };
    assert_eq!(cfg.rate_for_request(0, n), 2.0);
    assert_eq!(cfg.rate_for_request(n - 1, n), 200.0);
    assert_ramp_follows_rates(&cfg, n);
    // The first requests arrive ~100x more slowly than the last ones.
    let gaps = gaps_s(&cfg.schedule(n).unwrap());
    let (early, _) = mean_cv(&gaps[..500]);
    let (late, _) = mean_cv(&gaps[n - 500..]);
    assert!(early / late > 30.0, "{early} vs {late}");
}

#[test]
fn exponential_ramp_rates() {
    let n = 20_000;
    let cfg = ArrivalConfig {
        request_rate: 1.0,
        burstiness: 2.0,
        ramp_up: Some(RampUp {
            strategy: RampUpStrategy::Exponential,
            start_rps: 1.0,
            end_rps: 64.0,
        }),
        seed: 8,
    };
    assert_eq!(cfg.rate_for_request(0, n), 1.0);
    assert!((cfg.rate_for_request(n - 1, n) - 64.0).abs() < 1e-9);
    let half = cfg.ramp_up.unwrap().rate_at(0.5);
    assert!((half - 8.0).abs() < 1e-9);
    assert_ramp_follows_rates(&cfg, n);
}

#[test]
fn duration_mode_ramp_follows_time() {
    let cfg = ArrivalConfig {
        request_rate: f64::INFINITY,
        burstiness: 1.0,
        ramp_up: Some(RampUp {
            strategy: RampUpStrategy::Linear,
            start_rps: 10.0,
            end_rps: 90.0,
        }),
        seed: 1,
    };
    let s = cfg.schedule_for_duration(Duration::from_secs(200)).unwrap();
    // Expected count: the integral of the rate, 200 s · 50 req/s = 10 000.
    let n = s.len() as f64;
    assert!((n / 10_000.0 - 1.0).abs() < 0.04, "{n}");
    let first_half = s.iter().filter(|&&o| o < 100_000_000_000).count() as f64;
    // 100 s at an average of 30 req/s = 3 000.
    assert!((first_half / 3_000.0 - 1.0).abs() < 0.07, "{first_half}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Fixed-rate schedules are sorted, start after 0 and end exactly at n / rate.
    #[test]
    fn fixed_rate_schedules_end_at_n_over_rate(
        rate in 0.01f64..1000.0,
        shape in 0.1f64..10.0,
        n in 1usize..2000,
        seed in any::<u64>(),
    ) {
        let s = fixed(rate, shape, seed).schedule(n).unwrap();
        prop_assert_eq!(s.len(), n);
        prop_assert!(s.windows(2).all(|w| w[0] <= w[1]));
        let end = n as f64 / rate * 1e9;
        let last = *s.last().unwrap() as f64;
        prop_assert!((last - end).abs() <= 1.0 + end * 1e-12, "{} vs {}", last, end);
    }
}
