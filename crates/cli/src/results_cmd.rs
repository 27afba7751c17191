//! `servebench results`: the results database. `ls` and `show` find runs, `trend` follows one
//! figure of one configuration over time and flags a change beyond run-to-run noise (exit 1,
//! a regression gate for CI), `compare` compares two indexed runs as `servebench compare`
//! does, `export` writes the llm-d benchmark report (v0.2) or vLLM's PyTorch benchmark
//! records, and `import DIR` rebuilds the index from result files (the source of truth).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _, Result};
use clap::{Args, Subcommand, ValueEnum};
use servebench_results::export::{llmd, pytorch, ExportRun};
use servebench_results::trend::{
    analyse, date_text, render_text, value_text, Status, TrendOptions,
};
use servebench_results::{Context, DbLocation, Filter, Kind, ResultsDb, StoredRun};

/// `servebench results` flags.
#[derive(Debug, Clone, Args)]
pub struct ResultsArgs {
    /// The results database [default: $SERVEBENCH_DB, else
    /// $XDG_DATA_HOME/servebench/results.db, else ~/.local/share/servebench/results.db].
    #[arg(long, global = true, value_name = "PATH")]
    pub db: Option<PathBuf>,
    #[command(subcommand)]
    pub command: ResultsCommand,
}

/// What to do with the database.
#[derive(Debug, Clone, Subcommand)]
pub enum ResultsCommand {
    /// List indexed runs, newest first.
    Ls(LsArgs),
    /// One run's entry: target, versions, verdict, every figure and the result file.
    Show(ShowArgs),
    /// One figure of one configuration over time; exit 1 when the latest run is a regression
    /// beyond run-to-run noise.
    Trend(TrendArgs),
    /// Compare two indexed runs (as `servebench compare`, with --fail-if gates).
    Compare(CompareIdsArgs),
    /// Export runs as the llm-d benchmark report (v0.2) or vLLM's PyTorch benchmark records.
    Export(ExportArgs),
    /// Index every result under DIR (matrix rows and sweep points from their
    /// experiment.json); entries whose file under DIR is gone are dropped.
    Import(ImportArgs),
}

/// Which runs `ls` lists.
#[derive(Debug, Clone, Args)]
pub struct LsArgs {
    /// Only this configuration (its key, or a prefix of it).
    #[arg(long, value_name = "KEY")]
    pub config: Option<String>,
    /// Only models whose id contains this.
    #[arg(long)]
    pub model: Option<String>,
    /// Only runs with this --label.
    #[arg(long)]
    pub label: Option<String>,
    /// Only runs of this kind.
    #[arg(long, value_enum)]
    pub kind: Option<KindArg>,
    /// Only runs whose result file or experiment directory path contains this.
    #[arg(long, value_name = "TEXT")]
    pub path: Option<String>,
    /// Only runs started on or after this day (YYYY-MM-DD, local time).
    #[arg(long, value_name = "DATE")]
    pub since: Option<String>,
    /// At most this many runs (0: all).
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Print the entries as JSON.
    #[arg(long)]
    pub json: bool,
}

/// A kind of run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KindArg {
    Run,
    MatrixRow,
    SweepPoint,
}

impl From<KindArg> for Kind {
    fn from(k: KindArg) -> Kind {
        match k {
            KindArg::Run => Kind::Run,
            KindArg::MatrixRow => Kind::MatrixRow,
            KindArg::SweepPoint => Kind::SweepPoint,
        }
    }
}

/// `results show`.
#[derive(Debug, Clone, Args)]
pub struct ShowArgs {
    /// The run: its id (`results ls`), or its *.servebench.json.
    pub run: String,
    /// Print the entry as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `results trend`.
#[derive(Debug, Clone, Args)]
pub struct TrendArgs {
    /// The figure, by the names `compare --fail-if` uses: mean_tpot_ms, p99_ttft_ms,
    /// output_throughput, joules_per_output_token, ...
    pub metric: String,
    /// The configuration (its key or a prefix, from `results ls`) [default: the newest
    /// run's].
    #[arg(long, value_name = "KEY", conflicts_with = "run")]
    pub config: Option<String>,
    /// The configuration of this run (an id or a *.servebench.json).
    #[arg(long, value_name = "RUN")]
    pub run: Option<String>,
    /// Runs before the latest that make the baseline (its run-to-run noise).
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub baseline: usize,
    /// The newest runs judged together as the latest (several: Welch's t-test).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub recent: usize,
    /// Significance level of the test.
    #[arg(long, default_value_t = 0.01)]
    pub alpha: f64,
    /// Smallest change that counts, percent of the baseline's mean, however significant.
    #[arg(long, default_value_t = 0.0, value_name = "PCT")]
    pub min_change: f64,
    /// Exit 1 on a significant change either way, not only a regression.
    #[arg(long)]
    pub fail_on_any_change: bool,
    /// Print the trend as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `results compare`.
#[derive(Debug, Clone, Args)]
pub struct CompareIdsArgs {
    /// Baseline: a run id or a *.servebench.json.
    pub a: String,
    /// Candidate: a run id or a *.servebench.json.
    pub b: String,
    /// Significance level of the Mann–Whitney U tests.
    #[arg(long, default_value_t = 0.01)]
    pub alpha: f64,
    /// Gates such as 'p99_ttft_ms>+10%' (B against A); exit 1 when one trips.
    #[arg(long = "fail-if", value_name = "GATE")]
    pub fail_if: Vec<String>,
    /// Print the comparison as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Export formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// The llm-d benchmark report, schema v0.2 (one report per run).
    #[value(name = "llm-d")]
    LlmD,
    /// The PyTorch OSS benchmark database records vLLM writes (one JSON list).
    Pytorch,
}

/// `results export`.
#[derive(Debug, Clone, Args)]
pub struct ExportArgs {
    /// The format.
    #[arg(long, value_enum)]
    pub format: ExportFormat,
    /// The runs: ids or *.servebench.json files [default: the newest --last runs].
    pub runs: Vec<String>,
    /// Without RUNS: the newest N runs (of --config when given).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub last: usize,
    /// Without RUNS: only this configuration.
    #[arg(long, value_name = "KEY")]
    pub config: Option<String>,
    /// Write here instead of standard output: a file, or for several llm-d reports a
    /// directory (one <id>.llm-d-report.json per run).
    #[arg(long, short = 'o', value_name = "PATH")]
    pub output: Option<PathBuf>,
}

/// `results import`.
#[derive(Debug, Clone, Args)]
pub struct ImportArgs {
    /// Directories holding result files (searched recursively).
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
}

/// The database the results commands read: `--db`, else the environment's, else the default.
fn db_path(flag: Option<&Path>) -> Result<PathBuf> {
    match DbLocation::resolve(flag, false).map_err(anyhow::Error::msg)? {
        DbLocation::File(p) => Ok(p),
        DbLocation::Off => bail!(
            "the results database is off ({}=off): give --db PATH",
            servebench_results::ENV
        ),
    }
}

/// Opens an existing database (reading commands do not create one).
fn open_existing(path: &Path) -> Result<ResultsDb> {
    if !path.exists() {
        bail!(
            "no results database at {} (no run indexed yet; `servebench results import DIR` indexes existing results)",
            path.display()
        );
    }
    Ok(ResultsDb::open(path)?)
}

/// `servebench results`.
pub fn results(args: ResultsArgs) -> Result<ExitCode> {
    let path = db_path(args.db.as_deref())?;
    match args.command {
        ResultsCommand::Ls(a) => ls(&path, &a),
        ResultsCommand::Show(a) => show(&path, &a),
        ResultsCommand::Trend(a) => trend(&path, &a),
        ResultsCommand::Compare(a) => compare(&path, &a),
        ResultsCommand::Export(a) => export(&path, &a),
        ResultsCommand::Import(a) => import(&path, &a),
    }
}

/// A run named by id or by its result file.
fn find(db: &ResultsDb, run: &str) -> Result<StoredRun> {
    let id = match run.trim_start_matches('#').parse::<i64>() {
        Ok(id) => id,
        Err(_) => {
            let abs = servebench_results::entry::absolute(Path::new(run));
            db.id_of_path(&abs.to_string_lossy())?.with_context(|| {
                format!("{run} is not indexed (`servebench results import DIR` indexes it)")
            })?
        }
    };
    db.get(id)?
        .with_context(|| format!("no run #{id} in {}", db.path().display()))
}

fn short(config: &str) -> &str {
    &config[..config.len().min(8)]
}

/// Where a run sits: `A` (matrix row), `D @ 4` (sweep point), `-`.
fn place(r: &StoredRun) -> String {
    let c = &r.entry.context;
    match (c.kind, &c.row, c.point) {
        (Kind::SweepPoint, Some(row), Some(p)) => format!("{row} @ {p}"),
        (_, Some(row), _) => row.clone(),
        _ => "-".into(),
    }
}

fn load_text(r: &StoredRun) -> String {
    let e = &r.entry;
    match e.max_concurrency {
        Some(c) => format!("{} req/s ≤{c}", e.request_rate),
        None => format!("{} req/s", e.request_rate),
    }
}

fn since_unix(day: &str) -> Result<f64> {
    use chrono::TimeZone;
    let d = chrono::NaiveDate::parse_from_str(day, "%Y-%m-%d")
        .with_context(|| format!("--since {day}: use YYYY-MM-DD"))?;
    let t = d
        .and_hms_opt(0, 0, 0)
        .and_then(|t| chrono::Local.from_local_datetime(&t).earliest())
        .with_context(|| format!("--since {day}: no such local time"))?;
    Ok(t.timestamp() as f64)
}

fn ls(path: &Path, a: &LsArgs) -> Result<ExitCode> {
    if !path.exists() {
        if a.json {
            println!("[]");
        } else {
            eprintln!("no runs indexed yet ({} does not exist)", path.display());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let db = ResultsDb::open(path)?;
    let filter = Filter {
        config: a.config.clone(),
        model: a.model.clone(),
        label: a.label.clone(),
        kind: a.kind.map(Kind::from),
        path: a.path.clone(),
        since: a.since.as_deref().map(since_unix).transpose()?,
        limit: (a.limit > 0).then_some(a.limit),
    };
    let mut runs = db.list(&filter)?;
    for r in &mut runs {
        r.entry.figures = db.figures(r.id)?;
    }
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&runs)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let headers = [
        "id",
        "started",
        "kind",
        "config",
        "place",
        "model",
        "target",
        "load",
        "verdict",
        "out tok/s",
        "p99 TTFT",
        "mean TPOT",
        "J/tok",
        "result",
    ];
    let fig = |r: &StoredRun, name: &str| {
        r.entry
            .figures
            .get(name)
            .map_or_else(|| "-".to_owned(), |v| value_text(*v))
    };
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let e = &r.entry;
            vec![
                r.id.to_string(),
                e.started_unix.map(date_text).unwrap_or_default(),
                e.context.kind.as_str().to_owned(),
                short(&e.config).to_owned(),
                place(r),
                e.model.clone(),
                e.target.clone(),
                load_text(r),
                e.verdict.clone().unwrap_or_else(|| "-".into()),
                fig(r, "output_throughput"),
                fig(r, "p99_ttft_ms"),
                fig(r, "mean_tpot_ms"),
                fig(r, "joules_per_output_token"),
                e.path.clone(),
            ]
        })
        .collect();
    let widths: Vec<usize> = (0..headers.len())
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain(std::iter::once(headers[i].len()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<String>| {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i + 1 == cells.len() {
                    c.clone()
                } else {
                    format!("{c:<w$}", w = widths[i])
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
    };
    writeln!(
        out,
        "{}",
        line(headers.iter().map(|h| (*h).to_owned()).collect())
    )?;
    for r in rows {
        writeln!(out, "{}", line(r))?;
    }
    if runs.is_empty() {
        writeln!(out, "(no run matches)")?;
    }
    Ok(ExitCode::SUCCESS)
}

fn show(path: &Path, a: &ShowArgs) -> Result<ExitCode> {
    let db = open_existing(path)?;
    let r = find(&db, &a.run)?;
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&r)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let e = &r.entry;
    let c = &e.context;
    let mut facts: Vec<(&str, String)> = vec![
        ("id", r.id.to_string()),
        ("result", e.path.clone()),
        (
            "started",
            e.started_unix
                .map(date_text)
                .unwrap_or_else(|| e.date.clone()),
        ),
        ("kind", c.kind.as_str().to_owned()),
    ];
    if let Some(x) = &c.experiment {
        facts.push(("experiment", x.clone()));
    }
    if c.row.is_some() || c.point.is_some() {
        facts.push(("row / point", place(&r)));
    }
    facts.extend([
        ("config", e.config.clone()),
        ("model", e.model.clone()),
        ("backend", e.backend.clone()),
        ("label", e.label.clone().unwrap_or_else(|| "-".into())),
        ("target", format!("{} ({})", e.target, e.target_kind)),
        (
            "server version",
            e.server_version.clone().unwrap_or_else(|| "-".into()),
        ),
        ("servebench", e.servebench_version.clone()),
        (
            "workload",
            format!(
                "{} {} prompts, {} → {} tokens, {}",
                e.dataset,
                e.num_prompts,
                e.input_len,
                e.output_len,
                load_text(&r)
            ),
        ),
        (
            "verdict",
            e.verdict_text.clone().unwrap_or_else(|| "-".into()),
        ),
        (
            "requests",
            format!(
                "{} completed, {} failed in {:.2} s{}",
                e.completed,
                e.failed,
                e.duration_s,
                if e.interrupted { " (interrupted)" } else { "" }
            ),
        ),
        ("client host", e.host.clone()),
        ("command line", e.command_line.clone()),
        ("indexed", r.indexed_at.clone()),
    ]);
    for (k, v) in facts {
        writeln!(out, "{k:>15}: {v}")?;
    }
    writeln!(out, "\nfigures:")?;
    for (k, v) in &e.figures {
        writeln!(out, "  {k:<32} {}", value_text(*v))?;
    }
    writeln!(out, "\nconfiguration {}:\n  {}", e.config, e.config_text)?;
    Ok(ExitCode::SUCCESS)
}

fn trend(path: &Path, a: &TrendArgs) -> Result<ExitCode> {
    if !(a.alpha > 0.0 && a.alpha < 1.0) {
        bail!("--alpha must be in (0, 1), got {}", a.alpha);
    }
    if !(a.min_change >= 0.0 && a.min_change.is_finite()) {
        bail!(
            "--min-change must be a percentage of at least 0, got {}",
            a.min_change
        );
    }
    if a.baseline < 2 {
        bail!("--baseline must be at least 2 (the noise of one run is unknown)");
    }
    let db = open_existing(path)?;
    let config = match (&a.config, &a.run) {
        (Some(prefix), _) => {
            let found = db.configs(prefix)?;
            match found.as_slice() {
                [one] => one.clone(),
                [] => bail!("no configuration {prefix} in {}", path.display()),
                many => bail!(
                    "--config {prefix} names {} configurations ({}): give more of the key",
                    many.len(),
                    many.iter().map(|c| short(c)).collect::<Vec<_>>().join(", ")
                ),
            }
        }
        (None, Some(run)) => find(&db, run)?.entry.config,
        (None, None) => {
            let newest = db.list(&Filter {
                limit: Some(1),
                ..Filter::default()
            })?;
            match newest.first() {
                Some(r) => r.entry.config.clone(),
                None => bail!("no run indexed in {}", path.display()),
            }
        }
    };
    let series = db.series(&config, &a.metric)?;
    if series.is_empty() {
        let names = db.figure_names(&config)?;
        bail!(
            "no run of configuration {} has a figure '{}' (known: {})",
            short(&config),
            a.metric,
            names.join(", ")
        );
    }
    let opts = TrendOptions {
        baseline: a.baseline,
        recent: a.recent.max(1),
        alpha: a.alpha,
        min_change: a.min_change / 100.0,
    };
    let t = analyse(&a.metric, &config, &series, &opts);
    let newest = &series[series.len() - 1].0.entry;
    let describe = format!(
        "{} · {} · {} {} → {} tokens · {}",
        newest.model,
        newest.target,
        newest.dataset,
        newest.input_len,
        newest.output_len,
        load_text(&series[series.len() - 1].0)
    );
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&t)?)?;
    } else {
        out.write_all(render_text(&t, &describe).as_bytes())?;
    }
    let fails = match t.status {
        Status::Regression => true,
        Status::Improvement => a.fail_on_any_change,
        Status::Noise | Status::NotEnoughHistory => false,
    };
    Ok(if fails {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The result file of a run named by id or path.
fn result_path(db: Option<&ResultsDb>, run: &str) -> Result<(PathBuf, Context)> {
    if run.trim_start_matches('#').parse::<i64>().is_ok() {
        let Some(db) = db else {
            bail!("run {run}: there is no results database to look it up in");
        };
        let r = find(db, run)?;
        return Ok((PathBuf::from(&r.entry.path), r.entry.context));
    }
    let p = PathBuf::from(run);
    if !p.is_file() {
        bail!("{run} is neither a run id nor a result file");
    }
    let ctx = db
        .and_then(|db| {
            let abs = servebench_results::entry::absolute(&p);
            let id = db.id_of_path(&abs.to_string_lossy()).ok()??;
            db.get(id).ok()?
        })
        .map_or_else(Context::run, |r| r.entry.context);
    Ok((p, ctx))
}

fn compare(path: &Path, a: &CompareIdsArgs) -> Result<ExitCode> {
    let db = path.exists().then(|| ResultsDb::open(path)).transpose()?;
    let (pa, _) = result_path(db.as_ref(), &a.a)?;
    let (pb, _) = result_path(db.as_ref(), &a.b)?;
    crate::compare_cmd::run(crate::compare_cmd::CompareArgs {
        a: pa,
        b: pb,
        gpus_a: None,
        gpus_b: None,
        alpha: a.alpha,
        fail_if: a.fail_if.clone(),
        json: a.json,
    })
}

fn export(path: &Path, a: &ExportArgs) -> Result<ExitCode> {
    let db = path.exists().then(|| ResultsDb::open(path)).transpose()?;
    let mut chosen: Vec<(Option<i64>, PathBuf, Context)> = Vec::new();
    if a.runs.is_empty() {
        let Some(db) = &db else {
            bail!(
                "no results database at {}: name result files to export",
                path.display()
            );
        };
        if a.last == 0 {
            bail!("--last must be at least 1");
        }
        let runs = db.list(&Filter {
            config: a.config.clone(),
            limit: Some(a.last),
            ..Filter::default()
        })?;
        if runs.is_empty() {
            bail!("no run to export in {}", path.display());
        }
        // Oldest first, as they were measured.
        for r in runs.into_iter().rev() {
            chosen.push((Some(r.id), PathBuf::from(&r.entry.path), r.entry.context));
        }
    } else {
        for run in &a.runs {
            let (p, ctx) = result_path(db.as_ref(), run)?;
            let id = run.trim_start_matches('#').parse::<i64>().ok();
            chosen.push((id, p, ctx));
        }
    }
    let mut loaded = Vec::new();
    for (id, p, ctx) in chosen {
        let run = ExportRun::load(&p, ctx).with_context(|| format!("exporting {}", p.display()))?;
        if run.records.is_none() {
            eprintln!(
                "note: {}: its records file is gone; the export holds the summary's figures only",
                p.display()
            );
        }
        loaded.push((id, run));
    }
    match a.format {
        ExportFormat::Pytorch => {
            let records: Vec<serde_json::Value> = loaded
                .iter()
                .flat_map(|(_, r)| pytorch::records(r))
                .collect();
            let text = serde_json::to_string(&records)?;
            write_out(a.output.as_deref(), &text)?;
        }
        ExportFormat::LlmD if loaded.len() == 1 => {
            let text = serde_json::to_string_pretty(&llmd::report(&loaded[0].1))?;
            write_out(a.output.as_deref(), &text)?;
        }
        ExportFormat::LlmD => {
            let Some(dir) = &a.output else {
                bail!(
                    "{} llm-d reports (one per run): give -o DIR to write them into",
                    loaded.len()
                );
            };
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            for (id, run) in &loaded {
                let stem = match id {
                    Some(id) => id.to_string(),
                    None => run
                        .path
                        .file_name()
                        .map(|n| {
                            n.to_string_lossy()
                                .trim_end_matches(".servebench.json")
                                .to_owned()
                        })
                        .unwrap_or_else(|| "run".into()),
                };
                let file = dir.join(format!("{stem}.llm-d-report.json"));
                std::fs::write(&file, serde_json::to_string_pretty(&llmd::report(run))?)
                    .with_context(|| format!("writing {}", file.display()))?;
                eprintln!("llm-d report: {}", file.display());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn write_out(path: Option<&Path>, text: &str) -> Result<()> {
    match path {
        Some(p) => {
            if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            std::fs::write(p, format!("{text}\n"))
                .with_context(|| format!("writing {}", p.display()))?;
            eprintln!("written: {}", p.display());
        }
        None => writeln!(std::io::stdout().lock(), "{text}")?,
    }
    Ok(())
}

fn import(path: &Path, a: &ImportArgs) -> Result<ExitCode> {
    let mut db = ResultsDb::open(path)?;
    for dir in &a.dirs {
        let r = servebench_results::import::import_dir(&mut db, dir)
            .with_context(|| format!("importing {}", dir.display()))?;
        for (p, e) in &r.failed {
            eprintln!("warning: {}: {e}", p.display());
        }
        println!(
            "{}: {} result(s) indexed, {} unreadable, {} entr{} of removed files dropped",
            dir.display(),
            r.indexed,
            r.failed.len(),
            r.pruned,
            if r.pruned == 1 { "y" } else { "ies" }
        );
    }
    println!("{} run(s) in {}", db.count()?, path.display());
    Ok(ExitCode::SUCCESS)
}
