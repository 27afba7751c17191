//! `servebench sim calibrate`: runs against a simulator with hidden efficiencies and overheads
//! (virtual time; without jitter the engine is exactly the cost model, with the default 2 %
//! step jitter it is a noisy one) are fitted back, the profile predicts a run it never saw, and
//! fits that cannot be trusted are refused.

use std::path::{Path, PathBuf};

use crate::common::{ok, read_json, servebench, tempdir, text};

/// The hidden deployment: every fitted factor moved away from the catalog's H100 figures
/// (MFU 0.60, MBU 0.78, 126 + 32·32 µs per step, 4 µs per request).
const HIDDEN: &str = "llama-3.1-8b --gpu h100 --mfu 0.45 --mbu 0.62 --step-overhead-us 180 \
                      --layer-overhead-us 40 --req-overhead-us 30 --jitter-sigma 0 --eos-len-median 0";
/// The same deployment with the simulator's default step jitter (log-normal, σ 2 %).
const HIDDEN_JITTERED: &str =
    "llama-3.1-8b --gpu h100 --mfu 0.45 --mbu 0.62 --step-overhead-us 180 \
                               --layer-overhead-us 40 --req-overhead-us 30 --eos-len-median 0";
const HIDDEN_STEP_OVERHEAD_US: f64 = 180.0 + 32.0 * 40.0;

/// One virtual-time run into `dir/name`; returns that directory.
fn run(dir: &Path, name: &str, spec: &str, workload: &[&str]) -> PathBuf {
    let out_dir = dir.join(name);
    let mut args = vec![
        "run",
        "--sim",
        spec,
        "--virtual-time",
        "--ignore-eos",
        "--disable-tqdm",
        "--output-dir",
    ];
    let out_s = out_dir.to_string_lossy().into_owned();
    args.push(&out_s);
    args.extend_from_slice(workload);
    ok(&servebench(&args));
    out_dir
}

/// The matrix rows the brief of calibration names: single-stream decode (row A), long
/// prefill at several lengths (row B), and a batched, saturating run (row D).
fn calibration_runs(dir: &Path, spec: &str) -> Vec<PathBuf> {
    vec![
        run(
            dir,
            "decode",
            spec,
            &[
                "--num-prompts",
                "6",
                "--random-input-len",
                "256",
                "--random-output-len",
                "128",
                "--max-concurrency",
                "1",
            ],
        ),
        run(
            dir,
            "prefill",
            spec,
            &[
                "--num-prompts",
                "16",
                "--random-input-len",
                "2048",
                "--random-range-ratio",
                "0.9",
                "--random-output-len",
                "16",
                "--max-concurrency",
                "1",
            ],
        ),
        run(
            dir,
            "saturation",
            spec,
            &[
                "--num-prompts",
                "200",
                "--random-input-len",
                "1024",
                "--random-range-ratio",
                "0.9",
                "--random-output-len",
                "128",
                "--request-rate",
                "40",
                "--max-concurrency",
                "64",
            ],
        ),
    ]
}

/// A batched decode on long contexts of varied length (matrix row D's shape): its steps read
/// KV caches whose size varies apart from the batch size, which is what separates the memory
/// efficiency from the per-step overhead. Without it, a 2 % step jitter leaves MBU a few per
/// cent uncertain, and the weight-read time that uncertainty moves is five times the overhead.
fn long_context_decode(dir: &Path, spec: &str) -> PathBuf {
    run(
        dir,
        "long-decode",
        spec,
        &[
            "--num-prompts",
            "32",
            "--random-input-len",
            "4096",
            "--random-range-ratio",
            "0.9",
            "--random-output-len",
            "256",
            "--max-concurrency",
            "16",
        ],
    )
}

fn calibrate(args: &[&str]) -> std::process::Output {
    let mut all = vec!["sim", "calibrate"];
    all.extend_from_slice(args);
    servebench(&all)
}

fn result_file(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir)
        .expect("run directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".servebench.json"))
        .expect("a result file")
}

fn mean_ms(result: &Path, metric: &str) -> f64 {
    read_json(result)["summary"][metric]["mean"]
        .as_f64()
        .unwrap_or_else(|| panic!("{metric} mean in {}", result.display()))
}

fn within(got: f64, want: f64, tol: f64, what: &str) {
    assert!(
        (got / want - 1.0).abs() <= tol,
        "{what}: fitted {got}, hidden {want}"
    );
}

#[test]
fn recovers_hidden_factors_and_predicts_a_held_out_run() {
    let dir = tempdir("calibrate", "recover");
    let runs = calibration_runs(&dir, HIDDEN);
    recover_and_predict(&dir, HIDDEN, runs, "--jitter-sigma 0");
    let _ = std::fs::remove_dir_all(&dir);
}

/// With the simulator's default step jitter, under two jitter seeds: every factor within 5 %
/// and the held-out run within 5 %, from the three runs plus the long-context batched decode
/// that identifies MBU (docs/simulator.md §15, "Refusals").
#[test]
fn recovers_hidden_factors_with_the_default_jitter() {
    for seed in [1, 7] {
        let dir = tempdir("calibrate", &format!("recover-jitter-{seed}"));
        let spec = format!("{HIDDEN_JITTERED} --seed {seed}");
        let mut runs = calibration_runs(&dir, &spec);
        runs.push(long_context_decode(&dir, &spec));
        recover_and_predict(&dir, &spec, runs, &format!("--seed {seed}"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Calibrates on `runs` of the hidden deployment `spec`, checks every factor within 5 %, and
/// predicts a held-out workload within 5 % with the simulator given the profile and
/// `predict_flags`.
fn recover_and_predict(dir: &Path, spec: &str, runs: Vec<PathBuf>, predict_flags: &str) {
    let dir = dir.to_path_buf();
    let held = run(
        &dir,
        "held",
        spec,
        &[
            "--num-prompts",
            "60",
            "--random-input-len",
            "700",
            "--random-output-len",
            "150",
            "--request-rate",
            "10",
            "--seed",
            "9",
        ],
    );
    let profile = dir.join("profile.toml");
    let p = profile.to_string_lossy().into_owned();
    let mut args: Vec<String> = runs
        .iter()
        .map(|r| r.to_string_lossy().into_owned())
        .collect();
    args.extend(["-o".into(), p.clone(), "--holdout".into()]);
    args.push(held.to_string_lossy().into_owned());
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = ok(&calibrate(&argv));
    for part in [
        "before",
        "after",
        "Hold-out",
        "mean TTFT",
        "mean TPOT",
        "Wrote",
    ] {
        assert!(out.contains(part), "{out}");
    }

    let doc: toml::Value = toml::from_str(&std::fs::read_to_string(&profile).expect("profile"))
        .expect("profile is TOML");
    assert_eq!(doc["target"]["gpu"].as_str(), Some("h100"));
    assert_eq!(doc["target"]["model"].as_str(), Some("llama-3.1-8b"));
    let f = |k: &str| {
        doc["factors"][k]
            .as_float()
            .unwrap_or_else(|| panic!("factors.{k} in {doc}"))
    };
    within(f("mfu"), 0.45, 0.05, "mfu");
    within(f("mbu"), 0.62, 0.05, "mbu");
    within(
        f("step_overhead_us") + 32.0 * f("layer_overhead_us"),
        HIDDEN_STEP_OVERHEAD_US,
        0.05,
        "per-step overhead",
    );
    within(f("req_overhead_us"), 30.0, 0.05, "request overhead");

    // The profile in the simulator predicts the held-out workload as the hidden one ran it.
    let predicted = run(
        &dir,
        "predicted",
        &format!("llama-3.1-8b --gpu h100 --calibration {p} {predict_flags} --eos-len-median 0"),
        &[
            "--num-prompts",
            "60",
            "--random-input-len",
            "700",
            "--random-output-len",
            "150",
            "--request-rate",
            "10",
            "--seed",
            "9",
        ],
    );
    let (truth, pred) = (result_file(&held), result_file(&predicted));
    for metric in ["ttft", "tpot"] {
        within(
            mean_ms(&pred, metric),
            mean_ms(&truth, metric),
            0.05,
            metric,
        );
    }
}

#[test]
fn batch_one_runs_alone_are_refused_naming_the_run_that_would_help() {
    let dir = tempdir("calibrate", "too-little");
    let decode = run(
        &dir,
        "decode",
        HIDDEN,
        &[
            "--num-prompts",
            "4",
            "--random-input-len",
            "256",
            "--random-output-len",
            "64",
            "--max-concurrency",
            "1",
        ],
    );
    let o = calibrate(&[
        &decode.to_string_lossy(),
        "-o",
        &dir.join("p.toml").to_string_lossy(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("refusing the fit"), "{err}");
    assert!(
        err.contains("request overhead") && err.contains("row D"),
        "{err}"
    );
    assert!(err.contains("mfu") && err.contains("row B"), "{err}");
    assert!(!dir.join("p.toml").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn results_of_different_gpus_are_refused_with_the_mismatch_named() {
    let dir = tempdir("calibrate", "mixed");
    let w = [
        "--num-prompts",
        "3",
        "--random-input-len",
        "128",
        "--random-output-len",
        "16",
        "--max-concurrency",
        "1",
    ];
    let h100 = run(&dir, "h100", "llama-3.1-8b --gpu h100", &w);
    let a100 = run(&dir, "a100", "llama-3.1-8b --gpu a100", &w);
    let o = calibrate(&[&h100.to_string_lossy(), &a100.to_string_lossy()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("GPU h100 vs a100-80g"), "{err}");

    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_profile_for_another_deployment_is_refused_by_sim_and_predict() {
    let dir = tempdir("calibrate", "profile-mismatch");
    let profile = dir.join("p.toml");
    std::fs::write(
        &profile,
        "schema = \"servebench.calibration/v1\"\n[target]\nmodel = \"llama-3.1-8b\"\ngpu = \"h100\"\n\
         tensor_parallel_size = 1\ndtype = \"bf16\"\n[factors]\nmfu = 0.5\nmbu = 0.7\n",
    )
    .expect("write");
    let p = profile.to_string_lossy().into_owned();
    let o = servebench(&["predict", "--gpu", "a100", "--calibration", &p]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("GPU 'h100' (profile) vs 'a100-80g'"), "{err}");
    let o = servebench(&[
        "run",
        "--sim",
        &format!("llama-3.1-8b --gpu h100 --tensor-parallel-size 2 --calibration {p}"),
        "--virtual-time",
        "--num-prompts",
        "1",
        "--output-dir",
        &dir.join("r").to_string_lossy(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("tensor-parallel size 1 (profile) vs 2"),
        "{}",
        text(&o)
    );
    // The matching deployment takes it: MBU 0.7 shows in predict's inputs.
    let json = ok(&servebench(&[
        "predict",
        "--gpu",
        "h100",
        "--calibration",
        &p,
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_str(&json).expect("predict JSON");
    assert_eq!(named_values(&v, "MBU"), vec![0.7], "{json}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every `value` of an object whose `name` is `name`, anywhere in `v`, deduplicated.
fn named_values(v: &serde_json::Value, name: &str) -> Vec<f64> {
    fn walk(v: &serde_json::Value, name: &str, out: &mut Vec<f64>) {
        match v {
            serde_json::Value::Object(m) => {
                if m.get("name").and_then(|n| n.as_str()) == Some(name) {
                    if let Some(x) = m.get("value").and_then(serde_json::Value::as_f64) {
                        if !out.contains(&x) {
                            out.push(x);
                        }
                    }
                }
                m.values().for_each(|c| walk(c, name, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|c| walk(c, name, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, name, &mut out);
    out
}
