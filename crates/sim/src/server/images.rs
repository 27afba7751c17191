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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use servebench_tokenizer::Tokenizer;
    use servebench_wire::image::{data_url, user_message_with_images};

    use super::super::request::{validate, Endpoint};
    use super::*;

    const LIMITS: Limits = Limits {
        max_model_len: 4096,
        vocab_size: 32_000,
    };

    fn png_header(w: u32, h: u32) -> Vec<u8> {
        let mut b = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
        b.extend(w.to_be_bytes());
        b.extend(h.to_be_bytes());
        b.extend([8, 2, 0, 0, 0]);
        b
    }

    fn body(urls: &[&str]) -> GenerateBody {
        let m = user_message_with_images("describe", urls.iter().copied());
        let json = serde_json::json!({"model": "m", "messages": [m], "max_tokens": 8});
        GenerateBody::parse(Endpoint::Chat, json.to_string().as_bytes()).unwrap()
    }

    fn qwen() -> VisionSpec {
        servebench_roofline::Catalog::builtin()
            .vision("Qwen/Qwen2.5-VL-7B-Instruct")
            .unwrap()
            .clone()
    }

    #[test]
    fn image_tokens_are_added_to_the_prompt() {
        let tok = Tokenizer::builtin();
        let a = data_url("image/png", &png_header(256, 256));
        let b = data_url("image/png", &png_header(1280, 720));
        let text_only = validate(&body(&[]), &tok, LIMITS).unwrap().prompt.len();
        let with = body(&[&a, &b]);
        let mut req = validate(&with, &tok, LIMITS).unwrap();
        assert_eq!(req.prompt.len(), text_only, "image parts carry no text");
        charge(&with, &mut req, Some(&qwen()), "m", LIMITS).unwrap();
        assert_eq!(req.prompt.len(), text_only + 81 + 1196);
        assert!(req.prompt.iter().all(|&id| id < LIMITS.vocab_size));
    }

    #[test]
    fn equal_images_hash_alike_and_different_ones_do_not() {
        let tok = Tokenizer::builtin();
        let ids = |url: &str| {
            let b = body(&[url]);
            let mut req = validate(&b, &tok, LIMITS).unwrap();
            charge(&b, &mut req, Some(&qwen()), "m", LIMITS).unwrap();
            req.prompt
        };
        let mut other = png_header(256, 256);
        other.push(1);
        let a = data_url("image/png", &png_header(256, 256));
        assert_eq!(ids(&a), ids(&a));
        assert_ne!(ids(&a), ids(&data_url("image/png", &other)));
    }

    #[test]
    fn a_text_model_and_bad_images_are_400s() {
        let tok = Tokenizer::builtin();
        let a = data_url("image/png", &png_header(64, 64));
        let b = body(&[&a]);
        let mut req = validate(&b, &tok, LIMITS).unwrap();
        let e = charge(&b, &mut req, None, "llama", LIMITS).unwrap_err();
        assert_eq!(e.status, http::StatusCode::BAD_REQUEST);
        assert!(
            e.message.contains("not a multimodal model"),
            "{}",
            e.message
        );
        let remote = body(&["https://example.com/cat.png"]);
        let mut req = validate(&remote, &tok, LIMITS).unwrap();
        let e = charge(&remote, &mut req, Some(&qwen()), "m", LIMITS).unwrap_err();
        assert!(e.message.contains("data: URLs"), "{}", e.message);
        // Too many image tokens for the context.
        let big = data_url("image/png", &png_header(8000, 8000));
        let b = body(&[&big]);
        let mut req = validate(&b, &tok, LIMITS).unwrap();
        let e = charge(&b, &mut req, Some(&qwen()), "m", LIMITS).unwrap_err();
        assert!(
            e.message.contains("maximum context length"),
            "{}",
            e.message
        );
    }

    #[test]
    fn completions_and_text_chats_are_untouched() {
        let tok = Tokenizer::builtin();
        let b = body(&[]);
        let mut req = validate(&b, &tok, LIMITS).unwrap();
        let before = req.prompt.clone();
        charge(&b, &mut req, None, "m", LIMITS).unwrap();
        assert_eq!(req.prompt, before);
    }
}
