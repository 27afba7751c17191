//! `servebench plan`: GPUs and cost for a daily request volume, from a measured per-GPU
//! request rate (given, or read from a run's result file), with the arithmetic shown.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{ArgGroup, Args};
use serde_json::json;
use servebench_analysis::capacity::{
    measured_throughput, plan_capacity, CapacityPlan, MeasuredThroughput, PlanInput,
};
use servebench_analysis::format_quantity;
use servebench_metrics::result::RunResult;

/// The flags of a capacity plan (ids), which `--fleet` and the workload flags exclude.
const CAPACITY: &[&str] = &[
    "daily_requests",
    "peak_to_average",
    "headroom",
    "per_gpu_rps",
    "from",
    "gpus_per_replica",
    "gpu_hourly_cost",
    "output_tokens_per_request",
    "json",
];

/// Arguments of `servebench plan`: a capacity plan from a rate, or (`--fleet`) a comparison of
/// simulated fleet layouts on one workload.
#[derive(Debug, Clone, Args)]
// The two forms exclude each other: one source of the per-GPU rate, or --fleet instead; every
// flag of the fleet form conflicts with the capacity flags (and clap waives --daily-requests
// where it conflicts with a flag given).
#[command(group(ArgGroup::new("rate").required(true).args(["per_gpu_rps", "from", "fleet"])))]
#[command(mut_args = crate::fleet_compare::apart_from(CAPACITY))]
#[command(
    override_usage = "servebench plan --daily-requests <N> <--per-gpu-rps <RPS>|--from <RESULT.json>> [OPTIONS]\n       \
     servebench plan --fleet <SPEC> --fleet <SPEC>... [--slo <OBJECTIVE>...] [RUN FLAGS]"
)]
pub struct PlanArgs {
    /// Requests per day to serve (e.g. 5000000 or 5e6).
    #[arg(long, required = true)]
    pub daily_requests: Option<f64>,
    /// Peak request rate over the daily average.
    #[arg(long, default_value_t = 3.0)]
    pub peak_to_average: f64,
    /// Capacity multiplier over the peak (failures, deploys, bursts).
    #[arg(long, default_value_t = 2.0)]
    pub headroom: f64,
    /// Requests per second one GPU sustains within your latency targets.
    #[arg(long, value_name = "RPS")]
    pub per_gpu_rps: Option<f64>,
    /// A run's result file (servebench.result/v1, or a vLLM --save-result file): its
    /// request throughput, divided by --gpus-per-replica, is the per-GPU rate.
    #[arg(long, value_name = "RESULT.json")]
    pub from: Option<PathBuf>,
    /// GPUs serving as one replica (tensor parallelism); GPUs are planned in whole replicas.
    #[arg(long, default_value_t = 1)]
    pub gpus_per_replica: u32,
    /// Price of one GPU-hour in USD: adds cost per day and per million output tokens.
    #[arg(long, value_name = "USD")]
    pub gpu_hourly_cost: Option<f64>,
    /// Mean output tokens per request [default: from --from's result].
    #[arg(long)]
    pub output_tokens_per_request: Option<f64>,
    /// Print JSON instead of the arithmetic.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub compare: crate::fleet_compare::FleetArgs,
}

/// Runs `servebench plan`.
pub fn plan(args: PlanArgs) -> Result<ExitCode> {
    let (input, measured) = plan_input(&args)?;
    let plan = plan_capacity(&input)?;
    let text = if args.json {
        let doc = json!({
            "plan": plan,
            "measured": measured,
            "arithmetic": plan.arithmetic(),
        });
        let mut s = serde_json::to_string_pretty(&doc).context("serializing the plan")?;
        s.push('\n');
        s
    } else {
        render(&plan, measured.as_ref(), &args)
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("writing the plan")?;
    Ok(ExitCode::SUCCESS)
}

/// Turns the arguments (and the result file, if any) into the plan's input.
pub fn plan_input(args: &PlanArgs) -> Result<(PlanInput, Option<MeasuredThroughput>)> {
    if args.gpus_per_replica == 0 {
        bail!("--gpus-per-replica must be at least 1");
    }
    let g = f64::from(args.gpus_per_replica);
    let (per_gpu_rps, rate_source, measured) = match (&args.from, args.per_gpu_rps) {
        (Some(path), None) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let m = measured_throughput(&text)
                .with_context(|| format!("reading {}", path.display()))?;
            check_capacity_figure(&text, path)?;
            let source = format!(
                "{} ({}, {} completed requests)",
                path.display(),
                m.schema,
                m.completed
            );
            (m.request_throughput / g, source, Some(m))
        }
        (None, Some(rps)) => (rps, "--per-gpu-rps".to_string(), None),
        _ => bail!("give exactly one of --per-gpu-rps and --from"),
    };
    let output_tokens_per_request = args.output_tokens_per_request.or_else(|| {
        measured
            .as_ref()
            .map(MeasuredThroughput::output_tokens_per_request)
    });
    let Some(daily_requests) = args.daily_requests else {
        bail!("--daily-requests is required for a capacity plan");
    };
    let input = PlanInput {
        daily_requests,
        peak_to_average: args.peak_to_average,
        headroom: args.headroom,
        per_gpu_rps,
        gpus_per_replica: args.gpus_per_replica,
        rate_source,
        output_tokens_per_request,
        goodput_tokens_per_s_per_replica: measured
            .as_ref()
            .and_then(|m| m.goodput_output_throughput),
        gpu_hourly_cost: args.gpu_hourly_cost,
    };
    Ok((input, measured))
}

/// A run's rate is a per-GPU capacity only when the server was at capacity and the client
/// kept up: an overloaded run's rate is refused (it is what the server managed while a queue
/// grew, at latencies no user would accept), and an open-loop run that kept up is warned
/// about (the server was never pushed, so its rate is a lower bound).
fn check_capacity_figure(text: &str, path: &Path) -> Result<()> {
    let Ok(result) = serde_json::from_str::<RunResult>(text) else {
        return Ok(());
    };
    let Some(load) = result.validity.as_ref().and_then(|v| v.load) else {
        return Ok(());
    };
    let achieved = load.achieved_rate.unwrap_or(f64::NAN);
    if load.overloaded {
        let offered = load.offered_rate.unwrap_or(f64::NAN);
        let queue = load.queue_max_ms.map_or_else(String::new, |q| {
            format!(
                "; requests waited up to {:.1} s in the client queue",
                q / 1e3
            )
        });
        bail!(
            "{} was overloaded (offered {offered:.2} req/s, achieved {achieved:.2} req/s{queue}): \
             its rate is no per-GPU capacity. Find capacity with `servebench sweep \
             --request-rate auto` and plan from a point that kept up (--per-gpu-rps)",
            path.display()
        );
    }
    if let Some(offered) = load.offered_rate {
        eprintln!(
            "warning: {} was not saturated: it achieved its offered {offered:.2} req/s \
             ({achieved:.2} sent) with at most {} requests in flight, so the server was not at \
             capacity and this rate is a lower bound; `servebench sweep --request-rate auto` \
             finds the rate it sustains",
            path.display(),
            result.summary.peak_concurrency
        );
    }
    Ok(())
}

fn render(plan: &CapacityPlan, measured: Option<&MeasuredThroughput>, args: &PlanArgs) -> String {
    let mut o = String::new();
    let i = &plan.input;
    let _ = writeln!(o, "Capacity plan");
    match measured {
        Some(m) => {
            let _ = writeln!(
                o,
                "  measured: {} and {} in {}",
                format_quantity(m.request_throughput, "req/s"),
                format_quantity(m.output_throughput, "output tok/s"),
                i.rate_source
            );
            if i.gpus_per_replica > 1 {
                let _ = writeln!(
                    o,
                    "  per GPU:  {} / {} GPUs per replica = {}",
                    format_quantity(m.request_throughput, "req/s"),
                    i.gpus_per_replica,
                    format_quantity(i.per_gpu_rps, "req/s")
                );
            }
        }
        None => {
            let _ = writeln!(
                o,
                "  per GPU:  {} ({})",
                format_quantity(i.per_gpu_rps, "req/s"),
                i.rate_source
            );
        }
    }
    let _ = writeln!(
        o,
        "  rounding: GPUs = ceil(ceil(peak rate / replica rate) × headroom) × GPUs per replica\n"
    );
    for line in plan.arithmetic() {
        let _ = writeln!(o, "  {line}");
    }
    let replicas = if i.gpus_per_replica > 1 {
        format!(
            " ({} replicas of {} GPUs)",
            format_quantity(plan.replicas.value, ""),
            i.gpus_per_replica
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        o,
        "\n{} GPUs{replicas} for {} requests a day.",
        format_quantity(plan.gpus.value, ""),
        format_quantity(i.daily_requests, "")
    );
    if args.gpu_hourly_cost.is_some() && i.output_tokens_per_request.is_none() {
        let _ = writeln!(
            o,
            "Cost per million tokens needs --output-tokens-per-request (or a result file via --from)."
        );
    }
    if let Some(m) = measured {
        if m.goodput_tokens_estimated {
            let _ = writeln!(
                o,
                "The SLO-meeting token rate is estimated as goodput requests/s × mean output tokens per request."
            );
        }
    }
    o
}
