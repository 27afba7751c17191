//! `--calibration FILE`: a fitted profile applied to the deployment before explicit flags.

use std::path::Path;

use servebench_roofline::{CalibrationProfile, DeploymentBuilder};

use crate::SimError;

/// The builder with the profile at `path` applied (none: unchanged). A profile fitted for
/// another model, GPU, tensor-parallel size or dtype is refused with the mismatch named.
pub fn apply_file(
    path: Option<&Path>,
    builder: DeploymentBuilder,
) -> Result<DeploymentBuilder, SimError> {
    let Some(path) = path else {
        return Ok(builder);
    };
    let profile = CalibrationProfile::load(path)?;
    profile
        .apply_checked(builder)
        .map_err(|e| SimError::Config(format!("--calibration {}: {e}", path.display())))
}
