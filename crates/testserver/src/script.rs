//! What the server does with each request: pacing, output length, chunk shapes and faults.

use std::time::Duration;

use servebench_wire::protocol::DEFAULT_COMPLETION_MAX_TOKENS;

/// Token texts, cycled: short ASCII words that need no JSON escaping.
pub(crate) const WORDS: [&str; 16] = [
    " the", " of", " and", " to", " in", " a", " is", " that", " for", " it", " as", " was",
    " with", " be", " by", " on",
];

/// How many tokens each response carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputLength {
    /// Always this many, whatever the request asks.
    Fixed(u64),
    /// The request's `max_completion_tokens` or `max_tokens`; `default` when it has neither.
    FromRequest {
        /// Used when the request names no limit.
        default: u64,
    },
}

/// Which chunk shapes a generation request is answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChunkShape {
    /// Chat chunks on a path containing `chat`, completions chunks elsewhere.
    #[default]
    ByPath,
    /// Always `text_completion` chunks.
    Completions,
    /// Always `chat.completion.chunk` chunks (with the role-only opening chunk).
    Chat,
}

/// Something going wrong on purpose, for one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// Answer with this HTTP status and a vLLM error body carrying `message`.
    HttpStatus {
        /// The status code (4xx or 5xx).
        status: u16,
        /// The error message in the body.
        message: String,
    },
    /// Answer with this HTTP status and an empty body (a proxy or a crashing server's answer).
    BareStatus {
        /// The status code (4xx or 5xx).
        status: u16,
    },
    /// Send the status line and some headers, then nothing more: the head never ends.
    HeadersNeverFinish,
    /// Replace token event `at_event` (0-based) with one whose data holds bytes that are not
    /// UTF-8; the rest of the stream is normal.
    NonUtf8 {
        /// Index of the broken event.
        at_event: u32,
    },
    /// Make token event 0 one SSE event of about `bytes` bytes (a single token whose text is
    /// that long); the rest of the stream is normal.
    HugeChunk {
        /// Length of the token text.
        bytes: usize,
    },
    /// Reset the TCP connection (RST) after this many token events.
    Reset {
        /// Token events written before the reset.
        after_events: u32,
    },
    /// End the response cleanly after this many token events, with no `finish_reason`, usage
    /// or `[DONE]`.
    Truncate {
        /// Token events written before the end.
        after_events: u32,
    },
    /// Replace token event `at_event` (0-based) with a chunk that is not valid JSON; the rest
    /// of the stream is normal.
    Malformed {
        /// Index of the broken event.
        at_event: u32,
    },
    /// Stop sending for `duration` after this many token events, then go on (the remaining
    /// events are then overdue and follow at once).
    Stall {
        /// Token events written before the stall.
        after_events: u32,
        /// How long nothing is sent.
        duration: Duration,
    },
    /// After this many token events send a vLLM in-stream error object, then `[DONE]`.
    StreamError {
        /// Token events written before the error.
        after_events: u32,
        /// The error message.
        message: String,
    },
    /// A stream without any token: (chat) the role chunk, a closing chunk with
    /// `finish_reason`, usage if asked, `[DONE]`.
    Empty,
}

impl Fault {
    /// A short stable name, as kept in the log.
    pub fn name(&self) -> &'static str {
        match self {
            Fault::HttpStatus { .. } => "http_status",
            Fault::BareStatus { .. } => "bare_status",
            Fault::HeadersNeverFinish => "headers_never_finish",
            Fault::NonUtf8 { .. } => "non_utf8",
            Fault::HugeChunk { .. } => "huge_chunk",
            Fault::Reset { .. } => "reset",
            Fault::Truncate { .. } => "truncate",
            Fault::Malformed { .. } => "malformed",
            Fault::Stall { .. } => "stall",
            Fault::StreamError { .. } => "stream_error",
            Fault::Empty => "empty",
        }
    }
}

/// Which requests a fault hits.
#[derive(Debug, Clone, PartialEq)]
pub enum Trigger {
    /// The generation request with this arrival index (0-based, in the server's arrival order).
    Index(u64),
    /// The request whose `x-request-id` header equals this value.
    RequestId(String),
    /// Each request with this probability, drawn from the script's seed and the arrival index
    /// (the same seed hits the same indices).
    Probability(f64),
}

/// A fault and the requests it hits. The first matching rule of a script wins.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultRule {
    /// Which requests.
    pub trigger: Trigger,
    /// What happens to them.
    pub fault: Fault,
}

/// What the server does with each generation request.
#[derive(Debug, Clone)]
pub struct Script {
    /// From the arrival of the request to the first token.
    pub first_token_delay: Duration,
    /// Between consecutive tokens.
    pub inter_token_interval: Duration,
    /// Tokens per response.
    pub output: OutputLength,
    /// Tokens per SSE event (the last event may carry fewer); at least 1.
    pub tokens_per_event: u32,
    /// Chunk shapes.
    pub shape: ChunkShape,
    /// The `model` field of the chunks and of `/v1/models`.
    pub model: String,
    /// The `root` of the model in `/v1/models` (vLLM: the path behind the served name);
    /// `None` repeats `model`.
    pub model_root: Option<String>,
    /// Prometheus text served at `/metrics`: the first before any generation request has
    /// arrived, the second from then on. `None`: no `/metrics` (404).
    pub metrics: Option<(String, String)>,
    /// Faults, first match wins.
    pub faults: Vec<FaultRule>,
    /// Seed of [`Trigger::Probability`].
    pub seed: u64,
    /// Keep every token event's write instant in the log (off for long ingest runs, where the
    /// log would grow by 8 bytes per token).
    pub log_events: bool,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            first_token_delay: Duration::ZERO,
            inter_token_interval: Duration::ZERO,
            output: OutputLength::FromRequest {
                default: DEFAULT_COMPLETION_MAX_TOKENS,
            },
            tokens_per_event: 1,
            shape: ChunkShape::ByPath,
            model: "scripted-model".to_owned(),
            model_root: None,
            metrics: None,
            faults: Vec::new(),
            seed: 0,
            log_events: true,
        }
    }
}

impl Script {
    /// No delay, no interval, the request's `max_tokens`, one token per event.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the first-token delay.
    pub fn first_token_delay(mut self, d: Duration) -> Self {
        self.first_token_delay = d;
        self
    }

    /// Sets the inter-token interval.
    pub fn inter_token_interval(mut self, d: Duration) -> Self {
        self.inter_token_interval = d;
        self
    }

    /// Every response carries exactly `n` tokens.
    pub fn tokens(mut self, n: u64) -> Self {
        self.output = OutputLength::Fixed(n);
        self
    }

    /// Responses carry the request's `max_tokens` (`default` when absent).
    pub fn tokens_from_request(mut self, default: u64) -> Self {
        self.output = OutputLength::FromRequest { default };
        self
    }

    /// Sets the tokens per SSE event.
    pub fn tokens_per_event(mut self, n: u32) -> Self {
        self.tokens_per_event = n.max(1);
        self
    }

    /// Sets the chunk shapes.
    pub fn shape(mut self, shape: ChunkShape) -> Self {
        self.shape = shape;
        self
    }

    /// Sets the served model name.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// Sets the model's `root` in `/v1/models`.
    pub fn model_root(mut self, root: impl Into<String>) -> Self {
        self.model_root = Some(root.into());
        self
    }

    /// Serves `/metrics`: `before` until the first generation request arrives, then `after`.
    pub fn metrics(mut self, before: impl Into<String>, after: impl Into<String>) -> Self {
        self.metrics = Some((before.into(), after.into()));
        self
    }

    /// Adds a fault rule.
    pub fn fault(mut self, trigger: Trigger, fault: Fault) -> Self {
        self.faults.push(FaultRule { trigger, fault });
        self
    }

    /// Sets the seed of probabilistic faults.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Keeps (or not) the write instant of every token event.
    pub fn log_events(mut self, on: bool) -> Self {
        self.log_events = on;
        self
    }

    pub(crate) fn fault_for(&self, index: u64, request_id: Option<&str>) -> Option<&Fault> {
        self.faults.iter().find_map(|rule| {
            let hit = match &rule.trigger {
                Trigger::Index(i) => *i == index,
                Trigger::RequestId(id) => request_id == Some(id.as_str()),
                Trigger::Probability(p) => unit_draw(self.seed, index) < *p,
            };
            hit.then_some(&rule.fault)
        })
    }
}

/// A uniform draw in `[0, 1)` from `(seed, index)` (splitmix64): stable across runs.
fn unit_draw(seed: u64, index: u64) -> f64 {
    let mut z = seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn triggers_match_index_id_and_seeded_probability() {
        let script = Script::new()
            .fault(Trigger::RequestId("servebench-3".into()), Fault::Empty)
            .fault(Trigger::Index(5), Fault::Truncate { after_events: 0 })
            .fault(Trigger::Probability(0.25), Fault::Reset { after_events: 0 })
            .seed(9);
        assert_eq!(
            script.fault_for(0, Some("servebench-3")),
            Some(&Fault::Empty)
        );
        assert_eq!(script.fault_for(5, None).map(Fault::name), Some("truncate"));
        let hits = (1000..11_000)
            .filter(|i| script.fault_for(*i, None).is_some())
            .count();
        assert!((2200..2800).contains(&hits), "{hits} of 10000 at p = 0.25");
        let again = (1000..11_000)
            .filter(|i| script.fault_for(*i, None).is_some())
            .count();
        assert_eq!(hits, again);
    }
}
