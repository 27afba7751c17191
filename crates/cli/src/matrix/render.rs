//! The reports of an experiment directory (`report.md`, `report.html`, `summary.csv`),
//! rendered from what the directory holds, as `servebench report DIR` would.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Renders the experiment in `dir` into its report files and returns their paths.
pub fn render_reports(dir: &Path) -> Result<Vec<PathBuf>> {
    let report = crate::experiment::load_experiment(dir)
        .with_context(|| format!("loading {}", dir.display()))?;
    let files = crate::report_cmd::write_reports(&report, dir, "")?;
    Ok(vec![files.html, files.markdown, files.csv])
}

/// [`render_reports`], reporting a failure as a warning: the measurements are saved either
/// way, and `servebench report DIR` can render them later.
pub fn render_or_warn(dir: &Path) {
    match render_reports(dir) {
        Ok(paths) => {
            for p in paths {
                eprintln!("report: {}", p.display());
            }
        }
        Err(e) => eprintln!(
            "warning: rendering the report failed: {e:#}; the results are saved, retry with `servebench report {}`",
            dir.display()
        ),
    }
}
