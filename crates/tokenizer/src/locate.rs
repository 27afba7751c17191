//! Turning a user's tokenizer spec (file, directory or Hugging Face model id) into a
//! `tokenizer.json` path, looking only at the local disk.

use std::path::{Path, PathBuf};

use crate::error::TokenizerError;

/// File name of a Hugging Face fast tokenizer inside a model directory or snapshot.
pub const TOKENIZER_FILE: &str = "tokenizer.json";

/// The Hugging Face hub cache directory named by the environment, following the
/// `huggingface_hub` precedence: `$HF_HUB_CACHE`, then the legacy
/// `$HUGGINGFACE_HUB_CACHE`, then `$HF_HOME/hub`, then `~/.cache/huggingface/hub`.
pub fn hf_cache_root_from_env() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = var("HF_HUB_CACHE").or_else(|| var("HUGGINGFACE_HUB_CACHE")) {
        return Some(PathBuf::from(dir));
    }
    if let Some(home) = var("HF_HOME") {
        return Some(PathBuf::from(home).join("hub"));
    }
    var("HOME").map(|home| {
        PathBuf::from(home)
            .join(".cache")
            .join("huggingface")
            .join("hub")
    })
}

/// Whether `spec` has the shape of a hub model id (`name` or `org/name`), as opposed
/// to a filesystem path.
pub fn looks_like_model_id(spec: &str) -> bool {
    let valid_part = |p: &str| {
        !p.is_empty()
            && p != "."
            && p != ".."
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    let parts: Vec<&str> = spec.split('/').collect();
    (1..=2).contains(&parts.len()) && parts.iter().all(|p| valid_part(p))
}

/// Where a spec resolved to.
pub(crate) struct Located {
    pub path: PathBuf,
    /// The hub model id when the file came from the cache.
    pub model_id: Option<String>,
}

/// Resolves `spec` to a `tokenizer.json`: an existing file, a directory holding one, or
/// a model id found under `cache_root` (the hub cache). Every location looked at is
/// listed in the error when nothing is found.
pub(crate) fn locate(spec: &str, cache_root: Option<&Path>) -> Result<Located, TokenizerError> {
    let mut tried = Vec::new();
    let as_path = Path::new(spec);
    if as_path.is_file() {
        return Ok(Located {
            path: as_path.to_path_buf(),
            model_id: None,
        });
    }
    if as_path.is_dir() {
        let file = as_path.join(TOKENIZER_FILE);
        if file.is_file() {
            return Ok(Located {
                path: file,
                model_id: None,
            });
        }
        tried.push(file.display().to_string());
        return Err(TokenizerError::NotFound {
            spec: spec.to_owned(),
            tried,
        });
    }
    tried.push(format!("{} (no such file or directory)", as_path.display()));
    if looks_like_model_id(spec) {
        match cache_root {
            Some(root) => {
                if let Some(path) = find_in_hf_cache(spec, root, &mut tried) {
                    return Ok(Located {
                        path,
                        model_id: Some(spec.to_owned()),
                    });
                }
            }
            None => tried.push("the Hugging Face cache (no cache directory known)".to_owned()),
        }
    }
    Err(TokenizerError::NotFound {
        spec: spec.to_owned(),
        tried,
    })
}

/// Looks up `model_id` in a hub cache laid out as
/// `models--org--name/snapshots/<revision>/tokenizer.json`. The snapshot named by
/// `refs/main` wins; otherwise the most recently modified snapshot holding a
/// tokenizer is taken (ties broken by name, so the choice is stable).
pub(crate) fn find_in_hf_cache(
    model_id: &str,
    cache_root: &Path,
    tried: &mut Vec<String>,
) -> Option<PathBuf> {
    let repo_dir = cache_root.join(format!("models--{}", model_id.replace('/', "--")));
    let snapshots = repo_dir.join("snapshots");
    let main_ref = repo_dir.join("refs").join("main");
    if let Ok(revision) = std::fs::read_to_string(&main_ref) {
        let revision = revision.trim();
        if !revision.is_empty() && !revision.contains(['/', '\\']) {
            let file = snapshots.join(revision).join(TOKENIZER_FILE);
            if file.is_file() {
                return Some(file);
            }
            tried.push(file.display().to_string());
        }
    }
    let mut candidates: Vec<(std::time::SystemTime, String, PathBuf)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&snapshots) {
        for entry in entries.flatten() {
            let file = entry.path().join(TOKENIZER_FILE);
            if file.is_file() {
                let modified = std::fs::metadata(&file)
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::UNIX_EPOCH);
                let name = entry.file_name().to_string_lossy().into_owned();
                candidates.push((modified, name, file));
            }
        }
    }
    candidates.sort();
    match candidates.pop() {
        Some((_, _, file)) => Some(file),
        None => {
            tried.push(format!("{}/*/{TOKENIZER_FILE}", snapshots.display()));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_id_shapes() {
        assert!(looks_like_model_id("gpt2"));
        assert!(looks_like_model_id("meta-llama/Llama-3.1-8B-Instruct"));
        assert!(looks_like_model_id("Qwen/Qwen2.5-0.5B"));
        assert!(!looks_like_model_id("/abs/path"));
        assert!(!looks_like_model_id("./rel"));
        assert!(!looks_like_model_id("a/b/c"));
        assert!(!looks_like_model_id("org/"));
        assert!(!looks_like_model_id("../x"));
        assert!(!looks_like_model_id("has space/x"));
    }
}
