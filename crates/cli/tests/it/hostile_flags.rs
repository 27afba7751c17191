//! Numeric flags a careless or hostile user gives: NaN, infinities, negatives and absurd
//! sizes end in exit 2 naming the flag and the allowed range, never a panic (exit 101) or an
//! allocation the kernel has to kill (exit 134/137).

use std::time::{Duration, Instant};

use crate::common::{bin, text};

/// Runs `args` and asserts a quick exit 2 whose message names `flag` and an allowed range.
fn refused(args: &[&str], flag: &str) {
    let started = Instant::now();
    let o = bin().args(args).output().expect("spawn servebench");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
    assert!(err.contains(flag), "{args:?} names {flag}: {err}");
    assert!(
        err.contains("allowed"),
        "{args:?} gives the allowed range: {err}"
    );
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    // Refused before any workload is built: a generous bound for a loaded 2-core machine.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{args:?} took {:?}",
        started.elapsed()
    );
}

#[test]
fn float_durations_out_of_range_are_refused_not_panicked_on() {
    for v in ["nan", "inf", "1e30", "-3", "0"] {
        // `=` so that clap takes "-3" as the value, not as a flag.
        let flag = format!("--request-timeout={v}");
        refused(
            &["run", "--virtual-time", "--num-prompts", "2", &flag],
            "--request-timeout",
        );
    }
    refused(
        &[
            "run",
            "--virtual-time",
            "--num-prompts",
            "2",
            "--start-at",
            "1e30",
        ],
        "--start-at",
    );
    for v in ["1e30", "nan", "-1"] {
        refused(
            &["sim", &format!("--fault-stall-ms={v}")],
            "--fault-stall-ms",
        );
    }
    refused(
        &[
            "run",
            "--virtual-time",
            "--request-rate",
            "2",
            "--duration",
            "1e30",
        ],
        "--duration",
    );
}

#[test]
fn absurd_sizes_are_refused_before_anything_is_allocated() {
    refused(
        &["run", "--virtual-time", "--num-prompts", "1000000000000"],
        "--num-prompts",
    );
    refused(
        &[
            "run",
            "--virtual-time",
            "--request-rate",
            "1e-300",
            "--num-prompts",
            "3",
        ],
        "--request-rate",
    );
    refused(
        &[
            "run",
            "--virtual-time",
            "--request-rate",
            "1000000",
            "--duration",
            "86400",
        ],
        "--duration",
    );
}

/// JSON has no NaN: a sampling flag that is not finite was silently dropped from every
/// request; now it is refused, naming the flag.
#[test]
fn sampling_flags_that_are_not_finite_are_refused() {
    for (flag, v) in [
        ("--temperature", "nan"),
        ("--temperature", "inf"),
        ("--top-p", "nan"),
    ] {
        refused(
            &[
                "run",
                "--virtual-time",
                "--num-prompts",
                "2",
                &format!("{flag}={v}"),
            ],
            flag,
        );
    }
}
