//! Closed-form predictions for `predict` and for reports: bandwidth floors, decode and
//! prefill times, the compute-bound batch. All go through the same step-time function the
//! simulator uses, so prediction and simulation agree by construction.

use serde::Serialize;
use servebench_metrics::units::us_to_s;

use crate::deployment::StepTotals;
use crate::{Deployment, Dtype, KvDtype, StepTime};

/// The bandwidth floor of a batch-1 decode step: the time to stream the weights once at peak
/// bandwidth (no efficiency factor, no overheads). Per GPU.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BandwidthFloor {
    /// `W_step / tp` at one token (MoE: `k` experts), bytes.
    pub weights_per_step_bytes: f64,
    /// One embedding table `V·d·b_w / tp`, bytes.
    pub embedding_bytes: f64,
    /// Peak memory bandwidth, B/s.
    pub peak_bandwidth: f64,
    /// `W_step / peak_BW`, seconds: no decode step can be faster.
    pub floor_s: f64,
    /// `(W_step + V·d·b_w) / peak_BW`, seconds: the naive floor that also counts the input
    /// embedding table, as "model size / bandwidth" estimates do.
    pub floor_with_embeddings_s: f64,
    /// `t_ovh + t_req + W_step / (peak_BW · MBU)`, seconds: the single-stream TPOT the model
    /// predicts before KV reads.
    pub predicted_tpot_s: f64,
}

/// A prompt's prefill on an idle engine, chunk by chunk.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PrefillEstimate {
    /// Tokens per step (the budget, the last chunk smaller).
    pub chunk_tokens: Vec<u32>,
    /// Each step's time; the last one samples the first token.
    pub steps: Vec<StepTime>,
    /// Sum of the steps: the idle-engine TTFT, seconds.
    pub total_s: f64,
}

/// The inputs of every formula, for explanations.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RooflineInputs {
    /// GPU id.
    pub gpu: String,
    /// Model id.
    pub model: String,
    /// Weight type.
    pub dtype: Dtype,
    /// KV-cache type.
    pub kv_dtype: KvDtype,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Whether the FP8 tensor-core peak applies.
    pub fp8_peak: bool,
    /// `P_attn` per layer.
    pub p_attn: f64,
    /// MLP parameters per layer, all experts.
    pub p_mlp_total: f64,
    /// MLP parameters per layer one token uses.
    pub p_mlp_active: f64,
    /// `N_lin`.
    pub n_lin: f64,
    /// `N_total`.
    pub n_total: f64,
    /// `V·d`.
    pub embedding_params: f64,
    /// `W_res / tp`, bytes.
    pub weights_resident_bytes: f64,
    /// `W_step / tp` at one token, bytes.
    pub weights_per_step_bytes: f64,
    /// KV bytes per token per GPU.
    pub kv_bytes_per_token: f64,
    /// Peak FLOP/s in effect.
    pub peak_flops: f64,
    /// MFU in effect.
    pub mfu: f64,
    /// Peak B/s.
    pub peak_bandwidth: f64,
    /// MBU.
    pub mbu: f64,
    /// Soft-roofline exponent.
    pub softroof_p: f64,
    /// `t_fixed`, seconds.
    pub t_fixed_s: f64,
    /// `L·t_layer`, seconds.
    pub t_layers_s: f64,
    /// `t_req`, seconds per planned request.
    pub t_req_s: f64,
    /// `t_cpu_floor`, seconds.
    pub t_cpu_floor_s: f64,
    /// `t_ovh`, seconds.
    pub t_ovh_s: f64,
    /// All-reduce latency `α`, seconds.
    pub allreduce_latency_s: f64,
    /// All-reduce bandwidth, B/s.
    pub link_bandwidth: f64,
    /// Async scheduling on?
    pub async_scheduling: bool,
}

/// The largest decode batch [`Deployment::compute_bound_batch`] considers.
pub const MAX_SEARCH_BATCH: u32 = 1 << 24;

impl Deployment {
    /// The batch-1 decode bandwidth floor and the prediction built on it.
    pub fn bandwidth_floor(&self) -> BandwidthFloor {
        let weights = self.weights_per_step_bytes(1);
        let embedding = self.model().embedding_bytes(self.dtype()) / f64::from(self.tp());
        let peak = self.peak_bandwidth();
        BandwidthFloor {
            weights_per_step_bytes: weights,
            embedding_bytes: embedding,
            peak_bandwidth: peak,
            floor_s: weights / peak,
            floor_with_embeddings_s: (weights + embedding) / peak,
            predicted_tpot_s: self.t_ovh()
                + us_to_s(self.overheads().req_overhead_us)
                + weights / self.effective_bandwidth(),
        }
    }

    /// `W_step / peak_BW`, seconds (batch-1 decode).
    pub fn bandwidth_floor_s(&self) -> f64 {
        self.bandwidth_floor().floor_s
    }

    /// `(W_step + V·d·b_w) / peak_BW`, seconds.
    pub fn bandwidth_floor_with_embeddings_s(&self) -> f64 {
        self.bandwidth_floor().floor_with_embeddings_s
    }

    /// One decode step of `batch` requests, each adding one token on `context` tokens and
    /// sampling: its `total` is the TPOT of a steady decode-only batch.
    pub fn decode_tpot(&self, context: u32, batch: u32) -> StepTime {
        let mut totals = StepTotals::default();
        totals.add(1, context, true, u64::from(batch));
        self.time_of(&totals)
    }

    /// Prefill of `prompt_len` tokens on an idle engine with a step budget of `budget`
    /// tokens: `ceil(prompt_len / budget)` steps, each on the context of the chunks before
    /// it; the last step samples. A zero budget is treated as 1.
    pub fn prefill_time(&self, prompt_len: u32, budget: u32) -> PrefillEstimate {
        let budget = budget.max(1);
        let mut chunk_tokens = Vec::new();
        let mut steps = Vec::new();
        let mut done = 0u32;
        while done < prompt_len {
            let q = budget.min(prompt_len - done);
            let last = done + q == prompt_len;
            let mut totals = StepTotals::default();
            totals.add(q, done, last, 1);
            chunk_tokens.push(q);
            steps.push(self.time_of(&totals));
            done += q;
        }
        let total_s = steps.iter().map(|s| s.total).sum();
        PrefillEstimate {
            chunk_tokens,
            steps,
            total_s,
        }
    }

    /// The smallest decode batch at `context` whose step is compute-bound (`t_c ≥ t_m`), or
    /// `None` below [`MAX_SEARCH_BATCH`]: at long contexts KV reads grow as fast as FLOPs and
    /// decode never turns compute-bound. The search assumes `t_c − t_m` changes sign once,
    /// which holds because `t_c` grows linearly in the batch and `t_m` linearly (dense) or
    /// concavely (MoE).
    pub fn compute_bound_batch(&self, context: u32) -> Option<u32> {
        let bound = |b: u32| {
            let s = self.decode_tpot(context, b);
            s.t_c >= s.t_m
        };
        let mut hi = 1u32;
        while !bound(hi) {
            if hi >= MAX_SEARCH_BATCH {
                return None;
            }
            hi *= 2;
        }
        let mut lo = hi / 2; // not bound (or 0)
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if bound(mid) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(hi)
    }

    /// Every input of the formulas, for `predict --explain` and run metadata.
    pub fn inputs(&self) -> RooflineInputs {
        let m = self.model();
        let o = self.overheads();
        RooflineInputs {
            gpu: self.gpu().id.clone(),
            model: m.id.clone(),
            dtype: self.dtype(),
            kv_dtype: self.kv_dtype(),
            tp: self.tp(),
            fp8_peak: self.uses_fp8_peak(),
            p_attn: m.p_attn(),
            p_mlp_total: m.p_mlp_total(),
            p_mlp_active: m.p_mlp_active(),
            n_lin: m.n_lin(),
            n_total: m.n_total(),
            embedding_params: m.embedding_params(),
            weights_resident_bytes: self.weights_resident_bytes(),
            weights_per_step_bytes: self.weights_per_step_bytes(1),
            kv_bytes_per_token: self.kv_bytes_per_token(),
            peak_flops: self.peak_flops(),
            mfu: self.mfu_in_effect(),
            peak_bandwidth: self.peak_bandwidth(),
            mbu: self.efficiency().mbu,
            softroof_p: self.efficiency().softroof_p,
            t_fixed_s: us_to_s(o.step_overhead_us),
            t_layers_s: us_to_s(f64::from(m.num_hidden_layers) * o.layer_overhead_us),
            t_req_s: us_to_s(o.req_overhead_us),
            t_cpu_floor_s: us_to_s(o.cpu_floor_us),
            t_ovh_s: self.t_ovh(),
            allreduce_latency_s: us_to_s(o.allreduce_latency_us),
            link_bandwidth: o.link_gbps * 1e9,
            async_scheduling: self.async_scheduling(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::{Catalog, Deployment};

    fn llama_h100() -> Deployment {
        let c = Catalog::builtin();
        Deployment::builder(
            c.gpu("h100").unwrap().clone(),
            c.model("llama-3.1-8b").unwrap().clone(),
        )
        .build()
        .unwrap()
    }

    #[test]
    fn bandwidth_floors() {
        let d = llama_h100();
        let f = d.bandwidth_floor();
        assert!((f.floor_s * 1e3 - 4.48).abs() < 0.005, "{}", f.floor_s);
        assert!((f.floor_with_embeddings_s * 1e3 - 4.79).abs() < 0.005);
        assert_eq!(d.bandwidth_floor_s(), f.floor_s);
        assert_eq!(
            d.bandwidth_floor_with_embeddings_s(),
            f.floor_with_embeddings_s
        );
        // §10.2: t_ovh + t_req + W_step/(BW·MBU) = 6.9 ms.
        assert!((f.predicted_tpot_s * 1e3 - 6.9).abs() < 0.01);
        // Single-stream decode is never below the floor, and creeps up with context.
        // 256 in / 1024 out decodes on contexts 256..1280, 768 on average: TPOT ≈ 6.94 ms.
        let mean = d.decode_tpot(256 + 512, 1).total;
        assert!(mean > f.floor_s);
        assert!((mean * 1e3 - 6.94).abs() < 0.01, "{mean}");
        assert!(d.decode_tpot(256, 1).total < mean);
        assert!((d.decode_tpot(8192, 1).total * 1e3 - 7.3).abs() < 0.05);
    }

    #[test]
    fn idle_engine_ttft_by_prompt_length() {
        let d = llama_h100();
        for (tokens, ms) in [
            (128, 8.3),
            (512, 15.8),
            (1024, 27.5),
            (2048, 52.5),
            (4096, 105.8),
            (8192, 224.0),
        ] {
            let e = d.prefill_time(tokens, 8192);
            assert_eq!(e.steps.len(), 1);
            let t = e.total_s * 1e3;
            assert!((t - ms).abs() / ms < 0.02, "{tokens}: {t} ms vs {ms} ms");
        }
        let ratio = d.prefill_time(8192, 8192).total_s / d.prefill_time(4096, 8192).total_s;
        assert!(ratio > 2.05 && ratio < 2.2, "{ratio}");
    }

    #[test]
    fn prefill_chunks_by_budget() {
        let d = llama_h100();
        let long = d.prefill_time(16_384, 8192);
        assert_eq!(long.chunk_tokens, vec![8192, 8192]);
        assert!(
            (long.total_s * 1e3 - 508.0).abs() / 508.0 < 0.02,
            "{}",
            long.total_s
        );
        // The second chunk attends to the first, so it costs more.
        assert!(long.steps[1].t_c > long.steps[0].t_c);
        let small_budget = d.prefill_time(8192, 2048);
        assert_eq!(small_budget.chunk_tokens, vec![2048; 4]);
        assert!((small_budget.total_s * 1e3 - 232.0).abs() / 232.0 < 0.02);
        // Only the last chunk samples (pays the LM head).
        let lm = 2.0 * d.model().embedding_params();
        let first = small_budget.steps[0].flops;
        let expected_first =
            2.0 * d.model().n_lin() * 2048.0 + 4.0 * 32.0 * 32.0 * 128.0 * 2048.0 * 2049.0 / 2.0;
        assert!((first - expected_first).abs() < 1.0);
        assert!(small_budget.steps[3].flops > first + lm);
        let uneven = d.prefill_time(5000, 2048);
        assert_eq!(uneven.chunk_tokens, vec![2048, 2048, 904]);
        assert!(d.prefill_time(0, 2048).steps.is_empty());
    }

    #[test]
    fn compute_bound_batch_finds_the_ridge() {
        let d = llama_h100();
        // On H100 the ridge sits near 200–256 tokens per step (§3.4).
        let b = d.compute_bound_batch(0).unwrap();
        assert!((200..=256).contains(&b), "{b}");
        let at = d.decode_tpot(0, b);
        let below = d.decode_tpot(0, b - 1);
        assert!(at.t_c >= at.t_m && below.t_c < below.t_m);
        // Context adds KV reads: the ridge moves out, and at 1k context decode stays
        // memory-bound at any batch.
        assert!(d.compute_bound_batch(128).unwrap() > b);
        assert_eq!(d.compute_bound_batch(1024), None);
        // A100 has a lower FLOP/byte ratio: its ridge is nearer 100–128.
        let c = Catalog::builtin();
        let a100 = Deployment::builder(
            c.gpu("a100-80g").unwrap().clone(),
            c.model("llama-3.1-8b").unwrap().clone(),
        )
        .build()
        .unwrap();
        let b = a100.compute_bound_batch(0).unwrap();
        assert!((80..=140).contains(&b), "{b}");
    }

    #[test]
    fn inputs_explain_the_worked_example() {
        let i = llama_h100().inputs();
        assert_eq!(i.gpu, "h100");
        assert_eq!(i.p_attn, 41_943_040.0);
        assert!((i.peak_flops * i.mfu / 1e12 - 593.6).abs() < 0.05);
        assert!((i.t_ovh_s * 1e3 - 1.15).abs() < 1e-9);
        assert_eq!(i.kv_bytes_per_token, 131_072.0);
        assert!(!i.fp8_peak);
        let json = serde_json::to_value(&i).unwrap();
        assert_eq!(json["dtype"], "bf16");
        assert_eq!(json["kv_dtype"], "auto");
    }
}
