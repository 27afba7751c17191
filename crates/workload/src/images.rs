//! Images a request carries in its chat message: synthetic ones (`random-mm`) and files a
//! dataset names. Each is held as the `data:` URL that is sent, with its size, so the image
//! tokens can be counted for any model without decoding it again.

use std::path::Path;

use rand::RngCore;
use serde::{Deserialize, Serialize};

use crate::error::WorkloadError;
use crate::rng::{stream, Purpose};

/// One image of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageInput {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// The `data:` URL sent in the `image_url` part.
    pub url: String,
    /// Prompt tokens the image costs the model; 0 until counted for a model
    /// ([`crate::RequestSpec::count_image_tokens`]).
    #[serde(default)]
    pub tokens: u64,
}

impl ImageInput {
    /// A `width × height` RGB image of uniformly random pixels, as vLLM's `random-mm`
    /// generates (the worst case for compression, so the payload is as large as it gets),
    /// encoded as PNG. `index` picks the image's own random stream under `seed`.
    pub fn random(width: u32, height: u32, seed: u64, index: u64) -> Result<Self, WorkloadError> {
        let mut pixels = vec![0u8; width as usize * height as usize * 3];
        stream(seed, Purpose::MmPixels, index).fill_bytes(&mut pixels);
        let png = encode_png(width, height, &pixels)?;
        Ok(ImageInput {
            width,
            height,
            url: servebench_wire::image::data_url("image/png", &png),
            tokens: 0,
        })
    }

    /// An image file (PNG or JPEG), sent as it is; its size is read from its header.
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let bytes = std::fs::read(path)
            .map_err(|e| format!("cannot read image {}: {e}", path.display()))?;
        let (width, height) = servebench_wire::image::image_size(&bytes)
            .map_err(|e| format!("image {}: {e}", path.display()))?;
        let mime = if bytes.starts_with(b"\x89PNG") {
            "image/png"
        } else {
            "image/jpeg"
        };
        Ok(ImageInput {
            width,
            height,
            url: servebench_wire::image::data_url(mime, &bytes),
            tokens: 0,
        })
    }
}

fn encode_png(width: u32, height: u32, rgb: &[u8]) -> Result<Vec<u8>, WorkloadError> {
    let fail = |e: png::EncodingError| {
        WorkloadError::InvalidConfig(format!("cannot encode a {width}x{height} PNG image: {e}"))
    };
    let mut out = Vec::with_capacity(rgb.len() + 1024);
    {
        let mut enc = png::Encoder::new(&mut out, width, height);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        // Random pixels do not compress: the fastest setting gives the same size.
        enc.set_compression(png::Compression::Fastest);
        enc.set_filter(png::Filter::NoFilter);
        let mut w = enc.write_header().map_err(fail)?;
        w.write_image_data(rgb).map_err(fail)?;
        w.finish().map_err(fail)?;
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn random_images_are_pngs_of_their_size_and_reproducible() {
        let a = ImageInput::random(64, 32, 7, 0).unwrap();
        assert_eq!(
            servebench_wire::image::data_url_size(&a.url).unwrap(),
            (64, 32)
        );
        assert_eq!(a, ImageInput::random(64, 32, 7, 0).unwrap());
        assert_ne!(a.url, ImageInput::random(64, 32, 7, 1).unwrap().url);
        assert_ne!(a.url, ImageInput::random(64, 32, 8, 0).unwrap().url);
    }

    #[test]
    fn image_files_keep_their_bytes_and_size() {
        let dir = std::env::temp_dir().join(format!("sb-img-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.png");
        std::fs::write(&path, encode_png(3, 2, &[0u8; 18]).unwrap()).unwrap();
        let img = ImageInput::from_file(&path).unwrap();
        assert_eq!((img.width, img.height), (3, 2));
        assert!(img.url.starts_with("data:image/png;base64,"));
        std::fs::write(&path, b"not an image").unwrap();
        assert!(ImageInput::from_file(&path).unwrap_err().contains("a.png"));
        assert!(ImageInput::from_file(&dir.join("missing.png"))
            .unwrap_err()
            .contains("missing.png"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
