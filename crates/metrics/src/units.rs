//! Time unit conversions, in one place. servebench keeps every clock point and duration in
//! integer nanoseconds and converts only to show or save a figure (milliseconds in reports,
//! seconds in vLLM's result file and Prometheus), or to read a flag given in another unit.
//! Float conversions divide by the exact power of ten (correctly rounded); conversions to
//! nanoseconds round to the nearest nanosecond.

/// Nanoseconds per microsecond.
pub const NS_PER_US: u64 = 1_000;
/// Nanoseconds per millisecond.
pub const NS_PER_MS: u64 = 1_000_000;
/// Nanoseconds per second.
pub const NS_PER_S: u64 = 1_000_000_000;

/// Nanoseconds → seconds.
pub fn ns_to_s(ns: u64) -> f64 {
    ns as f64 / NS_PER_S as f64
}

/// Nanoseconds → milliseconds.
pub fn ns_to_ms(ns: u64) -> f64 {
    ns as f64 / NS_PER_MS as f64
}

/// Fractional nanoseconds (a mean, a TPOT) → seconds.
pub fn ns_f64_to_s(ns: f64) -> f64 {
    ns / NS_PER_S as f64
}

/// Fractional nanoseconds (a mean, a TPOT) → milliseconds.
pub fn ns_f64_to_ms(ns: f64) -> f64 {
    ns / NS_PER_MS as f64
}

/// Seconds → nanoseconds, rounded; negative or NaN input gives 0, overflow saturates.
pub fn s_to_ns(s: f64) -> u64 {
    (s * NS_PER_S as f64).round() as u64
}

/// Milliseconds → nanoseconds, rounded; negative or NaN input gives 0, overflow saturates.
pub fn ms_to_ns(ms: f64) -> u64 {
    (ms * NS_PER_MS as f64).round() as u64
}

/// Seconds → milliseconds.
pub fn s_to_ms(s: f64) -> f64 {
    s * 1e3
}

/// Milliseconds → seconds.
pub fn ms_to_s(ms: f64) -> f64 {
    ms / 1e3
}

/// Microseconds → seconds. A multiplication, as the cost model's overheads have always
/// been converted, so step times keep their exact values.
pub fn us_to_s(us: f64) -> f64 {
    us * 1e-6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_exact_values() {
        assert_eq!(ns_to_s(1_500_000_000), 1.5);
        assert_eq!(ns_to_ms(2_500_000), 2.5);
        assert_eq!(ns_f64_to_ms(1_250_000.0), 1.25);
        assert_eq!(ns_f64_to_s(5e8), 0.5);
        assert_eq!(s_to_ns(0.25), 250_000_000);
        assert_eq!(ms_to_ns(250.0), 250_000_000);
        assert_eq!(ms_to_ns(0.0000004), 0);
        assert_eq!(ms_to_ns(0.0000006), 1);
        assert_eq!(s_to_ns(-1.0), 0);
        assert_eq!(s_to_ms(0.0125), 12.5);
        assert_eq!(ms_to_s(20.0), 0.02);
        assert_eq!(us_to_s(126.0), 126.0 * 1e-6);
        // A bucket boundary stays on its boundary (10 ms is exactly 0.01 s).
        assert_eq!(ns_to_s(10 * NS_PER_MS), 0.01);
        assert_eq!(NS_PER_MS / NS_PER_US, 1_000);
    }
}

/// The longest duration a flag may give: 30 days. No benchmark, timeout or injected stall
/// comes near it, and it keeps every conversion to `Duration` and to nanoseconds exact.
pub const MAX_FLAG_SECS: f64 = 30.0 * 86_400.0;

/// Reads a duration flag given in `unit` ("s" or "ms") as seconds: a finite number in
/// `min_s..=MAX_FLAG_SECS` (`allow_zero` admits 0). NaN, infinities, negatives and absurd
/// values are refused with the allowed range, never converted (`Duration::from_secs_f64`
/// panics on them).
pub fn parse_duration_flag(text: &str, unit: &str, allow_zero: bool) -> Result<f64, String> {
    let scale = match unit {
        "ms" => 1e-3,
        _ => 1.0,
    };
    let max = MAX_FLAG_SECS / scale;
    let range = if allow_zero {
        format!("0 to {max} {unit}")
    } else {
        format!("greater than 0 and at most {max} {unit}")
    };
    let v: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number (allowed: {range})"))?;
    if !v.is_finite() || v < 0.0 || (v == 0.0 && !allow_zero) || v > max {
        return Err(format!("{text:?} is out of range (allowed: {range})"));
    }
    Ok(v * scale)
}

/// clap value parser: seconds, greater than 0 and at most [`MAX_FLAG_SECS`].
pub fn positive_secs(text: &str) -> Result<f64, String> {
    parse_duration_flag(text, "s", false)
}

/// clap value parser: milliseconds, 0 to [`MAX_FLAG_SECS`] (as ms); the value stays in ms.
pub fn non_negative_ms(text: &str) -> Result<f64, String> {
    parse_duration_flag(text, "ms", true).map(|s| s * 1e3)
}

#[cfg(test)]
mod flag_tests {
    use super::*;

    #[test]
    fn duration_flags_refuse_what_cannot_be_a_duration() {
        for bad in ["nan", "NaN", "inf", "-inf", "1e30", "-1", "0", "x", ""] {
            let e = positive_secs(bad).expect_err(bad);
            assert!(e.contains("allowed: greater than 0"), "{bad}: {e}");
        }
        assert_eq!(positive_secs("2.5"), Ok(2.5));
        assert_eq!(non_negative_ms("0"), Ok(0.0));
        assert_eq!(non_negative_ms("2000"), Ok(2000.0));
        for bad in ["1e30", "nan", "-5", "inf"] {
            assert!(non_negative_ms(bad).is_err(), "{bad}");
        }
        // The largest accepted value converts without a panic.
        let max = positive_secs(&MAX_FLAG_SECS.to_string()).expect("the ceiling itself");
        let _ = std::time::Duration::from_secs_f64(max);
    }
}
