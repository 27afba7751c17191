//! Loading tokenizers from files, directories and a fake Hugging Face cache, and the
//! behaviour shared by both tokenizer kinds.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use servebench_tokenizer::{Tokenizer, TokenizerError};

/// A fresh directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "servebench-tokenizer-{tag}-{}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A small word-level tokenizer: whitespace pre-tokenizer, a handful of words, two
/// special tokens, and a truncation setting that loading must switch off.
fn word_level_json(extra_word: &str) -> String {
    format!(
        r#"{{
  "version": "1.0",
  "truncation": {{"direction": "Right", "max_length": 2, "strategy": "LongestFirst", "stride": 0}},
  "padding": null,
  "added_tokens": [
    {{"id": 0, "content": "[UNK]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}},
    {{"id": 1, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}}
  ],
  "normalizer": null,
  "pre_tokenizer": {{"type": "Whitespace"}},
  "post_processor": null,
  "decoder": null,
  "model": {{
    "type": "WordLevel",
    "vocab": {{"[UNK]": 0, "<s>": 1, "the": 2, "time": 3, "hello": 4, "world": 5, "of": 6, "{extra_word}": 7}},
    "unk_token": "[UNK]"
  }}
}}"#
    )
}

fn write(path: &Path, contents: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, contents).unwrap();
}

#[test]
fn builtin_round_trips_text() {
    let tok = Tokenizer::builtin();
    for text in [
        "Hello, world!",
        "The quick brown fox jumps over the lazy dog.\n\nSecond paragraph\twith a tab.",
        "unicode: naïve café, 東京, emoji 🚀🎉, math ∑∫",
        "   leading and trailing spaces   ",
        "",
    ] {
        let ids = tok.encode(text);
        assert_eq!(tok.decode(&ids), text, "round trip of {text:?}");
        assert_eq!(tok.count(text), ids.len());
    }
}

#[test]
fn builtin_counts_known_strings() {
    let tok = Tokenizer::builtin();
    assert_eq!(tok.count(""), 0);
    assert_eq!(tok.count("hello"), 1);
    assert_eq!(tok.count(" the"), 1);
    assert_eq!(tok.count("hello world"), 2);
    assert_eq!(tok.count("Hello, world!"), 4);
    // Repeated single-token words stay one token each.
    assert_eq!(tok.count(&" the".repeat(100)), 100);
}

#[test]
fn builtin_sampling_ids_exclude_control_characters() {
    let tok = Tokenizer::builtin();
    let ids = tok.sampling_ids();
    assert!(ids.len() > 199_000, "{}", ids.len());
    let nul = tok.encode("\u{0}");
    assert_eq!(nul.len(), 1);
    assert!(ids.binary_search(&nul[0]).is_err());
    let newline = tok.encode("\n");
    assert!(ids.binary_search(&newline[0]).is_ok());
    assert!(ids.iter().all(|id| !tok.is_special(*id)));
}

#[test]
fn builtin_word_ids_concatenate_exactly() {
    let tok = Tokenizer::builtin();
    let words = tok.word_ids();
    assert!(words.len() > 50_000, "{}", words.len());
    // Every 97th word, concatenated: the text encodes back to exactly those ids.
    let picked: Vec<u32> = words.iter().copied().step_by(97).collect();
    let text = tok.decode(&picked);
    assert_eq!(tok.encode(&text), picked);
    for id in picked.iter().take(200) {
        let w = tok.decode(&[*id]);
        assert!(
            w.starts_with(' ') && w[1..].chars().all(char::is_alphabetic),
            "{w:?}"
        );
    }
}

#[test]
fn word_level_word_ids() {
    let dir = TempDir::new("words");
    let file = dir.path().join("tokenizer.json");
    write(&file, &word_level_json("file"));
    let tok = Tokenizer::from_file(&file).unwrap();
    // Without a decoder the word-level model joins tokens with spaces, so every
    // ordinary word qualifies.
    assert_eq!(tok.word_ids(), &[2, 3, 4, 5, 6, 7]);
}

#[test]
fn builtin_filler_words_are_single_tokens() {
    let tok = Tokenizer::builtin();
    let words = tok.filler_words();
    assert!(words.len() >= 190, "only {} filler words", words.len());
    for (word, id) in &words {
        assert!(word.starts_with(' '));
        assert_eq!(tok.encode(word), vec![*id], "{word:?}");
        assert_eq!(tok.decode(&[*id]), *word);
        assert!(!tok.is_special(*id));
    }
    // Concatenated filler words tokenise to exactly their ids, which is what lets the
    // simulator emit text whose token count equals the ids it generated.
    let text: String = words.iter().map(|(w, _)| w.as_str()).collect();
    let ids: Vec<u32> = words.iter().map(|(_, id)| *id).collect();
    assert_eq!(tok.encode(&text), ids);
}

#[test]
fn loads_word_level_file_and_disables_truncation() {
    let dir = TempDir::new("file");
    let file = dir.path().join("tokenizer.json");
    write(&file, &word_level_json("file"));
    let tok = Tokenizer::from_file(&file).unwrap();
    assert!(!tok.is_builtin());
    assert_eq!(tok.name(), file.display().to_string());
    assert_eq!(tok.vocab_size(), 8);
    assert_eq!(tok.special_token_ids(), &[0, 1]);
    assert_eq!(tok.ordinary_ids(), &[2, 3, 4, 5, 6, 7]);
    // The file asks for truncation at 2 tokens; loading must ignore it.
    assert_eq!(tok.encode("hello world the time of"), vec![4, 5, 2, 3, 6]);
    assert_eq!(tok.count("hello world the time of"), 5);
    // No BOS is added, and decoding skips special tokens.
    assert_eq!(tok.decode(&[1, 4, 5, 0]), "hello world");
    let filler: Vec<String> = tok.filler_words().into_iter().map(|(w, _)| w).collect();
    assert_eq!(filler, vec![" the", " of", " time", " world"]);
    assert_eq!(tok.encode("file"), vec![7]);
    assert_eq!(tok.sampling_ids(), tok.ordinary_ids());
}

#[test]
fn loads_from_directory() {
    let dir = TempDir::new("dir");
    write(&dir.path().join("tokenizer.json"), &word_level_json("dir"));
    let tok = Tokenizer::load(dir.path().to_str().unwrap()).unwrap();
    assert_eq!(tok.encode("dir"), vec![7]);
}

#[test]
fn loads_from_hf_cache_preferring_refs_main() {
    let cache = TempDir::new("hfcache");
    let repo = cache.path().join("models--acme--tiny-model");
    write(
        &repo.join("snapshots/aaaa/tokenizer.json"),
        &word_level_json("main"),
    );
    write(
        &repo.join("snapshots/bbbb/tokenizer.json"),
        &word_level_json("other"),
    );
    write(&repo.join("refs/main"), "aaaa\n");
    let tok = Tokenizer::load_with_hf_cache("acme/tiny-model", Some(cache.path())).unwrap();
    assert_eq!(tok.name(), "acme/tiny-model");
    assert_eq!(tok.encode("main"), vec![7]);

    // Without refs/main, a snapshot that has a tokenizer is used.
    std::fs::remove_file(repo.join("refs/main")).unwrap();
    std::fs::remove_file(repo.join("snapshots/aaaa/tokenizer.json")).unwrap();
    let tok = Tokenizer::load_with_hf_cache("acme/tiny-model", Some(cache.path())).unwrap();
    assert_eq!(tok.encode("other"), vec![7]);
}

#[test]
fn missing_model_id_names_what_was_tried() {
    let cache = TempDir::new("hfmissing");
    let err = Tokenizer::load_with_hf_cache("acme/absent", Some(cache.path())).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, TokenizerError::NotFound { .. }), "{msg}");
    assert!(msg.contains("acme/absent"), "{msg}");
    assert!(msg.contains("models--acme--absent"), "{msg}");

    let err = Tokenizer::load_with_hf_cache("acme/absent", None).unwrap_err();
    assert!(err.to_string().contains("no cache directory"), "{err}");
}

#[test]
fn directory_without_tokenizer_is_not_found() {
    let dir = TempDir::new("emptydir");
    let err = Tokenizer::load(dir.path().to_str().unwrap()).unwrap_err();
    assert!(matches!(err, TokenizerError::NotFound { .. }));
    assert!(err.to_string().contains("tokenizer.json"), "{err}");
}

#[test]
fn missing_file_is_a_clear_io_error() {
    let dir = TempDir::new("missing");
    let file = dir.path().join("nope.json");
    let err = Tokenizer::from_file(&file).unwrap_err();
    assert!(matches!(err, TokenizerError::Io { .. }));
    assert!(err.to_string().contains("nope.json"), "{err}");

    let err = Tokenizer::load(file.to_str().unwrap()).unwrap_err();
    assert!(matches!(err, TokenizerError::NotFound { .. }));
    assert!(err.to_string().contains("nope.json"), "{err}");
}

#[test]
fn invalid_json_is_a_clear_parse_error() {
    let dir = TempDir::new("invalid");
    let file = dir.path().join("tokenizer.json");
    write(&file, "{ this is not json");
    let err = Tokenizer::from_file(&file).unwrap_err();
    assert!(matches!(err, TokenizerError::Parse { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("invalid tokenizer file"), "{msg}");
    assert!(msg.contains(&file.display().to_string()), "{msg}");

    write(
        &file,
        r#"{"version": "1.0", "model": {"type": "Nonsense"}}"#,
    );
    assert!(matches!(
        Tokenizer::from_file(&file).unwrap_err(),
        TokenizerError::Parse { .. }
    ));
}

#[test]
fn clones_share_and_cross_threads() {
    let tok = Tokenizer::builtin();
    let texts: [&'static str; 2] = ["first thread says hello", "second thread says goodbye"];
    let handles: Vec<_> = texts
        .into_iter()
        .map(|text| {
            let tok = tok.clone();
            std::thread::spawn(move || tok.encode(text))
        })
        .collect();
    for (h, text) in handles.into_iter().zip(texts) {
        assert_eq!(h.join().unwrap(), Tokenizer::builtin().encode(text));
    }
}
