//! From flags to a runnable simulator: catalog lookups, the deployment with its overrides,
//! vLLM's scheduler defaults (docs/simulator.md §2.5), KV sizing (§4), the tokenizer, and the
//! derived figures a start-up banner and result metadata show. Bad configurations are refused
//! here, with vLLM-like messages.

use std::time::Duration;

use servebench_metrics::units::{ms_to_s, s_to_ms};
use servebench_roofline::{
    kv_capacity_with_rule, resolve_scheduler_limits, Catalog, Deployment, GpuSpec, KvCapacity,
    KvSizing, ModelSpec,
};
use servebench_tokenizer::Tokenizer;

use crate::args::{MaxModelLen, SimArgs};
use crate::engine::EngineConfig;
use crate::faults::FaultConfig;
use crate::realtime::TimingOptions;
use crate::reasoning::ReasoningSplit;
use crate::SimError;

/// Context of the single-stream decode figure in the banner.
const BANNER_DECODE_CONTEXT: u32 = 1024;
/// Prompt length of the prefill-throughput figure in the banner.
const BANNER_PREFILL_TOKENS: u32 = 2048;

/// Figures derived from the configuration, for the start-up banner and run metadata.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DerivedFigures {
    /// KV blocks, the reserved null block included.
    pub num_gpu_blocks: u32,
    /// `num_gpu_blocks · block_size`, vLLM's "GPU KV cache size".
    pub kv_cache_tokens: u64,
    /// vLLM's "Maximum concurrency for max_model_len tokens per request".
    pub max_concurrency: f64,
    /// Predicted single-stream decode step at context 1024, ms per token.
    pub decode_ms_per_token_ctx1024: f64,
    /// Predicted idle-engine prefill throughput on a 2048-token prompt (or the longest allowed).
    pub prefill_tokens_per_s: f64,
    /// Resident weights per GPU, GiB.
    pub weights_gib_per_gpu: f64,
}

/// A validated simulator configuration: everything [`crate::server::serve`] needs.
#[derive(Debug, Clone)]
pub struct ResolvedSim {
    /// The flags it came from.
    pub args: SimArgs,
    /// The engine core's configuration.
    pub engine: EngineConfig,
    /// The KV sizing behind `engine.num_gpu_blocks`.
    pub kv: KvCapacity,
    /// Counts prompt tokens and names output words.
    pub tokenizer: Tokenizer,
    /// The model name the API reports.
    pub served_model_name: String,
    /// Every name a request's `model` may use (served names, the preset id and its aliases).
    pub accepted_model_names: Vec<String>,
    /// How the real-time driver maps engine time onto the wall clock.
    pub timing: TimingOptions,
    /// Injected faults.
    pub faults: FaultConfig,
    /// Report `prompt_tokens_details.cached_tokens` in usage.
    pub prompt_tokens_details: bool,
    /// Also export deprecated metric names.
    pub metrics_compat: bool,
    /// `--gpu-memory-utilization` (a label of `vllm:cache_config_info`).
    pub gpu_memory_utilization: f64,
    /// KV-cache dtype as vLLM labels it.
    pub cache_dtype: String,
    /// Banner and metadata figures.
    pub derived: DerivedFigures,
    /// The effective configuration, for `GET /sim/config` and run metadata.
    pub config_json: serde_json::Value,
    /// Chat responses open with this many reasoning tokens (`--reasoning-tokens`,
    /// `--reasoning-fraction`).
    pub reasoning: Option<crate::reasoning::ReasoningSplit>,
    /// `--lora-modules`: adapter names; adapter `i` runs in the engine as `i + 1`.
    pub lora_modules: Vec<String>,
    /// Several engines behind the endpoint (`--replicas`, `--pool`), `None` for one engine.
    pub fleet: Option<std::sync::Arc<crate::fleet::ResolvedFleet>>,
    /// The served model's vision encoder; `None` for a text-only model (images refused).
    pub vision: Option<servebench_roofline::VisionSpec>,
}

fn check_fraction(name: &str, v: f64, allow_one: bool) -> Result<(), SimError> {
    let ok = v.is_finite() && v >= 0.0 && (v < 1.0 || (allow_one && v == 1.0));
    if ok {
        Ok(())
    } else {
        let range = if allow_one { "[0, 1]" } else { "[0, 1)" };
        Err(SimError::Config(format!(
            "{name} must be in {range}, got {v}"
        )))
    }
}

fn check_non_negative(name: &str, v: f64) -> Result<(), SimError> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(SimError::Config(format!(
            "{name} must be a non-negative number, got {v}"
        )))
    }
}

impl SimArgs {
    /// Validates the flags and builds the engine configuration, tokenizer and derived figures.
    pub fn resolve(&self) -> Result<ResolvedSim, SimError> {
        self.resolve_with(Catalog::builtin())
    }

    /// [`SimArgs::resolve`] against `catalog` instead of the built-in one (`--catalog` still
    /// merges on top).
    pub fn resolve_with(&self, catalog: Catalog) -> Result<ResolvedSim, SimError> {
        self.check_ranges()?;
        let mut catalog = catalog;
        if let Some(path) = &self.catalog {
            catalog.merge_file(path)?;
        }
        let gpu: GpuSpec = match &self.gpu_spec {
            Some(spec) => GpuSpec::from_spec_str(spec)?,
            None => catalog.gpu(&self.gpu)?.clone(),
        };
        let model: ModelSpec = match &self.hf_config {
            Some(path) => ModelSpec::from_hf_config(path)?,
            None => catalog.model(&self.model)?.clone(),
        };
        let dtype = self.dtype;
        let kv_dtype = self.kv_cache_dtype;
        let profile = crate::engine_profile::ProfileChoice::new(self);
        let mfu_fp8 = profile.mfu_fp8(self, &gpu);
        let builder = Deployment::builder(gpu, model.clone())
            .dtype(dtype)
            .kv_dtype(kv_dtype)
            .tensor_parallel(self.tensor_parallel_size);
        let builder = crate::calibration::apply_file(self.calibration.as_deref(), builder)?;
        let builder = builder
            .mfu(self.mfu)
            .mfu_fp8(mfu_fp8)
            .mbu(self.mbu)
            .mbu_kv(profile.mbu_kv(self))
            .softroof_p(self.softroof_p)
            .step_overhead_us(self.step_overhead_us)
            .layer_overhead_us(self.layer_overhead_us)
            .req_overhead_us(self.req_overhead_us)
            .cpu_floor_us(self.cpu_floor_us)
            .allreduce_latency_us(self.allreduce_latency_us)
            .link_gbps(self.link_gbps)
            .async_scheduling(self.async_scheduling);
        let deployment = builder.clone().build()?;

        let derived_len = model.max_position_embeddings;
        let requested_len = match self.max_model_len {
            Some(MaxModelLen::Tokens(0)) => {
                return Err(SimError::Config("max_model_len must be at least 1".into()))
            }
            Some(MaxModelLen::Tokens(len)) if len > derived_len => {
                return Err(SimError::Config(format!(
                    "User-specified max_model_len ({len}) is greater than the derived max_model_len \
                     (max_position_embeddings={derived_len} in the config of {}); lower --max-model-len",
                    model.id
                )))
            }
            Some(MaxModelLen::Tokens(len)) => len,
            Some(MaxModelLen::Auto) | None => derived_len,
        };
        let kv_rule = profile.kv_budget_rule(self);
        let chunked = profile.chunked_prefill(self);
        let block_size = profile.block_size(self);
        let size_for = |max_model_len: u32| -> Result<_, SimError> {
            let (budget, seqs) = profile.batch_limits(self, chunked, max_model_len);
            let (max_num_batched_tokens, max_num_seqs) =
                resolve_scheduler_limits(deployment.gpu(), chunked, max_model_len, budget, seqs)?;
            let sizing = KvSizing {
                gpu_memory_utilization: self.gpu_memory_utilization,
                block_size,
                max_num_batched_tokens,
                max_num_seqs,
                num_gpu_blocks_override: self.num_gpu_blocks_override,
                gpu_memory_gib_override: self.gpu_memory_gib,
            };
            Ok((
                max_num_batched_tokens,
                max_num_seqs,
                kv_capacity_with_rule(&deployment, &sizing, kv_rule)?,
            ))
        };
        let (mut max_num_batched_tokens, mut max_num_seqs, mut kv) = size_for(requested_len)?;
        let mut max_model_len = requested_len;
        // Like vLLM, an unset length that does not fit is refused (naming the largest that
        // would); only `auto` shrinks it. Sizing again with the shorter length can only free
        // memory (a smaller budget without chunked prefill), so the fitted length still fits.
        if self.max_model_len == Some(MaxModelLen::Auto)
            && kv.check_max_model_len(requested_len).is_err()
        {
            // The engine keeps a block for the last token too (its admission check is one
            // token stricter than the capacity bound), so the fitted length is whole blocks.
            let whole_blocks = kv.allocatable_blocks() * u64::from(block_size);
            max_model_len = u32::try_from(whole_blocks)
                .unwrap_or(u32::MAX)
                .min(derived_len);
            (max_num_batched_tokens, max_num_seqs, kv) = size_for(max_model_len)?;
        }
        kv.check_max_model_len(max_model_len)?;

        let tokenizer = match &self.tokenizer {
            Some(path) => Tokenizer::load(&path.to_string_lossy())?,
            None => Tokenizer::builtin(),
        };
        let output_vocab: Vec<u32> = tokenizer
            .filler_words()
            .into_iter()
            .map(|(_, id)| id)
            .collect();
        if output_vocab.is_empty() {
            return Err(SimError::Config(format!(
                "tokenizer {} has none of the filler words as single tokens; output text cannot be generated",
                tokenizer.name()
            )));
        }
        let vocab_size = u32::try_from(tokenizer.vocab_size()).unwrap_or(u32::MAX);

        let deployment = match profile.cuda_graph_sizes(max_num_seqs) {
            Some(sizes) => builder.cuda_graph_sizes(sizes).build()?,
            None => deployment,
        };
        let full_sequence_must_fit = profile.full_sequence_must_fit(self);
        let lora_names = crate::lora_args::adapter_names(&self.lora_modules)?;
        let engine = EngineConfig {
            lora: crate::lora_args::engine_config(self, &lora_names)?,
            deployment: deployment.clone(),
            max_num_seqs,
            max_num_batched_tokens,
            max_model_len,
            block_size,
            num_gpu_blocks: kv.num_gpu_blocks,
            enable_prefix_caching: self.prefix_caching(),
            enable_chunked_prefill: chunked,
            long_prefill_token_threshold: self.long_prefill_token_threshold,
            kv_watermark: self.kv_watermark,
            full_sequence_must_fit,
            seed: self.seed,
            jitter_sigma: self.jitter_sigma,
            hiccup_prob: self.hiccup_prob,
            hiccup_ms: self.hiccup_ms,
            eos_len_median: self.eos_len_median,
            eos_len_sigma: self.eos_len_sigma,
            output_vocab,
            vocab_size,
        };

        let mut served_names = self.served_model_name.clone();
        if served_names.is_empty() {
            served_names.push(self.model.clone());
        }
        let served_model_name = served_names[0].clone();
        let mut accepted = served_names;
        for name in std::iter::once(&self.model)
            .chain(std::iter::once(&model.id))
            .chain(&model.aliases)
        {
            if !accepted.contains(name) {
                accepted.push(name.clone());
            }
        }

        let prefill_len = BANNER_PREFILL_TOKENS
            .min(max_model_len.saturating_sub(1))
            .max(1);
        let prefill = deployment.prefill_time(prefill_len, max_num_batched_tokens);
        let derived = DerivedFigures {
            num_gpu_blocks: kv.num_gpu_blocks,
            kv_cache_tokens: kv.tokens,
            max_concurrency: kv.max_concurrency_at(max_model_len),
            decode_ms_per_token_ctx1024: s_to_ms(
                deployment.decode_tpot(BANNER_DECODE_CONTEXT, 1).total,
            ),
            prefill_tokens_per_s: if prefill.total_s > 0.0 {
                f64::from(prefill_len) / prefill.total_s
            } else {
                0.0
            },
            weights_gib_per_gpu: kv.weights_bytes / servebench_roofline::GIB,
        };

        let timing = TimingOptions {
            time_scale: self.time_scale,
            precise: self.precise_timing,
            max_lag: Duration::from_secs_f64(ms_to_s(self.max_lag_ms)),
        };
        let faults = FaultConfig {
            error_rate: self.fault_error_rate,
            error_status: self.fault_error_status,
            stall_prob: self.fault_stall_prob,
            stall: Duration::from_secs_f64(ms_to_s(self.fault_stall_ms)),
            disconnect_prob: self.fault_disconnect_prob,
            malformed_prob: self.fault_malformed_prob,
        };
        let mut config_json = serde_json::json!({
            "engine": "servebench-sim",
            "version": concat!(env!("CARGO_PKG_VERSION"), "-sim"),
            "model": model.id,
            "served_model_name": served_model_name,
            "gpu": deployment.gpu().id,
            "dtype": dtype.as_str(),
            "kv_cache_dtype": kv_dtype.as_str(),
            "tensor_parallel_size": deployment.tp(),
            "max_num_seqs": max_num_seqs,
            "max_num_batched_tokens": max_num_batched_tokens,
            "max_model_len": max_model_len,
            "block_size": block_size,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "num_gpu_blocks": kv.num_gpu_blocks,
            "num_gpu_blocks_override": self.num_gpu_blocks_override,
            "enable_prefix_caching": self.prefix_caching(),
            "enable_chunked_prefill": chunked,
            "long_prefill_token_threshold": self.long_prefill_token_threshold,
            "async_scheduling": self.async_scheduling,
            "kv_watermark": self.kv_watermark,
            "full_sequence_must_fit": full_sequence_must_fit,
            "efficiency": deployment.efficiency(),
            "overheads": deployment.overheads(),
            "seed": self.seed,
            "jitter_sigma": self.jitter_sigma,
            "hiccup_prob": self.hiccup_prob,
            "hiccup_ms": self.hiccup_ms,
            "eos_len_median": self.eos_len_median,
            "eos_len_sigma": self.eos_len_sigma,
            "tokenizer": tokenizer.name(),
            "time_scale": self.time_scale,
            "precise_timing": self.precise_timing,
            "max_lag_ms": self.max_lag_ms,
            "enable_prompt_tokens_details": self.prompt_tokens_details(),
            "metrics_compat": self.metrics_compat,
        });
        // Split in two: one `json!` this large exceeds the macro recursion limit.
        let more = serde_json::json!({
            "faults": {
                "error_rate": self.fault_error_rate,
                "error_status": self.fault_error_status,
                "stall_prob": self.fault_stall_prob,
                "stall_ms": self.fault_stall_ms,
                "disconnect_prob": self.fault_disconnect_prob,
                "malformed_prob": self.fault_malformed_prob,
            },
            "kv_capacity": kv,
            "derived": derived,
            "roofline": deployment.inputs(),
        });
        if let (Some(base), serde_json::Value::Object(more)) = (config_json.as_object_mut(), more) {
            base.extend(more);
        }
        // TensorRT-LLM's sizing rule names itself; vLLM's (the default) adds no key.
        if let (Some(base), servebench_roofline::KvBudgetRule::FreeFraction { .. }) =
            (config_json.as_object_mut(), kv_rule)
        {
            base.insert(
                "kv_budget_rule".into(),
                serde_json::to_value(kv_rule).unwrap_or_default(),
            );
        }
        // Only an explicit engine profile adds its keys, so a plain configuration reads as before.
        if let (Some(base), Some(kind)) = (config_json.as_object_mut(), self.engine) {
            base.insert("engine_profile".into(), kind.as_str().into());
            base.insert(
                "cuda_graph_sizes".into(),
                deployment.cuda_graph_sizes().to_vec().into(),
            );
        }
        // Only a vision model adds the key, so a text model's configuration reads as before.
        let vision = crate::vision::resolve(self, &catalog)?;
        if let (Some(base), Some(v)) = (config_json.as_object_mut(), &vision) {
            base.insert("vision".into(), serde_json::to_value(v).unwrap_or_default());
        }
        // Only a reasoning configuration adds the key, so a plain one reads as before.
        let reasoning = self.reasoning();
        if let (Some(base), Some(r)) = (config_json.as_object_mut(), reasoning) {
            base.insert("reasoning".into(), r.to_json());
        }

        ResolvedSim {
            lora_modules: lora_names,
            args: self.clone(),
            engine,
            kv,
            tokenizer,
            served_model_name,
            accepted_model_names: accepted,
            timing,
            faults,
            prompt_tokens_details: self.prompt_tokens_details(),
            metrics_compat: self.metrics_compat,
            gpu_memory_utilization: self.gpu_memory_utilization,
            cache_dtype: kv_dtype.as_str().to_string(),
            derived,
            config_json,
            reasoning,
            vision,
            fleet: None,
        }
        .with_fleet()
    }

    fn check_ranges(&self) -> Result<(), SimError> {
        check_fraction("--kv-watermark", self.kv_watermark, false)?;
        check_fraction("--hiccup-prob", self.hiccup_prob, true)?;
        check_fraction("--fault-error-rate", self.fault_error_rate, true)?;
        check_fraction("--fault-stall-prob", self.fault_stall_prob, true)?;
        check_fraction("--fault-disconnect-prob", self.fault_disconnect_prob, true)?;
        check_fraction("--fault-malformed-prob", self.fault_malformed_prob, true)?;
        if let Some(f) = self.reasoning_fraction {
            check_fraction("--reasoning-fraction", f, true)?;
        }
        if let Some(f) = self.kv_cache_free_gpu_mem_fraction {
            if !(f > 0.0 && f <= 1.0) {
                return Err(SimError::Config(format!(
                    "--kv-cache-free-gpu-mem-fraction must be in (0, 1], got {f}"
                )));
            }
        }
        for (name, v) in [
            ("--jitter-sigma", self.jitter_sigma),
            ("--hiccup-ms", self.hiccup_ms),
            ("--eos-len-median", self.eos_len_median),
            ("--eos-len-sigma", self.eos_len_sigma),
            ("--max-lag-ms", self.max_lag_ms),
            ("--fault-stall-ms", self.fault_stall_ms),
        ] {
            check_non_negative(name, v)?;
        }
        if !(self.time_scale.is_finite() && self.time_scale > 0.0) {
            return Err(SimError::Config(format!(
                "--time-scale must be positive, got {}",
                self.time_scale
            )));
        }
        if !(400..=599).contains(&self.fault_error_status) {
            return Err(SimError::Config(format!(
                "--fault-error-status must be an HTTP error status (400-599), got {}",
                self.fault_error_status
            )));
        }
        if self.block_size == 0 {
            return Err(SimError::Config("--block-size must be at least 1".into()));
        }
        Ok(())
    }
}

impl ResolvedSim {
    /// Start-up lines in the manner of vLLM's log.
    pub fn banner_lines(&self) -> Vec<String> {
        let e = &self.engine;
        let d = &self.derived;
        let mut lines = vec![
            format!(
                "servebench sim {}: model {} ({}) on {} × {}, dtype {}, kv cache {}",
                env!("CARGO_PKG_VERSION"),
                self.served_model_name,
                e.deployment.model().id,
                e.deployment.tp(),
                e.deployment.gpu().id,
                e.deployment.dtype().as_str(),
                self.cache_dtype,
            ),
            format!(
                "max_num_seqs {}, max_num_batched_tokens {}, max_model_len {}, block_size {}, prefix caching {}, chunked prefill {}",
                e.max_num_seqs,
                e.max_num_batched_tokens,
                e.max_model_len,
                e.block_size,
                if e.enable_prefix_caching { "on" } else { "off" },
                if e.enable_chunked_prefill { "on" } else { "off" },
            ),
            format!("GPU KV cache size: {} tokens", d.kv_cache_tokens),
            format!(
                "Maximum concurrency for {} tokens per request: {:.2}x",
                e.max_model_len, d.max_concurrency
            ),
            format!(
                "Predicted single-stream decode at context {BANNER_DECODE_CONTEXT}: {:.2} ms/token; prefill {:.0} tokens/s",
                d.decode_ms_per_token_ctx1024, d.prefill_tokens_per_s
            ),
        ];
        // Only a reasoning configuration adds a line, so a plain banner reads as before.
        if let Some(r) = self.reasoning {
            let what = match r {
                ReasoningSplit::Tokens(n) => format!("the first {n} output tokens"),
                ReasoningSplit::Fraction(f) => format!("{:.0} % of the output tokens", f * 100.0),
            };
            lines.push(format!(
                "Reasoning model: {what} of each chat response stream as reasoning_content"
            ));
        }
        lines
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn resolve(spec: &str) -> Result<ResolvedSim, SimError> {
        SimArgs::parse_spec(spec)?.resolve()
    }

    #[test]
    fn default_h100_llama_matches_the_capacity_table() {
        let r = resolve("").unwrap();
        assert_eq!(r.engine.max_num_batched_tokens, 8192);
        assert_eq!(r.engine.max_num_seqs, 1024);
        assert_eq!(r.engine.max_model_len, 131072);
        assert_eq!(r.engine.num_gpu_blocks, 27_978);
        assert_eq!(r.derived.kv_cache_tokens, 447_648);
        assert!(
            (r.derived.max_concurrency - 3.4).abs() < 0.05,
            "{}",
            r.derived.max_concurrency
        );
        assert!((r.derived.decode_ms_per_token_ctx1024 - 6.95).abs() < 0.1);
        assert_eq!(r.served_model_name, "llama-3.1-8b");
        assert!(!r.engine.output_vocab.is_empty());
        assert_eq!(r.config_json["num_gpu_blocks"], 27_978);
        assert_eq!(r.config_json["max_num_seqs"], 1024);
        assert!(r
            .banner_lines()
            .iter()
            .any(|l| l == "GPU KV cache size: 447648 tokens"));
    }

    #[test]
    fn reasoning_shows_in_the_banner_and_config_only_when_set() {
        let plain = resolve("").unwrap();
        assert_eq!(plain.reasoning, None);
        assert!(plain.config_json.get("reasoning").is_none());
        assert!(!plain.banner_lines().iter().any(|l| l.contains("Reasoning")));
        let r = resolve("--reasoning-fraction 0.3").unwrap();
        assert_eq!(r.reasoning, Some(ReasoningSplit::Fraction(0.3)));
        assert_eq!(r.config_json["reasoning"]["reasoning_fraction"], 0.3);
        assert!(r
            .banner_lines()
            .iter()
            .any(|l| l.contains("30 % of the output tokens")));
        let r = resolve("--reasoning-tokens 64").unwrap();
        assert_eq!(r.config_json["reasoning"]["reasoning_tokens"], 64);
    }

    #[test]
    fn small_gpus_get_small_batch_defaults() {
        let r = resolve("--gpu a100-80g").unwrap();
        assert_eq!(
            (r.engine.max_num_batched_tokens, r.engine.max_num_seqs),
            (2048, 256)
        );
    }

    #[test]
    fn max_model_len_that_does_not_fit_names_the_largest_that_would() {
        let err = resolve("--gpu l4").unwrap_err().to_string();
        assert!(err.contains("max_model_len 131072 does not fit"), "{err}");
        assert!(err.contains("largest max_model_len that fits is"), "{err}");
        assert!(resolve("--gpu l4 --max-model-len 32768").is_ok());
    }

    #[test]
    fn max_model_len_auto_fits_the_kv_cache_like_vllm() {
        let r = resolve("llama-3.1-70b --gpu h100 --tensor-parallel-size 2 --max-model-len auto")
            .unwrap();
        let (blocks, block) = (r.engine.num_gpu_blocks, r.engine.block_size);
        assert_eq!(r.engine.max_model_len, (blocks - 1) * block);
        assert!(r.engine.max_model_len < 131_072);
        r.engine.validate().unwrap();
        let minus_one =
            resolve("llama-3.1-70b --gpu h100 --tensor-parallel-size 2 --max-model-len -1")
                .unwrap();
        assert_eq!(minus_one.engine.max_model_len, r.engine.max_model_len);
        // When the model's own length fits, auto keeps it.
        let fits = resolve("--max-model-len auto").unwrap();
        assert_eq!(fits.engine.max_model_len, 131_072);
        // Unset, the model's length is still refused when it does not fit, as vLLM does.
        assert!(resolve("llama-3.1-70b --gpu h100 --tensor-parallel-size 2").is_err());
    }

    #[test]
    fn served_names_and_aliases_are_accepted() {
        let r = resolve("--served-model-name mine other").unwrap();
        assert_eq!(r.served_model_name, "mine");
        for n in ["mine", "other", "llama-3.1-8b"] {
            assert!(r.accepted_model_names.iter().any(|a| a == n), "{n}");
        }
    }

    #[test]
    fn bad_values_are_refused() {
        for spec in [
            "--max-model-len 200000",
            "--time-scale 0",
            "--fault-error-rate 1.5",
            "--fault-error-status 200",
            "--gpu no-such-gpu",
            "no-such-model",
            "--dtype int3",
            "--kv-watermark 1",
            "--no-enable-chunked-prefill --max-num-batched-tokens 4096",
        ] {
            assert!(resolve(spec).is_err(), "{spec}");
        }
    }

    #[test]
    fn overrides_reach_the_engine() {
        let r = resolve(
            "--max-num-seqs 8 --max-num-batched-tokens 512 --max-model-len 4096 --num-gpu-blocks-override 200 \
             --no-enable-prefix-caching --seed 9 --jitter-sigma 0 --eos-len-median 0 --block-size 32",
        )
        .unwrap();
        let e = &r.engine;
        assert_eq!(
            (e.max_num_seqs, e.max_num_batched_tokens, e.max_model_len),
            (8, 512, 4096)
        );
        assert_eq!((e.num_gpu_blocks, e.block_size), (200, 32));
        assert!(!e.enable_prefix_caching);
        assert_eq!((e.seed, e.jitter_sigma, e.eos_len_median), (9, 0.0, 0.0));
    }
}
