//! One row of a known dataset into a prompt and an output length, with vLLM's columns,
//! defaults and length filters.

use std::path::Path;

use serde_json::Value;
use servebench_tokenizer::Tokenizer;

use super::known::HfKind;
use super::rows::Row;
use crate::error::WorkloadError;
use crate::images::ImageInput;

/// InstructCoder's request for code only, after the instruction (vLLM's wording).
const CODE_ONLY: &str = " Just output the code, do not include any explanation.";

/// What a row gives.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Taken {
    /// A request: prompt, its text tokens, output tokens, and the images sent with it.
    Request(String, u64, u64, Vec<ImageInput>),
    /// Filtered out, as vLLM does.
    Skipped,
}

/// The Blazedit edit prompt (vLLM's, after ise-uiuc/blazedit's create_refined_dataset.py).
fn blazedit_prompt(code: &str, change_request: &str) -> String {
    format!(
        "Given a code file, please apply the change requests and generate the new file.\n\n\
         Original file:\n```python\n{code}\n```\n\n\
         Change request:\n{change_request}\n\n\
         Please generate the new code file in the \"New file\" section below."
    )
}

/// Row filters that take a value from the command line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Filters {
    /// Blazedit's `--blazedit-min-distance` and `--blazedit-max-distance`.
    pub blazedit_distance: (f64, f64),
}

impl Default for Filters {
    fn default() -> Self {
        Filters {
            blazedit_distance: (0.0, 1.0),
        }
    }
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
    filters: Filters,
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
        HfKind::Conversation | HfKind::MultiModalConversation => {
            let turns = col.list("conversations")?;
            if turns.len() < 2 {
                return Ok(Taken::Skipped);
            }
            let prompt = col.turn_text(&turns[0], 0)?;
            let completion = col.turn_text(&turns[1], 1)?;
            let prompt_len = count(prompt);
            let n = match output_len {
                Some(n) => n,
                None => {
                    let n = count(completion);
                    if !is_valid(prompt_len, n, 1024, 2048) {
                        return Ok(Taken::Skipped);
                    }
                    n
                }
            };
            let images = match (kind, row.fields.get("image")) {
                (HfKind::MultiModalConversation, Some(v)) if !v.is_null() => {
                    vec![col.image("image", v)?]
                }
                _ => Vec::new(),
            };
            Taken::Request(prompt.to_owned(), prompt_len, n, images)
        }
        HfKind::VisionArena => {
            // VisionArena-Chat keeps the chat in `conversation`, the bench copy in `turns`:
            // a list of turns, each a list of messages.
            let column = if row.fields.contains_key("conversation") {
                "conversation"
            } else {
                "turns"
            };
            let prompt = col
                .list(column)?
                .first()
                .and_then(Value::as_array)
                .and_then(|t| t.first())
                .and_then(|m| m.get("content"))
                .and_then(Value::as_str)
                .ok_or_else(|| col.bad(column, "has no first message with a string `content`"))?;
            let images = col.list("images")?;
            let first = images
                .first()
                .ok_or_else(|| col.bad("images", "is an empty list"))?;
            let image = col.image("images", first)?;
            Taken::Request(
                prompt.to_owned(),
                count(prompt),
                output_len.unwrap_or(128),
                vec![image],
            )
        }
        HfKind::HumanEval | HfKind::Gsm8k => {
            let column = if kind == HfKind::HumanEval {
                "prompt"
            } else {
                "question"
            };
            let prompt = col.text(column)?;
            Taken::Request(
                prompt.to_owned(),
                count(prompt),
                output_len.unwrap_or(256),
                Vec::new(),
            )
        }
        HfKind::Blazedit => {
            let distance = col
                .get("norm_distance")?
                .as_f64()
                .ok_or_else(|| col.bad("norm_distance", "is not a number"))?;
            let (min, max) = filters.blazedit_distance;
            if distance < min || distance > max {
                return Ok(Taken::Skipped);
            }
            let prompt = blazedit_prompt(col.text("code")?, col.text("change_request")?);
            let n = count(&prompt);
            Taken::Request(prompt, n, output_len.unwrap_or(4000), Vec::new())
        }
        HfKind::InstructCoder => {
            let prompt = format!(
                "{}\n\n{}{CODE_ONLY}",
                col.text("input")?,
                col.text("instruction")?
            );
            let n = count(&prompt);
            Taken::Request(prompt, n, output_len.unwrap_or(200), Vec::new())
        }
        HfKind::MtBench => {
            let turns = col.list("turns")?;
            let first = turns
                .first()
                .ok_or_else(|| col.bad("turns", "is an empty list"))?;
            let prompt = first
                .as_str()
                .ok_or_else(|| col.bad("turns", "does not start with a string"))?;
            Taken::Request(
                prompt.to_owned(),
                count(prompt),
                output_len.unwrap_or(256),
                Vec::new(),
            )
        }
        HfKind::Aimo => {
            let prompt = col.text("problem")?;
            let completion = col.text("solution")?;
            let prompt_len = count(prompt);
            match output_len {
                Some(n) => Taken::Request(prompt.to_owned(), prompt_len, n, Vec::new()),
                None => {
                    let n = count(completion);
                    if !is_valid(prompt_len, n, 2048, 32000) {
                        return Ok(Taken::Skipped);
                    }
                    Taken::Request(prompt.to_owned(), prompt_len, n, Vec::new())
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

    /// An image column's value: Hugging Face's `Image` feature as Parquet stores it (`bytes`,
    /// base64 in JSON; or a `path`), or a path string. A path is read relative to the data
    /// file's folder.
    fn image(&self, name: &str, v: &Value) -> Result<ImageInput, WorkloadError> {
        let bytes = v
            .get("bytes")
            .and_then(Value::as_str)
            .filter(|b| !b.is_empty());
        let path = v
            .get("path")
            .and_then(Value::as_str)
            .or_else(|| v.as_str())
            .filter(|p| !p.is_empty());
        let found = match (bytes, path) {
            (Some(b64), _) => ImageInput::from_base64(b64),
            (None, Some(p)) => {
                let base = self.path.parent().unwrap_or(Path::new("."));
                ImageInput::from_file(&base.join(p))
            }
            (None, None) => Err("neither image bytes nor a path".to_owned()),
        };
        found.map_err(|e| {
            self.bad(
                name,
                &format!("holds an image servebench cannot read ({e})"),
            )
        })
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
            Filters::default(),
            &Tokenizer::builtin(),
        )
    }

    #[test]
    fn columns_and_defaults_follow_vllm() {
        let tok = Tokenizer::builtin();
        let Taken::Request(p, n, out, _) = take_one(
            HfKind::InstructCoder,
            json!({"instruction": "Rename x.", "input": "x = 1"}),
            None,
        )
        .unwrap() else {
            panic!("taken")
        };
        assert_eq!(p, format!("x = 1\n\nRename x.{CODE_ONLY}"));
        assert_eq!((n, out), (tok.count(&p) as u64, 200));
        let Taken::Request(p, _, out, _) = take_one(
            HfKind::MtBench,
            json!({"turns": ["Hi there", "more"]}),
            None,
        )
        .unwrap() else {
            panic!("taken")
        };
        assert_eq!((p.as_str(), out), ("Hi there", 256));
        let long = "word ".repeat(40);
        let Taken::Request(_, _, out, _) = take_one(
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
            Taken::Request(_, _, 9, _)
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
