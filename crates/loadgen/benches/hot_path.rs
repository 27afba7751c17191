//! The client's per-event hot path: `StreamState::feed` (SSE parse, chunk classification, one
//! `TokenEvent` per token) over vLLM-shaped byte streams, and the whole per-request work from
//! an empty state to a finished `RequestRecord`.
//!
//! Throughput is in token events, so criterion's "thrpt" reads as events per second; its
//! inverse is the cost per token event.
//!
//! `cargo bench -p servebench-loadgen --bench hot_path`

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use servebench_loadgen::stream::StreamState;
use servebench_loadgen::ApiKind;
use servebench_metrics::{CountSource, RequestRecord};
use servebench_testserver::{sse_body, StreamSpec};

/// Tokens per streamed response.
const TOKENS: u64 = 1000;
/// Read size of a busy connection: many events arrive in one buffer.
const READ_BYTES: usize = 16 * 1024;

fn body(api: ApiKind) -> Vec<u8> {
    sse_body(&StreamSpec {
        chat: api == ApiKind::Chat,
        id: "cmpl-b7e3c1a9f04d4c2e8a6b5d3f1e2c4a6b".into(),
        created: 1_735_000_000,
        model: "meta-llama/Llama-3.1-8B-Instruct",
        tokens: TOKENS,
        tokens_per_event: 1,
        first_token_delay: Duration::ZERO,
        inter_token_interval: Duration::ZERO,
        include_usage: true,
        prompt_tokens: 256,
        finish_reason: "length",
    })
}

/// The body cut after every event: what a client sees when each event arrives on its own.
fn per_event(body: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..body.len() {
        if body[i - 1] == b'\n' && body[i] == b'\n' {
            out.push(&body[start..=i]);
            start = i + 1;
        }
    }
    out
}

fn feed_all<'a>(api: ApiKind, pieces: impl Iterator<Item = &'a [u8]>) -> StreamState {
    let mut state = StreamState::new(api);
    let mut t = 1_000_000u64;
    for piece in pieces {
        t += 20_000;
        state.feed(t, piece);
    }
    state.finish();
    state
}

fn record(state: StreamState) -> RequestRecord {
    let acc = state.acc;
    RequestRecord {
        phases: None,
        images: None,
        id: 7,
        intended: 0,
        released: 10,
        sent: 20,
        started: None,
        bare_events: Vec::new(),
        first_token: acc.first_token,
        end: acc.end,
        done: acc.end,
        waited_for_slot: false,
        output_tokens: acc.completion_tokens.unwrap_or(acc.events.len() as u64),
        events: acc.events,
        input_tokens: acc.prompt_tokens.unwrap_or(256),
        input_source: CountSource::Usage,
        output_source: CountSource::Usage,
        intended_input_tokens: 256,
        max_tokens: Some(TOKENS),
        cached_tokens: acc.cached_tokens,
        finish_reason: acc.finish_reason,
        text: None,
        failure: acc.failure,
        resent: 0,
        answer_checked: false,
        output_split: None,
        session_id: None,
        turn: None,
        stamp_clock: None,
        lora: None,
        served_by: None,
    }
}

fn bench_feed(c: &mut Criterion) {
    let mut group = c.benchmark_group("feed");
    group.throughput(Throughput::Elements(TOKENS));
    for (name, api) in [
        ("completions", ApiKind::Completions),
        ("chat", ApiKind::Chat),
    ] {
        let body = body(api);
        // Sanity: the stream parses into exactly one event per token.
        let check = feed_all(api, body.chunks(READ_BYTES));
        assert_eq!(check.acc.events.len() as u64, TOKENS);
        assert!(check.acc.failure.is_none() && check.acc.saw_done);

        group.bench_with_input(BenchmarkId::new("16KiB_reads", name), &body, |b, body| {
            b.iter(|| black_box(feed_all(api, black_box(body).chunks(READ_BYTES))))
        });
        let events = per_event(&body);
        group.bench_with_input(
            BenchmarkId::new("event_per_read", name),
            &events,
            |b, events| b.iter(|| black_box(feed_all(api, black_box(events).iter().copied()))),
        );
        group.bench_with_input(
            BenchmarkId::new("request_to_record", name),
            &body,
            |b, body| {
                b.iter(|| black_box(record(feed_all(api, black_box(body).chunks(READ_BYTES)))))
            },
        );
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = bench_feed
}
criterion_main!(benches);
