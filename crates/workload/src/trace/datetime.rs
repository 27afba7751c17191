//! Parsing the wall-clock timestamps of the Azure traces without a time-zone database:
//! they are naive date-times, and only differences between them matter.

use servebench_metrics::units::NS_PER_S;

/// Nanoseconds since 1970-01-01 00:00:00 of `YYYY-MM-DD HH:MM:SS[.fraction]` (a `T`
/// may separate date and time; up to 9 fraction digits are kept).
pub(crate) fn parse_ns(s: &str) -> Option<i128> {
    let s = s.trim();
    let (date, time) = s.split_once([' ', 'T'])?;
    let mut d = date.split('-');
    let year: i64 = d.next()?.parse().ok()?;
    let month: u32 = d.next()?.parse().ok()?;
    let day: u32 = d.next()?.parse().ok()?;
    // Four-digit years keep the day arithmetic far from overflow.
    if d.next().is_some()
        || !(0..=9999).contains(&year)
        || !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
    {
        return None;
    }
    let (hms, frac) = match time.split_once('.') {
        Some((hms, frac)) => (hms, frac),
        None => (time, ""),
    };
    let mut t = hms.split(':');
    let hour: i64 = t.next()?.parse().ok()?;
    let minute: i64 = t.next()?.parse().ok()?;
    let second: i64 = t.next()?.parse().ok()?;
    if t.next().is_some()
        || !(0..=23).contains(&hour)
        || !(0..=59).contains(&minute)
        || !(0..=60).contains(&second)
    {
        return None;
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut nanos: i128 = 0;
    for (i, b) in frac.bytes().take(9).enumerate() {
        nanos += i128::from(b - b'0') * 10_i128.pow(8 - i as u32);
    }
    let days = days_from_civil(year, month, day);
    let secs = i128::from(days) * 86_400 + i128::from(hour * 3600 + minute * 60 + second);
    Some(secs * i128::from(NS_PER_S) + nanos)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(parse_ns("1970-01-01 00:00:00"), Some(0));
        // 2023-11-16T18:17:03Z is 1700158623 s after the epoch.
        assert_eq!(
            parse_ns("2023-11-16 18:17:03.9799600"),
            Some(1_700_158_623_979_960_000)
        );
        assert_eq!(
            parse_ns("2024-02-29T00:00:00.5"),
            Some(1_709_164_800_500_000_000)
        );
        assert_eq!(
            parse_ns("2000-03-01 00:00:00"),
            Some(951_868_800_000_000_000)
        );
    }

    #[test]
    fn rejects_garbage() {
        for s in [
            "",
            "2023-11-16",
            "2023-13-01 00:00:00",
            "2023-11-16 25:00:00",
            "2023-11-16 10:00:00.x1",
            "x",
        ] {
            assert_eq!(parse_ns(s), None, "{s:?}");
        }
    }

    #[test]
    fn out_of_range_components_are_rejected_without_overflow() {
        for s in [
            "1970-1-1 0:-153722867280912931:0.",
            "2023-11-16 -9223372036854775808:00:00",
            "2023-11-16 00:00:-9223372036854775808",
            "2023-11-16 -1:00:00",
            "9223372036854775807-01-01 00:00:00",
            "10000-01-01 00:00:00",
        ] {
            assert_eq!(parse_ns(s), None, "{s:?}");
        }
        assert!(parse_ns("9999-12-31 23:59:60.999999999").is_some());
        assert!(parse_ns("0000-01-01 00:00:00").is_some());
    }
}
