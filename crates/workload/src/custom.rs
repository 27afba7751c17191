//! The custom dataset (`--dataset-name custom --dataset-path FILE.jsonl`): one JSON
//! object per line with a `"prompt"` string and an optional `"output_tokens"` count.
//!
//! As in vLLM the lines are shuffled with the seed, `num_prompts` are taken (all of
//! them when `num_prompts` is 0) and random ones are repeated when there are fewer.
//! Every request asks for `--custom-output-len` tokens (default 256); `-1` uses each
//! line's `output_tokens`. vLLM applies the model's chat template to the prompt here;
//! servebench leaves the prompt as written and lets a chat client wrap it.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use servebench_tokenizer::Tokenizer;

use crate::error::WorkloadError;
use crate::request::RequestSpec;
use crate::selection::{oversample, shuffle};

/// `--custom-output-len` value meaning "use each line's `output_tokens`".
pub const OUTPUT_LEN_FROM_LINE: i64 = -1;

/// Parameters of the custom dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct CustomConfig {
    /// The JSONL file (`--dataset-path`).
    pub path: PathBuf,
    /// Number of requests (`--num-prompts`); 0 takes every line.
    pub num_prompts: usize,
    /// `--custom-output-len`: tokens per request, or [`OUTPUT_LEN_FROM_LINE`].
    pub output_len: i64,
    /// Seed for shuffling and oversampling (`--seed`).
    pub seed: u64,
    /// Keep file order (`--disable-shuffle`).
    pub disable_shuffle: bool,
    /// Return fewer requests rather than repeating some (`--no-oversample`).
    pub no_oversample: bool,
}

impl CustomConfig {
    /// vLLM's defaults for a file: 1000 prompts, 256 output tokens, seed 0.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            num_prompts: 1000,
            output_len: 256,
            seed: 0,
            disable_shuffle: false,
            no_oversample: false,
        }
    }
}

#[derive(Deserialize)]
struct Line {
    prompt: String,
    #[serde(default)]
    output_tokens: Option<u64>,
}

/// Builds requests from a custom JSONL file.
pub fn sample_custom(
    cfg: &CustomConfig,
    tok: &Tokenizer,
) -> Result<Vec<RequestSpec>, WorkloadError> {
    let text = std::fs::read_to_string(&cfg.path).map_err(|e| WorkloadError::io(&cfg.path, e))?;
    sample_custom_str(&text, &cfg.path, cfg, tok)
}

/// [`sample_custom`] on the file's contents; `path` only names the source in errors.
pub fn sample_custom_str(
    text: &str,
    path: &Path,
    cfg: &CustomConfig,
    tok: &Tokenizer,
) -> Result<Vec<RequestSpec>, WorkloadError> {
    let fixed_output = match cfg.output_len {
        OUTPUT_LEN_FROM_LINE => None,
        n if n >= 1 => Some(n as u64),
        n => {
            return Err(WorkloadError::InvalidConfig(format!(
                "--custom-output-len must be at least 1, or -1 to use each line's \
                 output_tokens; got {n}"
            )))
        }
    };
    let mut items: Vec<(String, u64)> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line_no = index + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let line: Line = serde_json::from_str(raw).map_err(|e| {
            WorkloadError::malformed(
                path,
                line_no,
                format!("expected {{\"prompt\": \"...\", \"output_tokens\": N}}: {e}"),
            )
        })?;
        let output = match (fixed_output, line.output_tokens) {
            (Some(n), _) => n,
            (None, Some(n)) if n >= 1 => n,
            (None, Some(n)) => {
                return Err(WorkloadError::malformed(
                    path,
                    line_no,
                    format!("output_tokens must be at least 1, got {n}"),
                ))
            }
            (None, None) => {
                return Err(WorkloadError::malformed(
                    path,
                    line_no,
                    "no output_tokens, which --custom-output-len -1 requires",
                ))
            }
        };
        items.push((line.prompt, output));
    }
    if items.is_empty() {
        return Err(WorkloadError::Empty {
            path: path.to_path_buf(),
            reason: "no prompts in the file".to_owned(),
        });
    }
    if !cfg.disable_shuffle {
        shuffle(&mut items, cfg.seed);
    }
    let wanted = if cfg.num_prompts == 0 {
        items.len()
    } else {
        cfg.num_prompts
    };
    let mut requests: Vec<RequestSpec> = items
        .into_iter()
        .take(wanted)
        .enumerate()
        .map(|(i, (prompt, output))| RequestSpec {
            id: i as u64,
            prompt_tokens: tok.count(&prompt) as u64,
            prompt,
            max_tokens: Some(output),
            prefix_tokens: 0,
        })
        .collect();
    if !cfg.no_oversample {
        oversample(&mut requests, wanted, cfg.seed);
    }
    Ok(requests)
}
