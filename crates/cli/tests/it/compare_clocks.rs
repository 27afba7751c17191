//! `servebench compare` of a virtual-time run and a real-time run says, in its text and its
//! JSON, that the two were timed on different clocks; runs on one clock get no such warning.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use serde_json::Value;

use crate::common::{bin, ok, tempdir, text};

/// 8 short requests against the in-process simulator, in virtual or real time.
fn small_run(dir: &Path, virtual_time: bool) {
    let mut cmd = bin();
    cmd.args(["run", "--num-prompts", "8", "--request-rate", "inf"])
        .args(["--random-input-len", "64", "--random-output-len", "8"])
        .arg("--output-dir")
        .arg(dir);
    if virtual_time {
        cmd.arg("--virtual-time");
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
}

fn compare(a: &Path, b: &Path, json: bool) -> std::process::Output {
    let mut cmd = bin();
    cmd.arg("compare").arg(a).arg(b);
    if json {
        cmd.arg("--json");
    }
    cmd.output().unwrap()
}

#[test]
fn compare_of_a_real_time_and_a_virtual_time_run_warns_about_the_clocks() {
    let root = tempdir("compare", "clocks");
    let (virt, real, virt2) = (
        root.join("virtual"),
        root.join("real"),
        root.join("virtual2"),
    );
    small_run(&virt, true);
    small_run(&real, false);
    small_run(&virt2, true);

    let out = compare(&virt, &real, false);
    let stdout = ok(&out);
    assert!(
        stdout.contains("WARNING: A ran in virtual time and B in real time"),
        "{}",
        text(&out)
    );
    // Piped (as here), the warning reaches stderr too, as the guide says.
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("WARNING: A ran in virtual time and B in real time"),
        "{}",
        text(&out)
    );

    let out = compare(&real, &virt, true);
    let doc: Value = serde_json::from_str(&ok(&out)).unwrap();
    let warnings = doc["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{doc}");
    assert!(
        warnings[0]
            .as_str()
            .unwrap()
            .starts_with("A ran in real time and B in virtual time"),
        "{doc}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("WARNING: A ran in real time"),
        "{}",
        text(&out)
    );

    let out = compare(&virt, &virt2, true);
    let doc: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(doc["warnings"], serde_json::json!([]), "{doc}");
    let out = compare(&virt, &virt2, false);
    assert!(!ok(&out).contains("WARNING"), "{}", text(&out));
    let _ = std::fs::remove_dir_all(&root);
}
