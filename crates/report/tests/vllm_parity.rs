//! The vLLM-format result against values worked out by hand from vLLM's definitions
//! (vllm/benchmarks/serve.py, lib/endpoint_request_func.py), on hand-built records.

use servebench_metrics::vllm::SpecDecodeStats;
use servebench_metrics::{summarize, CountSource, RequestRecord, SummaryOptions, TokenEvent};
use servebench_report::pyjson::PyValue;
use servebench_report::{to_python_json, vllm_result, OrderedObject, VllmRunInfo};

const MS: u64 = 1_000_000;

/// A chat-like request: intended at 0, started at `started_ms`, its first byte written at
/// `sent_ms`, a role-only chunk at `role_ms`, tokens at `token_ms`.
fn record(id: u64, started_ms: u64, sent_ms: u64, role_ms: u64, token_ms: &[u64]) -> RequestRecord {
    let events: Vec<TokenEvent> = token_ms
        .iter()
        .map(|&t| TokenEvent {
            t: t * MS,
            chars: 3,
        })
        .collect();
    RequestRecord {
        phases: None,
        images: None,
        id,
        intended: 0,
        released: 0,
        sent: sent_ms * MS,
        started: Some(started_ms * MS),
        bare_events: vec![role_ms * MS],
        first_token: events.first().map(|e| e.t),
        end: events.last().map(|e| e.t),
        done: events.last().map(|e| e.t + MS),
        waited_for_slot: false,
        input_tokens: 10,
        input_source: CountSource::Usage,
        output_tokens: events.len() as u64,
        output_source: CountSource::Usage,
        intended_input_tokens: 10,
        events,
        max_tokens: None,
        cached_tokens: None,
        finish_reason: Some("stop".into()),
        text: Some("ok".into()),
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

fn info(metrics: &[&str], max_concurrency: Option<usize>, rate: f64) -> VllmRunInfo {
    VllmRunInfo {
        date: "20260101-000000".into(),
        backend: "openai-chat".into(),
        label: None,
        model_id: "org/model".into(),
        tokenizer_id: "org/model".into(),
        num_prompts: 2,
        metadata: Vec::new(),
        request_rate: rate,
        burstiness: 1.0,
        max_concurrency,
        ramp_up: None,
        rps_change_events: Vec::new(),
        spec_decode: None,
        duration_s: 1.0,
        percentile_metrics: metrics.iter().map(|m| m.to_string()).collect(),
        percentiles: vec![50.0],
        goodput: Vec::new(),
        detailed: true,
    }
}

fn f(o: &OrderedObject, k: &str) -> f64 {
    o.get(k)
        .and_then(PyValue::as_f64)
        .unwrap_or_else(|| panic!("{k} missing"))
}

fn floats(o: &OrderedObject, k: &str) -> Vec<f64> {
    o.get(k)
        .and_then(PyValue::as_list)
        .unwrap_or_else(|| panic!("{k} missing"))
        .iter()
        .filter_map(PyValue::as_f64)
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// Request 0: started 2 ms, sent 5 ms, role chunk 10 ms, tokens 30 and 40 ms.
/// Request 1: started 1 ms, sent 1 ms, role chunk 21 ms, tokens 21, 31, 41 ms.
///
/// vLLM: TTFT is the role chunk minus `st`: 8 ms and 20 ms. ITLs: [20, 10] and [0, 10, 10].
/// Latency: 38 and 40 ms. TPOT = (latency − TTFT) / (tokens − 1): 30/1 = 30 and 20/2 = 10.
/// servebench's own (`sent`, content events only): TTFT 25 and 20 ms, ITLs [10] and [10, 10].
#[test]
fn vllm_figures_count_role_chunks_and_start_at_st_regression_issue_12() {
    let records = vec![
        record(0, 2, 5, 10, &[30, 40]),
        record(1, 1, 1, 21, &[21, 31, 41]),
    ];
    let o = vllm_result(&info(&["ttft", "tpot", "itl", "e2el"], None, 1.0), &records);
    let ttfts = floats(&o, "ttfts");
    assert!(
        close(ttfts[0], 0.008) && close(ttfts[1], 0.020),
        "{ttfts:?}"
    );
    let latencies = floats(&o, "latencies");
    assert!(close(latencies[0], 0.038) && close(latencies[1], 0.040));
    let starts = floats(&o, "start_times");
    assert!(close(starts[0], 0.002) && close(starts[1], 0.001));
    let itls: Vec<Vec<f64>> = o
        .get("itls")
        .and_then(PyValue::as_list)
        .expect("itls")
        .iter()
        .map(|l| {
            l.as_list()
                .expect("list")
                .iter()
                .filter_map(PyValue::as_f64)
                .collect()
        })
        .collect();
    assert_eq!(itls.len(), 2);
    assert!(
        close(itls[0][0], 0.020) && close(itls[0][1], 0.010),
        "{itls:?}"
    );
    assert_eq!(itls[1].len(), 3);
    assert!(close(itls[1][0], 0.0));
    assert!(close(f(&o, "mean_ttft_ms"), 14.0));
    assert!(close(f(&o, "mean_tpot_ms"), 20.0));
    // Pooled ITLs 20, 10, 0, 10, 10 ms.
    assert!(close(f(&o, "mean_itl_ms"), 10.0));
    assert!(close(f(&o, "median_itl_ms"), 10.0));
    assert!(close(f(&o, "mean_e2el_ms"), 39.0));
    // vLLM's peak bucket counts the role chunks as tokens: 7 events in the first second.
    assert!(close(f(&o, "max_output_tokens_per_s"), 7.0));

    // servebench's own summary keeps its stricter definitions.
    let s = summarize(&records, &SummaryOptions::default());
    assert!(close(s.ttft.mean.expect("mean"), 22.5));
    assert!(close(s.itl.mean.expect("mean"), 10.0));
    assert_eq!(s.itl.n, 3);
}

fn stats_keys(o: &OrderedObject) -> Vec<String> {
    o.keys()
        .filter(|k| k.starts_with("mean_"))
        .map(|k| {
            k.trim_start_matches("mean_")
                .trim_end_matches("_ms")
                .to_owned()
        })
        .collect()
}

/// vLLM writes the statistics blocks in its own order: ttft, tpot, itl, e2el,
/// client_queue_time, e2el_including_client_queue, whatever `--percentile-metrics` says.
#[test]
fn statistics_blocks_are_in_vllms_fixed_order_regression_issue_12() {
    let records = vec![record(0, 2, 5, 10, &[30, 40])];
    let o = vllm_result(
        &info(
            &[
                "e2el_including_client_queue",
                "e2el",
                "client_queue_time",
                "itl",
                "tpot",
                "ttft",
            ],
            Some(4),
            10.0,
        ),
        &records,
    );
    assert_eq!(
        stats_keys(&o),
        [
            "ttft",
            "tpot",
            "itl",
            "e2el",
            "client_queue_time",
            "e2el_including_client_queue"
        ]
    );
    let keys: Vec<&str> = o.keys().collect();
    let at = |k: &str| keys.iter().position(|x| *x == k).expect(k);
    assert_eq!(
        &keys[at("mean_ttft_ms")..at("mean_tpot_ms")],
        [
            "mean_ttft_ms",
            "median_ttft_ms",
            "std_ttft_ms",
            "p50_ttft_ms"
        ]
    );
}

/// `client_queue_time` only with `--max-concurrency`; `e2el_including_client_queue` only with
/// `--max-concurrency` and a finite rate. The queue time is `st − arrival`: 2 ms here, where
/// servebench's own queue time (to the first byte written) is 5 ms.
#[test]
fn client_queue_time_needs_max_concurrency_regression_issue_12() {
    let records = vec![record(0, 2, 5, 10, &[30, 40])];
    let both = ["ttft", "client_queue_time", "e2el_including_client_queue"];
    let o = vllm_result(&info(&both, None, 10.0), &records);
    assert_eq!(stats_keys(&o), ["ttft"]);
    let o = vllm_result(&info(&both, Some(1), f64::INFINITY), &records);
    assert_eq!(stats_keys(&o), ["ttft", "client_queue_time"]);
    let o = vllm_result(&info(&both, Some(1), 10.0), &records);
    assert_eq!(
        stats_keys(&o),
        ["ttft", "client_queue_time", "e2el_including_client_queue"]
    );
    assert!(close(f(&o, "mean_client_queue_time_ms"), 2.0));
    // Latency 38 ms + queue 2 ms.
    assert!(close(f(&o, "mean_e2el_including_client_queue_ms"), 40.0));
    // queue_times is written either way, as vLLM does.
    assert!(close(floats(&o, "queue_times")[0], 0.002));
}

/// `rps_change_events` and the `spec_decode_*` keys sit after `rtfx` and before the
/// statistics, in vLLM's shapes.
#[test]
fn ramp_and_spec_decode_keys_are_placed_as_vllm_places_them_regression_issue_12() {
    let records = vec![record(0, 2, 5, 10, &[30, 40])];
    let mut i = info(&["ttft"], None, f64::INFINITY);
    i.ramp_up = Some(("linear".into(), 1, 2));
    i.rps_change_events = vec![
        (1, "2026-01-01T00:00:00.250000".into()),
        (2, "2026-01-01T00:00:01".into()),
    ];
    i.spec_decode = Some(SpecDecodeStats {
        acceptance_rate: 50.0,
        acceptance_length: 2.5,
        num_drafts: 40,
        draft_tokens: 120,
        accepted_tokens: 60,
        per_position_acceptance_rates: vec![0.9, 0.6],
    });
    let o = vllm_result(&i, &records);
    let keys: Vec<&str> = o.keys().collect();
    let rtfx = keys.iter().position(|k| *k == "rtfx").expect("rtfx");
    assert_eq!(
        &keys[rtfx..rtfx + 9],
        [
            "rtfx",
            "rps_change_events",
            "spec_decode_acceptance_rate",
            "spec_decode_acceptance_length",
            "spec_decode_num_drafts",
            "spec_decode_draft_tokens",
            "spec_decode_accepted_tokens",
            "spec_decode_per_position_acceptance_rates",
            "mean_ttft_ms",
        ]
    );
    let text = String::from_utf8(to_python_json(&o)).expect("utf-8");
    assert!(
        text.contains(
            r#""rps_change_events": [{"rps": 1, "timestamp": "2026-01-01T00:00:00.250000"}, {"rps": 2, "timestamp": "2026-01-01T00:00:01"}], "spec_decode_acceptance_rate": 50.0, "spec_decode_acceptance_length": 2.5, "spec_decode_num_drafts": 40, "spec_decode_draft_tokens": 120, "spec_decode_accepted_tokens": 60, "spec_decode_per_position_acceptance_rates": [0.9, 0.6], "mean_ttft_ms""#
        ),
        "{text}"
    );
    let terminal = servebench_report::terminal::vllm_block(&o, &[50.0], false);
    assert!(
        terminal.contains("--------------Speculative Decoding--------------"),
        "{terminal}"
    );
    // vLLM's `"{:<40} {:<10.2f}"` lines.
    assert!(terminal.contains(&format!("{:<40} {:<10}\n", "Acceptance length:", "2.50")));
    assert!(terminal.contains(&format!("{:<40} {:<10}\n", "Drafts:", 40)));
    assert!(
        terminal.contains(&format!("{:<40} {:<10}\n", "  Position 1:", "60.00")),
        "{terminal}"
    );
}

/// Floats as Python's `json.dump` writes them: a 10 µs TTFT is `1e-05`, not `1e-5`, and an
/// infinite burstiness is `Infinity`.
#[test]
fn floats_are_written_as_pythons_json_regression_issue_12() {
    // Started at 0, role chunk at 10 µs.
    let mut r = record(0, 0, 0, 0, &[1]);
    r.bare_events = vec![10_000];
    let mut i = info(&["ttft"], None, 4.0);
    i.burstiness = f64::INFINITY;
    let o = vllm_result(&i, &[r]);
    let text = String::from_utf8(to_python_json(&o)).expect("utf-8");
    assert!(text.contains(r#""ttfts": [1e-05]"#), "{text}");
    assert!(
        text.contains(r#""request_rate": 4.0, "burstiness": Infinity"#),
        "{text}"
    );
    assert!(text.contains(r#""rtfx": 0.0"#), "{text}");
}
