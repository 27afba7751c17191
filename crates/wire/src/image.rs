//! Images in chat messages: `{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}`
//! parts, as vLLM's benchmark client sends them. Only as much of an image is read as it takes
//! to know its size (the PNG header, or a JPEG's frame header): the token count of an image
//! depends on its size alone.

use base64::Engine;
use serde_json::{json, Map, Value};

use crate::openai::{ChatMessage, ContentPart, MessageContent};

/// Why an image part cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// The URL is not a `data:` URL (remote images are not fetched).
    #[error("only data: URLs are supported for images (got {0:?})")]
    NotDataUrl(String),
    /// The data URL is not `data:<type>;base64,<data>`.
    #[error("malformed image data URL: {0}")]
    Malformed(String),
    /// The bytes are not a PNG or JPEG whose size could be read.
    #[error("unsupported or corrupt image: {0}")]
    Unreadable(String),
}

/// The `data:` URL of an encoded image.
pub fn data_url(mime: &str, bytes: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
    format!("data:{mime};base64,{b64}")
}

/// An `image_url` content part for `url`.
pub fn image_part(url: &str) -> ContentPart {
    let mut extra = Map::new();
    extra.insert("image_url".to_owned(), json!({ "url": url }));
    ContentPart {
        kind: "image_url".to_owned(),
        text: None,
        extra,
    }
}

/// A user message of `text` followed by one `image_url` part per URL (vLLM's order: text
/// first, then the images).
pub fn user_message_with_images<'a>(
    text: &str,
    urls: impl IntoIterator<Item = &'a str>,
) -> ChatMessage {
    let mut parts = vec![ContentPart::text(text)];
    parts.extend(urls.into_iter().map(image_part));
    ChatMessage {
        role: "user".to_owned(),
        content: Some(MessageContent::Parts(parts)),
        extra: Map::new(),
    }
}

/// The URL of an `image_url` part (`{"image_url": {"url": ...}}` or the short form
/// `{"image_url": "..."}`); `None` for any other part.
pub fn part_image_url(part: &ContentPart) -> Option<&str> {
    if part.kind != "image_url" {
        return None;
    }
    match part.extra.get("image_url")? {
        Value::String(s) => Some(s),
        Value::Object(o) => o.get("url").and_then(Value::as_str),
        _ => None,
    }
}

/// Every image URL of a conversation, in order.
pub fn image_urls(messages: &[ChatMessage]) -> Vec<&str> {
    messages
        .iter()
        .filter_map(|m| match &m.content {
            Some(MessageContent::Parts(parts)) => Some(parts),
            _ => None,
        })
        .flatten()
        .filter_map(part_image_url)
        .collect()
}

/// Width and height of the image a `data:` URL holds.
pub fn data_url_size(url: &str) -> Result<(u32, u32), ImageError> {
    let Some(rest) = url.strip_prefix("data:") else {
        return Err(ImageError::NotDataUrl(url.chars().take(40).collect()));
    };
    let Some((header, payload)) = rest.split_once(',') else {
        return Err(ImageError::Malformed(
            "no ',' after the media type".to_owned(),
        ));
    };
    if !header.ends_with(";base64") {
        return Err(ImageError::Malformed(format!(
            "expected ';base64' data, got {header:?}"
        )));
    }
    // The size sits in the first few hundred bytes of a PNG; a JPEG's frame header may come
    // after metadata, so more is decoded there, still without decoding the picture.
    let head = decode_prefix(payload, 512)?;
    match image_size(&head) {
        Ok(size) => Ok(size),
        Err(_) if head.len() >= 512 => image_size(&decode_prefix(payload, usize::MAX)?),
        Err(e) => Err(e),
    }
}

/// The first `limit` bytes (about) of base64 `payload`.
fn decode_prefix(payload: &str, limit: usize) -> Result<Vec<u8>, ImageError> {
    let chars = limit.saturating_add(2) / 3 * 4;
    let take = if chars >= payload.len() {
        payload
    } else {
        payload
            .get(..chars)
            .ok_or_else(|| ImageError::Malformed("bad base64: not ASCII".to_owned()))?
    };
    base64::engine::general_purpose::STANDARD
        .decode(take.trim_end())
        .map_err(|e| ImageError::Malformed(format!("bad base64: {e}")))
}

/// Width and height from the header of a PNG or JPEG.
pub fn image_size(bytes: &[u8]) -> Result<(u32, u32), ImageError> {
    const PNG: &[u8] = b"\x89PNG\r\n\x1a\n";
    if bytes.starts_with(PNG) {
        // The IHDR chunk comes first: length, "IHDR", width, height (big-endian).
        if bytes.len() < 24 || &bytes[12..16] != b"IHDR" {
            return Err(ImageError::Unreadable(
                "PNG without an IHDR header".to_owned(),
            ));
        }
        let w = u32::from_be_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]);
        let h = u32::from_be_bytes([bytes[20], bytes[21], bytes[22], bytes[23]]);
        return nonzero(w, h);
    }
    if bytes.starts_with(&[0xFF, 0xD8]) {
        return jpeg_size(bytes);
    }
    Err(ImageError::Unreadable(
        "neither PNG nor JPEG (servebench reads the size of those two)".to_owned(),
    ))
}

fn nonzero(w: u32, h: u32) -> Result<(u32, u32), ImageError> {
    if w == 0 || h == 0 {
        return Err(ImageError::Unreadable(format!("image of size {w}x{h}")));
    }
    Ok((w, h))
}

/// Walks the JPEG segments to the first start-of-frame marker.
fn jpeg_size(bytes: &[u8]) -> Result<(u32, u32), ImageError> {
    let mut i = 2;
    while i + 4 <= bytes.len() {
        if bytes[i] != 0xFF {
            return Err(ImageError::Unreadable(
                "JPEG segment without a marker".to_owned(),
            ));
        }
        let marker = bytes[i + 1];
        if marker == 0xFF {
            i += 1;
            continue;
        }
        let len = usize::from(u16::from_be_bytes([bytes[i + 2], bytes[i + 3]]));
        let is_sof = matches!(marker, 0xC0..=0xCF) && !matches!(marker, 0xC4 | 0xC8 | 0xCC);
        if is_sof {
            if i + 9 > bytes.len() {
                break;
            }
            let h = u32::from(u16::from_be_bytes([bytes[i + 5], bytes[i + 6]]));
            let w = u32::from(u16::from_be_bytes([bytes[i + 7], bytes[i + 8]]));
            return nonzero(w, h);
        }
        i += 2 + len;
    }
    Err(ImageError::Unreadable(
        "JPEG without a frame header".to_owned(),
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn png_header(w: u32, h: u32) -> Vec<u8> {
        let mut b = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
        b.extend(w.to_be_bytes());
        b.extend(h.to_be_bytes());
        b.extend([8, 2, 0, 0, 0]);
        b
    }

    #[test]
    fn png_and_jpeg_sizes_come_from_their_headers() {
        assert_eq!(image_size(&png_header(1280, 720)).unwrap(), (1280, 720));
        // SOI, an APP0 segment of 16 bytes, then SOF0 with height 480 and width 640.
        let mut jpeg = vec![0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10];
        jpeg.extend([0u8; 14]);
        jpeg.extend([0xFF, 0xC0, 0x00, 0x11, 0x08, 0x01, 0xE0, 0x02, 0x80, 0x03]);
        assert_eq!(image_size(&jpeg).unwrap(), (640, 480));
        assert!(image_size(b"GIF89a").is_err());
        assert!(image_size(&png_header(0, 5)).is_err());
    }

    #[test]
    fn data_urls_round_trip_and_bad_ones_are_refused() {
        let url = data_url("image/png", &png_header(256, 128));
        assert!(url.starts_with("data:image/png;base64,"));
        assert_eq!(data_url_size(&url).unwrap(), (256, 128));
        assert!(matches!(
            data_url_size("https://example.com/a.png"),
            Err(ImageError::NotDataUrl(_))
        ));
        assert!(data_url_size("data:image/png,abc").is_err());
        assert!(data_url_size("data:image/png;base64,@@@@").is_err());
    }

    #[test]
    fn image_parts_are_found_in_both_url_forms() {
        let m = user_message_with_images("hi", ["data:a", "data:b"]);
        let json = serde_json::to_value(&m).unwrap();
        assert_eq!(json["content"][0]["type"], "text");
        assert_eq!(json["content"][1]["image_url"]["url"], "data:a");
        let back: ChatMessage = serde_json::from_value(json).unwrap();
        assert_eq!(image_urls(&[back]), ["data:a", "data:b"]);
        let short: ChatMessage = serde_json::from_str(
            r#"{"role":"user","content":[{"type":"image_url","image_url":"data:c"}]}"#,
        )
        .unwrap();
        assert_eq!(image_urls(&[short]), ["data:c"]);
    }
}
