//! The result files' layouts, pinned: a `*.servebench.json` and an `experiment.json` built
//! from fixed data must serialize to the committed snapshots byte for byte, and read back
//! into equal values. A layout change shows up here as a snapshot diff to review.

use std::collections::BTreeMap;

use servebench_metrics::result::{
    to_sorted_json_pretty, ClientHealth, ExperimentFile, MeasuredHealth, PlanSection, PointEntry,
    ProbeEntry, RequestRate, RowEntry, RunMetadata, RunResult, ServerReply, ServerTelemetry,
    SimConfig, SweepEntry, TargetInfo, TelemetrySample, EXPERIMENT_SCHEMA, RESULT_SCHEMA,
};
use servebench_metrics::{
    run_facts, summarize, CountSource, FactsOptions, RequestRecord, RunValidity, Slo, SloMetric,
    SummaryOptions, TokenEvent,
};

const MS: u64 = 1_000_000;

/// A completed request sent at `sent_ms`, first token after `ttft_ms`, `tokens` tokens
/// `gap_ms` apart.
fn record(id: u64, sent_ms: u64, ttft_ms: u64, gap_ms: u64, tokens: u64) -> RequestRecord {
    let first = (sent_ms + ttft_ms) * MS;
    let events: Vec<TokenEvent> = (0..tokens)
        .map(|k| TokenEvent {
            t: first + k * gap_ms * MS,
            chars: 4,
        })
        .collect();
    let end = events.last().map(|e| e.t);
    RequestRecord {
        phases: None,
        images: None,
        id,
        intended: sent_ms * MS,
        released: sent_ms * MS,
        sent: sent_ms * MS + MS / 2,
        started: None,
        bare_events: Vec::new(),
        first_token: Some(first),
        end,
        done: end,
        waited_for_slot: false,
        events,
        input_tokens: 64,
        input_source: CountSource::Usage,
        output_tokens: tokens,
        output_source: CountSource::Usage,
        intended_input_tokens: 64,
        max_tokens: Some(tokens),
        cached_tokens: None,
        finish_reason: Some("length".into()),
        text: None,
        failure: None,
        resent: 0,
        answer_checked: false,
        output_split: None,
        session_id: None,
        turn: None,
        stamp_clock: None,
        lora: None,
        served_by: None,
    }
}

fn sim_config() -> SimConfig {
    let config = serde_json::json!({
        "engine": "servebench-sim", "version": "0.1.0-sim", "model": "llama-3.1-8b",
        "served_model_name": "llama-3.1-8b", "gpu": "h100", "dtype": "bf16",
        "kv_cache_dtype": "auto", "tensor_parallel_size": 1, "max_num_seqs": 256,
        "max_num_batched_tokens": 8192, "max_model_len": 131072, "block_size": 16,
        "gpu_memory_utilization": 0.9, "num_gpu_blocks": 27978, "num_gpu_blocks_override": null,
        "enable_prefix_caching": true, "async_scheduling": false,
        "efficiency": {"mbu": 0.78, "mfu": 0.6},
        "overheads": {"step_overhead_us": 126.0, "link_gbps": 360.0},
        "kv_capacity": {"tokens": 447648},
    });
    serde_json::from_value(config).expect("a simulator configuration")
}

/// A run as the writer builds it, from fixed records and fixed metadata.
fn run_result() -> RunResult {
    let records: Vec<RequestRecord> = (0..6)
        .map(|i| record(i, i * 250, 30 + i % 3, 7 + i % 2, 8))
        .collect();
    let summary = summarize(
        &records,
        &SummaryOptions {
            duration_ns: Some(1_600 * MS),
            goodput: vec![Slo::per_request(SloMetric::Ttft, 31.5)],
            ..SummaryOptions::default()
        },
    );
    let summary_for_facts = summary.clone();
    let mut target = TargetInfo::simulator("real", "llama-3.1-8b --gpu h100", sim_config());
    target.server_version = Some(Some(ServerReply(
        serde_json::json!({"version": "0.1.0-sim"}),
    )));
    target.server_models = Some(None);
    RunResult {
        schema: RESULT_SCHEMA.to_owned(),
        servebench_version: "0.1.0".to_owned(),
        simulated: true,
        metadata: RunMetadata {
            date: "20260101-120000".to_owned(),
            command_line: [
                "servebench",
                "run",
                "--num-prompts",
                "6",
                "--api-key",
                "***",
            ]
            .map(str::to_owned)
            .to_vec(),
            backend: "vllm".to_owned(),
            label: None,
            model_id: "llama-3.1-8b".to_owned(),
            tokenizer: "builtin".to_owned(),
            seed: 0,
            host: "bench-host".to_owned(),
            user_metadata: BTreeMap::from([("team".to_owned(), "serving".to_owned())]),
            target,
            clock_anchor: None,
            shard: None,
        },
        plan: Some(PlanSection {
            dataset_name: "random".to_owned(),
            dataset_path: None,
            num_prompts: 6,
            request_rate: RequestRate("4.0".to_owned()),
            burstiness: 1.0,
            max_concurrency: Some(2),
            ramp_up: None,
            duration_s: None,
            random_input_len: 64,
            random_output_len: 8,
            random_range_ratio: 0.0,
            random_prefix_len: 0,
            random_prefix_mode: "shared".to_owned(),
            num_warmups: 0,
            percentile_metrics: vec!["ttft".into(), "tpot".into(), "itl".into()],
            metric_percentiles: vec![99.0],
            goodput: vec!["ttft:31.5".into()],
        }),
        summary,
        client_health: Some(ClientHealth::Measured(MeasuredHealth {
            dispatch_lag_p50_ms: Some(0.5),
            dispatch_lag_p99_ms: Some(0.5),
            dispatch_lag_max_ms: Some(0.5),
            cpu_user_s: 0.25,
            cpu_system_s: 0.125,
            cpu_percent: 23.4375,
            cpus: 2,
            client_limited: false,
            not_dispatched: 0,
            resent: 0,
            load_average: Some(0.5),
        })),
        server_telemetry: Some(ServerTelemetry {
            samples: vec![TelemetrySample {
                t: 1_000 * MS,
                running: Some(2.0),
                waiting: Some(0.0),
                kv_usage: Some(0.01),
                preemptions: None,
            }],
            counter_increase: BTreeMap::from([("vllm:num_preemptions_total".to_owned(), 0.0)]),
            max_waiting: Some(0.0),
            max_kv_usage: Some(0.01),
            failed_scrapes: 0,
        }),
        records_path: Some("run.requests.jsonl".to_owned()),
        validity: Some(RunValidity::from_facts(&run_facts(
            &records,
            &summary_for_facts,
            &FactsOptions {
                offered_rate: Some(4.0),
                ..FactsOptions::default()
            },
        ))),
        interrupted: false,
        prefix_hit: None,
        interrupted_reason: None,
        by_turn: Vec::new(),
        by_lora: Vec::new(),
        gpu_telemetry: None,
        stopped_early: None,
        agents: None,
        slices: None,
    }
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).expect("JSON is UTF-8")
}

#[test]
fn run_result_layout_is_pinned() {
    let json = text(to_sorted_json_pretty(&run_result()).expect("serializes"));
    insta::assert_snapshot!("run_result", json);
}

#[test]
fn run_result_reads_back_equal() {
    let written = run_result();
    let json = to_sorted_json_pretty(&written).expect("serializes");
    let read: RunResult = serde_json::from_slice(&json).expect("reads back");
    assert_eq!(read, written);
    assert_eq!(read.schema_mismatch(), None);
    // Writing what was read gives the same bytes.
    assert_eq!(to_sorted_json_pretty(&read).expect("serializes"), json);
}

#[test]
fn a_virtual_time_run_keeps_its_short_target_and_health() {
    let mut r = run_result();
    r.metadata.target = TargetInfo::simulator("virtual", "llama-3.1-8b", sim_config());
    r.client_health = Some(ClientHealth::virtual_time());
    r.server_telemetry = None;
    let v = serde_json::to_value(&r).expect("serializes");
    assert_eq!(
        v["client_health"],
        serde_json::json!({"virtual_time": true})
    );
    assert_eq!(v["server_telemetry"], serde_json::Value::Null);
    let target = v["metadata"]["target"].as_object().expect("an object");
    let keys: Vec<&str> = target.keys().map(String::as_str).collect();
    assert_eq!(keys, ["clock", "kind", "sim_config", "sim_spec"]);
    let read: RunResult = serde_json::from_value(v).expect("reads back");
    assert_eq!(read, r);
    assert!(read
        .client_health
        .and_then(|h| h.measured().cloned())
        .is_none());
}

#[test]
fn a_server_target_records_unanswered_probes_as_null() {
    let mut t = TargetInfo::server("http://gpu-host:8000");
    t.server_version = Some(None);
    t.server_models = Some(Some(ServerReply(
        serde_json::json!({"object": "list", "data": [{"id": "meta-llama/Llama-3.1-8B"}]}),
    )));
    let v = serde_json::to_value(&t).expect("serializes");
    assert_eq!(
        v,
        serde_json::json!({"kind": "server", "base_url": "http://gpu-host:8000",
            "server_version": null,
            "server_models": {"object": "list", "data": [{"id": "meta-llama/Llama-3.1-8B"}]}})
    );
    let read: TargetInfo = serde_json::from_value(v).expect("reads back");
    assert_eq!(read, t);
    assert_eq!(read.first_served_model(), Some("meta-llama/Llama-3.1-8B"));
    assert!(!read.is_simulator());
}

#[test]
fn a_minimal_result_still_loads() {
    let r: RunResult = serde_json::from_value(serde_json::json!({
        "summary": serde_json::to_value(&run_result().summary).expect("summary"),
    }))
    .expect("only the summary is required");
    assert_eq!(r.schema_mismatch(), None);
    assert!(r.plan.is_none() && r.client_health.is_none());
    let other: RunResult = serde_json::from_value(serde_json::json!({
        "schema": "servebench.result/v9",
        "summary": serde_json::to_value(&run_result().summary).expect("summary"),
    }))
    .expect("reads");
    assert_eq!(other.schema_mismatch(), Some("servebench.result/v9"));
}

fn experiment_file() -> ExperimentFile {
    ExperimentFile {
        schema: EXPERIMENT_SCHEMA.to_owned(),
        kind: "sweep".to_owned(),
        quick: true,
        title: "servebench sweep of D".to_owned(),
        rows: vec![RowEntry {
            id: "D".to_owned(),
            name: "mixed workload".to_owned(),
            hypothesis: "where the mixed workload saturates".to_owned(),
            runs: vec![
                "points/0/d.servebench.json".to_owned(),
                "points/1/d.servebench.json".to_owned(),
            ],
            repeat_summary: None,
        }],
        sweep: Some(SweepEntry {
            row: "D".to_owned(),
            variable: "request_rate".to_owned(),
            slos: vec!["ttft:p99:500".to_owned()],
            latency_metric: "ttft:p99".to_owned(),
            points: vec![
                PointEntry {
                    value: 2.0,
                    runs: vec!["points/0/d.servebench.json".to_owned()],
                    repeat_summary: None,
                },
                PointEntry {
                    value: f64::INFINITY,
                    runs: vec!["points/1/d.servebench.json".to_owned()],
                    repeat_summary: Some("points/1/repeat.json".to_owned()),
                },
            ],
            stopped_early: true,
            stop_reason: "p99 TTFT over 500 ms".to_owned(),
            knee: Some(0),
            frontier: vec![0, 1],
            saturation: Some(1),
            best_under_slo: Some(0),
            headline: Some("2 req/s meets p99 TTFT < 500 ms".to_owned()),
            probe: Some(ProbeEntry {
                max_concurrency: 64,
                request_throughput: 3.5,
                run: "probe/p.servebench.json".to_owned(),
            }),
            search: None,
            gpus: None,
        }),
        repeat: 1,
        notes: vec!["Quick run: fewer prompts per row.".to_owned()],
    }
}

#[test]
fn experiment_file_layout_is_pinned() {
    let json = serde_json::to_string_pretty(&experiment_file()).expect("serializes");
    insta::assert_snapshot!("experiment_file", json);
}

#[test]
fn experiment_file_reads_back_equal() {
    let written = experiment_file();
    let json = serde_json::to_string_pretty(&written).expect("serializes");
    let read: ExperimentFile = serde_json::from_str(&json).expect("reads back");
    assert_eq!(read, written);
}
