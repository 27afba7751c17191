//! A directory's result files into the database: every `*.servebench.json` under it, filed
//! under its matrix row or sweep point when an `experiment.json` lists it. The files stay the
//! source of truth: importing again updates the entries from the files, and entries whose
//! file under the directory is gone are dropped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use servebench_metrics::result::ExperimentFile;

use crate::db::ResultsDb;
use crate::entry::{absolute, Context, Entry, Kind};
use crate::{Result, ResultsError, RESULT_SUFFIX};

/// What an import did.
#[derive(Debug, Default)]
pub struct ImportReport {
    /// Entries added or updated.
    pub indexed: usize,
    /// Result files that could not be read, with why.
    pub failed: Vec<(PathBuf, String)>,
    /// Entries dropped because their file is gone.
    pub pruned: usize,
}

/// The runs an experiment directory's `experiment.json` lists, with their place in it
/// (absolute paths).
pub fn experiment_runs(dir: &Path) -> Result<Vec<(PathBuf, Context)>> {
    let file = dir.join("experiment.json");
    let text = std::fs::read_to_string(&file).map_err(|source| ResultsError::Io {
        path: file.clone(),
        source,
    })?;
    let exp: ExperimentFile = serde_json::from_str(&text).map_err(|e| ResultsError::Parse {
        path: file.clone(),
        message: e.to_string(),
    })?;
    let dir = absolute(dir);
    let experiment = Some(dir.to_string_lossy().into_owned());
    let mut out: BTreeMap<PathBuf, Context> = BTreeMap::new();
    for row in &exp.rows {
        for run in &row.runs {
            out.insert(
                absolute(&dir.join(run)),
                Context {
                    kind: Kind::MatrixRow,
                    experiment: experiment.clone(),
                    row: Some(row.id.clone()),
                    point: None,
                    variable: None,
                },
            );
        }
    }
    if let Some(s) = &exp.sweep {
        for p in &s.points {
            for run in &p.runs {
                out.insert(
                    absolute(&dir.join(run)),
                    Context {
                        kind: Kind::SweepPoint,
                        experiment: experiment.clone(),
                        row: Some(s.row.clone()),
                        point: Some(p.value),
                        variable: Some(s.variable.clone()),
                    },
                );
            }
        }
    }
    Ok(out.into_iter().collect())
}

/// Indexes the runs `experiment.json` in `dir` lists (a matrix or sweep just written).
pub fn index_experiment(db: &mut ResultsDb, dir: &Path) -> Result<ImportReport> {
    let mut report = ImportReport::default();
    for (path, ctx) in experiment_runs(dir)? {
        match Entry::read(&path, ctx).and_then(|e| db.upsert(&e)) {
            Ok(_) => report.indexed += 1,
            Err(e) => report.failed.push((path, e.to_string())),
        }
    }
    Ok(report)
}

/// Every `*.servebench.json` and `experiment.json` under `dir` (symbolic links to directories
/// are not followed, so a link loop cannot trap the walk).
fn walk(dir: &Path, results: &mut Vec<PathBuf>, experiments: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if meta.is_dir() {
            walk(&p, results, experiments);
        } else if name == "experiment.json" {
            experiments.push(p);
        } else if name.ends_with(RESULT_SUFFIX) {
            results.push(p);
        }
    }
}

/// Rebuilds the entries of everything under `dir` from its files.
pub fn import_dir(db: &mut ResultsDb, dir: &Path) -> Result<ImportReport> {
    if !dir.is_dir() {
        return Err(ResultsError::Invalid(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    let dir = absolute(dir);
    let (mut results, mut experiments) = (Vec::new(), Vec::new());
    walk(&dir, &mut results, &mut experiments);
    let mut contexts: BTreeMap<PathBuf, Context> = BTreeMap::new();
    let mut report = ImportReport::default();
    for exp in &experiments {
        let Some(exp_dir) = exp.parent() else {
            continue;
        };
        match experiment_runs(exp_dir) {
            Ok(runs) => contexts.extend(runs),
            Err(e) => report.failed.push((exp.clone(), e.to_string())),
        }
    }
    for path in results {
        let path = absolute(&path);
        let ctx = contexts.remove(&path).unwrap_or_else(Context::run);
        match Entry::read(&path, ctx).and_then(|e| db.upsert(&e)) {
            Ok(_) => report.indexed += 1,
            Err(e) => report.failed.push((path, e.to_string())),
        }
    }
    report.pruned = db.prune_missing(&dir)?;
    Ok(report)
}
