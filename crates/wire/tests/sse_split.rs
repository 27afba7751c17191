//! Property: however a serialized event stream is cut into pieces, the parser yields exactly
//! the events that were serialized.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use servebench_wire::sse::{SseEvent, SseParser};

#[derive(Debug, Clone, PartialEq, Eq)]
struct Ev {
    data: String,
    event: Option<String>,
    id: Option<String>,
}

#[derive(Debug, Clone)]
struct GenEvent {
    data_lines: Vec<String>,
    event: Option<String>,
    id: Option<String>,
    comments_before: usize,
    unknown_field: bool,
}

/// Field text: no CR, LF or NUL; may start with spaces or colons and hold multi-byte chars.
fn text() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[ :a-zé✓{}\"\\[\\]0-9,.😀]{0,12}").unwrap()
}

fn gen_event() -> impl Strategy<Value = GenEvent> {
    (
        prop::collection::vec(text(), 1..4),
        prop::option::of(text()),
        prop::option::of(text()),
        0usize..3,
        any::<bool>(),
    )
        .prop_map(
            |(data_lines, event, id, comments_before, unknown_field)| GenEvent {
                data_lines,
                event,
                id,
                comments_before,
                unknown_field,
            },
        )
}

/// Serialize events with per-line random terminators; return bytes and the expected events.
fn serialize(events: &[GenEvent], endings: &[u8], bom: bool) -> (Vec<u8>, Vec<Ev>) {
    let mut lines: Vec<String> = Vec::new();
    let mut expected = Vec::new();
    let mut last_id = String::new();
    for ev in events {
        for c in 0..ev.comments_before {
            lines.push(format!(":comment {c}"));
        }
        if let Some(t) = &ev.event {
            lines.push(format!("event: {t}"));
        }
        if ev.unknown_field {
            lines.push("retry: 1000".to_owned());
            lines.push("x-unknown".to_owned());
        }
        for (i, d) in ev.data_lines.iter().enumerate() {
            if d.is_empty() && i % 2 == 0 {
                lines.push("data".to_owned()); // field without colon
            } else if !d.starts_with(' ') && i % 2 == 1 {
                lines.push(format!("data:{d}"));
            } else {
                lines.push(format!("data: {d}"));
            }
        }
        if let Some(id) = &ev.id {
            lines.push(format!("id: {id}"));
            last_id.clone_from(id);
        }
        lines.push(String::new());
        expected.push(Ev {
            data: ev.data_lines.join("\n"),
            event: ev.event.clone().filter(|e| !e.is_empty()),
            id: (!last_id.is_empty()).then(|| last_id.clone()),
        });
    }
    let mut out = Vec::new();
    if bom {
        out.extend_from_slice(b"\xEF\xBB\xBF");
    }
    let mut prev_cr = false;
    for (i, line) in lines.iter().enumerate() {
        out.extend_from_slice(line.as_bytes());
        let mut ending: &[u8] = match endings[i % endings.len()] % 3 {
            0 => b"\n",
            1 => b"\r\n",
            _ => b"\r",
        };
        // "\r" then an empty line ended by "\n" would read as one CRLF: keep lines distinct.
        if prev_cr && line.is_empty() && ending == b"\n" {
            ending = b"\r\n";
        }
        prev_cr = ending == b"\r";
        out.extend_from_slice(ending);
    }
    (out, expected)
}

fn to_ev(e: SseEvent<'_>) -> Ev {
    Ev {
        data: e.data.to_owned(),
        event: e.event.map(str::to_owned),
        id: e.id.map(str::to_owned),
    }
}

fn parse_pieces(bytes: &[u8], cuts: &[usize]) -> (Vec<Ev>, bool) {
    let mut parser = SseParser::new();
    let mut out = Vec::new();
    let mut start = 0;
    for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
        let cut = cut.clamp(start, bytes.len());
        parser
            .feed(&bytes[start..cut], |ev| out.push(to_ev(ev)))
            .unwrap();
        start = cut;
    }
    let clean = !parser.finish();
    (out, clean)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_split_yields_the_same_events(
        events in prop::collection::vec(gen_event(), 0..8),
        endings in prop::collection::vec(any::<u8>(), 1..16),
        bom in any::<bool>(),
        raw_cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let (bytes, expected) = serialize(&events, &endings, bom);
        let (whole, clean) = parse_pieces(&bytes, &[]);
        prop_assert_eq!(&whole, &expected);
        prop_assert!(clean);

        let mut cuts: Vec<usize> = raw_cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let (pieces, clean) = parse_pieces(&bytes, &cuts);
        prop_assert_eq!(&pieces, &expected);
        prop_assert!(clean);
    }

    #[test]
    fn byte_at_a_time_matches(
        events in prop::collection::vec(gen_event(), 0..4),
        endings in prop::collection::vec(any::<u8>(), 1..8),
    ) {
        let (bytes, expected) = serialize(&events, &endings, false);
        let cuts: Vec<usize> = (1..bytes.len()).collect();
        let (pieces, clean) = parse_pieces(&bytes, &cuts);
        prop_assert_eq!(pieces, expected);
        prop_assert!(clean);
    }
}

#[test]
fn realistic_vllm_stream_split_everywhere() {
    let chunk = |t: &str| {
        format!(
            "data: {{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\
             \"choices\":[{{\"index\":0,\"text\":\"{t}\",\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
        )
    };
    let mut stream = String::new();
    for t in [" a", " b", " ć", ""] {
        stream.push_str(&chunk(t));
    }
    stream.push_str("data: [DONE]\n\n");
    let bytes = stream.as_bytes();
    for cut in 0..=bytes.len() {
        let (events, clean) = parse_pieces(bytes, &[cut]);
        assert_eq!(events.len(), 5, "cut at {cut}");
        assert_eq!(events[4].data, "[DONE]");
        assert!(clean);
    }
}
