//! LoRA adapters end to end: the client spreads requests over `--lora-modules` and breaks the
//! run down by adapter; the simulator schedules at most `--max-loras` adapters per batch and
//! answers an adapter it does not serve with 404.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::common::{self, bin, read_json, text};

fn tempdir(name: &str) -> PathBuf {
    common::tempdir("lora", name)
}

fn run_in(dir: &Path, args: &[&str]) -> Output {
    bin()
        .current_dir(dir)
        .args(["run", "--disable-tqdm"])
        .args(args)
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

fn records(dir: &Path) -> Vec<Value> {
    let path = std::fs::read_dir(dir.join("results/runs"))
        .expect("output dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".requests.jsonl"))
        .expect("a records file");
    std::fs::read_to_string(path)
        .expect("records")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a record"))
        .collect()
}

/// Two adapters requested alternately, all at once, with `max_loras` slots on the simulator.
fn alternating(max_loras: u32) -> Value {
    let dir = tempdir(&format!("alternate-{max_loras}"));
    let sim = format!("llama-3.1-8b --lora-modules a b --max-loras {max_loras} --lora-load-ms 5");
    let out = run_in(
        &dir,
        &[
            "--virtual-time",
            "--sim",
            &sim,
            "--lora-modules",
            "a",
            "b",
            "--lora-assignment",
            "round-robin",
            "--num-prompts",
            "200",
            "--random-input-len",
            "256",
            "--random-output-len",
            "64",
        ],
    );
    let v = native(&dir, &out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("By LoRA adapter"), "{stdout}");
    let recs = records(&dir);
    // Round-robin: request i names adapter i mod 2.
    for r in &recs {
        let id = r["id"].as_u64().expect("id");
        let want = if id % 2 == 0 { "a" } else { "b" };
        assert_eq!(r["lora"], want, "{r}");
    }
    std::fs::remove_dir_all(dir).ok();
    v
}

#[test]
fn one_lora_slot_for_two_alternating_adapters_costs_throughput() {
    let one = alternating(1);
    let two = alternating(2);
    for v in [&one, &two] {
        let by = v["by_lora"].as_array().expect("by_lora");
        let names: Vec<&str> = by
            .iter()
            .map(|a| a["adapter"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(names, ["a", "b"]);
        for a in by {
            assert_eq!(a["completed"], 100, "{a}");
        }
    }
    let tput = |v: &Value| {
        v["summary"]["output_throughput"]
            .as_f64()
            .expect("throughput")
    };
    // With one slot a step holds one adapter's requests only: the second adapter's requests
    // wait until the first one's have left, so the batches are half as large (prefill of the
    // 200 prompts dominates this run; measured 17 % less output throughput).
    assert!(
        tput(&one) < 0.9 * tput(&two),
        "max-loras 1: {} tok/s, max-loras 2: {} tok/s",
        tput(&one),
        tput(&two)
    );
}

#[test]
fn over_http_each_request_names_its_adapter() {
    let dir = tempdir("http");
    let out = run_in(
        &dir,
        &[
            "--sim",
            "llama-3.1-8b --lora-modules a=/adapters/a b --max-loras 2",
            "--lora-modules",
            "a:3",
            "b",
            "--num-prompts",
            "40",
            "--random-input-len",
            "64",
            "--random-output-len",
            "8",
        ],
    );
    let v = native(&dir, &out);
    let by = v["by_lora"].as_array().expect("by_lora");
    assert_eq!(by.len(), 2, "{by:?}");
    let recs = records(&dir);
    assert_eq!(recs.len(), 40);
    let a = recs.iter().filter(|r| r["lora"] == "a").count();
    assert!(a > 20 && a < 40, "weights 3:1 gave {a} of 40 to a");
    assert!(recs.iter().all(|r| r["failure"].is_null()));
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn an_adapter_the_simulator_does_not_serve_is_refused() {
    let dir = tempdir("unknown");
    // Virtual time: refused before the run.
    let out = run_in(
        &dir,
        &[
            "--virtual-time",
            "--lora-modules",
            "nope",
            "--num-prompts",
            "4",
        ],
    );
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("serves no LoRA adapter named nope"),
        "{}",
        text(&out)
    );
    // Over HTTP the server answers 404, as vLLM does (the ready check reports it).
    let out = run_in(
        &dir,
        &[
            "--lora-modules",
            "nope",
            "--num-prompts",
            "4",
            "--random-output-len",
            "4",
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("404") && err.contains("does not exist"),
        "{}",
        text(&out)
    );
    std::fs::remove_dir_all(dir).ok();
}

/// The guide's virtual-time LoRA example runs as written (fewer prompts) and reports by
/// adapter.
#[test]
fn readme_lora_example_runs_as_written() {
    let lines = crate::common::documented_lines();
    let line = lines
        .iter()
        .find(|l| {
            l.starts_with("servebench run --virtual-time --sim \"llama-3.1-8b --lora-modules")
        })
        .expect("the guide's LoRA example");
    // The one quoted argument is the --sim spec.
    let (head, rest) = line.split_once('"').expect("a quoted --sim");
    let (sim, tail) = rest.split_once('"').expect("a closed quote");
    let mut args: Vec<&str> = head.split_whitespace().skip(1).collect();
    args.push(sim);
    args.extend(tail.split_whitespace());
    if let Some(i) = args.iter().position(|w| *w == "--num-prompts") {
        args[i + 1] = "20";
    }
    let dir = tempdir("readme");
    let out = bin()
        .current_dir(&dir)
        .args(&args)
        .arg("--disable-tqdm")
        .output()
        .expect("spawn servebench");
    assert!(out.status.success(), "{args:?}\n{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("By LoRA adapter"));
    std::fs::remove_dir_all(dir).ok();
}
