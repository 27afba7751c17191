//! Fixtures shared by the crate's unit tests: one engine configuration (Llama-3.1-8B on an
//! H100, no noise, small enough to reason about) and a request arriving at a given time.

#![allow(clippy::unwrap_used)]

use servebench_roofline::{Catalog, Deployment, Dtype, KvDtype};

use crate::engine::{EngineConfig, NewRequest};
use crate::virtual_time::VirtualArrival;

/// Llama-3.1-8B on one H100: 64 sequences, a 2048-token step budget, 2048 blocks of 16
/// tokens, prefix caching and chunked prefill on, no jitter or hiccups.
pub(crate) fn engine_config() -> EngineConfig {
    let cat = Catalog::builtin();
    let deployment = Deployment::new(
        cat.gpu("h100").unwrap().clone(),
        cat.model("llama-3.1-8b").unwrap().clone(),
        Dtype::Bf16,
        KvDtype::Auto,
        1,
    )
    .unwrap();
    EngineConfig {
        lora: Default::default(),
        spec: None,
        deployment,
        max_num_seqs: 64,
        max_num_batched_tokens: 2048,
        max_model_len: 4096,
        block_size: 16,
        num_gpu_blocks: 2048,
        enable_prefix_caching: true,
        enable_chunked_prefill: true,
        long_prefill_token_threshold: 0,
        prompt_tokens_per_step_cap: 0,
        kv_watermark: 0.0,
        full_sequence_must_fit: false,
        seed: 0,
        jitter_sigma: 0.0,
        hiccup_prob: 0.0,
        hiccup_ms: 5.0,
        eos_len_median: 0.0,
        eos_len_sigma: 0.8,
        output_vocab: vec![1, 2, 3],
        vocab_size: 128_256,
    }
}

/// Request `id` with a 100-token prompt of its own, intended at `at_ms`, generating exactly
/// `output` tokens.
pub(crate) fn arrival(id: u64, at_ms: u64, output: u32) -> VirtualArrival {
    VirtualArrival {
        intended_ns: at_ms * 1_000_000,
        request: NewRequest {
            lora: None,
            id,
            prompt: (0..100).map(|i| (id as u32 * 1000 + i) % 128_000).collect(),
            max_tokens: output,
            min_tokens: 0,
            ignore_eos: true,
            seed: None,
            cache_salt: None,
            arrival_ns: 0,
        },
    }
}
