//! KV-cache capacity (docs/simulator.md §4): what is left of GPU memory after weights, profile-run
//! activations and non-torch memory, in blocks.

use serde::Serialize;

use crate::{scheduler_defaults, Deployment, RooflineError, GIB};

/// Memory outside torch's allocator on a single GPU (CUDA context, cuBLAS workspaces).
pub const NON_TORCH_BYTES_SINGLE: f64 = 0.5 * GIB;
/// The same with tensor parallelism (NCCL buffers and custom all-reduce workspaces).
pub const NON_TORCH_BYTES_TP: f64 = GIB;

/// Inputs of KV sizing.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct KvSizing {
    /// Fraction of usable memory vLLM may take (`--gpu-memory-utilization`).
    pub gpu_memory_utilization: f64,
    /// Tokens per KV block.
    pub block_size: u32,
    /// Token budget of a step: sizes the profile run's activations.
    pub max_num_batched_tokens: u32,
    /// Sequences per step: sizes the profile run's logits.
    pub max_num_seqs: u32,
    /// `--num-gpu-blocks-override`.
    pub num_gpu_blocks_override: Option<u32>,
    /// `--gpu-memory-gib`: usable memory per GPU instead of the catalog's.
    pub gpu_memory_gib_override: Option<f64>,
}

impl KvSizing {
    /// vLLM's server defaults for this deployment's GPU: utilisation 0.9, block 16, the
    /// chunked-prefill scheduler defaults of §2.5, no overrides.
    pub fn server_defaults(deployment: &Deployment) -> KvSizing {
        let (max_num_batched_tokens, max_num_seqs) = scheduler_defaults(
            deployment.gpu(),
            true,
            deployment.model().max_position_embeddings,
        );
        KvSizing {
            gpu_memory_utilization: 0.9,
            block_size: 16,
            max_num_batched_tokens,
            max_num_seqs,
            num_gpu_blocks_override: None,
            gpu_memory_gib_override: None,
        }
    }
}

/// The KV cache a deployment gets, with the memory budget that produced it (bytes per GPU).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct KvCapacity {
    /// Blocks in the cache, the reserved null block included.
    pub num_gpu_blocks: u32,
    /// Tokens per block.
    pub block_size: u32,
    /// `num_gpu_blocks · block_size`, as vLLM logs "GPU KV cache size".
    pub tokens: u64,
    /// Memory left for the KV cache.
    pub avail_bytes: f64,
    /// Bytes of one block on one GPU.
    pub bytes_per_block: f64,
    /// Usable memory times `gpu_memory_utilization`.
    pub budget_bytes: f64,
    /// Resident weights (`W_res / tp`).
    pub weights_bytes: f64,
    /// Peak activations of the profile run (`act_peak`).
    pub activation_bytes: f64,
    /// Memory outside torch's allocator.
    pub non_torch_bytes: f64,
    /// Whether `num_gpu_blocks` came from `--num-gpu-blocks-override`.
    pub overridden: bool,
}

impl KvCapacity {
    /// Blocks a request can hold: block 0 is reserved.
    pub fn allocatable_blocks(&self) -> u64 {
        u64::from(self.num_gpu_blocks.saturating_sub(1))
    }

    /// vLLM's "Maximum concurrency for `max_model_len` tokens per request": blocks over the
    /// blocks one full-length request needs.
    pub fn max_concurrency_at(&self, max_model_len: u32) -> f64 {
        let per_request = u64::from(max_model_len)
            .div_ceil(u64::from(self.block_size.max(1)))
            .max(1);
        f64::from(self.num_gpu_blocks) / per_request as f64
    }

    /// Blocks one request of `max_model_len` tokens can come to hold: the last token's KV is
    /// never written (it is only sampled), so `ceil((max_model_len − 1) / block_size)`.
    pub fn blocks_for_max_model_len(&self, max_model_len: u32) -> u64 {
        u64::from(max_model_len.saturating_sub(1)).div_ceil(u64::from(self.block_size.max(1)))
    }

    /// The largest `max_model_len` whose lone request always fits the allocatable blocks:
    /// `(num_gpu_blocks − 1)·block_size + 1`. This is one block (less one token) below
    /// vLLM's own estimate `num_gpu_blocks·block_size`, which overlooks the reserved null
    /// block and would let a lone full-length request preempt itself forever.
    pub fn largest_fitting_max_model_len(&self) -> u32 {
        let tokens = self.allocatable_blocks() * u64::from(self.block_size) + 1;
        u32::try_from(tokens).unwrap_or(u32::MAX)
    }

    /// Checks that one request of `max_model_len` tokens fits, naming the largest that
    /// would otherwise.
    pub fn check_max_model_len(&self, max_model_len: u32) -> Result<(), RooflineError> {
        let needed_blocks = self.blocks_for_max_model_len(max_model_len);
        if needed_blocks <= self.allocatable_blocks() {
            return Ok(());
        }
        Err(RooflineError::MaxModelLenTooLarge {
            max_model_len,
            needed_blocks,
            block_size: self.block_size,
            num_gpu_blocks: self.num_gpu_blocks,
            allocatable_blocks: self.allocatable_blocks(),
            largest: self.largest_fitting_max_model_len(),
        })
    }

    /// KV-cache memory actually held by the blocks, GiB per GPU.
    pub fn cache_gib(&self) -> f64 {
        f64::from(self.num_gpu_blocks) * self.bytes_per_block / GIB
    }
}

/// How an engine turns GPU memory into a KV-cache budget (docs/simulator.md §4).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum KvBudgetRule {
    /// vLLM and SGLang: a fraction of the GPU's whole memory (`gpu_memory_utilization`, SGLang's
    /// `mem_fraction_static`) holds weights, activations and the cache; the cache gets the rest.
    TotalFraction,
    /// TensorRT-LLM: the cache gets this fraction of the memory still free after the weights,
    /// the runtime's activation buffers and the non-torch memory are allocated
    /// (`KvCacheConfig.free_gpu_memory_fraction`, default 0.9; `trtllm-bench
    /// --kv_cache_free_gpu_mem_fraction`).
    FreeFraction { fraction: f64 },
}

/// Sizes the KV cache of a deployment (§4):
/// `avail = usable·gmu − W_res/tp − act_peak − non_torch` with
/// `act_peak = max_num_batched_tokens·(4d + 2·F_act)·2 + max_num_seqs·V·4` and non-torch
/// 0.5 GiB (1 GiB when `tp > 1`); `num_gpu_blocks = floor(avail / block_bytes)` unless
/// overridden. Fails when nothing is left (`avail ≤ 0`), even with an override, as vLLM does.
pub fn kv_capacity(
    deployment: &Deployment,
    sizing: &KvSizing,
) -> Result<KvCapacity, RooflineError> {
    kv_capacity_with_rule(deployment, sizing, KvBudgetRule::TotalFraction)
}

/// [`kv_capacity`] under `rule`. With [`KvBudgetRule::FreeFraction`] the budget is
/// `fraction · (usable − W_res/tp − act_peak − non_torch)` and `gpu_memory_utilization` is not
/// used: TensorRT-LLM sizes its pool from what is free after the model is loaded.
pub fn kv_capacity_with_rule(
    deployment: &Deployment,
    sizing: &KvSizing,
    rule: KvBudgetRule,
) -> Result<KvCapacity, RooflineError> {
    let gmu = match rule {
        KvBudgetRule::TotalFraction => sizing.gpu_memory_utilization,
        KvBudgetRule::FreeFraction { fraction } => fraction,
    };
    if !(gmu > 0.0 && gmu <= 1.0) {
        return Err(RooflineError::Invalid(format!(
            "gpu_memory_utilization must be in (0, 1], got {gmu}"
        )));
    }
    if sizing.block_size == 0 {
        return Err(RooflineError::Invalid(
            "block_size must be at least 1".into(),
        ));
    }
    if sizing.max_num_batched_tokens == 0 || sizing.max_num_seqs == 0 {
        return Err(RooflineError::Invalid(
            "max_num_batched_tokens and max_num_seqs must be at least 1".into(),
        ));
    }
    if sizing.num_gpu_blocks_override == Some(0) {
        return Err(RooflineError::Invalid(
            "num_gpu_blocks_override must be at least 1".into(),
        ));
    }
    let usable_gib = match sizing.gpu_memory_gib_override {
        Some(g) if g.is_finite() && g > 0.0 => g,
        Some(g) => {
            return Err(RooflineError::Invalid(format!(
                "gpu memory override must be a positive number of GiB, got {g}"
            )))
        }
        None => deployment.gpu().usable_gib,
    };

    let m = deployment.model();
    let d = f64::from(m.hidden_size);
    let budget_bytes = usable_gib * GIB * gmu;
    let weights_bytes = deployment.weights_resident_bytes();
    let activation_bytes =
        f64::from(sizing.max_num_batched_tokens) * (4.0 * d + 2.0 * m.f_act()) * 2.0
            + f64::from(sizing.max_num_seqs) * f64::from(m.vocab_size) * 4.0;
    let non_torch_bytes = if deployment.tp() > 1 {
        NON_TORCH_BYTES_TP
    } else {
        NON_TORCH_BYTES_SINGLE
    };
    let (budget_bytes, avail_bytes) = match rule {
        KvBudgetRule::TotalFraction => (
            budget_bytes,
            budget_bytes - weights_bytes - activation_bytes - non_torch_bytes,
        ),
        KvBudgetRule::FreeFraction { fraction } => {
            let free = usable_gib * GIB - weights_bytes - activation_bytes - non_torch_bytes;
            (usable_gib * GIB, fraction * free)
        }
    };
    if avail_bytes <= 0.0 {
        return Err(RooflineError::NoKvMemory {
            gpu: deployment.gpu().id.clone(),
            usable_gib,
            gpu_memory_utilization: gmu,
            budget_gib: budget_bytes / GIB,
            weights_gib: weights_bytes / GIB,
            activations_gib: activation_bytes / GIB,
            non_torch_gib: non_torch_bytes / GIB,
        });
    }
    let bytes_per_block = f64::from(sizing.block_size) * deployment.kv_bytes_per_token();
    let num_gpu_blocks = match sizing.num_gpu_blocks_override {
        Some(n) => n,
        None => {
            let blocks = (avail_bytes / bytes_per_block).floor();
            if blocks >= f64::from(u32::MAX) {
                u32::MAX
            } else {
                blocks as u32
            }
        }
    };
    Ok(KvCapacity {
        num_gpu_blocks,
        block_size: sizing.block_size,
        tokens: u64::from(num_gpu_blocks) * u64::from(sizing.block_size),
        avail_bytes,
        bytes_per_block,
        budget_bytes,
        weights_bytes,
        activation_bytes,
        non_torch_bytes,
        overridden: sizing.num_gpu_blocks_override.is_some(),
    })
}

/// The largest `max_model_len` this deployment could serve with these settings (for the
/// "refuse to start" message); fails like [`kv_capacity`] when no memory is left at all.
pub fn largest_fitting_max_model_len(
    deployment: &Deployment,
    sizing: &KvSizing,
) -> Result<u32, RooflineError> {
    Ok(kv_capacity(deployment, sizing)?.largest_fitting_max_model_len())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::{Catalog, Dtype, KvDtype};

    fn dep(gpu: &str, model: &str, dtype: Dtype, kv: KvDtype, tp: u32) -> Deployment {
        let c = Catalog::builtin();
        Deployment::new(
            c.gpu(gpu).unwrap().clone(),
            c.model(model).unwrap().clone(),
            dtype,
            kv,
            tp,
        )
        .unwrap()
    }

    fn capacity(d: &Deployment, gmu: f64) -> KvCapacity {
        let sizing = KvSizing {
            gpu_memory_utilization: gmu,
            ..KvSizing::server_defaults(d)
        };
        kv_capacity(d, &sizing).unwrap()
    }

    /// (model, GPU, dtype, KV dtype, tp, gpu_memory_utilization, blocks, tokens)
    type Row = (
        &'static str,
        &'static str,
        Dtype,
        KvDtype,
        u32,
        f64,
        u32,
        u64,
    );

    /// Every row of the §4 capacity table, block for block.
    #[test]
    fn tensorrt_llm_sizes_its_pool_from_free_memory() {
        // 70B FP8 on one H100: vLLM's rule leaves 0.9·79.2 GiB minus the weights for
        // everything else; TensorRT-LLM takes 0.9 of what the weights and buffers leave.
        let d = dep("h100", "llama-3.1-70b", Dtype::Fp8, KvDtype::Fp8, 1);
        let sizing = KvSizing {
            block_size: 32,
            max_num_batched_tokens: 8192,
            max_num_seqs: 2048,
            ..KvSizing::server_defaults(&d)
        };
        let vllm = kv_capacity(&d, &sizing).unwrap();
        let trt = kv_capacity_with_rule(&d, &sizing, KvBudgetRule::FreeFraction { fraction: 0.9 })
            .unwrap();
        let free = 79.2 * GIB - trt.weights_bytes - trt.activation_bytes - trt.non_torch_bytes;
        assert!((trt.avail_bytes - 0.9 * free).abs() < 1.0);
        assert!(
            (vllm.avail_bytes - (free - 0.1 * 79.2 * GIB)).abs() < 1.0,
            "{}",
            vllm.avail_bytes
        );
        // About 2.3 GiB against about 9.4 GiB: four times the blocks.
        assert!(
            trt.num_gpu_blocks > 3 * vllm.num_gpu_blocks,
            "{trt:?} {vllm:?}"
        );
        // The fraction is validated as gpu_memory_utilization is.
        assert!(
            kv_capacity_with_rule(&d, &sizing, KvBudgetRule::FreeFraction { fraction: 1.5 })
                .is_err()
        );
    }

    #[test]
    fn capacity_table_rows() {
        use Dtype::{Bf16, Fp8};
        use KvDtype::{Auto, Fp8 as KvFp8};
        let rows: [Row; 14] = [
            ("llama-3.1-8b", "h100", Bf16, Auto, 1, 0.9, 27_978, 447_648),
            ("llama-3.1-8b", "h200", Bf16, Auto, 1, 0.9, 55_903, 894_448),
            (
                "llama-3.1-8b",
                "a100-80g",
                Bf16,
                Auto,
                1,
                0.9,
                28_430,
                454_880,
            ),
            ("llama-3.1-8b", "a40", Bf16, Auto, 1, 0.9, 12_394, 198_304),
            ("llama-3.1-8b", "l4", Bf16, Auto, 1, 0.9, 2_072, 33_152),
            ("llama-3.1-8b", "l4", Fp8, KvFp8, 1, 0.9, 11_803, 188_848),
            ("qwen3-0.6b", "a40", Bf16, Auto, 1, 0.9, 22_332, 357_312),
            ("qwen3-0.6b", "l4", Bf16, Auto, 1, 0.9, 10_536, 168_576),
            ("qwen2.5-7b", "h100", Bf16, Auto, 1, 0.9, 64_621, 1_033_936),
            ("qwen3-30b-a3b", "h100", Bf16, Auto, 1, 0.9, 8_886, 142_176),
            ("llama-3.1-70b", "h100", Fp8, KvFp8, 2, 0.9, 29_132, 466_112),
            ("llama-3.1-70b", "h100", Bf16, Auto, 2, 0.9, 1_109, 17_744),
            ("llama-3.1-8b", "h100", Bf16, Auto, 1, 0.5, 11_758, 188_128),
            ("llama-3.1-8b", "h100", Bf16, Auto, 1, 0.3, 3_648, 58_368),
        ];
        for (model, gpu, dtype, kv, tp, gmu, blocks, tokens) in rows {
            let d = dep(gpu, model, dtype, kv, tp);
            let cap = capacity(&d, gmu);
            assert_eq!(
                (cap.num_gpu_blocks, cap.tokens),
                (blocks, tokens),
                "{model} {dtype}/{kv} on {gpu} tp {tp} gmu {gmu}"
            );
            assert!(!cap.overridden);
        }
    }

    #[test]
    fn small_gpus_size_activations_with_small_batch_defaults() {
        let d = dep("a100-80g", "llama-3.1-8b", Dtype::Bf16, KvDtype::Auto, 1);
        let s = KvSizing::server_defaults(&d);
        assert_eq!((s.max_num_batched_tokens, s.max_num_seqs), (2048, 256));
        let cap = kv_capacity(&d, &s).unwrap();
        let act = 2048.0 * (4.0 * 4096.0 + 2.0 * 14336.0) * 2.0 + 256.0 * 128_256.0 * 4.0;
        assert_eq!(cap.activation_bytes, act);
        assert_eq!(cap.non_torch_bytes, 0.5 * GIB);
        let tp2 = dep("h100", "llama-3.1-70b", Dtype::Bf16, KvDtype::Auto, 2);
        assert_eq!(capacity(&tp2, 0.9).non_torch_bytes, GIB);
    }

    #[test]
    fn max_concurrency_as_vllm_logs_it() {
        let d = dep("h100", "llama-3.1-8b", Dtype::Bf16, KvDtype::Auto, 1);
        let cap = capacity(&d, 0.9);
        let x = cap.max_concurrency_at(131_072);
        assert!((x - 3.415).abs() < 0.001, "{x}");
        assert!((cap.max_concurrency_at(3072) - 27_978.0 / 192.0).abs() < 1e-9);
        // Partial blocks count whole.
        assert!((cap.max_concurrency_at(17) - 27_978.0 / 2.0).abs() < 1e-9);
    }

    #[test]
    fn l4_cannot_hold_a_full_context_llama_request() {
        let d = dep("l4", "llama-3.1-8b", Dtype::Bf16, KvDtype::Auto, 1);
        let cap = capacity(&d, 0.9);
        // 2071 allocatable blocks hold 33,136 tokens of KV; a request may reach one more
        // token than it stores.
        assert_eq!(cap.largest_fitting_max_model_len(), 2071 * 16 + 1);
        cap.check_max_model_len(2071 * 16 + 1).unwrap();
        cap.check_max_model_len(32_768).unwrap();
        let err = cap.check_max_model_len(2071 * 16 + 2).unwrap_err();
        assert!(matches!(
            err,
            RooflineError::MaxModelLenTooLarge {
                largest: 33_137,
                ..
            }
        ));
        let msg = cap.check_max_model_len(131_072).unwrap_err().to_string();
        assert!(msg.contains("max_model_len 131072 does not fit"), "{msg}");
        assert!(
            msg.contains("largest max_model_len that fits is 33137"),
            "{msg}"
        );
        let s = KvSizing::server_defaults(&d);
        assert_eq!(largest_fitting_max_model_len(&d, &s).unwrap(), 33_137);
    }

    #[test]
    fn no_memory_left_is_an_error_naming_the_budget() {
        // 70B in BF16 on one H100: 131 GiB of weights.
        let d = dep("h100", "llama-3.1-70b", Dtype::Bf16, KvDtype::Auto, 1);
        let err = kv_capacity(&d, &KvSizing::server_defaults(&d)).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, RooflineError::NoKvMemory { .. }));
        assert!(
            msg.contains("no memory left for the KV cache on h100"),
            "{msg}"
        );
        assert!(msg.contains("weights take 131.4"), "{msg}");
        // An override of the block count does not conjure memory.
        let s = KvSizing {
            num_gpu_blocks_override: Some(100),
            ..KvSizing::server_defaults(&d)
        };
        assert!(kv_capacity(&d, &s).is_err());
    }

    #[test]
    fn overrides() {
        let d = dep("h100", "llama-3.1-8b", Dtype::Bf16, KvDtype::Auto, 1);
        let s = KvSizing {
            num_gpu_blocks_override: Some(64),
            ..KvSizing::server_defaults(&d)
        };
        let cap = kv_capacity(&d, &s).unwrap();
        assert_eq!((cap.num_gpu_blocks, cap.tokens), (64, 1024));
        assert!(cap.overridden);
        // A memory override replaces the catalog's usable GiB: 40 GiB leaves
        // 36 − 14.96 − 1.18 − 0.5 GiB ≈ 19.37 GiB, i.e. 9,915 blocks of 2 MiB.
        let s = KvSizing {
            gpu_memory_gib_override: Some(40.0),
            ..KvSizing::server_defaults(&d)
        };
        let cap = kv_capacity(&d, &s).unwrap();
        let expected = ((40.0 * 0.9 * GIB - cap.weights_bytes - cap.activation_bytes - 0.5 * GIB)
            / (2.0 * 1024.0 * 1024.0))
            .floor() as u32;
        assert_eq!(cap.num_gpu_blocks, expected);
        assert!(
            (9_900..9_930).contains(&cap.num_gpu_blocks),
            "{}",
            cap.num_gpu_blocks
        );
        // Larger blocks: half as many of twice the size.
        let s = KvSizing {
            block_size: 32,
            ..KvSizing::server_defaults(&d)
        };
        assert_eq!(kv_capacity(&d, &s).unwrap().num_gpu_blocks, 27_978 / 2);
        for bad in [
            KvSizing {
                gpu_memory_utilization: 0.0,
                ..KvSizing::server_defaults(&d)
            },
            KvSizing {
                gpu_memory_utilization: 1.1,
                ..KvSizing::server_defaults(&d)
            },
            KvSizing {
                block_size: 0,
                ..KvSizing::server_defaults(&d)
            },
            KvSizing {
                gpu_memory_gib_override: Some(-1.0),
                ..KvSizing::server_defaults(&d)
            },
            KvSizing {
                num_gpu_blocks_override: Some(0),
                ..KvSizing::server_defaults(&d)
            },
        ] {
            assert!(kv_capacity(&d, &bad).is_err(), "{bad:?}");
        }
    }
}
