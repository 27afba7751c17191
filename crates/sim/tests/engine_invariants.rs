//! docs/simulator.md §10.7: engine invariants as property tests over random small configurations
//! and workloads (random arrivals, shared prefixes, aborts, tight KV pools).
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use servebench_roofline::{Catalog, Deployment, Dtype, KvDtype};
use servebench_sim::engine::{EngineConfig, EngineCore, FinishReason, NewRequest};

fn deployment() -> Deployment {
    let cat = Catalog::builtin();
    Deployment::new(
        cat.gpu("h100").unwrap().clone(),
        cat.model("llama-3.1-8b").unwrap().clone(),
        Dtype::Bf16,
        KvDtype::Auto,
        1,
    )
    .unwrap()
}

#[derive(Debug, Clone)]
struct Knobs {
    block_size: u32,
    max_model_len: u32,
    spare_blocks: u32,
    budget: u32,
    max_num_seqs: u32,
    prefix_caching: bool,
    chunked: bool,
    threshold: u32,
    watermark: f64,
    full_sequence_must_fit: bool,
    seed: u64,
    jitter: bool,
}

fn knobs() -> impl Strategy<Value = Knobs> {
    (
        prop::sample::select(vec![1u32, 2, 4, 16]),
        8u32..96,
        0u32..24,
        1u32..128,
        1u32..10,
        any::<bool>(),
        any::<bool>(),
        prop::sample::select(vec![0u32, 0, 3, 17]),
        prop::sample::select(vec![0.0, 0.0, 0.1]),
        prop::bool::weighted(0.2),
        any::<u64>(),
        any::<bool>(),
    )
        .prop_map(
            |(bs, mml, spare, budget, seqs, pc, chunked, thr, wm, full, seed, jitter)| Knobs {
                block_size: bs,
                max_model_len: mml,
                spare_blocks: spare,
                budget,
                max_num_seqs: seqs,
                prefix_caching: pc,
                chunked,
                threshold: thr,
                watermark: wm,
                full_sequence_must_fit: full,
                seed,
                jitter,
            },
        )
}

fn config(k: &Knobs) -> EngineConfig {
    // Just enough blocks for one max_model_len request, plus a few: pools this tight preempt.
    let num_gpu_blocks = k.max_model_len.div_ceil(k.block_size) + 1 + k.spare_blocks;
    let budget = if k.chunked {
        k.budget
    } else {
        k.budget.max(k.max_model_len)
    };
    EngineConfig {
        lora: Default::default(),
        spec: None,
        deployment: deployment(),
        max_num_seqs: k.max_num_seqs,
        max_num_batched_tokens: budget,
        max_model_len: k.max_model_len,
        block_size: k.block_size,
        num_gpu_blocks,
        enable_prefix_caching: k.prefix_caching,
        enable_chunked_prefill: k.chunked,
        long_prefill_token_threshold: k.threshold,
        prompt_tokens_per_step_cap: 0,
        kv_watermark: k.watermark,
        full_sequence_must_fit: k.full_sequence_must_fit,
        seed: k.seed,
        jitter_sigma: if k.jitter { 0.02 } else { 0.0 },
        hiccup_prob: if k.jitter { 0.1 } else { 0.0 },
        hiccup_ms: 5.0,
        eos_len_median: 6.0,
        eos_len_sigma: 0.8,
        output_vocab: vec![3, 5, 7, 11],
        vocab_size: 64,
    }
}

/// One client action, at a time offset from the previous one.
#[derive(Debug, Clone)]
enum Action {
    Add {
        gap_us: u64,
        prefix: u8,
        len: u32,
        max_tokens: u32,
        ignore_eos: bool,
        seed: Option<u8>,
    },
    /// Abort the `n`-th request added so far (modulo), whether or not it is still alive.
    Abort { gap_us: u64, n: usize },
}

fn actions() -> impl Strategy<Value = Vec<Action>> {
    let add = (
        0u64..30_000,
        0u8..4,
        1u32..200,
        1u32..40,
        any::<bool>(),
        any::<Option<u8>>(),
    )
        .prop_map(
            |(gap_us, prefix, len, max_tokens, ignore_eos, seed)| Action::Add {
                gap_us,
                prefix,
                len,
                max_tokens,
                ignore_eos,
                seed,
            },
        );
    let abort = (0u64..30_000, any::<usize>()).prop_map(|(gap_us, n)| Action::Abort { gap_us, n });
    prop::collection::vec(prop_oneof![6 => add, 1 => abort], 1..40)
}

/// A prompt from one of four shared families, so prefix hits happen.
fn prompt(prefix: u8, len: u32, id: u64) -> Vec<u32> {
    (0..len)
        .map(|i| {
            if i < 24 {
                u32::from(prefix) * 7 + i % 5
            } else {
                (id as u32 * 31 + i) % 64
            }
        })
        .collect()
}

/// A step: start, duration, `(id, new tokens, context)` of each planned request.
type StepRecord = (u64, u64, Vec<(u64, u32, u32)>);

/// Everything observable a run produced, for the determinism check.
#[derive(Debug, Clone, PartialEq)]
struct Trace {
    steps: Vec<StepRecord>,
    tokens: Vec<(u64, u64, u32, u32, Option<FinishReason>)>,
    finished: Vec<(u64, FinishReason, u32, u32, u32)>,
}

/// Drives the engine through `actions`, checking every invariant between steps.
fn drive(k: &Knobs, actions: &[Action]) -> Result<Trace, TestCaseError> {
    let cfg = config(k);
    let budget = cfg.max_num_batched_tokens;
    let mut core = EngineCore::new(cfg).map_err(|e| TestCaseError::fail(e.to_string()))?;
    // (time, action) in time order.
    let mut at = 0u64;
    let mut timed: Vec<(u64, &Action)> = Vec::new();
    for a in actions {
        let gap = match a {
            Action::Add { gap_us, .. } | Action::Abort { gap_us, .. } => *gap_us,
        };
        at += gap * 1_000;
        timed.push((at, a));
    }
    let mut next = 0;
    let mut now = 0u64;
    let mut added: Vec<u64> = Vec::new();
    let mut ended: Vec<u64> = Vec::new();
    let mut trace = Trace {
        steps: Vec::new(),
        tokens: Vec::new(),
        finished: Vec::new(),
    };
    let mut guard = 0u32;
    loop {
        // Ingest every command due by now.
        while next < timed.len() && timed[next].0 <= now {
            match timed[next].1 {
                Action::Add {
                    prefix,
                    len,
                    max_tokens,
                    ignore_eos,
                    seed,
                    ..
                } => {
                    let id = added.len() as u64;
                    let len = (*len).min(k.max_model_len - 1);
                    core.add(NewRequest {
                        lora: None,
                        id,
                        prompt: prompt(*prefix, len, id),
                        max_tokens: *max_tokens,
                        min_tokens: 0,
                        ignore_eos: *ignore_eos,
                        seed: seed.map(u64::from),
                        cache_salt: None,
                        arrival_ns: now,
                    });
                    added.push(id);
                }
                Action::Abort { n, .. } => {
                    if !added.is_empty() {
                        core.abort(added[n % added.len()]);
                    }
                }
            }
            core.check_invariants().map_err(TestCaseError::fail)?;
            next += 1;
        }
        for f in core.take_aborted() {
            ended.push(f.id);
            trace
                .finished
                .push((f.id, f.reason, f.prompt_tokens, f.completion_tokens, 0));
        }
        let Some(plan) = core.plan_step(now) else {
            prop_assert!(core.is_idle(), "no plan although requests are queued");
            if next == timed.len() {
                break;
            }
            now = now.max(timed[next].0);
            continue;
        };
        prop_assert!(
            plan.scheduled_tokens <= budget,
            "step exceeds the token budget"
        );
        let entries: Vec<(u64, u32, u32)> = plan.entries().collect();
        let sum: u32 = entries.iter().map(|e| e.1).sum();
        prop_assert_eq!(sum, plan.scheduled_tokens);
        prop_assert!(!entries.is_empty(), "empty step with requests queued");
        prop_assert!(core.num_running() <= k.max_num_seqs as usize);
        let t1 = now + plan.duration_ns;
        prop_assert!(t1 > now, "a step must take time");
        trace.steps.push((now, plan.duration_ns, entries));
        let out = core.commit_step(plan, t1);
        core.check_invariants().map_err(TestCaseError::fail)?;
        prop_assert!(core.num_running() <= k.max_num_seqs as usize);
        for t in &out.tokens {
            trace.tokens.push((t1, t.id, t.index, t.token, t.finish));
        }
        for f in &out.finished {
            ended.push(f.id);
            trace.finished.push((
                f.id,
                f.reason,
                f.prompt_tokens,
                f.completion_tokens,
                f.cached_tokens,
            ));
            if f.reason != FinishReason::Abort {
                prop_assert!(f.completion_tokens >= 1);
            }
        }
        now = t1;
        guard += 1;
        prop_assert!(guard < 200_000, "engine does not drain");
    }
    // Every request ends exactly once.
    let mut e = ended.clone();
    e.sort_unstable();
    let mut a = added.clone();
    a.sort_unstable();
    prop_assert_eq!(e, a, "every added request must end exactly once");
    prop_assert!(core.is_idle());
    prop_assert_eq!(core.num_free_blocks(), core.config().num_gpu_blocks - 1);
    let m = core.metrics();
    prop_assert_eq!(
        m.request_success_stop + m.request_success_length + m.request_success_abort,
        added.len() as u64
    );
    let generated = trace.tokens.len() as u64;
    prop_assert_eq!(m.generation_tokens_total, generated);
    Ok(trace)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn engine_invariants_hold(k in knobs(), acts in actions()) {
        drive(&k, &acts)?;
    }

    #[test]
    fn same_seed_gives_identical_traces(k in knobs(), acts in actions()) {
        let a = drive(&k, &acts)?;
        let b = drive(&k, &acts)?;
        prop_assert_eq!(a, b);
    }
}
