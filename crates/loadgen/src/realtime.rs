//! Real-time scheduling for the threads that release and time requests
//! (`run --realtime-priority N`).
//!
//! On a machine whose cores are busy with other work (the server under test on the same box, a
//! build), the kernel's fair scheduler lets a running thread finish its slice before a woken one
//! gets the CPU: the dispatcher, woken for a request's intended time, can then wait several
//! milliseconds — scheduling delay, not the client's (docs/benchmarks.md, "A 60-second window
//! of a public trace"). SCHED_FIFO threads preempt every ordinary thread at once. The runtime's
//! worker threads and the dispatch timer thread take the policy; threads that only build prompts
//! put themselves back to the ordinary policy, so a long prompt build cannot starve the server.
//! Linux only; it needs CAP_SYS_NICE (or root, or an `RLIMIT_RTPRIO` that allows the priority).

use std::sync::OnceLock;

/// The SCHED_FIFO priority every runtime thread takes, once enabled.
static PRIORITY: OnceLock<u8> = OnceLock::new();

/// The priorities SCHED_FIFO accepts on Linux.
pub const PRIORITY_RANGE: std::ops::RangeInclusive<u8> = 1..=99;

/// Turns real-time scheduling on for the threads started from now on (through
/// [`apply_to_current_thread`]). Checked on a scratch thread first, so a missing permission is
/// an error here rather than threads that silently stay ordinary.
pub fn enable(priority: u8) -> Result<(), String> {
    if !PRIORITY_RANGE.contains(&priority) {
        return Err(format!(
            "--realtime-priority {priority}: SCHED_FIFO priorities are 1 to 99"
        ));
    }
    probe(priority)?;
    let _ = PRIORITY.set(priority);
    Ok(())
}

/// The priority enabled, if any.
pub fn priority() -> Option<u8> {
    PRIORITY.get().copied()
}

/// Puts the calling thread under SCHED_FIFO at the enabled priority; nothing when not enabled.
/// Failure after a successful probe leaves the thread ordinary (nothing else to do from a
/// thread-start hook).
pub fn apply_to_current_thread() {
    if let Some(p) = priority() {
        let _ = set_fifo(p);
    }
}

/// Puts the calling thread back under the ordinary policy (a thread that inherited SCHED_FIFO
/// from the thread that started it but does bulk work). Nothing when not enabled.
pub fn make_current_thread_ordinary() {
    if priority().is_some() {
        let _ = set_ordinary();
    }
}

fn probe(priority: u8) -> Result<(), String> {
    std::thread::Builder::new()
        .name("servebench-rt-probe".into())
        .spawn(move || set_fifo(priority))
        .map_err(|e| format!("--realtime-priority: cannot start a thread: {e}"))?
        .join()
        .map_err(|_| "--realtime-priority: the probe thread panicked".to_string())?
}

#[cfg(target_os = "linux")]
fn set_fifo(priority: u8) -> Result<(), String> {
    use thread_priority::unix::{
        set_thread_priority_and_policy, thread_native_id, RealtimeThreadSchedulePolicy,
        ThreadSchedulePolicy,
    };
    use thread_priority::{ThreadPriority, ThreadPriorityValue};
    let value = ThreadPriorityValue::try_from(priority)
        .map_err(|e| format!("--realtime-priority {priority}: {e}"))?;
    set_thread_priority_and_policy(
        thread_native_id(),
        ThreadPriority::Crossplatform(value),
        ThreadSchedulePolicy::Realtime(RealtimeThreadSchedulePolicy::Fifo),
    )
    .map_err(|e| {
        format!(
            "--realtime-priority {priority}: the kernel refused SCHED_FIFO ({e:?}); it needs \
             CAP_SYS_NICE or root (or `ulimit -r {priority}`), or run without the flag"
        )
    })
}

#[cfg(target_os = "linux")]
fn set_ordinary() -> Result<(), String> {
    use thread_priority::unix::{
        set_thread_priority_and_policy, thread_native_id, NormalThreadSchedulePolicy,
        ThreadSchedulePolicy,
    };
    use thread_priority::ThreadPriority;
    set_thread_priority_and_policy(
        thread_native_id(),
        ThreadPriority::Min,
        ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Other),
    )
    .map_err(|e| format!("cannot return to the ordinary scheduling policy: {e:?}"))
}

#[cfg(not(target_os = "linux"))]
fn set_fifo(_priority: u8) -> Result<(), String> {
    Err("--realtime-priority is available on Linux only".into())
}

#[cfg(not(target_os = "linux"))]
fn set_ordinary() -> Result<(), String> {
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use thread_priority::unix::{thread_schedule_policy, ThreadSchedulePolicy};

    #[test]
    fn out_of_range_priorities_are_refused_with_the_range() {
        for p in [0u8, 100, 255] {
            let e = enable(p).unwrap_err();
            assert!(e.contains("1 to 99"), "{e}");
        }
        assert_eq!(priority(), None);
    }

    /// Where the kernel allows it (root or CAP_SYS_NICE, as in CI containers run as root), a
    /// thread switches to SCHED_FIFO and back; where it does not, the error says what is needed.
    #[test]
    fn fifo_is_applied_or_refused_with_what_it_needs() {
        let outcome = std::thread::spawn(|| {
            let set = set_fifo(3);
            let during = thread_schedule_policy().unwrap();
            let back = set_ordinary();
            let after = thread_schedule_policy().unwrap();
            (set, during, back, after)
        })
        .join()
        .unwrap();
        match outcome {
            (Ok(()), during, back, after) => {
                assert!(matches!(during, ThreadSchedulePolicy::Realtime(_)));
                assert!(back.is_ok());
                assert!(matches!(after, ThreadSchedulePolicy::Normal(_)));
            }
            (Err(e), during, _, _) => {
                assert!(e.contains("CAP_SYS_NICE"), "{e}");
                assert!(matches!(during, ThreadSchedulePolicy::Normal(_)));
            }
        }
    }
}
