//! From dataset flags to requests and an arrival schedule (the workload crate does the work).

use std::time::Duration;

use anyhow::{bail, Context, Result};
use servebench_tokenizer::Tokenizer;
use servebench_workload::{
    sample_dataset, ArrivalConfig, CustomConfig, DatasetConfig, PrefixMode, RampUp, RampUpStrategy,
    RandomConfig, RequestSpec, ShareGptConfig,
};

use super::args::{DatasetName, PrefixModeArg, RampUp as RampArg, RunArgs};

/// The dataset the flags describe (vLLM's `--input-len/--output-len` mapping included).
pub fn config(args: &RunArgs) -> Result<DatasetConfig> {
    let output_len = args.output_len;
    Ok(match args.dataset_name {
        DatasetName::Random => {
            if let Some(p) = &args.dataset_path {
                bail!("cannot use the random dataset with --dataset-path {}: pick --dataset-name sharegpt or custom", p.display());
            }
            DatasetConfig::Random(RandomConfig {
                num_prompts: args.num_prompts,
                input_len: args.input_len.unwrap_or(args.random_input_len),
                output_len: match output_len {
                    Some(v) if v < 0 => {
                        bail!("--output-len must be non-negative for the random dataset")
                    }
                    Some(v) => v as u64,
                    None => args.random_output_len,
                },
                range_ratio: args.random_range_ratio,
                prefix_len: args.random_prefix_len,
                prefix_mode: match args.random_prefix_mode {
                    PrefixModeArg::Shared => PrefixMode::Shared,
                    PrefixModeArg::PerRequest => PrefixMode::PerRequest,
                },
                seed: args.seed,
            })
        }
        DatasetName::Sharegpt => {
            let path = args
                .dataset_path
                .clone()
                .context("--dataset-name sharegpt needs --dataset-path FILE.json")?;
            let mut c = ShareGptConfig::new(path);
            c.num_prompts = args.num_prompts;
            c.seed = args.seed;
            c.output_len = match output_len {
                Some(v) if v >= 0 => Some(v as u64),
                _ => args.sharegpt_output_len,
            };
            DatasetConfig::ShareGpt(c)
        }
        DatasetName::Custom => {
            let path = args
                .dataset_path
                .clone()
                .context("--dataset-name custom needs --dataset-path FILE.jsonl")?;
            let mut c = CustomConfig::new(path);
            c.num_prompts = args.num_prompts;
            c.seed = args.seed;
            c.output_len = output_len.unwrap_or(args.custom_output_len);
            DatasetConfig::Custom(c)
        }
    })
}

/// Build the requests of the run under `tokenizer`.
///
/// `lengths_only` skips prompt text for the random dataset (virtual time needs only the
/// lengths and the prefix, and text synthesis would dominate an hour-long simulation).
pub fn build(
    args: &RunArgs,
    tokenizer: &Tokenizer,
    lengths_only: bool,
) -> Result<Vec<RequestSpec>> {
    let cfg = config(args)?;
    if lengths_only {
        if let DatasetConfig::Random(c) = &cfg {
            return Ok(servebench_workload::random::sample_random_lengths(c)?);
        }
    }
    let started = std::time::Instant::now();
    let requests = sample_dataset(&cfg, tokenizer)?;
    let took = started.elapsed();
    if took > Duration::from_secs(2) {
        eprintln!(
            "Built {} prompts in {:.1} s",
            requests.len(),
            took.as_secs_f64()
        );
    }
    Ok(requests)
}

/// The arrival process the flags describe.
pub fn arrivals(args: &RunArgs) -> ArrivalConfig {
    ArrivalConfig {
        request_rate: args.request_rate,
        burstiness: args.burstiness,
        ramp_up: args.ramp_up_strategy.map(|s| RampUp {
            strategy: match s {
                RampArg::Linear => RampUpStrategy::Linear,
                RampArg::Exponential => RampUpStrategy::Exponential,
            },
            start_rps: args.ramp_up_start_rps.unwrap_or(0) as f64,
            end_rps: args.ramp_up_end_rps.unwrap_or(0) as f64,
        }),
        seed: args.seed,
    }
}

/// Intended send offsets: one per request, or as many as `--duration` holds.
pub fn schedule(args: &RunArgs, n: usize) -> Result<Vec<u64>> {
    let cfg = arrivals(args);
    cfg.validate()?;
    Ok(match args.duration {
        Some(secs) => {
            if secs.is_nan() || secs <= 0.0 || !secs.is_finite() {
                bail!("--duration must be a positive number of seconds");
            }
            if cfg.request_rate.is_infinite() && cfg.ramp_up.is_none() {
                bail!("--duration needs a finite --request-rate (with an infinite rate every request would arrive at once)");
            }
            cfg.schedule_for_duration(Duration::from_secs_f64(secs))?
        }
        None => cfg.schedule(n)?,
    })
}

/// The requests cycled (or cut) to the schedule's length.
pub fn cycle_to(requests: Vec<RequestSpec>, n: usize) -> Vec<RequestSpec> {
    if requests.len() == n {
        requests
    } else {
        servebench_workload::cycle(&requests, n)
    }
}
