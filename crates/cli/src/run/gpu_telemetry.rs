//! GPU telemetry around a measured HTTP run: the source is chosen before the run starts (a
//! bad `--gpu-metrics-url` stops the run before any request), sampled during it, and placed on
//! the run's clock once it ends.

use std::time::Duration;

use anyhow::Result;
use servebench_loadgen::gpu::{GpuSampler, GpuSource, GpuTelemetry};
use servebench_loadgen::LoadOutcome;

/// nvidia-smi's `-lms` and the exporter's poll interval.
const EVERY: Duration = Duration::from_secs(1);

/// A started sampler, or the note that there is no source.
pub(super) enum GpuWatch {
    Sampling(GpuSampler),
    NoSource,
}

impl GpuWatch {
    /// Start reading the GPUs: `--gpu-metrics-url`, else `nvidia-smi` on PATH.
    pub(super) fn start(url: Option<&str>) -> Result<Self> {
        Ok(match GpuSource::detect(url)? {
            Some(source) => GpuWatch::Sampling(GpuSampler::start(&source, EVERY)),
            None => GpuWatch::NoSource,
        })
    }

    /// Stop and put the series (or the note) into `outcome`.
    pub(super) async fn finish(self, outcome: &mut LoadOutcome) {
        outcome.gpu = Some(match self {
            GpuWatch::Sampling(s) => s.finish(outcome.clock).await,
            GpuWatch::NoSource => GpuTelemetry::unavailable(),
        });
    }
}

/// `--gpu-metrics-url`, checked when the plan is made.
pub(super) fn checked_url(url: Option<&String>) -> Result<Option<String>> {
    if let Some(u) = url {
        GpuSource::detect(Some(u))?;
    }
    Ok(url.cloned())
}

/// One line for the terminal: what was read, or why nothing was.
pub(super) fn describe(g: &GpuTelemetry) -> String {
    if let Some(why) = g.describe_absence() {
        return format!("GPU telemetry: {why}");
    }
    let samples: usize = g.gpus.iter().map(|s| s.samples.len()).sum();
    let mut line = format!(
        "GPU telemetry: {} GPU(s) from {}, {samples} samples",
        g.gpus.len(),
        g.source
    );
    if g.bad_readings > 0 {
        line.push_str(&format!(", {} unreadable skipped", g.bad_readings));
    }
    if let Some(e) = &g.ended_early {
        line.push_str(&format!(" ({e})"));
    }
    line
}
