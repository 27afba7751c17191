//! Errors of the wire crate.

/// How many characters of an offending chunk an error message quotes.
const EXCERPT_CHARS: usize = 120;

/// A wire-level problem: a chunk or body that is not what the protocol says.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// A streamed chunk is not the expected JSON.
    #[error("malformed chunk ({source}): {excerpt}")]
    MalformedChunk {
        /// The JSON error (with line and column).
        source: serde_json::Error,
        /// The start of the chunk, for the failure record.
        excerpt: String,
    },
    /// A request or response body could not be (de)serialized.
    #[error("invalid JSON body: {0}")]
    Json(#[from] serde_json::Error),
    /// `--extra-body` (or a similar merge source) is not a JSON object.
    #[error("extra body must be a JSON object, got {0}")]
    ExtraBodyNotObject(&'static str),
    /// A completions `prompt` that this tool cannot serve (e.g. a batch of several prompts).
    #[error("unsupported prompt: {0}")]
    Prompt(String),
}

impl WireError {
    pub(crate) fn malformed(source: serde_json::Error, data: &str) -> Self {
        let mut excerpt: String = data.chars().take(EXCERPT_CHARS).collect();
        if excerpt.len() < data.len() {
            excerpt.push('…');
        }
        WireError::MalformedChunk { source, excerpt }
    }
}
