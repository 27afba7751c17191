//! How many prompt tokens an image costs a vision-language model, from the facts of its
//! vision encoder (`vision_config` of the Hugging Face `config.json`, or a `[[vision]]`
//! entry of the catalog).
//!
//! Two rules cover the common families:
//! - **Dynamic resolution** (Qwen2-VL, Qwen2.5-VL): the image is resized so both sides are
//!   multiples of `patch_size × spatial_merge_size` and the area lies within
//!   `[min_pixels, max_pixels]` (the processor's `smart_resize`, Python's round-half-to-even
//!   included); every `spatial_merge_size²` patches become one token.
//! - **Fixed resolution** (LLaVA-1.5, CLIP/SigLIP encoders): every image is resized to
//!   `image_size × image_size` and costs `(image_size / patch_size)²` tokens.
//!
//! The count is the image's placeholder tokens only: the one or two delimiter tokens a chat
//! template puts around an image are text of the template, not of the image. The client and
//! the simulator use this one function, so they agree on what an image costs.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::RooflineError;

/// Qwen2-VL's processor defaults (`preprocessor_config.json`): 56×56 and 28×28×16384 pixels.
pub const QWEN_MIN_PIXELS: u64 = 3_136;
/// See [`QWEN_MIN_PIXELS`].
pub const QWEN_MAX_PIXELS: u64 = 12_845_056;

/// The facts of a vision encoder that decide an image's token count (`[[vision]]` table).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VisionSpec {
    /// The model's catalog id (the language model's, when the model shares its shape).
    pub id: String,
    /// Other names accepted by lookups (Hugging Face repository names).
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Pixels per side of one patch.
    pub patch_size: u32,
    /// Patches per side merged into one token (dynamic resolution); absent for a fixed one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spatial_merge_size: Option<u32>,
    /// Side every image is resized to (fixed resolution); absent for a dynamic one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_size: Option<u32>,
    /// Smallest image area after resizing (dynamic resolution).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_pixels: Option<u64>,
    /// Largest image area after resizing (dynamic resolution).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pixels: Option<u64>,
    /// Where the facts come from (a model card or config file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl VisionSpec {
    /// Checks that the facts give a count: a positive patch size and exactly one rule.
    pub fn validate(&self) -> Result<(), RooflineError> {
        let bad = |m: &str| Err(RooflineError::Invalid(format!("vision '{}': {m}", self.id)));
        if self.patch_size == 0 {
            return bad("patch_size must be positive");
        }
        match (self.spatial_merge_size, self.image_size) {
            (Some(0), _) => bad("spatial_merge_size must be positive"),
            (_, Some(0)) => bad("image_size must be positive"),
            (Some(_), Some(_)) => {
                bad("give spatial_merge_size (dynamic resolution) or image_size (fixed), not both")
            }
            (None, None) => {
                bad("needs spatial_merge_size (dynamic resolution) or image_size (fixed)")
            }
            _ => Ok(()),
        }
    }

    /// Prompt tokens of one `width × height` image.
    pub fn image_tokens(&self, width: u32, height: u32) -> u64 {
        let patch = u64::from(self.patch_size.max(1));
        match (self.spatial_merge_size, self.image_size) {
            (Some(merge), _) => {
                let merge = u64::from(merge.max(1));
                let (h, w) = smart_resize(
                    u64::from(height),
                    u64::from(width),
                    patch * merge,
                    self.min_pixels.unwrap_or(QWEN_MIN_PIXELS),
                    self.max_pixels.unwrap_or(QWEN_MAX_PIXELS),
                );
                (h / patch) * (w / patch) / (merge * merge)
            }
            (None, Some(side)) => {
                let per_side = u64::from(side) / patch;
                per_side * per_side
            }
            (None, None) => 0,
        }
    }

    /// The vision facts of a Hugging Face `config.json` (its text), or `None` when it has no
    /// `vision_config`. `preprocessor` is the text of `preprocessor_config.json` beside it,
    /// when there is one (Qwen's pixel bounds live there). `id` names the result.
    pub fn from_hf_config_str(
        config: &str,
        preprocessor: Option<&str>,
        id: &str,
    ) -> Result<Option<VisionSpec>, String> {
        let root: Value =
            serde_json::from_str(config).map_err(|e| format!("not valid JSON: {e}"))?;
        let Some(vision) = root.get("vision_config").filter(|v| v.is_object()) else {
            return Ok(None);
        };
        let num = |v: &Value, key: &str| -> Result<Option<u64>, String> {
            match v.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(x) => x
                    .as_u64()
                    .map(Some)
                    .ok_or_else(|| format!("vision_config.{key} is not a non-negative integer")),
            }
        };
        let small = |n: Option<u64>, key: &str| -> Result<Option<u32>, String> {
            n.map(|n| u32::try_from(n).map_err(|_| format!("vision_config.{key} is too large")))
                .transpose()
        };
        let patch_size = small(num(vision, "patch_size")?, "patch_size")?.unwrap_or(14);
        let merge = small(num(vision, "spatial_merge_size")?, "spatial_merge_size")?;
        let image_size = small(num(vision, "image_size")?, "image_size")?;
        let pre: Option<Value> = match preprocessor {
            Some(p) => Some(
                serde_json::from_str(p)
                    .map_err(|e| format!("preprocessor_config.json is not valid JSON: {e}"))?,
            ),
            None => None,
        };
        let pre_num = |key: &str| -> Option<u64> {
            let p = pre.as_ref()?;
            p.get(key)
                .or_else(|| p.get("size").and_then(|s| s.get(key_alias(key))))
                .and_then(Value::as_u64)
        };
        let spec = match (merge, image_size) {
            (Some(m), _) => VisionSpec {
                id: id.to_owned(),
                aliases: Vec::new(),
                patch_size,
                spatial_merge_size: Some(m),
                image_size: None,
                min_pixels: pre_num("min_pixels"),
                max_pixels: pre_num("max_pixels"),
                source: Some("config.json".to_owned()),
            },
            (None, Some(side)) => VisionSpec {
                id: id.to_owned(),
                aliases: Vec::new(),
                patch_size,
                spatial_merge_size: None,
                image_size: Some(side),
                min_pixels: None,
                max_pixels: None,
                source: Some("config.json".to_owned()),
            },
            (None, None) => {
                return Err(
                    "vision_config has neither spatial_merge_size nor image_size: \
                     servebench cannot tell how many tokens an image costs"
                        .to_owned(),
                )
            }
        };
        spec.validate().map_err(|e| e.to_string())?;
        Ok(Some(spec))
    }
}

/// Newer processors keep the pixel bounds under `size` as `shortest_edge`/`longest_edge`.
fn key_alias(key: &str) -> &str {
    match key {
        "min_pixels" => "shortest_edge",
        "max_pixels" => "longest_edge",
        other => other,
    }
}

/// Qwen2-VL's `smart_resize`: `(height, width)` rounded to multiples of `factor`, scaled so
/// the area lies in `[min_pixels, max_pixels]`, keeping the aspect ratio.
fn smart_resize(
    height: u64,
    width: u64,
    factor: u64,
    min_pixels: u64,
    max_pixels: u64,
) -> (u64, u64) {
    let (h, w, f) = (height as f64, width as f64, factor as f64);
    let round = |x: f64| ((x / f).round_ties_even() as u64 * factor).max(factor);
    let (mut h_bar, mut w_bar) = (round(h), round(w));
    if h_bar * w_bar > max_pixels {
        let beta = (h * w / max_pixels as f64).sqrt();
        h_bar = (((h / beta / f).floor() as u64) * factor).max(factor);
        w_bar = (((w / beta / f).floor() as u64) * factor).max(factor);
    } else if h_bar * w_bar < min_pixels {
        let beta = (min_pixels as f64 / (h * w).max(1.0)).sqrt();
        h_bar = ((h * beta / f).ceil() as u64) * factor;
        w_bar = ((w * beta / f).ceil() as u64) * factor;
    }
    (h_bar, w_bar)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn qwen() -> VisionSpec {
        VisionSpec::from_hf_config_str(
            r#"{"model_type":"qwen2_5_vl","vision_config":{"patch_size":14,"spatial_merge_size":2}}"#,
            None,
            "q",
        )
        .unwrap()
        .unwrap()
    }

    #[test]
    fn qwen_counts_merged_patches_of_the_resized_image() {
        let q = qwen();
        // 256 → 252 (9 × 28): 18 × 18 patches, 4 per token.
        assert_eq!(q.image_tokens(256, 256), 81);
        // 720 → 728 (26 × 28), 1280 → 1288 (46 × 28): 52 × 92 / 4.
        assert_eq!(q.image_tokens(1280, 720), 1196);
        // Too small: scaled up to at least min_pixels (56 × 56 → 4 tokens).
        assert_eq!(q.image_tokens(10, 10), 4);
        // 42 / 28 = 1.5 rounds half to even: 2 × 28 = 56.
        assert_eq!(q.image_tokens(42, 56), 4);
    }

    #[test]
    fn huge_images_are_scaled_down_to_max_pixels() {
        let q = qwen();
        let t = q.image_tokens(8000, 8000);
        assert!(t <= QWEN_MAX_PIXELS / (28 * 28), "{t}");
        assert!(t > 15_000, "{t}");
    }

    #[test]
    fn fixed_resolution_costs_the_same_for_every_image() {
        let llava = VisionSpec::from_hf_config_str(
            r#"{"vision_config":{"image_size":336,"patch_size":14}}"#,
            None,
            "llava",
        )
        .unwrap()
        .unwrap();
        assert_eq!(llava.image_tokens(10, 10), 576);
        assert_eq!(llava.image_tokens(1280, 720), 576);
    }

    #[test]
    fn preprocessor_bounds_apply() {
        let q = VisionSpec::from_hf_config_str(
            r#"{"vision_config":{"patch_size":14,"spatial_merge_size":2}}"#,
            Some(r#"{"min_pixels":3136,"max_pixels":200704}"#),
            "q",
        )
        .unwrap()
        .unwrap();
        assert_eq!(q.max_pixels, Some(200_704));
        assert!(q.image_tokens(1280, 720) <= 256);
    }

    #[test]
    fn text_only_configs_have_no_vision() {
        assert!(
            VisionSpec::from_hf_config_str(r#"{"hidden_size":8}"#, None, "t")
                .unwrap()
                .is_none()
        );
        assert!(VisionSpec::from_hf_config_str(
            r#"{"vision_config":{"hidden_size":8}}"#,
            None,
            "t"
        )
        .is_err());
        assert!(VisionSpec::from_hf_config_str("nope", None, "t").is_err());
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod catalog_tests {
    use crate::Catalog;

    #[test]
    fn the_catalog_knows_a_vision_model_and_no_text_model_has_one() {
        let c = Catalog::builtin();
        let q = c.vision("Qwen/Qwen2.5-VL-7B-Instruct").unwrap();
        assert_eq!(q.image_tokens(256, 256), 81);
        assert_eq!(
            c.model("Qwen/Qwen2.5-VL-7B-Instruct").unwrap().id,
            "qwen2.5-7b"
        );
        assert!(c.vision("meta-llama/Llama-3.1-8B-Instruct").is_none());
        assert_eq!(
            c.vision("llava-hf/llava-1.5-7b-hf")
                .unwrap()
                .image_tokens(5, 5),
            576
        );
    }
}
