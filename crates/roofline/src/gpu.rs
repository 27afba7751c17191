//! GPU descriptions: peaks, memory, interconnect and default efficiencies (docs/simulator.md §5).

use serde::{Deserialize, Serialize};

use crate::{BatchClass, RooflineError};

/// Bytes in a GiB.
pub const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// Default whole-model BF16 MFU of a GPU given by `--gpu-spec` (between the catalog's
/// GDDR6 and Hopper figures).
pub const SPEC_DEFAULT_MFU_BF16: f64 = 0.55;
/// Default MBU of a GPU given by `--gpu-spec`.
pub const SPEC_DEFAULT_MBU: f64 = 0.75;
/// Default all-reduce bandwidth of a GPU given by `--gpu-spec` (PCIe 4, the slowest link).
pub const SPEC_DEFAULT_LINK_GBPS: f64 = 25.0;
/// Usable memory from which a `--gpu-spec` GPU gets the large batch class (§2.5).
pub const LARGE_CLASS_MIN_GIB: f64 = 70.0;

/// One GPU of the catalog (`[[gpu]]` table).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    /// Catalog id (`h100`).
    pub id: String,
    /// Other names accepted by lookups (case-insensitive).
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Human-readable name.
    #[serde(default)]
    pub name: String,
    /// Dense BF16 tensor-core peak, TFLOP/s.
    pub bf16_tflops: f64,
    /// Dense FP8 tensor-core peak, TFLOP/s; absent when the GPU has no FP8 tensor cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8_tflops: Option<f64>,
    /// Peak memory bandwidth, TB/s.
    pub mem_bw_tbps: f64,
    /// Marketing memory size, GB (informational).
    #[serde(default)]
    pub memory_gb: f64,
    /// Memory as the CUDA runtime reports it, GiB: the base of KV sizing (§4).
    pub usable_gib: f64,
    /// Effective all-reduce bandwidth, GB/s.
    pub link_gbps: f64,
    /// Which scheduler defaults apply (§2.5).
    pub batch_class: BatchClass,
    /// Whole-model MFU at BF16.
    pub mfu_bf16: f64,
    /// Whole-model MFU at FP8; absent means 0.7 × `mfu_bf16`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mfu_fp8: Option<f64>,
    /// Whole-model memory-bandwidth utilisation.
    pub mbu: f64,
    /// Whether MFU/MBU were fitted to measurements (false = educated guess).
    #[serde(default)]
    pub calibrated: bool,
    /// Bandwidth utilisation of KV-cache reads by the decode-attention kernels; absent means
    /// `mbu` (one efficiency for every byte).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mbu_kv: Option<f64>,
    /// Latency of one step of a tree all-reduce between this GPU and its peers, µs; an
    /// all-reduce over `tp` ranks takes `2·log2(tp)` such steps on top of its fixed `α`.
    /// Absent means 0: GPUs whose engines all-reduce small messages in one shot over a full
    /// NVLink/xGMI mesh (vLLM's custom all-reduce) pay only `α` (docs/simulator.md §12.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allreduce_step_us: Option<f64>,
}

impl GpuSpec {
    /// Builds a GPU from `--gpu-spec bf16_tflops,fp8_tflops,tb_per_s,usable_gib`.
    ///
    /// `fp8_tflops` may be empty, `-`, `0` or `none` for a GPU without FP8 tensor cores. The
    /// fields the string cannot carry get uncalibrated defaults: MFU
    /// [`SPEC_DEFAULT_MFU_BF16`] (FP8: 0.7 × that), MBU [`SPEC_DEFAULT_MBU`], link
    /// [`SPEC_DEFAULT_LINK_GBPS`], and the large batch class from
    /// [`LARGE_CLASS_MIN_GIB`] of usable memory. `--mfu`, `--mbu` and `--link-gbps` override them.
    pub fn from_spec_str(spec: &str) -> Result<GpuSpec, RooflineError> {
        let err = |message: String| RooflineError::GpuSpec {
            spec: spec.to_string(),
            message,
        };
        let fields: Vec<&str> = spec.split(',').map(str::trim).collect();
        if fields.len() != 4 {
            return Err(err(format!("{} fields, expected 4", fields.len())));
        }
        let number = |name: &str, s: &str| -> Result<f64, RooflineError> {
            let v: f64 = s
                .parse()
                .map_err(|_| err(format!("{name} '{s}' is not a number")))?;
            if !v.is_finite() || v <= 0.0 {
                return Err(err(format!("{name} must be positive, got {s}")));
            }
            Ok(v)
        };
        let bf16_tflops = number("bf16_tflops", fields[0])?;
        let fp8_tflops = match fields[1].to_ascii_lowercase().as_str() {
            "" | "-" | "0" | "none" => None,
            s => Some(number("fp8_tflops", s)?),
        };
        let mem_bw_tbps = number("tb_per_s", fields[2])?;
        let usable_gib = number("usable_gib", fields[3])?;
        let batch_class = if usable_gib >= LARGE_CLASS_MIN_GIB {
            BatchClass::Large
        } else {
            BatchClass::Small
        };
        Ok(GpuSpec {
            id: "custom".to_string(),
            aliases: Vec::new(),
            name: format!("custom GPU ({spec})"),
            bf16_tflops,
            fp8_tflops,
            mem_bw_tbps,
            memory_gb: usable_gib * GIB / 1e9,
            usable_gib,
            link_gbps: SPEC_DEFAULT_LINK_GBPS,
            batch_class,
            mfu_bf16: SPEC_DEFAULT_MFU_BF16,
            mfu_fp8: None,
            mbu: SPEC_DEFAULT_MBU,
            calibrated: false,
            mbu_kv: None,
            allreduce_step_us: None,
        })
    }

    /// Whether the GPU has FP8 tensor cores.
    pub fn has_fp8(&self) -> bool {
        self.fp8_tflops.is_some()
    }

    /// FP8 MFU, defaulting to 0.7 × the BF16 one (§3.4).
    pub fn mfu_fp8_or_default(&self) -> f64 {
        self.mfu_fp8.unwrap_or(0.7 * self.mfu_bf16)
    }

    /// Does `name` (case-insensitive) name this GPU, by id or alias?
    pub fn matches(&self, name: &str) -> bool {
        self.id.eq_ignore_ascii_case(name)
            || self.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
    }

    /// Checks that every number is usable.
    pub fn validate(&self) -> Result<(), RooflineError> {
        let positive = [
            ("bf16_tflops", self.bf16_tflops),
            ("mem_bw_tbps", self.mem_bw_tbps),
            ("usable_gib", self.usable_gib),
            ("link_gbps", self.link_gbps),
            ("mfu_bf16", self.mfu_bf16),
            ("mbu", self.mbu),
        ];
        let optional = [
            ("fp8_tflops", self.fp8_tflops),
            ("mfu_fp8", self.mfu_fp8),
            ("mbu_kv", self.mbu_kv),
        ];
        for (name, v) in positive
            .into_iter()
            .chain(optional.into_iter().filter_map(|(n, v)| v.map(|v| (n, v))))
        {
            if !v.is_finite() || v <= 0.0 {
                return Err(RooflineError::Invalid(format!(
                    "GPU '{}': {name} must be positive, got {v}",
                    self.id
                )));
            }
        }
        for (name, v) in [
            ("mfu_bf16", Some(self.mfu_bf16)),
            ("mfu_fp8", self.mfu_fp8),
            ("mbu", Some(self.mbu)),
            ("mbu_kv", self.mbu_kv),
        ] {
            if let Some(v) = v {
                if v > 1.0 {
                    return Err(RooflineError::Invalid(format!(
                        "GPU '{}': {name} is a fraction of peak and must be at most 1, got {v}",
                        self.id
                    )));
                }
            }
        }
        if let Some(v) = self.allreduce_step_us {
            if !(v.is_finite() && v >= 0.0) {
                return Err(RooflineError::Invalid(format!(
                    "GPU '{}': allreduce_step_us must be a non-negative number, got {v}",
                    self.id
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn spec_string_with_fp8() {
        let g = GpuSpec::from_spec_str("989.4, 1978.9, 3.35, 79.2").unwrap();
        assert_eq!(g.bf16_tflops, 989.4);
        assert_eq!(g.fp8_tflops, Some(1978.9));
        assert_eq!(g.mem_bw_tbps, 3.35);
        assert_eq!(g.usable_gib, 79.2);
        assert_eq!(g.batch_class, BatchClass::Large);
        assert!((g.mfu_fp8_or_default() - 0.7 * SPEC_DEFAULT_MFU_BF16).abs() < 1e-12);
        g.validate().unwrap();
    }

    #[test]
    fn spec_string_without_fp8() {
        for s in [
            "149.7,-,0.696,44.4",
            "149.7,,0.696,44.4",
            "149.7,none,0.696,44.4",
        ] {
            let g = GpuSpec::from_spec_str(s).unwrap();
            assert_eq!(g.fp8_tflops, None, "{s}");
            assert!(!g.has_fp8());
            assert_eq!(g.batch_class, BatchClass::Small);
        }
    }

    #[test]
    fn spec_string_errors_name_the_problem() {
        let e = GpuSpec::from_spec_str("1,2,3").unwrap_err().to_string();
        assert!(e.contains("3 fields"), "{e}");
        let e = GpuSpec::from_spec_str("abc,2,3,4").unwrap_err().to_string();
        assert!(e.contains("bf16_tflops 'abc'"), "{e}");
        let e = GpuSpec::from_spec_str("1,2,-3,4").unwrap_err().to_string();
        assert!(e.contains("tb_per_s must be positive"), "{e}");
    }
}
