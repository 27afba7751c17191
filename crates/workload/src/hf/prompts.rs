//! One row of a known dataset into a prompt and an output length, with vLLM's columns,
//! defaults and length filters.

use std::path::Path;

use serde_json::Value;
use servebench_tokenizer::Tokenizer;

use super::known::HfKind;
use super::rows::Row;
use crate::error::WorkloadError;

/// InstructCoder's request for code only, after the instruction (vLLM's wording).
const CODE_ONLY: &str = " Just output the code, do not include any explanation.";

/// What a row gives.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Taken {
    /// A request: prompt, its tokens, output tokens.
    Request(String, u64, u64),
    /// Filtered out, as vLLM does.
    Skipped,
}

/// vLLM's `is_valid_sequence` with its minimum of 4 tokens.
fn is_valid(prompt: u64, output: u64, max_prompt: u64, max_total: u64) -> bool {
    const MIN: u64 = 4;
    prompt >= MIN && output >= MIN && prompt <= max_prompt && prompt + output <= max_total
}

/// The request a row of a `kind` dataset named `id` makes; `output_len` is `--hf-output-len`.
pub(crate) fn take(
    kind: HfKind,
    id: &str,
    row: &Row,
    path: &Path,
    output_len: Option<u64>,
    tok: &Tokenizer,
) -> Result<Taken, WorkloadError> {
    let col = Columns {
        row,
        path,
        dataset: id,
        label: kind.label(),
    };
    let count = |s: &str| tok.count(s) as u64;
    Ok(match kind {
        HfKind::Conversation => {
            let turns = col.list("conversations")?;
            if turns.len() < 2 {
                return Ok(Taken::Skipped);
            }
            let prompt = col.turn_text(&turns[0], 0)?;
            let completion = col.turn_text(&turns[1], 1)?;
            let prompt_len = count(prompt);
            match output_len {
                Some(n) => Taken::Request(prompt.to_owned(), prompt_len, n),
                None => {
                    let n = count(completion);
                    if !is_valid(prompt_len, n, 1024, 2048) {
                        return Ok(Taken::Skipped);
                    }
                    Taken::Request(prompt.to_owned(), prompt_len, n)
                }
            }
        }
        HfKind::InstructCoder => {
            let prompt = format!(
                "{}\n\n{}{CODE_ONLY}",
                col.text("input")?,
                col.text("instruction")?
            );
            let n = count(&prompt);
            Taken::Request(prompt, n, output_len.unwrap_or(200))
        }
        HfKind::MtBench => {
            let turns = col.list("turns")?;
            let first = turns
                .first()
                .ok_or_else(|| col.bad("turns", "is an empty list"))?;
            let prompt = first
                .as_str()
                .ok_or_else(|| col.bad("turns", "does not start with a string"))?;
            Taken::Request(prompt.to_owned(), count(prompt), output_len.unwrap_or(256))
        }
        HfKind::Aimo => {
            let prompt = col.text("problem")?;
            let completion = col.text("solution")?;
            let prompt_len = count(prompt);
            match output_len {
                Some(n) => Taken::Request(prompt.to_owned(), prompt_len, n),
                None => {
                    let n = count(completion);
                    if !is_valid(prompt_len, n, 2048, 32000) {
                        return Ok(Taken::Skipped);
                    }
                    Taken::Request(prompt.to_owned(), prompt_len, n)
                }
            }
        }
    })
}

/// Column access that names the file, the row, the column and the dataset when it fails.
struct Columns<'a> {
    row: &'a Row,
    path: &'a Path,
    dataset: &'a str,
    label: &'static str,
}

impl<'a> Columns<'a> {
    fn get(&self, name: &str) -> Result<&'a Value, WorkloadError> {
        self.row.fields.get(name).ok_or_else(|| {
            let mut have: Vec<&str> = self.row.fields.keys().map(String::as_str).collect();
            have.truncate(12);
            WorkloadError::malformed(
                self.path,
                self.row.line,
                format!(
                    "no column `{name}`, which {} ({}) reads; the row has: {}",
                    self.dataset,
                    self.label,
                    if have.is_empty() {
                        "no columns".to_owned()
                    } else {
                        have.join(", ")
                    }
                ),
            )
        })
    }

    fn bad(&self, name: &str, what: &str) -> WorkloadError {
        WorkloadError::malformed(
            self.path,
            self.row.line,
            format!(
                "column `{name}` {what}, which {} ({}) cannot use",
                self.dataset, self.label
            ),
        )
    }

    fn text(&self, name: &str) -> Result<&'a str, WorkloadError> {
        self.get(name)?
            .as_str()
            .ok_or_else(|| self.bad(name, "is not a string"))
    }

    fn list(&self, name: &str) -> Result<&'a Vec<Value>, WorkloadError> {
        self.get(name)?
            .as_array()
            .ok_or_else(|| self.bad(name, "is not a list"))
    }

    /// The `value` of a conversation turn.
    fn turn_text(&self, turn: &'a Value, index: usize) -> Result<&'a str, WorkloadError> {
        turn.get("value").and_then(Value::as_str).ok_or_else(|| {
            self.bad(
                "conversations",
                &format!("has a turn {index} without a string `value`"),
            )
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(v: Value) -> Row {
        Row {
            fields: v.as_object().unwrap().clone(),
            file: 0,
            line: 7,
        }
    }

    fn take_one(kind: HfKind, v: Value, out: Option<u64>) -> Result<Taken, WorkloadError> {
        take(
            kind,
            "x/y",
            &row(v),
            Path::new("f.jsonl"),
            out,
            &Tokenizer::builtin(),
        )
    }

    #[test]
    fn columns_and_defaults_follow_vllm() {
        let tok = Tokenizer::builtin();
        let Taken::Request(p, n, out) = take_one(
            HfKind::InstructCoder,
            json!({"instruction": "Rename x.", "input": "x = 1"}),
            None,
        )
        .unwrap() else {
            panic!("taken")
        };
        assert_eq!(p, format!("x = 1\n\nRename x.{CODE_ONLY}"));
        assert_eq!((n, out), (tok.count(&p) as u64, 200));
        let Taken::Request(p, _, out) = take_one(
            HfKind::MtBench,
            json!({"turns": ["Hi there", "more"]}),
            None,
        )
        .unwrap() else {
            panic!("taken")
        };
        assert_eq!((p.as_str(), out), ("Hi there", 256));
        let long = "word ".repeat(40);
        let Taken::Request(_, _, out) = take_one(
            HfKind::Aimo,
            json!({"problem": "What is one plus one, exactly?", "solution": long}),
            None,
        )
        .unwrap() else {
            panic!("taken")
        };
        assert_eq!(out, tok.count(&long) as u64);
    }

    #[test]
    fn conversations_filter_like_sharegpt_unless_the_length_is_fixed() {
        let one_turn = json!({"conversations": [{"value": "only one"}]});
        assert_eq!(
            take_one(HfKind::Conversation, one_turn, Some(5)).unwrap(),
            Taken::Skipped
        );
        let short = json!({"conversations": [{"value": "hi"}, {"value": "ok"}]});
        assert_eq!(
            take_one(HfKind::Conversation, short.clone(), None).unwrap(),
            Taken::Skipped
        );
        assert!(matches!(
            take_one(HfKind::Conversation, short, Some(9)).unwrap(),
            Taken::Request(_, _, 9)
        ));
    }

    #[test]
    fn missing_columns_name_the_column_the_dataset_and_the_line() {
        let err = take_one(HfKind::MtBench, json!({"prompt": "x"}), None)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("f.jsonl:7: no column `turns`"), "{err}");
        assert!(
            err.contains("x/y (MT-Bench)") && err.contains("the row has: prompt"),
            "{err}"
        );
        let err = take_one(HfKind::Aimo, json!({"problem": 3, "solution": "s"}), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("column `problem` is not a string"), "{err}");
        let err = take_one(
            HfKind::Conversation,
            json!({"conversations": [{"from": "human"}, {"value": "b"}]}),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("turn 0 without a string `value`"), "{err}");
    }
}
