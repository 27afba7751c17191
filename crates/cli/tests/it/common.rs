//! Helpers every test module needs: the binary under test, fresh temp directories, output
//! dumps for assertion messages, and JSON files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The `servebench` binary, without any API key the developer's environment may hold, so a
/// test never sends (or writes) a real one, and with the results database off, so a test never
/// indexes into the developer's own (tests of the database give theirs with `--db` or
/// `SERVEBENCH_DB`).
pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_servebench"));
    c.env_remove("OPENAI_API_KEY");
    c.env("SERVEBENCH_DB", "off");
    c
}

/// Runs the binary with `args` to completion.
pub fn servebench(args: &[&str]) -> Output {
    bin().args(args).output().expect("spawn servebench")
}

/// A fresh, empty directory `servebench-{scope}-{name}-{pid}` under the system temp dir.
/// All modules share one process, so `scope` keeps their directories apart.
pub fn tempdir(scope: &str, name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("servebench-{scope}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// Status, stdout and stderr of a finished command, for assertion messages.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Asserts that the command succeeded (dumping its output otherwise) and returns its stdout.
pub fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{}", text(o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A JSON file, parsed; panics naming the file.
pub fn read_json(p: &Path) -> Value {
    let s = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&s).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Serializes the tests that load the machine (killed runs, a real engine, a browser) with the
/// tests whose assertions read wall-clock timing (one SSE event per token, ITL against engine
/// step times). All modules share one test binary and its threads; before they were folded into
/// it, these ran in binaries of their own, one binary at a time.
pub fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that panicked while holding the lock has already failed; the rest may go on.
    LOCK.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The workspace root: the documented commands run from here as written.
pub fn workspace_root() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).to_path_buf()
}

/// README.md and every page of the guide (`docs/**/*.md`, without the book mdBook builds into
/// `docs/book/`), README first, then the pages by path.
pub fn documentation_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, skip: &Path, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                if path != skip {
                    walk(&path, skip, out);
                }
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let root = workspace_root();
    let docs = root.join("docs");
    let mut pages = Vec::new();
    walk(&docs, &docs.join("book"), &mut pages);
    pages.sort();
    let mut files = vec![root.join("README.md")];
    files.extend(pages);
    files
}

/// The text of README.md and of every guide page, one after the other: what the tests of the
/// documented examples read, so an example keeps being run wherever in the docs it moves.
pub fn documented_text() -> String {
    documentation_files()
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The distinct lines of [`documented_text`], in order of first appearance: a command the
/// README shows as an example and the guide shows again is one command, run once.
pub fn documented_lines() -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    documented_text()
        .lines()
        .filter(|l| seen.insert(l.to_string()))
        .map(str::to_string)
        .collect()
}

/// Reads an HTTP request's head (up to its blank line) from a test server's socket; `None`
/// when the peer closes first. The body, if any, is left unread.
pub fn read_request_head(sock: &mut impl std::io::Read) -> Option<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = sock.read(&mut buf).unwrap_or(0);
        if n == 0 {
            return None;
        }
        got.extend_from_slice(&buf[..n]);
        let t = String::from_utf8_lossy(&got);
        if let Some(h) = t.find("\r\n\r\n") {
            return Some(t[..h].to_owned());
        }
    }
}
