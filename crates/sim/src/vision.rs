//! The served model's vision encoder, if it has one: from `--hf-config`'s `vision_config`
//! (with `preprocessor_config.json` beside it), else the catalog's `[[vision]]` entry for
//! the model's name. A model without one refuses images, as vLLM does for a text-only model.

use std::path::Path;

use servebench_roofline::{Catalog, RooflineError, VisionSpec};

use crate::args::SimArgs;

/// The vision facts of the model `args` serve, or `None` for a text-only model.
pub fn resolve(args: &SimArgs, catalog: &Catalog) -> Result<Option<VisionSpec>, RooflineError> {
    match &args.hf_config {
        Some(path) => from_hf_config(path),
        None => Ok(catalog.vision(&args.model).cloned()),
    }
}

/// The vision facts of a Hugging Face `config.json`, or `None` when it has no
/// `vision_config`.
pub fn from_hf_config(path: &Path) -> Result<Option<VisionSpec>, RooflineError> {
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|source| RooflineError::Io {
            path: p.to_path_buf(),
            source,
        })
    };
    let text = read(path)?;
    let pre_path = path.with_file_name("preprocessor_config.json");
    let pre = if pre_path.is_file() {
        Some(read(&pre_path)?)
    } else {
        None
    };
    let id = path
        .parent()
        .and_then(Path::file_name)
        .and_then(|n| n.to_str())
        .unwrap_or("custom");
    VisionSpec::from_hf_config_str(&text, pre.as_deref(), id).map_err(|message| {
        RooflineError::HfConfig {
            path: path.to_path_buf(),
            message,
        }
    })
}
