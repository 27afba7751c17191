//! Images in chat: vLLM's `--random-mm-*` flags, and the count of each image's prompt tokens
//! from the model's vision encoder before the run (a model without one is refused here, not
//! discovered request by request).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use servebench_roofline::{Catalog, VisionSpec};
use servebench_workload::random_mm::{self, MmBucket, MmLimits};
use servebench_workload::RequestSpec;

use super::plan::{ApiFlavor, RunPlan};

use super::RunTarget;

/// vLLM's defaults, as its flags print them.
const DEFAULT_LIMITS: &str = r#"{"image": 255, "video": 1}"#;
const DEFAULT_BUCKETS: &str = "{(256, 256, 1): 0.5, (720, 1280, 1): 0.5, (720, 1280, 16): 0.0}";

/// `--dataset-name random-mm` flags (vLLM's names and defaults). The text part takes the
/// `--random-*` flags of the random dataset.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct RandomMmArgs {
    /// Images per request, on average (random-mm).
    #[arg(long, value_name = "N", default_value_t = 1, help_heading = "Dataset")]
    pub random_mm_base_items_per_request: usize,
    /// Images per request are drawn uniformly from [floor(n·(1−r)), ceil(n·(1+r))], r in [0, 1]
    /// (random-mm).
    #[arg(
        long,
        value_name = "R",
        default_value_t = 0.0,
        help_heading = "Dataset"
    )]
    pub random_mm_num_mm_items_range_ratio: f64,
    /// Most items of each modality per request, as JSON (random-mm); only images are generated.
    #[arg(long, value_name = "JSON", default_value = DEFAULT_LIMITS, help_heading = "Dataset")]
    pub random_mm_limit_mm_per_prompt: String,
    /// Image sizes and their probabilities: {(height, width, num_frames): p, ...}; num_frames
    /// must be 1 (images) where p > 0 (random-mm).
    #[arg(long, value_name = "DICT", default_value = DEFAULT_BUCKETS, help_heading = "Dataset")]
    pub random_mm_bucket_config: String,
}

impl Default for RandomMmArgs {
    fn default() -> Self {
        RandomMmArgs {
            random_mm_base_items_per_request: 1,
            random_mm_num_mm_items_range_ratio: 0.0,
            random_mm_limit_mm_per_prompt: DEFAULT_LIMITS.to_owned(),
            random_mm_bucket_config: DEFAULT_BUCKETS.to_owned(),
        }
    }
}

/// The image part of a `random-mm` plan.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomMmShape {
    pub base_items_per_request: usize,
    pub num_mm_items_range_ratio: f64,
    pub limits: MmLimits,
    pub buckets: Vec<MmBucket>,
    /// The flags as given, so the plan turns back into the same command line.
    pub flags: RandomMmArgs,
}

impl RandomMmShape {
    /// Reads and checks the flags.
    pub fn from_args(a: &RandomMmArgs) -> Result<Self> {
        let limits = random_mm::parse_limits(&a.random_mm_limit_mm_per_prompt)
            .map_err(|e| anyhow::anyhow!("--random-mm-limit-mm-per-prompt: {e}"))?;
        let buckets = random_mm::parse_bucket_config(&a.random_mm_bucket_config)
            .map_err(|e| anyhow::anyhow!("--random-mm-bucket-config: {e}"))?;
        let shape = RandomMmShape {
            base_items_per_request: a.random_mm_base_items_per_request,
            num_mm_items_range_ratio: a.random_mm_num_mm_items_range_ratio,
            limits,
            buckets,
            flags: a.clone(),
        };
        shape.config(Default::default()).validate()?;
        Ok(shape)
    }

    /// The workload's configuration with `text` as the text part.
    pub fn config(&self, text: servebench_workload::RandomConfig) -> random_mm::RandomMmConfig {
        random_mm::RandomMmConfig {
            text,
            base_items_per_request: self.base_items_per_request,
            num_mm_items_range_ratio: self.num_mm_items_range_ratio,
            limits: self.limits,
            buckets: self.buckets.clone(),
        }
    }
}

/// Refuses `--random-mm-*` flags given for another dataset (they would be silently ignored).
pub fn check_unused(a: &RandomMmArgs, dataset_is_random_mm: bool) -> Result<()> {
    if !dataset_is_random_mm && *a != RandomMmArgs::default() {
        bail!("--random-mm-* flags apply to --dataset-name random-mm only");
    }
    Ok(())
}

/// Counts the prompt tokens of every image for the model the run targets and adds them to
/// each request's prompt length. Requests without images are left as they are; with images, a
/// model whose vision encoder is unknown is an error that says what was looked for.
pub fn count_image_tokens(
    plan: &RunPlan,
    target: &RunTarget,
    mut requests: Vec<RequestSpec>,
) -> Result<Vec<RequestSpec>> {
    if requests.iter().all(|r| r.images.is_empty()) {
        return Ok(requests);
    }
    if plan.endpoint.flavor != ApiFlavor::OpenaiChat {
        bail!(
            "the dataset's requests carry images, which go in chat messages: use --backend \
             openai-chat (endpoint /v1/chat/completions), not --backend {}",
            plan.endpoint.flavor.as_str()
        );
    }
    let vision = match vision_for(plan, target) {
        Ok(v) => v,
        // A real server counts its own images (its usage reports them); without the model's
        // vision config the client's expected lengths are the text's alone, as vLLM's client
        // counts them. Only the simulator in virtual time needs the count to run at all.
        Err(e) if matches!(target, RunTarget::Http(t) if t.sim.is_none()) => {
            eprintln!(
                "note: image tokens are not counted in the client's expected prompt lengths \
                 (the server's usage reports them, and vLLM's client does not count them \
                 either): {e:#}"
            );
            return Ok(requests);
        }
        Err(e) => return Err(e),
    };
    for r in &mut requests {
        r.count_image_tokens(|w, h| vision.image_tokens(w, h));
    }
    Ok(requests)
}

/// Where the model's vision encoder is looked up, in order: `config.json` beside
/// `--tokenizer` (a local model folder), the simulator's own model, the catalog entry for
/// `--model`.
fn vision_for(plan: &RunPlan, target: &RunTarget) -> Result<VisionSpec> {
    let mut looked = Vec::new();
    if let Some(dir) = plan.tokenizer.as_deref().and_then(model_dir) {
        let config = dir.join("config.json");
        if config.is_file() {
            if let Some(v) = servebench_sim::vision::from_hf_config(&config)
                .with_context(|| format!("reading the vision config of {}", config.display()))?
            {
                return Ok(v);
            }
            looked.push(format!("no vision_config in {}", config.display()));
        } else {
            looked.push(format!("no config.json in {}", dir.display()));
        }
    }
    match target {
        RunTarget::Virtual(t) => {
            return t.sim.vision.clone().with_context(|| {
                format!(
                    "images need a vision-language model, and the simulated model '{}' has none \
                     (the catalog has no [[vision]] entry for it; simulate one, e.g. --sim \
                     \"Qwen/Qwen2.5-VL-7B-Instruct --gpu h100\", or give --hf-config a config.json \
                     with a vision_config)",
                    t.sim.args.model
                )
            });
        }
        RunTarget::Http(t) => {
            if let Some(sim) = &t.sim {
                let model = sim
                    .config
                    .get("model")
                    .and_then(|m| m.as_str())
                    .unwrap_or("?");
                let v = sim.config.get("vision").cloned();
                return match v.map(serde_json::from_value::<VisionSpec>) {
                    Some(Ok(v)) => Ok(v),
                    _ => bail!(
                        "images need a vision-language model, and the simulated model '{model}' has \
                         none (the catalog has no [[vision]] entry for it; simulate one, e.g. --sim \
                         \"Qwen/Qwen2.5-VL-7B-Instruct --gpu h100\")"
                    ),
                };
            }
        }
    }
    let catalog = Catalog::builtin();
    // A hub name given as --tokenizer names the model as well as --model does.
    if let Some(v) = plan
        .tokenizer
        .as_deref()
        .filter(|t| model_dir(t).is_none())
        .and_then(|t| catalog.vision(t))
    {
        return Ok(v.clone());
    }
    match plan.model.as_deref() {
        Some(model) => {
            if let Some(v) = catalog.vision(model) {
                return Ok(v.clone());
            }
            looked.push(format!(
                "no [[vision]] entry for '{model}' in the roofline catalog"
            ));
            bail!(
                "model '{model}' has no known vision config, so its image tokens cannot be counted \
                 ({}); pass --tokenizer with the model's folder (its config.json has the \
                 vision_config), or benchmark a vision-language model",
                looked.join("; ")
            )
        }
        None => bail!(
            "images need the model's vision config to count their tokens ({}): pass --model with a \
             vision-language model the catalog knows (e.g. Qwen/Qwen2.5-VL-7B-Instruct) or \
             --tokenizer with the model's folder",
            if looked.is_empty() {
                "no --model or --tokenizer given".to_owned()
            } else {
                looked.join("; ")
            }
        ),
    }
}

/// The local folder a `--tokenizer` value names: the folder itself, or a file's folder;
/// `None` for a hub name.
fn model_dir(spec: &str) -> Option<PathBuf> {
    let p = Path::new(spec);
    if p.is_dir() {
        Some(p.to_path_buf())
    } else if p.is_file() {
        p.parent().map(Path::to_path_buf)
    } else {
        None
    }
}
