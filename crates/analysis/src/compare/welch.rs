//! Welch's t-test: do two small samples (one value per run, such as a run's throughput) have
//! the same mean? Unlike Mann–Whitney it can reach small p-values with three runs a side,
//! because it uses the values, not only their order; it assumes roughly normal run-to-run
//! noise, which holds for throughputs averaged over many requests.

use serde::Serialize;

use crate::AnalysisError;

/// The result of a two-sided Welch t-test.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Welch {
    /// Size of the first sample.
    pub n1: usize,
    /// Size of the second sample.
    pub n2: usize,
    /// Mean of the second sample minus mean of the first.
    pub difference: f64,
    /// `difference / se`, positive when the second sample's mean is larger.
    pub t: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: f64,
    /// Two-sided p-value.
    pub p_value: f64,
}

fn mean_var(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var)
}

/// Two-sided Welch t-test of samples `a` and `b` (each at least two finite values).
///
/// Two samples without any spread are equal (p = 1) when their means agree and different
/// (p = 0) otherwise: no noise at all leaves nothing to explain the difference by.
pub fn welch_t_test(a: &[f64], b: &[f64]) -> Result<Welch, AnalysisError> {
    if a.len() < 2 || b.len() < 2 {
        return Err(AnalysisError::Invalid(
            "the Welch t-test needs at least two values on each side".into(),
        ));
    }
    if a.iter().chain(b).any(|v| !v.is_finite()) {
        return Err(AnalysisError::Invalid(
            "the Welch t-test needs finite values".into(),
        ));
    }
    let (n1, n2) = (a.len() as f64, b.len() as f64);
    let (m1, v1) = mean_var(a);
    let (m2, v2) = mean_var(b);
    let (s1, s2) = (v1 / n1, v2 / n2);
    let se2 = s1 + s2;
    let difference = m2 - m1;
    if se2 <= 0.0 {
        let same = difference == 0.0;
        return Ok(Welch {
            n1: a.len(),
            n2: b.len(),
            difference,
            t: if same {
                0.0
            } else {
                difference.signum() * f64::INFINITY
            },
            df: n1 + n2 - 2.0,
            p_value: if same { 1.0 } else { 0.0 },
        });
    }
    let t = difference / se2.sqrt();
    let df = se2 * se2 / (s1 * s1 / (n1 - 1.0) + s2 * s2 / (n2 - 1.0));
    let p_value = (2.0 * student_t_sf(t.abs(), df)).min(1.0);
    Ok(Welch {
        n1: a.len(),
        n2: b.len(),
        difference,
        t,
        df,
        p_value,
    })
}

/// Does one new value `x` fit the run-to-run noise of earlier values `earlier` (at least two,
/// all finite)? The two-sided prediction-interval t-test: `t = (x − mean) / (s·√(1 + 1/n))`
/// with `n − 1` degrees of freedom, `s` the earlier values' sample standard deviation. It is
/// the test a trend needs for its newest run, where Welch's test needs two values a side.
/// The result is reported in [`Welch`]'s terms: `n1 = n`, `n2 = 1`, `difference = x − mean`.
///
/// Earlier values without any spread leave nothing to explain a difference by: `x` equal to
/// them gives p = 1, any other value p = 0.
pub fn prediction_t_test(earlier: &[f64], x: f64) -> Result<Welch, AnalysisError> {
    if earlier.len() < 2 {
        return Err(AnalysisError::Invalid(
            "a prediction test needs at least two earlier values".into(),
        ));
    }
    if !x.is_finite() || earlier.iter().any(|v| !v.is_finite()) {
        return Err(AnalysisError::Invalid(
            "a prediction test needs finite values".into(),
        ));
    }
    let n = earlier.len() as f64;
    let (mean, var) = mean_var(earlier);
    let difference = x - mean;
    let df = n - 1.0;
    let se = (var * (1.0 + 1.0 / n)).sqrt();
    if se <= 0.0 {
        let same = difference == 0.0;
        return Ok(Welch {
            n1: earlier.len(),
            n2: 1,
            difference,
            t: if same {
                0.0
            } else {
                difference.signum() * f64::INFINITY
            },
            df,
            p_value: if same { 1.0 } else { 0.0 },
        });
    }
    let t = difference / se;
    Ok(Welch {
        n1: earlier.len(),
        n2: 1,
        difference,
        t,
        df,
        p_value: (2.0 * student_t_sf(t.abs(), df)).min(1.0),
    })
}

/// `P(T > t)` for Student's t with `df` degrees of freedom (`t ≥ 0`), through the regularized
/// incomplete beta function: `P(|T| > t) = I_x(df/2, 1/2)` with `x = df / (df + t²)`.
fn student_t_sf(t: f64, df: f64) -> f64 {
    let x = df / (df + t * t);
    0.5 * incomplete_beta(0.5 * df, 0.5, x)
}

/// The regularized incomplete beta function `I_x(a, b)` (continued fraction, Numerical
/// Recipes' `betai`), accurate to about 1e-10 for the arguments a t-test produces.
fn incomplete_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    let front = ln_front.exp();
    // The continued fraction converges fast only on this side of the mean; the other side
    // follows from the symmetry I_x(a, b) = 1 − I_{1−x}(b, a).
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_fraction(a, b, x) / a
    } else {
        1.0 - front * beta_fraction(b, a, 1.0 - x) / b
    }
}

/// Lentz's evaluation of the incomplete beta function's continued fraction.
fn beta_fraction(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..300 {
        let m = f64::from(m);
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        h *= d * c;
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let step = d * c;
        h *= step;
        if (step - 1.0).abs() < 1e-14 {
            break;
        }
    }
    h
}

/// `ln Γ(x)` for `x > 0` (Lanczos, g = 7, nine coefficients).
fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x)Γ(1−x) = π / sin(πx).
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut sum = G[0];
    for (i, g) in G.iter().enumerate().skip(1) {
        sum += g / (x + i as f64);
    }
    let t = x + 7.5;
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_t_distribution_matches_published_values() {
        // SciPy: t.sf(2, 5) = 0.0509697, t.sf(3, 10) = 0.0066718.
        assert!((student_t_sf(2.0, 5.0) - 0.050_969_7).abs() < 1e-6);
        assert!((student_t_sf(3.0, 10.0) - 0.006_671_8).abs() < 1e-6);
        assert!((student_t_sf(0.0, 7.0) - 0.5).abs() < 1e-12);
        // Many degrees of freedom: the normal tail, P(Z > 1.96) = 0.0249979.
        assert!((student_t_sf(1.96, 1e6) - 0.024_997_9).abs() < 1e-5);
        // One degree of freedom is Cauchy: P(T > 1) = 1/4.
        assert!((student_t_sf(1.0, 1.0) - 0.25).abs() < 1e-9);
    }

    #[test]
    fn a_new_value_is_judged_against_the_noise_of_earlier_ones() {
        // Earlier 9, 10, 11 (mean 10, s = 1, n = 3): x = 14 gives t = 4 / √(4/3) = 3.464 on
        // 2 degrees of freedom; with 2 the two-sided p has a closed form, 1 − t/√(t² + 2),
        // = 0.0741799.
        let r = prediction_t_test(&[9.0, 10.0, 11.0], 14.0).unwrap();
        assert!((r.t - 3.464_101_6).abs() < 1e-6, "{r:?}");
        assert!((r.p_value - 0.074_179_9).abs() < 1e-6, "{r:?}");
        assert_eq!((r.n1, r.n2, r.df), (3, 1, 2.0));
        // Within the noise: large p; without any noise: all or nothing.
        assert!(prediction_t_test(&[9.0, 10.0, 11.0], 10.1).unwrap().p_value > 0.9);
        assert_eq!(prediction_t_test(&[5.0, 5.0], 5.0).unwrap().p_value, 1.0);
        assert_eq!(prediction_t_test(&[5.0, 5.0], 5.1).unwrap().p_value, 0.0);
        assert!(prediction_t_test(&[5.0], 5.0).is_err());
        assert!(prediction_t_test(&[5.0, 6.0], f64::NAN).is_err());
    }

    #[test]
    fn welch_of_two_worked_samples() {
        // a: mean 2, var 1; b: mean 5, var 1 (n = 3 each): se = sqrt(2/3), t = 3.674,
        // df = 4; two-sided p = 2·t.sf(3.674, 4) = 0.02131.
        let r = welch_t_test(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]).unwrap();
        assert!((r.t - 3.674_234_6).abs() < 1e-6, "{r:?}");
        assert!((r.df - 4.0).abs() < 1e-12, "{r:?}");
        assert!((r.p_value - 0.021_312).abs() < 1e-5, "{r:?}");
        assert_eq!(r.difference, 3.0);
        let same = welch_t_test(&[1.0, 2.0, 3.0], &[3.0, 1.0, 2.0]).unwrap();
        assert!(
            (same.p_value - 1.0).abs() < 1e-12 && same.t == 0.0,
            "{same:?}"
        );
    }

    #[test]
    fn no_spread_and_bad_input() {
        assert_eq!(welch_t_test(&[2.0, 2.0], &[2.0, 2.0]).unwrap().p_value, 1.0);
        assert_eq!(welch_t_test(&[2.0, 2.0], &[3.0, 3.0]).unwrap().p_value, 0.0);
        assert!(welch_t_test(&[1.0], &[1.0, 2.0]).is_err());
        assert!(welch_t_test(&[1.0, f64::NAN], &[1.0, 2.0]).is_err());
    }
}
