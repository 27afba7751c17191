//! Speculative decoding (docs/simulator.md §16): a drafter proposes `k` tokens per running
//! request after every step, the next step verifies them with the target model (each decoding
//! request then schedules `1 + k` tokens), and a prefix of the drafts is accepted.
//!
//! Acceptance follows vLLM's counters (vllm/v1/spec_decode/metrics.py): per draft, position `i`
//! is accepted only if every earlier position was, and its unconditional rate
//! `num_accepted_tokens_per_pos[i] / num_drafts` is the `i`-th per-position rate; the mean draft
//! acceptance rate `num_accepted_tokens / num_draft_tokens` is the mean of those rates.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use servebench_roofline::{Deployment, SeqWork};

/// How drafts are proposed (vLLM's `speculative_config.method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SpecMethod {
    /// Prompt lookup: n-gram matches in the request's own tokens, on the CPU.
    Ngram,
    /// A separate, smaller model (`--speculative-model`).
    DraftModel,
    /// EAGLE: one decoder layer fed the target's hidden states, the target's LM head.
    Eagle,
    /// EAGLE-3: one decoder layer, a draft vocabulary of 32,000 tokens.
    Eagle3,
    /// Multi-token prediction: the model's own MTP layer (DeepSeek-V3 style), its LM head.
    Mtp,
}

impl SpecMethod {
    /// Parses vLLM's spellings (`ngram`, `draft_model`, `eagle`, `eagle3`, `mtp`,
    /// `deepseek_mtp`; dashes as underscores).
    pub fn parse(s: &str) -> Option<SpecMethod> {
        match s.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "ngram" | "prompt_lookup" => Some(SpecMethod::Ngram),
            "draft_model" | "draft" => Some(SpecMethod::DraftModel),
            "eagle" => Some(SpecMethod::Eagle),
            "eagle3" => Some(SpecMethod::Eagle3),
            "mtp" | "deepseek_mtp" => Some(SpecMethod::Mtp),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SpecMethod::Ngram => "ngram",
            SpecMethod::DraftModel => "draft_model",
            SpecMethod::Eagle => "eagle",
            SpecMethod::Eagle3 => "eagle3",
            SpecMethod::Mtp => "mtp",
        }
    }
}

/// The resolved speculative-decoding setup.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecDecodeConfig {
    pub method: SpecMethod,
    /// `k`: draft tokens proposed per request and step.
    pub num_speculative_tokens: u32,
    /// Unconditional acceptance rate of each draft position, non-increasing, `k` entries.
    pub per_position: Vec<f64>,
    /// Prices one forward pass of the drafter; `None` = drafting costs no GPU time (n-gram).
    pub drafter: Option<Deployment>,
}

impl SpecDecodeConfig {
    /// Checks the rates: `k` of them, each in `[0, 1]`, none above the one before.
    pub fn validate(&self) -> Result<(), String> {
        let k = self.num_speculative_tokens as usize;
        if k == 0 {
            return Err("num_speculative_tokens must be at least 1".into());
        }
        if self.per_position.len() != k {
            return Err(format!(
                "{} per-position acceptance rates for {k} speculative tokens",
                self.per_position.len()
            ));
        }
        let mut prev = 1.0;
        for (i, &r) in self.per_position.iter().enumerate() {
            if !(0.0..=1.0).contains(&r) {
                return Err(format!(
                    "acceptance rate of position {i} must be in [0, 1], got {r}"
                ));
            }
            if r > prev + 1e-12 {
                return Err(format!(
                    "acceptance rate of position {i} ({r}) exceeds the one before ({prev}): a \
                     position is accepted only after every earlier one, so the rates cannot rise"
                ));
            }
            prev = r;
        }
        Ok(())
    }

    /// The mean draft acceptance rate the per-position rates give
    /// (`num_accepted_tokens / num_draft_tokens` in expectation).
    pub fn acceptance_rate(&self) -> f64 {
        self.per_position.iter().sum::<f64>() / self.per_position.len().max(1) as f64
    }

    /// Draws how many of `drafts` proposed tokens are accepted: position `i` passes with
    /// probability `rate[i] / rate[i−1]` once every earlier one has.
    pub(crate) fn draw_accepted(&self, rng: &mut ChaCha8Rng, drafts: u32) -> u32 {
        let mut prev = 1.0;
        let mut accepted = 0;
        for &r in self.per_position.iter().take(drafts as usize) {
            let p = if prev > 0.0 { r / prev } else { 0.0 };
            if rng.random::<f64>() >= p {
                break;
            }
            accepted += 1;
            prev = r;
        }
        accepted
    }

    /// GPU time of drafting after a step whose target work is `work` (seconds): the drafter's
    /// first pass covers every token the step scheduled (EAGLE and MTP read the target's hidden
    /// states of all of them, a draft model keeps its own KV cache of them), then `k − 1`
    /// passes of one token for each request that sampled. Each pass costs the drafter's GPU
    /// time, all-reduces and per-layer launches, not the step's fixed scheduling overhead.
    pub(crate) fn draft_seconds(&self, work: &[SeqWork]) -> f64 {
        let Some(d) = &self.drafter else {
            return 0.0;
        };
        if !work.iter().any(|w| w.samples) {
            return 0.0;
        }
        let layer_s =
            f64::from(d.model().num_hidden_layers) * d.overheads().layer_overhead_us * 1e-6;
        let pass = |plan: &[SeqWork]| {
            let st = d.step_time(plan);
            st.t_gpu + st.t_ar + layer_s
        };
        let first = pass(work);
        let k = self.num_speculative_tokens;
        if k <= 1 {
            return first;
        }
        let next: Vec<SeqWork> = work
            .iter()
            .filter(|w| w.samples)
            .map(|w| SeqWork {
                new_tokens: 1,
                context: w.context + w.new_tokens,
                samples: true,
            })
            .collect();
        first + f64::from(k - 1) * pass(&next)
    }
}

/// Compute time of the target's logits at `drafts` verified draft positions (seconds). The
/// roofline charges the LM head once per sampling request, but verification needs the target's
/// distribution at every draft position too (vLLM's rejection sampler compares each draft token
/// with it). Added as compute, not hidden under the step's memory time: at small batches it is
/// a few microseconds either way, at large ones the step is compute-bound.
pub(crate) fn verify_logits_seconds(target: &Deployment, drafts: u64) -> f64 {
    if drafts == 0 {
        return 0.0;
    }
    let one = |samples| {
        target
            .step_time(&[SeqWork {
                new_tokens: 1,
                context: 0,
                samples,
            }])
            .t_c
    };
    drafts as f64 * (one(true) - one(false)).max(0.0)
}

/// The per-position rates of a geometric acceptance whose mean over `k` positions is `rate`:
/// `q^i` with `mean(q, q², …, q^k) = rate` (bisection on `q`).
pub fn geometric_rates(rate: f64, k: u32) -> Vec<f64> {
    let mean = |q: f64| (1..=k).map(|i| q.powi(i as i32)).sum::<f64>() / f64::from(k.max(1));
    let (mut lo, mut hi) = (0.0f64, 1.0f64);
    for _ in 0..100 {
        let mid = (lo + hi) / 2.0;
        if mean(mid) < rate {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let q = (lo + hi) / 2.0;
    (1..=k).map(|i| q.powi(i as i32)).collect()
}

/// vLLM's `vllm:spec_decode_*` counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpecDecodeMetrics {
    pub num_drafts: u64,
    pub num_draft_tokens: u64,
    pub num_accepted_tokens: u64,
    /// One counter per draft position.
    pub num_accepted_tokens_per_pos: Vec<u64>,
}

impl SpecDecodeMetrics {
    pub fn new(k: u32) -> Self {
        SpecDecodeMetrics {
            num_accepted_tokens_per_pos: vec![0; k as usize],
            ..SpecDecodeMetrics::default()
        }
    }

    /// vLLM's `SpecDecodingStats.observe_draft`.
    pub(crate) fn observe_draft(&mut self, drafts: u32, accepted: u32) {
        self.num_drafts += 1;
        self.num_draft_tokens += u64::from(drafts);
        self.num_accepted_tokens += u64::from(accepted);
        for c in self
            .num_accepted_tokens_per_pos
            .iter_mut()
            .take(accepted as usize)
        {
            *c += 1;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn config(rates: Vec<f64>) -> SpecDecodeConfig {
        SpecDecodeConfig {
            method: SpecMethod::Ngram,
            num_speculative_tokens: rates.len() as u32,
            per_position: rates,
            drafter: None,
        }
    }

    #[test]
    fn geometric_rates_have_the_requested_mean() {
        let r = geometric_rates(0.7, 3);
        assert_eq!(r.len(), 3);
        assert!((r.iter().sum::<f64>() / 3.0 - 0.7).abs() < 1e-9, "{r:?}");
        assert!(r[0] > r[1] && r[1] > r[2]);
        assert_eq!(geometric_rates(1.0, 4), vec![1.0; 4]);
        assert!(geometric_rates(0.0, 2).iter().all(|&x| x < 1e-12));
    }

    #[test]
    fn draws_reproduce_the_per_position_rates() {
        let c = config(vec![0.9, 0.6, 0.3]);
        c.validate().unwrap();
        let mut m = SpecDecodeMetrics::new(3);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for _ in 0..200_000 {
            let a = c.draw_accepted(&mut rng, 3);
            m.observe_draft(3, a);
        }
        for (i, want) in [0.9, 0.6, 0.3].iter().enumerate() {
            let got = m.num_accepted_tokens_per_pos[i] as f64 / m.num_drafts as f64;
            assert!((got - want).abs() < 0.005, "position {i}: {got}");
        }
        let rate = m.num_accepted_tokens as f64 / m.num_draft_tokens as f64;
        assert!((rate - 0.6).abs() < 0.005, "{rate}");
    }

    #[test]
    fn rising_or_out_of_range_rates_are_refused() {
        assert!(config(vec![0.5, 0.6])
            .validate()
            .unwrap_err()
            .contains("cannot rise"));
        assert!(config(vec![1.2]).validate().is_err());
        let mut c = config(vec![0.5]);
        c.num_speculative_tokens = 2;
        assert!(c.validate().unwrap_err().contains("1 per-position"));
    }

    #[test]
    fn verifying_drafts_pays_the_lm_head_per_draft_position() {
        let d = crate::test_support::engine_config().deployment;
        assert_eq!(verify_logits_seconds(&d, 0), 0.0);
        let one = verify_logits_seconds(&d, 1);
        assert!(one > 0.0);
        assert!((verify_logits_seconds(&d, 300) / one - 300.0).abs() < 1e-6);
    }

    #[test]
    fn methods_parse_vllm_spellings() {
        assert_eq!(SpecMethod::parse("EAGLE3"), Some(SpecMethod::Eagle3));
        assert_eq!(SpecMethod::parse("deepseek_mtp"), Some(SpecMethod::Mtp));
        assert_eq!(
            SpecMethod::parse("draft-model"),
            Some(SpecMethod::DraftModel)
        );
        assert_eq!(SpecMethod::parse("medusa"), None);
    }
}
