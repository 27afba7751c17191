//! A run over LoRA adapters, by adapter: requests, throughput and latency of each.

use servebench_metrics::LoraStats;

use super::tables::Table;

fn cell(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |x| format!("{x:.2}"))
}

/// One row per adapter (empty table for a run without adapters).
pub fn lora_table(adapters: &[LoraStats]) -> Table {
    let columns = [
        ("Adapter", false),
        ("Completed", true),
        ("Failed", true),
        ("Req/s", true),
        ("Output tok/s", true),
        ("TTFT p50 (ms)", true),
        ("TTFT p99 (ms)", true),
        ("TPOT p50 (ms)", true),
        ("E2EL p99 (ms)", true),
    ];
    Table {
        headers: columns.iter().map(|(h, _)| (*h).to_owned()).collect(),
        numeric: columns.iter().map(|(_, n)| *n).collect(),
        rows: adapters
            .iter()
            .map(|a| {
                vec![
                    a.adapter.clone(),
                    a.completed.to_string(),
                    a.failed.to_string(),
                    format!("{:.2}", a.request_throughput),
                    format!("{:.2}", a.output_throughput),
                    cell(a.ttft_p50_ms),
                    cell(a.ttft_p99_ms),
                    cell(a.tpot_p50_ms),
                    cell(a.e2el_p99_ms),
                ]
            })
            .collect(),
    }
}

/// The terminal block of a run over adapters; empty without them.
pub fn lora_block(adapters: &[LoraStats]) -> String {
    if adapters.is_empty() {
        return String::new();
    }
    format!(
        "{:-^50}\n{}",
        " By LoRA adapter ",
        lora_table(adapters).to_text()
    )
}
