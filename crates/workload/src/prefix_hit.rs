//! Prefix reuse as a controlled knob (`--prefix-hit-rate R --prefix-pool N` on the random
//! dataset).
//!
//! The shape is SGLang's generated-shared-prefix dataset (groups of prompts that open with
//! the same system prompt, then a unique question), expressed as a share of each prompt:
//! request `i` belongs to group `i mod N`, and its first `round(R × input_len_i)` tokens are
//! its group's prefix; the rest is drawn for that request alone. With `--random-range-ratio`
//! the share applies to each request's own length, so members of one group share the first
//! `min` of their shared lengths. `R = 0` makes every prompt unique from its first token.
//!
//! The first request of each group is necessarily a miss, so a server with an unbounded
//! prefix cache can reach roughly `R × (1 − N / num_prompts)`, not `R`; [`achievable`]
//! computes the exact figure for the order requests are sent in.

use servebench_tokenizer::Tokenizer;

use crate::error::WorkloadError;
use crate::random::{build_parallel, RandomConfig};
use crate::request::RequestSpec;
use crate::rng::{stream, Purpose};
use crate::synth::{exact_text, extend_exact, TokenText};

/// Number of shared prefixes when `--prefix-pool` is not given: one prefix for the whole
/// run, so the achievable rate is as close to the target as the run allows.
pub const DEFAULT_PREFIX_POOL: usize = 1;

/// The knob: share of each prompt taken from a pool of shared prefixes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrefixHit {
    /// Target share of prompt tokens a prefix cache can reuse, in `[0, 1)`.
    pub rate: f64,
    /// Number of distinct shared prefixes (groups), at least 1.
    pub pool: usize,
}

impl PrefixHit {
    /// Checks the rate and the pool size against the number of prompts.
    pub fn validate(&self, num_prompts: usize) -> Result<(), WorkloadError> {
        if !self.rate.is_finite() || !(0.0..1.0).contains(&self.rate) {
            return Err(WorkloadError::InvalidConfig(format!(
                "--prefix-hit-rate must be in [0, 1), got {}",
                self.rate
            )));
        }
        if self.pool == 0 {
            return Err(WorkloadError::InvalidConfig(
                "--prefix-pool must be at least 1".to_owned(),
            ));
        }
        if self.pool > num_prompts.max(1) {
            return Err(WorkloadError::InvalidConfig(format!(
                "--prefix-pool ({}) must not exceed --num-prompts ({num_prompts}): \
                 a prefix nobody reuses only adds misses",
                self.pool
            )));
        }
        Ok(())
    }

    /// Shared tokens of a prompt of `input_len` tokens: `round(rate × input_len)`.
    pub fn shared_len(&self, input_len: u64) -> u64 {
        ((self.rate * input_len as f64).round() as u64).min(input_len)
    }

    /// The group (pool member) of request `i`.
    pub fn group(&self, i: usize) -> usize {
        i % self.pool.max(1)
    }
}

/// The hit rate a run aims at and what it can reach at best.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HitTarget {
    /// `--prefix-hit-rate`.
    pub target: f64,
    /// Σ reusable tokens / Σ prompt tokens for the requests in the order they are sent,
    /// with an unbounded cache at token granularity.
    pub achievable: f64,
    /// Σ reusable tokens.
    pub reusable_tokens: u64,
    /// Σ prompt tokens.
    pub prompt_tokens: u64,
}

/// The best hit rate of the first `sent` requests of the dataset (cycled past its end: a
/// repeat is reusable in full). `warmed`: the first request was sent before the measured
/// window (warm-ups), so it is cached before it is measured.
pub fn achievable(cfg: &RandomConfig, sent: usize, warmed: bool) -> Option<HitTarget> {
    let hit = cfg.prefix_hit?;
    let (input_lens, _) = crate::random::sample_lengths(cfg);
    let n = input_lens.len();
    if n == 0 {
        return None;
    }
    let mut longest = vec![0u64; hit.pool.max(1)];
    if warmed {
        longest[hit.group(0)] = hit.shared_len(input_lens[0]);
    }
    let (mut reusable, mut prompt) = (0u64, 0u64);
    for j in 0..sent {
        let i = j % n;
        let len = input_lens[i];
        prompt += len;
        if j >= n || (warmed && j == 0) {
            reusable += len;
            continue;
        }
        let g = hit.group(i);
        let k = hit.shared_len(len);
        reusable += k.min(longest[g]);
        longest[g] = longest[g].max(k);
    }
    Some(HitTarget {
        target: hit.rate,
        achievable: if prompt == 0 {
            0.0
        } else {
            reusable as f64 / prompt as f64
        },
        reusable_tokens: reusable,
        prompt_tokens: prompt,
    })
}

/// The longest shared length in each group: how long each pool member's text must be.
fn group_lengths(hit: &PrefixHit, input_lens: &[u64]) -> Vec<u64> {
    let mut out = vec![0u64; hit.pool.max(1)];
    for (i, &len) in input_lens.iter().enumerate() {
        let g = hit.group(i);
        out[g] = out[g].max(hit.shared_len(len));
    }
    out
}

fn pool_texts(
    cfg: &RandomConfig,
    hit: &PrefixHit,
    tok: &Tokenizer,
    input_lens: &[u64],
) -> Result<Vec<TokenText>, WorkloadError> {
    let lens = group_lengths(hit, input_lens);
    build_parallel(lens.len(), |g| {
        exact_text(
            tok,
            &mut stream(cfg.seed, Purpose::PoolPrefix, g as u64),
            to_usize(lens[g])?,
        )
    })
}

/// The first `k` tokens of a pool member as a text of its own. Decoding and re-encoding a
/// cut can re-split the last token; the cut moves back until the tokens come out the same,
/// so the shared part is exactly the pool member's opening tokens.
fn leading(tok: &Tokenizer, member: &TokenText, k: usize) -> TokenText {
    let mut k = k.min(member.len());
    while k > 0 {
        let ids = &member.ids[..k];
        let text = tok.decode(ids);
        if tok.encode(&text) == ids {
            return TokenText {
                text,
                ids: ids.to_vec(),
            };
        }
        k -= 1;
    }
    TokenText::default()
}

/// Builds the random dataset with the knob: exact lengths `input_len_i`, leading tokens
/// from the request's pool member.
pub(crate) fn sample(
    cfg: &RandomConfig,
    hit: &PrefixHit,
    tok: &Tokenizer,
    input_lens: &[u64],
    output_lens: &[u64],
) -> Result<Vec<RequestSpec>, WorkloadError> {
    let pool = pool_texts(cfg, hit, tok, input_lens)?;
    build_parallel(input_lens.len(), |i| {
        let mut rng = stream(cfg.seed, Purpose::RequestContent, i as u64);
        let len = to_usize(input_lens[i])?;
        let k = to_usize(hit.shared_len(input_lens[i]))?;
        let shared = leading(tok, &pool[hit.group(i)], k);
        let prompt = extend_exact(tok, &mut rng, &shared, len - shared.len())?;
        Ok(RequestSpec {
            images: Vec::new(),
            id: i as u64,
            prompt_tokens: prompt.len() as u64,
            prompt: prompt.text,
            max_tokens: Some(output_lens[i]),
            prefix_tokens: shared.len() as u64,
        })
    })
}

/// Lengths-only requests for virtual time: each prompt holds only its pool member's text
/// (which a simulation cuts to `prefix_tokens` and follows with unique ids), so the
/// simulated prefix cache tells pool members apart without the cost of whole prompts.
pub(crate) fn sample_lengths_only(
    cfg: &RandomConfig,
    hit: &PrefixHit,
    tok: &Tokenizer,
    input_lens: &[u64],
    output_lens: &[u64],
) -> Result<Vec<RequestSpec>, WorkloadError> {
    let pool = pool_texts(cfg, hit, tok, input_lens)?;
    Ok((0..input_lens.len())
        .map(|i| {
            let k = hit.shared_len(input_lens[i]);
            RequestSpec {
                images: Vec::new(),
                id: i as u64,
                prompt: if k == 0 {
                    String::new()
                } else {
                    pool[hit.group(i)].text.clone()
                },
                prompt_tokens: input_lens[i],
                max_tokens: Some(output_lens[i]),
                prefix_tokens: k,
            }
        })
        .collect())
}

fn to_usize(v: u64) -> Result<usize, WorkloadError> {
    usize::try_from(v)
        .map_err(|_| WorkloadError::InvalidConfig(format!("length {v} does not fit in memory")))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::random::sample_random;

    fn cfg(rate: f64, pool: usize, n: usize, len: u64, ratio: f64) -> RandomConfig {
        RandomConfig {
            num_prompts: n,
            input_len: len,
            output_len: 4,
            range_ratio: ratio,
            seed: 11,
            prefix_hit: Some(PrefixHit { rate, pool }),
            ..RandomConfig::default()
        }
    }

    fn common_prefix(a: &[u32], b: &[u32]) -> usize {
        a.iter().zip(b).take_while(|(x, y)| x == y).count()
    }

    #[test]
    fn exact_lengths_and_shared_openings_by_group() {
        let tok = Tokenizer::builtin();
        let c = cfg(0.5, 3, 12, 64, 0.0);
        let reqs = sample_random(&c, &tok).unwrap();
        assert_eq!(reqs.len(), 12);
        let ids: Vec<Vec<u32>> = reqs.iter().map(|r| tok.encode(&r.prompt)).collect();
        for (r, ids) in reqs.iter().zip(&ids) {
            assert_eq!(ids.len(), 64, "request {}", r.id);
            assert_eq!(r.prompt_tokens, 64);
            assert_eq!(r.prefix_tokens, 32);
        }
        // Same group (0 and 3): the first 32 tokens and their text are identical.
        assert_eq!(ids[0][..32], ids[3][..32]);
        let head = tok.decode(&ids[0][..32]);
        assert!(reqs[0].prompt.starts_with(&head) && reqs[3].prompt.starts_with(&head));
        assert!(common_prefix(&ids[0], &ids[3]) < 34, "the rest is unique");
        // Different groups (0 and 1): nothing shared beyond chance.
        assert!(common_prefix(&ids[0], &ids[1]) < 2);
    }

    #[test]
    fn zero_rate_shares_no_opening() {
        let tok = Tokenizer::builtin();
        let reqs = sample_random(&cfg(0.0, 1, 40, 48, 0.0), &tok).unwrap();
        let heads: Vec<Vec<u32>> = reqs
            .iter()
            .map(|r| tok.encode(&r.prompt)[..16].to_vec())
            .collect();
        for (a, ha) in heads.iter().enumerate() {
            assert_eq!(reqs[a].prefix_tokens, 0);
            for hb in &heads[a + 1..] {
                assert!(common_prefix(ha, hb) < 2, "{ha:?} vs {hb:?}");
            }
        }
    }

    #[test]
    fn range_ratio_shares_each_requests_own_share() {
        let tok = Tokenizer::builtin();
        let c = cfg(0.25, 2, 10, 80, 0.5);
        let reqs = sample_random(&c, &tok).unwrap();
        let ids: Vec<Vec<u32>> = reqs.iter().map(|r| tok.encode(&r.prompt)).collect();
        for (r, ids) in reqs.iter().zip(&ids) {
            assert_eq!(ids.len() as u64, r.prompt_tokens);
            let want = (0.25 * r.prompt_tokens as f64).round() as u64;
            assert!(r.prefix_tokens <= want && r.prefix_tokens + 2 >= want);
        }
        for a in (0..10).step_by(2) {
            for b in ((a + 2)..10).step_by(2) {
                let k = reqs[a].prefix_tokens.min(reqs[b].prefix_tokens) as usize;
                assert_eq!(ids[a][..k], ids[b][..k]);
            }
        }
    }

    #[test]
    fn same_seed_same_prompts() {
        let tok = Tokenizer::builtin();
        let c = cfg(0.5, 2, 6, 40, 0.0);
        assert_eq!(
            sample_random(&c, &tok).unwrap(),
            sample_random(&c, &tok).unwrap()
        );
    }

    #[test]
    fn achievable_counts_first_of_each_group_as_miss() {
        let c = cfg(0.5, 4, 100, 1000, 0.0);
        let t = achievable(&c, 100, false).unwrap();
        assert_eq!(t.prompt_tokens, 100_000);
        assert_eq!(t.reusable_tokens, 96 * 500);
        assert!((t.achievable - 0.48).abs() < 1e-12);
        // A warm-up caches the whole first prompt; a cycled repeat is reusable in full.
        let w = achievable(&c, 100, true).unwrap();
        assert_eq!(w.reusable_tokens, 96 * 500 + 1000);
        let cycled = achievable(&c, 150, false).unwrap();
        assert_eq!(cycled.reusable_tokens, 96 * 500 + 50 * 1000);
        assert!(achievable(&RandomConfig::default(), 10, false).is_none());
        let zero = achievable(&cfg(0.0, 1, 10, 100, 0.0), 10, false).unwrap();
        assert_eq!(zero.reusable_tokens, 0);
    }

    #[test]
    fn validation() {
        let ok = PrefixHit { rate: 0.5, pool: 4 };
        assert!(ok.validate(4).is_ok());
        for bad in [
            PrefixHit { rate: 1.0, pool: 1 },
            PrefixHit {
                rate: -0.1,
                pool: 1,
            },
            PrefixHit {
                rate: f64::NAN,
                pool: 1,
            },
            PrefixHit { rate: 0.5, pool: 0 },
            PrefixHit { rate: 0.5, pool: 5 },
        ] {
            assert!(bad.validate(4).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn lengths_only_matches_full_sampling() {
        let tok = Tokenizer::builtin();
        let c = cfg(0.5, 3, 9, 40, 0.3);
        let full = sample_random(&c, &tok).unwrap();
        let lengths = crate::random::sample_random_lengths_with(&c, &tok).unwrap();
        for (f, l) in full.iter().zip(&lengths) {
            assert_eq!(
                (f.id, f.prompt_tokens, f.max_tokens, f.prefix_tokens),
                (l.id, l.prompt_tokens, l.max_tokens, l.prefix_tokens)
            );
            let head = tok.decode(&tok.encode(&l.prompt)[..l.prefix_tokens as usize]);
            assert!(f.prompt.starts_with(&head));
        }
    }
}
