//! Spec-Bench (`--dataset-name spec_bench --dataset-path question.jsonl`): the first turn of
//! each question as the prompt, `--spec-bench-output-len` output tokens, optionally one
//! `--spec-bench-category` only. As vLLM's (a custom dataset underneath): shuffled with the
//! seed unless `--disable-shuffle`, repeated up to `--num-prompts` unless `--no-oversample`,
//! and every question when `--num-prompts` is 0 or negative (vLLM's `-1`). vLLM applies the
//! model's chat template to the prompt; servebench sends it as written (a chat endpoint
//! applies the server's).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use servebench_tokenizer::Tokenizer;

use crate::error::WorkloadError;
use crate::request::RequestSpec;
use crate::selection::{oversample, shuffle};
use crate::spec::request;

/// Parameters of the spec_bench dataset.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecBenchConfig {
    pub path: PathBuf,
    /// Requests to send; 0 takes every question once.
    pub num_prompts: usize,
    pub output_len: u64,
    pub category: Option<String>,
    pub seed: u64,
    pub disable_shuffle: bool,
    pub no_oversample: bool,
}

#[derive(Deserialize)]
struct Question {
    #[serde(default)]
    category: Option<String>,
    turns: Vec<String>,
}

/// Builds the requests of a Spec-Bench question file.
pub fn sample_spec_bench(
    cfg: &SpecBenchConfig,
    tok: &Tokenizer,
) -> Result<Vec<RequestSpec>, WorkloadError> {
    let text = crate::text_file::read_text(&cfg.path)?;
    sample_spec_bench_str(&text, &cfg.path, cfg, tok)
}

/// [`sample_spec_bench`] on the file's contents; `path` names the source in errors.
pub fn sample_spec_bench_str(
    text: &str,
    path: &Path,
    cfg: &SpecBenchConfig,
    tok: &Tokenizer,
) -> Result<Vec<RequestSpec>, WorkloadError> {
    let mut prompts = Vec::new();
    let mut categories = std::collections::BTreeSet::new();
    for (i, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let q: Question = serde_json::from_str(raw).map_err(|e| {
            WorkloadError::malformed(
                path,
                i + 1,
                format!(
                    "expected a Spec-Bench question {{\"category\": ..., \"turns\": [...]}}: {e}"
                ),
            )
        })?;
        if let Some(c) = &q.category {
            categories.insert(c.clone());
        }
        if cfg.category.is_some() && q.category != cfg.category {
            continue;
        }
        let Some(first) = q.turns.into_iter().next() else {
            return Err(WorkloadError::malformed(path, i + 1, "`turns` is empty"));
        };
        prompts.push(first);
    }
    if prompts.is_empty() {
        return Err(WorkloadError::Empty {
            path: path.to_path_buf(),
            reason: match &cfg.category {
                Some(c) => format!(
                    "no question of category {c}; the file has {}",
                    categories.into_iter().collect::<Vec<_>>().join(", ")
                ),
                None => "no questions in the file".to_owned(),
            },
        });
    }
    if !cfg.disable_shuffle {
        shuffle(&mut prompts, cfg.seed);
    }
    let wanted = if cfg.num_prompts == 0 {
        prompts.len()
    } else {
        cfg.num_prompts
    };
    let mut requests: Vec<RequestSpec> = prompts
        .into_iter()
        .take(wanted)
        .enumerate()
        .map(|(i, p)| {
            let n = tok.count(&p) as u64;
            request(i, p, n, cfg.output_len, 0)
        })
        .collect();
    if !cfg.no_oversample {
        oversample(&mut requests, wanted, cfg.seed);
    }
    Ok(requests)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const FILE: &str = r#"{"question_id": 81, "category": "writing", "turns": ["Write a poem.", "Shorter."]}
{"question_id": 82, "category": "summarization", "turns": ["Summarise this text in one line."]}
{"question_id": 83, "category": "summarization", "turns": ["Summarise the meeting notes."]}
"#;

    fn cfg(category: Option<&str>, n: usize) -> SpecBenchConfig {
        SpecBenchConfig {
            path: "question.jsonl".into(),
            num_prompts: n,
            output_len: 256,
            category: category.map(str::to_owned),
            seed: 0,
            disable_shuffle: true,
            no_oversample: false,
        }
    }

    #[test]
    fn first_turns_by_category_with_the_output_length() {
        let tok = Tokenizer::builtin();
        let all = sample_spec_bench_str(FILE, Path::new("q"), &cfg(None, 0), &tok).unwrap();
        let prompts: Vec<&str> = all.iter().map(|r| r.prompt.as_str()).collect();
        assert_eq!(
            prompts,
            [
                "Write a poem.",
                "Summarise this text in one line.",
                "Summarise the meeting notes."
            ]
        );
        assert!(all.iter().all(|r| r.max_tokens == Some(256)));
        let some =
            sample_spec_bench_str(FILE, Path::new("q"), &cfg(Some("summarization"), 5), &tok)
                .unwrap();
        assert_eq!(some.len(), 5, "oversampled to --num-prompts");
        assert!(some.iter().all(|r| r.prompt.starts_with("Summarise")));
        let err = sample_spec_bench_str(FILE, Path::new("q"), &cfg(Some("math"), 1), &tok)
            .unwrap_err()
            .to_string();
        assert!(err.contains("summarization, writing"), "{err}");
    }
}
