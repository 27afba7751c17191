//! The experiment directory: `<root>/<model>/<hardware>/<timestamp>/` with `plan.toml`,
//! `environment.json`, `rows/<ID>/…` (sweeps: `points/<i>/…`; repeats: `repeat-<k>/`) and
//! `experiment.json` (schema `servebench.experiment/v1`), all paths inside it relative.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Serialize;
use servebench_metrics::result::{to_sorted_json_pretty, EnvironmentFile, HostInfo, TargetInfo};

use super::bench::{dir_name, Bench};

pub use servebench_metrics::result::{
    ExperimentFile, PointEntry, ProbeEntry, RowEntry, SweepEntry, ENVIRONMENT_SCHEMA,
    EXPERIMENT_SCHEMA,
};

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
    let target: TargetInfo = serde_json::from_value(bench.environment.clone())
        .context("reading the target's description")?;
    let env = EnvironmentFile {
        schema: ENVIRONMENT_SCHEMA.to_owned(),
        servebench_version: env!("CARGO_PKG_VERSION").to_owned(),
        date: chrono::Local::now().to_rfc3339(),
        command_line: crate::redact_argv(command_line),
        host: host_info(),
        model: bench.model.clone(),
        target,
    };
    let path = dir.join("environment.json");
    let text =
        to_sorted_json_pretty(&env).with_context(|| format!("serializing {}", path.display()))?;
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
}

fn host_info() -> HostInfo {
    let hostname = std::fs::read_to_string("/etc/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    HostInfo {
        hostname,
        os: std::env::consts::OS.to_owned(),
        arch: std::env::consts::ARCH.to_owned(),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
    }
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
