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
//! servebench never downloads: a path that does not exist but looks like a dataset id is
//! refused with the command that fetches it. vLLM applies the model's chat template to
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
use prompts::{take, Taken};
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
        }
    }

    /// The dataset id and how its rows are read, or why the copy cannot be used.
    pub fn resolve(&self) -> Result<(String, HfKind), WorkloadError> {
        let path_text = self.path.to_string_lossy().into_owned();
        if !self.path.exists() {
            let id = self.name.clone().unwrap_or_else(|| path_text.clone());
            if looks_like_id(&path_text) {
                return Err(WorkloadError::InvalidConfig(download_advice(&path_text)));
            }
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
        match lookup(&id) {
            Known::Supported(kind) => Ok((id, kind)),
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

    /// The split read for `kind`.
    pub fn split_for(&self, kind: HfKind) -> String {
        kind.fixed_split()
            .map(str::to_owned)
            .or_else(|| self.split.clone())
            .unwrap_or_else(|| "train".to_owned())
    }
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

fn download_advice(id: &str) -> String {
    let dir = id.rsplit('/').next().unwrap_or(id);
    format!(
        "{id} is a Hugging Face dataset id and servebench does not download datasets; fetch \
         it first with `huggingface-cli download {id} --repo-type dataset --local-dir {dir}` \
         and run with --dataset-path {dir} --hf-name {id}"
    )
}

/// Builds requests from a local copy of a known Hugging Face dataset.
pub fn sample_hf(cfg: &HfConfig, tok: &Tokenizer) -> Result<Vec<RequestSpec>, WorkloadError> {
    let (id, kind) = cfg.resolve()?;
    let subset = cfg.subset.as_deref().filter(|_| kind.takes_subset());
    let files = files::data_files(&cfg.path, subset, &cfg.split_for(kind))?;
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
        if let Taken::Request(prompt, prompt_tokens, output) =
            take(kind, id, row, path, cfg.output_len, tok)?
        {
            let i = requests.len();
            requests.push(request(i, prompt, prompt_tokens, output, 0));
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
        let err = cfg.resolve().unwrap_err().to_string();
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
