//! Chained prefix-block hashes (docs/simulator.md §2.4) and the seeded RNG streams (§8).
//!
//! `h_0 = H(root, cache_salt, tokens of block 0)`, `h_i = H(h_{i−1}, tokens of block i)` with
//! xxh3-64, so a hash names the whole prefix up to its block. The root is fixed, which keeps
//! hashes identical across processes and runs.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use xxhash_rust::xxh3::Xxh3;

/// Fixed root of every hash chain (the ASCII bytes of "sbprefix").
pub const PREFIX_HASH_ROOT: u64 = 0x7362_7072_6566_6978;

/// RNG stream of step jitter and hiccups.
pub const STREAM_JITTER: u64 = 1;
/// RNG stream reserved for fault injection (the server's), so faults never shift engine draws.
pub const STREAM_FAULTS: u64 = 2;
/// RNG stream of speculative-decoding acceptance, so drafts never shift the output or jitter.
pub const STREAM_SPEC: u64 = 3;

/// Hash of the first block: root, optional salt, then the block's token ids.
pub fn first_block_hash(cache_salt: Option<&str>, tokens: &[u32]) -> u64 {
    let mut h = Xxh3::with_seed(PREFIX_HASH_ROOT);
    match cache_salt {
        Some(salt) => {
            // The length prefix keeps "salt + tokens" splits unambiguous.
            h.update(&[1]);
            h.update(&(salt.len() as u64).to_le_bytes());
            h.update(salt.as_bytes());
        }
        None => h.update(&[0]),
    }
    update_tokens(&mut h, tokens);
    h.digest()
}

/// Hash of block `i > 0` chained on its parent's hash.
pub fn next_block_hash(parent: u64, tokens: &[u32]) -> u64 {
    let mut h = Xxh3::with_seed(parent);
    update_tokens(&mut h, tokens);
    h.digest()
}

/// Hashes of every full block of `tokens`, from the left.
pub fn block_hashes(cache_salt: Option<&str>, tokens: &[u32], block_size: usize) -> Vec<u64> {
    let mut out = Vec::with_capacity(tokens.len() / block_size.max(1));
    extend_block_hashes(&mut out, cache_salt, tokens, block_size);
    out
}

/// Extends `hashes` (the hashes of the first `hashes.len()` blocks of `tokens`) to every full
/// block of `tokens`.
pub fn extend_block_hashes(
    hashes: &mut Vec<u64>,
    cache_salt: Option<&str>,
    tokens: &[u32],
    block_size: usize,
) {
    if block_size == 0 {
        return;
    }
    let full = tokens.len() / block_size;
    while hashes.len() < full {
        let i = hashes.len();
        let block = &tokens[i * block_size..(i + 1) * block_size];
        let h = match hashes.last() {
            None => first_block_hash(cache_salt, block),
            Some(&parent) => next_block_hash(parent, block),
        };
        hashes.push(h);
    }
}

fn update_tokens(h: &mut Xxh3, tokens: &[u32]) {
    // Token ids as little-endian bytes, fed in small chunks to avoid an allocation.
    let mut buf = [0u8; 256];
    for chunk in tokens.chunks(buf.len() / 4) {
        for (dst, t) in buf.chunks_exact_mut(4).zip(chunk) {
            dst.copy_from_slice(&t.to_le_bytes());
        }
        h.update(&buf[..chunk.len() * 4]);
    }
}

/// An independent stream of the global seed: streams never overlap, so adding draws to one
/// (a request, jitter, faults) never shifts another.
pub fn stream_rng(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

/// The stream of one request: keyed by its `seed` field when given, else by a hash of its
/// prompt ids, so its draws do not depend on arrival order. The top bit keeps request streams
/// apart from the fixed jitter and fault streams.
pub fn request_stream(request_seed: Option<u64>, prompt: &[u32]) -> u64 {
    let key = match request_seed {
        Some(s) => {
            let mut h = Xxh3::with_seed(0x5eed);
            h.update(&s.to_le_bytes());
            h.digest()
        }
        None => {
            let mut h = Xxh3::with_seed(0x9f0a);
            update_tokens(&mut h, prompt);
            h.digest()
        }
    };
    key | (1 << 63)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn a_hash_names_the_whole_prefix() {
        let a: Vec<u32> = (0..64).collect();
        let mut b = a.clone();
        b[3] = 999; // differs in block 0 only
        let ha = block_hashes(None, &a, 16);
        let hb = block_hashes(None, &b, 16);
        assert_eq!(ha.len(), 4);
        // Every later block differs too: the chain carries the prefix.
        for i in 0..4 {
            assert_ne!(ha[i], hb[i]);
        }
        let same = block_hashes(None, &a[..40], 16);
        assert_eq!(same, ha[..2]);
    }

    #[test]
    fn salt_enters_block_zero_only_but_changes_the_chain() {
        let a: Vec<u32> = (0..32).collect();
        let plain = block_hashes(None, &a, 16);
        let salted = block_hashes(Some("tenant"), &a, 16);
        assert_ne!(plain[0], salted[0]);
        assert_ne!(plain[1], salted[1]);
        assert_eq!(salted[1], next_block_hash(salted[0], &a[16..32]));
    }

    #[test]
    fn extending_equals_hashing_at_once() {
        let a: Vec<u32> = (100..200).collect();
        let mut h = block_hashes(None, &a[..20], 8);
        extend_block_hashes(&mut h, None, &a, 8);
        assert_eq!(h, block_hashes(None, &a, 8));
    }

    #[test]
    fn hashes_are_fixed_across_runs() {
        // Guards determinism: a change of root or encoding must be deliberate.
        let h = first_block_hash(None, &[1, 2, 3, 4]);
        assert_eq!(h, first_block_hash(None, &[1, 2, 3, 4]));
        assert_ne!(h, first_block_hash(None, &[1, 2, 3, 5]));
    }

    #[test]
    fn streams_are_independent_and_reproducible() {
        let mut a = stream_rng(7, STREAM_JITTER);
        let mut b = stream_rng(7, STREAM_FAULTS);
        let mut a2 = stream_rng(7, STREAM_JITTER);
        let x: u64 = a.random();
        assert_eq!(x, a2.random::<u64>());
        assert_ne!(x, b.random::<u64>());
        assert_ne!(request_stream(Some(1), &[]), request_stream(Some(2), &[]));
        assert_eq!(request_stream(None, &[5, 6]), request_stream(None, &[5, 6]));
    }
}
