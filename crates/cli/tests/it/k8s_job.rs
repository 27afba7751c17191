//! `servebench k8s job`: the manifest passes Kubernetes' own schemas (offline, strict, with
//! the `kubernetes-validate` package), and its pod script, run locally once per index with
//! JOB_COMPLETION_INDEX set exactly as the Job sets it, leaves result blocks in the "logs"
//! that `servebench merge` joins into the whole run.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::{self, bin, ok, read_json, text};

/// The validator: $SERVEBENCH_K8S_VALIDATE, else `kubernetes-validate` on PATH. CI sets
/// SERVEBENCH_REQUIRE_K8S_VALIDATE=1, so a missing validator fails there instead of skipping.
fn validator() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("SERVEBENCH_K8S_VALIDATE") {
        return Some(PathBuf::from(p));
    }
    let found = Command::new("kubernetes-validate")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if found {
        return Some(PathBuf::from("kubernetes-validate"));
    }
    assert!(
        std::env::var("SERVEBENCH_REQUIRE_K8S_VALIDATE").as_deref() != Ok("1"),
        "kubernetes-validate is required (SERVEBENCH_REQUIRE_K8S_VALIDATE=1) but not found"
    );
    None
}

fn render(dir: &Path, name: &str, flags: &[&str], run: &[&str]) -> PathBuf {
    let o = bin()
        .args(["k8s", "job"])
        .args(flags)
        .arg("--")
        .args(run)
        .output()
        .unwrap();
    let path = dir.join(name);
    std::fs::write(&path, ok(&o)).unwrap();
    path
}

#[test]
fn manifests_pass_strict_schema_validation() {
    let dir = common::tempdir("k8s", "validate");
    let run = [
        "--base-url",
        "http://vllm.serving:8000",
        "--num-prompts",
        "400",
    ];
    let files = [
        render(
            &dir,
            "stdout.yaml",
            &["--shards", "4", "--spread", "--api-key-secret", "vllm-key"],
            &run,
        ),
        render(
            &dir,
            "pvc.yaml",
            &[
                "--shards",
                "2",
                "--results",
                "pvc",
                "--pvc",
                "bench",
                "--namespace",
                "perf",
            ],
            &run,
        ),
        render(
            &dir,
            "job.json",
            &["--shards", "3", "--output", "json"],
            &run,
        ),
    ];
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&files[2]).unwrap()).unwrap();
    assert_eq!(json["spec"]["completions"], 3);
    let Some(validate) = validator() else {
        eprintln!("skipping schema validation: kubernetes-validate not installed");
        return;
    };
    for f in &files {
        let o = Command::new(&validate)
            .args(["--strict", "--kubernetes-version", "1.31.0"])
            .arg(f)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}: {}", f.display(), text(&o));
    }
    // The validator is not a rubber stamp: an unknown field fails strict validation.
    let bad = dir.join("bad.json");
    let mut broken = json.clone();
    broken["spec"]["completionsTypo"] = Value::from(3);
    std::fs::write(&bad, serde_json::to_string(&broken).unwrap()).unwrap();
    let o = Command::new(&validate)
        .args(["--strict", "--kubernetes-version", "1.31.0"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn pod_scripts_run_as_pods_would_and_merge() {
    let _x = common::exclusive();
    let mut sim = bin()
        .args(["sim", "llama-3.1-8b", "--gpu", "h100", "--port", "0"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(sim.stderr.take().unwrap()).lines();
    let url = loop {
        let line = lines.next().expect("sim address").unwrap();
        if let Some(rest) = line.split("Serving on ").nth(1) {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});

    let dir = common::tempdir("k8s", "pods");
    let manifest = render(
        &dir,
        "job.json",
        &["--shards", "2", "--start-in", "6", "--output", "json"],
        &[
            "--base-url",
            &url,
            "--num-prompts",
            "16",
            "--request-rate",
            "40",
            "--random-input-len",
            "32",
            "--random-output-len",
            "4",
        ],
    );
    let job: Value = serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["command"][0], "/bin/sh");
    let script = container["args"][0].as_str().unwrap().to_owned();

    // The pods' image has `servebench` on PATH; here the test binary's directory stands in.
    let bin_dir = PathBuf::from(env!("CARGO_BIN_EXE_servebench"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let pods: Vec<_> = (0..2)
        .map(|i| {
            let tmp = dir.join(format!("pod{i}-tmp"));
            std::fs::create_dir_all(&tmp).unwrap();
            Command::new("/bin/sh")
                .args(["-c", &script])
                .env("PATH", &path)
                .env("TMPDIR", &tmp)
                .env("JOB_COMPLETION_INDEX", i.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut shard_dirs = Vec::new();
    for (i, pod) in pods.into_iter().enumerate() {
        let o = pod.wait_with_output().unwrap();
        assert!(o.status.success(), "pod {i}: {}", text(&o));
        // Collect as from `kubectl logs`: the line after the begin mark is the archive.
        let log = String::from_utf8_lossy(&o.stdout).into_owned();
        let block = log
            .lines()
            .skip_while(|l| !l.starts_with("=== servebench results"))
            .nth(1)
            .unwrap_or_else(|| panic!("pod {i} printed no results block: {log}"));
        let out = dir.join(format!("shard-{i}"));
        std::fs::create_dir_all(&out).unwrap();
        let mut untar = Command::new("sh")
            .args(["-c", "base64 -d | tar -xz -C \"$0\""])
            .arg(&out)
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        untar
            .stdin
            .take()
            .unwrap()
            .write_all(block.as_bytes())
            .unwrap();
        assert!(untar.wait().unwrap().success());
        shard_dirs.push(out);
    }
    let merged = dir.join("merged");
    let o = bin()
        .arg("merge")
        .args(&shard_dirs)
        .arg("-o")
        .arg(&merged)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let result = std::fs::read_dir(&merged)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(".servebench.json"))
        .unwrap();
    let v = read_json(&result);
    assert_eq!(v["summary"]["completed"], 16);
    assert_eq!(v["metadata"]["shard"]["count"], 2);
    let _ = sim.kill();
    let _ = sim.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
