//! What a run's tokens cost: per million output tokens, and per million accepted tokens
//! (output of requests that met the latency contract, i.e. goodput).

use serde::Serialize;
use servebench_metrics::RequestRecord;

use crate::capacity::cost_per_million_tokens;
use crate::format_quantity;
use crate::frontier::Slo;

/// The price of the hardware that produced a run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CostParams {
    /// Price of one GPU-hour, USD.
    pub gpu_hourly_cost: f64,
    /// GPUs serving the measured traffic (tensor parallelism: the whole replica).
    pub gpus: f64,
}

impl CostParams {
    /// Validated parameters: a non-negative finite price and a positive GPU count.
    pub fn new(gpu_hourly_cost: f64, gpus: f64) -> Result<CostParams, crate::AnalysisError> {
        if !(gpu_hourly_cost.is_finite() && gpu_hourly_cost >= 0.0) {
            return Err(crate::AnalysisError::Invalid(format!(
                "the GPU hourly cost must be a non-negative number, got {gpu_hourly_cost}"
            )));
        }
        if !(gpus.is_finite() && gpus > 0.0) {
            return Err(crate::AnalysisError::Invalid(format!(
                "the GPU count must be positive, got {gpus}"
            )));
        }
        Ok(CostParams {
            gpu_hourly_cost,
            gpus,
        })
    }
}

/// Cost figures of one run or group.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RunCost {
    /// The price basis.
    pub params: CostParams,
    /// Output tokens per second the cost is spread over.
    pub output_tokens_per_s: f64,
    /// Output tokens per second of accepted requests, when known.
    pub accepted_tokens_per_s: Option<f64>,
    /// `hourly × gpus / (output tok/s × 3600) × 1e6`, USD; `None` without output.
    pub per_million_output_tokens: Option<f64>,
    /// The same over accepted tokens only, USD; `None` when unknown or none were accepted.
    pub per_million_accepted_tokens: Option<f64>,
}

/// Costs of producing `output_tokens_per_s` (of which `accepted_tokens_per_s` met the
/// contract) on the priced hardware.
pub fn run_cost(
    output_tokens_per_s: f64,
    accepted_tokens_per_s: Option<f64>,
    params: CostParams,
) -> RunCost {
    let per = |tps: f64| cost_per_million_tokens(params.gpu_hourly_cost, params.gpus, tps);
    RunCost {
        params,
        output_tokens_per_s,
        accepted_tokens_per_s,
        per_million_output_tokens: per(output_tokens_per_s),
        per_million_accepted_tokens: accepted_tokens_per_s.and_then(per),
    }
}

/// Output tokens per second of requests that met every objective of the contract, each judged
/// on its own figures as vLLM's goodput does (a percentile contract such as `ttft:p99:500`
/// contributes its threshold: the request's TTFT must be at most 500 ms). `None` without
/// records or duration.
pub fn accepted_tokens_per_s(
    records: &[RequestRecord],
    contract: &[Slo],
    duration_s: f64,
) -> Option<f64> {
    if records.is_empty() || duration_s.is_nan() || duration_s <= 0.0 {
        return None;
    }
    let tokens: u64 = records
        .iter()
        .filter(|r| r.is_success() && contract.iter().all(|s| s.is_met_by(r)))
        .map(|r| r.output_tokens)
        .sum();
    Some(tokens as f64 / duration_s)
}

/// `$0.123` or `–`.
pub fn format_usd(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format_quantity(v, "USD"))
}

/// A markdown table of costs per row, with the price basis.
pub fn cost_section_markdown(rows: &[(String, RunCost)]) -> String {
    let Some((_, first)) = rows.first() else {
        return "No row produced output tokens.\n".into();
    };
    let p = first.params;
    let mut out = format!(
        "At {} per GPU-hour × {} GPU{}: cost = price × GPUs / (tokens per second × 3600) × 10⁶. Accepted tokens are the output of requests that met every objective of the contract on their own figures (goodput).\n\n",
        format_quantity(p.gpu_hourly_cost, "USD"),
        format_quantity(p.gpus, ""),
        if p.gpus == 1.0 { "" } else { "s" }
    );
    out.push_str("| row | output tok/s | accepted tok/s | $ per M output tokens | $ per M accepted tokens |\n");
    out.push_str("|---|---:|---:|---:|---:|\n");
    for (label, c) in rows {
        out.push_str(&format!(
            "| {label} | {} | {} | {} | {} |\n",
            format_quantity(c.output_tokens_per_s.round(), ""),
            c.accepted_tokens_per_s
                .map_or("–".into(), |v| format_quantity(v.round(), "")),
            format_usd(c.per_million_output_tokens),
            format_usd(c.per_million_accepted_tokens),
        ));
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::frontier::parse_slos;

    #[test]
    fn cost_per_million_tokens_follows_the_formula() {
        let p = CostParams::new(2.0, 1.0).unwrap();
        let c = run_cost(1000.0, Some(500.0), p);
        // $2/h over 3.6 M tokens per hour.
        assert!((c.per_million_output_tokens.unwrap() - 2.0 / 3.6).abs() < 1e-12);
        assert!((c.per_million_accepted_tokens.unwrap() - 2.0 / 1.8).abs() < 1e-12);
        let none = run_cost(0.0, Some(0.0), p);
        assert_eq!(none.per_million_output_tokens, None);
        assert_eq!(none.per_million_accepted_tokens, None);
        assert!(CostParams::new(-1.0, 1.0).is_err());
        assert!(CostParams::new(1.0, 0.0).is_err());
        let md = cost_section_markdown(&[("A".into(), c)]);
        assert!(md.contains("| A | 1,000 | 500 | $0.556 | $1.11 |"), "{md}");
    }

    #[test]
    fn accepted_tokens_need_every_threshold() {
        let rec = |id: u64, ttft_ms: u64, out: u64| {
            let mut r: RequestRecord = serde_json::from_value(serde_json::json!({
                "id": id, "intended": 0, "released": 0, "sent": 0,
                "first_token": ttft_ms * 1_000_000, "end": (ttft_ms + 10) * 1_000_000,
                "done": (ttft_ms + 10) * 1_000_000, "waited_for_slot": false,
                "events": [{"t": ttft_ms * 1_000_000, "chars": 3}, {"t": (ttft_ms + 10) * 1_000_000, "chars": 3}],
                "input_tokens": 10, "input_source": "usage", "output_tokens": out,
                "output_source": "usage", "intended_input_tokens": 10
            }))
            .unwrap();
            r.id = id;
            r
        };
        let records = vec![rec(0, 100, 2), rec(1, 900, 2)];
        let contract = parse_slos("ttft:p99:500").unwrap();
        assert_eq!(accepted_tokens_per_s(&records, &contract, 2.0), Some(1.0));
        assert_eq!(accepted_tokens_per_s(&[], &contract, 2.0), None);
    }
}
