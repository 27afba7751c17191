//! The simulator's configuration as a result records it (`metadata.target.sim_config`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The simulated engine's settings. The fields readers interpret are typed; the engine's
/// cost-model sections (`efficiency`, `overheads`, `kv_capacity`, `derived`, `roofline`,
/// `faults`, ...) are kept as recorded in `other`, so the file round-trips unchanged and a
/// reader asks for them through the accessors below. A typed setting the file lacks stays
/// absent when written back.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SimConfig {
    /// `servebench-sim`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// The simulator's version (`0.1.0-sim`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Catalog model id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Catalog GPU id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    /// Weight dtype (`bf16`, `fp8`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
    /// KV-cache dtype (`auto`, `fp8`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_dtype: Option<String>,
    /// GPUs per replica.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_parallel_size: Option<u32>,
    /// The scheduler's sequence limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_num_seqs: Option<u64>,
    /// The step token budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_num_batched_tokens: Option<u64>,
    /// Tokens per KV block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u64>,
    /// Share of GPU memory the engine may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_utilization: Option<f64>,
    /// Whether prefix caching is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_prefix_caching: Option<bool>,
    /// Whether the next step is scheduled while the current one runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub async_scheduling: Option<bool>,
    /// Every other setting, as recorded; readers reach it through the accessors, so no
    /// untyped value leaves this crate.
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

impl SimConfig {
    /// A number inside one of the recorded sections (`efficiency.mfu`, `overheads.link_gbps`).
    pub fn section_f64(&self, section: &str, key: &str) -> Option<f64> {
        self.other.get(section)?.get(key)?.as_f64()
    }

    /// KV-cache capacity in tokens (`kv_capacity.tokens`, else `derived.kv_cache_tokens`).
    pub fn kv_cache_tokens(&self) -> Option<u64> {
        let at = |section: &str, key: &str| self.other.get(section)?.get(key)?.as_u64();
        at("kv_capacity", "tokens").or_else(|| at("derived", "kv_cache_tokens"))
    }

    /// The fleet layout (`fleet`), when the simulator ran several engines behind a router.
    pub fn fleet(&self) -> Option<FleetConfig> {
        serde_json::from_value(self.other.get("fleet")?.clone()).ok()
    }

    /// Every setting as `dotted.key = value` text, in key order (nested sections flattened).
    pub fn settings(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if let Ok(v) = serde_json::to_value(self) {
            flatten("", &v, &mut out);
        }
        out
    }
}

/// A simulated fleet's layout as recorded (`sim_config.fleet`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetConfig {
    /// GPUs of the whole fleet, as the simulator counted them.
    #[serde(default)]
    pub gpus: Option<u32>,
    /// The pool requests no rule matches go to.
    #[serde(default)]
    pub default_pool: Option<String>,
    /// Routing rules as written.
    #[serde(default)]
    pub routes: Vec<String>,
    /// The pools, in spec order.
    #[serde(default)]
    pub pools: Vec<FleetPool>,
}

/// One pool of a recorded fleet.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetPool {
    pub name: String,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub gpu: Option<String>,
    /// GPUs per engine.
    #[serde(default)]
    pub tensor_parallel_size: Option<u32>,
    #[serde(default)]
    pub replicas: Option<u32>,
    #[serde(default)]
    pub prefill_replicas: Option<u32>,
    #[serde(default)]
    pub decode_replicas: Option<u32>,
}

impl FleetPool {
    /// Engines in the pool: a prefill/decode pool counts both kinds.
    pub fn engines(&self) -> u32 {
        match (self.prefill_replicas, self.decode_replicas) {
            (Some(p), Some(d)) => p + d,
            _ => self.replicas.unwrap_or(1),
        }
    }

    /// GPUs the pool occupies: engines × tensor-parallel size.
    pub fn gpus(&self) -> u32 {
        self.engines() * self.tensor_parallel_size.unwrap_or(1).max(1)
    }
}

impl FleetConfig {
    /// GPUs of the whole fleet: the sum over pools of engines × tensor-parallel size (the
    /// recorded total when the pools are missing).
    pub fn gpu_count(&self) -> u32 {
        if self.pools.is_empty() {
            return self.gpus.unwrap_or(0);
        }
        self.pools.iter().map(FleetPool::gpus).sum()
    }
}

fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        Value::Null if prefix.is_empty() => {}
        Value::String(s) => out.push((prefix.to_owned(), s.clone())),
        other => out.push((prefix.to_owned(), other.to_string())),
    }
}
