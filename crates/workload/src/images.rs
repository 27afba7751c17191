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

impl ImageInput {
    /// An image given as base64 text (how a Parquet `Image` column's bytes read as JSON),
    /// sent as it is; PNG or JPEG, its size read from its header.
    pub fn from_base64(b64: &str) -> Result<Self, String> {
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|e| format!("not base64: {e}"))?;
        let (width, height) =
            servebench_wire::image::image_size(&bytes).map_err(|e| e.to_string())?;
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

/// A dataset's `"image"` field: one path or a list of them (ShareGPT-4V writes one).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub(crate) enum ImagePaths {
    One(String),
    Many(Vec<String>),
}

impl ImagePaths {
    fn paths(&self) -> &[String] {
        match self {
            ImagePaths::One(p) => std::slice::from_ref(p),
            ImagePaths::Many(v) => v,
        }
    }

    /// Reads the images, each path relative to the dataset file's folder (`dataset`) unless
    /// absolute. An error names the path as written and what went wrong.
    pub(crate) fn load(&self, dataset: &Path) -> Result<Vec<ImageInput>, String> {
        let base = dataset.parent().unwrap_or(Path::new("."));
        self.paths()
            .iter()
            .map(|p| ImageInput::from_file(&base.join(p)).map_err(|e| format!("image {p:?}: {e}")))
            .collect()
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

    fn dataset_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("sb-img-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("pics")).unwrap();
        std::fs::write(
            dir.join("pics/a.png"),
            encode_png(28, 56, &[7u8; 28 * 56 * 3]).unwrap(),
        )
        .unwrap();
        std::fs::write(dir.join("b.png"), encode_png(4, 4, &[9u8; 48]).unwrap()).unwrap();
        dir
    }

    #[test]
    fn custom_lines_carry_their_images_and_a_missing_one_names_line_and_path() {
        use crate::custom::{sample_custom, CustomConfig};
        let dir = dataset_dir("custom");
        let file = dir.join("d.jsonl");
        std::fs::write(
            &file,
            "{\"prompt\": \"what is this\", \"image\": \"pics/a.png\"}\n\
             {\"prompt\": \"and these\", \"image\": [\"pics/a.png\", \"b.png\"]}\n\
             {\"prompt\": \"text only\"}\n",
        )
        .unwrap();
        let mut cfg = CustomConfig::new(&file);
        cfg.num_prompts = 0;
        cfg.disable_shuffle = true;
        let tok = servebench_tokenizer::Tokenizer::builtin();
        let r = sample_custom(&cfg, &tok).unwrap();
        let sizes: Vec<Vec<(u32, u32)>> = r
            .iter()
            .map(|r| r.images.iter().map(|i| (i.width, i.height)).collect())
            .collect();
        assert_eq!(sizes, vec![vec![(28, 56)], vec![(28, 56), (4, 4)], vec![]]);

        std::fs::write(
            &file,
            "{\"prompt\": \"a\"}\n{\"prompt\": \"b\", \"image\": \"pics/gone.png\"}\n",
        )
        .unwrap();
        let e = sample_custom(&cfg, &tok).unwrap_err().to_string();
        assert!(
            e.contains("d.jsonl:2") && e.contains("pics/gone.png"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sharegpt4v_entries_carry_their_image() {
        use crate::sharegpt::{sample_sharegpt, ShareGptConfig};
        let dir = dataset_dir("sharegpt");
        let file = dir.join("s.json");
        let conv = r#"[{"from": "human", "value": "<image>\nWhat is shown in this picture?"}, {"from": "gpt", "value": "A grey square and nothing else at all."}]"#;
        std::fs::write(
            &file,
            format!(r#"[{{"id": "1", "image": "pics/a.png", "conversations": {conv}}}, {{"id": "2", "image": "nope.jpg", "conversations": {conv}}}]"#),
        )
        .unwrap();
        let mut cfg = ShareGptConfig::new(&file);
        cfg.disable_shuffle = true;
        cfg.num_prompts = 1;
        let tok = servebench_tokenizer::Tokenizer::builtin();
        let r = sample_sharegpt(&cfg, &tok).unwrap();
        assert_eq!((r[0].images[0].width, r[0].images[0].height), (28, 56));
        cfg.num_prompts = 2;
        let e = sample_sharegpt(&cfg, &tok).unwrap_err().to_string();
        assert!(e.contains("entry 1") && e.contains("nope.jpg"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
