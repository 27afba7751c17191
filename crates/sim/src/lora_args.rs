//! `servebench sim --lora-modules/--max-loras/--max-lora-rank/--lora-load-ms` into the engine's
//! LoRA limits and the adapter names the server accepts.

use crate::args::SimArgs;
use crate::engine::LoraConfig;
use crate::SimError;

/// The adapter names of `--lora-modules` (`NAME` or vLLM's `NAME=PATH`).
pub(crate) fn adapter_names(specs: &[String]) -> Result<Vec<String>, SimError> {
    let mut names: Vec<String> = Vec::new();
    for spec in specs {
        let name = spec
            .split_once('=')
            .map_or(spec.as_str(), |(n, _)| n)
            .trim();
        if name.is_empty() {
            return Err(SimError::Config(format!(
                "--lora-modules {spec}: the adapter name is empty"
            )));
        }
        if names.iter().any(|n| n == name) {
            return Err(SimError::Config(format!(
                "--lora-modules names {name} twice"
            )));
        }
        names.push(name.to_owned());
    }
    Ok(names)
}

/// The engine's LoRA limits; none without adapters.
pub(crate) fn engine_config(a: &SimArgs, names: &[String]) -> Result<LoraConfig, SimError> {
    if names.is_empty() {
        return Ok(LoraConfig::default());
    }
    if !(a.lora_load_ms.is_finite() && a.lora_load_ms >= 0.0) {
        return Err(SimError::Config(format!(
            "--lora-load-ms must be a non-negative number of milliseconds, got {}",
            a.lora_load_ms
        )));
    }
    Ok(LoraConfig {
        max_loras: a.max_loras,
        max_lora_rank: a.max_lora_rank,
        load_ns: (a.lora_load_ms * 1e6).round() as u64,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_take_vllms_name_path_form() {
        let n = adapter_names(&["a=/p/a".into(), "b".into()]).unwrap();
        assert_eq!(n, vec!["a", "b"]);
        assert!(adapter_names(&["a".into(), "a=/x".into()]).is_err());
        assert!(adapter_names(&["=/x".into()]).is_err());
    }
}
