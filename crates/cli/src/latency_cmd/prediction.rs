//! The roofline's figures for one latency batch: the step times `servebench predict` and the
//! simulator charge, summed over the batch's prefill and decode.

use anyhow::{bail, Context, Result};
use servebench_roofline::{resolve_scheduler_limits, Catalog, Deployment, Dtype, KvDtype, SeqWork};

/// A deployment and the scheduler limits its steps are cut by.
#[derive(Debug, Clone)]
pub struct RooflineTarget {
    pub deployment: Deployment,
    /// Tokens per step (`max_num_batched_tokens`).
    pub budget: u32,
    /// Sequences per step (`max_num_seqs`).
    pub max_num_seqs: u32,
}

/// What the roofline predicts for one batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchPrediction {
    /// Prefill of every prompt, then decode to the last token, wave by wave.
    pub latency_s: f64,
    /// Mean decode step of the largest wave over the decode's contexts: the per-token time.
    pub decode_step_s: f64,
}

impl RooflineTarget {
    /// `--gpu G --model M` against a server: a catalog deployment with vLLM's defaults (BF16,
    /// one GPU, the GPU class's scheduler limits).
    pub fn from_catalog(gpu: &str, model: &str) -> Result<RooflineTarget> {
        let catalog = Catalog::builtin();
        let gpu = catalog.gpu(gpu).context("--gpu")?.clone();
        let model = catalog
            .model(model)
            .with_context(|| format!("--model {model} for the roofline prediction"))?
            .clone();
        let max_model_len = model.max_position_embeddings;
        let deployment = Deployment::new(gpu, model, Dtype::Bf16, KvDtype::Auto, 1)?;
        let (budget, max_num_seqs) =
            resolve_scheduler_limits(deployment.gpu(), true, max_model_len, None, None)?;
        Ok(RooflineTarget {
            deployment,
            budget,
            max_num_seqs,
        })
    }

    /// `batch` requests of `input_len` prompt tokens each generating `output_len` tokens, all
    /// released at once. Requests beyond `max_num_seqs` wait for a whole wave to finish.
    pub fn predict(&self, input_len: u32, output_len: u32, batch: u32) -> Result<BatchPrediction> {
        if batch == 0 || output_len == 0 {
            bail!("a prediction needs at least one request and one output token");
        }
        let wave = batch.min(self.max_num_seqs.max(1));
        let (full, rest) = (batch / wave, batch % wave);
        let mut latency_s = f64::from(full) * self.wave_s(input_len, output_len, wave);
        if rest > 0 {
            latency_s += self.wave_s(input_len, output_len, rest);
        }
        Ok(BatchPrediction {
            latency_s,
            decode_step_s: self.mean_decode_step_s(input_len, output_len, wave),
        })
    }

    fn wave_s(&self, input_len: u32, output_len: u32, wave: u32) -> f64 {
        let decode_steps = f64::from(output_len.saturating_sub(1));
        self.prefill_s(input_len, wave)
            + decode_steps * self.mean_decode_step_s(input_len, output_len, wave)
    }

    /// Prompts packed into steps of `budget` tokens in order, a prompt split across steps
    /// where the budget runs out (chunked prefill); the step that ends a prompt samples its
    /// first token.
    fn prefill_s(&self, input_len: u32, wave: u32) -> f64 {
        let budget = self.budget.max(1);
        let mut done = vec![0u32; wave as usize];
        let mut next = 0usize;
        let mut total = 0.0;
        while next < done.len() {
            let mut left = budget;
            let mut work = Vec::new();
            let mut i = next;
            while left > 0 && i < done.len() {
                let q = left.min(input_len - done[i]);
                work.push(SeqWork {
                    new_tokens: q,
                    context: done[i],
                    samples: done[i] + q == input_len,
                });
                done[i] += q;
                left -= q;
                i += 1;
            }
            total += self.deployment.step_time(&work).total;
            while next < done.len() && done[next] == input_len {
                next += 1;
            }
        }
        total
    }

    /// Decode step `j` (j = 1..output_len−1) feeds token `j` on a context of
    /// `input_len + j − 1` tokens: the mean over those steps is the per-token time.
    pub fn mean_decode_step_s(&self, input_len: u32, output_len: u32, wave: u32) -> f64 {
        let steps = output_len.saturating_sub(1);
        if steps == 0 {
            return self.deployment.decode_tpot(input_len, wave).total;
        }
        let sum: f64 = (0..steps)
            .map(|j| self.deployment.decode_tpot(input_len + j, wave).total)
            .sum();
        sum / f64::from(steps)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn h100() -> RooflineTarget {
        RooflineTarget::from_catalog("h100", "llama-3.1-8b").unwrap()
    }

    #[test]
    fn per_token_time_rises_with_the_batch() {
        let r = h100();
        let one = r.predict(32, 128, 1).unwrap();
        let many = r.predict(32, 128, 64).unwrap();
        assert!(many.decode_step_s > one.decode_step_s);
        assert!(many.latency_s > one.latency_s);
    }

    #[test]
    fn batch_one_is_prefill_plus_decode_steps() {
        let r = h100();
        let p = r.predict(100, 3, 1).unwrap();
        let d = &r.deployment;
        let prefill = d
            .step_time(&[SeqWork {
                new_tokens: 100,
                context: 0,
                samples: true,
            }])
            .total;
        let decode = d.decode_tpot(100, 1).total + d.decode_tpot(101, 1).total;
        assert!((p.latency_s - (prefill + decode)).abs() < 1e-12);
        assert!((p.decode_step_s - decode / 2.0).abs() < 1e-12);
    }

    #[test]
    fn a_batch_beyond_max_num_seqs_runs_in_waves() {
        let mut r = h100();
        r.max_num_seqs = 4;
        let four = r.predict(32, 16, 4).unwrap();
        let eight = r.predict(32, 16, 8).unwrap();
        assert!((eight.latency_s - 2.0 * four.latency_s).abs() < 1e-12);
        assert_eq!(eight.decode_step_s, four.decode_step_s);
    }

    #[test]
    fn long_prompts_are_chunked_by_the_budget() {
        let mut r = h100();
        r.budget = 64;
        // Two prompts of 100 tokens: steps of 64, 64, 64, 8 tokens.
        let p = r.prefill_s(100, 2);
        let d = &r.deployment;
        let step = |w: &[SeqWork]| d.step_time(w).total;
        let expected = step(&[SeqWork {
            new_tokens: 64,
            context: 0,
            samples: false,
        }]) + step(&[
            SeqWork {
                new_tokens: 36,
                context: 64,
                samples: true,
            },
            SeqWork {
                new_tokens: 28,
                context: 0,
                samples: false,
            },
        ]) + step(&[SeqWork {
            new_tokens: 64,
            context: 28,
            samples: false,
        }]) + step(&[SeqWork {
            new_tokens: 8,
            context: 92,
            samples: true,
        }]);
        assert!((p - expected).abs() < 1e-12);
    }
}
