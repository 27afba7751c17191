//! Each measured run's servebench result and per-request records, kept beside vLLM's
//! `run=N.json` as `run=N.servebench.json` and `run=N.requests.jsonl`. `servebench run` names
//! its files after the second it started, so two short runs of one combination would write
//! over each other; renaming each run's files after it makes them its own, and lets the
//! decision pool the per-request samples of every run of a combination.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use serde_json::Value;
use servebench_report::RunData;

/// `run=N.servebench.json` (`run=N.partial.servebench.json` for a run stopped early).
fn result_name(run: i64, tag: &str) -> String {
    if tag.is_empty() {
        format!("run={run}.servebench.json")
    } else {
        format!("run={run}.{tag}.servebench.json")
    }
}

/// The servebench result the run that started at `started` wrote into `dir` (the newest one
/// not yet renamed), if any.
fn written_since(dir: &Path, started: SystemTime) -> Result<Option<PathBuf>> {
    // File times can be coarser than the clock, and a run can start within the second the
    // previous one's files were renamed in: allow a little slack before the start.
    let since = started
        .checked_sub(Duration::from_secs(2))
        .unwrap_or(started);
    let mut newest: Option<(SystemTime, PathBuf)> = None;
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !name.ends_with(".servebench.json") || name.starts_with("run=") {
            continue;
        }
        let Ok(modified) = path.metadata().and_then(|m| m.modified()) else {
            continue;
        };
        if modified >= since && newest.as_ref().is_none_or(|(t, _)| modified > *t) {
            newest = Some((modified, path));
        }
    }
    Ok(newest.map(|(_, p)| p))
}

/// Renames the result (and its records) that run `run` just wrote into `dir` to
/// `run=N.servebench.json` and `run=N.requests.jsonl` (with `tag` before the extensions when
/// given). A run that wrote none is left alone.
pub fn adopt(dir: &Path, run: i64, started: SystemTime, tag: &str) -> Result<()> {
    let Some(path) = written_since(dir, started)? else {
        return Ok(());
    };
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut doc: Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    if let Some(records) = doc.get("records_path").and_then(Value::as_str) {
        let from = dir.join(records);
        let name = if tag.is_empty() {
            format!("run={run}.requests.jsonl")
        } else {
            format!("run={run}.{tag}.requests.jsonl")
        };
        if from.exists() {
            std::fs::rename(&from, dir.join(&name))
                .with_context(|| format!("renaming {}", from.display()))?;
            doc["records_path"] = Value::from(name);
        }
    }
    let to = dir.join(result_name(run, tag));
    let body = serde_json::to_string_pretty(&doc)? + "\n";
    std::fs::write(&to, body).with_context(|| format!("writing {}", to.display()))?;
    std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))
}

/// The servebench results of a combination's runs (their `run_number`s), or nothing when
/// one of them has none: pooling only some runs' requests would weigh those runs more.
pub fn load(dir: &Path, runs: &[Value]) -> Vec<RunData> {
    let mut out = Vec::new();
    for r in runs {
        let Some(n) = r.get("run_number").and_then(Value::as_i64) else {
            return Vec::new();
        };
        let path = dir.join(result_name(n, ""));
        if !path.exists() {
            return Vec::new();
        }
        match crate::experiment::load_run(&path, &result_name(n, "")) {
            Ok(d) if !d.records.is_empty() => out.push(d),
            Ok(_) => return Vec::new(),
            Err(e) => {
                tracing::warn!("{e:#}: the decision tests this combination over its runs only");
                return Vec::new();
            }
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_files_are_renamed_after_it_and_point_at_each_other() {
        let dir = std::env::temp_dir().join(format!("servebench-details-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let started = SystemTime::now();
        std::fs::write(
            dir.join("x-1qps.servebench.json"),
            r#"{"records_path": "x-1qps.requests.jsonl", "summary": {}}"#,
        )
        .unwrap();
        std::fs::write(dir.join("x-1qps.requests.jsonl"), "{}\n").unwrap();
        adopt(&dir, 2, started, "").unwrap();
        assert!(!dir.join("x-1qps.servebench.json").exists());
        assert!(dir.join("run=2.requests.jsonl").exists());
        let doc: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("run=2.servebench.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(doc["records_path"], "run=2.requests.jsonl");
        // Nothing new since: nothing renamed, no error.
        adopt(&dir, 3, started, "").unwrap();
        assert!(!dir.join("run=3.servebench.json").exists());
        // A run without its result: no details for the combination.
        let runs = [serde_json::json!({"run_number": 7})];
        assert!(load(&dir, &runs).is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
