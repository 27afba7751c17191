//! Issue 28: vLLM flags that used to be refused, run with vLLM's meaning against the
//! simulator: `--profile` (the server's profiler endpoints), `--probe-request-rate` (the
//! `probe_*` keys), the `openai-responses` backend (the Responses API, streamed), the
//! timeline and dataset plots, `--no-stream`, Hugging Face dataset ids from the local cache,
//! and vLLM's engine arguments on `throughput`.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Output;

use serde_json::Value;
use servebench_sim::args::SimArgs;
use tokio::runtime::Runtime;
use tokio::sync::oneshot;

use crate::common::{bin, ok, read_json, tempdir};

fn start_sim(rt: &Runtime, spec: &str) -> (String, oneshot::Sender<()>) {
    let resolved = SimArgs::parse_spec(spec).unwrap().resolve().unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0)))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel::<()>();
    rt.spawn(servebench_sim::serve(listener, resolved, async move {
        let _ = rx.await;
    }));
    (format!("http://{addr}"), tx)
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn run_in(dir: &Path, args: &[&str]) -> Output {
    bin()
        .current_dir(dir)
        .arg("run")
        .args(args)
        .output()
        .unwrap()
}

fn get_json(url: &str) -> Value {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").unwrap();
    let (authority, path) = rest.split_at(rest.find('/').unwrap());
    let mut sock = std::net::TcpStream::connect(authority).unwrap();
    write!(
        sock,
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    sock.read_to_string(&mut text).unwrap();
    let body = &text[text.find("\r\n\r\n").unwrap() + 4..];
    serde_json::from_str(body.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// `--profile` posts the profiler endpoints around the measured requests, and
/// `--probe-request-rate` sends probes beside them, reported as vLLM's `probe_*` keys.
#[test]
fn profile_and_probes_run_with_vllms_meaning_issue_28() {
    let dir = tempdir("vllm-extras", "profile-probes");
    let rt = runtime();
    let (url, _stop) = start_sim(&rt, "llama-3.1-8b --time-scale 20");
    let out = run_in(
        &dir,
        &[
            "--base-url",
            &url,
            "--num-prompts",
            "8",
            "--random-input-len",
            "64",
            "--random-output-len",
            "32",
            "--request-rate",
            "8",
            "--probe-request-rate",
            "20",
            "--profile",
            "--save-result",
            "--result-filename",
            "r.json",
            "--disable-tqdm",
        ],
    );
    let stdout = ok(&out);
    assert!(stdout.contains("Probe requests completed:"), "{stdout}");
    let v = read_json(&dir.join("r.json"));
    let probes = v["probe_completed"].as_u64().unwrap();
    assert!(probes >= 2, "{v}");
    assert_eq!(v["probe_failed"], 0);
    let (med, p99, max) = (
        v["probe_median_e2el_ms"].as_f64().unwrap(),
        v["probe_p99_e2el_ms"].as_f64().unwrap(),
        v["probe_max_e2el_ms"].as_f64().unwrap(),
    );
    assert!(med > 0.0 && med <= p99 && p99 <= max, "{v}");
    // Probes are not requests of the run.
    assert_eq!(v["completed"], 8);
    let calls = get_json(&format!("{url}/sim/profile"));
    assert_eq!(calls, serde_json::json!({"start": 1, "stop": 1}));
}

/// `--backend openai-responses` speaks the Responses API, streamed: the same tokens as a
/// completions run of the same workload.
#[test]
fn the_responses_api_is_measured_like_chat_issue_28() {
    let dir = tempdir("vllm-extras", "responses");
    let rt = runtime();
    // At the engine's own pace (about 7 ms a step): sped up, a loaded machine's handler falls
    // behind and merges every step into one event, as vLLM's does, leaving no gap to time.
    let (url, _stop) = start_sim(&rt, "llama-3.1-8b");
    let common = [
        "--base-url",
        url.as_str(),
        "--num-prompts",
        "4",
        "--random-input-len",
        "48",
        "--random-output-len",
        "12",
        "--save-result",
        "--disable-tqdm",
    ];
    let mut args = common.to_vec();
    args.extend([
        "--backend",
        "openai-responses",
        "--result-filename",
        "resp.json",
    ]);
    ok(&run_in(&dir, &args));
    let r = read_json(&dir.join("resp.json"));
    assert_eq!(r["completed"], 4, "{r}");
    assert_eq!(r["total_output_tokens"], 48, "{r}");
    assert_eq!(r["backend"], "openai-responses");
    assert!(r["mean_ttft_ms"].as_f64().unwrap() > 0.0);
    assert!(r["mean_itl_ms"].as_f64().unwrap() > 0.0);
    // The endpoint is the Responses API's; the wrong one is said.
    let mut bad = common.to_vec();
    bad.extend([
        "--backend",
        "openai-responses",
        "--endpoint",
        "/v1/completions",
    ]);
    let out = run_in(&dir, &bad);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/v1/responses"));
}

/// `--plot-timeline` and `--plot-dataset-stats` write their files beside the result, and
/// `--no-stream` (vLLM's dataset-loading flag) changes nothing but says so once.
#[test]
fn plots_and_no_stream_issue_28() {
    let dir = tempdir("vllm-extras", "plots");
    let out = run_in(
        &dir,
        &[
            "--virtual-time",
            "--num-prompts",
            "5",
            "--random-input-len",
            "32",
            "--random-output-len",
            "8",
            "--plot-timeline",
            "--timeline-itl-thresholds",
            "2,5",
            "--plot-dataset-stats",
            "--no-stream",
            "--result-filename",
            "t.json",
        ],
    );
    ok(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("--no-stream only stops").count(), 1, "{err}");
    let html = std::fs::read_to_string(dir.join("t.timeline.html")).unwrap();
    assert_eq!(
        html.matches("<title>request ").count(),
        5,
        "one row per request"
    );
    assert!(html.contains("green below 2 ms"));
    let svg = std::fs::read_to_string(dir.join("t.dataset_stats.svg")).unwrap();
    assert!(svg.contains("prompt tokens: 5 requests"), "{svg}");
    // vLLM's threshold check.
    let out = run_in(
        &dir,
        &[
            "--virtual-time",
            "--plot-timeline",
            "--timeline-itl-thresholds",
            "1,2,3",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Expected 2 ITL threshold values"));
}

/// A Hugging Face dataset id is read from the local cache (`$HF_HOME/hub`), as an offline
/// vLLM reads it; without it the refusal names the path looked at.
#[test]
fn hub_dataset_ids_come_from_the_local_cache_issue_28() {
    let dir = tempdir("vllm-extras", "hub-cache");
    let home = dir.join("hf");
    let args = [
        "--virtual-time",
        "--dataset-name",
        "hf",
        "--dataset-path",
        "philschmid/mt-bench",
        "--num-prompts",
        "2",
    ];
    let out = bin()
        .current_dir(&dir)
        .env("HF_HOME", &home)
        .env_remove("HF_HUB_CACHE")
        .env_remove("HUGGINGFACE_HUB_CACHE")
        .arg("run")
        .args(args)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let looked = home.join("hub/datasets--philschmid--mt-bench/snapshots");
    assert!(err.contains(&looked.display().to_string()), "{err}");
    let snap = looked.join("0123abc/data");
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::write(
        snap.join("train.jsonl"),
        "{\"turns\": [\"Write a short note to a neighbour.\"]}\n{\"turns\": [\"Name three rivers in Europe.\"]}\n",
    )
    .unwrap();
    let out = bin()
        .current_dir(&dir)
        .env("HF_HOME", &home)
        .env_remove("HF_HUB_CACHE")
        .env_remove("HUGGINGFACE_HUB_CACHE")
        .arg("run")
        .args(args)
        .output()
        .unwrap();
    let stdout = ok(&out);
    assert!(
        stdout.contains("Successful requests:                     2"),
        "{stdout}"
    );
}

/// vLLM's engine arguments on `throughput` configure the simulator where they map, and say
/// which they do not.
#[test]
fn engine_arguments_configure_the_simulator_issue_28() {
    let out = bin()
        .args([
            "throughput",
            "--model",
            "Qwen/Qwen2.5-7B-Instruct",
            "-tp",
            "2",
            "--max-model-len",
            "4096",
            "--load-format",
            "dummy",
            "--input-len",
            "64",
            "--output-len",
            "8",
            "--num-prompts",
            "4",
        ])
        .output()
        .unwrap();
    ok(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "'Qwen/Qwen2.5-7B-Instruct' --gpu h100 --tensor-parallel-size 2 --max-model-len 4096"
        ),
        "{err}"
    );
    assert!(err.contains("--load-format ignored"), "{err}");
}
