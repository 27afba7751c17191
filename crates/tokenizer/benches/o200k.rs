//! The built-in `o200k_base` tokenizer against tiktoken-rs, on prompt-sized texts (about
//! 1,000 and 10,000 tokens of prose, code and mixed-script text): encode, count, decode.
//!
//! ```sh
//! cargo bench -p servebench-tokenizer --bench o200k
//! ```
#![allow(clippy::unwrap_used)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use servebench_tokenizer::Tokenizer;

const PROSE: &str = include_str!("../../../docs/simulator.md");
const CODE: &str = include_str!("../../workload/src/synth.rs");

/// Mixed scripts, digits, emoji and punctuation, deterministic.
fn mixed() -> String {
    const PARTS: &[&str] = &[
        "The quick brown fox",
        " naïve café",
        " 東京の天気は晴れ",
        " Привет, мир!",
        " 12345",
        " 🚀🎉",
        " e\u{301}",
        " مرحبا بالعالم",
        " x == y && z",
        "\n\n",
        " DON'T",
        " ∑∫√",
        "\t",
        " 한국어 텍스트",
        " über-straße",
        " (1, 2, 3)",
    ];
    let mut state = 0x2545_f491_u32;
    let mut text = String::new();
    while text.len() < 200_000 {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        text.push_str(PARTS[state as usize % PARTS.len()]);
    }
    text
}

/// The longest prefix of `text` (whole characters) of at most `tokens` tokens.
fn prefix(text: &str, tokens: usize) -> String {
    let tok = Tokenizer::builtin();
    let ids = tok.encode(text);
    assert!(ids.len() >= tokens, "text too short: {} tokens", ids.len());
    let decoded = tok.decode(&ids[..tokens]);
    let mut end = decoded.len().min(text.len());
    while !text.is_char_boundary(end) || !decoded.starts_with(&text[..end]) {
        end -= 1;
    }
    text[..end].to_owned()
}

fn texts() -> Vec<(String, String)> {
    let mixed = mixed();
    let mut texts = Vec::new();
    for (kind, source) in [("prose", PROSE), ("code", CODE), ("mixed", mixed.as_str())] {
        for tokens in [1_000, 10_000] {
            let source = if source.len() < 120_000 {
                source.repeat(120_000 / source.len() + 1)
            } else {
                source.to_owned()
            };
            texts.push((format!("{kind}-{tokens}"), prefix(&source, tokens)));
        }
    }
    texts
}

fn bench(c: &mut Criterion) {
    let ours = Tokenizer::builtin();
    let oracle = tiktoken_rs::o200k_base_singleton();
    let texts = texts();

    let mut group = c.benchmark_group("encode");
    for (name, text) in &texts {
        assert_eq!(ours.encode(text), oracle.encode_ordinary(text));
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_with_input(BenchmarkId::new("builtin", name), text, |b, t| {
            b.iter(|| ours.encode(black_box(t)));
        });
        group.bench_with_input(BenchmarkId::new("tiktoken-rs", name), text, |b, t| {
            b.iter(|| oracle.encode_ordinary(black_box(t)));
        });
    }
    group.finish();

    let mut group = c.benchmark_group("count");
    for (name, text) in &texts {
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_with_input(BenchmarkId::new("builtin", name), text, |b, t| {
            b.iter(|| ours.count(black_box(t)));
        });
        group.bench_with_input(BenchmarkId::new("tiktoken-rs", name), text, |b, t| {
            b.iter(|| oracle.count_ordinary(black_box(t)));
        });
    }
    group.finish();

    let mut group = c.benchmark_group("decode");
    for (name, text) in &texts {
        let ids = ours.encode(text);
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_with_input(BenchmarkId::new("builtin", name), &ids, |b, ids| {
            b.iter(|| ours.decode(black_box(ids)));
        });
        // What the tiktoken-rs backend did: bytes, then UTF-8 validation.
        group.bench_with_input(BenchmarkId::new("tiktoken-rs", name), &ids, |b, ids| {
            b.iter(|| String::from_utf8(oracle.decode_bytes(black_box(ids)).unwrap()));
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
