//! Fuzzing the SSE parser on stable: arbitrary bytes (and SSE-shaped bytes) cut at arbitrary
//! places never panic, and yield the same events, errors and tail whatever the cut.
//!
//! Cases: proptest's default (256), or `PROPTEST_CASES` for a long run (README.md, Tests).
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use servebench_wire::sse::{SseError, SseParser, SseTail};

/// Everything the parser reports, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Out {
    Event {
        data: String,
        event: Option<String>,
        id: Option<String>,
    },
    Error(SseError),
}

/// Feed `bytes` in pieces ending at `cuts` (sorted, deduplicated offsets), then finish.
fn run(parser: &mut SseParser, bytes: &[u8], cuts: &[usize]) -> (Vec<Out>, SseTail) {
    let mut out = Vec::new();
    let mut start = 0;
    for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
        let cut = cut.clamp(start, bytes.len());
        parser.feed_results(&bytes[start..cut], |r| {
            out.push(match r {
                Ok(ev) => Out::Event {
                    data: ev.data.to_owned(),
                    event: ev.event.map(str::to_owned),
                    id: ev.id.map(str::to_owned),
                },
                Err(e) => Out::Error(e),
            });
        });
        start = cut;
    }
    (out, parser.finish_tail())
}

fn cuts_for(len: usize, raw: &[usize]) -> Vec<usize> {
    let mut cuts: Vec<usize> = raw.iter().map(|c| c % (len + 1)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// Bytes that look like SSE often enough to reach every branch: field names, separators,
/// every line ending, a BOM, invalid UTF-8, and noise.
fn sse_ish() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"data:".to_vec()),
        Just(b"data: ".to_vec()),
        Just(b"event: ".to_vec()),
        Just(b"id: ".to_vec()),
        Just(b"retry: 10".to_vec()),
        Just(b": comment".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\n\n".to_vec()),
        Just(b"\xEF\xBB\xBF".to_vec()),
        Just(b"[DONE]".to_vec()),
        Just(b"{\"choices\":[{\"text\":\"x\"}]}".to_vec()),
        Just(b"\xff\xfe".to_vec()),
        Just("é😀".as_bytes().to_vec()),
        Just(b"\0".to_vec()),
        prop::collection::vec(any::<u8>(), 0..8),
    ];
    prop::collection::vec(piece, 0..40).prop_map(|p| p.concat())
}

fn check_split_invariance(bytes: &[u8], raw_cuts: &[usize]) -> Result<(), TestCaseError> {
    let whole = run(&mut SseParser::new(), bytes, &[]);
    let cuts = cuts_for(bytes.len(), raw_cuts);
    let split = run(&mut SseParser::new(), bytes, &cuts);
    prop_assert_eq!(&whole, &split, "cuts {:?}", cuts);
    // Byte by byte: the most extreme split.
    let every: Vec<usize> = (1..bytes.len()).collect();
    let bytewise = run(&mut SseParser::new(), bytes, &every);
    prop_assert_eq!(&whole, &bytewise);
    // A parser is reset by finish: reusing it gives the same answer again.
    let mut reused = SseParser::new();
    let first = run(&mut reused, bytes, &cuts);
    let second = run(&mut reused, bytes, &cuts);
    prop_assert_eq!(first, second);
    Ok(())
}

proptest! {
    #[test]
    fn arbitrary_bytes_any_split_same_events(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
        raw_cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        check_split_invariance(&bytes, &raw_cuts)?;
    }

    #[test]
    fn sse_shaped_bytes_any_split_same_events(
        bytes in sse_ish(),
        raw_cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        check_split_invariance(&bytes, &raw_cuts)?;
    }

    /// With a small event limit, the oversized-event path runs on every input. Where the
    /// limit trips depends on what has arrived, so only "no panic, and the parser stays
    /// usable" is asserted.
    #[test]
    fn small_event_limit_never_panics(
        bytes in sse_ish(),
        raw_cuts in prop::collection::vec(any::<usize>(), 0..12),
        limit in 0usize..64,
    ) {
        let mut parser = SseParser::with_max_event_bytes(limit);
        let cuts = cuts_for(bytes.len(), &raw_cuts);
        let _ = run(&mut parser, &bytes, &cuts);
        // After finish the parser starts clean: a small, valid event still comes through
        // when it fits the limit.
        let (out, tail) = run(&mut parser, b"data:\n\n", &[]);
        prop_assert!(tail.is_clean());
        prop_assert_eq!(out.len(), 1);
    }
}
