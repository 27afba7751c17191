//! vLLM's BurstGPT dataset (`--dataset-name burstgpt`): the BurstGPT CSV's lengths, with
//! arrivals left to `--request-rate`.
//!
//! As vLLM's `BurstGPTDataset`: only rows whose `Model` is `GPT-4` and whose `Response
//! tokens` is positive are kept; `num_prompts` of them are sampled with the seed (with
//! replacement when more are asked for than there are rows); each prompt has the row's
//! `Request tokens` and asks for its `Response tokens`. vLLM decodes a run of consecutive
//! token ids as the prompt; here the prompt is random text of exactly that many tokens
//! under the run's tokenizer, so the length is exact where vLLM's re-encoding may drift.

use std::path::{Path, PathBuf};

use servebench_tokenizer::Tokenizer;

use super::{csv_rows, field, parse_count};
use crate::error::WorkloadError;
use crate::random::build_parallel;
use crate::request::RequestSpec;
use crate::rng::{stream, Purpose};
use crate::selection::{oversample_picks, shuffle};
use crate::synth::exact_text;

/// `--dataset-name burstgpt --dataset-path FILE`.
#[derive(Debug, Clone, PartialEq)]
pub struct BurstGptConfig {
    pub path: PathBuf,
    pub num_prompts: usize,
    pub seed: u64,
}

/// A kept row: prompt and output tokens.
fn kept_rows(text: &str, path: &Path) -> Result<Vec<(u64, u64)>, WorkloadError> {
    let names = ["Model", "Request tokens", "Response tokens"];
    let (cols, rows) = csv_rows(text, path, &names)?;
    let mut out = Vec::new();
    for (line, fields) in rows {
        if field(&fields, cols[0], names[0], path, line)? != "GPT-4" {
            continue;
        }
        let input = parse_count(
            field(&fields, cols[1], names[1], path, line)?,
            names[1],
            path,
            line,
        )?;
        let output = parse_count(
            field(&fields, cols[2], names[2], path, line)?,
            names[2],
            path,
            line,
        )?;
        if output > 0 {
            out.push((input, output));
        }
    }
    Ok(out)
}

/// The requests of the BurstGPT dataset under `tok`.
pub fn sample_burstgpt(
    cfg: &BurstGptConfig,
    tok: &Tokenizer,
) -> Result<Vec<RequestSpec>, WorkloadError> {
    let path = cfg.path.as_path();
    let text = crate::text_file::read_text(path)?;
    let mut rows = kept_rows(&text, path)?;
    if rows.is_empty() {
        return Err(WorkloadError::Empty {
            path: path.to_path_buf(),
            reason: "no BurstGPT row with Model GPT-4 and positive Response tokens (the rows \
                     vLLM's burstgpt dataset keeps)"
                .to_owned(),
        });
    }
    shuffle(&mut rows, cfg.seed);
    let have = rows.len();
    let mut picked: Vec<(u64, u64)> = rows.iter().take(cfg.num_prompts).copied().collect();
    picked.extend(
        oversample_picks(have, cfg.num_prompts, cfg.seed)
            .into_iter()
            .map(|i| rows[i]),
    );
    build_parallel(picked.len(), |i| {
        let (input, output) = picked[i];
        let len = usize::try_from(input.max(1))
            .map_err(|_| WorkloadError::InvalidConfig("BurstGPT prompt too long".to_owned()))?;
        let mut rng = stream(cfg.seed, Purpose::RequestContent, i as u64);
        let prompt = exact_text(tok, &mut rng, len)?;
        Ok(RequestSpec {
            images: Vec::new(),
            id: i as u64,
            prompt_tokens: prompt.len() as u64,
            prompt: prompt.text,
            max_tokens: Some(output),
            prefix_tokens: 0,
        })
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn keeps_gpt4_rows_with_answers_and_oversamples() {
        let text = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
                    5,ChatGPT,472,18,490,Conversation log\n\
                    45,GPT-4,30,0,30,Conversation log\n\
                    46,GPT-4,25,7,32,Conversation log\n\
                    47,GPT-4,12,3,15,API log\n";
        assert_eq!(
            kept_rows(text, Path::new("b.csv")).unwrap(),
            vec![(25, 7), (12, 3)]
        );
        let dir = std::env::temp_dir().join(format!("servebench-bgpt-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("b.csv");
        std::fs::write(&p, text).unwrap();
        let tok = Tokenizer::builtin();
        let cfg = BurstGptConfig {
            path: p.clone(),
            num_prompts: 5,
            seed: 1,
        };
        let r = sample_burstgpt(&cfg, &tok).unwrap();
        assert_eq!(r.len(), 5);
        for x in &r {
            assert!(matches!(
                (x.prompt_tokens, x.max_tokens),
                (25, Some(7)) | (12, Some(3))
            ));
            assert_eq!(tok.count(&x.prompt) as u64, x.prompt_tokens);
        }
        std::fs::write(
            &p,
            "Timestamp,Model,Request tokens,Response tokens\n1,ChatGPT,3,3\n",
        )
        .unwrap();
        let err = sample_burstgpt(&cfg, &tok).unwrap_err().to_string();
        assert!(err.contains("GPT-4"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
