//! Loading saved results into the report model: an experiment directory (`experiment.json`
//! with its rows, sweep points and run files) or a single run's `*.servebench.json` (a
//! one-row report). The sweep's knee and headline are computed here with
//! `servebench_analysis::frontier`, so the renderers only format.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::de::IgnoredAny;
use serde::Deserialize;
use servebench_analysis::frontier::{
    best_under_slos, knee, parse_slos, LatencyMetric, LatencyStat, LoadKind, SweepPoint,
};
use servebench_metrics::read_jsonl;
use servebench_metrics::result::{ExperimentFile, RunResult, EXPERIMENT_SCHEMA, RESULT_SCHEMA};
use servebench_report::render::{sweep_axes, GroupFigures};
use servebench_report::{
    ExperimentKind, ExperimentReport, RowReport, RunData, SweepPointReport, SweepReport,
};

/// Extra Markdown files of an experiment directory shown as report sections, with headings.
const EXTRA_FILES: [(&str, &str); 2] = [
    ("interpretation.md", "Interpretation"),
    ("decision.md", "Decision"),
];

/// Reads one run's `*.servebench.json` and its per-request records (when the JSONL is
/// there; a missing JSONL leaves the records empty, a corrupt one is an error). `label` is
/// the path shown in reports.
pub fn load_run(path: &Path, label: &str) -> Result<RunData> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the result file {}", path.display()))?;
    // The schema and the summary are checked first so that another kind of file (vLLM's
    // result, a newer schema) gets a message naming what it is, not a missing field.
    #[derive(Deserialize)]
    struct Head {
        schema: Option<String>,
        summary: Option<IgnoredAny>,
    }
    // Well-formed JSON of another shape is named as such, not as "not JSON".
    let value: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    if !value.is_object() {
        bail!(
            "{} holds JSON, but {} rather than a servebench result (an object with 'schema' and 'summary')",
            path.display(),
            match value {
                serde_json::Value::Array(_) => "an array",
                serde_json::Value::String(_) => "a string",
                serde_json::Value::Number(_) => "a number",
                serde_json::Value::Bool(_) => "a boolean",
                _ => "null",
            }
        );
    }
    let head: Head = serde_json::from_value(value).with_context(|| {
        format!(
            "{} is JSON but not a servebench result (*.servebench.json)",
            path.display()
        )
    })?;
    if let Some(schema) = head.schema.filter(|s| s != RESULT_SCHEMA) {
        bail!(
            "{} has schema '{schema}', expected '{RESULT_SCHEMA}'",
            path.display()
        );
    }
    if head.summary.is_none() {
        bail!(
            "{} has no 'summary': is it a servebench result (*.servebench.json)? \
             vLLM's result JSON holds no per-request records to report from",
            path.display()
        );
    }
    let result: RunResult = serde_json::from_str(&text)
        .with_context(|| format!("reading the result {}", path.display()))?;
    let records = match &result.records_path {
        Some(rel) => {
            let jsonl = path.parent().unwrap_or(Path::new(".")).join(rel);
            if jsonl.exists() {
                read_jsonl(&jsonl)
                    .with_context(|| format!("reading the records {}", jsonl.display()))?
            } else {
                tracing::warn!("records file {} not found", jsonl.display());
                Vec::new()
            }
        }
        None => Vec::new(),
    };
    Ok(RunData {
        path: label.to_owned(),
        summary: result.summary,
        records,
        metadata: result.metadata,
        plan: result.plan,
        telemetry: result.server_telemetry,
        validity: result.validity,
        prefix_hit: result.prefix_hit,
        gpu: result.gpu_telemetry,
        agents: result.agents,
        slices: result.slices,
    })
}

/// The experiment directory `path` names: itself when it holds `experiment.json` (or is a
/// file); else, for a results root such as `sweep --results-dir results/seqs-8` makes
/// (`<root>/<model>/<hardware>/<timestamp>/`), the experiment below it — the newest (time
/// stamps sort by name) when several are, with a note naming it.
pub fn resolve_experiment_dir(path: &Path) -> Result<PathBuf> {
    if !path.is_dir() || path.join("experiment.json").exists() {
        return Ok(path.to_path_buf());
    }
    let mut found = Vec::new();
    let mut level = vec![path.to_path_buf()];
    // model / hardware / timestamp: three levels below a results root.
    for _ in 0..3 {
        let mut next = Vec::new();
        for dir in &level {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for e in entries.flatten() {
                let p = e.path();
                if p.is_dir() {
                    if p.join("experiment.json").exists() {
                        found.push(p);
                    } else {
                        next.push(p);
                    }
                }
            }
        }
        level = next;
    }
    found.sort();
    match found.as_slice() {
        [] => Ok(path.to_path_buf()),
        [one] => Ok(one.clone()),
        [.., newest] => {
            eprintln!(
                "note: {} holds {} experiments; using the newest, {}",
                path.display(),
                found.len(),
                newest.display()
            );
            Ok(newest.clone())
        }
    }
}

/// Loads an experiment directory, or a single `*.servebench.json` as a one-row report.
/// A directory without `experiment.json` that holds exactly one result file is read as that
/// result.
pub fn load_experiment(path: &Path) -> Result<ExperimentReport> {
    if path.is_file() {
        return load_single(path);
    }
    if !path.is_dir() {
        bail!("{} does not exist", path.display());
    }
    let manifest = path.join("experiment.json");
    if !manifest.exists() {
        let results = result_files_in(path)?;
        return match results.as_slice() {
            [one] => load_single(one),
            [] => bail!(
                "{} holds neither experiment.json nor a *.servebench.json result",
                path.display()
            ),
            many => bail!(
                "{} holds no experiment.json and {} result files; name one of them",
                path.display(),
                many.len()
            ),
        };
    }
    let text = std::fs::read_to_string(&manifest)
        .with_context(|| format!("reading {}", manifest.display()))?;
    let file: ExperimentFile = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a valid experiment file", manifest.display()))?;
    from_experiment_file(path, file)
}

fn result_files_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let p = entry?.path();
        if p.is_file()
            && p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(".servebench.json"))
        {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

fn load_single(path: &Path) -> Result<ExperimentReport> {
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let run = load_run(path, &name)?;
    let stem = name.trim_end_matches(".servebench.json").to_owned();
    let mut report =
        ExperimentReport::new(format!("servebench run {stem}"), ExperimentKind::Single);
    report.notes = run_notes(std::slice::from_ref(&run));
    report.rows.push(RowReport {
        id: "run".into(),
        name: stem,
        hypothesis: String::new(),
        runs: vec![run],
    });
    Ok(report)
}

/// Notes every report of these runs should carry (simulated target, failures).
fn run_notes(runs: &[RunData]) -> Vec<String> {
    let mut notes = Vec::new();
    let simulated = runs.iter().any(|r| r.metadata.target.is_simulator());
    if simulated {
        notes.push(
            "Target: servebench's simulated engine; figures are the cost model's, not a GPU's."
                .to_owned(),
        );
    }
    let virtual_clock = runs
        .iter()
        .any(|r| r.metadata.target.clock.as_deref() == Some("virtual"));
    if virtual_clock {
        notes.push("Run in virtual time (no real network or waiting).".to_owned());
    }
    let failed: u64 = runs.iter().map(|r| r.summary.failed).sum();
    if failed > 0 {
        notes.push(format!(
            "{failed} request(s) failed; see each run's failures by kind."
        ));
    }
    for w in runs
        .iter()
        .filter_map(|r| r.prefix_hit.as_ref()?.warning.as_ref())
    {
        notes.push(format!("Prefix hit rate: {w}."));
    }
    notes
}

fn load_runs(dir: &Path, paths: &[String]) -> Result<Vec<RunData>> {
    paths
        .iter()
        .map(|rel| load_run(&dir.join(rel), rel))
        .collect()
}

/// Builds the report from a parsed `experiment.json` whose paths are relative to `dir`.
pub fn from_experiment_file(dir: &Path, file: ExperimentFile) -> Result<ExperimentReport> {
    if !file.schema.is_empty() && file.schema != EXPERIMENT_SCHEMA {
        bail!(
            "experiment.json has schema '{}', expected '{EXPERIMENT_SCHEMA}'",
            file.schema
        );
    }
    let kind = match file.kind.as_str() {
        "matrix" => ExperimentKind::Matrix,
        "sweep" => ExperimentKind::Sweep,
        "single" => ExperimentKind::Single,
        other => bail!("experiment.json: unknown kind '{other}' (matrix or sweep)"),
    };
    let title = if file.title.is_empty() {
        format!("servebench {}", kind.as_str())
    } else {
        file.title.clone()
    };
    let mut report = ExperimentReport::new(title, kind);
    report.quick = file.quick;
    for row in &file.rows {
        let runs = load_runs(dir, &row.runs).with_context(|| format!("loading row {}", row.id))?;
        report.rows.push(RowReport {
            id: row.id.clone(),
            name: row.name.clone(),
            hypothesis: row.hypothesis.clone(),
            runs,
        });
    }
    if let Some(s) = &file.sweep {
        let mut points = Vec::new();
        for (i, p) in s.points.iter().enumerate() {
            let runs =
                load_runs(dir, &p.runs).with_context(|| format!("loading sweep point {i}"))?;
            points.push(SweepPointReport {
                value: p.value,
                runs,
            });
        }
        let mut sweep = SweepReport {
            row: s.row.clone(),
            variable: s.variable.clone(),
            slos: s.slos.clone(),
            latency_metric: Some(s.latency_metric.clone()).filter(|m| !m.is_empty()),
            points,
            knee: None,
            headline: None,
            stop_reason: Some(s.stop_reason.clone())
                .filter(|r| !r.is_empty())
                .or_else(|| s.stopped_early.then(|| "stopped early".to_owned())),
            search: s.search.clone(),
            gpus: s.gpus,
        };
        analyze(&mut sweep)?;
        // What the sweep itself decided wins over the recomputation (they agree unless the
        // files were edited).
        if let Some(k) = s.knee.filter(|&k| k < sweep.points.len()) {
            sweep.knee = Some(k);
        }
        if let Some(h) = s.headline.clone().filter(|h| !h.is_empty()) {
            sweep.headline = Some(h);
        }
        report.sweep = Some(sweep);
    }
    let all_runs: Vec<RunData> = report
        .rows
        .iter()
        .flat_map(|r| r.runs.iter())
        .chain(
            report
                .sweep
                .iter()
                .flat_map(|s| s.points.iter().flat_map(|p| p.runs.iter())),
        )
        .cloned()
        .collect();
    report.notes = file.notes.clone();
    for note in run_notes(&all_runs) {
        if !report.notes.contains(&note) {
            report.notes.push(note);
        }
    }
    for (file_name, heading) in EXTRA_FILES {
        let p = dir.join(file_name);
        if p.exists() {
            let body =
                std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
            report.extra_sections.push((heading.to_owned(), body));
        }
    }
    Ok(report)
}

/// The sweep's points as the analysis sees them: mean output throughput and mean latency
/// percentiles (over repeats) per point.
pub fn sweep_points(sweep: &SweepReport) -> Vec<SweepPoint> {
    const METRICS: [(&str, LatencyMetric); 4] = [
        ("ttft", LatencyMetric::Ttft),
        ("tpot", LatencyMetric::Tpot),
        ("itl", LatencyMetric::Itl),
        ("e2el", LatencyMetric::E2el),
    ];
    sweep
        .points
        .iter()
        .map(|p| {
            let f = GroupFigures::of(&p.runs);
            let mut latencies = Vec::new();
            let mut percentiles: Vec<f64> = vec![50.0, 90.0, 99.0];
            for axis in sweep_axes(sweep) {
                if !percentiles.contains(&axis.percentile) {
                    percentiles.push(axis.percentile);
                }
            }
            for (name, metric) in METRICS {
                for &q in &percentiles {
                    // Repeats give the mean of the percentile; a single run its own value
                    // (any percentile the summary holds).
                    let v = f.latency(name, q).value.or_else(|| {
                        (p.runs.len() == 1)
                            .then(|| {
                                p.runs[0]
                                    .summary
                                    .metric(name)?
                                    .percentile(q)
                                    .map(|s| s.value)
                            })
                            .flatten()
                    });
                    if let Some(v) = v {
                        latencies.push((LatencyStat::new(metric, q), v));
                    }
                }
            }
            let mut point = SweepPoint::new(
                p.value,
                f.output_throughput.value.unwrap_or(f64::NAN),
                latencies,
            );
            point.overloaded = p
                .runs
                .iter()
                .any(|r| r.validity.as_ref().is_some_and(|v| v.overloaded()));
            point.achieved_rate = p
                .runs
                .iter()
                .find_map(|r| r.validity.as_ref()?.load?.achieved_rate);
            point
        })
        .collect()
}

/// Fills in the knee (on the first frontier axis) and, with SLOs, the headline.
pub fn analyze(sweep: &mut SweepReport) -> Result<()> {
    let points = sweep_points(sweep);
    if points.is_empty() {
        return Ok(());
    }
    let axis = &sweep_axes(sweep)[0];
    let metric: LatencyMetric = axis
        .metric
        .parse()
        .map_err(|e: String| anyhow::anyhow!(e))?;
    let stat = LatencyStat::new(metric, axis.percentile);
    sweep.knee = knee(&points, stat).map(|k| k.index);
    let kind = if sweep.variable == "max_concurrency" {
        LoadKind::Concurrency
    } else {
        LoadKind::RequestRate
    };
    if !sweep.slos.is_empty() {
        let slos = parse_slos(&sweep.slos.join(" "))
            .with_context(|| format!("the sweep's SLOs {:?}", sweep.slos))?;
        match best_under_slos(&points, &slos, kind) {
            Ok(outcome) => sweep.headline = Some(outcome.headline),
            Err(e) => tracing::warn!("no sweep headline: {e}"),
        }
    }
    Ok(())
}
