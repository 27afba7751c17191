//! Fuzzing every dataset and trace reader on stable: ShareGPT JSON, custom JSONL, and the Azure,
//! BurstGPT and Mooncake traces, on arbitrary bytes and on mutated valid files. Each returns its
//! result or an error naming the file (and the line, where the format has lines); none panics.
//!
//! Cases: proptest's default (256), or `PROPTEST_CASES` for a long run (README.md, Tests).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::OnceLock;

use proptest::prelude::*;
use servebench_tokenizer::Tokenizer;
use servebench_workload::custom::sample_custom_str;
use servebench_workload::sharegpt::sample_sharegpt_str;
use servebench_workload::trace::{
    load_timed_trace, parse_trace, sample_burstgpt, BurstGptConfig, TimedTraceConfig, TraceFormat,
    TraceWindow,
};
use servebench_workload::{
    read_trace, sample_custom, sample_sharegpt, CustomConfig, ShareGptConfig, WorkloadError,
};

const FILE: &str = "fuzzed-input.txt";

/// A word-level tokenizer: loads instantly and counts any text (unknown words are `[UNK]`).
fn tokenizer() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let dir = common::TempDir::new("fuzz-tok");
        let json = r#"{"version":"1.0","truncation":null,"padding":null,
            "added_tokens":[{"id":0,"content":"[UNK]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
            "normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
            "model":{"type":"WordLevel","vocab":{"[UNK]":0,"the":1,"a":2,"word":3,"of":4},"unk_token":"[UNK]"}}"#;
        Tokenizer::from_file(dir.write("tokenizer.json", json)).unwrap()
    })
}

const AZURE: &str = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
    2023-11-16 18:17:03.9799600,4808,10\n\
    2023-11-16 18:17:04.0319600,3180,8\n\
    2023-11-16T18:18:03.5,110,27\n";
const BURSTGPT: &str = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
    5,ChatGPT,472,18,490,Conversation log\n\
    45.5,\"GPT-4, new\",1087,230,1317,API log\n\
    47,ChatGPT,417,276,693,Conversation log\n";
const MOONCAKE: &str = "{\"timestamp\": 0, \"input_length\": 6955, \"output_length\": 52, \"hash_ids\": [46, 47, 48]}\n\
    {\"timestamp\": 27482.5, \"input_length\": 6472, \"output_length\": 26, \"hash_ids\": [46, 47]}\n\
    {\"timestamp\": 30535, \"input_length\": 6940, \"output_length\": 61}\n";
const CUSTOM: &str = "{\"prompt\": \"the word of a word\", \"output_tokens\": 12}\n\
    \n\
    {\"prompt\": \"a a a the\", \"output_tokens\": 3}\n";
const SHAREGPT: &str = r#"[
 {"id": "a", "conversations": [{"from": "human", "value": "the word of a word the word"}, {"from": "gpt", "value": "a word of the word a word"}]},
 {"id": "b", "conversations": [{"from": "human", "value": "only one turn"}]},
 {"other": 1},
 {"id": "c", "conversations": [{"from": "human", "value": "a a a a a a"}, {"from": "gpt", "value": "the the the the the"}]}
]"#;
const VALID: &[&str] = &[AZURE, BURSTGPT, MOONCAKE, CUSTOM, SHAREGPT];

/// Values that break naive arithmetic and parsing, spliced in place of numbers and anywhere.
const DICTIONARY: &[&str] = &[
    "0",
    "-1",
    "1e308",
    "-1e308",
    "NaN",
    "inf",
    "1.5",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "-9223372036854775808",
    "99999999999999999999999",
    "00",
    "",
    "\n",
    "\r\n",
    ",",
    "\"",
    "\"\"",
    ":",
    "-",
    ".",
    " ",
    "T",
    "{",
    "}",
    "[",
    "]",
    "null",
    "é😀",
    "\u{feff}",
];

/// The error must name the file, and the line where it points at one.
fn check_error(err: &WorkloadError, path: &Path) -> Result<(), TestCaseError> {
    match err {
        WorkloadError::Io { path: p, .. } | WorkloadError::Empty { path: p, .. } => {
            prop_assert_eq!(p.as_path(), path);
        }
        WorkloadError::Malformed { path: p, line, .. } => {
            prop_assert_eq!(p.as_path(), path);
            prop_assert!(*line >= 1, "line {} in {}", line, err);
        }
        other => prop_assert!(false, "a reader returned a non-file error: {other}"),
    }
    let msg = err.to_string();
    prop_assert!(msg.contains(FILE), "error does not name the file: {}", msg);
    Ok(())
}

fn check<T>(r: Result<T, WorkloadError>, path: &Path) -> Result<(), TestCaseError> {
    match r {
        Ok(_) => Ok(()),
        Err(e) => check_error(&e, path),
    }
}

fn sharegpt_cfg(path: &Path, fixed: Option<u64>) -> ShareGptConfig {
    ShareGptConfig {
        num_prompts: 5,
        output_len: fixed,
        ..ShareGptConfig::new(path)
    }
}

fn custom_cfg(path: &Path, output_len: i64) -> CustomConfig {
    CustomConfig {
        num_prompts: 5,
        output_len,
        ..CustomConfig::new(path)
    }
}

/// Every reader on one text, through the `_str` entry points.
fn all_readers_on_text(text: &str) -> Result<(), TestCaseError> {
    let path = Path::new(FILE);
    let tok = tokenizer();
    check(parse_trace(text, None, path), path)?;
    for format in [
        TraceFormat::Azure,
        TraceFormat::BurstGpt,
        TraceFormat::Mooncake,
        TraceFormat::Vllm,
    ] {
        check(parse_trace(text, Some(format), path), path)?;
    }
    for fixed in [None, Some(7)] {
        check(
            sample_sharegpt_str(text, path, &sharegpt_cfg(path, fixed), tok),
            path,
        )?;
    }
    for output_len in [-1, 256] {
        check(
            sample_custom_str(text, path, &custom_cfg(path, output_len), tok),
            path,
        )?;
    }
    Ok(())
}

/// Every reader on one file on disk (bytes that may not be UTF-8).
fn all_readers_on_file(bytes: &[u8]) -> Result<(), TestCaseError> {
    let dir = common::TempDir::new("fuzz-file");
    let path = dir.path().join(FILE);
    std::fs::write(&path, bytes).unwrap();
    let tok = tokenizer();
    check(read_trace(&path), &path)?;
    check(sample_sharegpt(&sharegpt_cfg(&path, None), tok), &path)?;
    check(sample_custom(&custom_cfg(&path, -1), tok), &path)?;
    timed_readers_on_file(&path)
}

/// The timed-trace reader in every format (and detected), whole and windowed, and the
/// BurstGPT dataset's reader, on a file already written.
fn timed_readers_on_file(path: &Path) -> Result<(), TestCaseError> {
    let formats = [
        None,
        Some(TraceFormat::Azure),
        Some(TraceFormat::BurstGpt),
        Some(TraceFormat::Mooncake),
        Some(TraceFormat::Vllm),
    ];
    for format in formats {
        for window in [
            TraceWindow::default(),
            TraceWindow {
                start_s: Some(0.5),
                duration_s: Some(1e300),
            },
        ] {
            let mut cfg = TimedTraceConfig::new(path);
            cfg.format = format;
            cfg.window = window;
            cfg.max_requests = Some(2);
            check(load_timed_trace(&cfg), path)?;
        }
    }
    // No prompt is built (a fuzzed length may be astronomical); the rows are still read.
    let cfg = BurstGptConfig {
        path: path.to_path_buf(),
        num_prompts: 0,
        seed: 0,
    };
    check(sample_burstgpt(&cfg, tokenizer()), path)
}

#[derive(Debug, Clone)]
enum Mutation {
    /// Replace the n-th run of ASCII digits with a dictionary entry.
    Number(usize, usize),
    /// Insert a dictionary entry at a byte offset.
    Insert(usize, usize),
    /// Remove a byte.
    Remove(usize),
    /// Overwrite a byte.
    Flip(usize, u8),
    /// Cut the file short.
    Truncate(usize),
    /// Repeat a line.
    DuplicateLine(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let word = 0..DICTIONARY.len();
    prop_oneof![
        4 => (any::<usize>(), word.clone()).prop_map(|(n, w)| Mutation::Number(n, w)),
        3 => (any::<usize>(), word).prop_map(|(at, w)| Mutation::Insert(at, w)),
        1 => any::<usize>().prop_map(Mutation::Remove),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Mutation::Flip(at, b)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        1 => any::<usize>().prop_map(Mutation::DuplicateLine),
    ]
}

fn digit_runs(b: &[u8]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            runs.push((start, i));
        } else {
            i += 1;
        }
    }
    runs
}

fn apply(base: &str, mutations: &[Mutation]) -> Vec<u8> {
    let mut b = base.as_bytes().to_vec();
    for m in mutations {
        let len = b.len();
        match *m {
            Mutation::Number(n, w) => {
                let runs = digit_runs(&b);
                if !runs.is_empty() {
                    let (s, e) = runs[n % runs.len()];
                    b.splice(s..e, DICTIONARY[w].bytes());
                }
            }
            Mutation::Insert(at, w) => {
                let at = at % (len + 1);
                b.splice(at..at, DICTIONARY[w].bytes());
            }
            Mutation::Remove(at) if len > 0 => {
                b.remove(at % len);
            }
            Mutation::Flip(at, byte) if len > 0 => b[at % len] = byte,
            Mutation::Truncate(at) => b.truncate(at % (len + 1)),
            Mutation::DuplicateLine(n) => {
                let lines: Vec<&[u8]> = b.split(|c| *c == b'\n').collect();
                let line = lines[n % lines.len()].to_vec();
                b.extend_from_slice(b"\n");
                b.extend_from_slice(&line);
            }
            _ => {}
        }
    }
    b
}

/// A date or time component: mostly in range, so parsing reaches the arithmetic, sometimes any
/// 64-bit value.
fn component(valid: std::ops::RangeInclusive<i64>) -> impl Strategy<Value = i64> {
    prop_oneof![
        3 => valid,
        1 => any::<i64>(),
        1 => prop::sample::select(vec![i64::MIN, i64::MAX, -1, 0]),
    ]
}

/// Timestamps and counts as the Azure trace writes them, from arbitrary numbers.
fn azure_row() -> impl Strategy<Value = String> {
    (
        component(1970..=2100),
        component(1..=12),
        component(1..=31),
        component(0..=23),
        component(0..=59),
        component(0..=60),
        "[0-9]{0,12}",
        any::<i64>(),
        any::<f64>(),
    )
        .prop_map(|(y, mo, d, h, mi, s, frac, inp, out)| {
            format!("{y}-{mo}-{d} {h}:{mi}:{s}.{frac},{inp},{out}")
        })
}

proptest! {
    #[test]
    fn arbitrary_bytes_as_text_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        all_readers_on_text(&String::from_utf8_lossy(&bytes))?;
    }

    #[test]
    fn arbitrary_bytes_as_files_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        all_readers_on_file(&bytes)?;
    }

    #[test]
    fn mutated_valid_files_never_panic(
        which in 0..VALID.len(),
        mutations in prop::collection::vec(mutation(), 1..6),
    ) {
        let bytes = apply(VALID[which], &mutations);
        all_readers_on_text(&String::from_utf8_lossy(&bytes))?;
    }

    #[test]
    fn mutated_valid_files_as_timed_traces_never_panic(
        which in 0..VALID.len(),
        mutations in prop::collection::vec(mutation(), 1..6),
    ) {
        let dir = common::TempDir::new("fuzz-timed");
        let path = dir.path().join(FILE);
        std::fs::write(&path, apply(VALID[which], &mutations)).unwrap();
        timed_readers_on_file(&path)?;
    }

    #[test]
    fn azure_rows_with_any_numbers_never_panic(rows in prop::collection::vec(azure_row(), 1..4)) {
        let text = format!("TIMESTAMP,ContextTokens,GeneratedTokens\n{}\n", rows.join("\n"));
        all_readers_on_text(&text)?;
    }

    #[test]
    fn burstgpt_and_mooncake_rows_with_any_numbers_never_panic(
        rows in prop::collection::vec((any::<f64>(), any::<i64>(), any::<f64>(), any::<u64>()), 1..4),
    ) {
        let burst: Vec<String> = rows
            .iter()
            .map(|(t, i, o, _)| format!("{t},m,{i},{o},0,x"))
            .collect();
        let text = format!(
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n{}\n",
            burst.join("\n")
        );
        all_readers_on_text(&text)?;
        let moon: Vec<String> = rows
            .iter()
            .map(|(t, i, o, h)| {
                format!("{{\"timestamp\": {t:e}, \"input_length\": {i}, \"output_length\": {o}, \"hash_ids\": [{h}]}}")
            })
            .collect();
        all_readers_on_text(&moon.join("\n"))?;
    }
}

#[test]
fn valid_files_read() {
    let path = Path::new(FILE);
    for (text, format) in [
        (AZURE, TraceFormat::Azure),
        (BURSTGPT, TraceFormat::BurstGpt),
        (MOONCAKE, TraceFormat::Mooncake),
    ] {
        assert_eq!(
            parse_trace(text, None, path).unwrap().len(),
            3,
            "{format:?}"
        );
    }
    let tok = tokenizer();
    assert!(!sample_custom_str(CUSTOM, path, &custom_cfg(path, -1), tok)
        .unwrap()
        .is_empty());
    assert!(
        !sample_sharegpt_str(SHAREGPT, path, &sharegpt_cfg(path, None), tok)
            .unwrap()
            .is_empty()
    );
}
