//! The workload crate's error type.

use std::path::PathBuf;

/// Why a workload could not be built.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// A parameter is out of range or parameters contradict each other.
    #[error("invalid workload configuration: {0}")]
    InvalidConfig(String),
    /// A dataset or trace file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A file (or one line of it) is not in the expected format.
    #[error("{}:{line}: {message}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong there.
        message: String,
    },
    /// A whole file is unreadable in its format (a Parquet file, where rows have no lines).
    #[error("{}: {message}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A dataset held nothing usable after filtering.
    #[error("{}: {reason}", path.display())]
    Empty {
        /// The file.
        path: PathBuf,
        /// Why nothing was left.
        reason: String,
    },
    /// No text with exactly the requested token count could be built.
    #[error("cannot synthesise a prompt of exactly {target} tokens with tokenizer {tokenizer}: {reason}")]
    Synthesis {
        /// Requested token count.
        target: usize,
        /// The tokenizer's name.
        tokenizer: String,
        /// What went wrong.
        reason: String,
    },
}

impl WorkloadError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn malformed(
        path: impl Into<PathBuf>,
        line: usize,
        message: impl Into<String>,
    ) -> Self {
        Self::Malformed {
            path: path.into(),
            line,
            message: message.into(),
        }
    }
}
