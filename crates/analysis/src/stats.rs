//! Small numerical helpers: the standard normal distribution.

/// `P(Z > z)` for a standard normal `Z`, accurate to about 1e-7 relative error.
pub(crate) fn normal_sf(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// The complementary error function (Numerical Recipes' Chebyshev fit, |relative error|
/// < 1.2e-7 everywhere), enough for p-values.
pub(crate) fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_normal_tail_values() {
        assert!((normal_sf(0.0) - 0.5).abs() < 1e-7);
        assert!((normal_sf(1.959_963_985) - 0.025).abs() < 1e-7);
        assert!((normal_sf(-1.959_963_985) - 0.975).abs() < 1e-7);
        assert!((normal_sf(3.0) - 0.001_349_898).abs() < 1e-8);
        assert!((erfc(0.5) - 0.479_500_122).abs() < 1e-7);
    }
}
