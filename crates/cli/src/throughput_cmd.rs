//! `servebench throughput`: `vllm bench throughput` against any server or the simulator in
//! virtual time. Every request is released at once and the clock runs until the last one
//! ends: the ceiling of the target at these lengths.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Result};
use clap::Args;
use servebench_report::OrderedObject;

use crate::batch_run::{self, Batch, BatchTarget, BatchTargetArgs};
use crate::run::args::DatasetName;
use crate::run::plan::RunPlan;
use crate::run::{dataset, interrupt_on_ctrl_c, load_tokenizer};

/// vLLM's random dataset output length when `--output-len` is not given.
pub const DEFAULT_RANDOM_OUTPUT_LEN: u64 = 128;

/// `vllm bench throughput` flags servebench refuses, with the reason.
pub const UNSUPPORTED_VLLM_FLAGS: &[(&str, &str)] = &[
    ("--profile", "profiling the engine"),
    ("--disable-frontend-multiprocessing", "an in-process engine"),
    (
        "--disable-detokenize",
        "a server always detokenizes what it streams",
    ),
    ("--hf-max-batch-size", "the HF transformers backend"),
    ("--lora-path", "LoRA adapters"),
    ("--hf-subset", "HuggingFace hub datasets"),
    ("--hf-split", "HuggingFace hub datasets"),
    ("--dataset", "the deprecated --dataset (use --dataset-path)"),
    (
        "--prefix-repetition-prefix-len",
        "the prefix_repetition dataset",
    ),
    (
        "--prefix-repetition-suffix-len",
        "the prefix_repetition dataset",
    ),
    (
        "--prefix-repetition-num-prefixes",
        "the prefix_repetition dataset",
    ),
    (
        "--prefix-repetition-output-len",
        "the prefix_repetition dataset",
    ),
];

/// Refuse `vllm bench throughput` flags servebench does not implement.
pub fn check_unsupported(args: &[String]) -> Result<(), String> {
    batch_run::refuse_flags("throughput", args, UNSUPPORTED_VLLM_FLAGS)
}

/// Arguments of `servebench throughput`.
#[derive(Debug, Clone, Args)]
pub struct ThroughputArgs {
    #[command(flatten)]
    pub target: BatchTargetArgs,
    /// Where prompts come from: random token prompts, a ShareGPT file or a custom JSONL file
    /// [default: random, or sharegpt when --dataset-path is given, as vLLM].
    #[arg(long, value_enum)]
    pub dataset_name: Option<DatasetName>,
    /// Dataset file (sharegpt JSON, custom JSONL).
    #[arg(long)]
    pub dataset_path: Option<PathBuf>,
    /// Prompt tokens of each random request (required for the random dataset, as in vLLM).
    #[arg(long)]
    pub input_len: Option<u64>,
    /// Output tokens of each request, overriding the dataset's [random default: 128].
    #[arg(long)]
    pub output_len: Option<u64>,
    /// Sequences per prompt: each prompt is sent N times (prompt tokens counted once, as vLLM
    /// counts them).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub n: u32,
    /// Number of prompts to process.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub num_prompts: u64,
    /// Save the results as vLLM does: elapsed_time, num_requests, total_num_tokens,
    /// requests_per_second, tokens_per_second.
    #[arg(long, value_name = "FILE")]
    pub output_json: Option<PathBuf>,
    /// Fixed prefix tokens before each random prompt (shared by all, as vLLM's).
    #[arg(long, default_value_t = 0)]
    pub prefix_len: u64,
    /// Range ratio for sampling random input/output lengths: uniform in
    /// [len·(1−r), len·(1+r)].
    #[arg(long, default_value_t = 0.0)]
    pub random_range_ratio: f64,
    /// Random seed of the dataset.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// The figures of a throughput run, as vLLM computes them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThroughputResult {
    pub elapsed_time: f64,
    /// Prompts (not counting `--n` copies).
    pub num_requests: u64,
    pub total_prompt_tokens: u64,
    pub total_output_tokens: u64,
}

impl ThroughputResult {
    /// Prompt tokens once per prompt, output tokens of every sequence.
    pub fn from_batch(batch: &Batch, n: u32) -> ThroughputResult {
        let n = u64::from(n.max(1));
        let records = &batch.records;
        ThroughputResult {
            elapsed_time: batch.elapsed_s(),
            num_requests: records.len() as u64 / n,
            total_prompt_tokens: records
                .iter()
                .filter(|r| r.id % n == 0)
                .map(|r| r.input_tokens)
                .sum(),
            total_output_tokens: records.iter().map(|r| r.output_tokens).sum(),
        }
    }

    pub fn total_num_tokens(&self) -> u64 {
        self.total_prompt_tokens + self.total_output_tokens
    }

    /// vLLM's result object, keys in its order.
    pub fn vllm_json(&self) -> OrderedObject {
        let mut o = OrderedObject::new();
        o.insert("elapsed_time", self.elapsed_time);
        o.insert("num_requests", self.num_requests);
        o.insert("total_num_tokens", self.total_num_tokens());
        o.insert(
            "requests_per_second",
            self.num_requests as f64 / self.elapsed_time,
        );
        o.insert(
            "tokens_per_second",
            self.total_num_tokens() as f64 / self.elapsed_time,
        );
        o
    }

    /// vLLM's terminal lines (the output-token rate is on the first).
    pub fn vllm_lines(&self) -> String {
        let t = self.elapsed_time;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "Throughput: {:.2} requests/s, {:.2} total tokens/s, {:.2} output tokens/s",
            self.num_requests as f64 / t,
            self.total_num_tokens() as f64 / t,
            self.total_output_tokens as f64 / t
        );
        let _ = writeln!(s, "Total num prompt tokens:  {}", self.total_prompt_tokens);
        let _ = writeln!(s, "Total num output tokens:  {}", self.total_output_tokens);
        s
    }
}

/// Runs `servebench throughput`.
pub async fn throughput(args: ThroughputArgs) -> Result<ExitCode> {
    let plan = plan(&args)?;
    batch_run::check_output_json(args.output_json.as_ref())?;
    let tokenizer = load_tokenizer(plan.tokenizer.as_deref(), true)?;
    let mut target = BatchTarget::connect(&plan, &tokenizer).await?;
    let prompts = dataset::build(&plan, &tokenizer, target.is_virtual())?;
    if prompts.is_empty() {
        bail!("the dataset produced no requests");
    }
    eprintln!(
        "Releasing {} requests at once ({} prompts × {} sequences)",
        prompts.len() * args.n as usize,
        prompts.len(),
        args.n
    );
    let stop = interrupt_on_ctrl_c();
    let batch = match target
        .run_batch(
            &plan,
            &prompts,
            args.n as usize,
            plan.seed,
            Some("throughput"),
            &stop,
        )
        .await
    {
        Ok(b) => b,
        Err(_) if stop.dispatch_stopped() => {
            eprintln!("Interrupted: no results written");
            return Ok(crate::run::final_exit(ExitCode::from(
                crate::run::EXIT_INTERRUPTED,
            )));
        }
        Err(e) => return Err(e),
    };
    batch.check_all_succeeded()?;
    let result = ThroughputResult::from_batch(&batch, args.n);
    print!("{}", result.vllm_lines());
    if let Some(path) = &args.output_json {
        batch_run::write_python_json(path, &result.vllm_json())?;
        eprintln!("Results: {}", path.display());
    }
    Ok(crate::run::final_exit(ExitCode::SUCCESS))
}

/// `run`'s plan for the target and dataset, every request at time 0.
pub fn plan(args: &ThroughputArgs) -> Result<RunPlan> {
    let mut a = args.target.to_run_args()?;
    let name = args.dataset_name.unwrap_or(if args.dataset_path.is_some() {
        DatasetName::Sharegpt
    } else {
        DatasetName::Random
    });
    if name == DatasetName::RandomMm {
        bail!("--dataset-name random-mm is measured with `servebench run --backend openai-chat` (images go in chat messages)");
    }
    a.dataset_name = name;
    a.dataset_path = args.dataset_path.clone();
    a.num_prompts = usize::try_from(args.num_prompts).unwrap_or(usize::MAX);
    a.seed = args.seed;
    a.output_len = args.output_len.map(|v| v.min(i64::MAX as u64) as i64);
    if name == DatasetName::Random {
        let Some(input_len) = args.input_len else {
            bail!("--input-len must be given for the random dataset (as in vllm bench throughput)");
        };
        a.input_len = Some(input_len);
        a.random_output_len = args.output_len.unwrap_or(DEFAULT_RANDOM_OUTPUT_LEN);
        a.random_prefix_len = args.prefix_len;
        if !(0.0..1.0).contains(&args.random_range_ratio) {
            bail!(
                "--random-range-ratio must be in [0, 1), got {}",
                args.random_range_ratio
            );
        }
        a.random_range_ratio = args.random_range_ratio;
    } else if args.input_len.is_some() {
        bail!("--input-len applies to the random dataset; --dataset-name {name:?} takes prompt lengths from the file");
    }
    RunPlan::from_args(&a)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn json_has_vllms_keys_in_vllms_order_and_figures() {
        let r = ThroughputResult {
            elapsed_time: 2.0,
            num_requests: 10,
            total_prompt_tokens: 300,
            total_output_tokens: 100,
        };
        let j = r.vllm_json();
        let keys: Vec<&str> = j.keys().collect();
        assert_eq!(
            keys,
            [
                "elapsed_time",
                "num_requests",
                "total_num_tokens",
                "requests_per_second",
                "tokens_per_second"
            ]
        );
        assert_eq!(j.get("total_num_tokens").unwrap().as_u64(), Some(400));
        assert_eq!(j.get("requests_per_second").unwrap().as_f64(), Some(5.0));
        assert_eq!(j.get("tokens_per_second").unwrap().as_f64(), Some(200.0));
        let lines = r.vllm_lines();
        assert!(lines.starts_with(
            "Throughput: 5.00 requests/s, 200.00 total tokens/s, 50.00 output tokens/s\n"
        ));
        assert!(lines.contains("Total num prompt tokens:  300\n"));
    }
}
