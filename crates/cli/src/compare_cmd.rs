//! `servebench compare A B`: two results (run files, or experiment directories compared row
//! by row) side by side on every axis, with the ratio, a Mann–Whitney U test on the
//! per-request samples, and `--fail-if` gates that turn the comparison into an exit code.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;
use servebench_analysis::compare::{clock_warning, parse_gates, Clock, Gate, GateOutcome};
use servebench_metrics::{aggregate, RunSummary};
use servebench_report::render::charts::point_label;
use servebench_report::render::format::{load, ms, rate};
use servebench_report::{ExperimentReport, RunData};

use crate::experiment::load_experiment;
pub use crate::significance::MetricTest;
use crate::significance::{finish_test, latency_test, p_text, LATENCY};

/// `servebench compare` flags.
#[derive(Debug, Clone, Args)]
pub struct CompareArgs {
    /// Baseline: a *.servebench.json, or an experiment directory.
    pub a: PathBuf,
    /// Candidate: a *.servebench.json, or an experiment directory.
    pub b: PathBuf,
    /// GPUs behind A (default: the simulator's tensor-parallel size when A was simulated).
    #[arg(long)]
    pub gpus_a: Option<u32>,
    /// GPUs behind B (default: the simulator's tensor-parallel size when B was simulated).
    #[arg(long)]
    pub gpus_b: Option<u32>,
    /// Significance level of the Mann–Whitney U tests.
    #[arg(long, default_value_t = 0.01)]
    pub alpha: f64,
    /// Gates such as 'p99_ttft_ms>+10%' or 'output_throughput<-5%' (B against A); exit 1
    /// when one trips. Repeatable, or several in one value separated by commas.
    #[arg(long = "fail-if", value_name = "GATE")]
    pub fail_if: Vec<String>,
    /// Print the comparison as JSON.
    #[arg(long)]
    pub json: bool,
}

/// One axis of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Axis {
    /// Gate name (`p99_ttft_ms`, `output_throughput`).
    pub metric: String,
    /// Human label.
    pub label: String,
    /// A's value (mean over repeats).
    pub a: Option<f64>,
    /// B's value.
    pub b: Option<f64>,
    /// `b / a`.
    pub ratio: Option<f64>,
    /// The latency test this axis belongs to (`ttft`, ...), if any.
    pub test: Option<String>,
    /// Was the difference significant (latency axes: that metric's test)?
    pub significant: Option<bool>,
}

/// A and B for one row (or sweep point, or the single runs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairComparison {
    /// Row id (and sweep point) or `run`.
    pub label: String,
    /// Runs on each side.
    pub runs_a: usize,
    /// Runs on each side.
    pub runs_b: usize,
    /// GPUs behind each side, when known.
    pub gpus_a: Option<u32>,
    /// GPUs behind each side, when known.
    pub gpus_b: Option<u32>,
    /// Every axis.
    pub axes: Vec<Axis>,
    /// The significance tests.
    pub tests: Vec<MetricTest>,
    /// The gates, evaluated B against A.
    pub gates: Vec<GateOutcome>,
}

/// The whole comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Path of A.
    pub a: String,
    /// Path of B.
    pub b: String,
    /// Significance level.
    pub alpha: f64,
    /// One entry per matched row.
    pub pairs: Vec<PairComparison>,
    /// Rows or points present on one side only.
    pub unmatched: Vec<String>,
    /// What makes the comparison less than like for like (A and B timed on different clocks).
    pub warnings: Vec<String>,
    /// Did any gate trip?
    pub gate_failed: bool,
}

struct Pair<'a> {
    label: String,
    a: &'a [RunData],
    b: &'a [RunData],
}

fn groups(r: &ExperimentReport) -> Vec<(String, &[RunData])> {
    let mut out: Vec<(String, &[RunData])> = r
        .rows
        .iter()
        .filter(|row| !row.runs.is_empty())
        .map(|row| (row.id.clone(), row.runs.as_slice()))
        .collect();
    if let Some(s) = &r.sweep {
        for p in s.points.iter().filter(|p| !p.runs.is_empty()) {
            out.push((
                format!("{} @ {}", s.row, point_label(s, p.value)),
                p.runs.as_slice(),
            ));
        }
    }
    out
}

fn pairs<'a>(a: &'a ExperimentReport, b: &'a ExperimentReport) -> (Vec<Pair<'a>>, Vec<String>) {
    let ga = groups(a);
    let gb = groups(b);
    if ga.len() == 1 && gb.len() == 1 {
        let label = if ga[0].0 == gb[0].0 {
            ga[0].0.clone()
        } else {
            format!("{} vs {}", ga[0].0, gb[0].0)
        };
        return (
            vec![Pair {
                label,
                a: ga[0].1,
                b: gb[0].1,
            }],
            Vec::new(),
        );
    }
    let mut matched = Vec::new();
    let mut unmatched = Vec::new();
    for (label, runs) in &ga {
        match gb.iter().find(|(l, _)| l == label) {
            Some((_, rb)) => matched.push(Pair {
                label: label.clone(),
                a: runs,
                b: rb,
            }),
            None => unmatched.push(format!("{label} (only in A)")),
        }
    }
    for (label, _) in &gb {
        if !ga.iter().any(|(l, _)| l == label) {
            unmatched.push(format!("{label} (only in B)"));
        }
    }
    (matched, unmatched)
}

fn gpus_of(runs: &[RunData], flag: Option<u32>) -> Option<u32> {
    flag.or_else(|| {
        runs.first()?
            .metadata
            .target
            .sim_config
            .as_ref()?
            .tensor_parallel_size
    })
}

/// The figures of a group of runs under the names gates use (`p99_ttft_ms`,
/// `output_throughput`, ...); repeats give their mean.
pub fn gate_figures(runs: &[RunData], gpus: Option<u32>) -> BTreeMap<String, f64> {
    let summaries: Vec<RunSummary> = runs.iter().map(|r| r.summary.clone()).collect();
    let agg = aggregate(&summaries);
    let mut doc = BTreeMap::new();
    let mut put = |name: String, v: Option<f64>| {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            doc.insert(name, v);
        }
    };
    for f in &agg.figures {
        match f.name.split_once('.') {
            Some((metric, stat)) => put(format!("{stat}_{metric}_ms"), f.mean),
            None => put(f.name.clone(), f.mean),
        }
    }
    let duration =
        summaries.iter().map(|s| s.duration_s).sum::<f64>() / summaries.len().max(1) as f64;
    put("duration".into(), Some(duration));
    if let Some(g) = gpus.filter(|&g| g > 0) {
        let g = f64::from(g);
        for name in [
            "request_throughput",
            "output_throughput",
            "prompt_throughput",
            "total_token_throughput",
        ] {
            let per = agg.figure(name).and_then(|f| f.mean).map(|v| v / g);
            put(format!("{name}_per_gpu"), per);
        }
    }
    doc
}

fn compare_pair(pair: &Pair<'_>, args: &CompareArgs, gates: &[Gate]) -> Result<PairComparison> {
    let gpus_a = gpus_of(pair.a, args.gpus_a);
    let gpus_b = gpus_of(pair.b, args.gpus_b);
    let per_gpu = gpus_a.is_some() && gpus_b.is_some();
    let fa = gate_figures(pair.a, if per_gpu { gpus_a } else { None });
    let fb = gate_figures(pair.b, if per_gpu { gpus_b } else { None });
    let figure = |figures: &BTreeMap<String, f64>, metric: &str| figures.get(metric).copied();

    let mut tests: Vec<MetricTest> = LATENCY
        .iter()
        .map(|(m, _)| latency_test(pair.a, pair.b, m, args.alpha))
        .collect();
    let throughput_names = [
        "request_throughput",
        "output_throughput",
        "prompt_throughput",
    ];
    if pair.a.len() > 1 && pair.b.len() > 1 {
        for name in throughput_names {
            let per_run = |runs: &[RunData]| -> Vec<f64> {
                runs.iter()
                    .map(|r| match name {
                        "request_throughput" => r.summary.request_throughput,
                        "output_throughput" => r.summary.output_throughput,
                        _ => r.summary.prompt_throughput,
                    })
                    .collect()
            };
            tests.push(finish_test(
                name,
                "run",
                &per_run(pair.a),
                &per_run(pair.b),
                args.alpha,
            ));
        }
    }
    let significance = |test: &str| {
        tests
            .iter()
            .find(|t| t.metric == test)
            .and_then(|t| t.significant)
    };

    let mut axes = Vec::new();
    let mut axis = |metric: String, label: String, test: Option<&str>| {
        let a = figure(&fa, &metric);
        let b = figure(&fb, &metric);
        axes.push(Axis {
            ratio: match (a, b) {
                (Some(a), Some(b)) if a != 0.0 => Some(b / a),
                _ => None,
            },
            significant: test.and_then(significance),
            test: test.map(str::to_owned),
            metric,
            label,
            a,
            b,
        });
    };
    axis(
        "request_throughput".into(),
        "request throughput (req/s)".into(),
        Some("request_throughput"),
    );
    axis(
        "output_throughput".into(),
        "output throughput (tok/s)".into(),
        Some("output_throughput"),
    );
    axis(
        "prompt_throughput".into(),
        "prompt throughput (tok/s)".into(),
        Some("prompt_throughput"),
    );
    axis(
        "total_token_throughput".into(),
        "total token throughput (tok/s)".into(),
        None,
    );
    if per_gpu {
        axis(
            "request_throughput_per_gpu".into(),
            "request throughput per GPU (req/s)".into(),
            None,
        );
        axis(
            "output_throughput_per_gpu".into(),
            "output throughput per GPU (tok/s)".into(),
            None,
        );
        axis(
            "prompt_throughput_per_gpu".into(),
            "prompt throughput per GPU (tok/s)".into(),
            None,
        );
    }
    for (m, label) in LATENCY {
        for p in ["mean", "p50", "p90", "p99"] {
            axis(format!("{p}_{m}_ms"), format!("{label} {p} (ms)"), Some(m));
        }
    }
    axis("completed".into(), "completed requests".into(), None);
    axis("failed".into(), "failed requests".into(), None);

    let mut outcomes = Vec::new();
    for gate in gates {
        let known = || {
            let mut names: Vec<&String> = fa.keys().collect();
            names.sort();
            names
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Some(b) = figure(&fb, &gate.metric) else {
            bail!(
                "gate {gate}: B has no figure '{}' (known: {})",
                gate.metric,
                known()
            );
        };
        let a = figure(&fa, &gate.metric);
        if a.is_none() {
            bail!(
                "gate {gate}: A has no figure '{}' (known: {})",
                gate.metric,
                known()
            );
        }
        let mut o = gate
            .evaluate(a, b)
            .with_context(|| format!("row {}", pair.label))?;
        o.message = format!("{}: {}", pair.label, o.message);
        outcomes.push(o);
    }
    Ok(PairComparison {
        label: pair.label.clone(),
        runs_a: pair.a.len(),
        runs_b: pair.b.len(),
        gpus_a,
        gpus_b,
        axes,
        tests,
        gates: outcomes,
    })
}

/// Compares two loaded reports (B against A).
pub fn compare(
    a: &ExperimentReport,
    b: &ExperimentReport,
    args: &CompareArgs,
) -> Result<Comparison> {
    if !(args.alpha > 0.0 && args.alpha < 1.0) {
        bail!("--alpha must be in (0, 1), got {}", args.alpha);
    }
    let mut gates = Vec::new();
    for g in &args.fail_if {
        gates.extend(parse_gates(g).with_context(|| format!("--fail-if '{g}'"))?);
    }
    let (matched, unmatched) = pairs(a, b);
    if matched.is_empty() {
        bail!(
            "nothing to compare: no row of {} matches a row of {}",
            args.a.display(),
            args.b.display()
        );
    }
    let pairs = matched
        .iter()
        .map(|p| compare_pair(p, args, &gates))
        .collect::<Result<Vec<_>>>()?;
    let gate_failed = pairs.iter().any(|p| p.gates.iter().any(|g| g.failed));
    let clocks = |runs: &mut dyn Iterator<Item = &RunData>| -> Vec<Clock> {
        runs.map(|r| Clock::of(&r.metadata.target)).collect()
    };
    let warnings = clock_warning(
        &clocks(&mut matched.iter().flat_map(|p| p.a)),
        &clocks(&mut matched.iter().flat_map(|p| p.b)),
    )
    .into_iter()
    .collect();
    Ok(Comparison {
        a: args.a.display().to_string(),
        b: args.b.display().to_string(),
        alpha: args.alpha,
        pairs,
        unmatched,
        warnings,
        gate_failed,
    })
}

fn fmt_value(metric: &str, v: Option<f64>) -> String {
    match v {
        None => "–".into(),
        Some(v) if metric.ends_with("_ms") => ms(v),
        Some(v) if metric == "completed" || metric == "failed" => load(v),
        Some(v) => rate(v),
    }
}

/// The comparison as text tables.
pub fn render_text(c: &Comparison) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "A: {}\nB: {}", c.a, c.b);
    for w in &c.warnings {
        let _ = writeln!(out, "WARNING: {w}");
    }
    for p in &c.pairs {
        let gpus = |g: Option<u32>| {
            g.map_or(String::new(), |g| {
                format!(", {g} GPU{}", if g == 1 { "" } else { "s" })
            })
        };
        let _ = writeln!(
            out,
            "\n== {} (A: {} run{}{}; B: {} run{}{}) ==",
            p.label,
            p.runs_a,
            if p.runs_a == 1 { "" } else { "s" },
            gpus(p.gpus_a),
            p.runs_b,
            if p.runs_b == 1 { "" } else { "s" },
            gpus(p.gpus_b)
        );
        let rows: Vec<[String; 6]> = p
            .axes
            .iter()
            .map(|a| {
                [
                    a.label.clone(),
                    fmt_value(&a.metric, a.a),
                    fmt_value(&a.metric, a.b),
                    a.ratio.map_or("–".into(), |r| format!("{r:.3}")),
                    a.ratio
                        .map_or("–".into(), |r| format!("{:+.1} %", (r - 1.0) * 100.0)),
                    match a.significant {
                        Some(true) => "yes".into(),
                        Some(false) => "no".into(),
                        None if a.test.is_some() => "n/a (needs repeats)".into(),
                        None => String::new(),
                    },
                ]
            })
            .collect();
        let headers = [
            "axis",
            "A",
            "B",
            "B/A",
            "change",
            &format!("significant (α={})", c.alpha),
        ];
        let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
        for r in &rows {
            for (w, cell) in widths.iter_mut().zip(r) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: &[&str]| {
            let mut s = String::new();
            for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
                let pad = " ".repeat(w - cell.chars().count());
                if i == 0 || i == 5 {
                    let _ = write!(s, "{cell}{pad}  ");
                } else {
                    let _ = write!(s, "{pad}{cell}  ");
                }
            }
            s.trim_end().to_owned() + "\n"
        };
        out.push_str(&line(&headers));
        for r in &rows {
            let cells: Vec<&str> = r.iter().map(String::as_str).collect();
            out.push_str(&line(&cells));
        }
        out.push_str("Mann–Whitney U tests:\n");
        for t in &p.tests {
            match &t.result {
                Some(r) => {
                    let _ = writeln!(
                        out,
                        "  {:<20} per {:<20} n={}/{}  p={}  P(B>A)={:.3}  {}",
                        t.metric,
                        t.sample,
                        r.n1,
                        r.n2,
                        p_text(r.p_value),
                        t.p_b_greater.unwrap_or(f64::NAN),
                        if t.significant == Some(true) {
                            "significant"
                        } else {
                            "not significant"
                        }
                    );
                }
                None => {
                    let _ = writeln!(out, "  {:<20} no samples on one side", t.metric);
                }
            }
        }
        for g in &p.gates {
            let _ = writeln!(out, "{}", g.message);
        }
    }
    for u in &c.unmatched {
        let _ = writeln!(out, "not compared: {u}");
    }
    let total: usize = c.pairs.iter().map(|p| p.gates.len()).sum();
    if total > 0 {
        let failed: usize = c
            .pairs
            .iter()
            .map(|p| p.gates.iter().filter(|g| g.failed).count())
            .sum();
        let _ = writeln!(out, "\ngates: {failed} of {total} failed");
    }
    out
}

/// `servebench compare`: exit 1 when a gate trips.
pub fn run(args: CompareArgs) -> Result<ExitCode> {
    let a =
        load_experiment(&args.a).with_context(|| format!("loading A ({})", args.a.display()))?;
    let b =
        load_experiment(&args.b).with_context(|| format!("loading B ({})", args.b.display()))?;
    let c = compare(&a, &b, &args)?;
    if args.json {
        // The JSON holds the warnings too; stderr makes sure a person piping it sees them.
        for w in &c.warnings {
            eprintln!("WARNING: {w}");
        }
        let text = serde_json::to_string_pretty(&c).context("serializing the comparison")?;
        writeln!(std::io::stdout().lock(), "{text}")?;
    } else {
        // The text starts with the warnings; when it goes to a file or a pipe they go to
        // stderr as well, so a person at the terminal still sees them (once).
        if !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
            for w in &c.warnings {
                eprintln!("WARNING: {w}");
            }
        }
        // A closed pipe (`| head`) surfaces as an I/O error, which main treats as success.
        std::io::stdout()
            .lock()
            .write_all(render_text(&c).as_bytes())?;
    }
    Ok(if c.gate_failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
