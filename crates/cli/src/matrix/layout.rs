//! The experiment directory: `<root>/<model>/<hardware>/<timestamp>/` with `plan.toml`,
//! `environment.json`, `rows/<ID>/…` (sweeps: `points/<i>/…`; repeats: `repeat-<k>/`) and
//! `experiment.json` (schema `servebench.experiment/v1`), all paths inside it relative.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::bench::{dir_name, Bench};

/// Schema of `experiment.json`.
pub const EXPERIMENT_SCHEMA: &str = "servebench.experiment/v1";
/// Schema of `environment.json`.
pub const ENVIRONMENT_SCHEMA: &str = "servebench.environment/v1";

/// `experiment.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExperimentFile {
    /// Always [`EXPERIMENT_SCHEMA`].
    pub schema: String,
    /// `matrix` or `sweep`.
    pub kind: String,
    /// Numbers from a quick (shortened) run.
    pub quick: bool,
    /// Report title.
    pub title: String,
    /// Rows in order (a sweep has its one row here too, with every point's runs).
    pub rows: Vec<RowEntry>,
    /// The sweep, for a sweep experiment.
    pub sweep: Option<SweepEntry>,
    /// Runs per row or point.
    #[serde(default = "one")]
    pub repeat: usize,
    /// Things a reader should know (skipped rows, interruptions).
    #[serde(default)]
    pub notes: Vec<String>,
}

fn one() -> usize {
    1
}

/// One row of `experiment.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RowEntry {
    /// Row id.
    pub id: String,
    /// Row name.
    pub name: String,
    /// The question the row answers.
    pub hypothesis: String,
    /// `*.servebench.json` files of the row's runs, relative to the experiment directory.
    pub runs: Vec<String>,
    /// `repeat.json` (mean ± std across runs), when the row was repeated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat_summary: Option<String>,
}

/// The `sweep` object of `experiment.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepEntry {
    /// The swept row's id.
    pub row: String,
    /// `request_rate` or `max_concurrency`.
    pub variable: String,
    /// SLOs as given (`ttft:p99:500`).
    pub slos: Vec<String>,
    /// The latency percentile of the frontier (`ttft:p99`).
    pub latency_metric: String,
    /// Points in sweep order.
    pub points: Vec<PointEntry>,
    /// Whether the sweep stopped before its last planned point.
    pub stopped_early: bool,
    /// Why it stopped early (empty when it did not).
    pub stop_reason: String,
    /// Index into `points` of the frontier's knee.
    pub knee: Option<usize>,
    /// Indices into `points` on the throughput–latency frontier, by latency.
    pub frontier: Vec<usize>,
    /// Index of the first saturated point.
    pub saturation: Option<usize>,
    /// Index of the highest-throughput point meeting every SLO.
    pub best_under_slo: Option<usize>,
    /// The one-sentence answer under the SLOs.
    pub headline: Option<String>,
    /// The closed-loop probe that found the saturation rate (`--request-rate auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeEntry>,
}

/// One sweep point of `experiment.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointEntry {
    /// The swept variable's value; an unlimited rate is `null` (JSON has no infinity).
    #[serde(serialize_with = "inf_as_null", deserialize_with = "null_as_inf")]
    pub value: f64,
    /// Runs at this point, relative paths.
    pub runs: Vec<String>,
    /// `repeat.json` when repeated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat_summary: Option<String>,
}

/// The auto sweep's probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeEntry {
    /// Concurrency cap of the closed-loop probe.
    pub max_concurrency: usize,
    /// Requests per second it sustained.
    pub request_throughput: f64,
    /// Its result file.
    pub run: String,
}

fn inf_as_null<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() {
        s.serialize_f64(*v)
    } else {
        s.serialize_none()
    }
}

fn null_as_inf<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::INFINITY))
}

/// Creates `<root>/<model>/<hardware>/<timestamp>/` (a suffix keeps two experiments started
/// in the same second apart).
pub fn create_experiment_dir(root: &Path, bench: &Bench) -> Result<PathBuf> {
    let base = root.join(dir_name(&bench.model)).join(&bench.hardware);
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S").to_string();
    std::fs::create_dir_all(&base).with_context(|| format!("creating {}", base.display()))?;
    let mut n = 1;
    loop {
        let name = if n == 1 {
            stamp.clone()
        } else {
            format!("{stamp}-{n}")
        };
        let dir = base.join(name);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => n += 1,
            Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
        }
    }
}

/// `environment.json`: versions, masked command line, host, the server's answers, the
/// simulator's configuration.
pub fn write_environment(dir: &Path, bench: &Bench, command_line: &[String]) -> Result<()> {
    let env = json!({
        "schema": ENVIRONMENT_SCHEMA,
        "servebench_version": env!("CARGO_PKG_VERSION"),
        "date": chrono::Local::now().to_rfc3339(),
        "command_line": crate::redact_argv(command_line),
        "host": host_info(),
        "model": bench.model,
        "target": bench.environment,
    });
    write_json(&dir.join("environment.json"), &env)
}

fn host_info() -> Value {
    let hostname = std::fs::read_to_string("/etc/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    json!({
        "hostname": hostname,
        "os": std::env::consts::OS,
        "arch": std::env::consts::ARCH,
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
    })
}

/// Writes pretty JSON.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let text = serde_json::to_vec_pretty(value)
        .with_context(|| format!("serializing {}", path.display()))?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// `path` relative to `dir`, with '/' separators.
pub fn relative(dir: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(dir).unwrap_or(path);
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// The directory of run `k` of `n` under `base` (`repeat-<k>` only when repeating).
pub fn run_dir(base: &Path, k: usize, n: usize) -> PathBuf {
    if n > 1 {
        base.join(format!("repeat-{}", k + 1))
    } else {
        base.to_path_buf()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeat_directories_only_when_repeating() {
        let b = Path::new("x/rows/A");
        assert_eq!(run_dir(b, 0, 1), PathBuf::from("x/rows/A"));
        assert_eq!(run_dir(b, 1, 3), PathBuf::from("x/rows/A/repeat-2"));
        assert_eq!(
            relative(Path::new("x"), Path::new("x/rows/A/r.json")),
            "rows/A/r.json"
        );
    }
}
