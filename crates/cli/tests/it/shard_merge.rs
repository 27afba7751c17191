//! One schedule split across processes (`run --shard I/N`, `--shards N` with the index from
//! JOB_COMPLETION_INDEX as Kubernetes sets it) against one simulator, joined by
//! `servebench merge`: the merged run is the unsharded schedule, and its summary is the one the
//! union of the shards' records gives.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use servebench_metrics::summary::{summarize, SummaryOptions};
use servebench_metrics::RequestRecord;

use crate::common::{self, bin, read_json, text};

pub(crate) struct Sim {
    child: Child,
    pub(crate) url: String,
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn start_sim() -> Sim {
    let mut child = bin()
        .args(["sim", "llama-3.1-8b", "--gpu", "h100", "--port", "0"])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn sim");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        let line = lines
            .next()
            .expect("sim printed its address")
            .expect("utf-8");
        if let Some(rest) = line.split("Serving on ").nth(1) {
            break rest.split_whitespace().next().expect("url").to_owned();
        }
    };
    // Keep draining the simulator's stderr so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Sim { child, url }
}

/// The workload every run of these tests sends: the same seed, so the same schedule.
fn workload(url: &str, seed: &str) -> Vec<String> {
    [
        "run",
        "--base-url",
        url,
        "--num-prompts",
        "24",
        "--request-rate",
        "40",
        "--random-input-len",
        "64",
        "--random-output-len",
        "8",
        "--seed",
        seed,
        "--disable-tqdm",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// A wall-clock instant a few seconds ahead, as Unix seconds: far enough for every shard
/// process of a loaded 2-core machine to start before it.
fn soon() -> String {
    let at = SystemTime::now() + Duration::from_secs(6);
    format!(
        "{:.3}",
        at.duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
    )
}

/// Run the shards of one plan as separate processes, all started at one instant.
fn run_shards(url: &str, dir: &Path, n: u32, by_env: bool) {
    let start = soon();
    let children: Vec<Child> = (0..n)
        .map(|i| {
            let mut cmd = bin();
            cmd.args(workload(url, "3"))
                .args(["--start-at", &start, "--output-dir"])
                .arg(dir)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            if by_env {
                cmd.args(["--shards", &n.to_string()])
                    .env("JOB_COMPLETION_INDEX", i.to_string());
            } else {
                cmd.args(["--shard", &format!("{i}/{n}")]);
            }
            cmd.spawn().expect("spawn shard")
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().expect("shard");
        assert!(o.status.success(), "{}", text(&o));
    }
}

fn files_with(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    v
}

/// A directory's shard results, in shard index order.
fn shard_results(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<(u64, PathBuf)> = files_with(dir, ".servebench.json")
        .into_iter()
        .map(|p| {
            let i = read_json(&p)["metadata"]["shard"]["index"]
                .as_u64()
                .unwrap();
            (i, p)
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, p)| p).collect()
}

fn records_of(dir: &Path) -> Vec<RequestRecord> {
    let mut all = Vec::new();
    for f in files_with(dir, ".requests.jsonl") {
        all.extend(servebench_metrics::read_jsonl(&f).unwrap());
    }
    all.sort_by_key(|r| r.id);
    all
}

fn merge(args: &[&Path], out: &Path) -> std::process::Output {
    bin()
        .arg("merge")
        .args(args)
        .arg("-o")
        .arg(out)
        .output()
        .expect("spawn merge")
}

/// Intended time of every id.
fn intended(records: &[RequestRecord]) -> BTreeMap<u64, u64> {
    records.iter().map(|r| (r.id, r.intended)).collect()
}

#[test]
fn shards_reproduce_the_unsharded_schedule_and_merge_exactly() {
    let _x = common::exclusive();
    let sim = start_sim();
    let root = common::tempdir("shard", "merge");
    let whole = root.join("whole");
    let o = bin()
        .args(workload(&sim.url, "3"))
        .arg("--output-dir")
        .arg(&whole)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let whole_records = records_of(&whole);
    assert_eq!(whole_records.len(), 24);
    // An ordinary run places its time zero on the wall clock too.
    let native = read_json(&files_with(&whole, ".servebench.json")[0]);
    let anchor = native["metadata"]["clock_anchor"]["unix_ns"]
        .as_u64()
        .unwrap();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    assert!(anchor < now && now - anchor < 600_000_000_000, "{anchor}");

    for (n, by_env) in [(2u32, true), (4, false)] {
        let shards = root.join(format!("shards{n}"));
        run_shards(&sim.url, &shards, n, by_env);
        let results = files_with(&shards, ".servebench.json");
        assert_eq!(results.len(), n as usize);
        let mut hashes = Vec::new();
        for r in &results {
            let v = read_json(r);
            let s = &v["metadata"]["shard"];
            assert_eq!(s["count"], n);
            assert_eq!(s["schedule_requests"], 24);
            hashes.push(s["plan_hash"].as_str().unwrap().to_owned());
            // --start-at fixes every shard's time zero at the same wall instant.
            assert!(v["metadata"]["clock_anchor"]["start_at"].is_string());
        }
        hashes.dedup();
        assert_eq!(hashes.len(), 1, "one plan across shards");
        // Each shard's files carry its tag (names also carry each process's own start second,
        // so name order is not index order).
        for (i, r) in shard_results(&shards).iter().enumerate() {
            let name = r.file_name().unwrap().to_string_lossy().into_owned();
            assert!(name.contains(&format!("shard{i}of{n}")), "{name}");
        }

        let merged_dir = shards.join("merged");
        let o = merge(&[&shards], &merged_dir);
        assert!(o.status.success(), "{}", text(&o));
        let merged = records_of(&merged_dir);
        // Every id once, at the unsharded run's intended time.
        assert_eq!(intended(&merged), intended(&whole_records), "{n} shards");
        let union = records_of(&shards);
        assert_eq!(union.len(), 24);

        let result = read_json(&files_with(&merged_dir, ".servebench.json")[0]);
        let duration = union
            .iter()
            .map(|r| r.end.max(r.done).unwrap_or(r.sent))
            .max()
            .unwrap();
        let expect = summarize(
            &union,
            &SummaryOptions {
                duration_ns: Some(duration),
                percentiles: vec![50.0, 90.0, 95.0, 99.0],
                ..SummaryOptions::default()
            },
        );
        assert_eq!(result["summary"], serde_json::to_value(&expect).unwrap());
        assert_eq!(result["summary"]["completed"], 24);
        let info = &result["metadata"]["shard"];
        assert_eq!(info["count"], n);
        assert!(info.get("index").is_none());
        // The shards shared one --start-at, so their anchors coincide.
        assert_eq!(info["anchor_spread_ms"].as_f64(), Some(0.0));
        // The vLLM file of the merged run counts every request.
        let vllm: Vec<PathBuf> = files_with(&merged_dir, ".json")
            .into_iter()
            .filter(|p| !p.to_string_lossy().ends_with(".servebench.json"))
            .collect();
        assert_eq!(vllm.len(), 1, "{vllm:?}");
        let v = read_json(&vllm[0]);
        assert_eq!(v["completed"], 24);
        assert_eq!(v["num_prompts"], 24);
    }

    // merge names what is wrong: a missing shard, a duplicated one, shards of two plans.
    let four = shard_results(&root.join("shards4"));
    let o = merge(&[&four[0], &four[1], &four[3]], &root.join("m1"));
    assert!(!o.status.success());
    assert!(text(&o).contains("missing shard 2/4"), "{}", text(&o));

    let copy = root.join("copy");
    std::fs::create_dir_all(&copy).unwrap();
    for f in std::fs::read_dir(root.join("shards4")).unwrap() {
        let p = f.unwrap().path();
        if p.is_file() && p.to_string_lossy().contains("shard1of4") {
            std::fs::copy(&p, copy.join(p.file_name().unwrap())).unwrap();
        }
    }
    let dup = files_with(&copy, ".servebench.json");
    let o = merge(
        &[&four[0], &four[1], &four[2], &four[3], &dup[0]],
        &root.join("m2"),
    );
    assert!(!o.status.success());
    assert!(text(&o).contains("shard 1/4 appears twice"), "{}", text(&o));

    let two = shard_results(&root.join("shards2"));
    let other = root.join("other");
    let o = bin()
        .args(workload(&sim.url, "9"))
        .args(["--shard", "1/2", "--output-dir"])
        .arg(&other)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let other_file = files_with(&other, ".servebench.json");
    let o = merge(&[&two[0], &other_file[0]], &root.join("m3"));
    assert!(!o.status.success());
    let msg = text(&o);
    assert!(
        msg.contains("different runs") && msg.contains("shard1of2"),
        "{msg}"
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn shard_flags_are_checked() {
    let cases: [(&[&str], &str); 5] = [
        (&["--shard", "2/2"], "expected I/N"),
        (&["--shards", "3"], "JOB_COMPLETION_INDEX"),
        (&["--start-at", "1000"], "in the past"),
        (&["--start-at", "noon"], "RFC 3339"),
        (
            &["--shard", "0/4", "--max-concurrency", "2"],
            "each shard needs at least one slot",
        ),
    ];
    for (flags, want) in cases {
        let o = bin()
            .args([
                "run",
                "--base-url",
                "http://127.0.0.1:9",
                "--num-prompts",
                "4",
            ])
            .args(flags)
            .env_remove("JOB_COMPLETION_INDEX")
            .output()
            .unwrap();
        assert!(!o.status.success(), "{flags:?}");
        assert!(text(&o).contains(want), "{flags:?}: {}", text(&o));
    }
    let o = bin()
        .args([
            "run",
            "--virtual-time",
            "--shard",
            "0/2",
            "--num-prompts",
            "4",
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("virtual-time"), "{}", text(&o));
}

/// Copies every file of `from` into a fresh `to`.
fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
    }
}

/// A shard whose records file was cut, or that was interrupted, never merges silently: the
/// cut is an error naming the shard and both counts (or, with --allow-incomplete, a warning
/// in the merged result), and an interrupted shard makes the merged result interrupted.
#[test]
fn a_cut_or_interrupted_shard_is_never_merged_silently() {
    let sim = start_sim();
    let root = common::tempdir("merge", "cut");
    let shards = root.join("shards");
    std::fs::create_dir_all(&shards).unwrap();
    run_shards(&sim.url, &shards, 2, false);

    // Cut shard 1's records file to its first 3 records.
    let cut = root.join("cut");
    copy_dir(&shards, &cut);
    let results = shard_results(&cut);
    let r1 = read_json(&results[1]);
    let rec = cut.join(r1["records_path"].as_str().unwrap());
    let text_all = std::fs::read_to_string(&rec).unwrap();
    let kept: Vec<&str> = text_all.lines().take(3).collect();
    std::fs::write(&rec, kept.join("\n") + "\n").unwrap();
    let o = merge(&[&cut], &root.join("out-cut"));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("shard 1/2"), "{err}");
    assert!(err.contains("states 12 requests"), "{err}");
    assert!(err.contains("records file holds 3"), "{err}");
    assert!(err.contains("--allow-incomplete"), "{err}");

    let out = root.join("out-allowed");
    let o = bin()
        .args(["merge", "--allow-incomplete", "-o"])
        .arg(&out)
        .arg(&cut)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let merged = read_json(&files_with(&out, ".servebench.json")[0]);
    let warnings = merged["metadata"]["shard"]["warnings"].to_string();
    assert!(warnings.contains("records file holds 3"), "{warnings}");
    assert_eq!(merged["summary"]["completed"], 15, "12 + 3 records");

    // Mark shard 0 interrupted, as a Ctrl-C would have.
    let intr = root.join("interrupted");
    copy_dir(&shards, &intr);
    let r0_path = &shard_results(&intr)[0];
    let mut r0 = read_json(r0_path);
    r0["interrupted"] = serde_json::Value::Bool(true);
    r0["interrupted_reason"] = serde_json::Value::String("interrupted by SIGINT".into());
    std::fs::write(r0_path, serde_json::to_string_pretty(&r0).unwrap()).unwrap();
    let out = root.join("out-interrupted");
    let o = merge(&[&intr], &out);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("shard 0/2 was interrupted"), "{err}");
    let merged = read_json(&files_with(&out, ".servebench.json")[0]);
    assert_eq!(merged["interrupted"], true, "{}", text(&o));
    assert!(
        merged["interrupted_reason"]
            .as_str()
            .unwrap()
            .contains("shard 0/2 was interrupted (interrupted by SIGINT)"),
        "{merged}"
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// The guide's shard-and-merge snippet (docs/scale-out.md, its first code block) runs as a
/// shell script, with `servebench` on PATH and a free port for 8000: it ends (before, its
/// `wait` also waited for the backgrounded simulator, forever) and merges the two shards of
/// 200 requests.
#[test]
fn the_guides_shard_and_merge_snippet_ends_and_merges() {
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/scale-out.md"),
    )
    .unwrap();
    let block = doc
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .unwrap();
    // The Kubernetes manifest line needs no server; everything before it is the local loop.
    let script: String = block
        .lines()
        .take_while(|l| !l.starts_with("servebench k8s job"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        script.contains("wait $SHARDS") && script.contains("kill $SIM"),
        "{script}"
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script = script.replace("8000", &port.to_string());
    let dir = common::tempdir("merge", "snippet");
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_servebench"))
        .parent()
        .unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = std::process::Command::new("bash")
        .args(["-e", "-c", &script])
        .current_dir(&dir)
        .env("PATH", path)
        .env_remove("OPENAI_API_KEY")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // 10 s to the agreed start, 5 s of arrivals, the merge: 90 s is generous on 2 cores.
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if started.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            panic!("the snippet did not end within 90 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut err = String::new();
    use std::io::Read;
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    assert!(status.success(), "{err}");
    let merged = files_with(&dir.join("results/merged"), ".servebench.json");
    assert_eq!(merged.len(), 1, "{err}");
    assert_eq!(read_json(&merged[0])["summary"]["completed"], 200);
    let _ = std::fs::remove_dir_all(&dir);
}
