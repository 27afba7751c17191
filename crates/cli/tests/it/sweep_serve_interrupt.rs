//! Ctrl-C during `sweep serve`: the running benchmark stops as `servebench run` stops, the
//! server is stopped, and `sweep_serve.json` records the finished combination and the
//! interrupted one; the sweep exits with the interrupt's code. Real time against the
//! simulator, so the bounds are generous.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

use crate::common::{bin, exclusive, read_json, tempdir};

/// A non-empty `*.requests.jsonl` in a combination directory whose name starts with `prefix`:
/// that combination's run has recorded requests.
fn recording(experiment: &Path, prefix: &str) -> Option<PathBuf> {
    std::fs::read_dir(experiment)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .find_map(|d| {
            std::fs::read_dir(&d)
                .ok()?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .find(|p| {
                    p.to_string_lossy().ends_with(".requests.jsonl")
                        && p.metadata().is_ok_and(|m| m.len() > 0)
                })
        })
}

#[test]
fn ctrl_c_during_sweep_serve_records_what_was_done_and_stops_the_server() {
    let _x = exclusive();
    let dir = tempdir("sweep-serve", "interrupt");
    std::fs::write(
        dir.join("serve.json"),
        r#"[{"max_num_seqs": 64}, {"max_num_seqs": 8}]"#,
    )
    .unwrap();
    // 8 requests a second for 5 s: long enough to be interrupted in the middle.
    std::fs::write(
        dir.join("bench.json"),
        r#"[{"num_prompts": 40, "request_rate": 8, "random_input_len": 64, "random_output_len": 8}]"#,
    )
    .unwrap();
    let mut child = bin()
        .current_dir(&dir)
        .args([
            "sweep",
            "serve",
            "--serve-cmd",
            "servebench sim llama-3.1-8b --gpu h100",
            "--bench-cmd",
            "vllm bench serve --model llama-3.1-8b",
            "--serve-params",
            "serve.json",
            "--bench-params",
            "bench.json",
            "--num-runs",
            "1",
            "--server-ready-timeout",
            "120",
            "--server-stop-timeout",
            "5",
            "-e",
            "int",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let exp = dir.join("results/int");
    // Wait until the second combination's run has recorded requests.
    let start = Instant::now();
    while recording(&exp, "SERVE--max_num_seqs=8").is_none() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the sweep ended before it could be interrupted: {status}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the second combination never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the sweep did not stop after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(130), "the interrupt's exit code");

    let record = read_json(&exp.join("sweep_serve.json"));
    let combs = record["combinations"].as_array().unwrap();
    assert_eq!(combs.len(), 2, "{record}");
    assert_eq!(combs[0]["status"], "ok", "{record}");
    assert_eq!(combs[1]["status"], "interrupted", "{record}");
    assert!(
        combs[1]["error"]
            .as_str()
            .unwrap()
            .contains("interrupted by SIGINT"),
        "{record}"
    );
    // The finished combination keeps vLLM's summary; the interrupted one has none, so
    // --resume measures it again, and keeps what its run measured under a partial name.
    let done = PathBuf::from(combs[0]["dir"].as_str().unwrap());
    let done = if done.is_absolute() {
        done
    } else {
        dir.join(done)
    };
    assert!(done.join("summary.json").is_file());
    let cut = PathBuf::from(combs[1]["dir"].as_str().unwrap());
    let cut = if cut.is_absolute() {
        cut
    } else {
        dir.join(cut)
    };
    assert!(!cut.join("summary.json").exists());
    assert!(!cut.join("run=0.json").exists());
    assert!(
        cut.join("run=0.partial.json").is_file(),
        "{}",
        cut.display()
    );
    let decision = std::fs::read_to_string(exp.join("decision.md")).unwrap();
    assert!(decision.contains("| interrupted: "), "{decision}");
    // Every server's process group is gone.
    for s in record["servers"].as_array().unwrap() {
        let pid = Pid::from_raw(s["pid"].as_i64().unwrap() as i32);
        assert!(
            killpg(pid, None).is_err(),
            "server group {pid} still exists: {record}"
        );
    }
    assert_eq!(record["servers"].as_array().unwrap().len(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}
