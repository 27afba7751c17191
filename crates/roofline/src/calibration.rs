//! Calibration profiles: the cost model's named factors fitted to one deployment (model, GPU,
//! tensor-parallel degree, weight type) from measured runs (docs/simulator.md "Calibrating to
//! your deployment"). A profile overrides the catalog's efficiencies and the default
//! overheads for that deployment only; applied to another, it is refused with the mismatch
//! named, because factors fitted on one GPU or model say nothing about another.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{DeploymentBuilder, Dtype, RooflineError};

/// The `schema` of a calibration profile.
pub const CALIBRATION_SCHEMA: &str = "servebench.calibration/v1";

/// A calibration profile file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibrationProfile {
    /// [`CALIBRATION_SCHEMA`].
    pub schema: String,
    /// The deployment the factors were fitted on.
    pub target: CalibrationTarget,
    /// The fitted factors; an absent one keeps the catalog's value or the default.
    pub factors: CalibrationFactors,
    /// How the fit went (informational; not read back into the model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit: Option<FitNotes>,
}

/// Which deployment a profile describes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibrationTarget {
    /// Model id as the catalog (or the model config) names it.
    pub model: String,
    /// GPU id as the catalog names it.
    pub gpu: String,
    /// Tensor-parallel degree.
    pub tensor_parallel_size: u32,
    /// Weight and activation type.
    pub dtype: Dtype,
}

/// The cost model's named factors (docs/simulator.md §3.3–3.4), each optional so a profile
/// may carry only what a fit identified.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibrationFactors {
    /// Whole-model MFU at the target's weight type (the FP8 MFU when the FP8 peak applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mfu: Option<f64>,
    /// Memory-bandwidth utilisation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mbu: Option<f64>,
    /// `t_fixed`, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_overhead_us: Option<f64>,
    /// `t_layer`, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer_overhead_us: Option<f64>,
    /// `t_req`, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub req_overhead_us: Option<f64>,
    /// `t_cpu_floor`, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_floor_us: Option<f64>,
}

/// A fit's record, kept in the profile for whoever reads it later.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FitNotes {
    /// The result files fitted on.
    pub results: Vec<String>,
    /// Observations (TTFTs and inter-token gaps) in the fit.
    pub observations: u64,
    /// RMS relative error of TTFT with the catalog's factors, and with the fitted ones.
    pub ttft_rms_error_before: f64,
    pub ttft_rms_error_after: f64,
    /// RMS relative error of inter-token gaps, before and after.
    pub itl_rms_error_before: f64,
    pub itl_rms_error_after: f64,
}

impl CalibrationProfile {
    /// Reads and checks a profile file.
    pub fn load(path: impl AsRef<Path>) -> Result<CalibrationProfile, RooflineError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| RooflineError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml_str(&text, &path.display().to_string())
    }

    /// Parses and checks a profile; `origin` names the source in error messages.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<CalibrationProfile, RooflineError> {
        let err = |message: String| RooflineError::Calibration {
            origin: origin.to_string(),
            message,
        };
        let p: CalibrationProfile = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        if p.schema != CALIBRATION_SCHEMA {
            return Err(err(format!(
                "schema '{}' is not {CALIBRATION_SCHEMA}",
                p.schema
            )));
        }
        p.check().map_err(err)?;
        Ok(p)
    }

    /// The profile as TOML text.
    pub fn to_toml_string(&self) -> Result<String, RooflineError> {
        toml::to_string(self).map_err(|e| RooflineError::Calibration {
            origin: "profile".into(),
            message: e.to_string(),
        })
    }

    fn check(&self) -> Result<(), String> {
        if self.target.tensor_parallel_size == 0 {
            return Err("target.tensor_parallel_size must be at least 1".into());
        }
        let f = &self.factors;
        for (name, v) in [("mfu", f.mfu), ("mbu", f.mbu)] {
            if let Some(v) = v {
                if !(v > 0.0 && v <= 1.0) {
                    return Err(format!("factors.{name} must be in (0, 1], got {v}"));
                }
            }
        }
        for (name, v) in [
            ("step_overhead_us", f.step_overhead_us),
            ("layer_overhead_us", f.layer_overhead_us),
            ("req_overhead_us", f.req_overhead_us),
            ("cpu_floor_us", f.cpu_floor_us),
        ] {
            if let Some(v) = v {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(format!(
                        "factors.{name} must be a non-negative number, got {v}"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Refuses a deployment other than the profile's, naming every field that differs.
    /// Model and GPU ids compare case-insensitively.
    pub fn check_target(
        &self,
        model: &str,
        gpu: &str,
        tensor_parallel_size: u32,
        dtype: Dtype,
    ) -> Result<(), RooflineError> {
        let t = &self.target;
        let mut mismatches = Vec::new();
        if !t.model.eq_ignore_ascii_case(model) {
            mismatches.push(format!("model '{}' (profile) vs '{model}'", t.model));
        }
        if !t.gpu.eq_ignore_ascii_case(gpu) {
            mismatches.push(format!("GPU '{}' (profile) vs '{gpu}'", t.gpu));
        }
        if t.tensor_parallel_size != tensor_parallel_size {
            mismatches.push(format!(
                "tensor-parallel size {} (profile) vs {tensor_parallel_size}",
                t.tensor_parallel_size
            ));
        }
        if t.dtype != dtype {
            mismatches.push(format!("dtype {} (profile) vs {dtype}", t.dtype));
        }
        if mismatches.is_empty() {
            Ok(())
        } else {
            Err(RooflineError::Calibration {
                origin: "profile".into(),
                message: format!(
                    "it was fitted for another deployment: {}",
                    mismatches.join(", ")
                ),
            })
        }
    }

    /// Checks the profile against the builder's deployment (set its dtype and tensor-parallel
    /// degree first) and applies it; see [`CalibrationProfile::apply`].
    pub fn apply_checked(
        &self,
        builder: DeploymentBuilder,
    ) -> Result<DeploymentBuilder, RooflineError> {
        let (gpu, model, dtype, tp) = builder.target();
        self.check_target(&model.id, &gpu.id, tp, dtype)?;
        let fp8_peak = crate::deployment::uses_fp8_peak(gpu, dtype);
        Ok(self.apply(builder, fp8_peak))
    }

    /// The builder with the profile's factors set. Explicit overrides (flags) go on the
    /// builder after this call, so they win over the profile. `fp8_peak` says whether the deployment runs at the FP8 peak, where the fitted MFU is
    /// the FP8 one.
    pub fn apply(&self, builder: DeploymentBuilder, fp8_peak: bool) -> DeploymentBuilder {
        let f = &self.factors;
        let builder = if fp8_peak {
            builder.mfu_fp8(f.mfu)
        } else {
            builder.mfu(f.mfu)
        };
        builder
            .mbu(f.mbu)
            .step_overhead_us(f.step_overhead_us)
            .layer_overhead_us(f.layer_overhead_us)
            .req_overhead_us(f.req_overhead_us)
            .cpu_floor_us(f.cpu_floor_us)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::{Catalog, Deployment};

    fn profile() -> CalibrationProfile {
        CalibrationProfile {
            schema: CALIBRATION_SCHEMA.into(),
            target: CalibrationTarget {
                model: "llama-3.1-8b".into(),
                gpu: "h100".into(),
                tensor_parallel_size: 1,
                dtype: Dtype::Bf16,
            },
            factors: CalibrationFactors {
                mfu: Some(0.5),
                mbu: Some(0.6),
                step_overhead_us: Some(200.0),
                layer_overhead_us: Some(40.0),
                req_overhead_us: Some(10.0),
                cpu_floor_us: Some(0.0),
            },
            fit: None,
        }
    }

    #[test]
    fn round_trips_through_toml() {
        let p = profile();
        let text = p.to_toml_string().unwrap();
        assert!(text.contains("[factors]"), "{text}");
        let back = CalibrationProfile::from_toml_str(&text, "t").unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn applies_its_factors() {
        let c = Catalog::builtin();
        let b = Deployment::builder(
            c.gpu("h100").unwrap().clone(),
            c.model("llama-3.1-8b").unwrap().clone(),
        );
        let d = profile().apply(b, false).build().unwrap();
        assert_eq!(d.efficiency().mfu, 0.5);
        assert_eq!(d.efficiency().mbu, 0.6);
        assert_eq!(d.overheads().step_overhead_us, 200.0);
        assert_eq!(d.overheads().layer_overhead_us, 40.0);
        assert_eq!(d.overheads().req_overhead_us, 10.0);
        // An explicit override given after the profile wins.
        let b = Deployment::builder(
            c.gpu("h100").unwrap().clone(),
            c.model("llama-3.1-8b").unwrap().clone(),
        );
        let d = profile().apply(b, false).mbu(0.7).build().unwrap();
        assert_eq!(d.efficiency().mbu, 0.7);
    }

    #[test]
    fn another_deployment_is_refused_with_the_mismatch_named() {
        let p = profile();
        p.check_target("LLAMA-3.1-8B", "h100", 1, Dtype::Bf16)
            .unwrap();
        let e = p
            .check_target("qwen2.5-7b", "a100-80g", 2, Dtype::Fp8)
            .unwrap_err()
            .to_string();
        for part in [
            "model 'llama-3.1-8b' (profile) vs 'qwen2.5-7b'",
            "GPU 'h100' (profile) vs 'a100-80g'",
            "tensor-parallel size 1 (profile) vs 2",
            "dtype bf16 (profile) vs fp8",
        ] {
            assert!(e.contains(part), "{e}");
        }
    }

    #[test]
    fn bad_profiles_name_the_problem() {
        let text = profile().to_toml_string().unwrap();
        let e =
            CalibrationProfile::from_toml_str(&text.replace("mbu = 0.6", "mbu = 1.6"), "p.toml")
                .unwrap_err()
                .to_string();
        assert!(e.contains("p.toml") && e.contains("factors.mbu"), "{e}");
        let e = CalibrationProfile::from_toml_str(
            &text.replace(CALIBRATION_SCHEMA, "other/v9"),
            "p.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("other/v9"), "{e}");
        let e = CalibrationProfile::from_toml_str("schema = 1", "p.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("p.toml"), "{e}");
    }
}
