//! Client health: how much CPU the client burned, so a saturated client is visible.

use serde::{Deserialize, Serialize};

/// User + system CPU seconds consumed by this process so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuTimes {
    pub user_s: f64,
    pub system_s: f64,
}

impl CpuTimes {
    pub fn total(&self) -> f64 {
        self.user_s + self.system_s
    }

    pub fn since(&self, earlier: &CpuTimes) -> CpuTimes {
        CpuTimes {
            user_s: self.user_s - earlier.user_s,
            system_s: self.system_s - earlier.system_s,
        }
    }
}

/// This process's CPU times (`getrusage(RUSAGE_SELF)`); zero where unavailable.
#[allow(unsafe_code)]
pub fn process_cpu_times() -> CpuTimes {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a full `rusage` into the pointer it is given; we pass a valid,
    // zero-initialised one and read it only when the call reports success.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if rc != 0 {
        return CpuTimes::default();
    }
    // SAFETY: the call succeeded, so the struct is initialised (it was zeroed before anyway).
    let usage = unsafe { usage.assume_init() };
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    CpuTimes {
        user_s: secs(usage.ru_utime),
        system_s: secs(usage.ru_stime),
    }
}

/// The one-minute load average (`/proc/loadavg`); `None` where there is none.
pub fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    parse_load_average(&text)
}

fn parse_load_average(text: &str) -> Option<f64> {
    text.split_whitespace()
        .next()?
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
}

/// Number of CPUs this process may use.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_average_is_the_first_field() {
        assert_eq!(
            parse_load_average("6.21 3.10 1.00 3/420 12345\n"),
            Some(6.21)
        );
        assert_eq!(parse_load_average(""), None);
        assert_eq!(parse_load_average("nan 1 1"), None);
    }

    #[test]
    fn cpu_time_grows_with_work() {
        let before = process_cpu_times();
        let mut x = 0u64;
        for i in 0..30_000_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
        let after = process_cpu_times();
        assert!(after.total() > before.total(), "{before:?} -> {after:?}");
    }
}
