//! The random dataset: vLLM's `--dataset-name random`, with exact prompt lengths.
//!
//! Lengths follow vLLM's `RandomDataset`: input lengths are integers drawn uniformly
//! from `[floor(len·(1−r)), ceil(len·(1+r))]` and output lengths likewise (at least 1);
//! a random prefix of `prefix_len` tokens is generated once and put before every
//! prompt, so a request's prompt is `prefix_len + input_len_i` tokens. Unlike vLLM,
//! every prompt encodes to exactly that many tokens (see the `synth` module).
//!
//! Draws come from seeded ChaCha streams, not numpy's generator, so the same seed
//! does not give vLLM's byte-identical prompts; it gives the same lengths
//! distribution and the same prompts on every servebench run.

use rand::Rng;
use servebench_tokenizer::Tokenizer;

use crate::error::WorkloadError;
pub use crate::prefix_hit::{achievable, HitTarget, PrefixHit, DEFAULT_PREFIX_POOL};
use crate::request::RequestSpec;
use crate::rng::{stream, Purpose};
use crate::synth::{exact_text, extend_exact, TokenText};

/// How the `prefix_len` leading tokens are shared between requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PrefixMode {
    /// One prefix for the whole run, as vLLM does: a prefix cache can reuse it ("warm").
    #[default]
    Shared,
    /// A fresh random prefix for every request: nothing is reusable ("cold"). Prompts
    /// have the same lengths as with [`PrefixMode::Shared`].
    PerRequest,
}

/// Parameters of the random dataset; defaults are vLLM's.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomConfig {
    /// Number of requests (`--num-prompts`, default 1000).
    pub num_prompts: usize,
    /// Mean unique input length in tokens (`--random-input-len`, default 1024).
    pub input_len: u64,
    /// Mean output length in tokens (`--random-output-len`, default 128).
    pub output_len: u64,
    /// Relative half-width of the length ranges, in `[0, 1)` (`--random-range-ratio`, default 0).
    pub range_ratio: f64,
    /// Tokens of prefix before each prompt (`--random-prefix-len`, default 0).
    pub prefix_len: u64,
    /// Whether the prefix is shared by all requests or drawn per request.
    pub prefix_mode: PrefixMode,
    /// Seed (`--seed`, default 0).
    pub seed: u64,
    /// A share of each prompt from a pool of shared prefixes (`--prefix-hit-rate`,
    /// `--prefix-pool`); replaces `prefix_len`, which must then be 0.
    pub prefix_hit: Option<PrefixHit>,
}

impl Default for RandomConfig {
    fn default() -> Self {
        Self {
            num_prompts: 1000,
            input_len: 1024,
            output_len: 128,
            range_ratio: 0.0,
            prefix_len: 0,
            prefix_mode: PrefixMode::Shared,
            seed: 0,
            prefix_hit: None,
        }
    }
}

/// An inclusive integer range of lengths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LengthRange {
    /// Smallest length.
    pub low: u64,
    /// Largest length.
    pub high: u64,
}

impl RandomConfig {
    /// The range unique input lengths are drawn from:
    /// `[floor(input_len·(1−r)), ceil(input_len·(1+r))]`.
    pub fn input_range(&self) -> LengthRange {
        let len = self.input_len as f64;
        LengthRange {
            low: (len * (1.0 - self.range_ratio)).floor() as u64,
            high: (len * (1.0 + self.range_ratio)).ceil() as u64,
        }
    }

    /// The range output lengths are drawn from, as for input but never below 1.
    pub fn output_range(&self) -> LengthRange {
        let len = self.output_len as f64;
        LengthRange {
            low: ((len * (1.0 - self.range_ratio)).floor() as u64).max(1),
            high: ((len * (1.0 + self.range_ratio)).ceil() as u64).max(1),
        }
    }

    /// Checks the parameters the way vLLM does.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        if !(0.0..1.0).contains(&self.range_ratio) {
            return Err(WorkloadError::InvalidConfig(format!(
                "--random-range-ratio must be in [0, 1), got {}",
                self.range_ratio
            )));
        }
        if let Some(hit) = &self.prefix_hit {
            hit.validate(self.num_prompts)?;
            if self.prefix_len > 0 {
                return Err(WorkloadError::InvalidConfig(
                    "--prefix-hit-rate sets the shared share of each prompt itself: \
                     drop --random-prefix-len"
                        .to_owned(),
                ));
            }
            if self.prefix_mode == PrefixMode::PerRequest {
                return Err(WorkloadError::InvalidConfig(
                    "--prefix-hit-rate cannot be combined with --random-prefix-mode \
                     per-request; use --prefix-hit-rate 0 for prompts with nothing to reuse"
                        .to_owned(),
                ));
            }
        }
        let min_total = self.prefix_len + self.input_range().low;
        if min_total < 1 {
            return Err(WorkloadError::InvalidConfig(format!(
                "--random-input-len is too small: with --random-range-ratio {} the shortest \
                 prompt (prefix + sampled) would have {min_total} tokens; increase \
                 --random-input-len or --random-prefix-len, or decrease --random-range-ratio",
                self.range_ratio
            )));
        }
        Ok(())
    }
}

/// Builds the random dataset: `num_prompts` requests with ids `0..n`, every prompt
/// exactly `prefix_len + input_len_i` tokens under `tok`.
pub fn sample_random(
    cfg: &RandomConfig,
    tok: &Tokenizer,
) -> Result<Vec<RequestSpec>, WorkloadError> {
    cfg.validate()?;
    let n = cfg.num_prompts;
    let (input_lens, output_lens) = sample_lengths(cfg);
    if let Some(hit) = &cfg.prefix_hit {
        return crate::prefix_hit::sample(cfg, hit, tok, &input_lens, &output_lens);
    }

    let prefix_len = to_usize(cfg.prefix_len)?;
    let shared_prefix = match cfg.prefix_mode {
        PrefixMode::Shared => exact_text(
            tok,
            &mut stream(cfg.seed, Purpose::SharedPrefix, 0),
            prefix_len,
        )?,
        PrefixMode::PerRequest => TokenText::default(),
    };

    let build = |i: usize| -> Result<RequestSpec, WorkloadError> {
        let mut rng = stream(cfg.seed, Purpose::RequestContent, i as u64);
        let unique = to_usize(input_lens[i])?;
        let (prompt, prefix_tokens) = match cfg.prefix_mode {
            PrefixMode::Shared => (
                extend_exact(tok, &mut rng, &shared_prefix, unique)?,
                cfg.prefix_len,
            ),
            PrefixMode::PerRequest => (exact_text(tok, &mut rng, prefix_len + unique)?, 0),
        };
        Ok(RequestSpec {
            images: Vec::new(),
            id: i as u64,
            prompt_tokens: prompt.len() as u64,
            prompt: prompt.text,
            max_tokens: Some(output_lens[i]),
            prefix_tokens,
        })
    };
    build_parallel(n, build)
}

/// The random dataset's requests with their exact lengths but no prompt text: what a
/// simulation in virtual time needs (it synthesises token ids itself). Lengths, output
/// lengths and prefix come out exactly as [`sample_random`] would produce them.
pub fn sample_random_lengths(cfg: &RandomConfig) -> Result<Vec<RequestSpec>, WorkloadError> {
    cfg.validate()?;
    let (input_lens, output_lens) = sample_lengths(cfg);
    let shared = matches!(cfg.prefix_mode, PrefixMode::Shared);
    Ok((0..cfg.num_prompts)
        .map(|i| RequestSpec {
            images: Vec::new(),
            id: i as u64,
            prompt: String::new(),
            prompt_tokens: cfg.prefix_len + input_lens[i],
            max_tokens: Some(output_lens[i]),
            prefix_tokens: if shared { cfg.prefix_len } else { 0 },
        })
        .collect())
}

/// [`sample_random_lengths`], also for `--prefix-hit-rate`: then each prompt carries its
/// pool member's text (see the `prefix_hit` module), which needs the tokenizer.
pub fn sample_random_lengths_with(
    cfg: &RandomConfig,
    tok: &Tokenizer,
) -> Result<Vec<RequestSpec>, WorkloadError> {
    match &cfg.prefix_hit {
        Some(hit) => {
            cfg.validate()?;
            let (input_lens, output_lens) = sample_lengths(cfg);
            crate::prefix_hit::sample_lengths_only(cfg, hit, tok, &input_lens, &output_lens)
        }
        None => sample_random_lengths(cfg),
    }
}

/// Unique input lengths and output lengths of every request. Like vLLM: all input
/// lengths, then all output lengths, from one stream.
pub(crate) fn sample_lengths(cfg: &RandomConfig) -> (Vec<u64>, Vec<u64>) {
    let n = cfg.num_prompts;
    let input = cfg.input_range();
    let output = cfg.output_range();
    let mut len_rng = stream(cfg.seed, Purpose::Lengths, 0);
    let input_lens = (0..n)
        .map(|_| len_rng.random_range(input.low..=input.high))
        .collect();
    let output_lens = (0..n)
        .map(|_| len_rng.random_range(output.low..=output.high))
        .collect();
    (input_lens, output_lens)
}

fn to_usize(v: u64) -> Result<usize, WorkloadError> {
    usize::try_from(v)
        .map_err(|_| WorkloadError::InvalidConfig(format!("length {v} does not fit in memory")))
}

/// Runs `build(0..n)` on the available cores and returns the results in index order.
/// Requests draw from their own random streams, so the split does not change them.
pub(crate) fn build_parallel<T, F>(n: usize, build: F) -> Result<Vec<T>, WorkloadError>
where
    T: Send,
    F: Fn(usize) -> Result<T, WorkloadError> + Sync,
{
    let threads = std::thread::available_parallelism()
        .map_or(1, |p| p.get())
        .min(n.div_ceil(16))
        .max(1);
    if threads == 1 {
        return (0..n).map(&build).collect();
    }
    let chunk = n.div_ceil(threads);
    let build = &build;
    let parts: Vec<Result<Vec<T>, WorkloadError>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let range = (t * chunk)..((t + 1) * chunk).min(n);
                s.spawn(move || range.map(build).collect::<Result<Vec<T>, _>>())
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h.join() {
                Ok(part) => part,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    });
    let mut out = Vec::with_capacity(n);
    for part in parts {
        out.extend(part?);
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ranges_follow_vllm() {
        let cfg = RandomConfig {
            input_len: 1000,
            output_len: 3,
            range_ratio: 0.25,
            ..RandomConfig::default()
        };
        assert_eq!(
            cfg.input_range(),
            LengthRange {
                low: 750,
                high: 1250
            }
        );
        assert_eq!(cfg.output_range(), LengthRange { low: 2, high: 4 });
        let cfg = RandomConfig {
            input_len: 10,
            output_len: 1,
            range_ratio: 0.99,
            ..RandomConfig::default()
        };
        assert_eq!(cfg.input_range(), LengthRange { low: 0, high: 20 });
        assert_eq!(cfg.output_range(), LengthRange { low: 1, high: 2 });
    }

    #[test]
    fn validation_rejects_what_vllm_rejects() {
        let bad_ratio = RandomConfig {
            range_ratio: 1.0,
            ..RandomConfig::default()
        };
        assert!(bad_ratio.validate().is_err());
        let empty = RandomConfig {
            input_len: 0,
            prefix_len: 0,
            ..RandomConfig::default()
        };
        let err = empty.validate().unwrap_err().to_string();
        assert!(err.contains("--random-input-len is too small"), "{err}");
        let prefix_only = RandomConfig {
            input_len: 0,
            prefix_len: 5,
            ..RandomConfig::default()
        };
        assert!(prefix_only.validate().is_ok());
    }

    #[test]
    fn lengths_only_matches_full_sampling() {
        let tok = Tokenizer::builtin();
        let cfg = RandomConfig {
            num_prompts: 12,
            input_len: 30,
            range_ratio: 0.5,
            prefix_len: 7,
            seed: 3,
            ..RandomConfig::default()
        };
        let full = sample_random(&cfg, &tok).unwrap();
        let lengths = sample_random_lengths(&cfg).unwrap();
        for (f, l) in full.iter().zip(&lengths) {
            assert_eq!(
                (f.id, f.prompt_tokens, f.max_tokens, f.prefix_tokens),
                (l.id, l.prompt_tokens, l.max_tokens, l.prefix_tokens)
            );
            assert!(l.prompt.is_empty());
        }
    }

    #[test]
    fn parallel_build_keeps_order_and_errors() {
        let out = build_parallel(100, |i| Ok(i * 2)).unwrap();
        assert_eq!(out, (0..100).map(|i| i * 2).collect::<Vec<_>>());
        let err = build_parallel(100, |i| {
            if i == 77 {
                Err(WorkloadError::InvalidConfig("boom".into()))
            } else {
                Ok(i)
            }
        });
        assert!(err.is_err());
    }
}
