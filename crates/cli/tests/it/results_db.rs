//! The results database end to end: runs, matrix rows and sweep points indexed as they are
//! written (two runs at once included), a database that cannot be written only warns,
//! `results ls|show|trend|compare|export|import`, the trend gate on a planted TPOT regression,
//! the exports against the published llm-d schema and vLLM's own result, and energy from a
//! stand-in `nvidia-smi` printing a known power trace. Every test names its own database in a
//! temporary directory: none touches the user's.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::{self, bin, read_json, text, workspace_root};

fn tempdir(name: &str) -> PathBuf {
    common::tempdir("results-db", name)
}

/// The binary with `db` as its results database.
fn with_db(db: &Path) -> Command {
    let mut c = bin();
    c.env("SERVEBENCH_DB", db);
    c
}

fn run_virtual(db: &Path, out: &Path, extra: &[&str]) -> Output {
    with_db(db)
        .args([
            "run",
            "--virtual-time",
            "--num-prompts",
            "30",
            "--request-rate",
            "5",
            "--random-input-len",
            "256",
            "--random-output-len",
            "16",
            "--output-dir",
        ])
        .arg(out)
        .args(extra)
        .output()
        .expect("spawn servebench")
}

fn results(db: &Path, args: &[&str]) -> Output {
    bin()
        .arg("results")
        .arg("--db")
        .arg(db)
        .args(args)
        .output()
        .expect("spawn servebench")
}

fn ls(db: &Path) -> Vec<Value> {
    let o = results(db, &["ls", "--json", "--limit", "0"]);
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice::<Value>(&o.stdout)
        .unwrap()
        .as_array()
        .cloned()
        .unwrap()
}

fn result_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(result_files(&p));
        } else if p.to_string_lossy().ends_with(".servebench.json") {
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn runs_matrix_rows_and_sweep_points_are_indexed_as_they_are_written() {
    let dir = tempdir("kinds");
    let db = dir.join("db/results.db");
    let o = run_virtual(&db, &dir.join("runs"), &[]);
    assert!(o.status.success(), "{}", text(&o));
    let o = with_db(&db)
        .args([
            "matrix",
            "--virtual-time",
            "--scale",
            "quick",
            "--rows",
            "A",
        ])
        .arg("--results-dir")
        .arg(dir.join("matrix"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let o = with_db(&db)
        .args([
            "sweep",
            "--virtual-time",
            "--input-len",
            "256",
            "--output-len",
            "16",
            "--num-prompts",
            "20",
            "--request-rate",
            "1,2",
        ])
        .arg("--results-dir")
        .arg(dir.join("sweep"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let entries = ls(&db);
    let kinds: Vec<(&str, String)> = entries
        .iter()
        .map(|e| {
            let place = match (e["context"]["row"].as_str(), e["context"]["point"].as_f64()) {
                (Some(r), Some(p)) => format!("{r}@{p}"),
                (Some(r), None) => r.to_owned(),
                _ => "-".into(),
            };
            (e["context"]["kind"].as_str().unwrap(), place)
        })
        .collect();
    // Newest first: the sweep's points, the matrix row, the run.
    assert_eq!(
        kinds,
        [
            ("sweep-point", "S@2".to_owned()),
            ("sweep-point", "S@1".to_owned()),
            ("matrix-row", "A".to_owned()),
            ("run", "-".to_owned()),
        ],
        "{entries:#?}"
    );
    // Ids run 1, 2, 3, 4 (indexing a run again under its row took no id), and every entry
    // names its result file, which is there.
    let mut ids: Vec<i64> = entries.iter().map(|e| e["id"].as_i64().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, [1, 2, 3, 4]);
    for e in &entries {
        assert!(Path::new(e["path"].as_str().unwrap()).is_file(), "{e}");
        assert!(
            e["figures"]["output_throughput"].as_f64().unwrap() > 0.0,
            "{e}"
        );
        assert_eq!(e["target_kind"], "simulator");
    }
    // `show` by id and by path agree.
    let by_id = results(&db, &["show", "4", "--json"]);
    let path = entries[0]["path"].as_str().unwrap();
    let by_path = results(&db, &["show", path, "--json"]);
    assert!(by_id.status.success(), "{}", text(&by_id));
    assert_eq!(by_id.stdout, by_path.stdout);
    let shown = common::ok(&results(&db, &["show", "2"]));
    assert!(
        shown.contains("matrix-row") && shown.contains("mean_tpot_ms"),
        "{shown}"
    );
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn two_runs_finishing_at_once_are_both_indexed() {
    let dir = tempdir("two");
    let db = dir.join("results.db");
    let spawn = |out: &str| {
        with_db(&db)
            .args([
                "run",
                "--virtual-time",
                "--num-prompts",
                "20",
                "--random-input-len",
                "128",
                "--random-output-len",
                "8",
                "--output-dir",
            ])
            .arg(dir.join(out))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let children: Vec<_> = (0..4).map(|i| spawn(&format!("out-{i}"))).collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        assert!(!err.contains("warning: results database"), "{err}");
    }
    assert_eq!(ls(&db).len(), 4);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_database_that_cannot_be_written_warns_and_keeps_the_run() {
    let dir = tempdir("unwritable");
    // A file where the database's directory should be.
    std::fs::write(dir.join("blocker"), "not a directory").unwrap();
    let db = dir.join("blocker/results.db");
    let o = run_virtual(&db, &dir.join("out"), &[]);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("warning: results database") && err.contains("results import"),
        "{err}"
    );
    assert_eq!(result_files(&dir.join("out")).len(), 1);
    // --no-db and SERVEBENCH_DB=off index nothing and create nothing.
    let off = dir.join("off.db");
    let o = run_virtual(&off, &dir.join("out2"), &["--no-db"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = bin()
        .env("SERVEBENCH_DB", "off")
        .args([
            "run",
            "--virtual-time",
            "--num-prompts",
            "5",
            "--output-dir",
        ])
        .arg(dir.join("out3"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(!off.exists());
    let o = bin()
        .env("SERVEBENCH_DB", "off")
        .args(["results", "ls"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--db"));
    std::fs::remove_dir_all(dir).ok();
}

/// Without --db or SERVEBENCH_DB the database is servebench's in the XDG data directory:
/// $XDG_DATA_HOME/servebench/results.db, else ~/.local/share/servebench/results.db (HOME and
/// XDG_DATA_HOME point into the test's directory here).
#[test]
fn the_default_database_follows_xdg() {
    let dir = tempdir("xdg");
    let home = dir.join("home");
    let o = bin()
        .env_remove("SERVEBENCH_DB")
        .env_remove("XDG_DATA_HOME")
        .env("HOME", &home)
        .args([
            "run",
            "--virtual-time",
            "--num-prompts",
            "5",
            "--output-dir",
        ])
        .arg(dir.join("out"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(home.join(".local/share/servebench/results.db").is_file());
    let xdg = dir.join("xdg");
    let o = bin()
        .env_remove("SERVEBENCH_DB")
        .env("XDG_DATA_HOME", &xdg)
        .env("HOME", &home)
        .args([
            "run",
            "--virtual-time",
            "--num-prompts",
            "5",
            "--output-dir",
        ])
        .arg(dir.join("out"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(xdg.join("servebench/results.db").is_file());
    std::fs::remove_dir_all(dir).ok();
}

/// Result files of one configuration with mean TPOT planted: eight earlier runs with about
/// 2 % run-to-run noise, then the latest at `latest` ms, one day apart, in `dir`.
fn plant_tpot(template: &Value, dir: &Path, latest: f64) {
    std::fs::create_dir_all(dir).unwrap();
    let base = [10.0, 10.2, 9.8, 10.1, 9.9, 10.3, 9.7, 10.0];
    for (i, tpot) in base.iter().chain(std::iter::once(&latest)).enumerate() {
        let mut r = template.clone();
        r["summary"]["tpot"]["mean"] = (*tpot).into();
        r["metadata"]["date"] = format!("202501{:02}-120000", i + 1).into();
        r["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("clock_anchor");
        std::fs::write(
            dir.join(format!("run-{i}.servebench.json")),
            serde_json::to_vec_pretty(&r).unwrap(),
        )
        .unwrap();
    }
}

#[test]
fn trend_flags_a_planted_20_percent_tpot_regression_and_calls_1_percent_noise() {
    let dir = tempdir("trend");
    let o = run_virtual(&dir.join("unused.db"), &dir.join("out"), &["--no-db"]);
    assert!(o.status.success(), "{}", text(&o));
    let template = read_json(&result_files(&dir.join("out"))[0]);

    let db = dir.join("regression.db");
    plant_tpot(&template, &dir.join("regression"), 12.0);
    let o = results(&db, &["import", dir.join("regression").to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        common::ok(&o).contains("9 result(s) indexed"),
        "{}",
        text(&o)
    );
    let o = results(&db, &["trend", "mean_tpot_ms"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("REGRESSION: mean_tpot_ms rose 20.0 % (10.00 → 12.00)"),
        "{out}"
    );
    assert!(out.contains("prediction t-test"), "{out}");
    let o = results(&db, &["trend", "mean_tpot_ms", "--json"]);
    let t: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(t["status"], "regression");
    assert_eq!(t["significant"], true);
    assert!(t["test"]["p_value"].as_f64().unwrap() < 1e-3, "{t}");
    assert_eq!(t["points"].as_array().unwrap().len(), 9);
    // Another figure of the same runs did not move.
    let o = results(&db, &["trend", "output_throughput"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // An unknown figure names the known ones.
    let o = results(&db, &["trend", "nonsense_ms"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("mean_tpot_ms"));

    let db = dir.join("noise.db");
    plant_tpot(&template, &dir.join("noise"), 10.1);
    let o = results(&db, &["import", dir.join("noise").to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let o = results(&db, &["trend", "mean_tpot_ms"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("NOISE: mean_tpot_ms rose 1.0 % (10.00 → 10.10)"),
        "{out}"
    );
    assert!(out.contains("within run-to-run noise"), "{out}");

    // `results compare` of the first and the last planted run gates as `compare` does.
    let o = results(
        &dir.join("regression.db"),
        &["compare", "1", "9", "--fail-if", "mean_tpot_ms>+10%"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn import_rebuilds_the_index_from_the_files() {
    let dir = tempdir("import");
    let db = dir.join("r.db");
    for _ in 0..2 {
        let o = run_virtual(&db, &dir.join("out"), &[]);
        assert!(o.status.success(), "{}", text(&o));
    }
    assert_eq!(ls(&db).len(), 2);
    // The index is gone: the files bring it back.
    std::fs::remove_file(&db).unwrap();
    let rebuilt = dir.join("rebuilt.db");
    let o = results(&rebuilt, &["import", dir.join("out").to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(ls(&rebuilt).len(), 2);
    // A result file removed: the next import drops its entry.
    std::fs::remove_file(&result_files(&dir.join("out"))[0]).unwrap();
    let o = results(&rebuilt, &["import", dir.join("out").to_str().unwrap()]);
    assert!(
        common::ok(&o).contains("1 entry of removed files dropped"),
        "{}",
        text(&o)
    );
    assert_eq!(ls(&rebuilt).len(), 1);
    std::fs::remove_dir_all(dir).ok();
}

fn llmd_schema_errors(doc: &Value) -> Vec<String> {
    let p = workspace_root().join("crates/results/tests/fixtures/llmd_br_v0_2_schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    let v = jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&schema)
        .unwrap();
    v.iter_errors(doc)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect()
}

/// A stand-in `nvidia-smi` printing a known power trace: GPU 0 at 300 W and GPU 1 at 100 W,
/// five readings a second.
fn power_stand_in(bin_dir: &Path) {
    crate::gpu_telemetry::stand_in(
        bin_dir,
        "while true; do\n  echo '0, 80, 40000, 300.0, 1980'\n  echo '1, 20, 1000, 100.0, 1410'\n  sleep 0.2\ndone",
    );
}

/// A real-time run against the in-process simulator with the power stand-in on PATH.
fn powered_run(dir: &Path, db: &Path, extra: &[&str]) -> (Value, PathBuf, String) {
    let bin_dir = dir.join("bin");
    power_stand_in(&bin_dir);
    let out_dir = dir.join("out");
    let o = with_db(db)
        .current_dir(dir)
        .env("PATH", crate::gpu_telemetry::path_with(&bin_dir))
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
            "--output-dir",
        ])
        .arg(&out_dir)
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let path = result_files(&out_dir)[0].clone();
    (read_json(&path), path, text(&o))
}

#[test]
fn energy_from_a_known_power_trace() {
    let dir = tempdir("energy");
    let db = dir.join("r.db");
    let (v, path, out) = powered_run(&dir, &db, &[]);
    let s = &v["summary"];
    let e = &s["energy"];
    assert_eq!(e["source"], "nvidia-smi", "{e}");
    assert_eq!(e["gpus"], 2, "{e}");
    let duration = s["duration_s"].as_f64().unwrap();
    let tokens = s["total_output_tokens"].as_f64().unwrap();
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
    assert!(close(e["avg_power_w"].as_f64().unwrap(), 400.0), "{e}");
    assert!(close(e["window_s"].as_f64().unwrap(), duration), "{e}");
    let joules = 400.0 * duration;
    assert!(close(e["energy_j"].as_f64().unwrap(), joules), "{e}");
    assert!(
        close(
            e["joules_per_output_token"].as_f64().unwrap(),
            joules / tokens
        ),
        "{e}"
    );
    assert!(
        close(
            e["output_tokens_per_joule"].as_f64().unwrap(),
            tokens / joules
        ),
        "{e}"
    );
    assert!(e["samples"].as_u64().unwrap() >= 4, "{e}");
    // The terminal summary says it.
    assert!(
        out.contains("Energy: ") && out.contains("400.0 W average (2 GPUs, nvidia-smi"),
        "{out}"
    );
    // The report shows it: Markdown's energy table, the HTML's section and run facts.
    let o = bin()
        .arg("report")
        .arg(&path)
        .args(["--print", "markdown", "--no-write"])
        .output()
        .unwrap();
    let md = common::ok(&o);
    assert!(md.contains("## Energy") && md.contains("| 400.0 |"), "{md}");
    let report_dir = dir.join("report");
    let o = bin()
        .arg("report")
        .arg(&path)
        .arg("--output-dir")
        .arg(&report_dir)
        .args(["--print", "none"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let html = std::fs::read_dir(&report_dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "html"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .unwrap();
    assert!(html.contains("id=\"energy-table\""), "no energy table");
    assert!(html.contains("J per output token"), "no energy fact");
    // The database holds the same figures, so `trend` can follow them.
    let entries = ls(&db);
    let f = &entries[0]["figures"];
    assert!(close(
        f["joules_per_output_token"].as_f64().unwrap(),
        joules / tokens
    ));
    assert!(close(f["avg_power_w"].as_f64().unwrap(), 400.0));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn exports_validate_against_the_llmd_schema_and_match_vllms_result() {
    let dir = tempdir("export");
    let db = dir.join("r.db");
    let (v, path, out) = powered_run(
        &dir,
        &db,
        &["--save-result", "--result-dir", "vllm", "--label", "exp"],
    );
    let vllm_path = out
        .lines()
        .find_map(|l| l.strip_prefix("vLLM-compatible result: "))
        .map(|p| dir.join(p))
        .unwrap_or_else(|| panic!("{out}"));
    let vllm = read_json(&vllm_path);

    // llm-d: one report, valid against the published v0.2 schema (formats included).
    let o = results(&db, &["export", "--format", "llm-d"]);
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", text(&o)));
    let errors = llmd_schema_errors(&doc);
    assert!(errors.is_empty(), "{errors:#?}\n{doc:#}");
    let agg = &doc["results"]["request_performance"]["aggregate"];
    assert_eq!(agg["requests"]["total"], 20);
    let ttft = &agg["latency"]["time_to_first_token"];
    assert_eq!(ttft["units"], "ms");
    for key in ["p0p1", "p50", "p99", "p99p9", "stddev"] {
        assert!(ttft[key].is_number(), "{key}: {ttft}");
    }
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
    assert!(close(
        ttft["mean"].as_f64().unwrap(),
        v["summary"]["ttft"]["mean"].as_f64().unwrap()
    ));
    assert_eq!(
        doc["results"]["observability"]["components"][0]["aggregate"]["power_consumption"]["units"],
        "Watts"
    );
    assert_eq!(
        doc["scenario"]["stack"][0]["standardized"]["kind"],
        "inference_engine"
    );
    assert_eq!(doc["scenario"]["load"]["standardized"]["rate_qps"], 10.0);
    // By path, into a file, the same report.
    let file = dir.join("exported/br.json");
    let o = results(
        &db,
        &[
            "export",
            "--format",
            "llm-d",
            path.to_str().unwrap(),
            "-o",
            file.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(read_json(&file), doc);

    // PyTorch: vLLM's twelve latency records, each value vLLM's own result file holds, the
    // rest of that file (less the big per-request lists) as extra_info.
    let o = results(&db, &["export", "--format", "pytorch", "1"]);
    let records: Vec<Value> =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", text(&o)));
    assert_eq!(records.len(), 12);
    for r in &records {
        let name = r["metric"]["name"].as_str().unwrap();
        let mine = r["metric"]["benchmark_values"][0].as_f64().unwrap();
        let theirs = vllm[name].as_f64().unwrap();
        assert!(close(mine, theirs), "{name}: {mine} vs vLLM's {theirs}");
        assert_eq!(r["benchmark"]["name"], "vLLM benchmark");
        assert_eq!(r["model"]["name"], vllm["model_id"]);
        assert_eq!(r["benchmark"]["extra_info"]["args"]["label"], "exp");
        let extra = r["metric"]["extra_info"].as_object().unwrap();
        for (k, theirs) in vllm.as_object().unwrap() {
            let in_metrics = records.iter().any(|x| x["metric"]["name"] == k.as_str());
            if in_metrics || ["ttfts", "itls", "generated_texts", "errors"].contains(&k.as_str()) {
                assert!(!extra.contains_key(k), "{k} in extra_info");
            } else if k != "date" {
                assert_eq!(extra.get(k), Some(theirs), "extra_info[{k}]");
            }
        }
    }
    std::fs::remove_dir_all(dir).ok();
}

/// Every `servebench results` command the guide shows is one clap accepts as written (run
/// against an empty database in a scratch directory, each ends in a result or a plain error
/// about the missing runs, never a usage error or a panic).
#[test]
fn the_documented_results_commands_parse() {
    let commands = crate::readme_examples::readme_commands("servebench results ");
    assert!(commands.len() >= 8, "{commands:?}");
    let dir = tempdir("documented");
    for c in &commands {
        let o = with_db(&dir.join("empty.db"))
            .current_dir(&dir)
            .args(&c[1..])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !err.contains("Usage:") && !err.contains("panicked"),
            "{c:?}\n{}",
            text(&o)
        );
        assert!(
            matches!(o.status.code(), Some(0..=2)),
            "{c:?}\n{}",
            text(&o)
        );
    }
    std::fs::remove_dir_all(dir).ok();
}
