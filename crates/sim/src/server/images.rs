//! Images in chat messages: each `image_url` part costs the served model's image tokens
//! (`servebench_roofline::VisionSpec`, the rule the client counts with), charged as prefill
//! and reported in `usage.prompt_tokens`. A text-only model refuses them with a 400, as vLLM
//! does.

use servebench_roofline::VisionSpec;
use servebench_wire::image::{data_url_size, image_urls};
use xxhash_rust::xxh3::xxh3_64;

use super::error::ApiError;
use super::request::{GenerateBody, Limits, ValidRequest};

/// Adds the prompt tokens of the request's images to `req.prompt`. An image's token ids
/// come from a hash of its bytes, so a repeated image hits the prefix cache and two different
/// ones do not (vLLM hashes image content into its block hashes the same way).
pub fn charge(
    body: &GenerateBody,
    req: &mut ValidRequest,
    vision: Option<&VisionSpec>,
    served_name: &str,
    limits: Limits,
) -> Result<(), ApiError> {
    let GenerateBody::Chat(chat) = body else {
        return Ok(());
    };
    let urls = image_urls(&chat.messages);
    if urls.is_empty() {
        return Ok(());
    }
    let Some(vision) = vision else {
        return Err(ApiError::bad_request(
            format!("{served_name} is not a multimodal model: it does not accept image inputs"),
            Some("messages"),
        ));
    };
    let vocab = u64::from(limits.vocab_size.max(1));
    for url in urls {
        let (w, h) = data_url_size(url)
            .map_err(|e| ApiError::bad_request(format!("Invalid image: {e}"), Some("messages")))?;
        let tokens = vision.image_tokens(w, h);
        let seed = xxh3_64(url.as_bytes());
        req.prompt.extend((0..tokens).map(|k| {
            let mixed = seed.wrapping_add(k.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            (mixed % vocab) as u32
        }));
    }
    let input = u32::try_from(req.prompt.len()).unwrap_or(u32::MAX);
    let max_model_len = limits.max_model_len;
    let total = u64::from(input) + u64::from(req.max_tokens);
    if input >= max_model_len || total > u64::from(max_model_len) {
        return Err(ApiError::bad_request(
            format!(
                "This model's maximum context length is {max_model_len} tokens. However, you requested {total} tokens \
                 ({input} in the messages, images included, {} in the completion). Please reduce the length of the \
                 messages or completion.",
                req.max_tokens
            ),
            Some("max_tokens"),
        ));
    }
    Ok(())
}
