//! servebench wire: the OpenAI-compatible request/response types shared by the client and the
//! simulated engine, the incremental SSE parser, and the client's per-event chunk classifier.
//!
//! - [`sse`]: bytes → events, for any split of the byte stream.
//! - [`chunk`]: one event's `data` → is it a token, what text, which usage (docs/metrics.md rules).
//! - [`protocol`]: constants the client and the servers share (defaults, request ids, error
//!   types).
//! - [`render`]: SSE chunks in vLLM's shapes, for the servers that stream them.
//! - [`openai`]: serde types for `/v1/completions`, `/v1/chat/completions`, `/v1/models` and
//!   error bodies.
//! - [`pooling`]: serde types for `/v1/embeddings` and `/v1/rerank`.

pub mod chunk;
mod error;
pub mod image;
pub mod openai;
pub mod pooling;
pub mod printable;
pub mod protocol;
pub mod render;
pub mod sse;

pub use chunk::{classify, is_done, ChunkInfo, EndpointKind};
pub use error::WireError;
pub use render::{ChunkHead, ChunkRenderer, ChunkStyle};
pub use sse::{SseError, SseEvent, SseParser, SseTail};
