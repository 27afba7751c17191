//! The unit a workload produces: one request to send.

use serde::{Deserialize, Serialize};

use crate::images::ImageInput;

/// One request of a workload. Prompts are plain text; a client talking to a chat
/// endpoint wraps the prompt in a single user message, as vLLM's benchmark does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestSpec {
    /// Position in the workload, `0..n`; unique within a run.
    pub id: u64,
    /// The prompt text.
    pub prompt: String,
    /// Number of tokens of `prompt` under the workload's tokenizer (no special tokens).
    pub prompt_tokens: u64,
    /// Output length to ask for (`max_tokens`), or `None` to leave it to the server.
    pub max_tokens: Option<u64>,
    /// Leading tokens of the prompt that are meant to be reused: the shared prefix of a
    /// random workload, or the blocks a trace says an earlier request already sent.
    /// Zero when the prompt is unique from its first token.
    pub prefix_tokens: u64,
    /// Images sent after the prompt text in the same user message (`random-mm`, datasets
    /// with images); their tokens are part of `prompt_tokens` once counted for a model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageInput>,
}

impl RequestSpec {
    /// Counts each image's tokens with `tokens(width, height)` and adds them to
    /// `prompt_tokens`, so the request's expected prompt length is text and images. Counting
    /// again replaces the earlier count.
    pub fn count_image_tokens(&mut self, tokens: impl Fn(u32, u32) -> u64) {
        let before = self.image_tokens();
        for img in &mut self.images {
            img.tokens = tokens(img.width, img.height);
        }
        self.prompt_tokens =
            self.prompt_tokens - before.min(self.prompt_tokens) + self.image_tokens();
    }

    /// Prompt tokens of the images (0 for a text-only request).
    pub fn image_tokens(&self) -> u64 {
        self.images.iter().map(|i| i.tokens).sum()
    }

    /// What a record says of the request's images; `None` for a text-only request.
    pub fn image_usage(&self) -> Option<servebench_metrics::ImageUsage> {
        (!self.images.is_empty()).then(|| servebench_metrics::ImageUsage {
            count: u32::try_from(self.images.len()).unwrap_or(u32::MAX),
            tokens: self.image_tokens(),
        })
    }
}

/// `count` requests taken from `base` in order, wrapping around as often as needed
/// (for runs bounded by duration rather than count); ids are renumbered `0..count`.
/// Returns an empty list when `base` is empty.
pub fn cycle(base: &[RequestSpec], count: usize) -> Vec<RequestSpec> {
    if base.is_empty() {
        return Vec::new();
    }
    (0..count)
        .map(|i| RequestSpec {
            id: i as u64,
            ..base[i % base.len()].clone()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(id: u64, prompt: &str) -> RequestSpec {
        RequestSpec {
            images: Vec::new(),
            id,
            prompt: prompt.to_owned(),
            prompt_tokens: 1,
            max_tokens: Some(3),
            prefix_tokens: 0,
        }
    }

    #[test]
    fn cycle_wraps_and_renumbers() {
        let base = vec![spec(0, "a"), spec(1, "b")];
        let out = cycle(&base, 5);
        let prompts: Vec<&str> = out.iter().map(|r| r.prompt.as_str()).collect();
        assert_eq!(prompts, ["a", "b", "a", "b", "a"]);
        assert_eq!(
            out.iter().map(|r| r.id).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4]
        );
        assert!(cycle(&[], 3).is_empty());
    }
}
