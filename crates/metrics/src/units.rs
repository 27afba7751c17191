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
