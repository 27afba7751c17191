//! The Mann–Whitney U test (Wilcoxon rank-sum): do two samples come from one distribution?
//! Distribution-free, so it suits skewed latency samples where a t-test does not.

use serde::Serialize;

use crate::stats::normal_sf;
use crate::AnalysisError;

/// The exact distribution of U is used when there are no ties and `n1 + n2` is at most this.
pub const EXACT_MAX_TOTAL: usize = 60;

/// How the p-value was computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PValueMethod {
    /// Enumerated null distribution of U (small samples without ties).
    Exact,
    /// Normal approximation with tie and continuity corrections.
    Normal,
}

/// The result of a two-sided Mann–Whitney U test.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MannWhitney {
    /// Size of the first sample.
    pub n1: usize,
    /// Size of the second sample.
    pub n2: usize,
    /// `U1 = R1 − n1(n1+1)/2`: pairs in which the first sample's value is larger (ties ½).
    pub u1: f64,
    /// `U2 = n1·n2 − U1`.
    pub u2: f64,
    /// `min(U1, U2)`, the statistic tables quote.
    pub u: f64,
    /// Standardised `U1` (normal approximation, continuity-corrected): positive when the
    /// first sample tends to be larger.
    pub z: f64,
    /// Two-sided p-value.
    pub p_value: f64,
    /// How `p_value` was obtained.
    pub method: PValueMethod,
    /// `U1 / (n1·n2)`: the probability that a value of the first sample exceeds one of the
    /// second (ties ½), 0.5 when they are alike.
    pub effect_size: f64,
}

/// Two-sided Mann–Whitney U test of samples `a` and `b`.
///
/// Ranks are averaged over ties. The normal approximation uses
/// `σ² = n1·n2/12 · ((n + 1) − Σ(t³ − t) / (n(n − 1)))` for tie groups of size `t` and a
/// continuity correction of ½ towards the mean (as SciPy's default). Without ties and with
/// `n1 + n2 ≤` [`EXACT_MAX_TOTAL`], the p-value is exact: `2·P(U ≤ min(U1, U2))` under the
/// null distribution, capped at 1.
pub fn mann_whitney_u(a: &[f64], b: &[f64]) -> Result<MannWhitney, AnalysisError> {
    if a.is_empty() || b.is_empty() {
        return Err(AnalysisError::Invalid(
            "the Mann–Whitney test needs two non-empty samples".into(),
        ));
    }
    if a.iter().chain(b).any(|v| v.is_nan()) {
        return Err(AnalysisError::Invalid(
            "the Mann–Whitney test cannot rank NaN values".into(),
        ));
    }
    let (n1, n2) = (a.len(), b.len());
    let n = n1 + n2;
    let mut all: Vec<(f64, bool)> = a
        .iter()
        .map(|&v| (v, true))
        .chain(b.iter().map(|&v| (v, false)))
        .collect();
    all.sort_by(|x, y| x.0.total_cmp(&y.0));

    let mut rank_sum_a = 0.0;
    let mut tie_term = 0.0;
    let mut i = 0;
    while i < n {
        let mut j = i + 1;
        while j < n && all[j].0 == all[i].0 {
            j += 1;
        }
        // Positions i..j (0-based) share the average of ranks i+1..=j.
        let avg_rank = (i + 1 + j) as f64 / 2.0;
        let in_a = all[i..j].iter().filter(|x| x.1).count();
        rank_sum_a += avg_rank * in_a as f64;
        let t = (j - i) as f64;
        tie_term += t * t * t - t;
        i = j;
    }
    let (n1f, n2f, nf) = (n1 as f64, n2 as f64, n as f64);
    let u1 = rank_sum_a - n1f * (n1f + 1.0) / 2.0;
    let u2 = n1f * n2f - u1;
    let u = u1.min(u2);

    let mean = n1f * n2f / 2.0;
    let variance = if n > 1 {
        n1f * n2f / 12.0 * ((nf + 1.0) - tie_term / (nf * (nf - 1.0)))
    } else {
        0.0
    };
    let z = if variance > 0.0 {
        let d = u1 - mean;
        let corrected = (d.abs() - 0.5).max(0.0);
        corrected.copysign(d) / variance.sqrt()
    } else {
        0.0
    };
    let (p_value, method) = if tie_term == 0.0 && n <= EXACT_MAX_TOTAL {
        (exact_p_value(n1, n2, u), PValueMethod::Exact)
    } else if variance > 0.0 {
        ((2.0 * normal_sf(z.abs())).min(1.0), PValueMethod::Normal)
    } else {
        // Every value is equal: no evidence of a difference.
        (1.0, PValueMethod::Normal)
    };
    Ok(MannWhitney {
        n1,
        n2,
        u1,
        u2,
        u,
        z,
        p_value,
        method,
        effect_size: u1 / (n1f * n2f),
    })
}

/// `2·P(U ≤ u)` under the null hypothesis for samples of `n1` and `n2` distinct values,
/// capped at 1. Counts the `n1`-subsets of ranks `1..=n` by their sum (`U = R − n1(n1+1)/2`).
fn exact_p_value(n1: usize, n2: usize, u: f64) -> f64 {
    let n = n1 + n2;
    let max_sum = n * (n + 1) / 2;
    // ways[k][s]: k-subsets of the ranks seen so far summing to s. f64 counts: C(60, 30) is
    // beyond 2^53, but the ratio below only needs relative precision.
    let mut ways = vec![vec![0.0f64; max_sum + 1]; n1 + 1];
    ways[0][0] = 1.0;
    for r in 1..=n {
        for k in (1..=n1.min(r)).rev() {
            let (lower, upper) = ways.split_at_mut(k);
            let prev = &lower[k - 1];
            let cur = &mut upper[0];
            for s in (r..=max_sum).rev() {
                cur[s] += prev[s - r];
            }
        }
    }
    let offset = n1 * (n1 + 1) / 2;
    let total: f64 = ways[n1].iter().sum();
    // U takes integer values without ties; `u` is one of them up to float noise.
    let u_max = (u + 1e-9).floor() as usize;
    let tail: f64 = ways[n1][offset..=offset + u_max.min(n1 * n2)].iter().sum();
    (2.0 * tail / total).min(1.0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn completely_separated_small_samples_use_the_exact_distribution() {
        // Exact: 2 / C(10, 5) = 2 / 252.
        let r = mann_whitney_u(&[1.0, 2.0, 3.0, 4.0, 5.0], &[6.0, 7.0, 8.0, 9.0, 10.0]).unwrap();
        assert_eq!(r.method, PValueMethod::Exact);
        assert_eq!((r.u1, r.u2, r.u), (0.0, 25.0, 0.0));
        assert!((r.p_value - 2.0 / 252.0).abs() < 1e-12);
        assert_eq!(r.effect_size, 0.0);
        // z = (0 − 12.5 + 0.5) / sqrt(25·11/12) = −2.5067.
        assert!((r.z + 2.506_7).abs() < 1e-4, "{}", r.z);
    }

    #[test]
    fn exact_p_value_of_an_interleaved_sample() {
        // a = {1, 3, 5}, b = {2, 4, 6}: U1 = 0 + 1 + 2 = 3, U = 3. Of the 20 rank sets of
        // size 3, those with U ≤ 3 number 1 + 1 + 2 + 3 = 7, so p = 2·7/20 = 0.7.
        let r = mann_whitney_u(&[1.0, 3.0, 5.0], &[2.0, 4.0, 6.0]).unwrap();
        assert_eq!(r.u1, 3.0);
        assert!((r.p_value - 0.7).abs() < 1e-12, "{}", r.p_value);
        // Identical orderings give p = 1 (capped).
        let r = mann_whitney_u(&[1.0, 4.0], &[2.0, 3.0]).unwrap();
        assert_eq!(r.u1, 2.0);
        assert_eq!(r.p_value, 1.0);
    }

    #[test]
    fn ties_switch_to_the_corrected_normal_approximation() {
        let r =
            mann_whitney_u(&[1.0, 2.0, 2.0, 3.0, 4.0], &[2.0, 3.0, 3.0, 5.0, 6.0, 7.0]).unwrap();
        assert_eq!(r.method, PValueMethod::Normal);
        // Ranks: 1→1, 2→3 (×3), 3→6 (×3), 4→8, 5→9, 6→10, 7→11; R1 = 1+3+3+6+8 = 21,
        // U1 = 21 − 15 = 6. σ² = 30/12·(12 − (24 + 24)/110) = 28.909;
        // z = (6 − 15 + 0.5)/5.3767 = −1.5809; p = 2·Φ(−1.5809) = 0.1139.
        assert_eq!((r.u1, r.u2, r.u), (6.0, 24.0, 6.0));
        assert!((r.z + 1.580_89).abs() < 1e-4, "{}", r.z);
        assert!((r.p_value - 0.113_90).abs() < 1e-4, "{}", r.p_value);
        // Without the tie correction σ² would be 30 and z −1.552: the correction matters.
        assert!((r.z + 1.552).abs() > 0.02);
    }

    #[test]
    fn large_shifted_samples_are_significant_and_alike_ones_are_not() {
        let a: Vec<f64> = (0..200).map(|i| 100.0 + f64::from(i % 50)).collect();
        let b: Vec<f64> = (0..200).map(|i| 120.0 + f64::from(i % 50)).collect();
        let r = mann_whitney_u(&a, &b).unwrap();
        assert_eq!(r.method, PValueMethod::Normal);
        assert!(r.p_value < 1e-6 && r.z < 0.0, "{r:?}");
        let r = mann_whitney_u(&a, &a).unwrap();
        assert!((r.z).abs() < 1e-12 && r.p_value > 0.99, "{r:?}");
        assert!((r.effect_size - 0.5).abs() < 1e-12);
    }

    #[test]
    fn exact_and_normal_agree_on_moderate_samples() {
        // 25 + 25 distinct values: the normal approximation is within 0.01 of the exact p.
        let a: Vec<f64> = (0..25).map(|i| f64::from(i) * 2.0).collect();
        let b: Vec<f64> = (0..25).map(|i| f64::from(i) * 2.0 + 9.5).collect();
        let r = mann_whitney_u(&a, &b).unwrap();
        assert_eq!(r.method, PValueMethod::Exact);
        let normal = 2.0 * normal_sf(r.z.abs());
        assert!(
            (r.p_value - normal).abs() < 0.01,
            "{} vs {normal}",
            r.p_value
        );
    }

    #[test]
    fn constant_samples_and_bad_input() {
        let r = mann_whitney_u(&[5.0; 70], &[5.0; 3]).unwrap();
        assert_eq!(r.p_value, 1.0);
        assert_eq!(r.z, 0.0);
        assert!(mann_whitney_u(&[], &[1.0]).is_err());
        assert!(mann_whitney_u(&[f64::NAN], &[1.0]).is_err());
    }
}
