//! From the plan's dataset and traffic to requests and an arrival schedule (the workload crate does the work).

use std::time::Duration;

use anyhow::Result;
use servebench_answer::Expected;
use servebench_tokenizer::Tokenizer;
use servebench_workload::trace::{BurstGptConfig, TimedTraceConfig};
use servebench_workload::{
    sample_custom_checked, sample_dataset, ArrivalConfig, CustomConfig, DatasetConfig, HfConfig,
    PrefixRepetitionConfig, RampUp, RandomConfig, RequestSpec, ShareGptConfig, SonnetConfig,
    SpecBenchConfig,
};

use super::plan::{DatasetChoice, RunPlan};

/// The dataset the plan describes.
pub fn config(plan: &RunPlan) -> DatasetConfig {
    let random = || RandomConfig {
        num_prompts: plan.num_prompts,
        input_len: plan.random.input_len,
        output_len: plan.random.output_len,
        range_ratio: plan.random.range_ratio,
        prefix_len: plan.random.prefix_len,
        prefix_mode: plan.random.prefix_mode,
        seed: plan.seed,
        prefix_hit: plan.random.prefix_hit,
    };
    match &plan.dataset {
        // Agent sessions are built by the agent runner (`build_checked` refuses them).
        DatasetChoice::Random | DatasetChoice::Agentic(_) => DatasetConfig::Random(random()),
        DatasetChoice::RandomMm(shape) => DatasetConfig::RandomMm(shape.config(random())),
        DatasetChoice::ShareGpt { path, output_len } => {
            let mut c = ShareGptConfig::new(path.clone());
            c.num_prompts = plan.num_prompts;
            c.seed = plan.seed;
            c.output_len = *output_len;
            c.disable_shuffle = plan.disable_shuffle;
            c.no_oversample = plan.no_oversample;
            DatasetConfig::ShareGpt(c)
        }
        DatasetChoice::Custom { path, output_len } => {
            let mut c = CustomConfig::new(path.clone());
            c.num_prompts = plan.num_prompts;
            c.seed = plan.seed;
            c.output_len = *output_len;
            c.disable_shuffle = plan.disable_shuffle;
            c.no_oversample = plan.no_oversample;
            DatasetConfig::Custom(c)
        }
        DatasetChoice::Sonnet {
            path,
            input_len,
            output_len,
            prefix_len,
        } => DatasetConfig::Sonnet(SonnetConfig {
            path: path.clone(),
            num_prompts: plan.num_prompts,
            input_len: *input_len,
            output_len: *output_len,
            prefix_len: *prefix_len,
            seed: plan.seed,
        }),
        DatasetChoice::PrefixRepetition {
            prefix_len,
            suffix_len,
            num_prefixes,
            output_len,
        } => DatasetConfig::PrefixRepetition(PrefixRepetitionConfig {
            num_prompts: plan.num_prompts,
            prefix_len: *prefix_len,
            suffix_len: *suffix_len,
            num_prefixes: *num_prefixes,
            output_len: *output_len,
            seed: plan.seed,
            disable_shuffle: plan.disable_shuffle,
        }),
        DatasetChoice::Hf {
            path,
            name,
            subset,
            split,
            output_len,
        } => DatasetConfig::Hf(HfConfig {
            path: path.clone(),
            name: name.clone(),
            subset: subset.clone(),
            split: split.clone(),
            output_len: *output_len,
            blazedit_distance: (
                plan.vllm.blazedit_min_distance,
                plan.vllm.blazedit_max_distance,
            ),
            num_prompts: plan.num_prompts,
            seed: plan.seed,
            disable_shuffle: plan.disable_shuffle,
            no_oversample: plan.no_oversample,
        }),
        DatasetChoice::TimedTrace { path, trace } => DatasetConfig::TimedTrace(TimedTraceConfig {
            path: path.clone(),
            format: trace.format,
            sec_multiplier: trace.sec_multiplier,
            chunk_hash_size: trace.chunk_hash_size,
            labels: trace.labels.clone(),
            window: trace.window,
            // vLLM samples --num-prompts rows (1000 by default) of a timed trace.
            max_requests: Some(plan.num_prompts),
            seed: plan.seed,
        }),
        DatasetChoice::SpecBench { path } => DatasetConfig::SpecBench(SpecBenchConfig {
            path: path.clone(),
            num_prompts: plan.num_prompts,
            output_len: plan.vllm.spec_bench_output_len,
            category: plan.vllm.spec_bench_category.clone(),
            seed: plan.seed,
            disable_shuffle: plan.disable_shuffle,
            no_oversample: plan.no_oversample,
        }),
        DatasetChoice::BurstGpt { path } => DatasetConfig::BurstGpt(BurstGptConfig {
            path: path.clone(),
            num_prompts: plan.num_prompts,
            seed: plan.seed,
        }),
    }
}

/// Build the requests of the run under `tokenizer`.
///
/// `lengths_only` skips prompt text for the random dataset (virtual time needs only the
/// lengths and the prefix, and text synthesis would dominate an hour-long simulation).
pub fn build(
    plan: &RunPlan,
    tokenizer: &Tokenizer,
    lengths_only: bool,
) -> Result<Vec<RequestSpec>> {
    Ok(build_checked(plan, tokenizer, lengths_only)?.0)
}

/// [`build`], with each request's own answer check (a custom dataset's `expected`): empty
/// when the dataset has none.
pub fn build_checked(
    plan: &RunPlan,
    tokenizer: &Tokenizer,
    lengths_only: bool,
) -> Result<(Vec<RequestSpec>, Vec<Option<Expected>>)> {
    if matches!(plan.dataset, DatasetChoice::Agentic(_)) {
        anyhow::bail!("--dataset-name agentic gives session trees, not single prompts: use it with `servebench run`");
    }
    let cfg = config(plan);
    if lengths_only {
        if let DatasetConfig::Random(c) = &cfg {
            let requests = servebench_workload::random::sample_random_lengths_with(c, tokenizer)?;
            return Ok((requests, Vec::new()));
        }
    }
    let started = std::time::Instant::now();
    let (requests, expected) = match &cfg {
        DatasetConfig::Custom(c) => {
            let got = sample_custom_checked(c, tokenizer)?;
            let expected = if got.has_expected() {
                got.expected
            } else {
                Vec::new()
            };
            (got.requests, expected)
        }
        _ => (sample_dataset(&cfg, tokenizer)?, Vec::new()),
    };
    let took = started.elapsed();
    if took > Duration::from_secs(2) {
        eprintln!(
            "Built {} prompts in {:.1} s",
            requests.len(),
            took.as_secs_f64()
        );
    }
    Ok((requests, expected))
}

/// The arrival process the plan describes.
pub fn arrivals(plan: &RunPlan) -> ArrivalConfig {
    let t = &plan.traffic;
    ArrivalConfig {
        request_rate: t.request_rate,
        burstiness: t.burstiness,
        ramp_up: t.ramp_up.map(|r| RampUp {
            strategy: r.strategy,
            start_rps: r.start_rps as f64,
            end_rps: r.end_rps as f64,
        }),
        seed: plan.seed,
    }
}

/// Intended send offsets: one per request, or as many as `--duration` holds.
pub fn schedule(plan: &RunPlan, n: usize) -> Result<Vec<u64>> {
    let cfg = arrivals(plan);
    cfg.validate()?;
    Ok(match plan.traffic.duration_s {
        // The plan checked the duration is positive and the rate finite (or ramped).
        Some(secs) => cfg.schedule_for_duration(Duration::from_secs_f64(secs))?,
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

/// Per-request checks cycled as [`cycle_to`] cycles their requests (empty stays empty).
pub fn cycle_expected(expected: Vec<Option<Expected>>, n: usize) -> Vec<Option<Expected>> {
    if expected.is_empty() || expected.len() == n {
        expected
    } else {
        (0..n)
            .map(|i| expected[i % expected.len()].clone())
            .collect()
    }
}
