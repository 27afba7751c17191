//! Which clock timed a run, and the warning a comparison across clocks needs: a virtual-time
//! run's latencies are the simulator's cost model with no server, network or client in the
//! loop, so set beside a real-time run the difference mixes the model with real overheads.

use servebench_metrics::result::TargetInfo;

/// The clock a run's latencies were measured on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// Wall-clock time: a real server, or the simulator serving over HTTP.
    Real,
    /// The simulator's engine core in virtual time (no server, no sleeping).
    Virtual,
}

impl Clock {
    /// The clock of a run from its `metadata.target`: only the simulator records `virtual`.
    pub fn of(target: &TargetInfo) -> Clock {
        if target.clock.as_deref() == Some("virtual") {
            Clock::Virtual
        } else {
            Clock::Real
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Clock::Real => "real time",
            Clock::Virtual => "virtual time",
        }
    }
}

/// How a side's runs were timed: one clock, or a mix.
fn side(clocks: &[Clock]) -> Option<Clock> {
    let first = *clocks.first()?;
    clocks.iter().all(|c| *c == first).then_some(first)
}

/// A warning when A and B (their runs' clocks) were not all timed on one clock; `None` when
/// they were.
pub fn clock_warning(a: &[Clock], b: &[Clock]) -> Option<String> {
    let all_virtual = a.iter().chain(b).all(|c| *c == Clock::Virtual);
    let all_real = a.iter().chain(b).all(|c| *c == Clock::Real);
    if all_virtual || all_real {
        return None;
    }
    let name =
        |clocks: &[Clock]| side(clocks).map_or("a mix of real and virtual time", Clock::describe);
    Some(format!(
        "A ran in {} and B in {}: virtual-time latencies are the simulator's cost model with no \
         server, network or client in the loop, so the differences below mix the model with \
         real serving overheads; compare runs made on the same clock",
        name(a),
        name(b)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use Clock::{Real, Virtual};

    #[test]
    fn a_real_and_a_virtual_run_get_a_warning_naming_both_clocks() {
        let w = clock_warning(&[Real], &[Virtual]).unwrap_or_default();
        assert!(
            w.starts_with("A ran in real time and B in virtual time"),
            "{w}"
        );
        let w = clock_warning(&[Virtual, Real], &[Virtual]).unwrap_or_default();
        assert!(w.contains("A ran in a mix of real and virtual time"), "{w}");
    }

    #[test]
    fn runs_on_one_clock_need_no_warning() {
        assert_eq!(clock_warning(&[Real, Real], &[Real]), None);
        assert_eq!(clock_warning(&[Virtual], &[Virtual, Virtual]), None);
    }

    #[test]
    fn only_the_simulator_in_virtual_time_is_virtual() {
        assert_eq!(Clock::of(&TargetInfo::server("http://x:8000")), Real);
        let mut t = TargetInfo::server("http://x:8000");
        t.clock = Some("virtual".into());
        assert_eq!(Clock::of(&t), Virtual);
        t.clock = Some("real".into());
        assert_eq!(Clock::of(&t), Real);
    }
}
