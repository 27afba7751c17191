//! The `hf` dataset (`--dataset-name hf --dataset-path DIR_OR_FILE`) from a local copy of a
//! Hugging Face dataset saved as JSON Lines, a JSON list or Parquet, for the datasets vLLM
//! knows by name ([`known`]).
//!
//! Which dataset a copy holds comes from `--hf-name`, else from the path itself when it is
//! a known id (or ends with one, as `~/hf/philschmid/mt-bench` does). The files of the split
//! and subset are found as [`files`] describes; `--hf-split` defaults to `train`, and vLLM
//! fixes the split to `train` for all but the conversation datasets. The rows are shuffled
//! with the seed (unless `--disable-shuffle`; the order differs from vLLM's, whose shuffle
//! is the `datasets` library's), taken in order through the dataset's filter until
//! `num_prompts` are found, and random ones repeated when fewer are (unless
//! `--no-oversample`).
//!
//! servebench never downloads. A path that does not exist but looks like a dataset id is
//! looked up where `huggingface_hub` caches what `load_dataset` fetched (`$HF_HUB_CACHE`,
//! `$HF_HOME/hub`, `~/.cache/huggingface/hub`: `datasets--OWNER--NAME/snapshots/REV/`), as an
//! offline vLLM finds it; when it is not there it is refused, naming the places looked at and
//! the command that fetches it. vLLM applies the model's chat template to
//! InstructCoder and MT-Bench prompts (unless `--skip-chat-template`); servebench sends the
//! prompt as written, and a chat endpoint applies the server's template.

pub mod files;
pub mod known;
pub mod prompts;
pub mod rows;

use std::path::{Path, PathBuf};

use servebench_tokenizer::Tokenizer;

use crate::error::WorkloadError;
use crate::request::RequestSpec;
use crate::selection::{oversample, shuffle};
use crate::spec::request;
use known::{lookup, supported_list, HfKind, Known};
use prompts::{take, Filters, Taken};
use rows::Row;

/// Parameters of the `hf` dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct HfConfig {
    /// The local copy: a folder or one data file (`--dataset-path`).
    pub path: PathBuf,
    /// The dataset id the copy holds (`--hf-name`).
    pub name: Option<String>,
    /// `--hf-subset`.
    pub subset: Option<String>,
    /// `--hf-split` (default `train`).
    pub split: Option<String>,
    /// Output tokens of every request, replacing the dataset's (`--hf-output-len`).
    pub output_len: Option<u64>,
    /// Number of requests (`--num-prompts`).
    pub num_prompts: usize,
    /// Seed for shuffling and oversampling (`--seed`).
    pub seed: u64,
    /// Keep file order (`--disable-shuffle`).
    pub disable_shuffle: bool,
    /// Return fewer requests rather than repeating some (`--no-oversample`).
    pub no_oversample: bool,
    /// Blazedit's normalised edit distance bounds (`--blazedit-min-distance`,
    /// `--blazedit-max-distance`).
    pub blazedit_distance: (f64, f64),
}

impl HfConfig {
    /// vLLM's defaults for a local copy: 1000 prompts, split `train`, seed 0.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            name: None,
            subset: None,
            split: None,
            output_len: None,
            num_prompts: 1000,
            seed: 0,
            disable_shuffle: false,
            no_oversample: false,
            blazedit_distance: (0.0, 1.0),
        }
    }

    /// The dataset id and how its rows are read, or why the copy cannot be used.
    pub fn resolve(&self) -> Result<(String, HfKind), WorkloadError> {
        self.locate().map(|(_, id, kind)| (id, kind))
    }

    /// Where the rows are (the path given, or the Hugging Face cache's copy of the id it
    /// names), the dataset id and how its rows are read.
    pub fn locate(&self) -> Result<(PathBuf, String, HfKind), WorkloadError> {
        let path_text = self.path.to_string_lossy().into_owned();
        if !self.path.exists() && looks_like_id(&path_text) {
            let cache = servebench_tokenizer::hf_cache_root_from_env();
            return match hub_snapshot(&path_text, cache.as_deref()) {
                Ok(dir) => {
                    let id = self.name.clone().unwrap_or_else(|| path_text.clone());
                    let kind = kind_of(&id)?;
                    Ok((dir, id, kind))
                }
                Err(tried) => Err(WorkloadError::InvalidConfig(download_advice(
                    &path_text, &tried,
                ))),
            };
        }
        let (id, kind) = self.resolve_local(&path_text)?;
        Ok((self.path.clone(), id, kind))
    }

    fn resolve_local(&self, path_text: &str) -> Result<(String, HfKind), WorkloadError> {
        if !self.path.exists() {
            let id = self.name.clone().unwrap_or_else(|| path_text.to_owned());
            return Err(WorkloadError::io(
                &self.path,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("no such file or folder (the local copy of {id})"),
                ),
            ));
        }
        let id = match &self.name {
            Some(n) => n.clone(),
            None => id_in_path(&self.path).ok_or_else(|| {
                WorkloadError::InvalidConfig(format!(
                    "--dataset-path {path_text} is a local copy: say which dataset it holds \
                     with --hf-name ID (one of {})",
                    supported_list()
                ))
            })?,
        };
        let kind = kind_of(&id)?;
        Ok((id, kind))
    }

    /// The split read for `kind`.
    pub fn split_for(&self, kind: HfKind) -> String {
        kind.fixed_split()
            .map(str::to_owned)
            .or_else(|| self.split.clone())
            .unwrap_or_else(|| kind.default_split().to_owned())
    }
}

/// How the rows of dataset `id` are read, or why servebench does not read it.
fn kind_of(id: &str) -> Result<HfKind, WorkloadError> {
    match lookup(id) {
        Known::Supported(kind) => Ok(kind),
        Known::Unsupported(why) => Err(WorkloadError::InvalidConfig(format!(
            "{id} needs {why}, which servebench does not send; the hf datasets it reads \
             are {}",
            supported_list()
        ))),
        Known::Unknown => Err(WorkloadError::InvalidConfig(format!(
            "{id} is not a dataset vLLM's hf dataset knows; servebench reads {} (a \
             prompt file of your own goes through --dataset-name custom)",
            supported_list()
        ))),
    }
}

/// The snapshot folder of dataset `id` in the hub cache `cache` (what `load_dataset` and
/// `huggingface-cli download` fill): the revision `refs/main` names, else the most recently
/// modified snapshot. Err: every place looked at.
pub fn hub_snapshot(id: &str, cache: Option<&Path>) -> Result<PathBuf, Vec<String>> {
    let Some(cache) = cache else {
        return Err(vec![
            "the Hugging Face cache (neither HF_HUB_CACHE, HF_HOME nor HOME is set)".to_owned(),
        ]);
    };
    let repo = cache.join(format!("datasets--{}", id.replace('/', "--")));
    let snapshots = repo.join("snapshots");
    if let Ok(rev) = std::fs::read_to_string(repo.join("refs").join("main")) {
        let rev = rev.trim();
        let dir = snapshots.join(rev);
        if !rev.is_empty() && !rev.contains(['/', '\\']) && dir.is_dir() {
            return Ok(dir);
        }
    }
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(&snapshots)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .map(|p| {
                    let t = std::fs::metadata(&p)
                        .and_then(|m| m.modified())
                        .unwrap_or(std::time::UNIX_EPOCH);
                    (t, p)
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
        .pop()
        .map(|(_, p)| p)
        .ok_or_else(|| vec![format!("{}/*/", snapshots.display())])
}

/// `owner/name`: what `load_dataset` would fetch from the Hub.
fn looks_like_id(s: &str) -> bool {
    let mut parts = s.split('/');
    let (Some(owner), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let ok = |p: &str| {
        !p.is_empty()
            && !p.starts_with('.')
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    ok(owner) && ok(name) && !name.ends_with(".json") && !name.ends_with(".jsonl")
}

/// The known id a path is, or ends with.
fn id_in_path(path: &Path) -> Option<String> {
    let names: Vec<String> = path
        .components()
        .filter_map(|c| c.as_os_str().to_str().map(str::to_owned))
        .collect();
    (1..names.len())
        .rev()
        .map(|i| format!("{}/{}", names[i - 1], names[i]))
        .find(|id| lookup(id) != Known::Unknown)
}

fn download_advice(id: &str, tried: &[String]) -> String {
    let dir = id.rsplit('/').next().unwrap_or(id);
    format!(
        "{id} is a Hugging Face dataset id that is not in the local Hugging Face cache \
         (looked in {}), and servebench does not download datasets; fetch it first with \
         `huggingface-cli download {id} --repo-type dataset` (into the cache) or \
         `huggingface-cli download {id} --repo-type dataset --local-dir {dir}` and run with \
         --dataset-path {dir} --hf-name {id}",
        tried.join(", ")
    )
}

/// Builds requests from a local copy of a known Hugging Face dataset.
pub fn sample_hf(cfg: &HfConfig, tok: &Tokenizer) -> Result<Vec<RequestSpec>, WorkloadError> {
    let (root, id, kind) = cfg.locate()?;
    let subset = cfg.subset.as_deref().filter(|_| kind.takes_subset());
    let files = files::data_files(&root, subset, &cfg.split_for(kind))?;
    let rows = rows::read_all(&files)?;
    requests_from_rows(&id, kind, rows, &files, cfg, tok)
}

/// The requests `rows` (read from `files`) of dataset `id` make under `cfg`: shuffled,
/// filtered, oversampled.
pub fn requests_from_rows(
    id: &str,
    kind: HfKind,
    mut rows: Vec<Row>,
    files: &[PathBuf],
    cfg: &HfConfig,
    tok: &Tokenizer,
) -> Result<Vec<RequestSpec>, WorkloadError> {
    if !cfg.disable_shuffle {
        shuffle(&mut rows, cfg.seed);
    }
    let mut requests = Vec::new();
    for row in &rows {
        if requests.len() >= cfg.num_prompts {
            break;
        }
        let path = files
            .get(row.file)
            .map_or(cfg.path.as_path(), PathBuf::as_path);
        let filters = Filters {
            blazedit_distance: cfg.blazedit_distance,
        };
        if let Taken::Request(prompt, prompt_tokens, output, images) =
            take(kind, id, row, path, cfg.output_len, filters, tok)?
        {
            let i = requests.len();
            let mut r = request(i, prompt, prompt_tokens, output, 0);
            r.images = images;
            requests.push(r);
        }
    }
    if requests.is_empty() && cfg.num_prompts > 0 {
        return Err(WorkloadError::Empty {
            path: cfg.path.clone(),
            reason: format!(
                "no row of {id} passes its filters ({} rows read from {} files)",
                rows.len(),
                files.len()
            ),
        });
    }
    if !cfg.no_oversample {
        oversample(&mut requests, cfg.num_prompts, cfg.seed);
    }
    Ok(requests)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ids_without_a_local_copy_are_refused_with_the_fetch_command() {
        let cfg = HfConfig::new("philschmid/mt-bench");
        let err = cfg.locate().unwrap_err().to_string();
        assert!(
            err.contains(
                "huggingface-cli download philschmid/mt-bench --repo-type dataset \
                 --local-dir mt-bench"
            ),
            "{err}"
        );
        assert!(err.contains("--hf-name philschmid/mt-bench"), "{err}");
        let err = HfConfig::new("/no/such/dir")
            .resolve()
            .unwrap_err()
            .to_string();
        assert!(err.contains("no such file or folder"), "{err}");
    }

    #[test]
    fn id_shapes() {
        assert!(looks_like_id("AI-MO/NuminaMath-1.5"));
        assert!(!looks_like_id("./data"));
        assert!(!looks_like_id("a/b/c"));
        assert!(!looks_like_id("dir/file.jsonl"));
        assert_eq!(
            id_in_path(Path::new("/home/u/hf/philschmid/mt-bench")).as_deref(),
            Some("philschmid/mt-bench")
        );
        assert_eq!(id_in_path(Path::new("/home/u/data")), None);
    }
}
