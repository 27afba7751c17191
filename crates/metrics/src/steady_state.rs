//! Warm-up detection by MSER truncation (White 1997; MSER-5: batch means of 5).
//!
//! A run starts empty: connections open, batches fill, caches warm, so the first seconds of
//! the in-flight and throughput series are a transient that is not the system the run set out
//! to measure. Instead of trusting a fixed warm-up count, MSER picks the truncation point `d`
//! that minimises the marginal standard error of the mean of what remains,
//! `MSER(d) = Σ_{j>d} (Z_j − Z̄_d)² / (k − d)²` over the `k` batch means `Z_j`. Dropping a
//! transient lowers the spread faster than it lowers the count; dropping steady data does not.
//!
//! The search stops at half the batches: near the end the statistic rests on a handful of
//! batch means and reaches spurious minima, and a transient that fills more than half of the
//! series means the run never reached a steady state at all. A minimum at that boundary is
//! therefore reported as "not steady" rather than as a truncation point.

use serde::{Deserialize, Serialize};

use crate::summary::TimeSeries;

/// Samples per batch mean (MSER-5).
pub const MSER_BATCH: usize = 5;

/// Fewest batches MSER needs to say anything: with fewer, the series is kept whole.
pub const MSER_MIN_BATCHES: usize = 4;

/// Relative size, against the squared range of the batch means, below which two MSER
/// statistics count as equal; ties go to the earlier truncation (keep more data), so a
/// constant series is never truncated because of rounding.
const TIE_TOLERANCE: f64 = 1e-12;

/// Whether the detected warm-up is removed from the reported figures (`--steady-state`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SteadyStateMode {
    /// Exclude the detected transient from the figures that are judged on the steady window.
    #[default]
    Auto,
    /// Exclude nothing; the transient is still detected and reported as the one that should
    /// have been excluded.
    Off,
}

impl SteadyStateMode {
    /// The name used on the command line and in files (`auto`, `off`).
    pub fn as_str(self) -> &'static str {
        match self {
            SteadyStateMode::Auto => "auto",
            SteadyStateMode::Off => "off",
        }
    }
}

/// Fewest samples for which a minimum at the half-way boundary says more than chance: below
/// this, stationary noise lands there in more than 2–3 % of series (see
/// [`Truncation::steady`]), so "no steady state" would too often be false.
pub const MSER_TRUSTED_LEN: usize = 100;

/// The result of MSER truncation on one series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Truncation {
    /// Samples examined.
    pub len: usize,
    /// Samples to drop from the start: a multiple of the batch size, at most half the series.
    pub index: usize,
    /// Mean of the samples from `index` on; `None` for an empty series.
    pub steady_mean: Option<f64>,
    /// `false` when the MSER minimum sat at the half-way boundary of the search: the
    /// transient may last longer than half the series, or the series changed level in its
    /// middle. Stationary noise also lands there by chance (in 40 % of 20-sample series, 7 %
    /// at 60, 2–3 % at 100, none of 5 000 at 300), so the flag is no verdict on its own: it
    /// only stops the truncation from being applied (see [`SteadyState::excluded_s`]).
    pub steady: bool,
}

impl Truncation {
    /// The truncation point in seconds for a series with one sample every `bucket_s`.
    pub fn seconds(&self, bucket_s: f64) -> f64 {
        self.index as f64 * bucket_s
    }
}

/// MSER-5 truncation of `series`.
pub fn mser5(series: &[f64]) -> Truncation {
    mser(series, MSER_BATCH)
}

/// MSER truncation with batch means of `batch` samples (`batch = 0` is taken as 1). A final
/// incomplete batch takes no part in choosing the point but is kept in the steady mean.
/// Non-finite samples are not expected (the series come from counted events).
pub fn mser(series: &[f64], batch: usize) -> Truncation {
    let batch = batch.max(1);
    let means: Vec<f64> = series
        .chunks_exact(batch)
        .map(|c| c.iter().sum::<f64>() / batch as f64)
        .collect();
    let k = means.len();
    let kept_mean = |index: usize| crate::stats::mean(&series[index.min(series.len())..]);
    if k < MSER_MIN_BATCHES {
        return Truncation {
            len: series.len(),
            index: 0,
            steady_mean: kept_mean(0),
            steady: true,
        };
    }

    let (lo, hi) = means
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &z| {
            (lo.min(z), hi.max(z))
        });
    let range = hi - lo;
    let tie = TIE_TOLERANCE * range * range;
    let last = k / 2;
    let mut best_d = 0;
    let mut best = f64::INFINITY;
    for d in 0..=last {
        let stat = mser_statistic(&means[d..]);
        if stat < best - tie {
            best = stat;
            best_d = d;
        }
    }
    // A constant series has no transient, whatever rounding says about the boundary.
    let steady = best_d < last || range == 0.0;
    let index = best_d * batch;
    Truncation {
        len: series.len(),
        index,
        steady_mean: kept_mean(index),
        steady,
    }
}

/// `Σ (z − z̄)² / m²` over the `m` batch means kept.
fn mser_statistic(kept: &[f64]) -> f64 {
    let m = kept.len() as f64;
    let mean = kept.iter().sum::<f64>() / m;
    let sse: f64 = kept.iter().map(|z| (z - mean) * (z - mean)).sum();
    sse / (m * m)
}

/// The warm-up transient of one run, found on its per-second series.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SteadyState {
    /// Whether the transient is excluded from the figures or only reported.
    pub mode: SteadyStateMode,
    /// Width of one series sample, seconds.
    pub bucket_s: f64,
    /// MSER-5 on the time-averaged in-flight count.
    pub in_flight: Truncation,
    /// MSER-5 on output tokens per second.
    pub output_throughput: Truncation,
    /// The warm-up transient: the later of the two truncation points, seconds from the
    /// series origin.
    pub warmup_s: f64,
    /// Seconds actually excluded: `warmup_s` in `auto` mode when both series reached a
    /// steady state, else 0. A "transient" that fills half the window is no warm-up: cutting
    /// it would hide a level change (say, throughput halving mid-run) from the drift rule,
    /// which then judges the whole window instead.
    pub excluded_s: f64,
    /// Both series reached a steady state within their first half.
    pub steady: bool,
}

/// Find the warm-up transient in a run's time series. `until_ns` (ns from run start, e.g.
/// the last send) cuts the series before the drain at the end of a run, whose falling
/// occupancy is a transient of its own that MSER (which only truncates the start) must not
/// see; the cut is ignored when it would leave too few batches.
pub fn steady_state(ts: &TimeSeries, until_ns: Option<u64>, mode: SteadyStateMode) -> SteadyState {
    let bucket_ns = ts.bucket_ns.max(1);
    let bucket_s = bucket_ns as f64 / 1e9;
    let cut = |len: usize| -> usize {
        let Some(until) = until_ns else { return len };
        let buckets = until.saturating_sub(ts.origin_ns).div_ceil(bucket_ns) as usize;
        if buckets >= MSER_MIN_BATCHES * MSER_BATCH {
            buckets.min(len)
        } else {
            len
        }
    };
    let in_flight = mser5(&ts.in_flight_mean[..cut(ts.in_flight_mean.len())]);
    let output_throughput = mser5(&ts.output_tokens[..cut(ts.output_tokens.len())]);
    let warmup_s = in_flight
        .seconds(bucket_s)
        .max(output_throughput.seconds(bucket_s));
    let steady = in_flight.steady && output_throughput.steady;
    SteadyState {
        mode,
        bucket_s,
        in_flight,
        output_throughput,
        warmup_s,
        excluded_s: match mode {
            SteadyStateMode::Auto if steady => warmup_s,
            SteadyStateMode::Auto | SteadyStateMode::Off => 0.0,
        },
        steady,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A deterministic pseudo-random sequence in [-1, 1) (xorshift), so tests need no RNG.
    fn noise(seed: u64, n: usize) -> Vec<f64> {
        // Spread the seed's bits: xorshift from a small seed starts with small values.
        let mut x = (seed.wrapping_add(1)).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 11) as f64 / (1u64 << 52) as f64 - 1.0
            })
            .collect()
    }

    #[test]
    fn empty_short_and_constant_series_are_not_truncated() {
        let empty = mser5(&[]);
        assert_eq!(
            (empty.index, empty.steady_mean, empty.steady),
            (0, None, true)
        );
        let short = mser5(&[0.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0]);
        assert_eq!(short.index, 0);
        assert_eq!(short.steady_mean, Some(60.0 / 7.0));
        let flat = mser5(&[3.7; 200]);
        assert_eq!(flat.index, 0);
        assert!(flat.steady);
        assert!((flat.steady_mean.unwrap() - 3.7).abs() < 1e-12);
    }

    #[test]
    fn a_ramp_then_flat_is_cut_at_the_end_of_the_ramp() {
        for ramp in [10usize, 20, 35] {
            let mut s: Vec<f64> = (0..ramp).map(|i| 10.0 * i as f64 / ramp as f64).collect();
            s.extend(noise(ramp as u64, 150).iter().map(|e| 10.0 + 0.3 * e));
            let t = mser5(&s);
            assert!(
                t.index + MSER_BATCH >= ramp && t.index <= ramp + MSER_BATCH,
                "ramp {ramp}: cut at {}",
                t.index
            );
            assert!(t.steady);
            assert!((t.steady_mean.unwrap() - 10.0).abs() < 0.2);
        }
    }

    #[test]
    fn stationary_noise_is_not_truncated_much() {
        for seed in 1..20u64 {
            let s: Vec<f64> = noise(seed, 300).iter().map(|e| 50.0 + 5.0 * e).collect();
            let t = mser5(&s);
            assert!(t.index <= 100, "seed {seed}: cut at {}", t.index);
            assert!((t.steady_mean.unwrap() - 50.0).abs() < 1.5);
        }
    }

    #[test]
    fn a_series_that_keeps_climbing_is_not_steady() {
        let s: Vec<f64> = (0..100).map(f64::from).collect();
        let t = mser5(&s);
        assert!(!t.steady, "{t:?}");
        assert_eq!(t.index, 50);
    }

    #[test]
    fn a_final_partial_batch_stays_in_the_mean() {
        let mut s = vec![1.0; 20];
        s.extend([4.0, 4.0]);
        let t = mser5(&s);
        assert_eq!(t.len, 22);
        assert_eq!(t.index, 0);
        assert_eq!(t.steady_mean, Some(28.0 / 22.0));
    }

    fn series(in_flight: Vec<f64>, tokens: Vec<f64>) -> TimeSeries {
        TimeSeries {
            origin_ns: 0,
            bucket_ns: 1_000_000_000,
            completions: vec![0; tokens.len()],
            in_flight_max: vec![0; tokens.len()],
            output_tokens: tokens,
            in_flight_mean: in_flight,
        }
    }

    #[test]
    fn run_warmup_is_the_later_cut_and_off_excludes_nothing() {
        // In flight ramps for 10 s, throughput for 20 s, then both hold.
        let mut inf: Vec<f64> = (0..10).map(|i| 0.8 * i as f64).collect();
        inf.extend(noise(3, 90).iter().map(|e| 8.0 + 0.1 * e));
        let mut tok: Vec<f64> = (0..20).map(|i| 50.0 * i as f64).collect();
        tok.extend(noise(4, 80).iter().map(|e| 1000.0 + 10.0 * e));
        let ts = series(inf, tok);
        let auto = steady_state(&ts, None, SteadyStateMode::Auto);
        assert!(auto.steady);
        assert!((15.0..=25.0).contains(&auto.warmup_s), "{auto:?}");
        assert!(auto.in_flight.index <= 15);
        assert_eq!(auto.excluded_s, auto.warmup_s);
        let off = steady_state(&ts, None, SteadyStateMode::Off);
        assert_eq!(off.warmup_s, auto.warmup_s);
        assert_eq!(off.excluded_s, 0.0);
    }

    #[test]
    fn the_drain_after_the_last_send_is_cut_off() {
        // Flat for 60 s, then a 40 s drain that the cut at the last send keeps out.
        let mut inf: Vec<f64> = noise(9, 60).iter().map(|e| 8.0 + 0.05 * e).collect();
        inf.extend((0..40).map(|i| 8.0 - 0.2 * i as f64));
        let ts = series(inf.clone(), inf);
        let cut = steady_state(&ts, Some(60_000_000_000), SteadyStateMode::Auto);
        assert_eq!(cut.in_flight.len, 60);
        assert!(cut.warmup_s <= 20.0, "{cut:?}");
        assert!(cut.steady);
        // A cut that leaves too few batches is ignored.
        let ignored = steady_state(&ts, Some(5_000_000_000), SteadyStateMode::Auto);
        assert_eq!(ignored.in_flight.len, 100);
    }

    #[test]
    fn a_level_change_in_the_middle_is_not_cut_away() {
        // Throughput halves at 50 s: MSER's best cut is the boundary, which is no warm-up.
        let mut tok: Vec<f64> = noise(5, 50).iter().map(|e| 1000.0 + 5.0 * e).collect();
        tok.extend(noise(6, 50).iter().map(|e| 500.0 + 5.0 * e));
        let ts = series(vec![8.0; 100], tok);
        let s = steady_state(&ts, None, SteadyStateMode::Auto);
        assert!(!s.steady, "{s:?}");
        assert_eq!(s.warmup_s, 50.0);
        assert_eq!(s.excluded_s, 0.0);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn shifting_a_series_shifts_only_its_mean(
            xs in prop::collection::vec(0u32..100, 0..300),
            shift in -1000i32..1000,
        ) {
            let a: Vec<f64> = xs.iter().map(|&x| f64::from(x)).collect();
            let b: Vec<f64> = a.iter().map(|x| x + f64::from(shift)).collect();
            let (ta, tb) = (mser5(&a), mser5(&b));
            prop_assert_eq!(ta.index, tb.index);
            prop_assert_eq!(ta.steady, tb.steady);
            if let (Some(ma), Some(mb)) = (ta.steady_mean, tb.steady_mean) {
                prop_assert!((ma + f64::from(shift) - mb).abs() < 1e-9);
            }
        }

        #[test]
        fn scaling_a_series_changes_nothing_but_its_mean(
            xs in prop::collection::vec(-1e6f64..1e6, 0..300),
            power in -20i32..20,
        ) {
            // Powers of two scale every intermediate exactly.
            let scale = 2f64.powi(power);
            let scaled: Vec<f64> = xs.iter().map(|x| x * scale).collect();
            let (a, b) = (mser5(&xs), mser5(&scaled));
            prop_assert_eq!(a.index, b.index);
            prop_assert_eq!(a.steady_mean.map(|m| m * scale), b.steady_mean);
        }

        #[test]
        fn a_ramp_then_a_flat_plateau_is_cut_within_a_batch_of_the_ramp_end(
            ramp in 10usize..60,
            plateau in 100usize..300,
            level in 1.0f64..1e4,
        ) {
            let mut s: Vec<f64> = (0..ramp).map(|i| level * i as f64 / ramp as f64).collect();
            s.extend(std::iter::repeat_n(level, plateau));
            let t = mser5(&s);
            prop_assert!(
                t.index + MSER_BATCH >= ramp && t.index <= ramp + MSER_BATCH,
                "ramp {} cut at {}", ramp, t.index
            );
        }

        #[test]
        fn a_noisy_plateau_loses_its_ramp_and_keeps_its_mean(
            ramp in 10usize..60,
            noise in prop::collection::vec(-1.0f64..1.0, 130..300),
        ) {
            // On noise MSER may cut a few batches late (a lucky quiet stretch lowers the
            // statistic), which costs data but no bias; it must never keep the ramp.
            let mut s: Vec<f64> = (0..ramp).map(|i| 100.0 * i as f64 / ramp as f64).collect();
            s.extend(noise.iter().map(|e| 100.0 + 2.0 * e));
            let t = mser5(&s);
            prop_assert!(t.index + MSER_BATCH >= ramp, "ramp {} cut at {}", ramp, t.index);
            let mean = t.steady_mean.unwrap();
            prop_assert!((mean - 100.0).abs() < 1.0, "steady mean {}", mean);
        }

        #[test]
        fn the_cut_is_a_whole_number_of_batches_within_the_first_half(
            xs in prop::collection::vec(-1e3f64..1e3, 0..400),
        ) {
            let t = mser5(&xs);
            prop_assert_eq!(t.index % MSER_BATCH, 0);
            prop_assert!(t.index <= xs.len() / 2);
            prop_assert_eq!(t.len, xs.len());
            prop_assert_eq!(t.steady_mean.is_none(), xs.is_empty());
        }
    }
}
