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
pub const UNSUPPORTED_VLLM_FLAGS: &[(&str, &str)] = &[(
    "--hf-max-batch-size",
    "the Hugging Face transformers backend (--backend hf)",
)];

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
    /// vLLM's deprecated name of --dataset-path.
    #[arg(long, value_name = "PATH", hide = true)]
    pub dataset: Option<PathBuf>,
    /// Random prompt tokens (vLLM's random-dataset flag; --input-len wins).
    #[arg(long, value_name = "N")]
    pub random_input_len: Option<u64>,
    /// Random output tokens (--output-len wins).
    #[arg(long, value_name = "N")]
    pub random_output_len: Option<u64>,
    /// Random shared prefix tokens (--prefix-len wins).
    #[arg(long, value_name = "N")]
    pub random_prefix_len: Option<u64>,
    /// Subset (configuration) of the Hugging Face dataset.
    #[arg(long)]
    pub hf_subset: Option<String>,
    /// Split of the Hugging Face dataset.
    #[arg(long)]
    pub hf_split: Option<String>,
    /// Id of the Hugging Face dataset a local copy holds.
    #[arg(long)]
    pub hf_name: Option<String>,
    /// prefix_repetition: prefix tokens.
    #[arg(long, value_name = "N")]
    pub prefix_repetition_prefix_len: Option<u64>,
    /// prefix_repetition: tokens after the prefix.
    #[arg(long, value_name = "N")]
    pub prefix_repetition_suffix_len: Option<u64>,
    /// prefix_repetition: distinct prefixes.
    #[arg(long, value_name = "N")]
    pub prefix_repetition_num_prefixes: Option<usize>,
    /// prefix_repetition: output tokens.
    #[arg(long, value_name = "N")]
    pub prefix_repetition_output_len: Option<u64>,
    /// A LoRA adapter (path or Hub id, not read): with --enable-lora each request names one
    /// of --max-loras adapters `1`..`N` at random, as vLLM's offline benchmark does; the
    /// simulator serves those N.
    #[arg(long, value_name = "PATH")]
    pub lora_path: Option<String>,
    /// The images of random-mm (vLLM's --random-mm-* flags).
    #[command(flatten)]
    pub random_mm: crate::run::random_mm::RandomMmArgs,
    /// POST the server's /start_profile before the batch and /stop_profile after it (in
    /// virtual time there is no profiler: noted).
    #[arg(long)]
    pub profile: bool,
    /// Accepted: an in-process engine's option (noted).
    #[arg(long)]
    pub disable_frontend_multiprocessing: bool,
    /// Accepted: the simulator does not model detokenization; a server detokenizes what it
    /// streams either way (noted against a server).
    #[arg(long)]
    pub disable_detokenize: bool,
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
    let prompts = batch_run::count_images(&plan, &target, prompts)?;
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
    batch_run::profile(&target, plan.vllm.profile, "/start_profile").await;
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
    batch_run::profile(&target, plan.vllm.profile, "/stop_profile").await;
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
    let dataset_path = args.dataset_path.clone().or_else(|| args.dataset.clone());
    let name = args.dataset_name.unwrap_or(if dataset_path.is_some() {
        DatasetName::Sharegpt
    } else {
        DatasetName::Random
    });
    a.dataset_name = name;
    a.dataset_path = dataset_path;
    a.hf_subset = args.hf_subset.clone();
    a.hf_split = args.hf_split.clone();
    a.hf_name = args.hf_name.clone();
    if let Some(v) = args.prefix_repetition_prefix_len {
        a.prefix_repetition_prefix_len = v;
    }
    if let Some(v) = args.prefix_repetition_suffix_len {
        a.prefix_repetition_suffix_len = v;
    }
    if let Some(v) = args.prefix_repetition_num_prefixes {
        a.prefix_repetition_num_prefixes = v;
    }
    if let Some(v) = args.prefix_repetition_output_len {
        a.prefix_repetition_output_len = v;
    }
    a.random_mm = args.random_mm.clone();
    let external = a.base_url.is_some() || a.host.is_some() || a.port.is_some();
    let notes = [
        (
            args.disable_frontend_multiprocessing,
            "--disable-frontend-multiprocessing",
            true,
        ),
        (args.disable_detokenize, "--disable-detokenize", external),
    ];
    for (on, flag, say) in notes {
        if on && say {
            eprintln!("note: {flag} ignored: it sets vLLM's in-process engine; a server runs as it was started");
        }
    }
    if args.profile && !external {
        eprintln!("note: --profile ignored: the simulator in virtual time has no profiler");
    }
    a.vllm.profile = args.profile && external;
    if let Some(path) = &args.lora_path {
        let engine = &args.target.engine;
        if engine.enable_lora {
            let n = engine.max_loras.unwrap_or(1).max(1);
            let names: Vec<String> = (1..=n).map(|i| i.to_string()).collect();
            eprintln!(
                "LoRA: each request names one of {n} adapters (1..{n}) at random, as vLLM's \
                 offline benchmark names {path}"
            );
            if !external {
                let mut spec = a
                    .sim
                    .clone()
                    .unwrap_or_else(|| crate::run::target::DEFAULT_SIM_SPEC.to_owned());
                spec.push_str(" --lora-modules ");
                spec.push_str(&names.join(" "));
                if !spec.contains("--max-loras") {
                    spec.push_str(&format!(" --max-loras {n}"));
                }
                a.sim = Some(spec);
            }
            a.lora_modules = names;
        } else {
            eprintln!(
                "note: --lora-path ignored without --enable-lora (as vLLM's engine ignores it)"
            );
        }
    }
    a.num_prompts = usize::try_from(args.num_prompts).unwrap_or(usize::MAX);
    a.seed = args.seed;
    a.output_len = args.output_len.map(|v| v.min(i64::MAX as u64) as i64);
    if name == DatasetName::Random || name == DatasetName::RandomMm {
        let input_len = match args.input_len.or(args.random_input_len) {
            Some(n) => n,
            // random-mm takes the random dataset's default, as vLLM's does.
            None if name == DatasetName::RandomMm => 1024,
            None => bail!(
                "--input-len must be given for the random dataset (as in vllm bench throughput)"
            ),
        };
        a.input_len = Some(input_len);
        a.random_output_len = args
            .output_len
            .or(args.random_output_len)
            .unwrap_or(DEFAULT_RANDOM_OUTPUT_LEN);
        a.random_prefix_len = if args.prefix_len > 0 {
            args.prefix_len
        } else {
            args.random_prefix_len.unwrap_or(0)
        };
        if !(0.0..1.0).contains(&args.random_range_ratio) {
            bail!(
                "--random-range-ratio must be in [0, 1), got {}",
                args.random_range_ratio
            );
        }
        a.random_range_ratio = args.random_range_ratio;
    } else if args.input_len.is_some() {
        eprintln!(
            "note: --input-len ignored: the {} dataset takes its prompts from the file (as vLLM's)",
            name.as_str()
        );
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
