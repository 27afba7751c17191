//! GPU telemetry on the run's clock, with stand-ins for the real sources: an `nvidia-smi`
//! script on PATH printing the recorded CSV format, and a DCGM exporter served from this test
//! on 127.0.0.1:0. Runs go against the in-process simulator in real time (a second or two
//! each); the bounds on timestamps are the run's own duration plus a generous margin.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::Value;

use crate::common::{self, bin, read_json, text};

fn tempdir(name: &str) -> PathBuf {
    common::tempdir("gpu-telemetry", name)
}

/// A run of about two seconds (20 requests at 10 req/s) with `path` as PATH.
fn run_with_path(dir: &Path, path: &str, extra: &[&str]) -> Output {
    bin()
        .current_dir(dir)
        .env("PATH", path)
        .args([
            "run",
            "--disable-tqdm",
            "--num-prompts",
            "20",
            "--request-rate",
            "10",
            "--random-input-len",
            "64",
            "--random-output-len",
            "8",
        ])
        .args(extra)
        .output()
        .expect("spawn servebench")
}

fn native(dir: &Path, out: &Output) -> Value {
    assert!(out.status.success(), "{}", text(out));
    let path = std::fs::read_dir(dir.join("results/runs"))
        .expect("output dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".servebench.json"))
        .expect("a servebench result");
    read_json(&path)
}

/// Writes an executable `nvidia-smi` into `bin_dir` with `body` as its shell script.
pub(crate) fn stand_in(bin_dir: &Path, body: &str) {
    std::fs::create_dir_all(bin_dir).expect("bin dir");
    let p = bin_dir.join("nvidia-smi");
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).expect("write stand-in");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
}

pub(crate) fn path_with(bin_dir: &Path) -> String {
    format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// The `t` of every sample of every GPU, checked to be non-decreasing per GPU and inside the
/// run (its duration plus 2 s for the last reading taken while the run ends).
fn check_series(gpu: &Value, duration_s: f64, want_gpus: &[&str], min_samples: usize) {
    let gpus = gpu["gpus"].as_array().expect("gpus");
    let names: Vec<&str> = gpus.iter().filter_map(|g| g["gpu"].as_str()).collect();
    assert_eq!(names, want_gpus, "{gpu}");
    for g in gpus {
        let samples = g["samples"].as_array().expect("samples");
        assert!(samples.len() >= min_samples, "too few samples: {g}");
        let ts: Vec<f64> = samples.iter().filter_map(|s| s["t"].as_f64()).collect();
        assert_eq!(ts.len(), samples.len());
        assert!(
            ts.windows(2).all(|w| w[0] <= w[1]),
            "not in time order: {ts:?}"
        );
        let last = ts.last().copied().unwrap_or(0.0) / 1e9;
        assert!(
            last <= duration_s + 2.0,
            "a sample at {last} s after a {duration_s} s run"
        );
        for s in samples {
            assert!(s["util_percent"].as_f64().is_some(), "{s}");
            assert!(s["memory_used_mib"].as_f64().is_some(), "{s}");
        }
    }
}

#[test]
fn nvidia_smi_on_path_gives_per_gpu_series_on_the_run_clock() {
    let dir = tempdir("smi");
    let bin_dir = dir.join("bin");
    // Prints two GPUs' lines in nvidia-smi's `csv,noheader,nounits` format five times a
    // second (faster than `-lms 1000` asks, so the test is short), records its arguments and
    // its pid so the test can check what it was asked and that it was stopped.
    stand_in(
        &bin_dir,
        &format!(
            "echo \"$@\" > '{args}'\necho $$ > '{pid}'\ni=0\nwhile true; do\n  echo \"0, $((50 + i % 40)), 40123, 312.45, 1980\"\n  echo \"1, 12, 512, [N/A], 1410\"\n  i=$((i + 1))\n  sleep 0.2\ndone",
            args = dir.join("args").display(),
            pid = dir.join("pid").display()
        ),
    );
    let out = run_with_path(&dir, &path_with(&bin_dir), &[]);
    let v = native(&dir, &out);
    let gpu = &v["gpu_telemetry"];
    assert_eq!(gpu["source"], "nvidia-smi", "{gpu}");
    let duration = v["summary"]["duration_s"].as_f64().expect("duration");
    check_series(gpu, duration, &["0", "1"], 2);
    assert_eq!(gpu["gpus"][1]["samples"][0].get("power_w"), None, "{gpu}");
    assert!(gpu.get("bad_readings").is_none(), "{gpu}");
    let args = std::fs::read_to_string(dir.join("args")).expect("stand-in args");
    assert!(
        args.contains("--query-gpu=index,utilization.gpu,memory.used,power.draw,clocks.sm")
            && args.contains("--format=csv,noheader,nounits")
            && args.contains("-lms 1000"),
        "{args}"
    );
    // The run stopped it: its pid no longer answers a signal 0.
    let pid = std::fs::read_to_string(dir.join("pid")).expect("stand-in pid");
    let alive = std::process::Command::new("kill")
        .args(["-0", pid.trim()])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        !alive,
        "nvidia-smi stand-in {pid} still running after the run"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_broken_nvidia_smi_does_not_break_the_run() {
    let dir = tempdir("broken");
    let bin_dir = dir.join("bin");
    stand_in(
        &bin_dir,
        "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver'\n\
         echo '0, 87, 40123, 312.45, 1980'\necho '0, eighty, ,'\nprintf '\\377\\376 binary\\n'\nexit 9",
    );
    let out = run_with_path(&dir, &path_with(&bin_dir), &[]);
    let v = native(&dir, &out);
    let gpu = &v["gpu_telemetry"];
    assert_eq!(gpu["source"], "nvidia-smi", "{gpu}");
    assert_eq!(gpu["bad_readings"], 3, "{gpu}");
    let ended = gpu["ended_early"].as_str().unwrap_or_default();
    assert!(ended.contains("exited"), "{gpu}");
    assert!(
        v["summary"]["completed"].as_u64() == Some(20),
        "{}",
        v["summary"]
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_stand_in_whose_child_holds_the_pipe_does_not_hold_up_the_run() {
    let dir = tempdir("held");
    let bin_dir = dir.join("bin");
    // A background `sleep` inherits stdout and keeps the pipe open after nvidia-smi is
    // stopped: the run takes what was read and ends anyway.
    stand_in(
        &bin_dir,
        "sleep 30 &\nwhile true; do\n  echo '0, 55, 1000, 100.0, 1500'\n  sleep 0.2\ndone",
    );
    let started = std::time::Instant::now();
    let out = run_with_path(&dir, &path_with(&bin_dir), &[]);
    let v = native(&dir, &out);
    let took = started.elapsed().as_secs_f64();
    assert!(took < 20.0, "the run took {took} s");
    let duration = v["summary"]["duration_s"].as_f64().expect("duration");
    check_series(&v["gpu_telemetry"], duration, &["0"], 2);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn without_a_source_the_result_says_so() {
    let dir = tempdir("none");
    let empty = dir.join("empty-bin");
    std::fs::create_dir_all(&empty).expect("empty bin dir");
    let out = run_with_path(&dir, &empty.display().to_string(), &[]);
    let v = native(&dir, &out);
    assert_eq!(
        v["gpu_telemetry"]["note"], "no GPU telemetry (nvidia-smi not found)",
        "{}",
        v["gpu_telemetry"]
    );
    std::fs::remove_dir_all(dir).ok();
}

/// A DCGM exporter stand-in: answers every request with two GPUs' fields, utilization rising
/// by one per scrape; serves until `stop`.
fn dcgm_exporter() -> (String, Arc<AtomicBool>, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/metrics", listener.local_addr().expect("addr"));
    listener.set_nonblocking(true).expect("nonblocking");
    let stop = Arc::new(AtomicBool::new(false));
    let scrapes = Arc::new(AtomicU64::new(0));
    let (stop2, scrapes2) = (Arc::clone(&stop), Arc::clone(&scrapes));
    std::thread::spawn(move || {
        while !stop2.load(Ordering::Acquire) {
            let Ok((mut conn, _)) = listener.accept() else {
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            };
            let _ = conn.set_nonblocking(false);
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let n = scrapes2.fetch_add(1, Ordering::AcqRel);
            let body = format!(
                "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n\
                 # TYPE DCGM_FI_DEV_GPU_UTIL gauge\n\
                 DCGM_FI_DEV_GPU_UTIL{{gpu=\"0\",UUID=\"GPU-a\",modelName=\"NVIDIA H100\"}} {}\n\
                 DCGM_FI_DEV_GPU_UTIL{{gpu=\"1\",UUID=\"GPU-b\",modelName=\"NVIDIA H100\"}} 5\n\
                 DCGM_FI_DEV_FB_USED{{gpu=\"0\",UUID=\"GPU-a\"}} 70000\n\
                 DCGM_FI_DEV_FB_USED{{gpu=\"1\",UUID=\"GPU-b\"}} 1200\n\
                 DCGM_FI_DEV_POWER_USAGE{{gpu=\"0\",UUID=\"GPU-a\"}} 480.5\n\
                 DCGM_FI_DEV_SM_CLOCK{{gpu=\"0\",UUID=\"GPU-a\"}} 1980\n",
                50 + n
            );
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, stop, scrapes)
}

#[test]
fn a_dcgm_exporter_is_read_the_same_way() {
    let dir = tempdir("dcgm");
    let (url, stop, scrapes) = dcgm_exporter();
    let out = run_with_path(
        &dir,
        &std::env::var("PATH").unwrap_or_default(),
        &["--gpu-metrics-url", &url],
    );
    stop.store(true, Ordering::Release);
    let v = native(&dir, &out);
    let gpu = &v["gpu_telemetry"];
    assert!(
        gpu["source"]
            .as_str()
            .unwrap_or_default()
            .starts_with("dcgm"),
        "{gpu}"
    );
    let duration = v["summary"]["duration_s"].as_f64().expect("duration");
    check_series(gpu, duration, &["0", "1"], 2);
    assert_eq!(gpu["gpus"][0]["samples"][0]["power_w"], 480.5, "{gpu}");
    assert!(scrapes.load(Ordering::Acquire) >= 2);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_bad_gpu_metrics_url_is_refused_before_the_run() {
    let out = common::servebench(&[
        "run",
        "--virtual-time",
        "--num-prompts",
        "2",
        "--gpu-metrics-url",
        "ftp://node:9400/metrics",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--gpu-metrics-url"),
        "{}",
        text(&out)
    );
}
