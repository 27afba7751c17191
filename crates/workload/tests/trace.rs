//! Trace readers on the shared public traces (skipped with a notice when the files
//! are absent) and replay with prefix reuse.
#![allow(clippy::unwrap_used)]

mod common;

use servebench_tokenizer::Tokenizer;
use servebench_workload::trace::{self, ReplayConfig, TraceFormat};
use servebench_workload::{read_trace, TraceEntry};

fn trace_file(name: &str) -> Option<std::path::PathBuf> {
    let path = common::traces_dir()
        .map(|d| d.join(name))
        .filter(|p| p.is_file());
    if path.is_none() {
        println!("notice: trace fixture {name} not found (looked in /work/shared and ../shared); skipping");
    }
    path
}

#[test]
fn azure_code_trace() {
    let Some(path) = trace_file("azure-llm-2023-code.csv") else {
        return;
    };
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(TraceFormat::detect(&text), Some(TraceFormat::Azure));
    let entries = read_trace(&path).unwrap();
    assert_eq!(entries.len(), 8819);
    // First row: 2023-11-16 18:17:03.9799600,4808,10.
    assert_eq!(entries[0].offset_ns, 0);
    assert_eq!(
        (entries[0].input_tokens, entries[0].output_tokens),
        (4808, 10)
    );
    // Second row is 52 ms later.
    assert_eq!(entries[1].offset_ns, 52_000_000);
    // Last row: 2023-11-16 19:14:19.9280160, 57 min 15.948056 s after the first.
    assert_eq!(entries.last().unwrap().offset_ns, 3_435_948_056_000);
    assert!(entries.windows(2).all(|w| w[0].offset_ns <= w[1].offset_ns));
    let mean_in = entries.iter().map(|e| e.input_tokens as f64).sum::<f64>() / entries.len() as f64;
    assert!((mean_in - 2047.85).abs() < 0.01, "{mean_in}");
    assert!(entries.iter().all(|e| e.block_hashes.is_empty()));
}

#[test]
fn mooncake_trace() {
    let Some(path) = trace_file("mooncake-synthetic.jsonl") else {
        return;
    };
    let entries = read_trace(&path).unwrap();
    assert_eq!(entries.len(), 3993);
    assert_eq!(
        (
            entries[0].offset_ns,
            entries[0].input_tokens,
            entries[0].output_tokens
        ),
        (0, 40160, 6)
    );
    assert_eq!(entries[0].block_hashes.len(), 79);
    assert_eq!(entries[2].offset_ns, 40_000_000);
    // Every entry names one id per 512-token block (the last one partial).
    for e in &entries {
        assert_eq!(e.block_hashes.len() as u64, e.input_tokens.div_ceil(512));
    }
    // The trace reuses prefixes: some entry starts with blocks an earlier one had.
    let mut seen = std::collections::HashSet::new();
    let reusing = entries
        .iter()
        .filter(|e| {
            let hit = e.block_hashes.first().is_some_and(|h| seen.contains(h));
            seen.extend(e.block_hashes.iter().copied());
            hit
        })
        .count();
    assert!(reusing > 100, "{reusing}");
}

#[test]
fn mooncake_replay_slice_is_exact_and_shares_prefixes() {
    let Some(path) = trace_file("mooncake-synthetic.jsonl") else {
        return;
    };
    let all = read_trace(&path).unwrap();
    // Pick the first entry that reuses an earlier one's leading blocks, plus that
    // earlier entry; shrink both so the debug-build test stays quick.
    let (i, j) = (0..all.len())
        .find_map(|j| {
            (0..j)
                .find(|&i| {
                    all[i].block_hashes.len() > 2
                        && all[j].block_hashes.len() > 2
                        && all[i].block_hashes[..2] == all[j].block_hashes[..2]
                })
                .map(|i| (i, j))
        })
        .unwrap();
    let shrink = |e: &TraceEntry, input: u64| TraceEntry {
        input_tokens: input,
        block_hashes: e.block_hashes[..input.div_ceil(512) as usize].to_vec(),
        ..e.clone()
    };
    let entries = vec![shrink(&all[i], 1500), shrink(&all[j], 1200)];
    let tok = Tokenizer::builtin();
    let w = trace::synthesize(&entries, &tok, &ReplayConfig::default()).unwrap();
    assert_eq!(w.requests[0].prompt_tokens, 1500);
    assert_eq!(w.requests[1].prompt_tokens, 1200);
    assert_eq!(tok.count(&w.requests[0].prompt), 1500);
    assert_eq!(tok.count(&w.requests[1].prompt), 1200);
    assert_eq!(w.requests[1].prefix_tokens, 1024);
    let a = tok.encode(&w.requests[0].prompt);
    let b = tok.encode(&w.requests[1].prompt);
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    assert!(common >= 1000, "only {common} shared leading tokens");
    assert_eq!(
        w.offsets_ns,
        vec![entries[0].offset_ns, entries[1].offset_ns]
    );
}

#[test]
fn azure_replay_slice_is_exact() {
    let Some(path) = trace_file("azure-llm-2023-code.csv") else {
        return;
    };
    let entries = read_trace(&path).unwrap();
    let slice: Vec<TraceEntry> = entries
        .iter()
        .filter(|e| e.input_tokens <= 600)
        .take(12)
        .cloned()
        .collect();
    let tok = Tokenizer::builtin();
    let cfg = ReplayConfig {
        seed: 4,
        time_scale: 2.0,
        ..ReplayConfig::default()
    };
    let w = trace::synthesize(&slice, &tok, &cfg).unwrap();
    for ((r, e), off) in w.requests.iter().zip(&slice).zip(&w.offsets_ns) {
        assert_eq!(tok.count(&r.prompt) as u64, e.input_tokens);
        assert_eq!(r.max_tokens, Some(e.output_tokens));
        assert_eq!(r.prefix_tokens, 0);
        assert_eq!(*off, e.offset_ns * 2);
    }
    assert_eq!(w, trace::synthesize(&slice, &tok, &cfg).unwrap());
}

#[test]
fn max_requests_limits_replay() {
    let entries: Vec<TraceEntry> = (0..10)
        .map(|i| TraceEntry {
            offset_ns: i * 1000,
            input_tokens: 5 + i,
            output_tokens: 3,
            block_hashes: Vec::new(),
        })
        .collect();
    let tok = Tokenizer::builtin();
    let cfg = ReplayConfig {
        max_requests: Some(4),
        ..ReplayConfig::default()
    };
    let w = trace::synthesize(&entries, &tok, &cfg).unwrap();
    assert_eq!(w.requests.len(), 4);
    assert_eq!(w.offsets_ns, [0, 1000, 2000, 3000]);
}

#[test]
fn read_trace_reports_missing_file() {
    let err = read_trace("/nonexistent/trace.csv")
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/trace.csv"), "{err}");
}
