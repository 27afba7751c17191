//! Fuzzing the sonnet and Hugging Face readers on stable: arbitrary text and mutated valid
//! files (JSON Lines, JSON lists, Parquet bytes). Each returns requests or an error naming the
//! file (and the line, where the format has lines); none panics.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use proptest::prelude::*;
use servebench_tokenizer::Tokenizer;
use servebench_workload::hf::known::HfKind;
use servebench_workload::hf::requests_from_rows;
use servebench_workload::hf::rows::{parse_json, parse_parquet, Numbered, Row};
use servebench_workload::sonnet::sample_sonnet_str;
use servebench_workload::{HfConfig, SonnetConfig, WorkloadError};

const FILE: &str = "fuzzed-input.jsonl";

/// A word-level tokenizer: loads instantly and counts any text (unknown words are `[UNK]`).
fn tokenizer() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let dir = common::TempDir::new("fuzz-ds-tok");
        let json = r#"{"version":"1.0","truncation":null,"padding":null,
            "added_tokens":[{"id":0,"content":"[UNK]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
            "normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
            "model":{"type":"WordLevel","vocab":{"[UNK]":0,"the":1,"a":2,"word":3,"of":4},"unk_token":"[UNK]"}}"#;
        Tokenizer::from_file(dir.write("tokenizer.json", json)).unwrap()
    })
}

const KINDS: &[(&str, HfKind)] = &[
    ("Aeala/ShareGPT_Vicuna_unfiltered", HfKind::Conversation),
    ("likaixin/InstructCoder", HfKind::InstructCoder),
    ("philschmid/mt-bench", HfKind::MtBench),
    ("AI-MO/aimo-validation-aime", HfKind::Aimo),
];

const JSONL: &str = "{\"turns\": [\"the word of a word\", \"a\"], \"instruction\": \"a word\", \"input\": \"the\"}\n\
    {\"problem\": \"a a a a the\", \"solution\": \"word word word word word\"}\n\
    {\"conversations\": [{\"value\": \"the word of a word\"}, {\"value\": \"a a a a a\"}]}\n";
const JSON_LIST: &str = r#"[{"conversations": [{"from": "human", "value": "the a word of"}, {"from": "gpt", "value": "a a a a a a"}]}, {"turns": ["a"]}]"#;
const SONNET: &str = "the word of a word\na a the\n\nword of the a a\n";

fn check_error(err: &WorkloadError, path: &Path) -> Result<(), TestCaseError> {
    match err {
        WorkloadError::Empty { path: p, .. } | WorkloadError::Format { path: p, .. } => {
            prop_assert_eq!(p.as_path(), path);
        }
        // Lengths that no prompt of this file can meet.
        WorkloadError::InvalidConfig(msg) => {
            prop_assert!(msg.contains("--sonnet-"), "{}", msg);
        }
        WorkloadError::Malformed { path: p, line, .. } => {
            prop_assert_eq!(p.as_path(), path);
            prop_assert!(*line >= 1, "line {} in {}", line, err);
        }
        other => prop_assert!(false, "a reader returned a non-file error: {other}"),
    }
    Ok(())
}

fn check<T>(r: Result<T, WorkloadError>, path: &Path) -> Result<(), TestCaseError> {
    match r {
        Ok(_) => Ok(()),
        Err(e) => check_error(&e, path),
    }
}

/// Rows through every kind, with and without a fixed output length.
fn all_kinds(rows: Vec<Numbered>, path: &Path) -> Result<(), TestCaseError> {
    let rows: Vec<Row> = rows
        .into_iter()
        .map(|(line, fields)| Row {
            fields,
            file: 0,
            line,
        })
        .collect();
    let files = [PathBuf::from(path)];
    for (id, kind) in KINDS {
        for output_len in [None, Some(3)] {
            let cfg = HfConfig {
                num_prompts: 4,
                output_len,
                ..HfConfig::new(path)
            };
            check(
                requests_from_rows(id, *kind, rows.clone(), &files, &cfg, tokenizer()),
                path,
            )?;
        }
    }
    Ok(())
}

fn json_readers(text: &str) -> Result<(), TestCaseError> {
    let path = Path::new(FILE);
    match parse_json(text, path) {
        Ok(rows) => all_kinds(rows, path),
        Err(e) => check_error(&e, path),
    }
}

fn sonnet_reader(text: &str) -> Result<(), TestCaseError> {
    let path = Path::new("fuzzed-poem.txt");
    let cfg = SonnetConfig {
        num_prompts: 3,
        input_len: 40,
        prefix_len: 12,
        output_len: 4,
        ..SonnetConfig::new(path)
    };
    check(sample_sonnet_str(text, path, &cfg, tokenizer()), path)
}

fn parquet_fixture() -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf/instructcoder/data/train-00000-of-00001.parquet");
    std::fs::read(p).unwrap()
}

/// A valid text with a few bytes replaced, inserted or cut.
fn mutated(valid: &'static [&'static str]) -> impl Strategy<Value = String> {
    (
        prop::sample::select(valid),
        prop::collection::vec((any::<prop::sample::Index>(), 0u8..3, any::<char>()), 1..6),
    )
        .prop_map(|(base, edits)| {
            let mut chars: Vec<char> = base.chars().collect();
            for (at, op, c) in edits {
                if chars.is_empty() {
                    chars.push(c);
                    continue;
                }
                let i = at.index(chars.len());
                match op {
                    0 => chars[i] = c,
                    1 => chars.insert(i, c),
                    _ => chars.truncate(i),
                }
            }
            chars.into_iter().collect()
        })
}

proptest! {
    #[test]
    fn hf_json_readers_never_panic_on_arbitrary_text(text in ".{0,300}") {
        json_readers(&text)?;
    }

    #[test]
    fn hf_json_readers_never_panic_on_mutated_files(text in mutated(&[JSONL, JSON_LIST])) {
        json_readers(&text)?;
    }

    #[test]
    fn sonnet_never_panics(text in prop_oneof![".{0,200}".boxed(), mutated(&[SONNET]).boxed()]) {
        sonnet_reader(&text)?;
    }

    #[test]
    fn parquet_reader_never_panics_on_damaged_files(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let mut bytes = parquet_fixture();
        for (at, b) in edits {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        if let Some(cut) = cut {
            bytes.truncate(cut.index(bytes.len()));
        }
        let path = Path::new("fuzzed.parquet");
        match parse_parquet(bytes.into(), path) {
            Ok(rows) => all_kinds(rows, path)?,
            Err(e) => check_error(&e, path)?,
        }
    }
}

#[test]
fn the_parquet_fixture_reads_back() {
    let rows = parse_parquet(parquet_fixture().into(), Path::new("f.parquet")).unwrap();
    assert_eq!(rows.len(), 4);
    assert!(rows[0].1["instruction"].is_string() && rows[0].1["input"].is_string());
}
