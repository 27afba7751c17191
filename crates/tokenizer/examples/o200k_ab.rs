//! The built-in `o200k_base` tokenizer against tiktoken-rs, interleaved: each round times
//! both on the same text, one after the other, and the best round of each is kept, so a
//! busy machine slows both alike (the criterion bench, `benches/o200k.rs`, measures each
//! in its own window).
//!
//! ```sh
//! cargo run --release -p servebench-tokenizer --example o200k_ab [ROUNDS]
//! ```
//!
//! Run from the repository root (it reads `docs/simulator.md` and a source file).
#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::time::Instant;

use servebench_tokenizer::Tokenizer;

/// Mixed scripts, digits, emoji and punctuation, deterministic (as in the bench).
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
    let decoded = tok.decode(&ids[..tokens.min(ids.len())]);
    let mut end = decoded.len().min(text.len());
    while !text.is_char_boundary(end) || !decoded.starts_with(&text[..end]) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// Seconds per call of `f`, over `reps` calls.
fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..reps {
        f();
    }
    start.elapsed().as_secs_f64() / reps as f64
}

fn main() {
    let rounds: usize = std::env::args().nth(1).map_or(60, |a| a.parse().unwrap());
    let ours = Tokenizer::builtin();
    let oracle = tiktoken_rs::o200k_base_singleton();
    let prose = std::fs::read_to_string("docs/simulator.md").unwrap();
    let code = std::fs::read_to_string("crates/workload/src/synth.rs")
        .unwrap()
        .repeat(12);
    let mixed = mixed();
    println!("best of {rounds} rounds, µs per call: builtin vs tiktoken-rs (ratio)");
    for (kind, source) in [("prose", &prose), ("code", &code), ("mixed", &mixed)] {
        for tokens in [1_000, 10_000] {
            let text = prefix(source, tokens);
            let ids = ours.encode(&text);
            assert_eq!(ids, oracle.encode_ordinary(&text));
            let reps = if tokens < 10_000 { 10 } else { 1 };
            let mut best = [f64::MAX; 6];
            for _ in 0..rounds {
                let round = [
                    time(reps, || {
                        black_box(ours.encode(black_box(&text)));
                    }),
                    time(reps, || {
                        black_box(oracle.encode_ordinary(black_box(&text)));
                    }),
                    time(reps, || {
                        black_box(ours.count(black_box(&text)));
                    }),
                    time(reps, || {
                        black_box(oracle.count_ordinary(black_box(&text)));
                    }),
                    time(reps, || {
                        black_box(ours.decode(black_box(&ids)));
                    }),
                    // What the tiktoken-rs backend did: bytes, then UTF-8 validation.
                    time(reps, || {
                        let bytes = oracle.decode_bytes(black_box(&ids)).unwrap();
                        black_box(String::from_utf8(bytes)).ok();
                    }),
                ];
                for (best, t) in best.iter_mut().zip(round) {
                    *best = best.min(t);
                }
            }
            let us = |t: f64| t * 1e6;
            println!(
                "{kind:5} {:6} tokens {:6} B | encode {:7.1} vs {:7.1} ({:.2}) | count {:7.1} vs {:7.1} ({:.2}) | decode {:6.1} vs {:6.1} ({:.2})",
                ids.len(),
                text.len(),
                us(best[0]),
                us(best[1]),
                best[0] / best[1],
                us(best[2]),
                us(best[3]),
                best[2] / best[3],
                us(best[4]),
                us(best[5]),
                best[4] / best[5],
            );
        }
    }
}
