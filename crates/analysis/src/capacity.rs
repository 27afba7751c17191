//! Capacity and cost planning: from a daily request count and a measured per-GPU request
//! rate to a GPU count, with the arithmetic spelled out line by line, and from an hourly GPU
//! price to the cost per day and per million output tokens.
//!
//! Rounding, exactly: `replicas_for_peak = ceil(peak_rps / replica_rps)`, then
//! `replicas = ceil(replicas_for_peak × headroom)`, then `GPUs = replicas × gpus_per_replica`.
//! A replica is the unit that serves requests (`gpus_per_replica` GPUs under tensor
//! parallelism), so GPUs come in whole replicas; with one GPU per replica this is
//! `ceil(peak / per-GPU rps) × headroom`. Each `ceil` forgives a relative excess of 1e-9 so that
//! floating-point noise (`2.0000000000000004`) does not buy a whole replica.

use serde::Serialize;
use serde_json::Value;

use crate::{format_quantity, AnalysisError, Explained};

/// Seconds in a day.
pub const SECONDS_PER_DAY: f64 = 86_400.0;
/// Default ratio of the peak request rate to the daily average.
pub const DEFAULT_PEAK_TO_AVERAGE: f64 = 3.0;
/// Default capacity multiplier over the peak (failures, deploys, bursts inside the peak hour).
pub const DEFAULT_HEADROOM: f64 = 2.0;
/// The servebench result schema [`measured_throughput`] reads.
pub const SERVEBENCH_RESULT_SCHEMA: &str = servebench_metrics::result::RESULT_SCHEMA;

/// What a plan starts from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanInput {
    /// Requests per day.
    pub daily_requests: f64,
    /// Peak request rate over the daily average (≥ 1).
    pub peak_to_average: f64,
    /// Capacity multiplier over the peak (≥ 1).
    pub headroom: f64,
    /// Requests per second one GPU sustains (a replica's rate over its GPU count).
    pub per_gpu_rps: f64,
    /// GPUs that serve as one replica (tensor parallelism); GPUs are bought in replicas.
    pub gpus_per_replica: u32,
    /// Where `per_gpu_rps` came from, for the printout.
    pub rate_source: String,
    /// Mean output tokens per request, when known.
    pub output_tokens_per_request: Option<f64>,
    /// Output tokens per second of SLO-meeting requests of one replica, when known.
    pub goodput_tokens_per_s_per_replica: Option<f64>,
    /// Price of one GPU-hour, when known.
    pub gpu_hourly_cost: Option<f64>,
}

/// The GPU count and the arithmetic behind it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapacityPlan {
    /// The inputs.
    pub input: PlanInput,
    /// `daily_requests / 86,400`.
    pub average_rps: Explained,
    /// `average × peak_to_average`.
    pub peak_rps: Explained,
    /// `per_gpu_rps × gpus_per_replica`.
    pub replica_rps: Explained,
    /// `ceil(peak / replica_rps)`.
    pub replicas_for_peak: Explained,
    /// `ceil(replicas_for_peak × headroom)`.
    pub replicas: Explained,
    /// `replicas × gpus_per_replica`.
    pub gpus: Explained,
    /// Peak rate over the fleet's capacity: how busy the GPUs are at the peak.
    pub peak_utilization: f64,
    /// Average rate over the fleet's capacity.
    pub average_utilization: f64,
    /// Costs, when a price is known.
    pub cost: Option<CostFigures>,
}

/// What the fleet costs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostFigures {
    /// `GPUs × hourly cost × 24`.
    pub per_day: Explained,
    /// `per_day × 30`.
    pub per_month: Explained,
    /// The cost of a million output tokens on a fully loaded replica (the unit price of the
    /// measured throughput): `hourly × gpus_per_replica / (output tok/s × 3600) × 1e6`.
    pub per_million_output_tokens_at_capacity: Option<Explained>,
    /// What the planned fleet pays per million output tokens of this traffic, idle
    /// off-peak capacity and headroom included: `per_day / (daily_requests × tokens) × 1e6`.
    pub per_million_output_tokens_fleet: Option<Explained>,
    /// The cost of a million output tokens of SLO-meeting requests on a fully loaded replica.
    pub per_million_goodput_tokens: Option<Explained>,
}

/// Cost of a million tokens produced at `tokens_per_s` by `gpus` GPUs at `hourly_cost` each:
/// `hourly_cost × gpus / (tokens_per_s × 3600) × 1e6`. `None` when nothing is produced.
pub fn cost_per_million_tokens(hourly_cost: f64, gpus: f64, tokens_per_s: f64) -> Option<f64> {
    (tokens_per_s > 0.0 && tokens_per_s.is_finite())
        .then(|| hourly_cost * gpus / (tokens_per_s * 3600.0) * 1e6)
}

/// `ceil` that forgives a relative excess of 1e-9 (floating-point noise).
fn ceil_tolerant(x: f64) -> f64 {
    (x - 1e-9 * x.abs().max(1.0)).ceil().max(0.0)
}

/// Plans the fleet for a daily load.
pub fn plan_capacity(input: &PlanInput) -> Result<CapacityPlan, AnalysisError> {
    let positive = |name: &str, v: f64| {
        if v.is_finite() && v > 0.0 {
            Ok(())
        } else {
            Err(AnalysisError::Invalid(format!(
                "{name} must be a positive number, got {v}"
            )))
        }
    };
    positive("daily requests", input.daily_requests)?;
    positive("per-GPU request rate", input.per_gpu_rps)?;
    for (name, v) in [
        ("peak-to-average", input.peak_to_average),
        ("headroom", input.headroom),
    ] {
        if !(v.is_finite() && v >= 1.0) {
            return Err(AnalysisError::Invalid(format!(
                "{name} must be at least 1, got {v}"
            )));
        }
    }
    if input.gpus_per_replica == 0 {
        return Err(AnalysisError::Invalid(
            "gpus per replica must be at least 1".into(),
        ));
    }
    if let Some(t) = input.output_tokens_per_request {
        positive("output tokens per request", t)?;
    }
    if let Some(c) = input.gpu_hourly_cost {
        if !(c.is_finite() && c >= 0.0) {
            return Err(AnalysisError::Invalid(format!(
                "GPU hourly cost must be a non-negative number, got {c}"
            )));
        }
    }

    let g = f64::from(input.gpus_per_replica);
    let average = input.daily_requests / SECONDS_PER_DAY;
    let average_rps = Explained::new(average, "req/s", "daily_requests / 86,400 s").with(
        "daily_requests",
        input.daily_requests,
        "req",
    );
    let peak = average * input.peak_to_average;
    let peak_rps = Explained::new(peak, "req/s", "average_rps × peak_to_average")
        .with("average_rps", average, "req/s")
        .with("peak_to_average", input.peak_to_average, "");
    let replica = input.per_gpu_rps * g;
    let replica_rps = Explained::new(replica, "req/s", "per_gpu_rps × gpus_per_replica")
        .with("per_gpu_rps", input.per_gpu_rps, "req/s")
        .with("gpus_per_replica", g, "");
    let for_peak = ceil_tolerant(peak / replica);
    let replicas_for_peak = Explained::new(for_peak, "replicas", "ceil(peak_rps / replica_rps)")
        .with("peak_rps", peak, "req/s")
        .with("replica_rps", replica, "req/s");
    let total = ceil_tolerant(for_peak * input.headroom);
    let replicas = Explained::new(total, "replicas", "ceil(replicas_for_peak × headroom)")
        .with("replicas_for_peak", for_peak, "replicas")
        .with("headroom", input.headroom, "");
    let gpu_count = total * g;
    let gpus = Explained::new(gpu_count, "GPUs", "replicas × gpus_per_replica")
        .with("replicas", total, "replicas")
        .with("gpus_per_replica", g, "");
    let fleet_rps = total * replica;
    let cost = input.gpu_hourly_cost.map(|hourly| {
        let per_day_value = gpu_count * hourly * 24.0;
        let per_day = Explained::new(per_day_value, "USD", "GPUs × gpu_hourly_cost × 24 h")
            .with("GPUs", gpu_count, "GPUs")
            .with("gpu_hourly_cost", hourly, "USD");
        let per_month = Explained::new(per_day_value * 30.0, "USD", "cost_per_day × 30").with(
            "cost_per_day",
            per_day_value,
            "USD",
        );
        let tokens = input.output_tokens_per_request;
        let replica_tok_s = tokens.map(|t| replica * t);
        let at_capacity = replica_tok_s.and_then(|tok_s| {
            cost_per_million_tokens(hourly, g, tok_s).map(|v| {
                Explained::new(
                    v,
                    "USD",
                    "gpu_hourly_cost × gpus_per_replica / (output_tok_per_s × 3600) × 1e6",
                )
                .with("gpu_hourly_cost", hourly, "USD")
                .with("gpus_per_replica", g, "")
                .with("output_tok_per_s", tok_s, "tok/s")
            })
        });
        let fleet = tokens.map(|t| {
            Explained::new(
                per_day_value / (input.daily_requests * t) * 1e6,
                "USD",
                "cost_per_day / (daily_requests × output_tokens_per_request) × 1e6",
            )
            .with("cost_per_day", per_day_value, "USD")
            .with("daily_requests", input.daily_requests, "req")
            .with("output_tokens_per_request", t, "tokens")
        });
        let goodput = input.goodput_tokens_per_s_per_replica.and_then(|tok_s| {
            cost_per_million_tokens(hourly, g, tok_s).map(|v| {
                Explained::new(
                    v,
                    "USD",
                    "gpu_hourly_cost × gpus_per_replica / (goodput_tok_per_s × 3600) × 1e6",
                )
                .with("gpu_hourly_cost", hourly, "USD")
                .with("gpus_per_replica", g, "")
                .with("goodput_tok_per_s", tok_s, "tok/s")
            })
        });
        CostFigures {
            per_day,
            per_month,
            per_million_output_tokens_at_capacity: at_capacity,
            per_million_output_tokens_fleet: fleet,
            per_million_goodput_tokens: goodput,
        }
    });
    Ok(CapacityPlan {
        input: input.clone(),
        average_rps,
        peak_rps,
        replica_rps,
        replicas_for_peak,
        replicas,
        gpus,
        peak_utilization: peak / fleet_rps,
        average_utilization: average / fleet_rps,
        cost,
    })
}

impl CapacityPlan {
    /// The arithmetic, one step per line, with the numbers substituted.
    pub fn arithmetic(&self) -> Vec<String> {
        let i = &self.input;
        let n = |v: f64| format_quantity(v, "");
        let r = |v: f64| format_quantity(v, "req/s");
        let mut lines = vec![
            format!(
                "average rate   = {} req/day / 86,400 s = {}",
                n(i.daily_requests),
                r(self.average_rps.value)
            ),
            format!(
                "peak rate      = {} × peak-to-average {} = {}",
                r(self.average_rps.value),
                n(i.peak_to_average),
                r(self.peak_rps.value)
            ),
        ];
        if i.gpus_per_replica > 1 {
            lines.push(format!(
                "replica rate   = {} per GPU × {} GPUs per replica = {}",
                r(i.per_gpu_rps),
                i.gpus_per_replica,
                r(self.replica_rps.value)
            ));
            lines.push(format!(
                "for the peak   = ceil({} / {}) = ceil({}) = {} replicas",
                r(self.peak_rps.value),
                r(self.replica_rps.value),
                n(self.peak_rps.value / self.replica_rps.value),
                n(self.replicas_for_peak.value)
            ));
            lines.push(format!(
                "with headroom  = ceil({} × {}) = {} replicas",
                n(self.replicas_for_peak.value),
                n(i.headroom),
                n(self.replicas.value)
            ));
            lines.push(format!(
                "GPUs           = {} replicas × {} GPUs = {} GPUs",
                n(self.replicas.value),
                i.gpus_per_replica,
                n(self.gpus.value)
            ));
        } else {
            lines.push(format!(
                "for the peak   = ceil({} / {} per GPU) = ceil({}) = {} GPUs",
                r(self.peak_rps.value),
                r(i.per_gpu_rps),
                n(self.peak_rps.value / self.replica_rps.value),
                n(self.replicas_for_peak.value)
            ));
            lines.push(format!(
                "with headroom  = ceil({} × {}) = {} GPUs",
                n(self.replicas_for_peak.value),
                n(i.headroom),
                n(self.gpus.value)
            ));
        }
        lines.push(format!(
            "utilisation    = {:.0} % at the peak, {:.0} % on average",
            self.peak_utilization * 100.0,
            self.average_utilization * 100.0
        ));
        if let Some(c) = &self.cost {
            let usd = |v: f64| format_quantity(v, "USD");
            lines.push(format!(
                "cost per day   = {} GPUs × {}/h × 24 h = {} ({} per 30 days)",
                n(self.gpus.value),
                usd(i.gpu_hourly_cost.unwrap_or(0.0)),
                usd(c.per_day.value),
                usd(c.per_month.value)
            ));
            if let Some(e) = &c.per_million_output_tokens_at_capacity {
                lines.push(format!(
                    "per 1M output tokens, fully loaded = {}/h × {} GPU(s) / ({} × 3600) × 1e6 = {}",
                    usd(i.gpu_hourly_cost.unwrap_or(0.0)),
                    i.gpus_per_replica,
                    format_quantity(input_value(e, "output_tok_per_s"), "tok/s"),
                    usd(e.value)
                ));
            }
            if let Some(e) = &c.per_million_output_tokens_fleet {
                lines.push(format!(
                    "per 1M output tokens, this fleet   = {} / ({} req × {} tokens) × 1e6 = {}",
                    usd(c.per_day.value),
                    n(i.daily_requests),
                    n(input_value(e, "output_tokens_per_request")),
                    usd(e.value)
                ));
            }
            if let Some(e) = &c.per_million_goodput_tokens {
                lines.push(format!(
                    "per 1M SLO-meeting tokens          = {}/h × {} GPU(s) / ({} × 3600) × 1e6 = {}",
                    usd(i.gpu_hourly_cost.unwrap_or(0.0)),
                    i.gpus_per_replica,
                    format_quantity(input_value(e, "goodput_tok_per_s"), "tok/s"),
                    usd(e.value)
                ));
            }
        }
        lines
    }
}

fn input_value(e: &Explained, name: &str) -> f64 {
    e.inputs
        .iter()
        .find(|i| i.name == name)
        .map_or(f64::NAN, |i| i.value)
}

/// Throughputs read from a run's result file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MeasuredThroughput {
    /// `servebench.result/v1`, or `vllm` for a `vllm bench serve` result.
    pub schema: String,
    /// Completed requests per second.
    pub request_throughput: f64,
    /// Output tokens per second.
    pub output_throughput: f64,
    /// Completed requests.
    pub completed: u64,
    /// SLO-meeting requests per second, when the run had SLOs.
    pub goodput_request_throughput: Option<f64>,
    /// Output tokens per second of SLO-meeting requests.
    pub goodput_output_throughput: Option<f64>,
    /// Whether `goodput_output_throughput` was estimated as goodput requests/s × mean output
    /// tokens per request (the file gave only the request rate).
    pub goodput_tokens_estimated: bool,
}

impl MeasuredThroughput {
    /// Mean output tokens per completed request.
    pub fn output_tokens_per_request(&self) -> f64 {
        self.output_throughput / self.request_throughput
    }
}

/// Reads the throughputs of a result document: servebench's own (`"schema":
/// "servebench.result/v1"`, figures under `"summary"`) or vLLM's `--save-result` file (no
/// schema, figures at the top level). Goodput is read, when present, from `request_goodput`
/// (req/s), `output_goodput`, `goodput_output_throughput`, or a `goodput` object with
/// `request_throughput` / `output_throughput`.
///
/// Takes the file's text: the two formats differ in layout and either may be partial, so the
/// figures are looked up here, in one place, rather than through a result type.
pub fn measured_throughput(text: &str) -> Result<MeasuredThroughput, AnalysisError> {
    let doc: Value = serde_json::from_str(text)
        .map_err(|e| AnalysisError::Result(format!("not valid JSON: {e}")))?;
    throughput_of(&doc)
}

fn throughput_of(doc: &Value) -> Result<MeasuredThroughput, AnalysisError> {
    let obj = doc
        .as_object()
        .ok_or_else(|| AnalysisError::Result("the top level is not a JSON object".into()))?;
    let (schema, figures) = match obj.get("schema") {
        Some(Value::String(s)) if s == SERVEBENCH_RESULT_SCHEMA => {
            let summary = obj.get("summary").and_then(Value::as_object).ok_or_else(|| {
                AnalysisError::Result(format!("{s} document without a \"summary\" object"))
            })?;
            (s.clone(), summary)
        }
        Some(Value::String(s)) => {
            return Err(AnalysisError::Result(format!(
                "unsupported schema '{s}' (supported: {SERVEBENCH_RESULT_SCHEMA}, or a vLLM result file)"
            )))
        }
        Some(other) => {
            return Err(AnalysisError::Result(format!(
                "\"schema\" must be a string, got {other}"
            )))
        }
        None if obj.contains_key("request_throughput") => ("vllm".to_string(), obj),
        None => {
            return Err(AnalysisError::Result(format!(
                "neither a {SERVEBENCH_RESULT_SCHEMA} document nor a vLLM result (no \"schema\", no \"request_throughput\")"
            )))
        }
    };
    let number = |key: &str| -> Result<Option<f64>, AnalysisError> {
        match figures.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .map(Some)
                .ok_or_else(|| {
                    AnalysisError::Result(format!(
                        "\"{key}\" must be a non-negative number, got {v}"
                    ))
                }),
        }
    };
    let required = |key: &str| {
        number(key)?.ok_or_else(|| AnalysisError::Result(format!("missing \"{key}\" ({schema})")))
    };
    let request_throughput = required("request_throughput")?;
    let output_throughput = required("output_throughput")?;
    let completed = figures
        .get("completed")
        .and_then(Value::as_u64)
        .ok_or_else(|| {
            AnalysisError::Result(format!("missing \"completed\" request count ({schema})"))
        })?;
    if completed == 0 || request_throughput <= 0.0 {
        return Err(AnalysisError::Result(
            "no request completed in this run: it measures no throughput to plan with".into(),
        ));
    }
    let nested = |key: &str| -> Option<f64> {
        figures
            .get("goodput")
            .and_then(Value::as_object)
            .and_then(|g| g.get(key))
            .and_then(Value::as_f64)
    };
    let goodput_request_throughput =
        number("request_goodput")?.or_else(|| nested("request_throughput"));
    let explicit_tokens = number("output_goodput")?
        .or(number("goodput_output_throughput")?)
        .or_else(|| nested("output_throughput"));
    let (goodput_output_throughput, goodput_tokens_estimated) =
        match (explicit_tokens, goodput_request_throughput) {
            (Some(t), _) => (Some(t), false),
            (None, Some(r)) => (Some(r * output_throughput / request_throughput), true),
            (None, None) => (None, false),
        };
    Ok(MeasuredThroughput {
        schema,
        request_throughput,
        output_throughput,
        completed,
        goodput_request_throughput,
        goodput_output_throughput,
        goodput_tokens_estimated,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    fn input(daily: f64, rps: f64, headroom: f64, peak: f64) -> PlanInput {
        PlanInput {
            daily_requests: daily,
            peak_to_average: peak,
            headroom,
            per_gpu_rps: rps,
            gpus_per_replica: 1,
            rate_source: "--per-gpu-rps".into(),
            output_tokens_per_request: None,
            goodput_tokens_per_s_per_replica: None,
            gpu_hourly_cost: None,
        }
    }

    #[test]
    fn five_million_a_day_at_35_rps_per_gpu_needs_4_gpus_with_headroom() {
        // 5,000,000 / 86,400 = 57.87 req/s; ceil(57.87 / 35) = ceil(1.653) = 2; × 2 = 4.
        let p = plan_capacity(&input(5_000_000.0, 35.0, 2.0, 1.0)).unwrap();
        assert!((p.average_rps.value - 57.870_370).abs() < 1e-6);
        assert_eq!(format_quantity(p.average_rps.value, "req/s"), "57.9 req/s");
        assert_eq!(p.peak_rps.value, p.average_rps.value);
        assert_eq!(p.replicas_for_peak.value, 2.0);
        assert_eq!(p.gpus.value, 4.0);
        let lines = p.arithmetic();
        assert_eq!(
            lines[0],
            "average rate   = 5,000,000 req/day / 86,400 s = 57.9 req/s"
        );
        assert_eq!(
            lines[1],
            "peak rate      = 57.9 req/s × peak-to-average 1 = 57.9 req/s"
        );
        assert_eq!(
            lines[2],
            "for the peak   = ceil(57.9 req/s / 35 req/s per GPU) = ceil(1.65) = 2 GPUs"
        );
        assert_eq!(lines[3], "with headroom  = ceil(2 × 2) = 4 GPUs");
        // 57.87 of 4 × 35 = 140 req/s.
        assert!((p.peak_utilization - 57.87 / 140.0).abs() < 1e-3);
    }

    #[test]
    fn defaults_triple_the_peak() {
        let p = plan_capacity(&input(
            5_000_000.0,
            35.0,
            DEFAULT_HEADROOM,
            DEFAULT_PEAK_TO_AVERAGE,
        ))
        .unwrap();
        // 173.6 req/s / 35 = 4.96 → 5 GPUs, × 2 = 10.
        assert_eq!(p.replicas_for_peak.value, 5.0);
        assert_eq!(p.gpus.value, 10.0);
    }

    #[test]
    fn an_exact_multiple_does_not_round_up() {
        // 3,024,000 / 86,400 = 35 req/s exactly: one GPU, whatever the float noise.
        let p = plan_capacity(&input(3_024_000.0, 35.0, 1.0, 1.0)).unwrap();
        assert_eq!(p.gpus.value, 1.0);
        // 0.1 × 3 = 0.30000000000000004 in floating point.
        let p = plan_capacity(&input(0.1 * 86_400.0, 0.1 / 3.0, 1.0, 1.0)).unwrap();
        assert_eq!(p.gpus.value, 3.0);
    }

    #[test]
    fn fractional_headroom_rounds_up_to_whole_replicas() {
        let p = plan_capacity(&input(5_000_000.0, 35.0, 1.5, 1.0)).unwrap();
        // ceil(2 × 1.5) = 3.
        assert_eq!(p.gpus.value, 3.0);
        let p = plan_capacity(&input(5_000_000.0, 35.0, 1.2, 1.0)).unwrap();
        // ceil(2 × 1.2) = ceil(2.4) = 3.
        assert_eq!(p.gpus.value, 3.0);
    }

    #[test]
    fn tensor_parallel_replicas_buy_whole_replicas() {
        // A 2-GPU replica measured at 70 req/s: 35 per GPU. Peak 57.9 → 1 replica, × 2 = 2
        // replicas = 4 GPUs.
        let mut i = input(5_000_000.0, 35.0, 2.0, 1.0);
        i.gpus_per_replica = 2;
        let p = plan_capacity(&i).unwrap();
        assert_eq!(p.replica_rps.value, 70.0);
        assert_eq!(p.replicas_for_peak.value, 1.0);
        assert_eq!(p.replicas.value, 2.0);
        assert_eq!(p.gpus.value, 4.0);
        let lines = p.arithmetic();
        assert!(
            lines
                .iter()
                .any(|l| l.contains("2 replicas × 2 GPUs = 4 GPUs")),
            "{lines:#?}"
        );
    }

    #[test]
    fn costs_per_day_and_per_million_tokens() {
        let mut i = input(5_000_000.0, 35.0, 2.0, 1.0);
        i.gpu_hourly_cost = Some(2.5);
        i.output_tokens_per_request = Some(200.0);
        i.goodput_tokens_per_s_per_replica = Some(3500.0);
        let p = plan_capacity(&i).unwrap();
        let c = p.cost.as_ref().unwrap();
        // 4 GPUs × $2.50 × 24 = $240 per day.
        assert_eq!(c.per_day.value, 240.0);
        assert_eq!(c.per_month.value, 7200.0);
        // One GPU at 35 req/s × 200 tokens = 7000 tok/s: $2.50 / (7000 × 3600) × 1e6 = $0.0992.
        let at_cap = c.per_million_output_tokens_at_capacity.as_ref().unwrap();
        assert!((at_cap.value - 2.5 / (7000.0 * 3600.0) * 1e6).abs() < 1e-12);
        // The fleet: $240 / (5e6 × 200) × 1e6 = $0.24 per million.
        let fleet = c.per_million_output_tokens_fleet.as_ref().unwrap();
        assert!((fleet.value - 0.24).abs() < 1e-12);
        // Goodput: half the tokens meet the SLO, so each accepted token costs twice as much.
        let good = c.per_million_goodput_tokens.as_ref().unwrap();
        assert!((good.value - 2.0 * at_cap.value).abs() < 1e-12);
        let lines = p.arithmetic().join("\n");
        assert!(
            lines.contains("cost per day   = 4 GPUs × $2.50/h × 24 h = $240.00"),
            "{lines}"
        );
        assert!(lines.contains("this fleet"), "{lines}");
    }

    #[test]
    fn cost_formula() {
        // $2 per GPU-hour, 2 GPUs, 1000 tok/s: $4 per 3.6 M tokens = $1.11 per million.
        let v = cost_per_million_tokens(2.0, 2.0, 1000.0).unwrap();
        assert!((v - 4.0 / 3.6).abs() < 1e-12);
        assert_eq!(cost_per_million_tokens(2.0, 1.0, 0.0), None);
    }

    #[test]
    fn invalid_plans_are_rejected() {
        assert!(plan_capacity(&input(0.0, 35.0, 2.0, 1.0)).is_err());
        assert!(plan_capacity(&input(1e6, -1.0, 2.0, 1.0)).is_err());
        let e = plan_capacity(&input(1e6, 35.0, 0.5, 1.0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("headroom must be at least 1"), "{e}");
        let e = plan_capacity(&input(1e6, 35.0, 2.0, 0.5))
            .unwrap_err()
            .to_string();
        assert!(e.contains("peak-to-average"), "{e}");
    }

    #[test]
    fn reads_a_servebench_result() {
        let doc = json!({
            "schema": "servebench.result/v1",
            "summary": {"request_throughput": 35.0, "output_throughput": 7000.0, "completed": 1000,
                        "goodput": {"request_throughput": 30.0, "output_throughput": 5500.0}}
        });
        let m = measured_throughput(&doc.to_string()).unwrap();
        assert_eq!(m.schema, "servebench.result/v1");
        assert_eq!(m.request_throughput, 35.0);
        assert_eq!(m.output_tokens_per_request(), 200.0);
        assert_eq!(m.completed, 1000);
        assert_eq!(m.goodput_request_throughput, Some(30.0));
        assert_eq!(m.goodput_output_throughput, Some(5500.0));
        assert!(!m.goodput_tokens_estimated);
    }

    #[test]
    fn reads_a_vllm_result_and_estimates_goodput_tokens() {
        let doc = json!({"request_throughput": 10.0, "output_throughput": 1280.0, "completed": 500,
                         "request_goodput": 8.0});
        let m = measured_throughput(&doc.to_string()).unwrap();
        assert_eq!(m.schema, "vllm");
        assert_eq!(m.goodput_output_throughput, Some(8.0 * 128.0));
        assert!(m.goodput_tokens_estimated);
        let doc = json!({"request_throughput": 10.0, "output_throughput": 1280.0, "completed": 500,
                         "request_goodput": null});
        assert_eq!(
            measured_throughput(&doc.to_string())
                .unwrap()
                .goodput_output_throughput,
            None
        );
    }

    #[test]
    fn unreadable_results_say_why() {
        let e = |doc: Value| {
            measured_throughput(&doc.to_string())
                .unwrap_err()
                .to_string()
        };
        assert!(e(json!({"schema": "other/v9"})).contains("unsupported schema 'other/v9'"));
        assert!(e(json!({"schema": "servebench.result/v1"})).contains("summary"));
        assert!(e(json!({"schema": "servebench.result/v1", "summary": {"output_throughput": 1.0, "completed": 1}}))
            .contains("request_throughput"));
        assert!(
            e(json!({"request_throughput": 0.0, "output_throughput": 0.0, "completed": 0}))
                .contains("no request completed")
        );
        assert!(
            e(json!({"request_throughput": "fast", "output_throughput": 1.0, "completed": 1}))
                .contains("non-negative number")
        );
        assert!(e(json!([1, 2])).contains("not a JSON object"));
        assert!(e(json!({"foo": 1})).contains("neither"));
    }
}
