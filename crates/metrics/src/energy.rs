//! Energy over a run's measured window, from the GPU power readings taken beside it
//! (`nvidia-smi` or a DCGM exporter, [`GpuTelemetry`]).
//!
//! Per GPU, the readings inside the window give its mean power: the trapezoid integral of
//! power over the readings, divided by the time they span (one reading is its own mean). The
//! GPUs' means add up to the mean board power of the deployment; times the window's length it
//! is the energy the window took. Readings come once a second, so the first and last fall up
//! to a second inside the window's ends: spreading the mean over the whole window, rather than
//! integrating only between the first and the last reading, keeps a short run from losing up
//! to two seconds of energy.

use serde::{Deserialize, Serialize};

use crate::result::GpuTelemetry;

/// GPU energy of one run's measured window (`summary.energy` in a result).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnergySummary {
    /// Where the power readings came from (`nvidia-smi`, `dcgm <url>`).
    pub source: String,
    /// GPUs with at least one power reading inside the window (every GPU the source reports:
    /// the whole node unless the source was limited to the deployment's GPUs).
    pub gpus: u32,
    /// Power readings inside the window, all GPUs together.
    pub samples: u64,
    /// The measured window, s: from the run's time zero to the end of its last request (the
    /// duration throughputs are divided by).
    pub window_s: f64,
    /// The shortest span any GPU's readings cover inside the window, s.
    pub covered_s: f64,
    /// Mean board power over the window, all GPUs together, W.
    pub avg_power_w: f64,
    /// Energy over the window, J (`avg_power_w × window_s`).
    pub energy_j: f64,
    /// Output tokens of the completed requests (the run's `total_output_tokens`).
    pub output_tokens: u64,
    /// `energy_j / output_tokens`; absent without output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub joules_per_output_token: Option<f64>,
    /// `output_tokens / energy_j`; absent without energy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_per_joule: Option<f64>,
}

impl EnergySummary {
    /// One line for a terminal or a report: `0.512 J per output token, 1.95 output tokens/J,
    /// 400.0 W average (2 GPUs, nvidia-smi, 12 readings over 9.1 s)`.
    pub fn describe(&self) -> String {
        let mut line = String::new();
        match (self.joules_per_output_token, self.output_tokens_per_joule) {
            (Some(j), Some(t)) => {
                line.push_str(&format!(
                    "{} J per output token, {} output tokens/J, ",
                    significant(j),
                    significant(t)
                ));
            }
            _ => line.push_str("no output tokens, "),
        }
        line.push_str(&format!(
            "{:.1} W average ({} GPU{}, {}, {} readings over {:.1} s of {:.1} s)",
            self.avg_power_w,
            self.gpus,
            if self.gpus == 1 { "" } else { "s" },
            self.source,
            self.samples,
            self.covered_s,
            self.window_s
        ));
        line
    }
}

/// Three significant digits, without an exponent for the magnitudes energy takes.
fn significant(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let digits = (2 - v.abs().log10().floor() as i32).clamp(0, 9) as usize;
    format!("{v:.digits$}")
}

/// The energy of the window `[start_ns, end_ns]` on the run's clock, from the power readings
/// of `gpu` inside it; `None` when no GPU has a power reading there (no source, a source
/// without power, a window shorter than the gap between readings) or the window is empty.
pub fn energy(
    gpu: &GpuTelemetry,
    start_ns: u64,
    end_ns: u64,
    output_tokens: u64,
) -> Option<EnergySummary> {
    if end_ns <= start_ns {
        return None;
    }
    let mut power = 0.0;
    let mut gpus = 0u32;
    let mut samples = 0u64;
    let mut covered: Option<f64> = None;
    for series in &gpu.gpus {
        let readings: Vec<(u64, f64)> = series
            .samples
            .iter()
            .filter(|s| s.t >= start_ns && s.t <= end_ns)
            .filter_map(|s| Some((s.t, s.power_w.filter(|w| w.is_finite() && *w >= 0.0)?)))
            .collect();
        let Some(mean) = mean_power(&readings) else {
            continue;
        };
        power += mean;
        gpus += 1;
        samples += readings.len() as u64;
        let span = match (readings.first(), readings.last()) {
            (Some(a), Some(b)) => (b.0 - a.0) as f64 / 1e9,
            _ => 0.0,
        };
        covered = Some(covered.map_or(span, |c: f64| c.min(span)));
    }
    if gpus == 0 {
        return None;
    }
    let window_s = (end_ns - start_ns) as f64 / 1e9;
    let energy_j = power * window_s;
    Some(EnergySummary {
        source: gpu.source.clone(),
        gpus,
        samples,
        window_s,
        covered_s: covered.unwrap_or(0.0),
        avg_power_w: power,
        energy_j,
        output_tokens,
        joules_per_output_token: (output_tokens > 0).then(|| energy_j / output_tokens as f64),
        output_tokens_per_joule: (energy_j > 0.0).then(|| output_tokens as f64 / energy_j),
    })
}

/// The mean of a power series `(t ns, W)` in time order: the trapezoid integral over the
/// readings divided by the time they span; one reading (or readings all at one instant) is
/// its own mean.
fn mean_power(readings: &[(u64, f64)]) -> Option<f64> {
    let (first, last) = (readings.first()?, readings.last()?);
    let span = last.0.saturating_sub(first.0);
    if span == 0 {
        return Some(readings.iter().map(|r| r.1).sum::<f64>() / readings.len() as f64);
    }
    let integral: f64 = readings
        .windows(2)
        .map(|w| (w[1].0.saturating_sub(w[0].0)) as f64 * (w[0].1 + w[1].1) / 2.0)
        .sum();
    Some(integral / span as f64)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::result::{GpuSample, GpuSeries};

    const S: u64 = 1_000_000_000;

    fn series(gpu: &str, readings: &[(f64, Option<f64>)]) -> GpuSeries {
        GpuSeries {
            gpu: gpu.into(),
            samples: readings
                .iter()
                .map(|&(t, w)| GpuSample {
                    t: (t * S as f64) as u64,
                    util_percent: Some(50.0),
                    memory_used_mib: None,
                    power_w: w,
                    sm_clock_mhz: None,
                })
                .collect(),
        }
    }

    fn telemetry(gpus: Vec<GpuSeries>) -> GpuTelemetry {
        GpuTelemetry {
            source: "nvidia-smi".into(),
            gpus,
            ..GpuTelemetry::default()
        }
    }

    /// Constant power: the mean is the power, the energy power × window, whatever the
    /// readings cover.
    #[test]
    fn constant_power_over_two_gpus() {
        let g = telemetry(vec![
            series(
                "0",
                &[(0.5, Some(300.0)), (1.5, Some(300.0)), (2.5, Some(300.0))],
            ),
            series(
                "1",
                &[(0.5, Some(100.0)), (1.5, Some(100.0)), (2.5, Some(100.0))],
            ),
        ]);
        let e = energy(&g, 0, 3 * S, 1200).unwrap();
        assert_eq!(e.gpus, 2);
        assert_eq!(e.samples, 6);
        assert!((e.avg_power_w - 400.0).abs() < 1e-9);
        assert!((e.energy_j - 1200.0).abs() < 1e-9);
        assert!((e.joules_per_output_token.unwrap() - 1.0).abs() < 1e-12);
        assert!((e.output_tokens_per_joule.unwrap() - 1.0).abs() < 1e-12);
        assert!((e.covered_s - 2.0).abs() < 1e-9);
        assert_eq!(
            e.describe(),
            "1.00 J per output token, 1.00 output tokens/J, 400.0 W average (2 GPUs, nvidia-smi, 6 readings over 2.0 s of 3.0 s)"
        );
    }

    /// A ramp 100 → 300 W read unevenly: the trapezoid weighs each interval by its length.
    #[test]
    fn uneven_readings_are_weighted_by_time() {
        // 100 W at 0 s, 200 W at 1 s, 300 W at 3 s: ∫ = 150 + 500 = 650 J over 3 s.
        let g = telemetry(vec![series(
            "0",
            &[(0.0, Some(100.0)), (1.0, Some(200.0)), (3.0, Some(300.0))],
        )]);
        let e = energy(&g, 0, 3 * S, 650).unwrap();
        assert!((e.avg_power_w - 650.0 / 3.0).abs() < 1e-9);
        assert!((e.energy_j - 650.0).abs() < 1e-9);
        assert!((e.joules_per_output_token.unwrap() - 1.0).abs() < 1e-12);
    }

    /// Readings outside the window (before the load, after its last request) and readings
    /// without power are left out; a GPU without any power reading is not counted.
    #[test]
    fn only_the_window_and_power_readings_count() {
        let g = telemetry(vec![
            series(
                "0",
                &[
                    (0.0, Some(50.0)),
                    (2.0, Some(200.0)),
                    (3.0, None),
                    (4.0, Some(200.0)),
                    (9.0, Some(60.0)),
                ],
            ),
            series("1", &[(2.0, None), (4.0, None)]),
        ]);
        let e = energy(&g, S, 5 * S, 0).unwrap();
        assert_eq!(e.gpus, 1);
        assert_eq!(e.samples, 2);
        assert!((e.avg_power_w - 200.0).abs() < 1e-9);
        assert!((e.energy_j - 800.0).abs() < 1e-9);
        assert_eq!(e.joules_per_output_token, None);
        assert!(e
            .describe()
            .starts_with("no output tokens, 200.0 W average (1 GPU,"));
        // One reading is its own mean.
        let one = energy(&g, 3 * S, 5 * S, 100).unwrap();
        assert!((one.avg_power_w - 200.0).abs() < 1e-9);
        assert_eq!(one.covered_s, 0.0);
    }

    #[test]
    fn nothing_to_integrate_is_none() {
        assert_eq!(energy(&GpuTelemetry::unavailable(), 0, S, 10), None);
        let g = telemetry(vec![series("0", &[(5.0, Some(100.0))])]);
        assert_eq!(energy(&g, 0, S, 10), None);
        assert_eq!(energy(&g, 5 * S, 5 * S, 10), None);
    }

    #[test]
    fn figures_print_with_three_significant_digits() {
        assert_eq!(significant(0.0123456), "0.0123");
        assert_eq!(significant(1.5), "1.50");
        assert_eq!(significant(123.456), "123");
        assert_eq!(significant(4567.8), "4568");
    }
}
