//! `run --realtime-priority N`: SCHED_FIFO for the threads that release and time requests.
//! Refused out of range and with virtual time; against the simulator it either runs (where the
//! kernel allows it: root or CAP_SYS_NICE) or says exactly what it needs.

#![allow(clippy::unwrap_used)]

use crate::common::{bin, read_json, tempdir, text};
use crate::shard_merge::start_sim;

#[test]
fn priorities_outside_1_to_99_and_virtual_time_are_refused() {
    for p in ["0", "100"] {
        let o = bin()
            .args([
                "run",
                "--base-url",
                "http://127.0.0.1:9",
                "--num-prompts",
                "2",
            ])
            .args(["--realtime-priority", p])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains("1 to 99"), "{}", text(&o));
    }
    let o = bin()
        .args(["run", "--virtual-time", "--num-prompts", "2"])
        .args(["--realtime-priority", "5"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("virtual-time"), "{}", text(&o));
}

#[test]
fn a_real_time_run_completes_or_names_the_missing_permission() {
    let _guard = crate::common::exclusive();
    let sim = start_sim();
    let dir = tempdir("realtime", "run");
    let o = bin()
        .args(["run", "--base-url", &sim.url, "--num-prompts", "12"])
        .args(["--request-rate", "60", "--random-input-len", "32"])
        .args(["--random-output-len", "4", "--disable-tqdm"])
        .args(["--realtime-priority", "1", "--output-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    if o.status.success() {
        let file = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().ends_with(".servebench.json"))
            .expect("result file");
        let v = read_json(&file);
        assert_eq!(v["summary"]["completed"], 12, "{v}");
    } else {
        assert!(text(&o).contains("CAP_SYS_NICE"), "{}", text(&o));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
