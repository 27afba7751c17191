//! Helpers shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};

/// A fresh directory under the system temp dir, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "servebench-workload-{tag}-{}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Trains a small byte-level BPE tokenizer (GPT-2 style, ~600 tokens, one special
/// token) and saves it as `tokenizer.json` in `dir`.
pub fn train_byte_level_bpe(dir: &Path) -> PathBuf {
    use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
    use tokenizers::models::TrainerWrapper;
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    use tokenizers::AddedToken;

    let corpus: Vec<String> = (0..200)
        .map(|i| {
            format!(
                "The quick brown fox {i} jumps over the lazy dog. A serving engine schedules \
                 requests in batches, and the cache keeps prefixes of prompts that repeat. \
                 Numbers like {} and words like tokenizer, throughput, latency appear often.",
                i * 37
            )
        })
        .collect();
    let mut tk = tokenizers::Tokenizer::new(BPE::default());
    tk.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
    tk.with_decoder(Some(ByteLevel::default()));
    let trainer = BpeTrainerBuilder::new()
        .vocab_size(600)
        .show_progress(false)
        .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
        .special_tokens(vec![AddedToken::from("<|end|>", true)])
        .build();
    tk.train(&mut TrainerWrapper::BpeTrainer(trainer), corpus.iter())
        .unwrap();
    let path = dir.join("tokenizer.json");
    tk.save(&path, false).unwrap();
    path
}

/// The shared trace fixtures: `/work/shared/data/traces`, or `shared/` beside the
/// repository checkout (as CI lays it out). `None` when neither exists.
pub fn traces_dir() -> Option<PathBuf> {
    let beside_repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/traces");
    [PathBuf::from("/work/shared/data/traces"), beside_repo]
        .into_iter()
        .find(|p| p.is_dir())
}
