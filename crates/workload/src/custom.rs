//! The custom dataset (`--dataset-name custom --dataset-path FILE.jsonl`): one JSON
//! object per line with a `"prompt"` string, an optional `"output_tokens"` count and an
//! optional `"expected"` answer check: `"a substring the answer must contain"` or
//! `{"regex": "a pattern that must match somewhere in the answer"}`.
//!
//! As in vLLM the lines are shuffled with the seed, `num_prompts` are taken (all of
//! them when `num_prompts` is 0) and random ones are repeated when there are fewer.
//! Every request asks for `--custom-output-len` tokens (default 256); `-1` uses each
//! line's `output_tokens`. vLLM applies the model's chat template to the prompt here;
//! servebench leaves the prompt as written and lets a chat client wrap it.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use servebench_answer::Expected;
use servebench_tokenizer::Tokenizer;

use crate::error::WorkloadError;
use crate::images::{ImageInput, ImagePaths};
use crate::request::RequestSpec;
use crate::selection::{oversample, oversample_picks, shuffle};

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
    #[serde(default)]
    expected: Option<serde_json::Value>,
    /// Image files sent with the prompt, relative to the dataset file (`image_files` is
    /// vLLM's custom_image name for the list).
    #[serde(default, alias = "image_files")]
    image: Option<ImagePaths>,
}

/// The requests of a custom dataset and, position by position, each one's `expected`
/// answer check (`None` where its line has none).
#[derive(Debug, Clone)]
pub struct CustomRequests {
    pub requests: Vec<RequestSpec>,
    pub expected: Vec<Option<Expected>>,
}

impl CustomRequests {
    /// Does any request carry an `expected` check?
    pub fn has_expected(&self) -> bool {
        self.expected.iter().any(Option::is_some)
    }
}

/// Builds requests from a custom JSONL file.
pub fn sample_custom(
    cfg: &CustomConfig,
    tok: &Tokenizer,
) -> Result<Vec<RequestSpec>, WorkloadError> {
    Ok(sample_custom_checked(cfg, tok)?.requests)
}

/// [`sample_custom`] with each request's `expected` answer check.
pub fn sample_custom_checked(
    cfg: &CustomConfig,
    tok: &Tokenizer,
) -> Result<CustomRequests, WorkloadError> {
    let text = crate::text_file::read_text(&cfg.path)?;
    sample_custom_str_checked(&text, &cfg.path, cfg, tok)
}

/// [`sample_custom`] on the file's contents; `path` only names the source in errors.
pub fn sample_custom_str(
    text: &str,
    path: &Path,
    cfg: &CustomConfig,
    tok: &Tokenizer,
) -> Result<Vec<RequestSpec>, WorkloadError> {
    Ok(sample_custom_str_checked(text, path, cfg, tok)?.requests)
}

/// [`sample_custom_checked`] on the file's contents; `path` only names the source in errors.
pub fn sample_custom_str_checked(
    text: &str,
    path: &Path,
    cfg: &CustomConfig,
    tok: &Tokenizer,
) -> Result<CustomRequests, WorkloadError> {
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
    let mut items: Vec<(String, u64, Option<Expected>, Vec<ImageInput>)> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line_no = index + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let line: Line = serde_json::from_str(raw).map_err(|e| {
            WorkloadError::malformed(
                path,
                line_no,
                format!(
                    "expected {{\"prompt\": \"...\", \"output_tokens\": N, \"expected\": ...}}: {e}"
                ),
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
        let expected = match &line.expected {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => Some(
                Expected::from_json(v).map_err(|e| WorkloadError::malformed(path, line_no, e))?,
            ),
        };
        let images = match &line.image {
            Some(paths) => paths
                .load(path)
                .map_err(|e| WorkloadError::malformed(path, line_no, e))?,
            None => Vec::new(),
        };
        items.push((line.prompt, output, expected, images));
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
    let (mut requests, mut expected): (Vec<RequestSpec>, Vec<Option<Expected>>) = items
        .into_iter()
        .take(wanted)
        .enumerate()
        .map(|(i, (prompt, output, expected, images))| {
            let spec = RequestSpec {
                images,
                id: i as u64,
                prompt_tokens: tok.count(&prompt) as u64,
                prompt,
                max_tokens: Some(output),
                prefix_tokens: 0,
            };
            (spec, expected)
        })
        .unzip();
    if !cfg.no_oversample {
        // A repeated prompt keeps its own check: both follow the same picks.
        let picks = oversample_picks(requests.len(), wanted, cfg.seed);
        oversample(&mut requests, wanted, cfg.seed);
        for p in picks {
            expected.push(expected[p].clone());
        }
    }
    Ok(CustomRequests { requests, expected })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn cfg(num_prompts: usize) -> CustomConfig {
        let mut c = CustomConfig::new("data.jsonl");
        c.num_prompts = num_prompts;
        c.disable_shuffle = true;
        c
    }

    fn sample(text: &str, c: &CustomConfig) -> Result<CustomRequests, WorkloadError> {
        sample_custom_str_checked(text, Path::new("data.jsonl"), c, &Tokenizer::builtin())
    }

    #[test]
    fn expected_is_a_substring_or_a_regex_per_line() {
        let text = concat!(
            r#"{"prompt": "Capital of France?", "expected": "Paris"}"#,
            "\n",
            r#"{"prompt": "Two plus two?", "expected": {"regex": "\\b4\\b"}}"#,
            "\n",
            r#"{"prompt": "Say anything.", "expected": null}"#,
            "\n",
            r#"{"prompt": "Say more."}"#,
            "\n",
        );
        let got = sample(text, &cfg(0)).unwrap();
        assert!(got.has_expected());
        assert_eq!(got.requests.len(), 4);
        assert_eq!(got.expected.len(), 4);
        assert_eq!(got.expected[0], Some(Expected::Substring("Paris".into())));
        assert!(matches!(&got.expected[1], Some(Expected::Regex(r)) if r.as_str() == r"\b4\b"));
        assert_eq!(got.expected[2], None);
        assert_eq!(got.expected[3], None);
    }

    #[test]
    fn a_bad_expected_names_the_file_and_line() {
        let text = "{\"prompt\": \"a\"}\n{\"prompt\": \"b\", \"expected\": {\"regex\": \"(\"}}\n";
        let e = sample(text, &cfg(0)).unwrap_err().to_string();
        assert!(e.starts_with("data.jsonl:2:"), "{e}");
        assert!(e.contains("regular expression"), "{e}");
        let text = "{\"prompt\": \"b\", \"expected\": 7}\n";
        let e = sample(text, &cfg(0)).unwrap_err().to_string();
        assert!(
            e.starts_with("data.jsonl:1:") && e.contains("{\"regex\""),
            "{e}"
        );
    }

    #[test]
    fn shuffled_and_oversampled_requests_keep_their_own_check() {
        let text: String = (0..5)
            .map(|i| format!("{{\"prompt\": \"prompt {i}\", \"expected\": \"answer {i}\"}}\n"))
            .collect();
        let mut c = cfg(23);
        c.disable_shuffle = false;
        c.seed = 7;
        let got = sample(&text, &c).unwrap();
        assert_eq!(got.requests.len(), 23);
        assert_eq!(got.expected.len(), 23);
        for (r, e) in got.requests.iter().zip(&got.expected) {
            let n = r.prompt.trim_start_matches("prompt ");
            assert_eq!(
                e,
                &Some(Expected::Substring(format!("answer {n}"))),
                "{r:?}"
            );
        }
        // Without `expected` anywhere, the plain reader's requests are the same.
        let plain: String = (0..5)
            .map(|i| format!("{{\"prompt\": \"prompt {i}\"}}\n"))
            .collect();
        let a = sample_custom_str(&plain, Path::new("d"), &c, &Tokenizer::builtin()).unwrap();
        assert_eq!(a, got.requests);
    }
}
