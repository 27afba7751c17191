//! One request's engine-side state (docs/simulator.md §2.1) and its output-length draw (§7).

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

use super::hashing::{request_stream, stream_rng};
use super::types::{FinishReason, NewRequest};

/// Where a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Queue {
    Waiting,
    Running,
}

#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) id: u64,
    pub(crate) prompt: Vec<u32>,
    pub(crate) output: Vec<u32>,
    pub(crate) cache_salt: Option<String>,
    pub(crate) max_tokens: u32,
    /// Output stops after this many tokens…
    pub(crate) target_len: u32,
    /// …for this reason.
    pub(crate) target_reason: FinishReason,
    /// Tokens whose KV exists.
    pub(crate) num_computed: u32,
    pub(crate) blocks: Vec<u32>,
    /// Hashes of the full blocks of the known tokens, computed lazily from the left.
    pub(crate) block_hashes: Vec<u64>,
    /// Leading blocks already registered in the prefix cache.
    pub(crate) num_registered: u32,
    pub(crate) num_cached: u32,
    pub(crate) num_preemptions: u32,
    pub(crate) arrival_ns: u64,
    pub(crate) first_scheduled_ns: Option<u64>,
    pub(crate) first_token_ns: Option<u64>,
    pub(crate) last_token_ns: Option<u64>,
    pub(crate) queue: Queue,
    pub(crate) lora: Option<u32>,
    rng: ChaCha8Rng,
}

/// How many tokens a request will generate and why it stops: `max_tokens`, or a natural
/// length drawn from the request's own stream. The draw comes first on that stream.
fn target(
    rng: &mut ChaCha8Rng,
    req: &NewRequest,
    eos_len_median: f64,
    eos_len_sigma: f64,
) -> (u32, FinishReason) {
    let max_tokens = req.max_tokens.max(1);
    if req.ignore_eos || eos_len_median <= 0.0 {
        (max_tokens, FinishReason::Length)
    } else {
        let natural = natural_length(rng, eos_len_median, eos_len_sigma).max(req.min_tokens);
        if natural < max_tokens {
            (natural, FinishReason::Stop)
        } else {
            (max_tokens, FinishReason::Length)
        }
    }
}

/// The output length the engine will give `req` if it runs to completion (not aborted): the
/// same draw `Request::new` makes, so a server can know it before the first token (a
/// reasoning split given as a share of the output needs it). `req.max_tokens` must already
/// fit the context, as a validated request's does.
pub fn planned_output_len(
    req: &NewRequest,
    global_seed: u64,
    eos_len_median: f64,
    eos_len_sigma: f64,
) -> u32 {
    let mut rng = stream_rng(global_seed, request_stream(req.seed, &req.prompt));
    target(&mut rng, req, eos_len_median, eos_len_sigma).0
}

/// The `seed` of choice `index` of a request asking for several (`n`): choice 0 is the request
/// itself; later choices get `seed + index` as vLLM seeds its child requests, or, unseeded, a
/// seed derived from the prompt's stream so that each choice draws its own output.
pub fn choice_seed(seed: Option<u64>, prompt: &[u32], index: u32) -> Option<u64> {
    if index == 0 {
        return seed;
    }
    Some(match seed {
        Some(s) => s.wrapping_add(u64::from(index)),
        // An odd multiplier spreads consecutive indices over the whole key space.
        None => request_stream(None, prompt) ^ u64::from(index).wrapping_mul(0x9e37_79b9_7f4a_7c15),
    })
}

impl Request {
    pub(crate) fn new(
        req: NewRequest,
        global_seed: u64,
        eos_len_median: f64,
        eos_len_sigma: f64,
    ) -> Self {
        let mut rng = stream_rng(global_seed, request_stream(req.seed, &req.prompt));
        let max_tokens = req.max_tokens.max(1);
        let (target_len, target_reason) = target(&mut rng, &req, eos_len_median, eos_len_sigma);
        Request {
            id: req.id,
            prompt: req.prompt,
            output: Vec::new(),
            cache_salt: req.cache_salt,
            max_tokens,
            target_len,
            target_reason,
            num_computed: 0,
            blocks: Vec::new(),
            block_hashes: Vec::new(),
            num_registered: 0,
            num_cached: 0,
            num_preemptions: 0,
            arrival_ns: req.arrival_ns,
            first_scheduled_ns: None,
            first_token_ns: None,
            last_token_ns: None,
            queue: Queue::Waiting,
            lora: req.lora,
            rng,
        }
    }

    pub(crate) fn num_tokens(&self) -> u32 {
        (self.prompt.len() + self.output.len()) as u32
    }

    /// Prompt ++ output (tests compare incremental hashes against whole-sequence ones).
    #[cfg(test)]
    pub(crate) fn tokens_into(&self, out: &mut Vec<u32>) {
        out.clear();
        out.extend_from_slice(&self.prompt);
        out.extend_from_slice(&self.output);
    }

    /// Draws the next filler token from the request's own stream.
    pub(crate) fn draw_token(&mut self, vocab: &[u32]) -> u32 {
        if vocab.is_empty() {
            return 0;
        }
        vocab[self.rng.random_range(0..vocab.len())]
    }

    /// Brings `block_hashes` up to every full block of the known tokens.
    pub(crate) fn update_hashes(&mut self, block_size: u32) {
        let bs = block_size as usize;
        let full = self.num_tokens() as usize / bs;
        while self.block_hashes.len() < full {
            let i = self.block_hashes.len();
            let (lo, hi) = (i * bs, (i + 1) * bs);
            let plen = self.prompt.len();
            let h = if hi <= plen {
                hash_block(
                    self.block_hashes.last().copied(),
                    self.cache_salt.as_deref(),
                    &self.prompt[lo..hi],
                )
            } else if lo >= plen {
                hash_block(
                    self.block_hashes.last().copied(),
                    self.cache_salt.as_deref(),
                    &self.output[lo - plen..hi - plen],
                )
            } else {
                // A block straddling prompt and output: assemble it once.
                let mut block = Vec::with_capacity(bs);
                block.extend_from_slice(&self.prompt[lo..]);
                block.extend_from_slice(&self.output[..hi - plen]);
                hash_block(
                    self.block_hashes.last().copied(),
                    self.cache_salt.as_deref(),
                    &block,
                )
            };
            self.block_hashes.push(h);
        }
    }
}

fn hash_block(parent: Option<u64>, salt: Option<&str>, tokens: &[u32]) -> u64 {
    match parent {
        None => super::hashing::first_block_hash(salt, tokens),
        Some(p) => super::hashing::next_block_hash(p, tokens),
    }
}

/// `round(exp(ln(median) + σ·z))`, at least 1.
pub(crate) fn natural_length(rng: &mut ChaCha8Rng, median: f64, sigma: f64) -> u32 {
    let z: f64 = StandardNormal.sample(rng);
    let v = (median.ln() + sigma * z).exp().round();
    if v.is_finite() {
        v.clamp(1.0, f64::from(u32::MAX)) as u32
    } else {
        1
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::engine::hashing::block_hashes;

    fn req(prompt: Vec<u32>, seed: Option<u64>) -> NewRequest {
        NewRequest {
            lora: None,
            id: 1,
            prompt,
            max_tokens: 10_000,
            min_tokens: 0,
            ignore_eos: false,
            seed,
            cache_salt: None,
            arrival_ns: 0,
        }
    }

    #[test]
    fn natural_lengths_have_the_stated_median() {
        let mut lens: Vec<u32> = (0..4001u64)
            .map(|s| Request::new(req(vec![1, 2, 3], Some(s)), 42, 200.0, 0.8).target_len)
            .collect();
        lens.sort_unstable();
        let median = lens[lens.len() / 2];
        assert!((180..=220).contains(&median), "median {median}");
    }

    #[test]
    fn same_key_same_draws_regardless_of_order() {
        let a = Request::new(req(vec![5, 6, 7], None), 3, 200.0, 0.8);
        let _other = Request::new(req(vec![8], None), 3, 200.0, 0.8);
        let b = Request::new(req(vec![5, 6, 7], None), 3, 200.0, 0.8);
        assert_eq!(a.target_len, b.target_len);
        let c = Request::new(req(vec![5, 6, 7], None), 4, 200.0, 0.8);
        let d = Request::new(req(vec![5, 6, 7], Some(9)), 3, 200.0, 0.8);
        // Different global seed or request seed: (almost surely) a different draw.
        assert!(a.target_len != c.target_len || a.target_len != d.target_len);
    }

    #[test]
    fn ignore_eos_and_min_tokens() {
        let mut r = req(vec![1], Some(1));
        r.ignore_eos = true;
        r.max_tokens = 77;
        let a = Request::new(r, 0, 200.0, 0.8);
        assert_eq!((a.target_len, a.target_reason), (77, FinishReason::Length));
        let mut r = req(vec![1], Some(1));
        r.min_tokens = 5000;
        r.max_tokens = 6000;
        let b = Request::new(r, 0, 200.0, 0.8);
        assert_eq!((b.target_len, b.target_reason), (5000, FinishReason::Stop));
        let mut r = req(vec![1], Some(1));
        r.max_tokens = 3;
        let c = Request::new(r, 0, 0.0, 0.8);
        assert_eq!((c.target_len, c.target_reason), (3, FinishReason::Length));
    }

    #[test]
    fn incremental_hashes_match_whole_sequence_hashes() {
        let mut r = Request::new(req((0..21).collect(), Some(1)), 0, 200.0, 0.8);
        r.update_hashes(4);
        assert_eq!(r.block_hashes.len(), 5);
        r.output.extend([100, 101, 102, 103, 104]);
        r.update_hashes(4);
        let mut all = Vec::new();
        r.tokens_into(&mut all);
        assert_eq!(r.block_hashes, block_hashes(None, &all, 4));
    }
}
