//! GPU telemetry as recorded in a result: per-GPU series read from `nvidia-smi` or a DCGM
//! exporter during the run, stamped on the run's own clock (ns from its time zero).

use serde::{Deserialize, Serialize};

/// The note a result and a report carry when no GPU source was available.
pub const NO_GPU_TELEMETRY: &str = "no GPU telemetry (nvidia-smi not found)";

/// One reading of one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    /// ns from the run's time zero (the same clock as every request record).
    pub t: u64,
    /// SM utilization, percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub util_percent: Option<f64>,
    /// Frame-buffer memory used, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_mib: Option<f64>,
    /// Board power draw, W.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_w: Option<f64>,
    /// SM clock, MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_clock_mhz: Option<f64>,
}

/// One GPU's time series.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuSeries {
    /// The GPU's index (`nvidia-smi`'s `index`, DCGM's `gpu` label).
    pub gpu: String,
    #[serde(default)]
    pub samples: Vec<GpuSample>,
}

/// Everything read about the GPUs during one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuTelemetry {
    /// `nvidia-smi`, `dcgm` (with the URL), or `none`.
    pub source: String,
    /// Why there is nothing, when there is nothing (see [`NO_GPU_TELEMETRY`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Per GPU, in index order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<GpuSeries>,
    /// Lines or scrapes that could not be read (skipped, counted).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub bad_readings: u64,
    /// The source stopped before the run ended (`nvidia-smi` exited), with what it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_early: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl GpuTelemetry {
    /// A run without any GPU source.
    pub fn unavailable() -> Self {
        GpuTelemetry {
            source: "none".into(),
            note: Some(NO_GPU_TELEMETRY.into()),
            ..GpuTelemetry::default()
        }
    }

    /// Whether any sample was read.
    pub fn has_samples(&self) -> bool {
        self.gpus.iter().any(|g| !g.samples.is_empty())
    }

    /// What to say when nothing was read: the note, else why the source gave nothing.
    pub fn describe_absence(&self) -> Option<String> {
        if self.has_samples() {
            return None;
        }
        Some(self.note.clone().unwrap_or_else(|| {
            format!(
                "no GPU telemetry ({} gave no readable sample{})",
                self.source,
                self.ended_early
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            )
        }))
    }
}
