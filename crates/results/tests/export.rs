//! The exports of a result whose records file is gone (the summary's figures only), against
//! the published llm-d schema and vLLM's PyTorch record layout. Real runs, records included,
//! are exported and validated in the CLI's tests (`crates/cli/tests/it/results_db.rs`).

use std::path::{Path, PathBuf};

use serde_json::Value;
use servebench_metrics::result::{
    ClockAnchor, GpuSample, GpuSeries, GpuTelemetry, PlanSection, RequestRate, RunMetadata,
    RunResult, ServerTelemetry, TargetInfo, TelemetrySample, RESULT_SCHEMA,
};
use servebench_metrics::{summarize, MetricSummary, SummaryOptions};
use servebench_results::export::{llmd, pytorch, ExportRun};
use servebench_results::Context;

fn schema() -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llmd_br_v0_2_schema.json");
    serde_json::from_str(&std::fs::read_to_string(&p).expect("schema fixture")).expect("schema")
}

/// Every error the schema finds in `doc`, as text (empty when valid). Formats (`date-time`)
/// are checked too.
pub fn schema_errors(doc: &Value) -> Vec<String> {
    let validator = jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&schema())
        .expect("the schema compiles");
    validator
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

fn result() -> RunResult {
    let mut summary = summarize(&[], &SummaryOptions::default());
    summary.completed = 90;
    summary.failed = 10;
    summary.total_input_tokens = 90 * 1024;
    summary.total_output_tokens = 90 * 128;
    summary.duration_s = 30.0;
    summary.output_throughput = 384.0;
    summary.request_throughput = 3.0;
    summary.prompt_throughput = 3072.0;
    summary.total_token_throughput = 3456.0;
    summary.ttft = MetricSummary::from_ms((1..=90).map(f64::from).collect(), &[50.0, 90.0, 99.0]);
    summary.tpot = MetricSummary::from_ms(vec![10.0; 90], &[99.0]);
    summary.itl = MetricSummary::from_ms(vec![10.0; 900], &[99.0]);
    summary.e2el = MetricSummary::from_ms(vec![1300.0; 90], &[99.0]);
    let gpu = GpuTelemetry {
        source: "nvidia-smi".into(),
        gpus: vec![GpuSeries {
            gpu: "0".into(),
            samples: (0..30)
                .map(|s| GpuSample {
                    t: s * 1_000_000_000,
                    util_percent: Some(80.0),
                    memory_used_mib: Some(70_000.0),
                    power_w: Some(500.0),
                    sm_clock_mhz: Some(1980.0),
                })
                .collect(),
        }],
        ..GpuTelemetry::default()
    };
    summary.energy =
        servebench_metrics::energy(&gpu, 0, 30_000_000_000, summary.total_output_tokens);
    RunResult {
        schema: RESULT_SCHEMA.into(),
        servebench_version: "0.1.0".into(),
        simulated: false,
        metadata: RunMetadata {
            date: "20250102-030405".into(),
            command_line: vec![
                "servebench".into(),
                "run".into(),
                "--num-prompts".into(),
                "100".into(),
                "--save-result".into(),
            ],
            backend: "vllm".into(),
            model_id: "org/model".into(),
            tokenizer: "builtin".into(),
            host: "client-1".into(),
            target: TargetInfo::server("http://gpu-host:8000"),
            clock_anchor: Some(ClockAnchor {
                unix_ns: 1_735_786_445_000_000_000,
                source: "test".into(),
                start_at: None,
            }),
            ..RunMetadata::default()
        },
        plan: Some(PlanSection {
            dataset_name: "random".into(),
            num_prompts: 100,
            request_rate: RequestRate("4.0".into()),
            burstiness: 1.0,
            random_input_len: 1024,
            random_output_len: 128,
            random_range_ratio: 0.1,
            ..PlanSection::default()
        }),
        summary,
        client_health: None,
        server_telemetry: Some(ServerTelemetry {
            samples: vec![
                TelemetrySample {
                    t: 0,
                    running: Some(4.0),
                    waiting: Some(0.0),
                    kv_usage: Some(0.25),
                    preemptions: None,
                },
                TelemetrySample {
                    t: 1_000_000_000,
                    running: Some(8.0),
                    waiting: Some(2.0),
                    kv_usage: Some(0.5),
                    preemptions: None,
                },
            ],
            ..ServerTelemetry::default()
        }),
        records_path: Some("gone.requests.jsonl".into()),
        validity: None,
        interrupted: false,
        interrupted_reason: None,
        prefix_hit: None,
        by_turn: Vec::new(),
        by_lora: Vec::new(),
        gpu_telemetry: Some(gpu),
        stopped_early: None,
        agents: None,
        slices: None,
    }
}

fn written(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("servebench-export-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let p = dir.join("a.servebench.json");
    std::fs::write(&p, serde_json::to_vec_pretty(&result()).expect("json")).expect("write");
    p
}

#[test]
fn the_llmd_report_of_a_summary_validates_against_the_published_schema() {
    let path = written("llmd");
    let run = ExportRun::load(&path, Context::run()).expect("load");
    assert!(run.records.is_none());
    let doc = llmd::report(&run);
    let errors = schema_errors(&doc);
    assert!(errors.is_empty(), "{errors:#?}\n{doc:#}");
    assert_eq!(doc["version"], "0.2");
    let agg = &doc["results"]["request_performance"]["aggregate"];
    assert_eq!(agg["requests"]["total"], 100);
    assert_eq!(agg["requests"]["failures"], 10);
    assert_eq!(agg["latency"]["time_to_first_token"]["p99"], doc_p99());
    assert_eq!(agg["throughput"]["output_token_rate"]["mean"], 384.0);
    let obs = &doc["results"]["observability"];
    assert_eq!(
        obs["components"][0]["aggregate"]["power_consumption"],
        serde_json::json!({"units": "Watts", "mean": 500.0})
    );
    assert_eq!(obs["energy"]["avg_power_w"], 500.0);
    assert_eq!(doc["run"]["time"]["start"], "2025-01-02T02:54:05.000Z");
    assert_eq!(doc["run"]["time"]["duration"], "PT30S");
    assert_eq!(
        doc["scenario"]["load"]["standardized"]["input_seq_len"]["distribution"],
        "uniform"
    );
    // The validator bites: a report without its run id is refused.
    let mut broken = doc.clone();
    broken["run"].as_object_mut().map(|o| o.remove("uid"));
    assert!(!schema_errors(&broken).is_empty());
    let mut broken = doc;
    broken["results"]["request_performance"]["aggregate"]["latency"]["time_to_first_token"]
        ["units"] = "furlongs".into();
    assert!(!schema_errors(&broken).is_empty());
    std::fs::remove_dir_all(path.parent().expect("dir")).ok();
}

/// p99 of TTFT samples 1..=90 ms as the summary computed it.
fn doc_p99() -> Value {
    let s = MetricSummary::from_ms((1..=90).map(f64::from).collect(), &[99.0]);
    serde_json::json!(s.percentiles[0].value)
}

#[test]
fn pytorch_records_follow_vllm() {
    let path = written("pytorch");
    let run = ExportRun::load(&path, Context::run()).expect("load");
    let records = pytorch::records(&run);
    let names: Vec<&str> = records
        .iter()
        .filter_map(|r| r["metric"]["name"].as_str())
        .collect();
    assert_eq!(names, pytorch::METRICS.to_vec());
    for r in &records {
        assert_eq!(r["benchmark"]["name"], "vLLM benchmark");
        assert_eq!(r["model"]["name"], "org/model");
        let args = &r["benchmark"]["extra_info"]["args"];
        assert_eq!(args["model"], "org/model");
        assert_eq!(args["request_rate"], 4.0);
        let values = r["metric"]["benchmark_values"].as_array().expect("values");
        assert_eq!(values.len(), 1);
        let extra = r["metric"]["extra_info"].as_object().expect("extra");
        for k in pytorch::METRICS.iter().chain(pytorch::IGNORED.iter()) {
            assert!(!extra.contains_key(*k), "{k} in extra_info");
        }
        assert_eq!(extra["completed"], 90);
        assert_eq!(extra["output_throughput"], 384.0);
    }
    assert_eq!(records[3]["metric"]["name"], "p99_ttft_ms");
    std::fs::remove_dir_all(path.parent().expect("dir")).ok();
}
