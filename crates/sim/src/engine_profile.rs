//! Engine profiles (`--engine vllm|sglang|trtllm`, docs/simulator.md "Engine profiles"): the
//! scheduling and admission defaults in which serving engines differ and which move published
//! figures. A profile only supplies defaults; an explicit flag still wins.

use clap::ValueEnum;

use servebench_roofline::GpuSpec;

use crate::SimArgs;

/// Which serving engine the simulator imitates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// vLLM V1 (the default).
    #[default]
    Vllm,
    /// SGLang.
    Sglang,
    /// TensorRT-LLM (PyTorch backend).
    Trtllm,
}

impl EngineKind {
    /// The flag spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Vllm => "vllm",
            EngineKind::Sglang => "sglang",
            EngineKind::Trtllm => "trtllm",
        }
    }
}

/// The defaults an engine brings.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineProfile {
    pub kind: EngineKind,
    /// Whether prompts are split across steps by default.
    pub chunked_prefill: bool,
    /// Admit a request only when its whole sequence (prompt + max_tokens) fits the free KV
    /// blocks, instead of growing block by block and preempting.
    pub full_sequence_must_fit: bool,
    /// Tokens per KV block (page).
    pub block_size: u32,
    /// Default `(max_num_batched_tokens, max_num_seqs)` when the engine's own defaults do not
    /// follow vLLM's GPU classes; `None` keeps vLLM's.
    pub batch_limits: Option<(u32, u32)>,
    /// Batch sizes with a captured CUDA graph (pure-decode batches are padded up to them).
    pub cuda_graph_sizes: Vec<u32>,
    /// The engine's FP8 GEMMs against the GPU's whole-model FP8 MFU (1 = the catalog's).
    pub fp8_mfu_scale: f64,
    /// Bandwidth utilisation of its decode-attention kernels' KV reads (`None` = the GPU's).
    pub mbu_kv: Option<f64>,
    /// The KV cache is this fraction of the memory free after loading the model (TensorRT-LLM's
    /// rule); `None` = vLLM's rule, a fraction of the whole GPU (`--gpu-memory-utilization`).
    pub kv_free_fraction: Option<f64>,
}

/// vLLM's default capture list: 1, 2, 4, multiples of 8 below 256, then multiples of 16 up to
/// `min(2·max_num_seqs, 512)` (vLLM's `set_cudagraph_sizes`).
pub fn vllm_cuda_graph_sizes(max_num_seqs: u32) -> Vec<u32> {
    let max = (2 * u64::from(max_num_seqs)).min(512) as u32;
    let mut sizes = vec![1, 2, 4];
    sizes.extend((8..256).step_by(8));
    sizes.extend((256..=max).step_by(16));
    sizes.retain(|&n| n <= max.max(1));
    sizes
}

/// TensorRT-LLM's capture list as its published performance overview configures it
/// (`cuda_graph_config.batch_sizes` with `enable_padding: true`).
const TRTLLM_CUDA_GRAPH_SIZES: [u32; 15] = [
    1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192,
];

/// TensorRT-LLM's FP8 GEMM efficiency against the catalog's FP8 MFU (fitted, §12).
const TRTLLM_FP8_MFU_SCALE: f64 = 1.3;
/// TensorRT-LLM's KV-read bandwidth utilisation (fitted, §12).
const TRTLLM_MBU_KV: f64 = 0.90;
/// TensorRT-LLM's default `KvCacheConfig.free_gpu_memory_fraction`: "90% of free GPU memory
/// for KV cache" (its documentation, "How to Change KV Cache Behavior"; docs/simulator.md §4).
pub const TRTLLM_KV_FREE_FRACTION: f64 = 0.9;

impl EngineProfile {
    /// The profile of `kind`; `max_num_seqs` is the resolved limit (vLLM sizes its graph list
    /// from it).
    pub fn of(kind: EngineKind, max_num_seqs: u32) -> EngineProfile {
        match kind {
            EngineKind::Vllm => EngineProfile {
                kind,
                chunked_prefill: true,
                full_sequence_must_fit: false,
                block_size: 16,
                batch_limits: None,
                cuda_graph_sizes: vllm_cuda_graph_sizes(max_num_seqs),
                fp8_mfu_scale: 1.0,
                mbu_kv: None,
                kv_free_fraction: None,
            },
            // SGLang chunks prefill and admits incrementally as vLLM does, with one-token
            // pages; its graph list is not modelled (no padding).
            EngineKind::Sglang => EngineProfile {
                kind,
                chunked_prefill: true,
                full_sequence_must_fit: false,
                block_size: 1,
                batch_limits: None,
                cuda_graph_sizes: Vec::new(),
                fp8_mfu_scale: 1.0,
                mbu_kv: None,
                kv_free_fraction: None,
            },
            // TensorRT-LLM's PyTorch backend: no chunked prefill unless enabled, the
            // "guaranteed no evict" capacity scheduler (a request enters only when its whole
            // sequence fits), 32-token KV blocks, max_num_tokens 8192 and max_batch_size 2048.
            // Its kernels are faster than the catalog's vLLM-derived efficiencies: FP8 GEMMs at
            // 1.3 × the FP8 MFU and KV reads at 0.90 of peak bandwidth, fitted on its published
            // throughput tables (docs/simulator.md §12).
            EngineKind::Trtllm => EngineProfile {
                kind,
                chunked_prefill: false,
                full_sequence_must_fit: true,
                block_size: 32,
                batch_limits: Some((8192, 2048)),
                cuda_graph_sizes: TRTLLM_CUDA_GRAPH_SIZES.to_vec(),
                fp8_mfu_scale: TRTLLM_FP8_MFU_SCALE,
                mbu_kv: Some(TRTLLM_MBU_KV),
                kv_free_fraction: Some(TRTLLM_KV_FREE_FRACTION),
            },
        }
    }
}

/// Replacements for a profile's fitted kernel factors; `None` keeps the profile's value.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProfileFactors {
    /// Replaces [`EngineProfile::fp8_mfu_scale`].
    pub fp8_mfu_scale: Option<f64>,
    /// Replaces [`EngineProfile::mbu_kv`]; `Some(None)` removes it (the GPU's own).
    pub mbu_kv: Option<Option<f64>>,
}

impl EngineProfile {
    /// The profile with `factors` in place of its own.
    pub fn with_factors(mut self, factors: ProfileFactors) -> EngineProfile {
        if let Some(scale) = factors.fp8_mfu_scale {
            self.fp8_mfu_scale = scale;
        }
        if let Some(mbu_kv) = factors.mbu_kv {
            self.mbu_kv = mbu_kv;
        }
        self
    }
}

/// The profile a set of flags asks for, and how it merges with explicit flags. Without
/// `--engine` every answer is what the flags alone give (vLLM V1, no graph padding), so
/// existing configurations resolve exactly as before.
#[derive(Debug, Clone)]
pub(crate) struct ProfileChoice {
    profile: Option<EngineProfile>,
    /// `--enforce-eager`: no captured graphs, so no padding.
    enforce_eager: bool,
}

/// vLLM's default block size: a profile replaces it, any other `--block-size` wins.
const VLLM_BLOCK_SIZE: u32 = 16;

impl ProfileChoice {
    pub(crate) fn new(args: &SimArgs) -> ProfileChoice {
        ProfileChoice {
            // The graph list is re-derived from the resolved max_num_seqs later.
            profile: args
                .engine
                .map(|kind| EngineProfile::of(kind, 1).with_factors(args.profile_factors)),
            enforce_eager: args.enforce_eager,
        }
    }

    pub(crate) fn chunked_prefill(&self, args: &SimArgs) -> bool {
        match &self.profile {
            Some(p) if !(args.enable_chunked_prefill || args.no_enable_chunked_prefill) => {
                p.chunked_prefill
            }
            _ => args.chunked_prefill(),
        }
    }

    pub(crate) fn block_size(&self, args: &SimArgs) -> u32 {
        match &self.profile {
            Some(p) if args.block_size == VLLM_BLOCK_SIZE => p.block_size,
            _ => args.block_size,
        }
    }

    pub(crate) fn full_sequence_must_fit(&self, args: &SimArgs) -> bool {
        args.full_sequence_must_fit
            || self
                .profile
                .as_ref()
                .is_some_and(|p| p.full_sequence_must_fit)
    }

    /// `(max_num_batched_tokens, max_num_seqs)` to hand to the scheduler-limit resolution:
    /// explicit flags, else the profile's own limits, else `None` (vLLM's GPU-class defaults).
    /// Without chunked prefill the budget grows to hold one `max_model_len` prompt.
    pub(crate) fn batch_limits(
        &self,
        args: &SimArgs,
        chunked: bool,
        max_model_len: u32,
    ) -> (Option<u32>, Option<u32>) {
        match self.profile.as_ref().and_then(|p| p.batch_limits) {
            Some((budget, seqs)) => {
                let budget = args.max_num_batched_tokens.unwrap_or(if chunked {
                    budget
                } else {
                    budget.max(max_model_len)
                });
                (
                    Some(budget),
                    Some(args.max_num_seqs.unwrap_or(seqs.min(budget))),
                )
            }
            None => (args.max_num_batched_tokens, args.max_num_seqs),
        }
    }

    /// `--mfu-fp8` in effect: the flag, else the GPU's FP8 MFU scaled by the profile, else
    /// `None` (the deployment's own default).
    pub(crate) fn mfu_fp8(&self, args: &SimArgs, gpu: &GpuSpec) -> Option<f64> {
        if args.mfu_fp8.is_some() {
            return args.mfu_fp8;
        }
        let scale = self.profile.as_ref().map_or(1.0, |p| p.fp8_mfu_scale);
        if scale == 1.0 {
            return None;
        }
        let base = gpu
            .mfu_fp8
            .unwrap_or(0.7 * args.mfu.unwrap_or(gpu.mfu_bf16));
        Some((base * scale).min(1.0))
    }

    /// How the KV cache is sized: `--kv-cache-free-gpu-mem-fraction`, else the profile's free
    /// fraction, else vLLM's fraction of the whole GPU.
    pub(crate) fn kv_budget_rule(&self, args: &SimArgs) -> servebench_roofline::KvBudgetRule {
        match args
            .kv_cache_free_gpu_mem_fraction
            .or_else(|| self.profile.as_ref().and_then(|p| p.kv_free_fraction))
        {
            Some(fraction) => servebench_roofline::KvBudgetRule::FreeFraction { fraction },
            None => servebench_roofline::KvBudgetRule::TotalFraction,
        }
    }

    /// `--mbu-kv` in effect: the flag, else the profile's, else `None` (the GPU's).
    pub(crate) fn mbu_kv(&self, args: &SimArgs) -> Option<f64> {
        args.mbu_kv
            .or_else(|| self.profile.as_ref().and_then(|p| p.mbu_kv))
    }

    /// The captured batch sizes to pad decode steps to, when a profile asks for padding.
    pub(crate) fn cuda_graph_sizes(&self, max_num_seqs: u32) -> Option<Vec<u32>> {
        if self.enforce_eager {
            return None;
        }
        let p = self.profile.as_ref()?;
        let sizes = EngineProfile::of(p.kind, max_num_seqs).cuda_graph_sizes;
        (!sizes.is_empty()).then_some(sizes)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn vllm_capture_list_follows_its_rule() {
        let s = vllm_cuda_graph_sizes(1024);
        assert_eq!(&s[..5], &[1, 2, 4, 8, 16]);
        assert_eq!(s.last(), Some(&512));
        assert!(s.contains(&248) && s.contains(&256) && s.contains(&272));
        assert!(!s.contains(&264));
        assert_eq!(vllm_cuda_graph_sizes(8).last(), Some(&16));
        assert_eq!(vllm_cuda_graph_sizes(1), vec![1, 2]);
    }

    #[test]
    fn trtllm_is_unchunked_and_admits_whole_sequences() {
        let p = EngineProfile::of(EngineKind::Trtllm, 2048);
        assert!(!p.chunked_prefill && p.full_sequence_must_fit);
        assert_eq!(p.block_size, 32);
        assert_eq!(p.cuda_graph_sizes.last(), Some(&8192));
    }

    #[test]
    fn without_engine_the_flags_resolve_as_before() {
        let plain = SimArgs::parse_spec("--jitter 0")
            .unwrap()
            .resolve()
            .unwrap();
        let args = SimArgs::parse_spec("--jitter 0 --engine trtllm --max-model-len 4096").unwrap();
        let trt = args.resolve().unwrap();
        assert!(plain.engine.enable_chunked_prefill);
        assert!(plain.engine.deployment.cuda_graph_sizes().is_empty());
        assert!(plain.config_json.get("engine_profile").is_none());
        assert!(!trt.engine.enable_chunked_prefill && trt.engine.full_sequence_must_fit);
        assert_eq!(trt.engine.block_size, 32);
        assert_eq!(
            (trt.engine.max_num_batched_tokens, trt.engine.max_num_seqs),
            (8192, 2048)
        );
        assert_eq!(trt.config_json["engine_profile"], "trtllm");
    }

    #[test]
    fn trtllm_sizes_its_kv_cache_from_free_memory() {
        let spec = "llama-3.1-70b --dtype fp8 --kv-cache-dtype fp8 --max-model-len 2176";
        let vllm = SimArgs::parse_spec(spec).unwrap().resolve().unwrap();
        let trt = SimArgs::parse_spec(&format!("{spec} --engine trtllm"))
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(trt.config_json["kv_budget_rule"]["rule"], "free_fraction");
        assert_eq!(trt.config_json["kv_budget_rule"]["fraction"], 0.9);
        assert!(vllm.config_json.get("kv_budget_rule").is_none());
        // About three times the KV tokens of vLLM's rule (with vLLM's own batch defaults) for
        // 70B FP8 on one H100 (§4).
        let tokens = |r: &crate::ResolvedSim| {
            u64::from(r.engine.num_gpu_blocks) * u64::from(r.engine.block_size)
        };
        assert!(
            2 * tokens(&trt) > 5 * tokens(&vllm),
            "{} {}",
            tokens(&trt),
            tokens(&vllm)
        );
        // The flag sets the fraction, for any engine.
        let half = SimArgs::parse_spec(&format!("{spec} --kv-cache-free-gpu-mem-fraction 0.45"))
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(half.config_json["kv_budget_rule"]["fraction"], 0.45);
        assert!(tokens(&half) < tokens(&trt));
        assert!(
            SimArgs::parse_spec(&format!("{spec} --kv-cache-free-gpu-mem-fraction 0"))
                .unwrap()
                .resolve()
                .is_err()
        );
    }

    #[test]
    fn enforce_eager_turns_graph_padding_off() {
        let r = SimArgs::parse_spec("--engine vllm --enforce-eager")
            .unwrap()
            .resolve()
            .unwrap();
        assert_eq!(r.engine.deployment.padded_tokens(3, 3), 3);
        assert!(r.engine.deployment.cuda_graph_sizes().is_empty());
    }

    #[test]
    fn explicit_flags_beat_the_profile() {
        let args = SimArgs::parse_spec(
            "--engine trtllm --enable-chunked-prefill --block-size 64 --max-num-seqs 128",
        )
        .unwrap();
        let r = args.resolve().unwrap();
        assert!(r.engine.enable_chunked_prefill);
        assert_eq!(r.engine.block_size, 64);
        assert_eq!(r.engine.max_num_seqs, 128);
    }

    #[test]
    fn vllm_profile_pads_decode_batches_to_captured_sizes() {
        let r = SimArgs::parse_spec("--engine vllm")
            .unwrap()
            .resolve()
            .unwrap();
        let d = &r.engine.deployment;
        assert_eq!(d.padded_tokens(3, 3), 4);
        assert_eq!(d.padded_tokens(250, 250), 256);
        // A mixed step (a prefill chunk among decodes) is not padded.
        assert_eq!(d.padded_tokens(300, 3), 300);
        // Beyond the largest captured size the batch runs eagerly.
        assert_eq!(d.padded_tokens(600, 600), 600);
        let plain = SimArgs::parse_spec("").unwrap().resolve().unwrap();
        assert_eq!(plain.engine.deployment.padded_tokens(3, 3), 3);
    }
}
