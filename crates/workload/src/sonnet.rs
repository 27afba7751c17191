//! The sonnet dataset (`--dataset-name sonnet --dataset-path FILE.txt`), with vLLM's rules.
//!
//! Every prompt is one fixed instruction line, the first poem lines of the file (the prefix,
//! the same in every prompt) and poem lines drawn at random with replacement. How many lines
//! of each follows from the average token count of a line:
//! `round((input_len − base) / avg)` lines in all and `max(round((prefix_len − base) / avg), 0)`
//! of them from the prefix, where `base` is the instruction's token count and `round` is
//! Python's (halves to even). A drawn prompt longer than `input_len` tokens is drawn again.
//! Every request asks for `output_len` tokens.
//!
//! vLLM counts `base` and the prompt with the model's chat template applied and, on the
//! completions API, sends the templated text. servebench has no template engine: it counts
//! and sends the plain prompt; a chat endpoint wraps it in one user message and applies the
//! server's own template, as vLLM's `openai-chat` backend does.
//!
//! Lines keep their line ends, as Python's `readlines` does. Unlike vLLM, which would retry
//! forever, a workload whose prompts can never fit `input_len` is refused.

use std::path::{Path, PathBuf};

use rand::Rng;
use servebench_tokenizer::Tokenizer;

use crate::error::WorkloadError;
use crate::request::RequestSpec;
use crate::rng::{stream, Purpose};
use crate::spec::request;

/// The instruction that opens every sonnet prompt (vLLM's).
pub const BASE_PROMPT: &str = "Pick as many lines as you can from these poem lines:\n";

/// Consecutive over-long draws after which the lengths are declared impossible.
const MAX_REDRAWS: usize = 200;

/// Parameters of the sonnet dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct SonnetConfig {
    /// The text file of poem lines (`--dataset-path`).
    pub path: PathBuf,
    /// Number of requests (`--num-prompts`).
    pub num_prompts: usize,
    /// Upper bound of a prompt's tokens (`--sonnet-input-len`).
    pub input_len: u64,
    /// Output tokens of every request (`--sonnet-output-len`).
    pub output_len: u64,
    /// Tokens of the shared opening, instruction included (`--sonnet-prefix-len`).
    pub prefix_len: u64,
    /// Seed for the drawn lines (`--seed`).
    pub seed: u64,
}

impl SonnetConfig {
    /// vLLM's defaults for a file: 1000 prompts of at most 550 tokens with a 200-token
    /// prefix, 150 output tokens, seed 0.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            num_prompts: 1000,
            input_len: 550,
            output_len: 150,
            prefix_len: 200,
            seed: 0,
        }
    }
}

/// Builds requests from a sonnet file.
pub fn sample_sonnet(
    cfg: &SonnetConfig,
    tok: &Tokenizer,
) -> Result<Vec<RequestSpec>, WorkloadError> {
    let text = crate::text_file::read_text(&cfg.path)?;
    sample_sonnet_str(&text, &cfg.path, cfg, tok)
}

/// [`sample_sonnet`] on the file's contents; `path` only names the source in errors.
pub fn sample_sonnet_str(
    text: &str,
    path: &Path,
    cfg: &SonnetConfig,
    tok: &Tokenizer,
) -> Result<Vec<RequestSpec>, WorkloadError> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    if lines.is_empty() {
        return Err(WorkloadError::Empty {
            path: path.to_path_buf(),
            reason: "no poem lines in the file".to_owned(),
        });
    }
    let total: usize = lines.iter().map(|l| tok.count(l)).sum();
    let avg_len = total as f64 / lines.len() as f64;
    if avg_len <= 0.0 {
        return Err(WorkloadError::Empty {
            path: path.to_path_buf(),
            reason: "the poem lines have no tokens".to_owned(),
        });
    }
    let base_offset = tok.count(BASE_PROMPT) as u64;
    if cfg.input_len <= base_offset {
        return Err(WorkloadError::InvalidConfig(format!(
            "--sonnet-input-len ({}) must be higher than the base prompt length ({base_offset})",
            cfg.input_len
        )));
    }
    let num_input_lines = python_round((cfg.input_len - base_offset) as f64 / avg_len);
    let num_prefix_lines =
        python_round((cfg.prefix_len as f64 - base_offset as f64) / avg_len).max(0.0);
    let prefix_lines = &lines[..(num_prefix_lines as usize).min(lines.len())];
    let drawn = (num_input_lines - num_prefix_lines).max(0.0) as usize;

    let mut prefix_text = String::from(BASE_PROMPT);
    prefix_lines.iter().for_each(|l| prefix_text.push_str(l));
    let prefix_ids = tok.encode(&prefix_text);
    if prefix_ids.len() as u64 > cfg.input_len {
        return Err(WorkloadError::InvalidConfig(format!(
            "the shared opening ({} poem lines, {} tokens) is longer than --sonnet-input-len \
             {}: lower --sonnet-prefix-len or raise --sonnet-input-len",
            prefix_lines.len(),
            prefix_ids.len(),
            cfg.input_len
        )));
    }

    let mut rng = stream(cfg.seed, Purpose::SonnetLines, 0);
    let mut requests = Vec::with_capacity(cfg.num_prompts);
    let mut redraws = 0;
    while requests.len() < cfg.num_prompts {
        let mut prompt = prefix_text.clone();
        for _ in 0..drawn {
            prompt.push_str(lines[rng.random_range(0..lines.len())]);
        }
        let ids = tok.encode(&prompt);
        if ids.len() as u64 > cfg.input_len {
            redraws += 1;
            if redraws >= MAX_REDRAWS {
                return Err(WorkloadError::Empty {
                    path: path.to_path_buf(),
                    reason: format!(
                        "{MAX_REDRAWS} prompts in a row had more than --sonnet-input-len {} \
                         tokens ({} lines of {avg_len:.1} tokens on average); raise it or \
                         lower --sonnet-prefix-len",
                        cfg.input_len,
                        prefix_lines.len() + drawn
                    ),
                });
            }
            continue;
        }
        redraws = 0;
        // A line end can merge with what follows it, so the shared part is what the
        // prompt's own tokens have in common with the prefix's.
        let shared = ids
            .iter()
            .zip(&prefix_ids)
            .take_while(|(a, b)| a == b)
            .count();
        let id = requests.len();
        requests.push(request(
            id,
            prompt,
            ids.len() as u64,
            cfg.output_len,
            shared as u64,
        ));
    }
    Ok(requests)
}

/// Python's `round` of a float: to the nearest integer, halves to even.
fn python_round(x: f64) -> f64 {
    x.round_ties_even()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const POEM: &str = "Shall I compare thee to a summer's day?\n\
        Thou art more lovely and more temperate:\n\
        Rough winds do shake the darling buds of May,\n\
        And summer's lease hath all too short a date;\n\
        Sometime too hot the eye of heaven shines,\n\
        And often is his gold complexion dimm'd;\n";

    fn cfg(input_len: u64, prefix_len: u64) -> SonnetConfig {
        SonnetConfig {
            num_prompts: 20,
            input_len,
            prefix_len,
            output_len: 7,
            ..SonnetConfig::new("poem.txt")
        }
    }

    #[test]
    fn rounding_is_pythons() {
        assert_eq!(python_round(2.5), 2.0);
        assert_eq!(python_round(3.5), 4.0);
        assert_eq!(python_round(-0.5), 0.0);
        assert_eq!(python_round(1.4), 1.0);
    }

    #[test]
    fn prompts_share_the_prefix_and_fit_the_input_len() {
        let tok = Tokenizer::builtin();
        let base = tok.count(BASE_PROMPT) as u64;
        let reqs = sample_sonnet_str(
            POEM,
            Path::new("poem.txt"),
            &cfg(base + 90, base + 20),
            &tok,
        )
        .unwrap();
        assert_eq!(reqs.len(), 20);
        let first_two: String = POEM.split_inclusive('\n').take(2).collect();
        for (i, r) in reqs.iter().enumerate() {
            assert_eq!(r.id, i as u64);
            assert!(r.prompt.starts_with(&format!("{BASE_PROMPT}{first_two}")));
            assert!(r.prompt_tokens <= base + 90);
            assert_eq!(r.prompt_tokens, tok.count(&r.prompt) as u64);
            assert_eq!(r.max_tokens, Some(7));
            assert!(r.prefix_tokens >= base + 10, "{}", r.prefix_tokens);
        }
        let again = sample_sonnet_str(
            POEM,
            Path::new("poem.txt"),
            &cfg(base + 90, base + 20),
            &tok,
        )
        .unwrap();
        assert_eq!(reqs, again);
    }

    #[test]
    fn a_prefix_shorter_than_the_instruction_takes_no_lines() {
        let tok = Tokenizer::builtin();
        let base = tok.count(BASE_PROMPT) as u64;
        let reqs = sample_sonnet_str(POEM, Path::new("p"), &cfg(base + 40, 0), &tok).unwrap();
        assert!(reqs.iter().all(|r| r.prefix_tokens <= base + 1));
    }

    #[test]
    fn impossible_lengths_are_refused_not_retried_forever() {
        let tok = Tokenizer::builtin();
        let base = tok.count(BASE_PROMPT) as u64;
        let err = sample_sonnet_str(POEM, Path::new("p"), &cfg(base, 0), &tok).unwrap_err();
        assert!(err.to_string().contains("base prompt length"), "{err}");
        // The prefix alone is longer than the bound.
        let err =
            sample_sonnet_str(POEM, Path::new("p"), &cfg(base + 3, base + 60), &tok).unwrap_err();
        assert!(err.to_string().contains("is longer than"), "{err}");
        // Two lines of about 11 tokens never fit in 16.
        let err = sample_sonnet_str(POEM, Path::new("p"), &cfg(base + 16, 0), &tok).unwrap_err();
        assert!(err.to_string().contains("in a row"), "{err}");
        let err = sample_sonnet_str("", Path::new("p"), &cfg(100, 0), &tok).unwrap_err();
        assert!(err.to_string().contains("no poem lines"), "{err}");
    }
}
