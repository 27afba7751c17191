//! OpenAI request bodies as the simulator reads them (docs/simulator.md §7), prompt token counting
//! with the shared tokenizer and the built-in chat template, and vLLM-style validation.

use serde::Deserialize;
use servebench_tokenizer::Tokenizer;
use servebench_wire::openai::{
    ChatCompletionRequest, ChatMessage, CompletionRequest, MessageContent, Prompt, SinglePrompt,
    StreamOptions,
};
use servebench_wire::protocol::DEFAULT_COMPLETION_MAX_TOKENS;

use super::error::ApiError;
use super::stop::StopSpec;

/// Chat template token ids: every tokenizer has ids this small, and their identity only matters
/// for prefix hashing (a repeated conversation must hash the same).
const BOS: u32 = 1;
const HEADER_START: u32 = 2;
const HEADER_END: u32 = 3;
const END_OF_TURN: u32 = 4;

/// Which endpoint a request came to.
pub use servebench_wire::EndpointKind as Endpoint;

/// A generation request as it came in: wire's body of the endpoint it came to.
#[derive(Debug)]
pub enum GenerateBody {
    /// `/v1/completions`.
    Completions(CompletionRequest),
    /// `/v1/chat/completions`.
    Chat(ChatCompletionRequest),
}

/// The fields both endpoints share, borrowed from either body.
struct Common<'a> {
    n: Option<i64>,
    min_tokens: Option<i64>,
    ignore_eos: Option<bool>,
    stream: Option<bool>,
    stream_options: Option<&'a StreamOptions>,
    seed: Option<i64>,
    cache_salt: Option<&'a String>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<i64>,
    min_p: Option<f64>,
    /// Fields the wire types do not name (`stop`, `stop_token_ids`, …).
    extra: &'a serde_json::Map<String, serde_json::Value>,
}

impl GenerateBody {
    /// Parses the body of a request to `endpoint`.
    pub fn parse(endpoint: Endpoint, bytes: &[u8]) -> Result<Self, ApiError> {
        Ok(match endpoint {
            Endpoint::Completions => GenerateBody::Completions(parse_json(bytes)?),
            Endpoint::Chat | Endpoint::Responses => GenerateBody::Chat(parse_json(bytes)?),
        })
    }

    /// The endpoint the body came to.
    pub fn endpoint(&self) -> Endpoint {
        match self {
            GenerateBody::Completions(_) => Endpoint::Completions,
            GenerateBody::Chat(_) => Endpoint::Chat,
        }
    }

    /// The requested model, if named.
    pub fn model(&self) -> Option<&str> {
        match self {
            GenerateBody::Completions(b) => b.model.as_deref(),
            GenerateBody::Chat(b) => b.model.as_deref(),
        }
    }

    fn common(&self) -> Common<'_> {
        // The two bodies name these fields alike but are different types.
        macro_rules! common {
            ($b:expr) => {
                Common {
                    n: $b.n,
                    min_tokens: $b.min_tokens,
                    ignore_eos: $b.ignore_eos,
                    stream: $b.stream,
                    stream_options: $b.stream_options.as_ref(),
                    seed: $b.seed,
                    cache_salt: $b.cache_salt.as_ref(),
                    temperature: $b.temperature,
                    top_p: $b.top_p,
                    top_k: $b.top_k,
                    min_p: $b.min_p,
                    extra: &$b.extra,
                }
            };
        }
        match self {
            GenerateBody::Completions(b) => common!(b),
            GenerateBody::Chat(b) => common!(b),
        }
    }
}

/// A request that passed validation.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidRequest {
    pub prompt: Vec<u32>,
    pub max_tokens: u32,
    pub min_tokens: u32,
    pub ignore_eos: bool,
    pub stream: bool,
    pub include_usage: bool,
    pub continuous_usage: bool,
    pub seed: Option<u64>,
    pub cache_salt: Option<String>,
    /// Choices to generate (`n`), each an engine request of its own.
    pub n: u32,
    /// `stop` / `stop_token_ids`, if any.
    pub stop: Option<StopSpec>,
}

/// The most choices (`n`) one request may ask for. vLLM sets no limit, but every choice is an
/// engine request holding a copy of the prompt, so an unbounded `n` would let one request
/// take unbounded memory; beyond this it is a 400.
pub const MAX_N: i64 = 128;

/// What validation needs to know about the server.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Prompt plus output must fit this.
    pub max_model_len: u32,
    /// Prompt token ids must be below this.
    pub vocab_size: u32,
}

/// Parses a JSON body, mapping syntax and type errors to 400.
pub fn parse_json<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("Invalid request body: {e}"), None))
}

fn role_id(role: &str) -> u32 {
    match role {
        "system" | "developer" => 5,
        "user" => 6,
        "assistant" => 7,
        "tool" => 8,
        _ => 9,
    }
}

/// Prompt ids of a chat conversation under the built-in template: 1 token, then 4 per message
/// around its content, then 3 for the assistant header.
pub fn chat_prompt(tokenizer: &Tokenizer, messages: &[ChatMessage]) -> Vec<u32> {
    let mut ids = vec![BOS];
    for m in messages {
        ids.extend([HEADER_START, role_id(&m.role), HEADER_END]);
        match &m.content {
            Some(MessageContent::Text(t)) => ids.extend(tokenizer.encode(t)),
            Some(MessageContent::Parts(parts)) => {
                for p in parts {
                    if let Some(t) = &p.text {
                        ids.extend(tokenizer.encode(t));
                    }
                }
            }
            None => {}
        }
        ids.push(END_OF_TURN);
    }
    ids.extend([HEADER_START, role_id("assistant"), HEADER_END]);
    ids
}

fn token_ids(raw: &[u32], limits: Limits) -> Result<Vec<u32>, ApiError> {
    raw.iter()
        .map(|&id| {
            if id < limits.vocab_size {
                Ok(id)
            } else {
                Err(ApiError::bad_request(
                    format!("Token id {id} is out of vocabulary"),
                    Some("prompt"),
                ))
            }
        })
        .collect()
}

/// Prompt ids of a `prompt` field.
pub fn completion_prompt(
    tokenizer: &Tokenizer,
    prompt: &Prompt,
    limits: Limits,
) -> Result<Vec<u32>, ApiError> {
    match prompt.single() {
        Ok(SinglePrompt::Text(t)) => Ok(tokenizer.encode(t)),
        Ok(SinglePrompt::Tokens(ids)) => token_ids(ids, limits),
        Err(_) => Err(ApiError::bad_request(
            "Only a single prompt per request is supported; send one request per prompt.",
            Some("prompt"),
        )),
    }
}

/// The requested output length and the field it came from, still as sent: a value too large
/// for the context is answered with the context-length error, whatever its size.
fn requested_max_tokens(body: &GenerateBody) -> Result<Option<i64>, ApiError> {
    let (value, name) = match body {
        GenerateBody::Completions(b) => (b.max_tokens, "max_tokens"),
        GenerateBody::Chat(b) => match b.max_completion_tokens {
            Some(v) => (Some(v), "max_completion_tokens"),
            None => (b.max_tokens, "max_tokens"),
        },
    };
    match value {
        Some(x) if x < 1 => Err(ApiError::bad_request(
            format!("{name} must be at least 1, got {x}."),
            Some(name),
        )),
        v => Ok(v),
    }
}

/// vLLM's `SamplingParams` range checks, with its messages. The simulator ignores these values
/// but refuses what vLLM refuses, so a client mistake shows here as it would in production.
fn check_sampling(common: &Common<'_>) -> Result<(), ApiError> {
    if let Some(t) = common.temperature {
        if !(t >= 0.0 && t.is_finite()) {
            return Err(ApiError::bad_request(
                format!("temperature must be non-negative, got {t}."),
                Some("temperature"),
            ));
        }
    }
    if let Some(p) = common.top_p {
        if !(p > 0.0 && p <= 1.0) {
            return Err(ApiError::bad_request(
                format!("top_p must be in (0, 1], got {p}."),
                Some("top_p"),
            ));
        }
    }
    if let Some(k) = common.top_k {
        if k < -1 {
            return Err(ApiError::bad_request(
                format!("top_k must be 0 (disable), or at least 1, got {k}."),
                Some("top_k"),
            ));
        }
    }
    if let Some(p) = common.min_p {
        if !(0.0..=1.0).contains(&p) {
            return Err(ApiError::bad_request(
                format!("min_p must be in [0, 1], got {p}."),
                Some("min_p"),
            ));
        }
    }
    Ok(())
}

/// Validates a generation request and counts its prompt, as vLLM does.
pub fn validate(
    body: &GenerateBody,
    tokenizer: &Tokenizer,
    limits: Limits,
) -> Result<ValidRequest, ApiError> {
    let endpoint = body.endpoint();
    let common = body.common();
    let n = match common.n {
        Some(n) if n < 1 => {
            return Err(ApiError::bad_request(
                format!("n must be at least 1, got {n}."),
                Some("n"),
            ))
        }
        Some(n) if n > MAX_N => {
            return Err(ApiError::bad_request(
                format!("n must be at most {MAX_N} (the simulator's limit), got {n}."),
                Some("n"),
            ))
        }
        // In 1..=MAX_N here.
        Some(n) => u32::try_from(n).unwrap_or(1),
        None => 1,
    };
    check_sampling(&common)?;
    let stop = StopSpec::from_extra(common.extra)?;
    let requested = requested_max_tokens(body)?;
    let min_tokens = match common.min_tokens {
        Some(m) if m < 0 => {
            return Err(ApiError::bad_request(
                format!("min_tokens must be greater than or equal to 0, got {m}."),
                Some("min_tokens"),
            ))
        }
        m => m.unwrap_or(0),
    };
    let prompt = match body {
        GenerateBody::Completions(b) => match &b.prompt {
            Some(p) => completion_prompt(tokenizer, p, limits)?,
            None => {
                return Err(ApiError::bad_request(
                    "Field `prompt` is required.",
                    Some("prompt"),
                ))
            }
        },
        GenerateBody::Chat(b) => match &b.messages {
            m if !m.is_empty() => chat_prompt(tokenizer, m),
            _ => {
                return Err(ApiError::bad_request(
                    "Field `messages` must be a non-empty list.",
                    Some("messages"),
                ))
            }
        },
    };
    if prompt.is_empty() {
        return Err(ApiError::bad_request(
            "The prompt cannot be empty.",
            Some("prompt"),
        ));
    }
    let max_model_len = limits.max_model_len;
    let input = u32::try_from(prompt.len()).unwrap_or(u32::MAX);
    if input >= max_model_len {
        return Err(ApiError::bad_request(
            format!(
                "This model's maximum context length is {max_model_len} tokens. However, your request has \
                 {input} input tokens. Please reduce the length of the input messages."
            ),
            Some("input_tokens"),
        ));
    }
    let max_tokens: i64 = match (requested, endpoint) {
        (Some(v), _) => v,
        (None, Endpoint::Completions) => DEFAULT_COMPLETION_MAX_TOKENS as i64,
        (None, Endpoint::Chat | Endpoint::Responses) => i64::from(max_model_len - input),
    };
    // In i128 so that no i64 a client sends can overflow the sum.
    let total = i128::from(input) + i128::from(max_tokens);
    if total > i128::from(max_model_len) {
        let (what, reduce) = match endpoint {
            Endpoint::Completions => ("prompt", "prompt or completion"),
            Endpoint::Chat | Endpoint::Responses => ("messages", "messages or completion"),
        };
        return Err(ApiError::bad_request(
            format!(
                "This model's maximum context length is {max_model_len} tokens. However, you requested {} tokens \
                 ({input} in the {what}, {max_tokens} in the completion). Please reduce the length of the {reduce}.",
                total
            ),
            Some("max_tokens"),
        ));
    }
    // Bounded by max_model_len (checked above), so nothing downstream sizes by a client's number.
    let max_tokens = u32::try_from(max_tokens).unwrap_or(max_model_len);
    if min_tokens > i64::from(max_tokens) {
        return Err(ApiError::bad_request(
            format!("min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}."),
            Some("min_tokens"),
        ));
    }
    let options = common.stream_options;
    Ok(ValidRequest {
        prompt,
        max_tokens,
        // At most max_tokens here.
        min_tokens: u32::try_from(min_tokens).unwrap_or(max_tokens),
        ignore_eos: common.ignore_eos.unwrap_or(false),
        stream: common.stream.unwrap_or(false),
        include_usage: options.and_then(|o| o.include_usage).unwrap_or(false),
        continuous_usage: options
            .and_then(|o| o.continuous_usage_stats)
            .unwrap_or(false),
        // Negative seeds are valid in vLLM; their bit pattern keys the stream.
        seed: common.seed.map(|s| s as u64),
        cache_salt: common.cache_salt.cloned(),
        n,
        stop,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_model_len: 100,
        vocab_size: 1000,
    };

    fn body(endpoint: Endpoint, json: &str) -> GenerateBody {
        GenerateBody::parse(endpoint, json.as_bytes()).unwrap()
    }

    #[test]
    fn chat_template_adds_one_plus_four_per_message_plus_three() {
        let tok = Tokenizer::builtin();
        let b = body(
            Endpoint::Chat,
            r#"{"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":[{"type":"text","text":"Hello there"}]}]}"#,
        );
        let v = validate(
            &b,
            &tok,
            Limits {
                max_model_len: 1000,
                vocab_size: 300_000,
            },
        )
        .unwrap();
        let content = tok.count("You are terse.") + tok.count("Hello there");
        assert_eq!(v.prompt.len(), 1 + 2 * 4 + 3 + content);
        // Chat defaults max_tokens to the rest of the context.
        assert_eq!(v.max_tokens as usize, 1000 - v.prompt.len());
    }

    #[test]
    fn completion_prompt_forms() {
        let tok = Tokenizer::builtin();
        let v = validate(
            &body(Endpoint::Completions, r#"{"prompt":[5,6,7]}"#),
            &tok,
            LIMITS,
        )
        .unwrap();
        assert_eq!((v.prompt, v.max_tokens), (vec![5, 6, 7], 16));
        let v = validate(
            &body(Endpoint::Completions, r#"{"prompt":[[9]],"max_tokens":3}"#),
            &tok,
            LIMITS,
        )
        .unwrap();
        assert_eq!((v.prompt, v.max_tokens), (vec![9], 3));
        let v = validate(
            &body(Endpoint::Completions, r#"{"prompt":["hello world"]}"#),
            &tok,
            LIMITS,
        )
        .unwrap();
        assert_eq!(v.prompt, tok.encode("hello world"));
        let e = validate(
            &body(Endpoint::Completions, r#"{"prompt":["a","b"]}"#),
            &tok,
            LIMITS,
        )
        .unwrap_err();
        assert_eq!(e.param, Some("prompt"));
    }

    #[test]
    fn vllm_rejections() {
        let tok = Tokenizer::builtin();
        let check = |ep, json: &str, needle: &str| {
            let e = GenerateBody::parse(ep, json.as_bytes())
                .and_then(|b| validate(&b, &tok, LIMITS))
                .unwrap_err();
            assert_eq!(e.status.as_u16(), 400);
            assert!(e.message.contains(needle), "{json}: {}", e.message);
        };
        check(Endpoint::Completions, r#"{"prompt":""}"#, "cannot be empty");
        check(Endpoint::Completions, r#"{"prompt":[]}"#, "cannot be empty");
        check(
            Endpoint::Completions,
            r#"{"prompt":[1,1000]}"#,
            "Token id 1000 is out of vocabulary",
        );
        check(
            Endpoint::Completions,
            r#"{"prompt":[-1]}"#,
            "out of vocabulary",
        );
        check(
            Endpoint::Completions,
            r#"{"prompt":[1],"n":129}"#,
            "n must be at most 128",
        );
        check(
            Endpoint::Completions,
            r#"{"prompt":[1],"stop":[1]}"#,
            "`stop` must be a string or a list of strings.",
        );
        check(
            Endpoint::Completions,
            r#"{"prompt":[1,2,3,4,5,6,7,8,9,10],"max_tokens":91}"#,
            "maximum context length is 100 tokens. However, you requested 101 tokens (10 in the prompt, 91 in the completion)",
        );
        check(
            Endpoint::Completions,
            &format!(r#"{{"prompt":{:?}}}"#, vec![1; 100]),
            "your request has 100 input tokens",
        );
        check(
            Endpoint::Completions,
            r#"{"prompt":[1],"max_tokens":0}"#,
            "at least 1",
        );
        check(
            Endpoint::Completions,
            r#"{"prompt":[1],"max_tokens":4,"min_tokens":5}"#,
            "min_tokens",
        );
        check(Endpoint::Chat, r#"{"messages":[]}"#, "messages");
        check(Endpoint::Completions, r#"{"messages":[]}"#, "prompt");
        check(
            Endpoint::Completions,
            r#"{"prompt":[1],"max_tokens":-3}"#,
            "max_tokens must be at least 1, got -3.",
        );
        check(
            Endpoint::Chat,
            r#"{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":0}"#,
            "max_completion_tokens must be at least 1, got 0.",
        );
        check(
            Endpoint::Completions,
            r#"{"prompt":[1],"n":0}"#,
            "n must be at least 1, got 0.",
        );
        check(
            Endpoint::Completions,
            r#"{"prompt":[1],"min_tokens":-1}"#,
            "min_tokens must be greater than or equal to 0, got -1.",
        );
        check(
            Endpoint::Completions,
            r#"{"prompt":[1],"temperature":-1}"#,
            "temperature must be non-negative, got -1.",
        );
        check(
            Endpoint::Completions,
            r#"{"prompt":[1],"top_p":0}"#,
            "top_p must be in (0, 1]",
        );
        check(
            Endpoint::Completions,
            r#"{"prompt":[1],"top_k":-2}"#,
            "top_k must be",
        );
        check(
            Endpoint::Completions,
            r#"{"prompt":[1],"min_p":1.5}"#,
            "min_p must be in [0, 1]",
        );
    }

    #[test]
    fn max_tokens_beyond_u32_is_a_context_length_error_not_a_sign_error() {
        let tok = Tokenizer::builtin();
        for (max, total) in [
            ("4294967296", "4294967297"),
            ("9223372036854775807", "9223372036854775808"),
        ] {
            let json = format!(r#"{{"prompt":[1],"max_tokens":{max}}}"#);
            let e = validate(&body(Endpoint::Completions, &json), &tok, LIMITS).unwrap_err();
            assert_eq!(e.status.as_u16(), 400);
            assert_eq!(e.param, Some("max_tokens"));
            assert!(
                e.message.contains(&format!(
                    "you requested {total} tokens (1 in the prompt, {max} in the completion)"
                )),
                "{}",
                e.message
            );
        }
        let json = r#"{"prompt":[1],"max_tokens":4,"min_tokens":4294967296}"#;
        let e = validate(&body(Endpoint::Completions, json), &tok, LIMITS).unwrap_err();
        assert!(
            e.message.contains("min_tokens must be less than or equal"),
            "{}",
            e.message
        );
    }

    #[test]
    fn chat_max_completion_tokens_wins() {
        let tok = Tokenizer::builtin();
        let b = body(
            Endpoint::Chat,
            r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":10,"max_completion_tokens":7,"stream":true,"stream_options":{"include_usage":true},"seed":-1,"temperature":0.7}"#,
        );
        let v = validate(&b, &tok, LIMITS).unwrap();
        assert_eq!(v.max_tokens, 7);
        assert!(v.stream && v.include_usage && !v.continuous_usage);
        assert_eq!(v.seed, Some(u64::MAX));
        assert_eq!((v.n, v.stop), (1, None));
    }

    #[test]
    fn n_and_stop_are_read_not_refused() {
        let tok = Tokenizer::builtin();
        let b = body(
            Endpoint::Completions,
            r#"{"prompt":[1],"n":3,"stop":["x"," y"],"stop_token_ids":[9]}"#,
        );
        let v = validate(&b, &tok, LIMITS).unwrap();
        assert_eq!(v.n, 3);
        let stop = v.stop.unwrap();
        assert_eq!(stop.strings, vec!["x", " y"]);
        assert_eq!(stop.token_ids, vec![9]);
    }

    #[test]
    fn malformed_json_is_a_400() {
        let e = parse_json::<CompletionRequest>(b"{\"prompt\": ").unwrap_err();
        assert_eq!(e.status.as_u16(), 400);
        let e = parse_json::<CompletionRequest>(b"{\"max_tokens\": \"ten\"}").unwrap_err();
        assert_eq!(e.status.as_u16(), 400);
    }
}
