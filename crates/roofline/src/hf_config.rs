//! Reading a model's shape from a Hugging Face `config.json` (`--hf-config`).

use std::path::Path;

use serde_json::{Map, Value};

use crate::{ModelSpec, RooflineError};

impl ModelSpec {
    /// Reads a Hugging Face `config.json`.
    ///
    /// Handles the variations that matter for the cost model: `head_dim` absent or null
    /// (then `d/H`), `num_key_value_heads` absent (multi-head attention: `H`),
    /// `num_local_experts` (Mixtral) as well as `num_experts` (Qwen-MoE), an expert count of
    /// 0 or null meaning dense, `moe_intermediate_size` absent (experts use
    /// `intermediate_size`), `tie_word_embeddings` absent (untied), and multimodal configs
    /// whose language model sits under `text_config`. The id is `_name_or_path` when
    /// present, else the name of the directory holding the file.
    pub fn from_hf_config(path: impl AsRef<Path>) -> Result<ModelSpec, RooflineError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| RooflineError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let fallback_id = path
            .parent()
            .and_then(Path::file_name)
            .and_then(|n| n.to_str())
            .filter(|n| !n.is_empty())
            .unwrap_or("custom");
        ModelSpec::from_hf_config_str(&text, fallback_id).map_err(|message| {
            RooflineError::HfConfig {
                path: path.to_path_buf(),
                message,
            }
        })
    }

    /// [`ModelSpec::from_hf_config`] on the file's text; `fallback_id` names the model when
    /// the config has no `_name_or_path`. Errors are plain messages for the caller to wrap.
    pub fn from_hf_config_str(text: &str, fallback_id: &str) -> Result<ModelSpec, String> {
        let root: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
        let root = root
            .as_object()
            .ok_or_else(|| "the top level is not a JSON object".to_string())?;
        let cfg = Keys::new(root);

        let name = root
            .get("_name_or_path")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty());
        let id = name.unwrap_or(fallback_id).to_string();
        let aliases = match name {
            Some(n) if n != id => vec![n.to_string()],
            _ => Vec::new(),
        };

        let num_hidden_layers = cfg.required("num_hidden_layers")?;
        let hidden_size = cfg.required("hidden_size")?;
        let num_attention_heads = cfg.required("num_attention_heads")?;
        let num_experts = match cfg.optional("num_experts")? {
            Some(e) => Some(e),
            None => cfg.optional("num_local_experts")?,
        }
        .filter(|&e| e > 0);
        let moe_intermediate_size = cfg.optional("moe_intermediate_size")?;
        let intermediate_size = match (cfg.optional("intermediate_size")?, num_experts) {
            (Some(f), _) => f,
            // A MoE config may omit the dense width; it is only informational then.
            (None, Some(_)) if moe_intermediate_size.is_some() => 0,
            (None, _) => return Err("missing key 'intermediate_size'".into()),
        };
        let spec = ModelSpec {
            id,
            aliases,
            num_hidden_layers,
            hidden_size,
            num_attention_heads,
            num_key_value_heads: cfg
                .optional("num_key_value_heads")?
                .unwrap_or(num_attention_heads),
            head_dim: cfg.optional("head_dim")?,
            intermediate_size,
            vocab_size: cfg.required("vocab_size")?,
            tie_word_embeddings: cfg.flag("tie_word_embeddings")?.unwrap_or(false),
            max_position_embeddings: cfg.required("max_position_embeddings")?,
            num_experts,
            num_experts_per_tok: if num_experts.is_some() {
                Some(cfg.required("num_experts_per_tok")?)
            } else {
                None
            },
            moe_intermediate_size: if num_experts.is_some() {
                moe_intermediate_size
            } else {
                None
            },
        };
        spec.validate().map_err(|e| e.to_string())?;
        Ok(spec)
    }
}

/// Key lookup in a config, preferring a nested `text_config` (multimodal models) and falling
/// back to the top level.
struct Keys<'a> {
    levels: Vec<&'a Map<String, Value>>,
}

impl<'a> Keys<'a> {
    fn new(root: &'a Map<String, Value>) -> Self {
        let mut levels = Vec::with_capacity(2);
        if let Some(Value::Object(text)) = root.get("text_config") {
            levels.push(text);
        }
        levels.push(root);
        Keys { levels }
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.levels
            .iter()
            .find_map(|m| m.get(key))
            .filter(|v| !v.is_null())
    }

    fn optional(&self, key: &str) -> Result<Option<u32>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| format!("'{key}' must be a non-negative integer, got {v}")),
        }
    }

    fn required(&self, key: &str) -> Result<u32, String> {
        self.optional(key)?
            .ok_or_else(|| format!("missing key '{key}'"))
    }

    fn flag(&self, key: &str) -> Result<Option<bool>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(format!("'{key}' must be true or false, got {v}")),
        }
    }
}
