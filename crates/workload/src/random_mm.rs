//! vLLM's `--dataset-name random-mm`: the random dataset's text, plus synthetic images.
//!
//! The number of images of each request is drawn uniformly from
//! `[floor(n·(1−r)), ceil(n·(1+r))]` (`n` = `--random-mm-base-items-per-request`, `r` =
//! `--random-mm-num-mm-items-range-ratio`), the maximum capped by the per-modality limits
//! (`--random-mm-limit-mm-per-prompt`). Each image's size is drawn from the buckets
//! (`--random-mm-bucket-config`, `(height, width, num_frames) → probability`, normalised,
//! zero entries dropped); a modality at its limit has its buckets excluded. Pixels are
//! uniformly random (vLLM's worst case for compression). Only images (`num_frames` = 1)
//! are generated: a video bucket with a positive probability is refused.

use rand::Rng;
use servebench_tokenizer::Tokenizer;

use crate::error::WorkloadError;
use crate::images::ImageInput;
use crate::random::{sample_random, RandomConfig};
use crate::request::RequestSpec;
use crate::rng::{stream, Purpose};

/// One size an item may take, with its weight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MmBucket {
    pub height: u32,
    pub width: u32,
    /// 1 for an image, more for a video.
    pub num_frames: u32,
    pub probability: f64,
}

/// Per-modality caps on items per request (`--random-mm-limit-mm-per-prompt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MmLimits {
    pub image: usize,
    pub video: usize,
}

impl Default for MmLimits {
    /// vLLM's `{"image": 255, "video": 1}`.
    fn default() -> Self {
        MmLimits {
            image: 255,
            video: 1,
        }
    }
}

/// The `random-mm` dataset; defaults are vLLM's.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomMmConfig {
    /// The text part, as `--dataset-name random` builds it.
    pub text: RandomConfig,
    /// `--random-mm-base-items-per-request` (1).
    pub base_items_per_request: usize,
    /// `--random-mm-num-mm-items-range-ratio`, in `[0, 1]` (0).
    pub num_mm_items_range_ratio: f64,
    /// `--random-mm-limit-mm-per-prompt`.
    pub limits: MmLimits,
    /// `--random-mm-bucket-config`.
    pub buckets: Vec<MmBucket>,
}

/// vLLM's default buckets: `{(256, 256, 1): 0.5, (720, 1280, 1): 0.5, (720, 1280, 16): 0.0}`.
pub fn default_buckets() -> Vec<MmBucket> {
    let b = |height, width, num_frames, probability| MmBucket {
        height,
        width,
        num_frames,
        probability,
    };
    vec![
        b(256, 256, 1, 0.5),
        b(720, 1280, 1, 0.5),
        b(720, 1280, 16, 0.0),
    ]
}

impl Default for RandomMmConfig {
    fn default() -> Self {
        RandomMmConfig {
            text: RandomConfig::default(),
            base_items_per_request: 1,
            num_mm_items_range_ratio: 0.0,
            limits: MmLimits::default(),
            buckets: default_buckets(),
        }
    }
}

impl RandomMmConfig {
    /// The image buckets with positive probability, normalised, and the range of the item
    /// count, checked as vLLM checks them.
    fn sampling(&self) -> Result<(Vec<MmBucket>, usize, usize), WorkloadError> {
        let bad = |m: String| Err(WorkloadError::InvalidConfig(m));
        let r = self.num_mm_items_range_ratio;
        if !(0.0..=1.0).contains(&r) {
            return bad(format!(
                "--random-mm-num-mm-items-range-ratio must be in [0, 1], got {r}"
            ));
        }
        if let Some(b) = self
            .buckets
            .iter()
            .find(|b| !b.probability.is_finite() || b.probability < 0.0)
        {
            return bad(format!(
                "--random-mm-bucket-config: the probability of ({}, {}, {}) must be non-negative, got {}",
                b.height, b.width, b.num_frames, b.probability
            ));
        }
        let live: Vec<MmBucket> = self
            .buckets
            .iter()
            .copied()
            .filter(|b| b.probability > 0.0)
            .collect();
        if let Some(b) = live.iter().find(|b| b.num_frames == 0) {
            return bad(format!(
                "--random-mm-bucket-config: ({}, {}, 0) has no frames; use 1 for an image",
                b.height, b.width
            ));
        }
        if let Some(b) = live.iter().find(|b| b.num_frames > 1) {
            return bad(format!(
                "--random-mm-bucket-config: ({}, {}, {}) is a video bucket; servebench generates \
                 images only (num_frames 1): give it probability 0 or drop it",
                b.height, b.width, b.num_frames
            ));
        }
        if let Some(b) = live.iter().find(|b| b.width == 0 || b.height == 0) {
            return bad(format!(
                "--random-mm-bucket-config: ({}, {}, 1) is an empty image",
                b.height, b.width
            ));
        }
        if live.is_empty() {
            return bad(
                "--random-mm-bucket-config: every probability is 0; give at least one image bucket a positive one"
                    .to_owned(),
            );
        }
        let total: f64 = live.iter().map(|b| b.probability).sum();
        let live = live
            .into_iter()
            .map(|b| MmBucket {
                probability: b.probability / total,
                ..b
            })
            .collect();
        let n = self.base_items_per_request as f64;
        let max = ((n * (1.0 + r)).ceil() as usize).min(self.limits.image);
        let min = (n * (1.0 - r)).floor().max(0.0) as usize;
        if min > max {
            return bad(format!(
                "random-mm: at least {min} images per request are asked for, but \
                 --random-mm-limit-mm-per-prompt allows {max}"
            ));
        }
        Ok((live, min, max))
    }

    /// Checks the parameters without building anything.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        self.text.validate()?;
        self.sampling().map(|_| ())
    }
}

/// Builds the `random-mm` dataset: the random dataset's requests, each with its images.
pub fn sample_random_mm(
    cfg: &RandomMmConfig,
    tok: &Tokenizer,
) -> Result<Vec<RequestSpec>, WorkloadError> {
    let (buckets, min, max) = cfg.sampling()?;
    let mut requests = sample_random(&cfg.text, tok)?;
    let seed = cfg.text.seed;
    for r in &mut requests {
        let mut rng = stream(seed, Purpose::MmItems, r.id);
        let count = rng.random_range(min..=max);
        r.images = (0..count)
            .map(|k| {
                let b = pick(&buckets, rng.random::<f64>());
                // Each image its own stream: the same seed gives the same pixels whatever
                // the other requests hold.
                ImageInput::random(b.width, b.height, seed, (r.id << 16) | k as u64)
            })
            .collect::<Result<_, _>>()?;
    }
    Ok(requests)
}

/// The bucket a uniform draw `u` in `[0, 1)` falls in (probabilities sum to 1).
fn pick(buckets: &[MmBucket], u: f64) -> MmBucket {
    let mut acc = 0.0;
    for b in buckets {
        acc += b.probability;
        if u < acc {
            return *b;
        }
    }
    buckets[buckets.len() - 1]
}

/// The largest image side a bucket may ask for, in pixels: 8K UHD's long side. Vision
/// encoders resize far below it; a random image of 8192 × 8192 is already 200 MB raw.
pub const MAX_IMAGE_SIDE: u32 = 8192;

/// The most frames a bucket may ask for (a video clip).
pub const MAX_FRAMES: u32 = 1024;

/// Parses `--random-mm-bucket-config`: vLLM's Python dict literal
/// `{(256, 256, 1): 0.5, (720, 1280, 1): 0.5}` (keys may also be quoted, as JSON needs).
pub fn parse_bucket_config(s: &str) -> Result<Vec<MmBucket>, String> {
    let body = s
        .trim()
        .strip_prefix('{')
        .and_then(|b| b.strip_suffix('}'))
        .ok_or_else(|| {
            format!("expected {{(height, width, num_frames): probability, ...}}, got {s:?}")
        })?;
    let mut out = Vec::new();
    let mut rest = body.trim();
    while !rest.is_empty() {
        let open = rest
            .find('(')
            .ok_or_else(|| format!("expected a (height, width, num_frames) key in {rest:?}"))?;
        let close = rest[open..]
            .find(')')
            .map(|c| c + open)
            .ok_or_else(|| format!("unclosed '(' in {rest:?}"))?;
        let nums: Vec<&str> = rest[open + 1..close].split(',').map(str::trim).collect();
        let [h, w, f] = nums.as_slice() else {
            return Err(format!(
                "a key needs three numbers (height, width, num_frames), got ({})",
                &rest[open + 1..close]
            ));
        };
        let int = |v: &str| {
            v.parse::<u32>()
                .map_err(|_| format!("{v:?} is not a non-negative integer"))
        };
        let after = rest[close + 1..]
            .trim_start()
            .trim_start_matches(['"', '\'']);
        let after = after
            .trim_start()
            .strip_prefix(':')
            .ok_or_else(|| format!("expected ':' after ({h}, {w}, {f})"))?;
        let end = after.find(',').unwrap_or(after.len());
        let p_text = after[..end].trim();
        let probability = p_text
            .parse::<f64>()
            .map_err(|_| format!("{p_text:?} is not a probability"))?;
        let (height, width, num_frames) = (int(h)?, int(w)?, int(f)?);
        // Every image is built in memory before the run: one of 100000 × 100000 would need
        // 30 GB before a single request went out.
        if height > MAX_IMAGE_SIDE || width > MAX_IMAGE_SIDE {
            return Err(format!(
                "({height}, {width}, {num_frames}): an image side is out of range (allowed: 0 to {MAX_IMAGE_SIDE} pixels)"
            ));
        }
        if num_frames > MAX_FRAMES {
            return Err(format!(
                "({height}, {width}, {num_frames}): num_frames is out of range (allowed: 0 to {MAX_FRAMES})"
            ));
        }
        if !probability.is_finite() || probability < 0.0 {
            return Err(format!(
                "{p_text:?} is not a probability (allowed: a finite number from 0)"
            ));
        }
        out.push(MmBucket {
            height,
            width,
            num_frames,
            probability,
        });
        rest = after[end..].trim_start_matches(',').trim();
    }
    if out.is_empty() {
        return Err("no buckets given".to_owned());
    }
    Ok(out)
}

/// Parses `--random-mm-limit-mm-per-prompt`: JSON such as `{"image": 3, "video": 0}`.
/// Modalities left out are not allowed (limit 0), as in vLLM; `audio` is accepted and unused.
pub fn parse_limits(s: &str) -> Result<MmLimits, String> {
    let v: serde_json::Value =
        serde_json::from_str(s).map_err(|e| format!("not a JSON object: {e}"))?;
    let obj = v.as_object().ok_or_else(|| {
        format!("expected a JSON object such as {{\"image\": 3, \"video\": 0}}, got {s}")
    })?;
    let mut limits = MmLimits { image: 0, video: 0 };
    for (k, v) in obj {
        let n = v.as_u64().ok_or_else(|| {
            format!("the limit for {k:?} must be a non-negative integer, got {v}")
        })?;
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        match k.as_str() {
            "image" => limits.image = n,
            "video" => limits.video = n,
            "audio" => {}
            other => {
                return Err(format!(
                    "unknown modality {other:?} (image, video or audio)"
                ))
            }
        }
    }
    Ok(limits)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn cfg() -> RandomMmConfig {
        RandomMmConfig {
            text: RandomConfig {
                num_prompts: 20,
                input_len: 16,
                output_len: 4,
                seed: 3,
                ..RandomConfig::default()
            },
            buckets: vec![MmBucket {
                height: 8,
                width: 12,
                num_frames: 1,
                probability: 1.0,
            }],
            ..RandomMmConfig::default()
        }
    }

    #[test]
    fn buckets_parse_in_vllms_forms() {
        let b =
            parse_bucket_config("{(256, 256, 1): 0.5, (720, 1280, 1): 0.5, (720, 1280, 16): 0.0}")
                .unwrap();
        assert_eq!(b, default_buckets());
        let q = parse_bucket_config(r#"{"(32, 32, 1)": 1}"#).unwrap();
        assert_eq!((q[0].height, q[0].width, q[0].probability), (32, 32, 1.0));
        assert!(parse_bucket_config("{(1, 2): 0.5}").is_err());
        assert!(parse_bucket_config("[(1, 2, 1): 0.5]").is_err());
        assert!(parse_bucket_config("{(1, 2, 1): x}").is_err());
        assert!(parse_bucket_config("{}").is_err());
    }

    /// A bucket of 100000 × 100000 images would be built in memory before the run: refused,
    /// with the allowed range, as are absurd frame counts and non-finite probabilities.
    #[test]
    fn absurd_buckets_are_refused_with_the_allowed_range() {
        let e = parse_bucket_config("{(100000, 100000, 1): 1.0}").unwrap_err();
        assert!(e.contains("allowed: 0 to 8192 pixels"), "{e}");
        let e = parse_bucket_config("{(256, 256, 100000): 1.0}").unwrap_err();
        assert!(e.contains("num_frames is out of range"), "{e}");
        assert!(parse_bucket_config("{(256, 256, 1): NaN}").is_err());
        assert!(parse_bucket_config("{(8192, 8192, 1): 1}").is_ok());
    }

    #[test]
    fn limits_parse_as_json() {
        assert_eq!(
            parse_limits(r#"{"image": 3, "video": 0}"#).unwrap(),
            MmLimits { image: 3, video: 0 }
        );
        assert_eq!(parse_limits(r#"{"video": 1}"#).unwrap().image, 0);
        assert!(parse_limits(r#"{"image": -1}"#).is_err());
        assert!(parse_limits(r#"{"sound": 1}"#).is_err());
        assert!(parse_limits("3").is_err());
    }

    #[test]
    fn every_request_gets_its_images_reproducibly() {
        let tok = Tokenizer::builtin();
        let c = RandomMmConfig {
            base_items_per_request: 2,
            ..cfg()
        };
        let a = sample_random_mm(&c, &tok).unwrap();
        assert_eq!(a.len(), 20);
        assert!(a
            .iter()
            .all(|r| r.images.len() == 2 && r.prompt_tokens == 16));
        assert!(a
            .iter()
            .all(|r| r.images.iter().all(|i| (i.width, i.height) == (12, 8))));
        assert_ne!(a[0].images[0].url, a[0].images[1].url);
        assert_eq!(a, sample_random_mm(&c, &tok).unwrap());
    }

    #[test]
    fn item_counts_span_the_range_and_respect_the_limit() {
        let tok = Tokenizer::builtin();
        let c = RandomMmConfig {
            base_items_per_request: 2,
            num_mm_items_range_ratio: 1.0,
            limits: MmLimits { image: 3, video: 0 },
            ..cfg()
        };
        let counts: Vec<usize> = sample_random_mm(&c, &tok)
            .unwrap()
            .iter()
            .map(|r| r.images.len())
            .collect();
        assert!(counts.iter().all(|&n| n <= 3));
        assert!(counts.contains(&0) && counts.contains(&3), "{counts:?}");
    }

    #[test]
    fn bad_configs_are_refused() {
        let with = |f: fn(&mut RandomMmConfig)| {
            let mut c = cfg();
            f(&mut c);
            c.validate().unwrap_err().to_string()
        };
        assert!(with(|c| c.num_mm_items_range_ratio = 1.5).contains("range-ratio"));
        assert!(with(|c| c.buckets[0].num_frames = 16).contains("video"));
        assert!(with(|c| c.buckets[0].probability = 0.0).contains("every probability"));
        assert!(with(|c| c.buckets[0].probability = -1.0).contains("non-negative"));
        assert!(with(|c| c.limits.image = 0).contains("allows 0"));
        // The defaults' zero-probability video bucket is dropped, not refused.
        assert!(RandomMmConfig::default().validate().is_ok());
    }

    #[test]
    fn image_tokens_join_the_prompt_length() {
        let tok = Tokenizer::builtin();
        let mut r = sample_random_mm(&cfg(), &tok).unwrap().remove(0);
        r.count_image_tokens(|w, h| u64::from(w * h));
        assert_eq!(r.image_tokens(), 96);
        assert_eq!(r.prompt_tokens, 16 + 96);
        r.count_image_tokens(|_, _| 1);
        assert_eq!(r.prompt_tokens, 17);
    }
}
