//! servebench tokenizer: the one definition of "a token" shared by the client, the
//! workload generator and the simulated engine.
//!
//! A [`Tokenizer`] is either the built-in OpenAI `o200k_base` encoding (embedded, no
//! file needed) or a Hugging Face `tokenizer.json`. It is cheap to clone (an `Arc`
//! inside) and safe to share between threads.
//!
//! Conventions, the same for both kinds:
//! - [`Tokenizer::encode`] adds no special tokens (no BOS/EOS), like
//!   `tokenizer(text, add_special_tokens=False)`;
//! - [`Tokenizer::decode`] skips special tokens and ids the vocabulary does not know;
//! - special tokens are never part of [`Tokenizer::ordinary_ids`], the ids prompt
//!   synthesis samples from.

mod error;
mod filler;
mod locate;
mod o200k;

use std::fmt;
use std::path::Path;
use std::sync::{Arc, OnceLock};

pub use error::TokenizerError;
pub use filler::FILLER_WORDS;
pub use locate::{hf_cache_root_from_env, looks_like_model_id, TOKENIZER_FILE};

/// Name reported by the built-in tokenizer.
pub const BUILTIN_NAME: &str = "builtin:o200k_base";

/// Number of ordinary (non-special) tokens in `o200k_base`: ids `0..199_998`.
const O200K_ORDINARY: u32 = o200k::ORDINARY;
/// Special tokens of `o200k_base`: `<|endoftext|>` and `<|endofprompt|>`.
const O200K_SPECIAL: [u32; 2] = [199_999, 200_018];

/// A tokenizer shared by every part of servebench. Clones share one loaded model.
#[derive(Clone)]
pub struct Tokenizer {
    inner: Arc<Inner>,
}

struct Inner {
    backend: Backend,
    name: String,
    vocab_size: usize,
    /// Sorted ids of special tokens.
    special_ids: Vec<u32>,
    /// Sorted ids of every token that is not special.
    ordinary: Ordinary,
    filler: OnceLock<Vec<(String, u32)>>,
    sampling: OnceLock<Vec<u32>>,
    words: OnceLock<Vec<u32>>,
}

enum Backend {
    /// The built-in `o200k_base` (see the `o200k` module).
    O200k(Box<o200k::O200k>),
    HuggingFace(Box<tokenizers::Tokenizer>),
}

/// The ordinary ids of a vocabulary.
enum Ordinary {
    /// Every id of a Hugging Face vocabulary that is not special, in order.
    Listed(Vec<u32>),
    /// `0..end`, the ordinary ids of `o200k_base`: a list of them is only made if a
    /// caller asks for [`Tokenizer::ordinary_ids`] (800 kB that encoding never needs).
    Range {
        end: u32,
        listed: OnceLock<Vec<u32>>,
    },
}

impl Ordinary {
    fn as_slice(&self) -> &[u32] {
        match self {
            Self::Listed(ids) => ids,
            Self::Range { end, listed } => listed.get_or_init(|| (0..*end).collect()),
        }
    }

    fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        let (listed, range) = match self {
            Self::Listed(ids) => (ids.as_slice(), 0..0),
            Self::Range { end, .. } => (&[][..], 0..*end),
        };
        listed.iter().copied().chain(range)
    }
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokenizer")
            .field("name", &self.inner.name)
            .field("vocab_size", &self.inner.vocab_size)
            .finish()
    }
}

impl Tokenizer {
    /// The built-in tokenizer: OpenAI's `o200k_base`, from a vocabulary embedded in the
    /// binary. Its lookup tables and pattern are built once per process (about 6.5 MB
    /// resident, docs/benchmarks.md); later calls are a clone. Gives exactly tiktoken's
    /// ids.
    pub fn builtin() -> Self {
        static BUILTIN: OnceLock<Tokenizer> = OnceLock::new();
        BUILTIN
            .get_or_init(|| {
                Tokenizer::from_inner(Inner {
                    backend: Backend::O200k(Box::new(o200k::O200k::new())),
                    name: BUILTIN_NAME.to_owned(),
                    vocab_size: O200K_SPECIAL[1] as usize + 1,
                    special_ids: O200K_SPECIAL.to_vec(),
                    ordinary: Ordinary::Range {
                        end: O200K_ORDINARY,
                        listed: OnceLock::new(),
                    },
                    filler: OnceLock::new(),
                    sampling: OnceLock::new(),
                    words: OnceLock::new(),
                })
            })
            .clone()
    }

    /// Loads a Hugging Face `tokenizer.json`. Truncation and padding configured in the
    /// file are switched off, so encoding always returns every token of the text.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, TokenizerError> {
        let path = path.as_ref();
        Self::from_file_named(path, path.display().to_string())
    }

    /// Loads a tokenizer from a spec: `builtin` (or `builtin:o200k_base`), a
    /// `tokenizer.json` file, a directory holding one, or a hub model id (`org/name`)
    /// already present in the local Hugging Face cache (see
    /// [`hf_cache_root_from_env`]). Never touches the network.
    pub fn load(spec: &str) -> Result<Self, TokenizerError> {
        let root = hf_cache_root_from_env();
        Self::load_with_hf_cache(spec, root.as_deref())
    }

    /// [`Tokenizer::load`] with an explicit hub cache directory (`None`: no cache).
    pub fn load_with_hf_cache(
        spec: &str,
        cache_root: Option<&Path>,
    ) -> Result<Self, TokenizerError> {
        if matches!(spec, "builtin" | BUILTIN_NAME | "o200k_base") {
            return Ok(Self::builtin());
        }
        let located = locate::locate(spec, cache_root)?;
        let name = located
            .model_id
            .unwrap_or_else(|| located.path.display().to_string());
        Self::from_file_named(&located.path, name)
    }

    fn from_file_named(path: &Path, name: String) -> Result<Self, TokenizerError> {
        let bytes = std::fs::read(path).map_err(|source| TokenizerError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut hf =
            tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| TokenizerError::Parse {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        hf.with_padding(None);
        hf.with_truncation(None)
            .map_err(|e| TokenizerError::Parse {
                path: path.to_path_buf(),
                message: format!("cannot disable truncation: {e}"),
            })?;
        Self::from_hf(hf, name)
    }

    fn from_hf(hf: tokenizers::Tokenizer, name: String) -> Result<Self, TokenizerError> {
        let mut special_ids: Vec<u32> = hf
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, tok)| tok.special)
            .map(|(id, _)| id)
            .collect();
        special_ids.sort_unstable();
        special_ids.dedup();
        let mut all_ids: Vec<u32> = hf.get_vocab(true).into_values().collect();
        all_ids.sort_unstable();
        all_ids.dedup();
        let vocab_size = all_ids.last().map_or(0, |&max| max as usize + 1);
        let ordinary_ids: Vec<u32> = all_ids
            .into_iter()
            .filter(|id| special_ids.binary_search(id).is_err())
            .collect();
        if ordinary_ids.is_empty() {
            return Err(TokenizerError::Unusable {
                name,
                message: "the vocabulary has no ordinary (non-special) tokens".to_owned(),
            });
        }
        // A tokenizer that cannot encode plain text is misconfigured; say so at load
        // time rather than silently miscounting every prompt later.
        if let Err(e) = hf.encode_fast("Hello world", false) {
            return Err(TokenizerError::Unusable {
                name,
                message: format!("cannot encode \"Hello world\": {e}"),
            });
        }
        Ok(Self::from_inner(Inner {
            backend: Backend::HuggingFace(Box::new(hf)),
            name,
            vocab_size,
            special_ids,
            ordinary: Ordinary::Listed(ordinary_ids),
            filler: OnceLock::new(),
            sampling: OnceLock::new(),
            words: OnceLock::new(),
        }))
    }

    fn from_inner(inner: Inner) -> Self {
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Token ids of `text`, with no special tokens added.
    ///
    /// Never fails: a Hugging Face model error (only possible with a misconfigured
    /// `tokenizer.json`, such as an unknown-token id missing from the vocabulary) drops
    /// the words that cannot be encoded. Use [`Tokenizer::try_encode`] to see the error.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        match self.try_encode(text) {
            Ok(ids) => ids,
            Err(_) => self.encode_word_by_word(text),
        }
    }

    /// Token ids of `text`, with no special tokens added, or the model's error.
    pub fn try_encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        match &self.inner.backend {
            Backend::O200k(bpe) => bpe.encode(text).map_err(|e| TokenizerError::Encode {
                name: self.inner.name.clone(),
                message: e.0,
            }),
            Backend::HuggingFace(hf) => hf
                .encode_fast(text, false)
                .map(|enc| enc.get_ids().to_vec())
                .map_err(|e| TokenizerError::Encode {
                    name: self.inner.name.clone(),
                    message: e.to_string(),
                }),
        }
    }

    fn encode_word_by_word(&self, text: &str) -> Vec<u32> {
        let mut ids = Vec::new();
        let mut start = 0;
        // Each piece keeps its leading whitespace, the way BPE vocabularies store words.
        for (i, c) in text.char_indices() {
            if c.is_whitespace() && i > start && !text[start..i].trim().is_empty() {
                if let Ok(piece) = self.try_encode(&text[start..i]) {
                    ids.extend(piece);
                }
                start = i;
            }
        }
        if let Ok(piece) = self.try_encode(&text[start..]) {
            ids.extend(piece);
        }
        ids
    }

    /// Text of `ids`, skipping special tokens and ids outside the vocabulary. Byte
    /// sequences that are not valid UTF-8 (a multi-byte character cut between tokens)
    /// become U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> String {
        match &self.inner.backend {
            Backend::O200k(bpe) => {
                let bytes = bpe.decode_bytes(ids);
                match String::from_utf8(bytes) {
                    Ok(s) => s,
                    Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
                }
            }
            Backend::HuggingFace(hf) => match hf.decode(ids, true) {
                Ok(s) => s,
                // A decoder error (rare: e.g. a malformed byte-fallback token) should
                // not lose the text; the raw token strings are the best remaining view.
                Err(_) => ids
                    .iter()
                    .filter(|id| !self.is_special(**id))
                    .filter_map(|&id| hf.id_to_token(id))
                    .collect(),
            },
        }
    }

    /// Number of tokens in `text` (as [`Tokenizer::encode`] would produce).
    pub fn count(&self, text: &str) -> usize {
        match &self.inner.backend {
            Backend::O200k(bpe) => bpe.count(text).unwrap_or_else(|_| self.encode(text).len()),
            Backend::HuggingFace(_) => self.encode(text).len(),
        }
    }

    /// One past the largest token id (special tokens included).
    pub fn vocab_size(&self) -> usize {
        self.inner.vocab_size
    }

    /// A human-readable name: `builtin:o200k_base`, the model id, or the file path.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Whether this is the built-in `o200k_base` tokenizer.
    pub fn is_builtin(&self) -> bool {
        matches!(self.inner.backend, Backend::O200k(_))
    }

    /// Sorted ids of the special tokens (BOS, EOS, chat markers, ...).
    pub fn special_token_ids(&self) -> &[u32] {
        &self.inner.special_ids
    }

    /// Whether `id` is a special token.
    pub fn is_special(&self, id: u32) -> bool {
        self.inner.special_ids.binary_search(&id).is_ok()
    }

    /// Sorted ids of every non-special token: what random prompts are built from.
    pub fn ordinary_ids(&self) -> &[u32] {
        self.inner.ordinary.as_slice()
    }

    /// Ordinary ids that synthetic prompts are built from: those whose own text is
    /// non-empty and holds no control character other than tab and newline (a NUL or
    /// escape byte in a prompt is legal JSON but trips some HTTP stacks and logs).
    /// Falls back to [`Tokenizer::ordinary_ids`] if that would leave nothing. Computed
    /// once per tokenizer.
    pub fn sampling_ids(&self) -> &[u32] {
        self.inner.sampling.get_or_init(|| {
            let usable: Vec<u32> = self
                .inner
                .ordinary
                .iter()
                .filter(|&id| {
                    let text = self.decode(&[id]);
                    !text.is_empty()
                        && text
                            .chars()
                            .all(|c| !c.is_control() || c == '\n' || c == '\t')
                })
                .collect();
            if usable.is_empty() {
                self.ordinary_ids().to_vec()
            } else {
                usable
            }
        })
    }

    /// Ids of whole-word tokens: a space followed by letters only (any script), that
    /// the tokenizer gives back as exactly that one token when the word follows other
    /// text. Text built by concatenating such tokens usually encodes straight back to
    /// the same ids, which makes exact-length prompt synthesis cheap; they are also a
    /// closer stand-in for natural text than arbitrary byte fragments. Empty when the
    /// vocabulary has no such tokens. Computed once per tokenizer.
    pub fn word_ids(&self) -> &[u32] {
        self.inner.words.get_or_init(|| {
            // Some decoders drop a leading space at the start of a text (SentencePiece),
            // so each candidate is looked at after an anchor word.
            const ANCHOR: &str = "the";
            let anchor_ids = self.encode(ANCHOR);
            let anchor_text = self.decode(&anchor_ids);
            let mut ids = anchor_ids.clone();
            self.sampling_ids()
                .iter()
                .copied()
                .filter(|&id| {
                    ids.truncate(anchor_ids.len());
                    ids.push(id);
                    let Some(word) = self
                        .decode(&ids)
                        .strip_prefix(&anchor_text)
                        .map(str::to_owned)
                    else {
                        return false;
                    };
                    let Some(letters) = word.strip_prefix(' ') else {
                        return false;
                    };
                    if letters.is_empty() || !letters.chars().all(char::is_alphabetic) {
                        return false;
                    }
                    self.encode(&format!("{ANCHOR}{word}")) == ids
                })
                .collect()
        })
    }

    /// The words of [`FILLER_WORDS`] that are exactly one token under this tokenizer,
    /// each with its token id, in list order. Computed once per tokenizer.
    pub fn filler_words(&self) -> Vec<(String, u32)> {
        self.inner
            .filler
            .get_or_init(|| {
                FILLER_WORDS
                    .iter()
                    .filter_map(|&word| match self.encode(word).as_slice() {
                        [id] if !self.is_special(*id) => Some((word.to_owned(), *id)),
                        _ => None,
                    })
                    .collect()
            })
            .clone()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn builtin_is_shared_and_named() {
        let a = Tokenizer::builtin();
        let b = Tokenizer::builtin();
        assert!(Arc::ptr_eq(&a.inner, &b.inner));
        assert_eq!(a.name(), "builtin:o200k_base");
        assert!(a.is_builtin());
        assert_eq!(a.vocab_size(), 200_019);
        assert_eq!(a.special_token_ids(), &[199_999, 200_018]);
        assert_eq!(a.inner.ordinary.iter().count(), 199_998);
        assert_eq!(a.ordinary_ids().len(), 199_998);
        assert!(a.ordinary_ids().iter().copied().eq(0..199_998));
    }

    #[test]
    fn builtin_decode_skips_special_and_unknown_ids() {
        let tok = Tokenizer::builtin();
        let ids = tok.encode("hello world");
        let mut with_noise = vec![199_999];
        with_noise.extend(&ids);
        with_noise.push(4_000_000);
        with_noise.push(200_018);
        assert_eq!(tok.decode(&with_noise), "hello world");
    }

    #[test]
    fn special_text_is_encoded_as_ordinary_text() {
        let tok = Tokenizer::builtin();
        let ids = tok.encode("<|endoftext|>");
        assert!(ids.len() > 1);
        assert!(ids.iter().all(|id| !tok.is_special(*id)));
    }

    #[test]
    fn load_builtin_aliases() {
        for spec in ["builtin", "builtin:o200k_base", "o200k_base"] {
            assert!(Tokenizer::load_with_hf_cache(spec, None)
                .unwrap()
                .is_builtin());
        }
    }

    #[test]
    fn send_sync_clone() {
        fn assert_traits<T: Send + Sync + Clone + 'static>() {}
        assert_traits::<Tokenizer>();
    }
}
