//! `servebench diagnose` on experiments built from virtual-time simulator runs, one
//! configuration per regime: each rule must find its regime, and a healthy configuration
//! must yield no finding at all.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use crate::common::{servebench, text};
use serde_json::{json, Value};

/// An experiment directory assembled from `servebench run --virtual-time` rows and a
/// hand-written `experiment.json`.
struct Experiment {
    dir: PathBuf,
    rows: Vec<Value>,
}

impl Experiment {
    fn new(name: &str) -> Experiment {
        let dir =
            std::env::temp_dir().join(format!("servebench-diagnose-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Experiment {
            dir,
            rows: Vec::new(),
        }
    }

    /// Runs one row: `sim` is the simulator spec, `flags` the run's workload flags.
    fn row(mut self, id: &str, name: &str, sim: &str, flags: &[&str]) -> Experiment {
        let out_dir = self.dir.join("rows").join(id);
        let mut args = vec!["run", "--virtual-time", "--sim", sim, "--output-dir"];
        let out_str = out_dir.to_string_lossy().into_owned();
        args.push(&out_str);
        args.extend_from_slice(flags);
        let o = servebench(&args);
        assert!(o.status.success(), "row {id}: {}", text(&o));
        let file = std::fs::read_dir(&out_dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().ends_with(".servebench.json"))
            .expect("a result file");
        let rel = file
            .strip_prefix(&self.dir)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        self.rows
            .push(json!({"id": id, "name": name, "hypothesis": "", "runs": [rel]}));
        self
    }

    fn write(self) -> PathBuf {
        let exp = json!({
            "schema": "servebench.experiment/v1", "kind": "matrix", "quick": false,
            "title": "diagnosis test", "rows": self.rows, "sweep": null
        });
        std::fs::write(
            self.dir.join("experiment.json"),
            serde_json::to_string_pretty(&exp).unwrap(),
        )
        .unwrap();
        self.dir
    }
}

/// Runs `servebench diagnose DIR --json [extra]`; returns the diagnosis and checks that
/// interpretation.md was written with every finding in it.
fn diagnose(dir: &Path, extra: &[&str]) -> Value {
    let d = dir.to_string_lossy().into_owned();
    let mut args = vec!["diagnose", d.as_str(), "--json"];
    args.extend_from_slice(extra);
    let o = servebench(&args);
    assert!(o.status.success(), "{}", text(&o));
    let v: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
    let md = std::fs::read_to_string(dir.join("interpretation.md")).expect("interpretation.md");
    for f in v["findings"].as_array().unwrap() {
        let next = f["next_experiment"].as_str().unwrap();
        assert!(md.contains(next), "interpretation.md lacks {next}\n{md}");
        for e in f["evidence"].as_array().unwrap() {
            assert!(
                md.contains(e.as_str().unwrap()),
                "interpretation.md lacks {e}\n{md}"
            );
        }
    }
    v
}

fn rules(v: &Value) -> Vec<String> {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rule"].as_str().unwrap().to_owned())
        .collect()
}

fn finding<'a>(v: &'a Value, rule: &str) -> &'a Value {
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == rule)
        .unwrap_or_else(|| panic!("no {rule} finding in {:#}", v["findings"]))
}

fn evidence(f: &Value) -> String {
    f["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

const SIM: &str = "llama-3.1-8b --gpu h100";

#[test]
fn a_healthy_configuration_yields_no_finding() {
    let dir = Experiment::new("healthy")
        .row(
            "A",
            "interactive baseline",
            SIM,
            &[
                "--num-prompts",
                "30",
                "--max-concurrency",
                "1",
                "--random-input-len",
                "256",
                "--random-output-len",
                "128",
            ],
        )
        .row(
            "C",
            "single-stream decode",
            SIM,
            &[
                "--num-prompts",
                "20",
                "--max-concurrency",
                "1",
                "--random-input-len",
                "256",
                "--random-output-len",
                "512",
            ],
        )
        .row(
            "E",
            "warm prefix",
            SIM,
            &[
                "--num-prompts",
                "30",
                "--max-concurrency",
                "1",
                "--random-input-len",
                "128",
                "--random-output-len",
                "64",
                "--random-prefix-len",
                "1024",
            ],
        )
        .write();
    let v = diagnose(&dir, &["--gpu-hourly-cost", "2"]);
    assert_eq!(rules(&v), Vec::<String>::new(), "{:#}", v["findings"]);
    // The rules did look: the single-stream rows were checked against the prediction and
    // sit at the bandwidth limit.
    let bw = v["bandwidth"].as_array().unwrap();
    assert_eq!(bw.len(), 3);
    for b in bw {
        assert_eq!(b[1]["regime"], "at_limit", "{b:#}");
    }
    let warm = &v["rows"][2];
    assert!(
        warm["mean_cached_tokens"].as_f64().unwrap() > 900.0,
        "{warm:#}"
    );
    let md = std::fs::read_to_string(dir.join("interpretation.md")).unwrap();
    assert!(md.contains("No rule fired"), "{md}");
    assert!(md.contains("## Cost"), "{md}");
    assert!(md.contains("$ per M accepted tokens"), "{md}");
}

#[test]
fn long_prompts_at_concurrency_one_show_prefill_cost() {
    let dir = Experiment::new("prefill")
        .row(
            "A",
            "short prompt",
            SIM,
            &[
                "--num-prompts",
                "20",
                "--max-concurrency",
                "1",
                "--random-input-len",
                "256",
                "--random-output-len",
                "32",
            ],
        )
        .row(
            "B",
            "long prompt",
            SIM,
            &[
                "--num-prompts",
                "20",
                "--max-concurrency",
                "1",
                "--random-input-len",
                "4096",
                "--random-output-len",
                "32",
            ],
        )
        .write();
    let v = diagnose(&dir, &[]);
    assert_eq!(rules(&v), vec!["prefill_cost"], "{:#}", v["findings"]);
    let f = finding(&v, "prefill_cost");
    assert_eq!(f["rows"], json!(["A", "B"]));
    assert_eq!(
        f["regime"], "prefill cost",
        "the simulator prefills at the roofline's pace"
    );
    assert_eq!(f["confidence"], "high");
    let e = evidence(f);
    assert!(e.contains("µs per prompt token"), "{e}");
    assert!(f["next_experiment"]
        .as_str()
        .unwrap()
        .contains("--random-input-len halved to 2,048"));
}

#[test]
fn decode_far_above_the_bandwidth_prediction_is_flagged() {
    // The simulated server streams weights at 30 % of peak bandwidth; the user says it is an
    // H100, whose catalog efficiency is 78 %.
    let dir = Experiment::new("slow-decode")
        .row(
            "C",
            "single-stream decode",
            "llama-3.1-8b --gpu h100 --mbu 0.3",
            &[
                "--num-prompts",
                "20",
                "--max-concurrency",
                "1",
                "--random-input-len",
                "256",
                "--random-output-len",
                "128",
            ],
        )
        .write();
    let own = diagnose(&dir, &[]);
    assert!(
        !rules(&own).contains(&"decode_speed".to_string()),
        "judged against its own configuration the decode is at its limit: {:#}",
        own["findings"]
    );
    let v = diagnose(&dir, &["--gpu", "h100", "--model-preset", "llama-3.1-8b"]);
    let f = finding(&v, "decode_speed");
    assert_eq!(f["regime"], "inefficient decode or a non-memory bottleneck");
    assert_eq!(f["confidence"], "high");
    let gap = v["bandwidth"][0][1]["gap_pct"].as_f64().unwrap();
    assert!(gap > 50.0, "gap {gap}");
}

#[test]
fn tpot_below_the_floor_of_the_claimed_gpu_is_a_configuration_error() {
    // Measured on a simulated H100, judged as if it were an A40 (a fifth of the bandwidth).
    let dir = Experiment::new("below-floor")
        .row(
            "C",
            "single-stream decode",
            SIM,
            &[
                "--num-prompts",
                "20",
                "--max-concurrency",
                "1",
                "--random-input-len",
                "256",
                "--random-output-len",
                "128",
            ],
        )
        .write();
    let v = diagnose(&dir, &["--gpu", "a40", "--model-preset", "llama-3.1-8b"]);
    let f = finding(&v, "decode_speed");
    assert!(
        f["regime"]
            .as_str()
            .unwrap()
            .contains("configuration error"),
        "{f:#}"
    );
    assert_eq!(v["bandwidth"][0][1]["regime"], "below_floor");
}

#[test]
fn bursty_arrivals_spike_p99_ttft_while_p50_stays_low() {
    let dir = Experiment::new("tail")
        .row(
            "T",
            "bursty arrivals",
            SIM,
            &[
                "--num-prompts",
                "300",
                "--request-rate",
                "6",
                "--burstiness",
                "0.1",
                "--random-input-len",
                "1024",
                "--random-output-len",
                "64",
            ],
        )
        .write();
    let v = diagnose(&dir, &[]);
    assert_eq!(rules(&v), vec!["tail_latency"], "{:#}", v["findings"]);
    let f = finding(&v, "tail_latency");
    assert_eq!(f["regime"], "queueing or interference");
    let row = &v["rows"][0];
    let (p50, p99) = (
        row["ttft"]["p50"].as_f64().unwrap(),
        row["ttft"]["p99"].as_f64().unwrap(),
    );
    assert!(p99 >= 3.0 * p50, "p50 {p50} p99 {p99}");
    assert!(f["next_experiment"]
        .as_str()
        .unwrap()
        .contains("--request-rate 3"));
}

#[test]
fn higher_concurrency_trades_per_user_tpot_for_throughput() {
    let flags = |c: &'static str| -> Vec<&'static str> {
        vec![
            "--num-prompts",
            "128",
            "--max-concurrency",
            c,
            "--random-input-len",
            "512",
            "--random-output-len",
            "256",
        ]
    };
    let dir = Experiment::new("batching")
        .row("L", "one user", SIM, &flags("1")[..])
        .row("H", "64 users", SIM, &flags("64")[..])
        .write();
    let v = diagnose(&dir, &[]);
    let f = finding(&v, "batching_trade_off");
    assert_eq!(f["rows"], json!(["L", "H"]));
    let rows = v["rows"].as_array().unwrap();
    let tput = |i: usize| rows[i]["output_throughput"].as_f64().unwrap();
    let tpot = |i: usize| rows[i]["tpot"]["mean"].as_f64().unwrap();
    assert!(tput(1) > 10.0 * tput(0));
    assert!(tpot(1) > 1.25 * tpot(0));
}

#[test]
fn a_warm_prefix_that_is_never_cached_is_a_cache_miss() {
    let flags_warm = [
        "--num-prompts",
        "20",
        "--max-concurrency",
        "1",
        "--random-input-len",
        "128",
        "--random-output-len",
        "16",
        "--random-prefix-len",
        "2048",
    ];
    let mut flags_cold = flags_warm.to_vec();
    flags_cold.extend_from_slice(&["--random-prefix-mode", "per-request"]);
    let dir = Experiment::new("prefix")
        .row("K", "cold prefix", SIM, &flags_cold)
        .row(
            "W",
            "warm prefix",
            "llama-3.1-8b --gpu h100 --no-enable-prefix-caching",
            &flags_warm,
        )
        .write();
    let v = diagnose(&dir, &[]);
    let f = finding(&v, "prefix_cache_miss");
    assert_eq!(f["rows"], json!(["W"]));
    assert_eq!(f["regime"], "prefix caching disabled");
    assert_eq!(f["confidence"], "high");
    let e = evidence(f);
    assert!(e.contains("0 tokens cached per request"), "{e}");
    assert!(e.contains("for the cold K (cold prefix)"), "{e}");
    assert!(f["next_experiment"]
        .as_str()
        .unwrap()
        .contains("--enable-prefix-caching"));
}

#[test]
fn a_cpu_bound_server_delivers_far_less_than_the_roofline() {
    // 20 ms of per-step overhead: the GPU side is an H100, the pace is the CPU's.
    let dir = Experiment::new("cpu-bound")
        .row(
            "D",
            "16 users",
            "llama-3.1-8b --gpu h100 --step-overhead-us 20000",
            &[
                "--num-prompts",
                "96",
                "--max-concurrency",
                "16",
                "--random-input-len",
                "512",
                "--random-output-len",
                "128",
            ],
        )
        .write();
    let v = diagnose(&dir, &["--gpu", "h100", "--model-preset", "llama-3.1-8b"]);
    let f = finding(&v, "throughput_below_prediction");
    assert_eq!(f["regime"], "non-memory bottleneck");
    assert_eq!(f["confidence"], "high");
}

#[test]
fn low_gpu_memory_utilization_exhausts_the_kv_cache() {
    let dir = Experiment::new("kv")
        .row(
            "D",
            "64 users, small cache",
            "llama-3.1-8b --gpu h100 --gpu-memory-utilization 0.35 --max-model-len 8192",
            &[
                "--num-prompts",
                "192",
                "--max-concurrency",
                "64",
                "--random-input-len",
                "2048",
                "--random-output-len",
                "1024",
            ],
        )
        .write();
    let v = diagnose(&dir, &[]);
    assert_eq!(rules(&v), vec!["kv_exhaustion"], "{:#}", v["findings"]);
    let f = finding(&v, "kv_exhaustion");
    assert_eq!(f["confidence"], "high");
    let e = evidence(f);
    assert!(
        e.contains("preemptions (vllm:num_preemptions_total)"),
        "{e}"
    );
    assert!(e.contains("exceeds the KV cache"), "{e}");
    assert!(e.contains("stalls"), "{e}");
    // The cache holds 29 requests of 3,072 tokens: the experiment to run is exactly that.
    let next = f["next_experiment"].as_str().unwrap();
    assert!(next.contains("--max-concurrency 29"), "{next}");
}

#[test]
fn more_users_than_max_num_seqs_queue_in_the_server() {
    let dir = Experiment::new("seqs")
        .row(
            "S",
            "32 users, 4 sequences",
            "llama-3.1-8b --gpu h100 --max-num-seqs 4",
            &[
                "--num-prompts",
                "96",
                "--max-concurrency",
                "32",
                "--random-input-len",
                "512",
                "--random-output-len",
                "128",
            ],
        )
        .write();
    let v = diagnose(&dir, &[]);
    assert_eq!(rules(&v), vec!["server_queueing"], "{:#}", v["findings"]);
    let f = finding(&v, "server_queueing");
    assert_eq!(f["regime"], "queueing behind the server's sequence limit");
    assert!(f["next_experiment"]
        .as_str()
        .unwrap()
        .contains("--max-num-seqs raised from 4"));
}
