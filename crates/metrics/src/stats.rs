//! Exact sample statistics, computed the way NumPy computes them (vLLM parity), plus
//! distribution-free confidence intervals for percentiles.
//!
//! Bit-for-bit NumPy parity is the aim, not just closeness: `mean` uses NumPy's pairwise
//! summation, `std` its two-pass formula, `percentile` its `linear` method including the
//! two-sided lerp, and `median` its mean of the two middle values. The committed fixtures in
//! `tests/fixtures/` check this against NumPy's own output.
//!
//! Every function returns `None` for an empty sample (vLLM's `xs or 0` convention, which
//! reports 0, is the vLLM-compatible writer's business).

use serde::{Deserialize, Serialize};

/// NumPy's pairwise-summation block size (`PW_BLOCKSIZE` in `loops_utils.h`).
const PW_BLOCKSIZE: usize = 128;

/// NumPy's `pairwise_sum` for doubles: 8 interleaved accumulators inside blocks of at most
/// 128 values, halves combined recursively.
pub fn pairwise_sum(a: &[f64]) -> f64 {
    let n = a.len();
    if n < 8 {
        let mut res = 0.0;
        for &x in a {
            res += x;
        }
        res
    } else if n <= PW_BLOCKSIZE {
        let mut r = [0.0f64; 8];
        r.copy_from_slice(&a[..8]);
        let whole = n - n % 8;
        let mut i = 8;
        while i < whole {
            for (j, acc) in r.iter_mut().enumerate() {
                *acc += a[i + j];
            }
            i += 8;
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for &x in &a[whole..] {
            res += x;
        }
        res
    } else {
        let mut n2 = n / 2;
        n2 -= n2 % 8;
        pairwise_sum(&a[..n2]) + pairwise_sum(&a[n2..])
    }
}

/// `np.mean`.
pub fn mean(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    Some(pairwise_sum(xs) / xs.len() as f64)
}

/// `np.std` with `ddof = 0`.
pub fn std_dev(xs: &[f64]) -> Option<f64> {
    let m = mean(xs)?;
    let sq: Vec<f64> = xs
        .iter()
        .map(|&x| {
            let d = x - m;
            d * d
        })
        .collect();
    Some((pairwise_sum(&sq) / xs.len() as f64).sqrt())
}

/// `np.median` of an ascending-sorted sample.
pub fn median_sorted(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let half = n / 2;
    if n % 2 == 1 {
        Some(sorted[half])
    } else {
        Some((sorted[half - 1] + sorted[half]) / 2.0)
    }
}

/// `np.median` of an unsorted sample.
pub fn median(xs: &[f64]) -> Option<f64> {
    median_sorted(&sorted_copy(xs))
}

/// `np.percentile(xs, p)` (method `linear`) of an ascending-sorted sample; `p` in [0, 100]
/// (clamped).
pub fn percentile_sorted(sorted: &[f64], p: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 {
        return None;
    }
    let q = (p / 100.0).clamp(0.0, 1.0);
    let virtual_index = (n - 1) as f64 * q;
    if virtual_index >= (n - 1) as f64 {
        return Some(sorted[n - 1]);
    }
    let lo = virtual_index.floor();
    // `lo < n - 1` here, so the cast is in range.
    let i = lo as usize;
    let (a, b) = (sorted[i], sorted[i + 1]);
    let t = virtual_index - lo;
    Some(lerp(a, b, t))
}

/// `np.percentile` of an unsorted sample.
pub fn percentile(xs: &[f64], p: f64) -> Option<f64> {
    percentile_sorted(&sorted_copy(xs), p)
}

/// NumPy's `_lerp`: from the nearer end, so that `t = 1` yields `b` exactly.
fn lerp(a: f64, b: f64, t: f64) -> f64 {
    let diff = b - a;
    if t >= 0.5 {
        b - diff * (1.0 - t)
    } else {
        a + diff * t
    }
}

/// A sorted copy (total order, so NaN cannot panic the sort).
pub fn sorted_copy(xs: &[f64]) -> Vec<f64> {
    let mut v = xs.to_vec();
    v.sort_unstable_by(f64::total_cmp);
    v
}

/// Samples a percentile `p` (in %) needs to be stable: the smallest `n` with
/// `n ≥ 10 / (1 − p)` (p50 → 20, p90 → 100, p99 → 1000, p99.9 → 10 000). The quotient is
/// snapped to a whole number when it is one up to rounding: in binary, `10 / (1 − 0.9)` is
/// 100.00000000000003, and a plain ceiling would ask for 101. `None` for p ≥ 100: the
/// maximum never becomes a stable estimate, so it takes no part in the verdict.
pub fn required_samples(p: f64) -> Option<u64> {
    let q = p / 100.0;
    if q >= 1.0 || q.is_nan() {
        return None;
    }
    let exact = 10.0 / (1.0 - q);
    let whole = exact.round();
    let need = if (exact - whole).abs() <= 1e-9 * whole {
        whole
    } else {
        exact.ceil()
    };
    // Below p0 the rule asks for fewer than 10; never less than one sample.
    Some((need as u64).max(1))
}

/// Is a percentile `p` (in %) backed by too few samples to be stable (`n < 10 / (1 − p)`,
/// by [`required_samples`])? p99 needs 1000 samples, p99.9 needs 10 000; p100 is always flagged.
pub fn is_unstable(n: usize, p: f64) -> bool {
    match required_samples(p) {
        Some(need) => (n as u64) < need,
        None => true,
    }
}

/// Samples above which [`percentile_ci_ranks`] uses the normal approximation.
pub const EXACT_CI_MAX_N: usize = 100_000;

/// Two-sided 95 % normal quantile.
const Z_975: f64 = 1.959_963_984_540_054;

/// 1-based order-statistic ranks `(low, high)` whose values bound the `p`-th percentile of
/// the population with at least 95 % confidence, for any continuous distribution.
///
/// With `B ~ Binomial(n, q)` the number of samples below the true quantile,
/// `P(X(l) ≤ ξ ≤ X(u)) = F(u−1) − F(l−1)`. The ranks are chosen equal-tailed and
/// conservative: `l` is the largest rank with `F(l−1) ≤ 2.5 %`, `u` the smallest with
/// `F(u−1) ≥ 97.5 %`. A side is `None` when even the extreme order statistic cannot bound
/// it (too few samples: the interval is open on that side).
///
/// For `n ≤ EXACT_CI_MAX_N` the binomial CDF is computed exactly (log-space recurrence);
/// above that the normal approximation `nq ∓ 1.96·√(nq(1−q))` is used (rounded outward),
/// whose ranks differ from the exact ones by at most one or two at such sizes.
pub fn percentile_ci_ranks(n: usize, p: f64) -> (Option<usize>, Option<usize>) {
    if n == 0 {
        return (None, None);
    }
    let q = (p / 100.0).clamp(0.0, 1.0);
    // Degenerate quantiles: the sample minimum can only overestimate the population minimum.
    if q <= 0.0 {
        return (None, Some(1));
    }
    if q >= 1.0 {
        return (Some(n), None);
    }
    if n > EXACT_CI_MAX_N {
        return normal_ranks(n, q);
    }
    exact_ranks(n, q)
}

fn exact_ranks(n: usize, q: f64) -> (Option<usize>, Option<usize>) {
    let alpha_half = 0.025;
    let ln_q = q.ln();
    let ln_1q = (1.0 - q).ln();
    let nf = n as f64;
    // log pmf(0) = n ln(1−q); pmf(k+1)/pmf(k) = (n−k)/(k+1) · q/(1−q).
    let mut ln_pmf = nf * ln_1q;
    let ratio = ln_q - ln_1q;
    let mut cdf = 0.0f64; // F(k−1) before adding pmf(k)
    let mut low = None;
    let mut high = None;
    for k in 0..n {
        // Here `cdf` = F(k−1) = P(B ≤ k−1): rank l = k is valid when it is ≤ α/2.
        if k >= 1 && cdf <= alpha_half {
            low = Some(k);
        }
        cdf += ln_pmf.exp();
        // Now `cdf` = F(k): rank u = k+1 is valid when it is ≥ 1 − α/2.
        if high.is_none() && cdf >= 1.0 - alpha_half {
            high = Some(k + 1);
            break;
        }
        let kf = k as f64;
        ln_pmf += ((nf - kf) / (kf + 1.0)).ln() + ratio;
    }
    // Rank n itself can be a lower bound (F(n−1) ≤ α/2: a high quantile of a tiny sample).
    if high.is_none() && cdf <= alpha_half {
        low = Some(n);
    }
    (low, high)
}

fn normal_ranks(n: usize, q: f64) -> (Option<usize>, Option<usize>) {
    let nf = n as f64;
    let centre = nf * q;
    let half = Z_975 * (nf * q * (1.0 - q)).sqrt();
    let lo = (centre - half).floor();
    let hi = (centre + half).ceil() + 1.0;
    let low = (lo >= 1.0).then_some(lo as usize);
    let high = (hi <= nf).then_some(hi as usize);
    (low, high)
}

/// One percentile with its 95 % distribution-free confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PercentileStat {
    /// The percentile, in % (e.g. 99).
    pub p: f64,
    /// `np.percentile` value.
    pub value: f64,
    /// Lower bound; `None` when the sample is too small to bound it.
    pub ci_low: Option<f64>,
    /// Upper bound; `None` when the sample is too small to bound it.
    pub ci_high: Option<f64>,
    /// Fewer than `10 / (1 − p)` samples back it.
    pub unstable: bool,
}

/// The percentile, its CI and stability flag, from an ascending-sorted sample.
pub fn percentile_stat(sorted: &[f64], p: f64) -> Option<PercentileStat> {
    let value = percentile_sorted(sorted, p)?;
    let (lo, hi) = percentile_ci_ranks(sorted.len(), p);
    Some(PercentileStat {
        p,
        value,
        // The order-statistic bounds cover the population quantile; the interpolated estimate
        // can fall just outside them at extreme p with few samples (p0.1 of two samples lies
        // above the minimum that bounds it). Widening to include the estimate keeps coverage.
        ci_low: lo.map(|r| sorted[r - 1].min(value)),
        ci_high: hi.map(|r| sorted[r - 1].max(value)),
        unstable: is_unstable(sorted.len(), p),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_none() {
        assert_eq!(mean(&[]), None);
        assert_eq!(std_dev(&[]), None);
        assert_eq!(median(&[]), None);
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile_stat(&[], 50.0), None);
    }

    #[test]
    fn small_hand_computed() {
        let xs = [4.0, 1.0, 3.0, 2.0];
        assert_eq!(mean(&xs), Some(2.5));
        assert_eq!(median(&xs), Some(2.5));
        assert_eq!(std_dev(&xs), Some(1.25f64.sqrt()));
        // (n−1)·q = 3·0.9 = 2.7 → 3 + 0.7·(4 − 3)
        assert!((percentile(&xs, 90.0).unwrap() - 3.7).abs() < 1e-12);
        assert_eq!(percentile(&xs, 0.0), Some(1.0));
        assert_eq!(percentile(&xs, 100.0), Some(4.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
    }

    #[test]
    fn unstable_threshold() {
        assert!(is_unstable(999, 99.0));
        assert!(!is_unstable(1000, 99.0));
        assert!(is_unstable(9999, 99.9));
        assert!(is_unstable(19, 50.0) && !is_unstable(20, 50.0));
        assert!(is_unstable(1_000_000, 100.0));
    }

    /// Exact binomial CDF by direct summation (f64 is plenty at these sizes).
    fn binom_cdf(n: usize, q: f64, k: i64) -> f64 {
        if k < 0 {
            return 0.0;
        }
        let mut c = 1.0f64;
        let mut total = 0.0;
        for i in 0..=n.min(k as usize) {
            if i > 0 {
                c = c * (n - i + 1) as f64 / i as f64;
            }
            total += c * q.powi(i as i32) * (1.0 - q).powi((n - i) as i32);
        }
        total
    }

    #[test]
    fn exact_ranks_are_the_tightest_conservative_ones() {
        for &(n, p) in &[(20usize, 50.0), (100, 90.0), (250, 99.0), (60, 10.0)] {
            let q = p / 100.0;
            let (l, u) = percentile_ci_ranks(n, p);
            if let Some(l) = l {
                assert!(
                    binom_cdf(n, q, l as i64 - 1) <= 0.025 + 1e-12,
                    "n={n} p={p}"
                );
                assert!(
                    binom_cdf(n, q, l as i64) > 0.025,
                    "l not maximal n={n} p={p}"
                );
            }
            if let Some(u) = u {
                assert!(binom_cdf(n, q, u as i64 - 1) >= 0.975 - 1e-12);
                assert!(
                    binom_cdf(n, q, u as i64 - 2) < 0.975,
                    "u not minimal n={n} p={p}"
                );
            }
        }
        // Median of 20: the classic ranks 6 and 15.
        assert_eq!(percentile_ci_ranks(20, 50.0), (Some(6), Some(15)));
        // p99 of 100 samples cannot be bounded above.
        assert_eq!(percentile_ci_ranks(100, 99.0).1, None);
        // Median of 5 cannot be bounded at 95 % on either side.
        assert_eq!(percentile_ci_ranks(5, 50.0), (None, None));
        // p99.9 of 2 samples: the maximum is a valid lower bound (F(1) = 0.002).
        assert_eq!(percentile_ci_ranks(2, 99.9), (Some(2), None));
    }

    #[test]
    fn normal_approximation_agrees_with_exact_near_the_switch() {
        let n = EXACT_CI_MAX_N;
        for p in [50.0, 90.0, 99.0, 99.9] {
            let (el, eu) = exact_ranks(n, p / 100.0);
            let (al, au) = normal_ranks(n, p / 100.0);
            let d = |a: Option<usize>, b: Option<usize>| a.unwrap().abs_diff(b.unwrap());
            assert!(d(el, al) <= 2, "p{p}: {el:?} vs {al:?}");
            assert!(d(eu, au) <= 2, "p{p}: {eu:?} vs {au:?}");
        }
    }

    #[test]
    fn ci_contains_the_estimate_at_extreme_percentiles() {
        // Two samples at p0.098: the upper rank is the minimum, below the interpolated value.
        let s = percentile_stat(&[-277_390_143.31, 0.0], 0.098).unwrap();
        assert!(s.ci_high.unwrap() >= s.value, "{s:?}");
        let s = percentile_stat(&[0.0, 1.0e8], 99.9).unwrap();
        assert!(s.ci_low.is_none_or(|lo| lo <= s.value), "{s:?}");
    }

    #[test]
    fn stability_thresholds_are_whole_numbers() {
        assert!(!is_unstable(100, 90.0));
        assert!(is_unstable(99, 90.0));
        assert!(!is_unstable(1000, 99.0));
        assert!(!is_unstable(10_000, 99.9));
        assert!(is_unstable(9_999, 99.9));
        assert!(is_unstable(1_000_000, 100.0));
    }

    #[test]
    fn percentile_stat_bounds_the_value() {
        let xs: Vec<f64> = (1..=1000).map(f64::from).collect();
        let s = percentile_stat(&xs, 99.0).unwrap();
        assert!(!s.unstable);
        let (lo, hi) = (s.ci_low.unwrap(), s.ci_high.unwrap());
        assert!(lo <= s.value && s.value <= hi, "{s:?}");
        assert!(hi - lo < 20.0);
    }
}
