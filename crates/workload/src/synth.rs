//! Prompt synthesis at an exact token length.
//!
//! Decoding N random token ids and encoding the text again rarely gives back N
//! tokens: neighbouring pieces merge, byte fragments of one character are re-split,
//! and so on. vLLM accepts the drift; servebench does not. The text is repaired until
//! encoding it yields exactly the requested count: the tail is truncated when too long
//! or topped up with fresh random ids when too short, then decoded and re-encoded,
//! until the count is right. When a prefix is given, the result is also checked to
//! start with the prefix's own token ids, so every request sharing that prefix text
//! also shares its tokens (what a prefix cache keys on).
//!
//! Ids are drawn from the tokenizer's whole-word tokens ([`Tokenizer::word_ids`]: a
//! space and letters, in any script) when it has enough of them. Concatenated, those
//! re-encode to themselves, so a prompt is usually exact after one encode instead of
//! several, and encoding is fast because every piece is a vocabulary entry: random
//! byte fragments glue into long letter runs whose BPE merge cost grows with the
//! square of their length. Otherwise, or if that fails to converge, any non-special
//! id is used, and filler words are the last resort.

use rand::Rng;
use servebench_tokenizer::Tokenizer;

use crate::error::WorkloadError;

/// Repair rounds per attempt; a round is one decode and one encode of the prompt.
const MAX_ROUNDS: usize = 48;
/// Fresh starts with whole-word ids, then with any sampling id.
const WORD_ATTEMPTS: usize = 3;
const RANDOM_ATTEMPTS: usize = 3;
/// Whole-word vocabularies smaller than this are not varied enough to use.
const MIN_WORD_IDS: usize = 256;
/// Fresh starts with filler words, the last resort.
const FILLER_ATTEMPTS: usize = 4;

/// A text together with its token ids under some tokenizer: `ids == encode(text)`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TokenText {
    /// The text.
    pub text: String,
    /// Its token ids.
    pub ids: Vec<u32>,
}

impl TokenText {
    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.ids.len()
    }
}

/// Random text of exactly `len` tokens under `tok`, built from
/// [`Tokenizer::word_ids`] or [`Tokenizer::sampling_ids`] (never special tokens).
pub fn exact_text<R: Rng>(
    tok: &Tokenizer,
    rng: &mut R,
    len: usize,
) -> Result<TokenText, WorkloadError> {
    extend_exact(tok, rng, &TokenText::default(), len)
}

/// `prefix` followed by random text, `extra` tokens more: the result encodes to
/// exactly `prefix.len() + extra` tokens and its ids start with `prefix.ids`.
///
/// `prefix.ids` must be `tok.encode(&prefix.text)` (as every [`TokenText`] made here is).
pub fn extend_exact<R: Rng>(
    tok: &Tokenizer,
    rng: &mut R,
    prefix: &TokenText,
    extra: usize,
) -> Result<TokenText, WorkloadError> {
    if extra == 0 {
        return Ok(prefix.clone());
    }
    let words = tok.word_ids();
    let words = if words.len() >= MIN_WORD_IDS {
        words
    } else {
        &[]
    };
    let filler: Vec<u32> = tok.filler_words().into_iter().map(|(_, id)| id).collect();
    let sources = std::iter::repeat_n(words, WORD_ATTEMPTS)
        .chain(std::iter::repeat_n(tok.sampling_ids(), RANDOM_ATTEMPTS))
        .chain(std::iter::repeat_n(filler.as_slice(), FILLER_ATTEMPTS))
        .filter(|s| !s.is_empty());
    for source in sources {
        if let Some(found) = attempt(tok, rng, prefix, extra, source) {
            return Ok(found);
        }
    }
    Err(WorkloadError::Synthesis {
        target: prefix.len() + extra,
        tokenizer: tok.name().to_owned(),
        reason: format!(
            "no text converged after {} attempts of {MAX_ROUNDS} repair rounds",
            WORD_ATTEMPTS + RANDOM_ATTEMPTS + FILLER_ATTEMPTS
        ),
    })
}

/// One attempt from fresh random ids drawn from `source`.
fn attempt<R: Rng>(
    tok: &Tokenizer,
    rng: &mut R,
    prefix: &TokenText,
    extra: usize,
    source: &[u32],
) -> Option<TokenText> {
    let p = prefix.len();
    let target = p + extra;
    let draw = |rng: &mut R| source[rng.random_range(0..source.len())];
    let mut tail: Vec<u32> = (0..extra).map(|_| draw(rng)).collect();
    for _ in 0..MAX_ROUNDS {
        let tail_text = tok.decode(&tail);
        let mut text = String::with_capacity(prefix.text.len() + tail_text.len());
        text.push_str(&prefix.text);
        text.push_str(&tail_text);
        let ids = tok.encode(&text);
        if ids.len() < p || ids[..p] != prefix.ids[..] {
            // The tail's opening characters merged into the prefix's last token:
            // open the tail with a different token and try again.
            match tail.first_mut() {
                Some(first) => *first = draw(rng),
                None => tail.push(draw(rng)),
            }
            continue;
        }
        if ids.len() == target {
            return Some(TokenText { text, ids });
        }
        tail.clear();
        tail.extend_from_slice(&ids[p..]);
        if tail.len() > extra {
            tail.truncate(extra);
        } else {
            while tail.len() < extra {
                tail.push(draw(rng));
            }
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn exact_lengths_with_builtin() {
        let tok = Tokenizer::builtin();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        for len in [1, 2, 3, 7, 16, 100, 333] {
            let t = exact_text(&tok, &mut rng, len).unwrap();
            assert_eq!(t.len(), len);
            assert_eq!(tok.encode(&t.text), t.ids);
            assert!(t.ids.iter().all(|id| !tok.is_special(*id)));
        }
        assert!(exact_text(&tok, &mut rng, 0).unwrap().ids.is_empty());
    }

    #[test]
    fn extension_keeps_prefix_tokens() {
        let tok = Tokenizer::builtin();
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let prefix = exact_text(&tok, &mut rng, 50).unwrap();
        for extra in [1, 5, 64] {
            for _ in 0..5 {
                let full = extend_exact(&tok, &mut rng, &prefix, extra).unwrap();
                assert!(full.text.starts_with(&prefix.text));
                assert_eq!(&full.ids[..50], &prefix.ids[..]);
                assert_eq!(full.len(), 50 + extra);
                assert_eq!(tok.encode(&full.text), full.ids);
            }
        }
    }

    #[test]
    fn same_rng_state_gives_same_text() {
        let tok = Tokenizer::builtin();
        let a = exact_text(&tok, &mut ChaCha8Rng::seed_from_u64(9), 40).unwrap();
        let b = exact_text(&tok, &mut ChaCha8Rng::seed_from_u64(9), 40).unwrap();
        let c = exact_text(&tok, &mut ChaCha8Rng::seed_from_u64(10), 40).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
