//! The client's per-token cost: SSE parsing plus chunk classification, for realistic vLLM
//! completions and chat streams (many events per read buffer, as a busy connection delivers
//! them). Throughput is reported per element = per token-bearing event, so criterion's
//! "time per element" is the ns/token figure.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use servebench_wire::chunk::{classify, is_done, EndpointKind};
use servebench_wire::sse::SseParser;

const TOKENS: usize = 256;
/// A typical socket read.
const READ_SIZE: usize = 16 * 1024;

const WORDS: [&str; 8] = [
    " the", " of", " and", " model", " serving", " latency", " token", " é",
];

/// A vLLM `/v1/completions` stream (~250-byte events), closed by usage and `[DONE]`.
fn completions_stream() -> Vec<u8> {
    let mut s = String::new();
    for i in 0..TOKENS {
        let finish = if i + 1 == TOKENS {
            "\"length\""
        } else {
            "null"
        };
        s.push_str(&format!(
            "data: {{\"id\":\"cmpl-8f3a4c2e9b1d4f7a8c6e5b3a2d1f0e9c\",\"object\":\"text_completion\",\
             \"created\":1735689600,\"model\":\"meta-llama/Llama-3.1-8B-Instruct\",\"choices\":[{{\
             \"index\":0,\"text\":\"{}\",\"logprobs\":null,\"finish_reason\":{finish},\
             \"stop_reason\":null}}],\"usage\":null}}\n\n",
            WORDS[i % WORDS.len()]
        ));
    }
    s.push_str(
        "data: {\"id\":\"cmpl-8f3a4c2e9b1d4f7a8c6e5b3a2d1f0e9c\",\"object\":\"text_completion\",\
         \"created\":1735689600,\"model\":\"meta-llama/Llama-3.1-8B-Instruct\",\"choices\":[],\
         \"usage\":{\"prompt_tokens\":256,\"total_tokens\":512,\"completion_tokens\":256}}\n\n",
    );
    s.push_str("data: [DONE]\n\n");
    s.into_bytes()
}

/// A vLLM `/v1/chat/completions` stream: role chunk, content chunks, usage, `[DONE]`.
fn chat_stream() -> Vec<u8> {
    let head = "data: {\"id\":\"chatcmpl-8f3a4c2e9b1d4f7a8c6e5b3a2d1f0e9c\",\
                \"object\":\"chat.completion.chunk\",\"created\":1735689600,\
                \"model\":\"meta-llama/Llama-3.1-8B-Instruct\",\"choices\":[{\"index\":0,";
    let mut s = String::new();
    s.push_str(head);
    s.push_str(
        "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\
         \"finish_reason\":null}]}\n\n",
    );
    for i in 0..TOKENS {
        let finish = if i + 1 == TOKENS {
            "\"length\""
        } else {
            "null"
        };
        s.push_str(head);
        s.push_str(&format!(
            "\"delta\":{{\"content\":\"{}\"}},\"logprobs\":null,\"finish_reason\":{finish}}}]}}\n\n",
            WORDS[i % WORDS.len()]
        ));
    }
    s.push_str(
        "data: {\"id\":\"chatcmpl-8f3a4c2e9b1d4f7a8c6e5b3a2d1f0e9c\",\
         \"object\":\"chat.completion.chunk\",\"created\":1735689600,\
         \"model\":\"meta-llama/Llama-3.1-8B-Instruct\",\"choices\":[],\
         \"usage\":{\"prompt_tokens\":256,\"total_tokens\":512,\"completion_tokens\":256}}\n\n",
    );
    s.push_str("data: [DONE]\n\n");
    s.into_bytes()
}

/// Parse and classify a whole stream fed in `READ_SIZE` pieces; return tokens seen.
fn run(stream: &[u8], kind: EndpointKind) -> usize {
    let mut parser = SseParser::new();
    let mut tokens = 0usize;
    let mut chars = 0u64;
    for piece in stream.chunks(READ_SIZE) {
        let fed = parser.feed(piece, |ev| {
            if is_done(ev.data) {
                return;
            }
            if let Ok(info) = classify(ev.data, kind) {
                if info.token_bearing {
                    tokens += 1;
                    chars += u64::from(info.text_chars);
                }
            }
        });
        debug_assert!(fed.is_ok());
    }
    black_box(chars);
    tokens
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("sse_parse_and_classify");
    group.throughput(Throughput::Elements(TOKENS as u64));
    for (name, stream, kind) in [
        (
            "completions",
            completions_stream(),
            EndpointKind::Completions,
        ),
        ("chat", chat_stream(), EndpointKind::Chat),
    ] {
        assert_eq!(
            run(&stream, kind),
            TOKENS,
            "{name} stream must yield every token"
        );
        group.bench_function(name, |b| b.iter(|| run(black_box(&stream), kind)));
    }
    group.finish();

    let mut group = c.benchmark_group("sse_parse_only");
    group.throughput(Throughput::Elements(TOKENS as u64));
    let stream = completions_stream();
    group.bench_function("completions", |b| {
        b.iter(|| {
            let mut parser = SseParser::new();
            let mut n = 0usize;
            for piece in black_box(&stream).chunks(READ_SIZE) {
                let _ = parser.feed(piece, |ev| n += ev.data.len());
            }
            n
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
