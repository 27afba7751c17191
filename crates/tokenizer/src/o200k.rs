//! The built-in `o200k_base` encoding: a lean byte-pair encoder over an embedded
//! vocabulary, giving exactly the ids and bytes of OpenAI's `tiktoken` (and of the
//! `tiktoken-rs` crate, which the tests use as the oracle).
//!
//! Memory, all of it built once per process:
//! - the vocabulary is [`ASSET`], embedded in the binary with `include_bytes!` (read-only
//!   data, no heap): every ordinary token's bytes in rank order, each preceded by its
//!   length (see `assets/README.md`);
//! - a `u32` offset per rank into the asset (≈ 0.8 MB);
//! - an open-addressing hash table (linear probing) from token bytes to rank: `u32` slots
//!   holding the rank (18 bits) and 14 more bits of the key's hash, so a probe rarely reads
//!   the asset for a key that is not there (327,680 slots, ≈ 1.3 MB, load factor 0.61);
//! - the pre-tokenisation regex, compiled once and shared by every thread.
//!
//! Encoding follows tiktoken: the text is split by the o200k pattern; a piece that is a
//! token is that token; any other piece is merged pair by pair, lowest rank first (the
//! leftmost pair among equal ranks).

use std::collections::BinaryHeap;

use fancy_regex::Regex;

/// The vocabulary: [`ASSET_MAGIC`], the number of tokens (`u32`, little-endian), then for
/// each rank from 0 its length (one byte, 1..=255) and its bytes.
pub(crate) const ASSET: &[u8] = include_bytes!("../assets/o200k_base.bin");

/// First bytes of [`ASSET`]: names the format and its version.
pub(crate) const ASSET_MAGIC: &[u8; 8] = b"o200kv1\n";

/// Number of ordinary (non-special) tokens: ranks `0..ORDINARY`.
pub(crate) const ORDINARY: u32 = 199_998;

/// The o200k pre-tokenisation pattern, as tiktoken writes it (`O200K_BASE_PAT_STR`).
pub(crate) const PATTERN: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    "|",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    "|",
    r"\p{N}{1,3}",
    "|",
    r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
    "|",
    r"\s*[\r\n]+",
    "|",
    r"\s+(?!\S)",
    "|",
    r"\s+",
);

/// Bits of a slot that hold the rank (every rank is below 2^18 = 262,144).
const RANK_BITS: u32 = 18;
const RANK_MASK: u32 = (1 << RANK_BITS) - 1;
/// A free slot (its rank part, 2^18 - 1, is no rank).
const EMPTY: u32 = u32::MAX;
/// Number of slots: load factor 0.61 (an unsuccessful lookup probes about 3 slots, a
/// successful one under 2; nearly all in one cache line).
const SLOTS: usize = (1 << 18) + (1 << 16);
/// Merges of pieces this long or longer use a heap (tiktoken's threshold).
const LARGE_PIECE: usize = 100;

/// The encoder. Immutable once built; shared by every thread.
pub(crate) struct O200k {
    /// Offset in [`ASSET`] of each rank's length byte.
    offsets: Box<[u32]>,
    /// Open-addressing table, linear probing: `tag << RANK_BITS | rank`, or [`EMPTY`].
    table: Box<[u32]>,
    regex: Regex,
}

/// An error of the pre-tokenisation regex (its backtracking limit), never expected on
/// the o200k pattern.
#[derive(Debug)]
pub(crate) struct RegexError(pub(crate) String);

/// Hash of a key: its first slot from the high 32 bits (scaled to [`SLOTS`]), its tag
/// from the low ones.
#[inline]
fn hash(bytes: &[u8]) -> (usize, u32) {
    let h = xxhash_rust::xxh3::xxh3_64(bytes);
    let index = ((h >> 32) * SLOTS as u64) >> 32;
    let tag = (h as u32) & !RANK_MASK;
    (index as usize, tag)
}

/// The slot after `i`, wrapping.
#[inline]
fn next(i: usize) -> usize {
    if i + 1 == SLOTS {
        0
    } else {
        i + 1
    }
}

impl O200k {
    /// Parses [`ASSET`] and builds the tables. Panics if the asset is malformed (it is
    /// embedded at build time and checked by the tests).
    pub(crate) fn new() -> Self {
        Self::from_asset(ASSET)
    }

    fn from_asset(asset: &'static [u8]) -> Self {
        let (magic, rest) = asset.split_at(ASSET_MAGIC.len());
        assert_eq!(magic, ASSET_MAGIC, "o200k asset: bad magic");
        let (count, _) = rest.split_at(4);
        let count = u32::from_le_bytes([count[0], count[1], count[2], count[3]]);
        assert_eq!(count, ORDINARY, "o200k asset: unexpected token count");
        let mut offsets = Vec::with_capacity(ORDINARY as usize);
        let mut at = ASSET_MAGIC.len() + 4;
        for _ in 0..ORDINARY {
            let len = usize::from(asset[at]);
            assert!(len > 0, "o200k asset: empty token");
            offsets.push(u32::try_from(at).unwrap_or(u32::MAX));
            at += 1 + len;
        }
        assert_eq!(at, asset.len(), "o200k asset: trailing bytes");
        let mut encoder = Self {
            offsets: offsets.into_boxed_slice(),
            table: vec![EMPTY; SLOTS].into_boxed_slice(),
            regex: Regex::new(PATTERN).unwrap_or_else(|e| panic!("o200k pattern: {e}")),
        };
        for rank in 0..ORDINARY {
            let key = encoder.bytes(rank);
            let (mut i, tag) = hash(key);
            loop {
                let slot = encoder.table[i];
                if slot == EMPTY {
                    encoder.table[i] = tag | rank;
                    break;
                }
                assert!(
                    slot & RANK_MASK == rank || encoder.bytes(slot & RANK_MASK) != key,
                    "o200k asset: duplicate token"
                );
                i = next(i);
            }
        }
        encoder
    }

    /// Bytes of an ordinary rank (`rank < ORDINARY`).
    #[inline]
    fn bytes(&self, rank: u32) -> &'static [u8] {
        let at = self.offsets[rank as usize] as usize;
        let len = usize::from(ASSET[at]);
        &ASSET[at + 1..at + 1 + len]
    }

    /// Bytes of `rank`, or `None` for a special or unknown id.
    #[inline]
    pub(crate) fn token_bytes(&self, rank: u32) -> Option<&'static [u8]> {
        (rank < ORDINARY).then(|| self.bytes(rank))
    }

    /// Rank of the token whose bytes are `key`.
    #[inline]
    pub(crate) fn rank(&self, key: &[u8]) -> Option<u32> {
        let (mut i, tag) = hash(key);
        loop {
            let slot = self.table[i];
            if slot == EMPTY {
                return None;
            }
            if slot & !RANK_MASK == tag && self.bytes(slot & RANK_MASK) == key {
                return Some(slot & RANK_MASK);
            }
            i = next(i);
        }
    }

    #[inline]
    fn rank_or_max(&self, key: &[u8]) -> u32 {
        self.rank(key).unwrap_or(u32::MAX)
    }

    /// Calls `each` with every piece of `text` the pattern splits off, in order.
    fn for_each_piece(&self, text: &str, mut each: impl FnMut(&[u8])) -> Result<(), RegexError> {
        for found in self.regex.find_iter(text) {
            let found = found.map_err(|e| RegexError(e.to_string()))?;
            each(found.as_str().as_bytes());
        }
        Ok(())
    }

    /// Token ids of `text` (no special tokens: their text is ordinary text).
    pub(crate) fn encode(&self, text: &str) -> Result<Vec<u32>, RegexError> {
        let mut ids = Vec::with_capacity(text.len() / 4 + 1);
        let mut scratch = Scratch::default();
        self.for_each_piece(text, |piece| {
            if let Some(rank) = self.rank(piece) {
                ids.push(rank);
            } else {
                self.merge(piece, &mut scratch, |rank| ids.push(rank));
            }
        })?;
        Ok(ids)
    }

    /// Number of ids [`O200k::encode`] gives.
    pub(crate) fn count(&self, text: &str) -> Result<usize, RegexError> {
        let mut count = 0;
        let mut scratch = Scratch::default();
        self.for_each_piece(text, |piece| {
            if self.rank(piece).is_some() {
                count += 1;
            } else {
                self.merge(piece, &mut scratch, |_| count += 1);
            }
        })?;
        Ok(count)
    }

    /// Bytes of `ids`, skipping special and unknown ids.
    pub(crate) fn decode_bytes(&self, ids: &[u32]) -> Vec<u8> {
        let mut out = Vec::with_capacity(ids.len() * 8);
        for &id in ids {
            if let Some(bytes) = self.token_bytes(id) {
                out.extend_from_slice(bytes);
            }
        }
        out
    }

    /// Byte-pair merge of a piece that is not itself a token (so at least two bytes):
    /// calls `emit` with the rank of each resulting token, in order.
    fn merge(&self, piece: &[u8], scratch: &mut Scratch, mut emit: impl FnMut(u32)) {
        if piece.len() < LARGE_PIECE {
            self.merge_small(piece, &mut scratch.parts);
            for pair in scratch.parts.windows(2) {
                emit(self.rank_or_max(&piece[pair[0].0..pair[1].0]));
            }
        } else {
            self.merge_large(piece, scratch, emit);
        }
    }

    /// tiktoken's `_byte_pair_merge`: `parts` ends as the start of each token, then the
    /// piece's length (each with a rank used while merging). O(n·m), fast for the short
    /// pieces nearly all text splits into.
    fn merge_small(&self, piece: &[u8], parts: &mut Vec<(usize, u32)>) {
        parts.clear();
        let mut min_rank = (u32::MAX, usize::MAX);
        for i in 0..piece.len() - 1 {
            let rank = self.rank_or_max(&piece[i..i + 2]);
            if rank < min_rank.0 {
                min_rank = (rank, i);
            }
            parts.push((i, rank));
        }
        parts.push((piece.len() - 1, u32::MAX));
        parts.push((piece.len(), u32::MAX));

        // Rank of the token that merging parts i and i + 1 would give, counted before
        // part i + 1 is removed (hence i + 3).
        let get_rank = |parts: &[(usize, u32)], i: usize| {
            if i + 3 < parts.len() {
                self.rank_or_max(&piece[parts[i].0..parts[i + 3].0])
            } else {
                u32::MAX
            }
        };

        while min_rank.0 != u32::MAX {
            let i = min_rank.1;
            if i > 0 {
                parts[i - 1].1 = get_rank(parts, i - 1);
            }
            parts[i].1 = get_rank(parts, i);
            parts.remove(i + 1);

            min_rank = (u32::MAX, usize::MAX);
            for (i, &(_, rank)) in parts[..parts.len() - 1].iter().enumerate() {
                if rank < min_rank.0 {
                    min_rank = (rank, i);
                }
            }
        }
    }

    /// tiktoken's `_byte_pair_merge_large`: the same merges, with candidate pairs in a
    /// heap, O(m log n) for long pieces.
    fn merge_large(&self, piece: &[u8], scratch: &mut Scratch, mut emit: impl FnMut(u32)) {
        let Scratch { state, heap, .. } = scratch;
        state.clear();
        heap.clear();
        state.push(State {
            prev: usize::MAX,
            end: 1,
            next_end: 2,
            next_rank: u32::MAX,
            cur_rank: u32::MAX,
        });
        for i in 0..piece.len() - 1 {
            if let Some(rank) = self.rank(&piece[i..i + 2]) {
                heap.push(Merge { start: i, rank });
                state[i].next_rank = rank;
            }
            // Offset by one: this is the state of the byte at i + 1.
            state.push(State {
                prev: i,
                end: i + 2,
                next_end: i + 3,
                next_rank: u32::MAX,
                cur_rank: u32::MAX,
            });
        }

        // Sets the candidate merge of the token at `start` with the one ending at
        // `next_end`, invalidating the old candidate.
        let potential_merge = |state: &mut Vec<State>,
                               heap: &mut BinaryHeap<Merge>,
                               start: usize,
                               next_end: usize| {
            state[start].next_end = next_end;
            state[start].next_rank = u32::MAX;
            if next_end <= piece.len() {
                if let Some(rank) = self.rank(&piece[start..next_end]) {
                    heap.push(Merge { start, rank });
                    state[start].next_rank = rank;
                }
            }
        };

        while let Some(left) = heap.pop() {
            if left.rank == u32::MAX {
                break;
            }
            if left.rank != state[left.start].next_rank {
                continue; // invalidated
            }
            let left_start = left.start;
            let right_start = state[left_start].end;
            let right_end = state[left_start].next_end;
            let right_next_end = state[right_start].next_end;

            state[left_start].cur_rank = state[left_start].next_rank;
            state[left_start].end = right_end;
            potential_merge(state, heap, left_start, right_next_end);
            if right_end < state.len() {
                state[right_end].prev = left_start;
            }
            if left_start > 0 {
                let prev_start = state[left_start].prev;
                potential_merge(state, heap, prev_start, right_end);
            }
            state[right_start].next_rank = u32::MAX;
        }

        let mut i = 0;
        while i < state.len() {
            if state[i].cur_rank == u32::MAX {
                emit(self.rank_or_max(&piece[i..state[i].end]));
            } else {
                emit(state[i].cur_rank);
            }
            i = state[i].end;
        }
    }
}

/// Buffers reused across the pieces of one text.
#[derive(Default)]
struct Scratch {
    parts: Vec<(usize, u32)>,
    state: Vec<State>,
    heap: BinaryHeap<Merge>,
}

struct State {
    prev: usize,
    end: usize,
    next_end: usize,
    next_rank: u32,
    cur_rank: u32,
}

#[derive(Eq, PartialEq, Clone, Copy)]
struct Merge {
    start: usize,
    rank: u32,
}

impl Ord for Merge {
    /// The heap pops the lowest rank first, then the leftmost.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other
            .rank
            .cmp(&self.rank)
            .then_with(|| other.start.cmp(&self.start))
    }
}

impl PartialOrd for Merge {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Every rank's bytes in the embedded asset are tiktoken-rs's, byte for byte, and
    /// no rank past the last ordinary one is an ordinary token there.
    #[test]
    fn asset_matches_tiktoken_rank_by_rank() {
        let oracle = tiktoken_rs::o200k_base_singleton();
        let ours = O200k::new();
        for rank in 0..ORDINARY {
            let expected = oracle.decode_bytes(&[rank]).unwrap();
            assert_eq!(
                ours.token_bytes(rank),
                Some(expected.as_slice()),
                "rank {rank}"
            );
            assert_eq!(ours.rank(&expected), Some(rank), "lookup of rank {rank}");
        }
        assert!(oracle.decode_bytes(&[ORDINARY]).is_err());
        assert_eq!(ours.token_bytes(ORDINARY), None);
        assert_eq!(ours.token_bytes(199_999), None);
    }

    #[test]
    fn pattern_is_tiktokens() {
        assert_eq!(PATTERN, tiktoken_rs::O200K_BASE_PAT_STR);
    }

    #[test]
    fn lookups_of_non_tokens_miss() {
        let ours = O200k::new();
        assert_eq!(ours.rank(b""), None);
        assert_eq!(ours.rank(&[0xff; 200]), None);
        assert!(ours.rank(b" the").is_some());
    }

    #[test]
    fn long_pieces_merge_like_tiktoken() {
        let oracle = tiktoken_rs::o200k_base_singleton();
        let ours = O200k::new();
        for text in [
            "a".repeat(LARGE_PIECE - 1),
            "a".repeat(LARGE_PIECE),
            "ab".repeat(300),
            "Supercalifragilisticexpialidocious".repeat(20),
            "€".repeat(150),
            "-=".repeat(500),
        ] {
            assert_eq!(
                ours.encode(&text).unwrap(),
                oracle.encode_ordinary(&text),
                "{text:?}"
            );
        }
    }
}
