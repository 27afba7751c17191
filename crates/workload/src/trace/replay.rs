//! Turning a trace into requests with arrival offsets.
//!
//! Prompts are synthesised at each entry's exact input length. Where a trace names
//! prompt blocks (Mooncake `hash_ids`), each full block id maps to one fixed random
//! text of `block_tokens` tokens, and a prompt starts with the texts of its full
//! blocks in order: entries with equal leading ids get byte-identical leading text,
//! so a server's prefix cache sees the reuse the trace recorded. The rest of the
//! prompt (a trailing partial block, or everything for traces without block ids) is
//! random text unique to the entry.
//!
//! Counts stay exact: the prompt encodes to exactly `input_tokens` tokens. Block
//! texts are exact on their own; where two of them meet, the tokenizer may merge
//! across the seam, so the blocks' combined count can differ by a few tokens from
//! `k · block_tokens`, and the unique tail absorbs the difference.
//!
//! Cost grows with the total prompt tokens: the full Mooncake sample (4k entries,
//! ~61M prompt tokens) takes minutes; replaying a slice is cheap.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use servebench_tokenizer::Tokenizer;

use crate::error::WorkloadError;
use crate::random::build_parallel;
use crate::request::RequestSpec;
use crate::rng::{stream, Purpose};
use crate::synth::{exact_text, extend_exact, TokenText};

use super::TraceEntry;

/// Mooncake's block size.
pub const MOONCAKE_BLOCK_TOKENS: u64 = 512;

/// How a trace is replayed.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayConfig {
    /// Tokens per named block (512 for Mooncake).
    pub block_tokens: u64,
    /// Seed for block and tail texts.
    pub seed: u64,
    /// Multiplies every arrival offset: 0.5 replays twice as fast.
    pub time_scale: f64,
    /// Replay only the first entries.
    pub max_requests: Option<usize>,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        Self {
            block_tokens: MOONCAKE_BLOCK_TOKENS,
            seed: 0,
            time_scale: 1.0,
            max_requests: None,
        }
    }
}

/// A trace ready to run: `requests[i]` is meant to be sent at `offsets_ns[i]`.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceWorkload {
    /// The requests, in arrival order, ids `0..n`.
    pub requests: Vec<RequestSpec>,
    /// Intended send offsets in ns from the start, non-decreasing.
    pub offsets_ns: Vec<u64>,
}

/// Builds requests and arrival offsets from trace entries.
///
/// An entry with 0 input tokens gets a 1-token prompt and one with 0 output tokens
/// asks for 1 token, since servers reject empty prompts and `max_tokens` 0.
/// `prefix_tokens` counts the full blocks an earlier entry already sent.
pub fn synthesize(
    entries: &[TraceEntry],
    tok: &Tokenizer,
    cfg: &ReplayConfig,
) -> Result<TraceWorkload, WorkloadError> {
    if cfg.block_tokens == 0 {
        return Err(WorkloadError::InvalidConfig(
            "trace block size must be at least 1 token".to_owned(),
        ));
    }
    if !cfg.time_scale.is_finite() || cfg.time_scale <= 0.0 {
        return Err(WorkloadError::InvalidConfig(format!(
            "trace time scale must be positive, got {}",
            cfg.time_scale
        )));
    }
    let entries = &entries[..cfg.max_requests.unwrap_or(usize::MAX).min(entries.len())];
    let block = usize::try_from(cfg.block_tokens)
        .map_err(|_| WorkloadError::InvalidConfig("trace block size too large".to_owned()))?;

    let shared_blocks = reused_leading_blocks(entries, cfg.block_tokens);
    let blocks = block_texts(entries, tok, cfg, block)?;

    let build = |i: usize| -> Result<RequestSpec, WorkloadError> {
        build_entry(i, &entries[i], shared_blocks[i], tok, cfg, &mut |id| {
            blocks.get(&id).cloned().ok_or_else(|| {
                WorkloadError::InvalidConfig(format!("trace block {id} has no text"))
            })
        })
    };
    let requests = build_parallel(entries.len(), build)?;
    let offsets_ns = entries
        .iter()
        .map(|e| (e.offset_ns as f64 * cfg.time_scale).round() as u64)
        .collect();
    Ok(TraceWorkload {
        requests,
        offsets_ns,
    })
}

/// The requests of `entries` without prompt text: lengths, output lengths and the reused
/// leading blocks only (for the simulator in virtual time, which needs token ids, not
/// text; see [`full_block_ids`]).
pub fn lengths_only(entries: &[TraceEntry], block_tokens: u64) -> Vec<RequestSpec> {
    let block_tokens = block_tokens.max(1);
    let shared = reused_leading_blocks(entries, block_tokens);
    entries
        .iter()
        .zip(shared)
        .enumerate()
        .map(|(i, (e, reused))| RequestSpec {
            images: Vec::new(),
            id: i as u64,
            prompt: String::new(),
            prompt_tokens: e.input_tokens.max(1),
            max_tokens: Some(e.output_tokens.max(1)),
            prefix_tokens: (reused as u64 * block_tokens).min(e.input_tokens),
        })
        .collect()
}

/// The block ids of `e` that cover whole blocks of its prompt (a trailing partial block
/// is the entry's own text).
pub fn full_block_ids(e: &TraceEntry, block_tokens: u64) -> &[u64] {
    &e.block_hashes[..full_blocks(e, block_tokens.max(1))]
}

/// The prompt of entry `i`: the texts of its full blocks (from `block_text`), then its own
/// text up to exactly its input length.
fn build_entry(
    i: usize,
    e: &TraceEntry,
    shared_blocks: usize,
    tok: &Tokenizer,
    cfg: &ReplayConfig,
    block_text: &mut dyn FnMut(u64) -> Result<Arc<str>, WorkloadError>,
) -> Result<RequestSpec, WorkloadError> {
    let target = usize::try_from(e.input_tokens.max(1))
        .map_err(|_| WorkloadError::InvalidConfig("trace prompt too long".to_owned()))?;
    let mut k = full_blocks(e, cfg.block_tokens);
    let texts = e.block_hashes[..k]
        .iter()
        .map(|id| block_text(*id))
        .collect::<Result<Vec<_>, _>>()?;
    let mut prefix = join_texts(&texts, tok);
    // Seams between blocks can add tokens; never let the blocks exceed the prompt.
    while prefix.len() > target && k > 0 {
        k -= 1;
        prefix = join_texts(&texts[..k], tok);
    }
    let mut rng = stream(cfg.seed, Purpose::TraceTail, i as u64);
    let prompt = extend_exact(tok, &mut rng, &prefix, target - prefix.len())?;
    Ok(RequestSpec {
        images: Vec::new(),
        id: i as u64,
        prompt_tokens: prompt.len() as u64,
        prompt: prompt.text,
        max_tokens: Some(e.output_tokens.max(1)),
        prefix_tokens: (shared_blocks.min(k) as u64 * cfg.block_tokens).min(e.input_tokens),
    })
}

/// Text of one block id: depends only on the seed and the id.
fn block_text(
    tok: &Tokenizer,
    seed: u64,
    block: usize,
    id: u64,
) -> Result<Arc<str>, WorkloadError> {
    let mut rng = stream(seed, Purpose::TraceBlock, id);
    exact_text(tok, &mut rng, block).map(|t| Arc::<str>::from(t.text))
}

/// Builds a trace's prompts one at a time, in any order, each the same as [`synthesize`]
/// builds it: for a long trace, prompts are made just ahead of their send instead of all
/// before the first. Block texts are cached up to a bound (they are rebuilt, identical,
/// after the cache is dropped), so memory stays flat however long the trace.
pub struct TracePrompts {
    entries: Vec<TraceEntry>,
    shared: Vec<usize>,
    tok: Tokenizer,
    cfg: ReplayConfig,
    block: usize,
    cache: HashMap<u64, Arc<str>>,
    cached_bytes: usize,
}

/// Bytes of block text kept before the cache starts over.
const BLOCK_CACHE_BYTES: usize = 128 << 20;

impl TracePrompts {
    /// `cfg.time_scale` and `cfg.max_requests` are not used (offsets are the caller's).
    pub fn new(
        entries: Vec<TraceEntry>,
        tok: Tokenizer,
        cfg: ReplayConfig,
    ) -> Result<Self, WorkloadError> {
        if cfg.block_tokens == 0 {
            return Err(WorkloadError::InvalidConfig(
                "trace block size must be at least 1 token".to_owned(),
            ));
        }
        let block = usize::try_from(cfg.block_tokens)
            .map_err(|_| WorkloadError::InvalidConfig("trace block size too large".to_owned()))?;
        Ok(Self {
            shared: reused_leading_blocks(&entries, cfg.block_tokens),
            entries,
            tok,
            cfg,
            block,
            cache: HashMap::new(),
            cached_bytes: 0,
        })
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The request of entry `i % len` with id `i` (a schedule longer than the trace cycles it).
    pub fn build(&mut self, i: usize) -> Result<RequestSpec, WorkloadError> {
        if self.entries.is_empty() {
            return Err(WorkloadError::InvalidConfig(
                "the trace has no entries".to_owned(),
            ));
        }
        let k = i % self.entries.len();
        let Self {
            entries,
            shared,
            tok,
            cfg,
            block,
            cache,
            cached_bytes,
        } = self;
        let mut text = |id: u64| -> Result<Arc<str>, WorkloadError> {
            if let Some(t) = cache.get(&id) {
                return Ok(Arc::clone(t));
            }
            let t = block_text(tok, cfg.seed, *block, id)?;
            if *cached_bytes + t.len() > BLOCK_CACHE_BYTES {
                cache.clear();
                *cached_bytes = 0;
            }
            *cached_bytes += t.len();
            cache.insert(id, Arc::clone(&t));
            Ok(t)
        };
        let mut spec = build_entry(k, &entries[k], shared[k], tok, cfg, &mut text)?;
        spec.id = i as u64;
        Ok(spec)
    }
}

/// Number of block ids of `e` that cover a whole block of its prompt.
fn full_blocks(e: &TraceEntry, block_tokens: u64) -> usize {
    let whole = usize::try_from(e.input_tokens / block_tokens).unwrap_or(usize::MAX);
    e.block_hashes.len().min(whole)
}

/// For each entry, how many of its leading full blocks an earlier entry already had
/// as the same leading sequence.
fn reused_leading_blocks(entries: &[TraceEntry], block_tokens: u64) -> Vec<usize> {
    let mut seen: HashSet<u64> = HashSet::new();
    entries
        .iter()
        .map(|e| {
            let k = full_blocks(e, block_tokens);
            let mut chain = std::collections::hash_map::DefaultHasher::new();
            let mut reused = 0;
            let mut keys = Vec::with_capacity(k);
            for (j, id) in e.block_hashes[..k].iter().enumerate() {
                id.hash(&mut chain);
                let key = chain.finish();
                if reused == j && seen.contains(&key) {
                    reused += 1;
                }
                keys.push(key);
            }
            seen.extend(keys);
            reused
        })
        .collect()
}

/// The text of every block id used as a full block, each from its own seeded stream
/// so it depends only on the seed and the id.
fn block_texts(
    entries: &[TraceEntry],
    tok: &Tokenizer,
    cfg: &ReplayConfig,
    block: usize,
) -> Result<HashMap<u64, Arc<str>>, WorkloadError> {
    let mut ids: Vec<u64> = entries
        .iter()
        .flat_map(|e| {
            e.block_hashes[..full_blocks(e, cfg.block_tokens)]
                .iter()
                .copied()
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let texts = build_parallel(ids.len(), |i| block_text(tok, cfg.seed, block, ids[i]))?;
    Ok(ids.into_iter().zip(texts).collect())
}

fn join_texts(texts: &[Arc<str>], tok: &Tokenizer) -> TokenText {
    let text: String = texts.iter().map(|t| &**t).collect();
    TokenText {
        ids: tok.encode(&text),
        text,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn entry(offset_ns: u64, input: u64, hashes: &[u64]) -> TraceEntry {
        TraceEntry {
            offset_ns,
            input_tokens: input,
            output_tokens: 7,
            block_hashes: hashes.to_vec(),
        }
    }

    #[test]
    fn reuse_counts_only_matching_leading_chains() {
        let e = vec![
            entry(0, 2048, &[1, 2, 3, 4]),
            entry(1, 2048, &[1, 2, 9, 4]),
            entry(2, 1500, &[1, 2, 3]),
            entry(3, 1024, &[5, 2]),
            entry(4, 700, &[1, 2]),
        ];
        assert_eq!(reused_leading_blocks(&e, 512), vec![0, 2, 2, 0, 1]);
    }

    #[test]
    fn shared_blocks_give_identical_leading_text_and_exact_counts() {
        let tok = Tokenizer::builtin();
        let e = vec![
            entry(0, 100, &[10, 11, 12]),
            entry(5_000, 90, &[10, 11, 13]),
            entry(9_000, 45, &[20]),
            entry(9_500, 0, &[]),
        ];
        let cfg = ReplayConfig {
            block_tokens: 32,
            seed: 3,
            time_scale: 0.5,
            max_requests: None,
        };
        let w = synthesize(&e, &tok, &cfg).unwrap();
        assert_eq!(w.offsets_ns, vec![0, 2_500, 4_500, 4_750]);
        for (r, e) in w.requests.iter().zip(&e) {
            let want = e.input_tokens.max(1);
            assert_eq!(r.prompt_tokens, want);
            assert_eq!(tok.count(&r.prompt) as u64, want);
        }
        let (a, b) = (&w.requests[0].prompt, &w.requests[1].prompt);
        let common = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
        let ta = tok.encode(a);
        let tb = tok.encode(b);
        let common_tokens = ta.iter().zip(&tb).take_while(|(x, y)| x == y).count();
        assert!(
            common > 0 && common_tokens >= 60,
            "{common} bytes, {common_tokens} tokens"
        );
        assert_eq!(w.requests[1].prefix_tokens, 64);
        assert_eq!(w.requests[0].prefix_tokens, 0);
        assert_eq!(w.requests[3].max_tokens, Some(7));
    }

    #[test]
    fn prompts_built_one_at_a_time_equal_the_batch() {
        let tok = Tokenizer::builtin();
        let e = vec![
            entry(0, 100, &[10, 11, 12]),
            entry(5_000, 90, &[10, 11, 13]),
            entry(9_000, 45, &[20]),
        ];
        let cfg = ReplayConfig {
            block_tokens: 32,
            seed: 3,
            ..ReplayConfig::default()
        };
        let batch = synthesize(&e, &tok, &cfg).unwrap().requests;
        let mut lazy = TracePrompts::new(e, tok, cfg).unwrap();
        for i in [2, 0, 1] {
            assert_eq!(lazy.build(i).unwrap(), batch[i]);
        }
        let cycled = lazy.build(4).unwrap();
        assert_eq!((cycled.id, &cycled.prompt), (4, &batch[1].prompt));
    }

    #[test]
    fn rejects_bad_settings() {
        let tok = Tokenizer::builtin();
        let bad = ReplayConfig {
            time_scale: 0.0,
            ..ReplayConfig::default()
        };
        assert!(synthesize(&[], &tok, &bad).is_err());
        let bad = ReplayConfig {
            block_tokens: 0,
            ..ReplayConfig::default()
        };
        assert!(synthesize(&[], &tok, &bad).is_err());
    }
}
