//! vLLM's engine arguments on `latency` and `throughput` (`vllm bench latency|throughput`
//! start an engine in-process and take `EngineArgs`). Without a server, servebench runs its
//! simulator in virtual time, and the arguments that size or schedule an engine configure it
//! (`--tensor-parallel-size`, `--max-model-len`, `--gpu-memory-utilization`, `--dtype`,
//! `--quantization fp8`, `--max-num-seqs`, ...); the others (how weights load, compilation,
//! logging) are listed in one note as having no effect on the simulator. Against a server
//! (`--base-url`/`--host`/`--port`) they configured that server when it started, and the note
//! says so. `--speculative-config` is refused: the simulator models speculative decoding,
//! but the share of drafts accepted depends on the model and the data, which vLLM's JSON does
//! not say; `--sim "MODEL --speculative-config JSON --spec-acceptance-rate R"` gives both.

use anyhow::{bail, Result};
use clap::Args;

/// The engine arguments these commands accept, vLLM's names.
#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct EngineArgs {
    /// Tensor-parallel degree of the simulated engine.
    #[arg(long, value_name = "N", help_heading = "vLLM engine arguments")]
    pub tensor_parallel_size: Option<u32>,
    /// Pipeline-parallel degree (not modelled: noted).
    #[arg(long, value_name = "N", help_heading = "vLLM engine arguments")]
    pub pipeline_parallel_size: Option<u32>,
    /// Data-parallel degree (not modelled: noted).
    #[arg(long, value_name = "N", help_heading = "vLLM engine arguments")]
    pub data_parallel_size: Option<u32>,
    /// Maximum prompt + output length of the simulated engine (a number, `32k`, or `auto`).
    #[arg(long, value_name = "N", help_heading = "vLLM engine arguments")]
    pub max_model_len: Option<String>,
    /// Share of GPU memory the simulated engine may use.
    #[arg(long, value_name = "FRACTION", help_heading = "vLLM engine arguments")]
    pub gpu_memory_utilization: Option<String>,
    /// Running sequences of the simulated engine.
    #[arg(long, value_name = "N", help_heading = "vLLM engine arguments")]
    pub max_num_seqs: Option<String>,
    /// Token budget of one simulated engine step.
    #[arg(long, value_name = "N", help_heading = "vLLM engine arguments")]
    pub max_num_batched_tokens: Option<String>,
    /// Weights data type: auto, bfloat16, float16 and half simulate 2-byte weights.
    #[arg(long, value_name = "DTYPE", help_heading = "vLLM engine arguments")]
    pub dtype: Option<String>,
    /// `fp8` simulates fp8 weights; other methods are noted.
    #[arg(
        long,
        short = 'q',
        value_name = "METHOD",
        help_heading = "vLLM engine arguments"
    )]
    pub quantization: Option<String>,
    /// KV-cache data type of the simulated engine (auto or fp8).
    #[arg(long, value_name = "DTYPE", help_heading = "vLLM engine arguments")]
    pub kv_cache_dtype: Option<String>,
    /// KV block size of the simulated engine.
    #[arg(long, value_name = "N", help_heading = "vLLM engine arguments")]
    pub block_size: Option<String>,
    /// Prefix caching on (vLLM `latency` turns it off by default).
    #[arg(
        long,
        overrides_with = "no_enable_prefix_caching",
        help_heading = "vLLM engine arguments"
    )]
    pub enable_prefix_caching: bool,
    /// Prefix caching off.
    #[arg(long, help_heading = "vLLM engine arguments")]
    pub no_enable_prefix_caching: bool,
    /// Chunked prefill on.
    #[arg(
        long,
        overrides_with = "no_enable_chunked_prefill",
        help_heading = "vLLM engine arguments"
    )]
    pub enable_chunked_prefill: bool,
    /// Chunked prefill off.
    #[arg(long, help_heading = "vLLM engine arguments")]
    pub no_enable_chunked_prefill: bool,
    /// Asynchronous scheduling of the simulated engine.
    #[arg(long, help_heading = "vLLM engine arguments")]
    pub async_scheduling: bool,
    /// LoRA adapters on (`throughput --lora-path`).
    #[arg(long, help_heading = "vLLM engine arguments")]
    pub enable_lora: bool,
    /// Adapters in one batch (`throughput --lora-path` names requests' adapters 1..N).
    #[arg(long, value_name = "N", help_heading = "vLLM engine arguments")]
    pub max_loras: Option<u32>,
    /// Rank every adapter is charged for.
    #[arg(long, value_name = "R", help_heading = "vLLM engine arguments")]
    pub max_lora_rank: Option<u32>,
    /// Refused: the acceptance rate it needs is not in vLLM's JSON; give both with `--sim`.
    #[arg(long, value_name = "JSON", help_heading = "vLLM engine arguments")]
    pub speculative_config: Option<String>,
    /// Noted: how vLLM loads weights (`dummy`, `auto`, ...).
    #[arg(long, value_name = "FORMAT", help_heading = "vLLM engine arguments")]
    pub load_format: Option<String>,
    /// Noted: CUDA graphs off in vLLM.
    #[arg(long, help_heading = "vLLM engine arguments")]
    pub enforce_eager: bool,
    /// Noted.
    #[arg(long, value_name = "BACKEND", help_heading = "vLLM engine arguments")]
    pub distributed_executor_backend: Option<String>,
    /// Noted.
    #[arg(long, value_name = "DIR", help_heading = "vLLM engine arguments")]
    pub download_dir: Option<String>,
    /// Noted.
    #[arg(long, value_name = "REV", help_heading = "vLLM engine arguments")]
    pub revision: Option<String>,
    /// Noted.
    #[arg(
        long,
        short = 'O',
        value_name = "JSON",
        help_heading = "vLLM engine arguments"
    )]
    pub compilation_config: Option<String>,
    /// Noted.
    #[arg(long, value_name = "JSON", help_heading = "vLLM engine arguments")]
    pub hf_overrides: Option<String>,
    /// Noted.
    #[arg(long, value_name = "JSON", help_heading = "vLLM engine arguments")]
    pub limit_mm_per_prompt: Option<String>,
    /// Noted.
    #[arg(long, value_name = "JSON", help_heading = "vLLM engine arguments")]
    pub mm_processor_kwargs: Option<String>,
    /// Noted.
    #[arg(long, help_heading = "vLLM engine arguments")]
    pub enable_expert_parallel: bool,
    /// Noted.
    #[arg(long, value_name = "GIB", help_heading = "vLLM engine arguments")]
    pub swap_space: Option<String>,
    /// Noted.
    #[arg(long, value_name = "GIB", help_heading = "vLLM engine arguments")]
    pub cpu_offload_gb: Option<String>,
    /// Noted.
    #[arg(long, value_name = "N", help_heading = "vLLM engine arguments")]
    pub max_cpu_loras: Option<String>,
    /// Noted.
    #[arg(long, help_heading = "vLLM engine arguments")]
    pub disable_log_stats: bool,
    /// Noted.
    #[arg(long, value_name = "MODE", help_heading = "vLLM engine arguments")]
    pub tokenizer_mode: Option<String>,
    /// Noted.
    #[arg(long, value_name = "JSON", help_heading = "vLLM engine arguments")]
    pub kv_transfer_config: Option<String>,
    /// Noted.
    #[arg(long, value_name = "JSON", help_heading = "vLLM engine arguments")]
    pub profiler_config: Option<String>,
    /// Noted.
    #[arg(long, value_name = "N", help_heading = "vLLM engine arguments")]
    pub max_logprobs: Option<String>,
    /// Noted.
    #[arg(long, value_name = "SOURCE", help_heading = "vLLM engine arguments")]
    pub generation_config: Option<String>,
}

/// What the engine arguments do to a virtual-time run: the words added to the simulator's
/// spec, and the note for those without effect.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SimMapping {
    pub spec_words: Vec<String>,
    pub ignored: Vec<&'static str>,
}

impl EngineArgs {
    /// Refuses what would give a wrong number.
    pub fn check(&self) -> Result<()> {
        if self.speculative_config.is_some() {
            bail!(
                "--speculative-config: the simulator models speculative decoding, but how many \
                 drafts are accepted depends on the model and the data, which this JSON does not \
                 say; give both: --sim \"MODEL --speculative-config JSON --spec-acceptance-rate \
                 R\" (docs/sim.md), or point --base-url at a server started with it"
            );
        }
        Ok(())
    }

    /// The flags given that have no simulator counterpart.
    fn unmodelled(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        let mut add = |on: bool, name: &'static str| {
            if on {
                v.push(name);
            }
        };
        add(
            self.pipeline_parallel_size.is_some_and(|n| n > 1),
            "--pipeline-parallel-size",
        );
        add(
            self.data_parallel_size.is_some_and(|n| n > 1),
            "--data-parallel-size",
        );
        add(self.load_format.is_some(), "--load-format");
        add(self.enforce_eager, "--enforce-eager");
        add(
            self.distributed_executor_backend.is_some(),
            "--distributed-executor-backend",
        );
        add(self.download_dir.is_some(), "--download-dir");
        add(self.revision.is_some(), "--revision");
        add(self.compilation_config.is_some(), "--compilation-config");
        add(self.hf_overrides.is_some(), "--hf-overrides");
        add(self.limit_mm_per_prompt.is_some(), "--limit-mm-per-prompt");
        add(self.mm_processor_kwargs.is_some(), "--mm-processor-kwargs");
        add(self.enable_expert_parallel, "--enable-expert-parallel");
        add(self.swap_space.is_some(), "--swap-space");
        add(self.cpu_offload_gb.is_some(), "--cpu-offload-gb");
        add(self.max_cpu_loras.is_some(), "--max-cpu-loras");
        add(self.disable_log_stats, "--disable-log-stats");
        add(self.tokenizer_mode.is_some(), "--tokenizer-mode");
        add(self.kv_transfer_config.is_some(), "--kv-transfer-config");
        add(self.profiler_config.is_some(), "--profiler-config");
        add(self.max_logprobs.is_some(), "--max-logprobs");
        add(self.generation_config.is_some(), "--generation-config");
        v
    }

    /// Every flag given (for the note against a server).
    fn given(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        let mut add = |on: bool, name: &'static str| {
            if on {
                v.push(name);
            }
        };
        add(
            self.tensor_parallel_size.is_some(),
            "--tensor-parallel-size",
        );
        add(self.max_model_len.is_some(), "--max-model-len");
        add(
            self.gpu_memory_utilization.is_some(),
            "--gpu-memory-utilization",
        );
        add(self.max_num_seqs.is_some(), "--max-num-seqs");
        add(
            self.max_num_batched_tokens.is_some(),
            "--max-num-batched-tokens",
        );
        add(self.dtype.is_some(), "--dtype");
        add(self.quantization.is_some(), "--quantization");
        add(self.kv_cache_dtype.is_some(), "--kv-cache-dtype");
        add(self.block_size.is_some(), "--block-size");
        add(
            self.enable_prefix_caching || self.no_enable_prefix_caching,
            "--enable-prefix-caching",
        );
        add(
            self.enable_chunked_prefill || self.no_enable_chunked_prefill,
            "--enable-chunked-prefill",
        );
        add(self.async_scheduling, "--async-scheduling");
        add(self.enable_lora, "--enable-lora");
        add(self.max_loras.is_some(), "--max-loras");
        add(self.max_lora_rank.is_some(), "--max-lora-rank");
        v.extend(self.unmodelled());
        v
    }

    /// The note for a run against a server, when any engine argument was given.
    pub fn server_note(&self) -> Option<String> {
        let given = self.given();
        (!given.is_empty()).then(|| {
            format!(
                "note: {} ignored: they configure vLLM's in-process engine; the server at \
                 --base-url/--host/--port runs as it was started",
                given.join(", ")
            )
        })
    }

    /// The simulator words for these arguments, and the flags without effect on it.
    pub fn sim_mapping(&self) -> Result<SimMapping> {
        let mut m = SimMapping {
            spec_words: Vec::new(),
            ignored: self.unmodelled(),
        };
        let mut put = |flag: &str, value: Option<String>| {
            m.spec_words.push(flag.to_owned());
            if let Some(v) = value {
                m.spec_words.push(v);
            }
        };
        if let Some(n) = self.tensor_parallel_size {
            put("--tensor-parallel-size", Some(n.to_string()));
        }
        if let Some(v) = &self.max_model_len {
            put("--max-model-len", Some(v.clone()));
        }
        if let Some(v) = &self.gpu_memory_utilization {
            put("--gpu-memory-utilization", Some(v.clone()));
        }
        if let Some(v) = &self.max_num_seqs {
            put("--max-num-seqs", Some(v.clone()));
        }
        if let Some(v) = &self.max_num_batched_tokens {
            put("--max-num-batched-tokens", Some(v.clone()));
        }
        let fp8 = match self.quantization.as_deref() {
            None => false,
            Some(q) if q.eq_ignore_ascii_case("fp8") => true,
            Some(q) => bail!(
                "--quantization {q}: the simulator models bf16 and fp8 weights only, so its \
                 figures for {q} would be wrong; use --quantization fp8, or measure a server \
                 started with {q} (--base-url)"
            ),
        };
        match self.dtype.as_deref() {
            None | Some("auto" | "bfloat16" | "float16" | "half" | "bf16") => {}
            Some(d) => bail!(
                "--dtype {d}: the simulator models 2-byte (bfloat16/float16) and fp8 weights \
                 only, so its figures for {d} would be wrong"
            ),
        }
        if fp8 {
            put("--dtype", Some("fp8".to_owned()));
        }
        if let Some(v) = &self.kv_cache_dtype {
            put("--kv-cache-dtype", Some(v.clone()));
        }
        if let Some(v) = &self.block_size {
            put("--block-size", Some(v.clone()));
        }
        if self.enable_prefix_caching {
            put("--enable-prefix-caching", None);
        }
        if self.no_enable_prefix_caching {
            put("--no-enable-prefix-caching", None);
        }
        if self.enable_chunked_prefill {
            put("--enable-chunked-prefill", None);
        }
        if self.no_enable_chunked_prefill {
            put("--no-enable-chunked-prefill", None);
        }
        if self.async_scheduling {
            put("--async-scheduling", None);
        }
        if let Some(n) = self.max_loras {
            put("--max-loras", Some(n.to_string()));
        }
        if let Some(r) = self.max_lora_rank {
            put("--max-lora-rank", Some(r.to_string()));
        }
        Ok(m)
    }
}

/// The note for flags without effect on the simulator.
pub fn ignored_note(ignored: &[&str]) -> Option<String> {
    (!ignored.is_empty()).then(|| {
        format!(
            "note: {} ignored: they set how vLLM loads, compiles or distributes its engine, \
             which the simulator does not model",
            ignored.join(", ")
        )
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn sizing_flags_go_to_the_simulator_and_the_rest_are_noted() {
        let e = EngineArgs {
            tensor_parallel_size: Some(4),
            max_model_len: Some("8192".into()),
            quantization: Some("fp8".into()),
            load_format: Some("dummy".into()),
            enforce_eager: true,
            ..EngineArgs::default()
        };
        let m = e.sim_mapping().unwrap();
        assert_eq!(
            m.spec_words.join(" "),
            "--tensor-parallel-size 4 --max-model-len 8192 --dtype fp8"
        );
        assert_eq!(m.ignored, ["--load-format", "--enforce-eager"]);
        assert!(ignored_note(&m.ignored).unwrap().contains("--load-format"));
        assert!(e.server_note().unwrap().contains("--tensor-parallel-size"));
        assert!(EngineArgs::default().server_note().is_none());
    }

    #[test]
    fn what_would_give_a_wrong_number_is_refused() {
        let spec = EngineArgs {
            speculative_config: Some("{}".into()),
            ..EngineArgs::default()
        };
        assert!(spec
            .check()
            .unwrap_err()
            .to_string()
            .contains("speculative"));
        let awq = EngineArgs {
            quantization: Some("awq".into()),
            ..EngineArgs::default()
        };
        assert!(awq.sim_mapping().unwrap_err().to_string().contains("awq"));
    }
}
