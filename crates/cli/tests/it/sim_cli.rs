//! `servebench sim` as a process: it serves on the port it reports, `servebench run` measures
//! it over real HTTP, SIGTERM stops it cleanly; Ctrl-C on `run` keeps what was measured.

use crate::common::bin;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

/// Wait for exit with a generous bound (a loaded 2-core machine); kill on timeout.
fn wait_with_timeout(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().expect("wait") {
            return s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("process did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sim_serves_run_measures_it_and_sigterm_stops_it() {
    let mut sim = bin()
        .args([
            "sim",
            "llama-3.1-8b",
            "--gpu",
            "h100",
            "--port",
            "0",
            "--max-num-seqs",
            "32",
        ])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn sim");
    let stderr = sim.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let mut banner = String::new();
    let url = loop {
        let line = lines
            .next()
            .expect("sim printed its address")
            .expect("utf-8");
        banner.push_str(&line);
        banner.push('\n');
        if let Some(rest) = line.split("Serving on ").nth(1) {
            break rest.split_whitespace().next().expect("url").to_owned();
        }
    };
    // The start-up banner states the effective configuration.
    assert!(
        banner.contains("KV cache") || banner.contains("kv"),
        "{banner}"
    );
    let dir = std::env::temp_dir().join(format!("servebench-sim-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let out = bin()
        .current_dir(&dir)
        .args([
            "run",
            "--base-url",
            &url,
            "--num-prompts",
            "20",
            "--random-input-len",
            "128",
            "--random-output-len",
            "32",
            "--max-concurrency",
            "4",
            "--disable-tqdm",
            "--save-result",
            "--result-filename",
            "r.json",
        ])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("r.json")).expect("r.json"))
            .expect("json");
    assert_eq!(v["completed"], 20);
    assert_eq!(v["model_id"], "llama-3.1-8b");
    // Single-stream-ish decode on an H100 model: TPOT of a few ms, never below the 4.48 ms floor.
    let tpot = v["mean_tpot_ms"].as_f64().expect("tpot");
    assert!(tpot > 4.48 && tpot < 40.0, "tpot {tpot}");
    signal(&sim, "-TERM");
    let status = wait_with_timeout(&mut sim, Duration::from_secs(20));
    assert!(status.success(), "sim exit {status:?}");
}

#[test]
fn ctrl_c_stops_dispatch_and_still_writes_every_output() {
    let dir = std::env::temp_dir().join(format!("servebench-ctrlc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let mut run = bin()
        .current_dir(&dir)
        .args([
            "run",
            "--num-prompts",
            "50",
            "--duration",
            "600",
            "--request-rate",
            "20",
            "--random-input-len",
            "64",
            "--random-output-len",
            "64",
            "--disable-tqdm",
            "--save-result",
            "--result-filename",
            "r.json",
        ])
        .stdout(std::fs::File::create(dir.join("stdout.txt")).expect("stdout file"))
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn run");
    // Let it measure for a while: wait for the records file to grow.
    let start = Instant::now();
    let jsonl = loop {
        let found = std::fs::read_dir(dir.join("results/runs"))
            .ok()
            .and_then(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.path())
                    .find(|p| p.to_string_lossy().ends_with(".requests.jsonl"))
            });
        if let Some(p) = found {
            if std::fs::read_to_string(&p)
                .map(|s| s.lines().count() >= 10)
                .unwrap_or(false)
            {
                break p;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "run never started measuring"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    signal(&run, "-INT");
    let status = wait_with_timeout(&mut run, Duration::from_secs(60));
    // An interrupted run says so: exit code 130, the terminal summary and the result file.
    assert_eq!(status.code(), Some(130), "interrupted run exit {status:?}");
    let stdout = std::fs::read_to_string(dir.join("stdout.txt")).expect("stdout");
    assert!(
        stdout.contains("INTERRUPTED: interrupted by SIGINT"),
        "{stdout}"
    );
    let native = std::fs::read_dir(dir.join("results/runs"))
        .expect("runs")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".servebench.json"))
        .expect("native result");
    let native: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(native).expect("read")).expect("json");
    assert_eq!(native["interrupted"], true);
    assert_eq!(
        native["interrupted_reason"],
        "interrupted by SIGINT (Ctrl-C)"
    );
    let records = std::fs::read_to_string(&jsonl).expect("records");
    let n = records.lines().count();
    assert!((10..12_000).contains(&n), "records {n}");
    let v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("r.json")).expect("vLLM result still written"),
    )
    .expect("json");
    assert_eq!(
        v["completed"].as_u64().unwrap_or(0) + v["failed"].as_u64().unwrap_or(0),
        n as u64
    );
}

#[test]
fn an_interrupted_sweep_exits_like_an_interrupted_run() {
    let dir = std::env::temp_dir().join(format!("servebench-ctrlc-sweep-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let mut sweep = bin()
        .current_dir(&dir)
        .args([
            "sweep",
            "--row",
            "A",
            "--request-rate",
            "2,4",
            "--num-prompts",
            "400",
            "--results-dir",
            "results",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn sweep");
    // Interrupt once the first point has measured a few requests.
    let start = Instant::now();
    loop {
        let measuring = find_records(&dir.join("results"))
            .and_then(|p| std::fs::read_to_string(p).ok())
            .is_some_and(|s| s.lines().count() >= 3);
        if measuring {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(240),
            "sweep never started measuring"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    signal(&sweep, "-INT");
    let status = wait_with_timeout(&mut sweep, Duration::from_secs(60));
    assert_eq!(
        status.code(),
        Some(130),
        "interrupted sweep exit {status:?}"
    );
}

/// The first `*.requests.jsonl` anywhere below `dir`.
fn find_records(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.filter_map(|e| e.ok()) {
        let p = entry.path();
        if p.is_dir() {
            if let Some(found) = find_records(&p) {
                return Some(found);
            }
        } else if p.to_string_lossy().ends_with(".requests.jsonl") {
            return Some(p);
        }
    }
    None
}
