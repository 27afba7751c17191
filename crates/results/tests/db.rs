//! The database under concurrent writers and a writer killed mid-insert. The writers are this
//! test binary started again as child processes running [`child_writer`] (it does nothing
//! unless the environment names a database), so each is a separate process with its own
//! SQLite connection, as two `servebench run` finishing at once are.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use servebench_results::{Context, Entry, ResultsDb};

/// The child's orders: `SB_RESULTS_CHILD=<db path>|<tag>|<count>` (count 0: forever).
const CHILD_ENV: &str = "SB_RESULTS_CHILD";

/// Figures per entry: enough that one insert is a transaction of a few hundred rows, so a
/// kill lands inside one more often than not.
const FIGURES: usize = 300;

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("servebench-results-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn entry(tag: &str, i: u64) -> Entry {
    let figures: BTreeMap<String, f64> = (0..FIGURES)
        .map(|k| (format!("figure_{k:03}"), (i * 1000 + k as u64) as f64))
        .collect();
    Entry {
        path: format!("/nowhere/{tag}/{i}.servebench.json"),
        started_unix: Some(1_700_000_000.0 + i as f64),
        date: "20250101-000000".into(),
        context: Context::run(),
        config: format!("{:016x}", i % 3),
        config_text: "{}".into(),
        model: "m".into(),
        backend: "vllm".into(),
        label: Some(tag.into()),
        target_kind: "server".into(),
        target: "http://127.0.0.1:1".into(),
        server_version: None,
        servebench_version: "0.1.0".into(),
        simulated: false,
        dataset: "random".into(),
        request_rate: "inf".into(),
        max_concurrency: None,
        num_prompts: 10,
        input_len: 1,
        output_len: 1,
        verdict: Some("valid".into()),
        verdict_text: None,
        interrupted: false,
        completed: 10,
        failed: 0,
        duration_s: 1.0,
        host: "h".into(),
        command_line: String::new(),
        figures,
    }
}

/// Not a test of its own: the body of the child processes the tests below start. Without
/// [`CHILD_ENV`] it returns at once.
#[test]
fn child_writer() {
    let Ok(orders) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut parts = orders.split('|');
    let (db, tag, count) = (
        parts.next().expect("db"),
        parts.next().expect("tag"),
        parts
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .expect("count"),
    );
    let mut db = ResultsDb::open(Path::new(db)).expect("open");
    let mut i = 0;
    while count == 0 || i < count {
        db.upsert(&entry(tag, i)).expect("upsert");
        i += 1;
    }
}

fn spawn_writer(db: &Path, tag: &str, count: u64) -> Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args(["child_writer", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{}|{tag}|{count}", db.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn child writer")
}

fn figure_counts(db: &ResultsDb) -> Vec<usize> {
    let runs = db
        .list(&servebench_results::Filter::default())
        .expect("list");
    runs.iter()
        .map(|r| db.figures(r.id).expect("figures").len())
        .collect()
}

#[test]
fn two_processes_writing_at_once_lose_nothing() {
    let dir = tempdir("two-writers");
    let db_path = dir.join("results.db");
    const N: u64 = 40;
    let a = spawn_writer(&db_path, "a", N);
    let b = spawn_writer(&db_path, "b", N);
    for (name, child) in [("a", a), ("b", b)] {
        let out = child.wait_with_output().expect("wait");
        assert!(
            out.status.success(),
            "writer {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let db = ResultsDb::open(&db_path).expect("open");
    assert_eq!(db.integrity_check().expect("check"), "ok");
    assert_eq!(db.count().expect("count"), 2 * N);
    assert!(figure_counts(&db).iter().all(|n| *n == FIGURES));
    // Ids are unique and every entry is one of the writers'.
    let runs = db
        .list(&servebench_results::Filter::default())
        .expect("list");
    let mut ids: Vec<i64> = runs.iter().map(|r| r.id).collect();
    ids.dedup();
    assert_eq!(ids.len() as u64, 2 * N);
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn kill_nine_mid_insert_leaves_a_readable_db() {
    let dir = tempdir("kill-nine");
    let db_path = dir.join("results.db");
    let mut child = spawn_writer(&db_path, "k", 0);
    // Let it write a while (committed entries pile up), then kill it without warning.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let n = ResultsDb::open(&db_path)
            .and_then(|db| db.count())
            .unwrap_or(0);
        if n >= 25 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the writer wrote {n} entries in 60 s"
        );
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!("the writer stopped by itself: {status}");
        }
    }
    child.kill().expect("SIGKILL"); // std's kill is SIGKILL on Unix.
    let status = child.wait().expect("wait");
    assert!(!status.success());
    // A fresh process (this one) opens what the killed writer left: SQLite's own check
    // passes, and every entry has all its figures (an entry and its figures commit together,
    // so a kill mid-insert leaves none of that entry, never part of it).
    let mut db = ResultsDb::open(&db_path).expect("open after kill -9");
    assert_eq!(db.integrity_check().expect("check"), "ok");
    let n = db.count().expect("count");
    assert!(n >= 25, "{n} entries");
    let counts = figure_counts(&db);
    assert!(
        counts.iter().all(|c| *c == FIGURES),
        "partial entries: {:?}",
        counts.iter().filter(|c| **c != FIGURES).collect::<Vec<_>>()
    );
    // And it takes new writes.
    db.upsert(&entry("after", 1)).expect("write after the kill");
    assert_eq!(db.count().expect("count"), n + 1);
    std::fs::remove_dir_all(dir).ok();
}

/// A run indexed on its own, then again as its matrix row, is one entry filed under the row;
/// indexed once more on its own (a re-import without experiment.json), it stays filed there.
#[test]
fn an_entry_keeps_its_experiment() {
    let dir = tempdir("context");
    let mut db = ResultsDb::open(&dir.join("r.db")).expect("open");
    let mut e = entry("ctx", 1);
    let id = db.upsert(&e).expect("as a run");
    e.context = Context {
        kind: servebench_results::Kind::MatrixRow,
        experiment: Some("/exp".into()),
        row: Some("B".into()),
        point: None,
        variable: None,
    };
    assert_eq!(db.upsert(&e).expect("as a row"), id);
    e.context = Context::run();
    e.figures.clear();
    assert_eq!(db.upsert(&e).expect("as a run again"), id);
    let got = db.get(id).expect("get").expect("present");
    assert_eq!(got.entry.context.kind, servebench_results::Kind::MatrixRow);
    assert_eq!(got.entry.context.row.as_deref(), Some("B"));
    assert!(got.entry.figures.is_empty());
    assert_eq!(db.count().expect("count"), 1);
    // Updating took no id: the next entry's follows on.
    assert_eq!(db.upsert(&entry("ctx", 2)).expect("another"), id + 1);
    std::fs::remove_dir_all(dir).ok();
}
