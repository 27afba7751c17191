//! Weight and KV-cache data types and the GPU batch class.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::RooflineError;

/// Data type of weights and activations (`--dtype`, docs/simulator.md §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// 2-byte weights, BF16 tensor-core peak.
    #[default]
    Bf16,
    /// 1-byte weights; FP8 tensor-core peak where the GPU has one (else weight-only FP8).
    Fp8,
}

impl Dtype {
    /// Bytes per weight (`b_w`).
    pub fn weight_bytes(self) -> f64 {
        match self {
            Dtype::Bf16 => 2.0,
            Dtype::Fp8 => 1.0,
        }
    }

    /// The canonical spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::Bf16 => "bf16",
            Dtype::Fp8 => "fp8",
        }
    }
}

impl FromStr for Dtype {
    type Err = RooflineError;

    /// Accepts vLLM's spellings: `auto`, `bf16`, `bfloat16` (all BF16) and `fp8`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "bf16" | "bfloat16" => Ok(Dtype::Bf16),
            "fp8" | "float8" | "fp8_e4m3" | "float8_e4m3fn" => Ok(Dtype::Fp8),
            other => Err(RooflineError::Invalid(format!(
                "unknown dtype '{other}'; expected bf16 (also 'bfloat16', 'auto') or fp8"
            ))),
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Data type of the KV cache (`--kv-cache-dtype`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KvDtype {
    /// The model's activation type: 2 bytes per element.
    #[default]
    Auto,
    /// 1 byte per element.
    Fp8,
}

impl KvDtype {
    /// Bytes per KV element (`b_kv`).
    pub fn bytes(self) -> f64 {
        match self {
            KvDtype::Auto => 2.0,
            KvDtype::Fp8 => 1.0,
        }
    }

    /// The canonical spelling (as vLLM's `cache_dtype` label shows it).
    pub fn as_str(self) -> &'static str {
        match self {
            KvDtype::Auto => "auto",
            KvDtype::Fp8 => "fp8",
        }
    }
}

impl FromStr for KvDtype {
    type Err = RooflineError;

    /// Accepts `auto` (also `bf16`, `bfloat16`) and `fp8` (also `fp8_e4m3`, `fp8_e5m2`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "bf16" | "bfloat16" => Ok(KvDtype::Auto),
            "fp8" | "fp8_e4m3" | "fp8_e5m2" => Ok(KvDtype::Fp8),
            other => Err(RooflineError::Invalid(format!(
                "unknown KV cache dtype '{other}'; expected auto or fp8"
            ))),
        }
    }
}

impl fmt::Display for KvDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which vLLM scheduler defaults a GPU gets (docs/simulator.md §2.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BatchClass {
    /// ≥ 70 GiB and not A100: 8192 batched tokens, 1024 sequences.
    Large,
    /// Everything else: 2048 batched tokens, 256 sequences.
    Small,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn dtype_spellings() {
        for s in ["bf16", "BFloat16", "auto", " bf16 "] {
            assert_eq!(s.parse::<Dtype>().unwrap(), Dtype::Bf16, "{s}");
        }
        assert_eq!("fp8".parse::<Dtype>().unwrap(), Dtype::Fp8);
        let err = "fp16x".parse::<Dtype>().unwrap_err().to_string();
        assert!(err.contains("fp16x") && err.contains("bf16"), "{err}");
        assert_eq!(Dtype::Fp8.weight_bytes(), 1.0);
        assert_eq!(Dtype::Bf16.weight_bytes(), 2.0);
    }

    #[test]
    fn kv_dtype_spellings() {
        assert_eq!("auto".parse::<KvDtype>().unwrap(), KvDtype::Auto);
        assert_eq!("FP8".parse::<KvDtype>().unwrap(), KvDtype::Fp8);
        assert_eq!("fp8_e5m2".parse::<KvDtype>().unwrap(), KvDtype::Fp8);
        assert!("int4".parse::<KvDtype>().is_err());
        assert_eq!(KvDtype::Fp8.bytes(), 1.0);
        assert_eq!(KvDtype::Auto.to_string(), "auto");
    }
}
