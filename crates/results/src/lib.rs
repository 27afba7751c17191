//! servebench's results database: every run, matrix row and sweep point indexed in a local
//! SQLite file after its result files are written, so last month's run is a query away and a
//! regression shows as a trend; and the exports other tools read.
//!
//! The result files stay the source of truth: an entry holds the plan, the target, the
//! versions, the verdict and the headline figures of one `*.servebench.json`, with the path to
//! it, and [`import`] rebuilds every entry from the files.
//!
//! - [`location`]: where the database lives (`--db`, `SERVEBENCH_DB`, the XDG data directory).
//! - [`entry`]: one result file as an entry (its configuration key and figures).
//! - [`db`]: the SQLite file (WAL, busy timeout): upsert, list, figures, series.
//! - [`import`]: a directory's result files (and experiments) into the database.
//! - [`trend`]: one figure of one configuration over time, and whether its latest change
//!   stands out from run-to-run noise.
//! - [`export`]: the llm-d benchmark report (v0.2) and the PyTorch benchmark database JSON
//!   vLLM emits.

pub mod db;
pub mod entry;
pub mod export;
mod hash;
pub mod import;
pub mod location;
pub mod trend;

pub use db::{Filter, ResultsDb, StoredRun};
pub use entry::{Context, Entry, Kind};
pub use location::{DbLocation, ENV};

use std::path::PathBuf;

/// What can go wrong reading or writing the database and the result files.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    /// SQLite said no.
    #[error("results database {path}: {source}")]
    Sql {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A result file is not JSON of the expected shape.
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    /// Anything else, in words.
    #[error("{0}")]
    Invalid(String),
}

/// Results of this crate's operations.
pub type Result<T> = std::result::Result<T, ResultsError>;

/// The suffix of servebench's own result files.
pub const RESULT_SUFFIX: &str = ".servebench.json";
