//! Where the results database lives: `--db PATH`, else the `SERVEBENCH_DB` environment
//! variable, else `results.db` in servebench's directory of the user's data directory
//! (`$XDG_DATA_HOME/servebench/`, by default `~/.local/share/servebench/`). `--no-db`, or
//! `SERVEBENCH_DB=off`, turns indexing off.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The environment variable naming the database (or `off`).
pub const ENV: &str = "SERVEBENCH_DB";

/// The database file's name in the data directory.
pub const FILE_NAME: &str = "results.db";

/// Where runs are indexed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbLocation {
    /// This SQLite file (created with its directory on first use).
    File(PathBuf),
    /// No database: runs are not indexed (`--no-db`, `SERVEBENCH_DB=off`).
    Off,
}

/// The words `SERVEBENCH_DB` takes for "no database".
const OFF_WORDS: [&str; 5] = ["off", "none", "no", "false", "0"];

/// Whether a value of `SERVEBENCH_DB` means "no database".
pub fn is_off(value: &str) -> bool {
    OFF_WORDS
        .iter()
        .any(|w| value.trim().eq_ignore_ascii_case(w))
}

impl DbLocation {
    /// The location for this process: `--no-db`, then `--db`, then [`ENV`], then the default
    /// in the user's data directory. Err: no flag, no variable and no home directory to put
    /// the default in.
    pub fn resolve(flag: Option<&Path>, no_db: bool) -> Result<DbLocation, String> {
        Self::resolve_with(
            flag,
            no_db,
            std::env::var_os(ENV),
            std::env::var_os("XDG_DATA_HOME"),
            std::env::var_os("HOME"),
        )
    }

    /// [`DbLocation::resolve`] with the environment given (for tests).
    pub fn resolve_with(
        flag: Option<&Path>,
        no_db: bool,
        env: Option<OsString>,
        xdg_data_home: Option<OsString>,
        home: Option<OsString>,
    ) -> Result<DbLocation, String> {
        if no_db {
            return Ok(DbLocation::Off);
        }
        if let Some(p) = flag {
            return Ok(match p.to_str() {
                Some(s) if is_off(s) => DbLocation::Off,
                _ => DbLocation::File(p.to_path_buf()),
            });
        }
        if let Some(v) = env.filter(|v| !v.is_empty()) {
            return Ok(match v.to_str() {
                Some(s) if is_off(s) => DbLocation::Off,
                _ => DbLocation::File(PathBuf::from(v)),
            });
        }
        default_path(xdg_data_home, home)
            .map(DbLocation::File)
            .ok_or_else(|| {
                format!("no results database: neither --db, {ENV}, XDG_DATA_HOME nor HOME is set")
            })
    }

    /// The file, when there is one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            DbLocation::File(p) => Some(p),
            DbLocation::Off => None,
        }
    }
}

/// `$XDG_DATA_HOME/servebench/results.db` when XDG_DATA_HOME is an absolute path (the XDG
/// base directory specification ignores a relative one), else
/// `$HOME/.local/share/servebench/results.db`.
pub fn default_path(xdg_data_home: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    let base = xdg_data_home
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            home.filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".local").join("share"))
        })?;
    Some(base.join("servebench").join(FILE_NAME))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn os(s: &str) -> Option<OsString> {
        Some(OsString::from(s))
    }

    #[test]
    fn flag_then_environment_then_xdg_then_home() {
        let r = |flag: Option<&str>, no_db, env, xdg, home| {
            DbLocation::resolve_with(flag.map(Path::new), no_db, env, xdg, home).unwrap()
        };
        let file = |p: &str| DbLocation::File(PathBuf::from(p));
        assert_eq!(
            r(Some("/x/a.db"), false, os("/e.db"), None, None),
            file("/x/a.db")
        );
        assert_eq!(r(Some("/x/a.db"), true, None, None, None), DbLocation::Off);
        assert_eq!(
            r(None, false, os("/e.db"), os("/xdg"), os("/h")),
            file("/e.db")
        );
        assert_eq!(r(None, false, os("OFF"), None, os("/h")), DbLocation::Off);
        assert_eq!(r(None, false, os("0"), None, os("/h")), DbLocation::Off);
        assert_eq!(r(Some("off"), false, None, None, os("/h")), DbLocation::Off);
        assert_eq!(
            r(None, false, os(""), os("/xdg"), os("/h")),
            file("/xdg/servebench/results.db")
        );
        // A relative XDG_DATA_HOME is ignored, as the specification says.
        assert_eq!(
            r(None, false, None, os("rel"), os("/h")),
            file("/h/.local/share/servebench/results.db")
        );
        assert!(DbLocation::resolve_with(None, false, None, None, None).is_err());
        assert_eq!(r(None, true, None, None, None).file(), None);
    }
}
