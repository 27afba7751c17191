//! What the two binaries share: errors as messages with their context, and the exit code.

use std::process::ExitCode;

/// A failure with its context, for the message on stderr.
pub type Result<T> = std::result::Result<T, String>;

/// `r`'s error prefixed with what was being done.
pub fn context<T, E: std::fmt::Display>(
    r: std::result::Result<T, E>,
    what: impl FnOnce() -> String,
) -> Result<T> {
    r.map_err(|e| format!("{}: {e}", what()))
}

/// The exit code of a finished command: its own, or 2 after printing the error.
pub fn exit(result: Result<ExitCode>) -> ExitCode {
    result.unwrap_or_else(|e| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    })
}
