//! `servebench report PATH`: re-render `report.html`, `report.md` and `summary.csv` from a
//! saved experiment directory, or a one-row report from a single `*.servebench.json`, or
//! rebuild a run's results from its `*.requests.jsonl` alone (a run killed before it wrote
//! them).

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
    /// An experiment directory (holding experiment.json), one run's *.servebench.json, or
    /// one run's *.requests.jsonl (its results are rebuilt from the records alone).
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

/// The interruption a single result file records, if it is one and says so.
fn interrupted_reason(path: &Path) -> Option<String> {
    if !path.is_file() {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    let r: servebench_metrics::result::RunResult = serde_json::from_str(&text).ok()?;
    r.interrupted
        .then(|| r.interrupted_reason.unwrap_or_else(|| "interrupted".into()))
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

/// The suffix of a run's per-request records file.
const RECORDS_SUFFIX: &str = ".requests.jsonl";

/// What a rebuild wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rebuilt {
    /// `<stem>.rebuilt.servebench.json`, marked interrupted.
    pub native: PathBuf,
    /// `<stem>.rebuilt.json`, vLLM's layout.
    pub vllm: PathBuf,
}

/// Rebuild a run's servebench result and vLLM result from its records file alone, beside it
/// (or in `dir`). Both say what they are: the servebench result is marked interrupted with
/// the reason; the vLLM file keeps vLLM's layout (its duration is the records' span).
pub fn rebuild_from_records(records_path: &Path, dir: Option<&Path>) -> Result<Rebuilt> {
    use servebench_metrics::result::{
        to_sorted_json_pretty, ClientHealth, RunMetadata, RunResult, RESULT_SCHEMA,
    };
    use servebench_metrics::summary::{summarize, SummaryOptions};

    let read = servebench_metrics::read_jsonl_counted(records_path)?;
    let records = read.records;
    if records.is_empty() {
        anyhow::bail!("{} holds no complete record", records_path.display());
    }
    let start = records
        .iter()
        .map(|r| r.intended.min(r.sent))
        .min()
        .unwrap_or(0);
    let end = records
        .iter()
        .map(|r| r.done.or(r.end).unwrap_or(r.sent))
        .max()
        .unwrap_or(start);
    let duration_ns = end.saturating_sub(start).max(1);
    let summary = summarize(
        &records,
        &SummaryOptions {
            duration_ns: Some(duration_ns),
            ..SummaryOptions::default()
        },
    );
    let name = records_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name
        .strip_suffix(RECORDS_SUFFIX)
        .unwrap_or(&name)
        .to_owned();
    let out_dir = dir.map(Path::to_path_buf).unwrap_or_else(|| {
        records_path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
    });
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;

    let mut reason = format!(
        "rebuilt from the per-request records alone ({} records{})",
        records.len(),
        if read.partial_tail_bytes > 0 {
            format!(
                "; a final record cut off mid-line ({} bytes) was dropped",
                read.partial_tail_bytes
            )
        } else {
            String::new()
        }
    );
    reason.push_str("; the run's own summary was not available");
    let info = servebench_report::VllmRunInfo {
        date: chrono::Local::now().format("%Y%m%d-%H%M%S").to_string(),
        backend: "unknown".into(),
        label: None,
        model_id: "unknown".into(),
        tokenizer_id: "unknown".into(),
        num_prompts: records.len(),
        metadata: Vec::new(),
        request_rate: f64::INFINITY,
        burstiness: 1.0,
        max_concurrency: None,
        ramp_up: None,
        rps_change_events: Vec::new(),
        spec_decode: None,
        duration_s: duration_ns as f64 / 1e9,
        percentile_metrics: vec!["ttft".into(), "tpot".into(), "itl".into()],
        percentiles: vec![99.0],
        goodput: Vec::new(),
        detailed: false,
    };
    let vllm = servebench_report::vllm_result(&info, &records);
    let paths = Rebuilt {
        native: out_dir.join(format!("{stem}.rebuilt.servebench.json")),
        vllm: out_dir.join(format!("{stem}.rebuilt.json")),
    };
    std::fs::write(&paths.vllm, servebench_report::to_python_json(&vllm))
        .with_context(|| format!("writing {}", paths.vllm.display()))?;
    // What the records alone can say about the run's validity (rate and lengths unknown).
    let validity = servebench_metrics::RunValidity::from_facts(&servebench_metrics::run_facts(
        &records,
        &summary,
        &servebench_metrics::FactsOptions::default(),
    ));
    let native = RunResult {
        schema: RESULT_SCHEMA.to_owned(),
        servebench_version: env!("CARGO_PKG_VERSION").to_owned(),
        simulated: false,
        metadata: RunMetadata::default(),
        plan: None,
        summary,
        client_health: None::<ClientHealth>,
        server_telemetry: None,
        records_path: Some(name.clone()),
        validity: Some(validity),
        interrupted: true,
        prefix_hit: None,
        interrupted_reason: Some(reason),
        by_turn: servebench_metrics::by_turn(&records),
        by_lora: Vec::new(),
        gpu_telemetry: None,
        stopped_early: None,
        agents: None,
        slices: None,
    };
    let text = to_sorted_json_pretty(&native).context("serializing the rebuilt result")?;
    std::fs::write(&paths.native, text)
        .with_context(|| format!("writing {}", paths.native.display()))?;
    Ok(paths)
}

/// `servebench report`.
pub fn report(mut args: ReportArgs) -> Result<ExitCode> {
    // `--no-write` rebuilds a records file's results in a scratch directory, removed once read:
    // nothing is left where the user did not ask for files.
    let mut scratch = None;
    if args.path.is_file() && args.path.to_string_lossy().ends_with(RECORDS_SUFFIX) {
        let into = if args.no_write {
            let dir = std::env::temp_dir().join(format!(
                "servebench-report-{}-{}",
                std::process::id(),
                chrono::Local::now().format("%Y%m%d%H%M%S%f")
            ));
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            // The rebuilt result names its records file beside it; a link keeps it readable.
            if let (Some(name), Ok(original)) =
                (args.path.file_name(), std::fs::canonicalize(&args.path))
            {
                let _ = std::os::unix::fs::symlink(original, dir.join(name));
            }
            scratch = Some(dir.clone());
            Some(dir)
        } else {
            args.output_dir.clone()
        };
        let rebuilt = rebuild_from_records(&args.path, into.as_deref())?;
        if !args.no_write {
            eprintln!("servebench result (rebuilt): {}", rebuilt.native.display());
            eprintln!(
                "vLLM-compatible result (rebuilt): {}",
                rebuilt.vllm.display()
            );
        }
        args.path = rebuilt.native;
    }
    let loaded =
        load_experiment(&args.path).with_context(|| format!("loading {}", args.path.display()));
    let interrupted = interrupted_reason(&args.path);
    if let Some(dir) = &scratch {
        let _ = std::fs::remove_dir_all(dir);
    }
    let mut report = loaded?;
    // Every rendering (terminal, Markdown, HTML) lists the notes first.
    if let Some(reason) = interrupted {
        report.notes.insert(0, format!("INTERRUPTED: {reason}"));
    }
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
