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

/// `sim` announces "Serving on" only once its configuration is accepted: a TLS certificate
/// that cannot be read is an error with no "Serving on" line before it.
#[test]
fn sim_says_serving_only_after_its_configuration_is_accepted() {
    let o = crate::common::bin()
        .args([
            "sim",
            "--port",
            "0",
            "--tls-cert",
            "/nonexistent/cert.pem",
            "--tls-key",
            "/nonexistent/key.pem",
        ])
        .output()
        .expect("spawn servebench");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("Serving on"), "{err}");
    assert!(err.contains("cert.pem"), "{err}");
}

/// Files users hand to servebench: a dataset saved with a UTF-8 byte-order mark (Windows
/// editors) is read as the same dataset (before: "expected value at line 1 column 1"), and a
/// JSON file of another shape given to `report` is named as such, not as "not JSON".
#[test]
fn a_byte_order_mark_is_read_and_json_of_another_shape_is_named() {
    let dir = crate::common::tempdir("hostile", "files");
    let data = dir.join("bom.jsonl");
    std::fs::write(
        &data,
        "\u{feff}{\"prompt\": \"Say hello.\", \"output_tokens\": 4}\n{\"prompt\": \"Say bye.\", \"output_tokens\": 4}\n",
    )
    .expect("write");
    let o = crate::common::bin()
        .current_dir(&dir)
        .args([
            "run",
            "--virtual-time",
            "--dataset-name",
            "custom",
            "--dataset-path",
            data.to_str().expect("utf-8"),
            "--num-prompts",
            "2",
        ])
        .output()
        .expect("spawn servebench");
    assert!(o.status.success(), "{}", text(&o));
    let shaped = dir.join("list.servebench.json");
    std::fs::write(&shaped, "[1, 2, 3]").expect("write");
    let o = crate::common::bin()
        .args(["report", shaped.to_str().expect("utf-8"), "--no-write"])
        .output()
        .expect("spawn servebench");
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("holds JSON, but an array"), "{err}");
    assert!(!err.contains("is not JSON"), "{err}");
}
