//! Before the first request: every directory a run writes to exists (or is created) and takes
//! a file, so a run that could not keep its results fails at once, naming the path and the
//! reason, instead of after the whole load was sent.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::plan::RunPlan;

/// The directories a run writes into: `--output-dir` (records and the servebench result) and,
/// with `--save-result`/`--append-result`, the vLLM result's directory.
pub fn output_dirs(plan: &RunPlan) -> Vec<(&'static str, PathBuf)> {
    let r = &plan.report;
    let mut dirs = vec![("--output-dir", r.output_dir.clone())];
    if r.save_result || r.append_result {
        let file = r.result_filename.as_deref().unwrap_or("result.json");
        let path = match &r.result_dir {
            Some(d) => d.join(file),
            None => PathBuf::from(file),
        };
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        dirs.push(("--result-dir", dir));
    }
    dirs
}

/// Create each output directory and write (then remove) a probe file in it.
pub fn check_outputs(plan: &RunPlan) -> Result<()> {
    for (flag, dir) in output_dirs(plan) {
        check_dir(&dir).with_context(|| format!("{flag} {} cannot be written", dir.display()))?;
    }
    Ok(())
}

/// One directory: created if missing, and a file in it can be written and synced.
pub fn check_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let probe = dir.join(format!(".servebench-write-check-{}", std::process::id()));
    let written = std::fs::File::create(&probe).and_then(|mut f| {
        f.write_all(b"x")?;
        f.sync_all()
    });
    let _ = std::fs::remove_file(&probe);
    written
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_under_a_regular_file_is_refused_and_leaves_nothing() {
        let base = std::env::temp_dir().join(format!("servebench-check-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        let file = base.join("plain");
        std::fs::write(&file, b"").unwrap();
        assert!(check_dir(&file.join("sub")).is_err());
        assert!(check_dir(&base.join("new/deeper")).is_ok());
        let left: Vec<_> = std::fs::read_dir(base.join("new/deeper"))
            .unwrap()
            .collect();
        assert!(left.is_empty(), "the probe file is removed");
        let _ = std::fs::remove_dir_all(&base);
    }
}
