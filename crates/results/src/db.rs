//! The SQLite file. Opened in WAL mode with a busy timeout, so two runs finishing at once both
//! get in (one waits for the other's transaction), a reader never blocks a writer, and a
//! process killed mid-insert leaves the last committed state: each entry goes in as one
//! transaction (its row and its figures together), so a reader sees all of it or none.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::types::ToSql;
use rusqlite::{params, Connection, OptionalExtension, Row, TransactionBehavior};
use serde::Serialize;

use crate::entry::{Context, Entry, Kind};
use crate::{Result, ResultsError};

/// The schema this version writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 1;

/// How long a writer waits for another's transaction before giving up.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    path TEXT NOT NULL UNIQUE,
    started_unix REAL,
    date TEXT NOT NULL,
    kind TEXT NOT NULL,
    experiment TEXT,
    row_id TEXT,
    point REAL,
    variable TEXT,
    config TEXT NOT NULL,
    config_text TEXT NOT NULL,
    model TEXT NOT NULL,
    backend TEXT NOT NULL,
    label TEXT,
    target_kind TEXT NOT NULL,
    target TEXT NOT NULL,
    server_version TEXT,
    servebench_version TEXT NOT NULL,
    simulated INTEGER NOT NULL,
    dataset TEXT NOT NULL,
    request_rate TEXT NOT NULL,
    max_concurrency INTEGER,
    num_prompts INTEGER NOT NULL,
    input_len INTEGER NOT NULL,
    output_len INTEGER NOT NULL,
    verdict TEXT,
    verdict_text TEXT,
    interrupted INTEGER NOT NULL,
    completed INTEGER NOT NULL,
    failed INTEGER NOT NULL,
    duration_s REAL NOT NULL,
    host TEXT NOT NULL,
    command_line TEXT NOT NULL,
    indexed_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_config ON runs(config, started_unix);
CREATE INDEX IF NOT EXISTS runs_by_time ON runs(started_unix);
CREATE TABLE IF NOT EXISTS figures (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    value REAL NOT NULL,
    PRIMARY KEY (run_id, name)
) WITHOUT ROWID;
";

/// The columns of `runs` read back into a [`StoredRun`], in [`stored_run`]'s order.
const COLUMNS: &str = "id, path, started_unix, date, kind, experiment, row_id, point, variable, \
    config, config_text, model, backend, label, target_kind, target, server_version, \
    servebench_version, simulated, dataset, request_rate, max_concurrency, num_prompts, \
    input_len, output_len, verdict, verdict_text, interrupted, completed, failed, duration_s, \
    host, command_line, indexed_at";

/// An entry as stored, with its id.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredRun {
    /// The entry's id: stable (never reused), what `results show|compare|export` take.
    pub id: i64,
    /// When it was (last) indexed, RFC 3339.
    pub indexed_at: String,
    #[serde(flatten)]
    pub entry: Entry,
}

/// Which entries `list` returns.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Configuration key, or a prefix of one.
    pub config: Option<String>,
    /// Model id contains this.
    pub model: Option<String>,
    /// `--label` equals this.
    pub label: Option<String>,
    pub kind: Option<Kind>,
    /// Result path or experiment directory contains this.
    pub path: Option<String>,
    /// Started at or after, s since the epoch.
    pub since: Option<f64>,
    /// At most this many (the newest).
    pub limit: Option<usize>,
}

/// The database, open.
#[derive(Debug)]
pub struct ResultsDb {
    conn: Connection,
    path: PathBuf,
}

fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl ResultsDb {
    /// Opens (creating it and its directory when needed) the database at `path`.
    pub fn open(path: &Path) -> Result<ResultsDb> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| ResultsError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let conn = Connection::open(path).map_err(|source| ResultsError::Sql {
            path: path.to_path_buf(),
            source,
        })?;
        let mut db = ResultsDb {
            conn,
            path: path.to_path_buf(),
        };
        db.setup()?;
        Ok(db)
    }

    /// Where the database is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sql(&self, source: rusqlite::Error) -> ResultsError {
        ResultsError::Sql {
            path: self.path.clone(),
            source,
        }
    }

    fn setup(&mut self) -> Result<()> {
        self.conn
            .busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| self.sql(e))?;
        // Switching to WAL needs a moment alone with the file: a second process opening it
        // for the first time at the same instant is waited for, as the busy timeout waits.
        let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
        loop {
            let mode: rusqlite::Result<String> =
                self.conn
                    .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0));
            match mode {
                Ok(_) => break,
                Err(e) if is_busy(&e) && std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(self.sql(e)),
            }
        }
        self.conn
            .execute_batch("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")
            .map_err(|e| self.sql(e))?;
        let version = self.user_version()?;
        if version > SCHEMA_VERSION {
            return Err(ResultsError::Invalid(format!(
                "results database {}: schema {version} was written by a newer servebench (this one reads {SCHEMA_VERSION})",
                self.path.display()
            )));
        }
        if version < SCHEMA_VERSION {
            let path = self.path.clone();
            let sql = |source| ResultsError::Sql {
                path: path.clone(),
                source,
            };
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sql)?;
            tx.execute_batch(SCHEMA).map_err(sql)?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(sql)?;
            tx.commit().map_err(sql)?;
        }
        Ok(())
    }

    fn user_version(&self) -> Result<i64> {
        self.conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| self.sql(e))
    }

    /// Adds `entry`, or updates the entry of the same file (keeping its id); returns its id.
    /// A run indexed again without its experiment (`results import` of a directory below the
    /// experiment's) keeps the experiment it was filed under.
    pub fn upsert(&mut self, entry: &Entry) -> Result<i64> {
        let path = self.path.clone();
        let sql = |source| ResultsError::Sql {
            path: path.clone(),
            source,
        };
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        let e = entry;
        let c = &e.context;
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        // Found first and updated, or inserted: an upsert that turns into an update would
        // still take an id from AUTOINCREMENT, leaving gaps in the ids people type.
        let existing: Option<i64> = tx
            .query_row("SELECT id FROM runs WHERE path = ?1", [&e.path], |r| {
                r.get(0)
            })
            .optional()
            .map_err(sql)?;
        // A run indexed again on its own keeps the experiment it was filed under.
        let keep_place = existing.is_some() && c.kind == Kind::Run;
        let id: i64 = tx
            .query_row(
                "INSERT INTO runs (id, path, started_unix, date, kind, experiment, row_id, point, variable, \
                    config, config_text, model, backend, label, target_kind, target, server_version, \
                    servebench_version, simulated, dataset, request_rate, max_concurrency, num_prompts, \
                    input_len, output_len, verdict, verdict_text, interrupted, completed, failed, \
                    duration_s, host, command_line, indexed_at) \
                 VALUES (?34, ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, \
                    ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33) \
                 ON CONFLICT(id) DO UPDATE SET \
                    started_unix = excluded.started_unix, date = excluded.date, \
                    kind = CASE WHEN ?35 THEN runs.kind ELSE excluded.kind END, \
                    experiment = CASE WHEN ?35 THEN runs.experiment ELSE excluded.experiment END, \
                    row_id = CASE WHEN ?35 THEN runs.row_id ELSE excluded.row_id END, \
                    point = CASE WHEN ?35 THEN runs.point ELSE excluded.point END, \
                    variable = CASE WHEN ?35 THEN runs.variable ELSE excluded.variable END, \
                    config = excluded.config, config_text = excluded.config_text, \
                    model = excluded.model, backend = excluded.backend, label = excluded.label, \
                    target_kind = excluded.target_kind, target = excluded.target, \
                    server_version = excluded.server_version, \
                    servebench_version = excluded.servebench_version, simulated = excluded.simulated, \
                    dataset = excluded.dataset, request_rate = excluded.request_rate, \
                    max_concurrency = excluded.max_concurrency, num_prompts = excluded.num_prompts, \
                    input_len = excluded.input_len, output_len = excluded.output_len, \
                    verdict = excluded.verdict, verdict_text = excluded.verdict_text, \
                    interrupted = excluded.interrupted, completed = excluded.completed, \
                    failed = excluded.failed, duration_s = excluded.duration_s, host = excluded.host, \
                    command_line = excluded.command_line, indexed_at = excluded.indexed_at \
                 RETURNING id",
                params![
                    e.path,
                    e.started_unix,
                    e.date,
                    c.kind.as_str(),
                    c.experiment,
                    c.row,
                    c.point,
                    c.variable,
                    e.config,
                    e.config_text,
                    e.model,
                    e.backend,
                    e.label,
                    e.target_kind,
                    e.target,
                    e.server_version,
                    e.servebench_version,
                    e.simulated,
                    e.dataset,
                    e.request_rate,
                    e.max_concurrency.map(i64_of),
                    i64_of(e.num_prompts),
                    i64_of(e.input_len),
                    i64_of(e.output_len),
                    e.verdict,
                    e.verdict_text,
                    e.interrupted,
                    i64_of(e.completed),
                    i64_of(e.failed),
                    e.duration_s,
                    e.host,
                    e.command_line,
                    now,
                    existing,
                    keep_place,
                ],
                |r| r.get(0),
            )
            .map_err(sql)?;
        tx.execute("DELETE FROM figures WHERE run_id = ?1", [id])
            .map_err(sql)?;
        {
            let mut insert = tx
                .prepare("INSERT INTO figures (run_id, name, value) VALUES (?1, ?2, ?3)")
                .map_err(sql)?;
            for (name, value) in &e.figures {
                insert.execute(params![id, name, value]).map_err(sql)?;
            }
        }
        tx.commit().map_err(sql)?;
        Ok(id)
    }

    /// The entries `filter` selects, newest first.
    pub fn list(&self, filter: &Filter) -> Result<Vec<StoredRun>> {
        let mut clauses: Vec<&str> = Vec::new();
        let mut values: Vec<Box<dyn ToSql>> = Vec::new();
        if let Some(c) = &filter.config {
            clauses.push("substr(config, 1, length(?)) = ?");
            values.push(Box::new(c.clone()));
            values.push(Box::new(c.clone()));
        }
        if let Some(m) = &filter.model {
            clauses.push("instr(model, ?) > 0");
            values.push(Box::new(m.clone()));
        }
        if let Some(l) = &filter.label {
            clauses.push("label = ?");
            values.push(Box::new(l.clone()));
        }
        if let Some(k) = filter.kind {
            clauses.push("kind = ?");
            values.push(Box::new(k.as_str()));
        }
        if let Some(p) = &filter.path {
            clauses.push("(instr(path, ?) > 0 OR instr(coalesce(experiment, ''), ?) > 0)");
            values.push(Box::new(p.clone()));
            values.push(Box::new(p.clone()));
        }
        if let Some(s) = filter.since {
            clauses.push("started_unix >= ?");
            values.push(Box::new(s));
        }
        let mut sql = format!("SELECT {COLUMNS} FROM runs");
        if !clauses.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&clauses.join(" AND "));
        }
        sql.push_str(" ORDER BY coalesce(started_unix, 0) DESC, id DESC");
        if let Some(n) = filter.limit {
            sql.push_str(&format!(" LIMIT {n}"));
        }
        let mut stmt = self.conn.prepare(&sql).map_err(|e| self.sql(e))?;
        let refs: Vec<&dyn ToSql> = values.iter().map(|v| v.as_ref()).collect();
        let rows = stmt
            .query_map(refs.as_slice(), stored_run)
            .map_err(|e| self.sql(e))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.sql(e))
    }

    /// The entry `id`, with its figures.
    pub fn get(&self, id: i64) -> Result<Option<StoredRun>> {
        let run = self
            .conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM runs WHERE id = ?1"),
                [id],
                stored_run,
            )
            .optional()
            .map_err(|e| self.sql(e))?;
        match run {
            Some(mut r) => {
                r.entry.figures = self.figures(id)?;
                Ok(Some(r))
            }
            None => Ok(None),
        }
    }

    /// The entry of the result file at `path` (absolute), if indexed.
    pub fn id_of_path(&self, path: &str) -> Result<Option<i64>> {
        self.conn
            .query_row("SELECT id FROM runs WHERE path = ?1", [path], |r| r.get(0))
            .optional()
            .map_err(|e| self.sql(e))
    }

    /// The figures of entry `id`.
    pub fn figures(&self, id: i64) -> Result<BTreeMap<String, f64>> {
        let mut stmt = self
            .conn
            .prepare("SELECT name, value FROM figures WHERE run_id = ?1 ORDER BY name")
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([id], |r| Ok((r.get::<_, String>(0)?, r.get::<_, f64>(1)?)))
            .map_err(|e| self.sql(e))?;
        rows.collect::<rusqlite::Result<BTreeMap<_, _>>>()
            .map_err(|e| self.sql(e))
    }

    /// The configuration keys starting with `prefix`.
    pub fn configs(&self, prefix: &str) -> Result<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT DISTINCT config FROM runs WHERE substr(config, 1, length(?1)) = ?1 ORDER BY config",
            )
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([prefix], |r| r.get::<_, String>(0))
            .map_err(|e| self.sql(e))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.sql(e))
    }

    /// Every figure name any entry of `config` has.
    pub fn figure_names(&self, config: &str) -> Result<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT DISTINCT f.name FROM figures f JOIN runs r ON r.id = f.run_id \
                 WHERE r.config = ?1 ORDER BY f.name",
            )
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([config], |r| r.get::<_, String>(0))
            .map_err(|e| self.sql(e))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.sql(e))
    }

    /// The entries of `config` that have figure `metric`, oldest first, with its value.
    pub fn series(&self, config: &str, metric: &str) -> Result<Vec<(StoredRun, f64)>> {
        let columns: String = COLUMNS
            .split(',')
            .map(|c| format!("r.{}", c.trim()))
            .collect::<Vec<_>>()
            .join(", ");
        let mut stmt = self
            .conn
            .prepare(&format!(
                "SELECT {columns}, f.value FROM runs r JOIN figures f ON f.run_id = r.id AND f.name = ?2 \
                 WHERE r.config = ?1 ORDER BY coalesce(r.started_unix, 0), r.id"
            ))
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map(params![config, metric], |r| {
                Ok((stored_run(r)?, r.get::<_, f64>(34)?))
            })
            .map_err(|e| self.sql(e))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.sql(e))
    }

    /// How many entries there are.
    pub fn count(&self) -> Result<u64> {
        self.conn
            .query_row("SELECT count(*) FROM runs", [], |r| r.get::<_, i64>(0))
            .map(|n| n.max(0) as u64)
            .map_err(|e| self.sql(e))
    }

    /// Removes the entries of files under `dir` (absolute) that are no longer there; returns
    /// how many. The files are the source of truth: an entry without its file is dropped.
    pub fn prune_missing(&mut self, dir: &Path) -> Result<usize> {
        let mut prefix = dir.to_string_lossy().into_owned();
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        let gone: Vec<i64> = {
            let mut stmt = self
                .conn
                .prepare("SELECT id, path FROM runs WHERE substr(path, 1, length(?1)) = ?1")
                .map_err(|e| self.sql(e))?;
            let rows = stmt
                .query_map([&prefix], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
                })
                .map_err(|e| self.sql(e))?;
            let all = rows
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(|e| self.sql(e))?;
            all.into_iter()
                .filter(|(_, p)| !Path::new(p).exists())
                .map(|(id, _)| id)
                .collect()
        };
        if gone.is_empty() {
            return Ok(0);
        }
        let path = self.path.clone();
        let sql = |source| ResultsError::Sql {
            path: path.clone(),
            source,
        };
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        for id in &gone {
            tx.execute("DELETE FROM runs WHERE id = ?1", [id])
                .map_err(sql)?;
        }
        tx.commit().map_err(sql)?;
        Ok(gone.len())
    }

    /// SQLite's own check of the file (`PRAGMA integrity_check`): `ok`, or what is wrong.
    pub fn integrity_check(&self) -> Result<String> {
        self.conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .map_err(|e| self.sql(e))
    }
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

fn u64_of(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// A row of [`COLUMNS`].
fn stored_run(r: &Row<'_>) -> rusqlite::Result<StoredRun> {
    let kind: String = r.get(4)?;
    Ok(StoredRun {
        id: r.get(0)?,
        indexed_at: r.get(33)?,
        entry: Entry {
            path: r.get(1)?,
            started_unix: r.get(2)?,
            date: r.get(3)?,
            context: Context {
                kind: Kind::parse(&kind).unwrap_or(Kind::Run),
                experiment: r.get(5)?,
                row: r.get(6)?,
                point: r.get(7)?,
                variable: r.get(8)?,
            },
            config: r.get(9)?,
            config_text: r.get(10)?,
            model: r.get(11)?,
            backend: r.get(12)?,
            label: r.get(13)?,
            target_kind: r.get(14)?,
            target: r.get(15)?,
            server_version: r.get(16)?,
            servebench_version: r.get(17)?,
            simulated: r.get(18)?,
            dataset: r.get(19)?,
            request_rate: r.get(20)?,
            max_concurrency: r.get::<_, Option<i64>>(21)?.map(u64_of),
            num_prompts: u64_of(r.get(22)?),
            input_len: u64_of(r.get(23)?),
            output_len: u64_of(r.get(24)?),
            verdict: r.get(25)?,
            verdict_text: r.get(26)?,
            interrupted: r.get(27)?,
            completed: u64_of(r.get(28)?),
            failed: u64_of(r.get(29)?),
            duration_s: r.get(30)?,
            host: r.get(31)?,
            command_line: r.get(32)?,
            figures: BTreeMap::new(),
        },
    })
}
