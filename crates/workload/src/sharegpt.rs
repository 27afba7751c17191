//! The ShareGPT dataset (`--dataset-name sharegpt --dataset-path FILE`), with vLLM's
//! selection rules.
//!
//! The file is a JSON list of `{"conversations": [{"from": .., "value": ..}, ...]}`.
//! As in vLLM, entries with fewer than two turns are dropped, the rest are shuffled
//! with the seed, the first turn is the prompt and the second turn's token count is
//! the output length (unless `output_len` overrides it). Pairs are kept only if the
//! prompt has 4–1024 tokens, the output at least 4 (not checked with an override),
//! and both together at most 2048. When fewer pairs survive than requested, random
//! ones are repeated.
//!
//! Token counts use the run's tokenizer without special tokens; vLLM counts with
//! `tokenizer(prompt)`, which adds BOS for some models, so a borderline pair can be
//! kept by one and dropped by the other.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use servebench_tokenizer::Tokenizer;

use crate::error::WorkloadError;
use crate::images::ImagePaths;
use crate::request::RequestSpec;
use crate::selection::{oversample, shuffle};

/// vLLM's `is_valid_sequence` bounds.
const MIN_LEN: u64 = 4;
const MAX_PROMPT_LEN: u64 = 1024;
const MAX_TOTAL_LEN: u64 = 2048;

/// Parameters of the ShareGPT dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct ShareGptConfig {
    /// The JSON file (`--dataset-path`).
    pub path: PathBuf,
    /// Number of requests (`--num-prompts`).
    pub num_prompts: usize,
    /// Fixed output length for every request (`--sharegpt-output-len`).
    pub output_len: Option<u64>,
    /// Seed for shuffling and oversampling (`--seed`).
    pub seed: u64,
    /// Keep file order (`--disable-shuffle`).
    pub disable_shuffle: bool,
    /// Return fewer requests rather than repeating some (`--no-oversample`).
    pub no_oversample: bool,
}

impl ShareGptConfig {
    /// vLLM's defaults for a file: 1000 prompts, seed 0, shuffled, oversampled.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            num_prompts: 1000,
            output_len: None,
            seed: 0,
            disable_shuffle: false,
            no_oversample: false,
        }
    }
}

#[derive(Deserialize)]
struct Entry {
    #[serde(default)]
    conversations: Option<Vec<Turn>>,
    /// ShareGPT-4V: the image the first turn is about, relative to the dataset file.
    #[serde(default)]
    image: Option<ImagePaths>,
}

/// An entry's position in the file and the images it names.
type EntryImages = (usize, ImagePaths);

#[derive(Deserialize)]
struct Turn {
    value: String,
}

/// Builds requests from a ShareGPT file.
pub fn sample_sharegpt(
    cfg: &ShareGptConfig,
    tok: &Tokenizer,
) -> Result<Vec<RequestSpec>, WorkloadError> {
    let text = crate::text_file::read_text(&cfg.path)?;
    sample_sharegpt_str(&text, &cfg.path, cfg, tok)
}

/// [`sample_sharegpt`] on the file's contents; `path` only names the source in errors.
pub fn sample_sharegpt_str(
    text: &str,
    path: &Path,
    cfg: &ShareGptConfig,
    tok: &Tokenizer,
) -> Result<Vec<RequestSpec>, WorkloadError> {
    let entries: Vec<Entry> = serde_json::from_str(text).map_err(|e| {
        WorkloadError::malformed(
            path,
            e.line(),
            format!("not a ShareGPT JSON list of conversations: {e}"),
        )
    })?;
    let mut pairs: Vec<(String, String, Option<EntryImages>)> = entries
        .into_iter()
        .enumerate()
        .filter_map(|(i, e)| Some((e.conversations?, e.image.map(|im| (i, im)))))
        .filter(|(c, _)| c.len() >= 2)
        .map(|(c, image)| {
            let mut turns = c.into_iter();
            let prompt = turns.next().map(|t| t.value).unwrap_or_default();
            let completion = turns.next().map(|t| t.value).unwrap_or_default();
            (prompt, completion, image)
        })
        .collect();
    if !cfg.disable_shuffle {
        shuffle(&mut pairs, cfg.seed);
    }
    let mut requests = Vec::new();
    for (prompt, completion, image) in pairs {
        if requests.len() >= cfg.num_prompts {
            break;
        }
        let prompt_tokens = tok.count(&prompt) as u64;
        let output = match cfg.output_len {
            Some(fixed) => fixed,
            None => tok.count(&completion) as u64,
        };
        let too_short = prompt_tokens < MIN_LEN || (cfg.output_len.is_none() && output < MIN_LEN);
        let too_long = prompt_tokens > MAX_PROMPT_LEN || prompt_tokens + output > MAX_TOTAL_LEN;
        if too_short || too_long {
            continue;
        }
        let images = match image {
            Some((entry, paths)) => paths.load(path).map_err(|e| WorkloadError::Format {
                path: path.to_path_buf(),
                message: format!("entry {entry} (from 0): {e}"),
            })?,
            None => Vec::new(),
        };
        requests.push(RequestSpec {
            images,
            id: requests.len() as u64,
            prompt,
            prompt_tokens,
            max_tokens: Some(output),
            prefix_tokens: 0,
        });
    }
    if requests.is_empty() && cfg.num_prompts > 0 {
        return Err(WorkloadError::Empty {
            path: path.to_path_buf(),
            reason: "no conversation passes the ShareGPT filters (two turns, prompt 4-1024 \
                     tokens, output at least 4, total at most 2048)"
                .to_owned(),
        });
    }
    if !cfg.no_oversample {
        oversample(&mut requests, cfg.num_prompts, cfg.seed);
    }
    Ok(requests)
}
