//! `servebench report PATH`: re-render `report.html`, `report.md` and `summary.csv` from a
//! saved experiment directory, or a one-row report from a single `*.servebench.json`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use servebench_report::render::{render_csv, render_html, render_markdown, render_terminal};
use servebench_report::ExperimentReport;

use crate::experiment::load_experiment;

/// What `servebench report` prints on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrintFormat {
    /// The compact terminal table.
    Table,
    /// The Markdown report.
    Markdown,
    /// The CSV summary.
    Csv,
    /// Nothing but the paths written.
    None,
}

/// `servebench report` flags.
#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// An experiment directory (holding experiment.json) or one run's *.servebench.json.
    pub path: PathBuf,
    /// Directory for the report files [default: the experiment directory, or the result
    /// file's directory].
    #[arg(long)]
    pub output_dir: Option<PathBuf>,
    /// Write no files; only print.
    #[arg(long)]
    pub no_write: bool,
    /// What to print on stdout.
    #[arg(long, value_enum, default_value_t = PrintFormat::Table)]
    pub print: PrintFormat,
}

/// The files one report was written to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportFiles {
    /// The self-contained HTML page.
    pub html: PathBuf,
    /// The Markdown report.
    pub markdown: PathBuf,
    /// One line per run.
    pub csv: PathBuf,
}

/// Writes the HTML, Markdown and CSV renderings into `dir`: `report.html`, `report.md`,
/// `summary.csv`, each name prefixed with `prefix` (e.g. `"<stem>."`) when one is given.
pub fn write_reports(report: &ExperimentReport, dir: &Path, prefix: &str) -> Result<ReportFiles> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let files = ReportFiles {
        html: dir.join(format!("{prefix}report.html")),
        markdown: dir.join(format!("{prefix}report.md")),
        csv: dir.join(format!("{prefix}summary.csv")),
    };
    let write = |path: &Path, text: String| {
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    };
    write(&files.html, render_html(report))?;
    write(&files.markdown, render_markdown(report))?;
    write(&files.csv, render_csv(report))?;
    Ok(files)
}

/// Where the report of `path` goes by default, and the file-name prefix: an experiment
/// directory gets plain names in itself; a single result file gets `<stem>.` names beside it.
pub fn default_destination(path: &Path) -> (PathBuf, String) {
    if path.is_file() {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let stem = name
            .strip_suffix(".servebench.json")
            .or_else(|| name.strip_suffix(".json"))
            .unwrap_or(&name);
        (dir, format!("{stem}."))
    } else {
        (path.to_path_buf(), String::new())
    }
}

/// `servebench report`.
pub fn report(args: ReportArgs) -> Result<ExitCode> {
    let report =
        load_experiment(&args.path).with_context(|| format!("loading {}", args.path.display()))?;
    let text = match args.print {
        PrintFormat::Table => render_terminal(&report),
        PrintFormat::Markdown => render_markdown(&report),
        PrintFormat::Csv => render_csv(&report),
        PrintFormat::None => String::new(),
    };
    // A closed pipe (`| head`) surfaces as an I/O error, which main treats as success.
    std::io::stdout().lock().write_all(text.as_bytes())?;
    if !args.no_write {
        let (default_dir, prefix) = default_destination(&args.path);
        let dir = args.output_dir.unwrap_or(default_dir);
        let files = write_reports(&report, &dir, &prefix)?;
        eprintln!("report: {}", files.html.display());
        eprintln!("markdown: {}", files.markdown.display());
        eprintln!("csv: {}", files.csv.display());
    }
    Ok(ExitCode::SUCCESS)
}
