//! The prefix-repetition dataset (`--dataset-name prefix_repetition`), as vLLM defines it:
//! `num_prefixes` random prefixes of `prefix_len` tokens, each followed by
//! `num_prompts / num_prefixes` random suffixes of `suffix_len` tokens (the remainder of the
//! division is dropped, as in vLLM), all asking for `output_len` tokens, shuffled with the
//! seed unless shuffling is disabled.
//!
//! vLLM accepts prompts a few tokens off after decoding and re-encoding; here every prompt
//! has exactly `prefix_len + suffix_len` tokens under the run's tokenizer, and its first
//! `prefix_len` tokens are its prefix's own, so a prefix cache sees exactly the intended reuse.

use servebench_tokenizer::Tokenizer;

use crate::error::WorkloadError;
use crate::random::build_parallel;
use crate::request::RequestSpec;
use crate::rng::{stream, Purpose};
use crate::selection::shuffle;
use crate::spec::{renumber, request};
use crate::synth::{exact_text, extend_exact};

/// Parameters of the prefix-repetition dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct PrefixRepetitionConfig {
    /// Requested number of prompts (`--num-prompts`); rounded down to a multiple of
    /// `num_prefixes`.
    pub num_prompts: usize,
    /// Tokens of each shared prefix (`--prefix-repetition-prefix-len`).
    pub prefix_len: u64,
    /// Tokens after the prefix (`--prefix-repetition-suffix-len`).
    pub suffix_len: u64,
    /// Distinct prefixes (`--prefix-repetition-num-prefixes`).
    pub num_prefixes: usize,
    /// Output tokens of every request (`--prefix-repetition-output-len`).
    pub output_len: u64,
    /// Seed for the text and the shuffle (`--seed`).
    pub seed: u64,
    /// Keep prompts grouped by prefix (`--disable-shuffle`).
    pub disable_shuffle: bool,
}

impl Default for PrefixRepetitionConfig {
    /// vLLM's defaults: 1000 prompts, 10 prefixes of 256 tokens, 256-token suffixes,
    /// 128 output tokens, seed 0.
    fn default() -> Self {
        Self {
            num_prompts: 1000,
            prefix_len: 256,
            suffix_len: 256,
            num_prefixes: 10,
            output_len: 128,
            seed: 0,
            disable_shuffle: false,
        }
    }
}

impl PrefixRepetitionConfig {
    /// Prompts per prefix, or why there are none.
    pub fn prompts_per_prefix(&self) -> Result<usize, WorkloadError> {
        if self.num_prefixes == 0 {
            return Err(WorkloadError::InvalidConfig(
                "--prefix-repetition-num-prefixes must be at least 1".to_owned(),
            ));
        }
        match self.num_prompts / self.num_prefixes {
            0 => Err(WorkloadError::InvalidConfig(format!(
                "--num-prompts ({}) must be greater than or equal to \
                 --prefix-repetition-num-prefixes ({})",
                self.num_prompts, self.num_prefixes
            ))),
            n => Ok(n),
        }
    }
}

/// Builds the prompts: exact lengths, shared prefixes, shuffled.
pub fn sample_prefix_repetition(
    cfg: &PrefixRepetitionConfig,
    tok: &Tokenizer,
) -> Result<Vec<RequestSpec>, WorkloadError> {
    let per_prefix = cfg.prompts_per_prefix()?;
    let prefix_len = to_usize(cfg.prefix_len)?;
    let suffix_len = to_usize(cfg.suffix_len)?;
    let prefixes = build_parallel(cfg.num_prefixes, |g| {
        exact_text(
            tok,
            &mut stream(cfg.seed, Purpose::RepeatedPrefix, g as u64),
            prefix_len,
        )
    })?;
    let n = per_prefix * cfg.num_prefixes;
    let mut requests = build_parallel(n, |i| {
        let prefix = &prefixes[i / per_prefix];
        let full = extend_exact(
            tok,
            &mut stream(cfg.seed, Purpose::RepeatedSuffix, i as u64),
            prefix,
            suffix_len,
        )?;
        Ok(request(
            i,
            full.text,
            full.ids.len() as u64,
            cfg.output_len,
            cfg.prefix_len,
        ))
    })?;
    if !cfg.disable_shuffle {
        shuffle(&mut requests, cfg.seed);
        renumber(&mut requests);
    }
    Ok(requests)
}

fn to_usize(v: u64) -> Result<usize, WorkloadError> {
    usize::try_from(v)
        .map_err(|_| WorkloadError::InvalidConfig(format!("length {v} does not fit in memory")))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn small() -> PrefixRepetitionConfig {
        PrefixRepetitionConfig {
            num_prompts: 14,
            prefix_len: 40,
            suffix_len: 9,
            num_prefixes: 3,
            output_len: 5,
            ..PrefixRepetitionConfig::default()
        }
    }

    #[test]
    fn groups_share_exact_prefix_tokens() {
        let tok = Tokenizer::builtin();
        let reqs = sample_prefix_repetition(&small(), &tok).unwrap();
        // 14 / 3 = 4 per prefix: the remainder is dropped, as vLLM does.
        assert_eq!(reqs.len(), 12);
        let mut groups: BTreeMap<Vec<u32>, usize> = BTreeMap::new();
        for (i, r) in reqs.iter().enumerate() {
            let ids = tok.encode(&r.prompt);
            assert_eq!(ids.len(), 49);
            assert_eq!((r.id, r.prompt_tokens, r.prefix_tokens), (i as u64, 49, 40));
            assert_eq!(r.max_tokens, Some(5));
            *groups.entry(ids[..40].to_vec()).or_default() += 1;
        }
        assert_eq!(groups.values().copied().collect::<Vec<_>>(), [4, 4, 4]);
        assert_eq!(reqs, sample_prefix_repetition(&small(), &tok).unwrap());
    }

    #[test]
    fn shuffling_mixes_the_groups_and_can_be_turned_off() {
        let tok = Tokenizer::builtin();
        let ordered = sample_prefix_repetition(
            &PrefixRepetitionConfig {
                disable_shuffle: true,
                ..small()
            },
            &tok,
        )
        .unwrap();
        let prefix = |r: &RequestSpec| tok.encode(&r.prompt)[..40].to_vec();
        for g in 0..3 {
            let first = prefix(&ordered[g * 4]);
            assert!(ordered[g * 4..g * 4 + 4].iter().all(|r| prefix(r) == first));
        }
        let shuffled = sample_prefix_repetition(&small(), &tok).unwrap();
        assert_ne!(
            ordered.iter().map(|r| &r.prompt).collect::<Vec<_>>(),
            shuffled.iter().map(|r| &r.prompt).collect::<Vec<_>>()
        );
    }

    #[test]
    fn too_few_prompts_for_the_prefixes_is_refused() {
        let tok = Tokenizer::builtin();
        let err = sample_prefix_repetition(
            &PrefixRepetitionConfig {
                num_prompts: 2,
                ..small()
            },
            &tok,
        )
        .unwrap_err();
        assert!(err.to_string().contains("greater than or equal"), "{err}");
        let err = sample_prefix_repetition(
            &PrefixRepetitionConfig {
                num_prefixes: 0,
                ..small()
            },
            &tok,
        )
        .unwrap_err();
        assert!(err.to_string().contains("at least 1"), "{err}");
    }
}
