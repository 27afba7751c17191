//! Shared set-up of the behaviour tests (docs/simulator.md §10): Llama-3.1-8B, BF16, H100 with
//! vLLM's server defaults, KV capacity from the roofline crate, jitter 0, virtual time.
#![allow(dead_code, clippy::unwrap_used)]

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use servebench_roofline::{kv_capacity, Catalog, Deployment, Dtype, KvDtype, KvSizing};
use servebench_sim::engine::{EngineConfig, NewRequest};
use servebench_sim::virtual_time::{RequestTrace, VirtualArrival, VirtualRun};

/// Knobs the behaviours vary.
#[derive(Debug, Clone)]
pub struct Setup {
    pub gpu_memory_utilization: f64,
    pub max_num_batched_tokens: u32,
    pub max_num_seqs: u32,
    pub enable_prefix_caching: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            gpu_memory_utilization: 0.9,
            max_num_batched_tokens: 8192,
            max_num_seqs: 1024,
            enable_prefix_caching: true,
        }
    }
}

pub fn deployment() -> Deployment {
    let cat = Catalog::builtin();
    let gpu = cat.gpu("h100").unwrap().clone();
    let model = cat.model("llama-3.1-8b").unwrap().clone();
    Deployment::new(gpu, model, Dtype::Bf16, KvDtype::Auto, 1).unwrap()
}

/// The engine configuration of `setup`, with `num_gpu_blocks` from the roofline's §4 sizing.
pub fn config(setup: &Setup) -> EngineConfig {
    let deployment = deployment();
    let sizing = KvSizing {
        gpu_memory_utilization: setup.gpu_memory_utilization,
        block_size: 16,
        max_num_batched_tokens: setup.max_num_batched_tokens,
        max_num_seqs: setup.max_num_seqs,
        num_gpu_blocks_override: None,
        gpu_memory_gib_override: None,
    };
    let cap = kv_capacity(&deployment, &sizing).unwrap();
    // Every prompt here is at most 16k tokens; 32k fits the KV cache at every tested gmu.
    let max_model_len = 32_768;
    EngineConfig {
        lora: Default::default(),
        spec: None,
        deployment,
        max_num_seqs: setup.max_num_seqs,
        max_num_batched_tokens: setup.max_num_batched_tokens,
        max_model_len,
        block_size: 16,
        num_gpu_blocks: cap.num_gpu_blocks,
        enable_prefix_caching: setup.enable_prefix_caching,
        enable_chunked_prefill: true,
        long_prefill_token_threshold: 0,
        prompt_tokens_per_step_cap: 0,
        kv_watermark: 0.0,
        full_sequence_must_fit: false,
        seed: 0,
        jitter_sigma: 0.0,
        hiccup_prob: 0.0,
        hiccup_ms: 5.0,
        eos_len_median: 200.0,
        eos_len_sigma: 0.8,
        output_vocab: (1000..1100).collect(),
        vocab_size: 128_256,
    }
}

/// Random prompt ids from a per-request stream, so unrelated prompts never share a block.
pub fn random_tokens(key: u64, n: u32) -> Vec<u32> {
    let mut rng = ChaCha8Rng::seed_from_u64(key ^ 0xA5A5_5A5A_0F0F_F0F0);
    (0..n).map(|_| rng.random_range(0..128_000)).collect()
}

/// A fixed-length request (`ignore_eos`, exactly `output` tokens).
pub fn request(id: u64, prompt: Vec<u32>, output: u32) -> NewRequest {
    NewRequest {
        lora: None,
        id,
        prompt,
        max_tokens: output,
        min_tokens: 0,
        ignore_eos: true,
        seed: None,
        cache_salt: None,
        arrival_ns: 0,
    }
}

/// `n` closed-loop requests (all intended at 0; the driver's cap turns this into a closed loop).
pub fn closed_loop(n: u64, input: u32, output: u32) -> Vec<VirtualArrival> {
    (0..n)
        .map(|id| VirtualArrival {
            intended_ns: 0,
            request: request(id, random_tokens(id, input), output),
        })
        .collect()
}

/// `n` Poisson arrivals at `rate` per second, seeded.
pub fn poisson(n: u64, rate: f64, input: u32, output: u32, seed: u64) -> Vec<VirtualArrival> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut t = 0.0f64;
    (0..n)
        .map(|id| {
            let u: f64 = rng.random();
            t += -(1.0 - u).ln() / rate;
            VirtualArrival {
                intended_ns: (t * 1e9).round() as u64,
                request: request(id, random_tokens(id, input), output),
            }
        })
        .collect()
}

/// numpy's default (linear) percentile.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    assert!(!values.is_empty());
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = p / 100.0 * (v.len() - 1) as f64;
    let lo = rank.floor() as usize;
    let hi = rank.ceil() as usize;
    v[lo] + (v[hi] - v[lo]) * (rank - lo as f64)
}

pub fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

/// Per-run figures as a benchmark client reports them, in seconds.
#[derive(Debug, Clone)]
pub struct Summary {
    /// From the time the request was sent (so client-side waiting in a closed loop is
    /// excluded, as a closed-loop client measures).
    pub ttft: Vec<f64>,
    pub tpot: Vec<f64>,
    pub itl: Vec<f64>,
    pub output_tokens: u64,
    /// First send → last token.
    pub duration: f64,
    pub preemptions: u64,
}

impl Summary {
    pub fn of(run: &VirtualRun) -> Summary {
        Summary::of_traces(&run.traces)
    }

    pub fn of_traces(traces: &[RequestTrace]) -> Summary {
        let s = |ns: u64| ns as f64 * 1e-9;
        let mut ttft = Vec::new();
        let mut tpot = Vec::new();
        let mut itl = Vec::new();
        let mut output_tokens = 0;
        let mut preemptions = 0;
        let start = traces.iter().map(|t| t.sent_ns).min().unwrap_or(0);
        let mut end = start;
        for t in traces {
            let first = *t
                .token_times_ns
                .first()
                .expect("every request produced a token");
            ttft.push(s(first - t.sent_ns));
            if let Some(x) = t.tpot_ns() {
                tpot.push(x * 1e-9);
            }
            itl.extend(t.itls_ns().map(s));
            output_tokens += t.token_times_ns.len() as u64;
            preemptions += u64::from(t.preemptions);
            end = end.max(*t.token_times_ns.last().unwrap());
        }
        Summary {
            ttft,
            tpot,
            itl,
            output_tokens,
            duration: s(end - start),
            preemptions,
        }
    }

    pub fn throughput(&self) -> f64 {
        self.output_tokens as f64 / self.duration
    }

    pub fn ttft_p50(&self) -> f64 {
        percentile(&self.ttft, 50.0)
    }

    pub fn mean_ttft(&self) -> f64 {
        mean(&self.ttft)
    }

    pub fn mean_tpot(&self) -> f64 {
        mean(&self.tpot)
    }

    pub fn itl_p99(&self) -> f64 {
        percentile(&self.itl, 99.0)
    }

    pub fn mean_itl(&self) -> f64 {
        mean(&self.itl)
    }
}

/// Asserts `got` lies within ±`tol` (relative) of `want`, naming the figure.
#[track_caller]
pub fn assert_near(what: &str, got: f64, want: f64, tol: f64) {
    let rel = (got - want) / want;
    assert!(
        rel.abs() <= tol,
        "{what}: got {got:.6}, expected {want:.6} ± {:.0} % (off by {:+.1} %)",
        tol * 100.0,
        rel * 100.0
    );
}
