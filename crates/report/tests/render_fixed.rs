//! The renderers on fixed, hand-built records: a two-row matrix (one row repeated) and a
//! four-point sweep. Each test asserts the content a reader relies on.

use servebench_metrics::{summarize, CountSource, RequestRecord, SummaryOptions, TokenEvent};
use servebench_report::render::{
    csv_columns, render_csv, render_html, render_markdown, render_terminal,
};
use servebench_report::{
    ExperimentKind, ExperimentReport, RowReport, RunData, SweepPointReport, SweepReport,
};

const MS: u64 = 1_000_000;

/// A completed request sent at `sent_ms` with its first token after `ttft_ms` and `tokens`
/// tokens `gap_ms` apart.
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
        sent: sent_ms * MS,
        started: None,
        bare_events: Vec::new(),
        first_token: Some(first),
        end,
        done: end,
        waited_for_slot: false,
        events,
        input_tokens: 256,
        input_source: CountSource::Usage,
        output_tokens: tokens,
        output_source: CountSource::Usage,
        intended_input_tokens: 256,
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

/// `n` requests one every 100 ms with the given TTFT and gap.
fn run(path: &str, n: u64, ttft_ms: u64, gap_ms: u64) -> RunData {
    let records: Vec<RequestRecord> = (0..n)
        .map(|i| record(i, i * 100, ttft_ms + i % 3, gap_ms, 16))
        .collect();
    RunData {
        path: path.into(),
        summary: summarize(&records, &SummaryOptions::default()),
        records,
        metadata: serde_json::from_value(serde_json::json!({
            "model_id": "llama-3.1-8b",
            "date": "20260101-120000",
            "command_line": ["servebench", "run", "--virtual-time"],
            "target": {"kind": "simulator", "clock": "virtual", "sim_spec": "llama-3.1-8b --gpu h100"}
        }))
        .expect("metadata"),
        plan: None,
        telemetry: None,
        validity: None,
        prefix_hit: None,
        gpu: None,
        agents: None,
        slices: None,
    }
}

fn matrix() -> ExperimentReport {
    let mut r = ExperimentReport::new("Fixed matrix", ExperimentKind::Matrix);
    r.quick = true;
    r.notes.push("Target: simulated engine.".into());
    r.rows.push(RowReport {
        id: "A".into(),
        name: "interactive baseline".into(),
        hypothesis: "One user sees the best latency".into(),
        runs: vec![run("rows/A/a.servebench.json", 20, 30, 7)],
    });
    r.rows.push(RowReport {
        id: "B".into(),
        name: "long prefill".into(),
        hypothesis: "Long prompts raise TTFT | not TPOT".into(),
        runs: vec![
            run("rows/B/repeat-1/b.servebench.json", 20, 100, 7),
            run("rows/B/repeat-2/b.servebench.json", 20, 120, 7),
        ],
    });
    r.extra_sections.push((
        "Interpretation".into(),
        "Row B is **prefill-bound**.\n\n- TTFT ×4\n".into(),
    ));
    r
}

fn sweep() -> ExperimentReport {
    let mut r = ExperimentReport::new("Fixed sweep", ExperimentKind::Sweep);
    let points = [(1.0, 20, 7), (2.0, 25, 8), (4.0, 40, 9), (8.0, 400, 12)]
        .iter()
        .enumerate()
        .map(|(i, &(rate, ttft, gap))| SweepPointReport {
            value: rate,
            runs: vec![run(&format!("points/{i}/p.servebench.json"), 30, ttft, gap)],
        })
        .collect();
    r.sweep = Some(SweepReport {
        row: "D".into(),
        variable: "request_rate".into(),
        slos: vec!["ttft:p99:300".into()],
        latency_metric: Some("ttft:p99".into()),
        points,
        knee: Some(2),
        headline: Some("1,000 output tok/s at p99 TTFT < 300 ms (rate 4 req/s)".into()),
        stop_reason: Some("latency past 5× the lightest load".into()),
        search: None,
        gpus: None,
    });
    r
}

#[test]
fn terminal_table_has_one_compact_line_per_row() {
    let text = render_terminal(&matrix());
    assert!(text.starts_with("== Fixed matrix ==\n"), "{text}");
    assert!(text.contains("quick run"));
    let header = text
        .lines()
        .find(|l| l.starts_with("row"))
        .expect("header line");
    for col in [
        "req/s",
        "output tok/s",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "TPOT p50 ms",
        "TPOT p99 ms",
        "ITL p99 ms",
        "failed",
    ] {
        assert!(header.contains(col), "{col} missing from {header}");
    }
    let a = text.lines().find(|l| l.starts_with("A ")).expect("row A");
    // 20 requests, TTFT 30/31/32 ms: p50 31 ms; TPOT is exactly the 7 ms gap.
    assert!(a.contains("interactive baseline"), "{a}");
    assert!(a.contains(" 31.0 "), "{a}");
    assert!(a.contains(" 7.00 "), "{a}");
    let b = text.lines().find(|l| l.starts_with("B ")).expect("row B");
    // Two repeats: mean ± std of the p50 TTFT (101 and 121 ms).
    assert!(b.contains("111.0 ± 10.0"), "{b}");
    assert!(b.contains("  2  "), "two runs: {b}");
}

#[test]
fn markdown_puts_each_question_beside_its_numbers() {
    let md = render_markdown(&matrix());
    assert!(md.starts_with("# Fixed matrix\n"));
    assert!(md.contains("numbers from a quick run"));
    assert!(md.contains("- Target: simulated engine."));
    let row_a = md
        .lines()
        .find(|l| l.starts_with("| A |"))
        .expect("row A line");
    assert!(
        row_a.contains("| One user sees the best latency |"),
        "{row_a}"
    );
    assert!(row_a.contains("| 31.0 |"), "{row_a}");
    let row_b = md.lines().find(|l| l.starts_with("| B |")).expect("row B");
    assert!(
        row_b.contains("raise TTFT \\| not TPOT"),
        "pipes escaped: {row_b}"
    );
    assert!(md.contains("| --- | --- | --- | ---: |"));
    assert!(md.contains("## Interpretation\n\nRow B is **prefill-bound**."));
}

#[test]
fn markdown_of_a_sweep_names_frontier_knee_and_headline() {
    let md = render_markdown(&sweep());
    assert!(md.contains("**Headline:** 1,000 output tok/s at p99 TTFT < 300 ms (rate 4 req/s)"));
    assert!(md.contains("## Sweep: request_rate over row D"));
    assert!(md.contains("SLOs: `ttft:p99:300`"));
    let knee_line = md.lines().find(|l| l.contains("◀ knee")).expect("knee row");
    assert!(knee_line.starts_with("| 4 |"), "{knee_line}");
    assert!(md.contains("Knee of the output-throughput vs p99 TTFT frontier: **rate 4 req/s**."));
    assert!(md.contains("Stopped early: latency past 5× the lightest load"));
}

#[test]
fn csv_has_one_line_per_run_with_stable_columns() {
    let csv = render_csv(&matrix());
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 1 + 3, "header + 3 runs");
    assert_eq!(lines[0], csv_columns().join(","));
    let cols = csv_columns();
    let col = |name: &str| cols.iter().position(|c| c == name).expect(name);
    let cells: Vec<&str> = lines[2].split(',').collect();
    assert_eq!(cells.len(), cols.len());
    assert_eq!(cells[col("row_id")], "B");
    assert_eq!(cells[col("run_index")], "0");
    assert_eq!(cells[col("run_path")], "rows/B/repeat-1/b.servebench.json");
    assert_eq!(cells[col("completed")], "20");
    assert_eq!(cells[col("ttft_p50_ms")], "101");
    assert_eq!(cells[col("tpot_p99_ms")], "7");
    assert_eq!(cells[col("quick")], "true");
    assert_eq!(cells[col("target")], "sim: llama-3.1-8b --gpu h100");
    // The hypothesis is not a CSV column; a sweep's runs carry their swept value.
    let sweep_csv = render_csv(&sweep());
    let last = sweep_csv.lines().last().expect("a run line");
    let cells: Vec<&str> = last.split(',').collect();
    assert_eq!(cells[col("sweep_variable")], "request_rate");
    assert_eq!(cells[col("sweep_value")], "8");
    assert_eq!(cells[col("row_id")], "D");
}

#[test]
fn html_is_self_contained_with_every_chart_and_table() {
    let html = render_html(&sweep());
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("Content-Security-Policy"));
    for forbidden in ["http://", "https://", "src=", "<link", "@import"] {
        let hits: Vec<&str> = html
            .match_indices(forbidden)
            .map(|(i, _)| &html[i.saturating_sub(30)..(i + 40).min(html.len())])
            .filter(|ctx| !ctx.contains("http://www.w3.org/2000/svg"))
            .collect();
        assert!(hits.is_empty(), "{forbidden} found: {hits:?}");
    }
    for id in [
        "id=\"frontier-ttft-p99\"",
        "id=\"frontier-ttft-p99-points\"",
        "id=\"knee\"",
        "class=\"ref slo\"",
        "SLO p99 TTFT &lt; 300 ms",
        "id=\"cdf-ttft-point-0\"",
        "id=\"cdf-tpot-point-3\"",
        "id=\"cdf-itl-point-2\"",
        "id=\"ts-output-point-1\"",
        "id=\"ts-inflight-point-1\"",
        "id=\"ts-ttft-point-3\"",
        "id=\"ts-tpot-point-0\"",
        "id=\"sweep-table\"",
        "id=\"run-point-0-0-metrics\"",
        "id=\"headline\"",
    ] {
        assert!(html.contains(id), "{id} missing");
    }
    assert!(html.contains("knee: rate 4 req/s"));
    assert!(!html.contains("NaN"), "no NaN coordinates");
    // The frontier series has one point per sweep point, each with a tooltip.
    assert!(html.contains("data-points=\"4\""));
    assert!(html.contains("<title>rate 8 req/s: "));
}

#[test]
fn html_of_a_matrix_shows_rows_questions_and_extra_sections() {
    let html = render_html(&matrix());
    assert!(html.contains("id=\"rows-table\""));
    assert!(html.contains("<td class=\"col-question\">One user sees the best latency</td>"));
    assert!(html.contains("id=\"quick-note\""));
    assert!(html.contains("id=\"cdf-ttft-A\"") && html.contains("id=\"cdf-ttft-B\""));
    assert!(html.contains("<h2>Interpretation</h2>"));
    assert!(html.contains("<strong>prefill-bound</strong>"));
    assert!(html.contains("groups with repeated runs show their first run"));
    assert!(!html.contains("id=\"frontier-"), "a matrix has no frontier");
}

#[test]
fn runs_without_records_still_render() {
    let mut r = matrix();
    for row in &mut r.rows {
        for run in &mut row.runs {
            run.records.clear();
        }
    }
    let html = render_html(&r);
    assert!(html.contains("no per-request records for: A · interactive baseline"));
    assert!(
        html.contains("id=\"ts-output-A\""),
        "time series come from the summary"
    );
    assert!(render_terminal(&r).contains("B "));
}

/// A run whose requests reasoned shows TTFAT beside TTFT and the reasoning share in its HTML
/// table and facts; the plain runs of the same report do not.
#[test]
fn html_shows_time_to_first_answer_only_for_runs_that_reasoned() {
    let mut report = matrix();
    let plain = render_html(&report);
    assert!(!plain.contains("TTFAT") && !plain.contains("reasoning share"));
    let records: Vec<RequestRecord> = (0..10)
        .map(|i| {
            let mut r = record(i, i * 100, 30, 7, 16);
            r.output_split = Some(servebench_metrics::OutputSplit {
                first_answer: Some(r.events[12].t),
                reasoning_tokens: 12,
                reasoning_source: CountSource::Usage,
                tool_calls: false,
            });
            r
        })
        .collect();
    let run = &mut report.rows[0].runs[0];
    run.summary = summarize(&records, &SummaryOptions::default());
    run.records = records;
    let html = render_html(&report);
    // TTFT 30 ms plus 12 gaps of 7 ms.
    let at = html
        .find("TTFAT (first answer) (ms)")
        .unwrap_or_else(|| panic!("no TTFAT row in {html}"));
    let row = &html[at..html[at..].find("</tr>").map_or(html.len(), |e| at + e)];
    assert!(row.contains(">114"), "TTFAT of 114 ms: {row}");
    assert!(html.contains("reasoning share of output"));
    assert!(html.contains("75.0 % (120 reasoning / 40 answer tokens)"));
}

/// A sweep whose second point carries server and GPU telemetry on its run's clock.
fn sweep_with_telemetry() -> ExperimentReport {
    use servebench_metrics::result::{
        GpuSample, GpuSeries, GpuTelemetry, ServerTelemetry, TelemetrySample,
    };
    let mut r = sweep();
    let Some(s) = r.sweep.as_mut() else {
        unreachable!("sweep() has a sweep")
    };
    let run = &mut s.points[1].runs[0];
    run.metadata.target.clock = Some("real".into());
    run.telemetry = Some(ServerTelemetry {
        samples: (0..4)
            .map(|k| TelemetrySample {
                t: k * 1_000 * MS,
                running: Some(k as f64),
                waiting: Some(0.0),
                kv_usage: Some(0.1 * k as f64),
                preemptions: Some(5.0 + k as f64),
            })
            .collect(),
        ..ServerTelemetry::default()
    });
    run.gpu = Some(GpuTelemetry {
        source: "nvidia-smi".into(),
        gpus: ["0", "1"]
            .iter()
            .map(|g| GpuSeries {
                gpu: (*g).into(),
                samples: (0..4)
                    .map(|k| GpuSample {
                        t: k * 1_000 * MS + 3 * MS,
                        util_percent: Some(90.0),
                        memory_used_mib: Some(70_000.0),
                        power_w: Some(650.0),
                        sm_clock_mhz: Some(1980.0),
                    })
                    .collect(),
            })
            .collect(),
        ..GpuTelemetry::default()
    });
    s.points[2].runs[0].metadata.target.clock = Some("real".into());
    s.points[2].runs[0].gpu = Some(GpuTelemetry::unavailable());
    r
}

#[test]
fn html_timeline_puts_telemetry_beside_latency_on_one_time_axis() {
    let html = render_html(&sweep_with_telemetry());
    // Every point's timeline is linked from the sweep section.
    let links = html
        .split("id=\"timeline-links\"")
        .nth(1)
        .and_then(|s| s.split("</p>").next())
        .expect("timeline links");
    for i in 0..4 {
        assert!(
            links.contains(&format!("href=\"#timeline-details-point-{i}\"")),
            "{links}"
        );
        assert!(html.contains(&format!("id=\"timeline-details-point-{i}\"")));
    }
    // Point 1: TTFT, requests (client and server), KV cache and GPU in one timeline block.
    let block = html
        .split("id=\"timeline-point-1\"")
        .nth(1)
        .and_then(|s| s.split("</details>").next())
        .expect("point 1 timeline");
    for id in [
        "timeline-point-1-ttft-points",
        "timeline-point-1-inflight",
        "timeline-point-1-running",
        "timeline-point-1-waiting",
        "timeline-point-1-preemptions",
        "timeline-point-1-kv",
        "timeline-point-1-gpu0-util",
        "timeline-point-1-gpu1-util",
        "timeline-point-1-gpu0-power",
        "timeline-point-1-gpu1-memory",
    ] {
        assert!(block.contains(&format!("id=\"{id}\"")), "{id} missing");
    }
    // Preemptions count from the first sample; KV usage is drawn in percent.
    assert!(block.contains("preemptions since start (server): 0.00 preemptions at 0.0 s"));
    assert!(
        block.contains("KV-cache usage (server): 30.0 % at 3.0 s"),
        "{block}"
    );
    // One time axis: every chart of the block ends its x axis at the same tick.
    let last_ticks: Vec<&str> = block
        .split("<figure")
        .skip(1)
        .filter_map(|fig| {
            fig.split("class=\"tx\"")
                .last()
                .and_then(|t| t.split('>').nth(1))
                .and_then(|t| t.split('<').next())
        })
        .collect();
    assert_eq!(last_ticks.len(), 5, "{last_ticks:?}");
    assert!(
        last_ticks.windows(2).all(|w| w[0] == w[1]),
        "{last_ticks:?}"
    );
    // Without telemetry the timeline says why.
    let p0 = html
        .split("id=\"timeline-point-0\"")
        .nth(1)
        .and_then(|s| s.split("</details>").next())
        .expect("point 0 timeline");
    assert!(p0.contains("virtual-time simulation"), "{p0}");
    let p2 = html
        .split("id=\"timeline-point-2\"")
        .nth(1)
        .and_then(|s| s.split("</details>").next())
        .expect("point 2 timeline");
    assert!(
        p2.contains("no GPU telemetry (nvidia-smi not found)"),
        "{p2}"
    );
    assert!(!html.contains("NaN"));
}

#[test]
fn html_frontier_plots_per_gpu_throughput_against_per_user_speed_with_the_slo() {
    let mut r = sweep();
    let Some(s) = r.sweep.as_mut() else {
        unreachable!("sweep() has a sweep")
    };
    s.slos.push("tpot:p99:10".into());
    s.gpus = Some(2);
    let html = render_html(&r);
    let chart = html
        .split("id=\"frontier-per-gpu\"")
        .nth(1)
        .and_then(|c| c.split("</figure>").next())
        .expect("per-GPU frontier");
    assert!(chart.contains("output tok/s per GPU (2 GPUs)"), "{chart}");
    assert!(
        chart.contains("tok/s per user (1000 / p99 TPOT)"),
        "{chart}"
    );
    // The TPOT objective as the slowest streaming allowed: 1000 / 10 ms = 100 tok/s.
    assert!(
        chart.contains("SLO p99 TPOT &lt; 10 ms: ≥ 100 tok/s per user"),
        "{chart}"
    );
    assert!(chart.contains("data-points=\"4\""), "{chart}");
    // Point 0 (gap 7 ms): about 143 tok/s per user.
    assert!(chart.contains("rate 1 req/s: 14"), "{chart}");
    // Without a GPU count the chart says 1 was assumed.
    let html = render_html(&sweep());
    assert!(html.contains("GPU count not recorded: 1 assumed"));
}

#[test]
fn html_shows_a_search_with_its_steps_and_answer() {
    use servebench_metrics::result::{SearchEntry, SearchPointEntry};
    let mut r = sweep();
    let Some(s) = r.sweep.as_mut() else {
        unreachable!("sweep() has a sweep")
    };
    let step = |value: f64, point: usize, passed: bool, over: Option<&str>| SearchPointEntry {
        value,
        point,
        passed,
        reason: (!passed).then(|| over.unwrap_or("p99 TTFT 400.0 ms breaks").to_owned()),
        over_saturated: over.map(str::to_owned),
        slo_values: vec![("p99 TTFT < 300 ms".into(), [250.0, 240.0, 260.0])],
        ..SearchPointEntry::default()
    };
    s.search = Some(SearchEntry {
        tolerance: 0.05,
        start: 1.0,
        cap: 8.0,
        tried: vec![
            step(1.0, 0, true, None),
            step(2.0, 1, true, None),
            step(
                8.0,
                3,
                false,
                Some("over-saturated: in flight rose linearly"),
            ),
            step(4.0, 2, true, None),
        ],
        answer: Some(4.0),
        first_failing: Some(8.0),
        throughput: Some([1000.0, 990.0, 1010.0]),
        headline: "1000 output tok/s at p99 TTFT < 300 ms: rate 4 req/s".into(),
    });
    let html = render_html(&r);
    assert!(html.contains(
        "<p id=\"search-answer\"><strong>1000 output tok/s at p99 TTFT &lt; 300 ms: rate 4 req/s</strong>"
    ));
    let table = html
        .split("id=\"search-table\"")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .expect("search table");
    assert_eq!(table.matches("<tr><td").count(), 4);
    assert!(
        table.contains(
            "<a href=\"#timeline-details-point-3\">rate 8 req/s</a></td><td>over-saturated</td>"
        ),
        "{table}"
    );
    assert!(table.contains("p99 TTFT 250.0 [240.0, 260.0]"), "{table}");
}
