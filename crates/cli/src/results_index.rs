//! Indexing into the results database as results are written: each run once its result files
//! are on disk, and a matrix's or sweep's runs again, filed under their row or point, once its
//! experiment.json is. Indexing never stands between a run and its files: a database that
//! cannot be opened or written is a warning, and the files are kept as written
//! (`servebench results import DIR` files them later).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use clap::Args;
use servebench_results::{Context, DbLocation, Entry, ResultsDb};

/// Where results are indexed (`run`, `matrix`, `sweep`, `results`).
#[derive(Debug, Clone, Default, Args)]
pub struct DbFlags {
    /// The results database (SQLite) runs are indexed into [default: $SERVEBENCH_DB, else
    /// $XDG_DATA_HOME/servebench/results.db, else ~/.local/share/servebench/results.db];
    /// `SERVEBENCH_DB=off` turns indexing off.
    #[arg(long, value_name = "PATH", help_heading = "Results database")]
    pub db: Option<PathBuf>,
    /// Do not index this command's runs in the results database (as SERVEBENCH_DB=off).
    #[arg(long, conflicts_with = "db", help_heading = "Results database")]
    pub no_db: bool,
}

impl DbFlags {
    /// Where these flags (and the environment) put the database.
    pub fn location(&self) -> Result<DbLocation, String> {
        DbLocation::resolve(self.db.as_deref(), self.no_db)
    }
}

/// The location this process's command chose; resolved from the environment when no command
/// set it.
static CHOSEN: Mutex<Option<DbLocation>> = Mutex::new(None);

/// Files this process's runs in the database `flags` name.
pub fn configure(flags: &DbFlags) {
    match flags.location() {
        Ok(loc) => set(loc),
        Err(e) => {
            eprintln!("warning: {e}; this command's runs are not indexed");
            set(DbLocation::Off);
        }
    }
}

fn set(loc: DbLocation) {
    if let Ok(mut g) = CHOSEN.lock() {
        *g = Some(loc);
    }
}

fn location() -> Option<PathBuf> {
    let chosen = CHOSEN.lock().ok().and_then(|g| g.clone());
    let loc = match chosen {
        Some(l) => l,
        None => DbLocation::resolve(None, false).ok()?,
    };
    loc.file().map(Path::to_path_buf)
}

fn warn(db: &Path, what: &str, e: &dyn std::fmt::Display) {
    eprintln!(
        "warning: results database {}: {e}; {what} kept as written (file it later with `servebench results import DIR`)",
        db.display()
    );
}

/// Indexes the run whose result was just written to `native` (its files are already there).
pub fn run_written(native: &Path) {
    let Some(db) = location() else {
        return;
    };
    let entry = match Entry::read(native, Context::run()) {
        Ok(e) => e,
        Err(e) => return warn(&db, "the run's files are", &e),
    };
    match ResultsDb::open(&db).and_then(|mut d| d.upsert(&entry)) {
        Ok(id) => tracing::debug!("indexed {} as #{id} in {}", native.display(), db.display()),
        Err(e) => warn(&db, "the run's files are", &e),
    }
}

/// Files the runs of the experiment just written to `dir` (its experiment.json) under their
/// matrix row or sweep point.
pub fn experiment_written(dir: &Path) {
    let Some(db) = location() else {
        return;
    };
    let done = ResultsDb::open(&db)
        .and_then(|mut d| servebench_results::import::index_experiment(&mut d, dir));
    match done {
        Ok(r) => {
            for (path, e) in r.failed {
                warn(&db, &format!("{} is", path.display()), &e);
            }
        }
        Err(e) => warn(&db, "the experiment's files are", &e),
    }
}
