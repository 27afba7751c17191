//! `servebench sweep --search`: the highest load of the sweep's axis (request rate or
//! concurrency) that still meets every `--slo`, found by doubling from the lowest value given
//! until a point fails, then bisecting between the highest passing and the lowest failing
//! load until they are within `--search-tolerance` (one step for concurrency).
//!
//! A point passes when, for every SLO, the 95 % upper confidence bound of its percentile over
//! the point's `--repeat` runs (the value itself with one run) is within the threshold, the
//! client kept up with the offered load, and the over-saturation test (see
//! `servebench_analysis::search::SaturationTest`) did not fire.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use servebench_analysis::frontier::{analyze_sweep, LoadKind, SloStat, SweepPoint};
use servebench_analysis::search::{MeanInterval, SaturationTest, Search};
use servebench_loadgen::StopSignal;
use servebench_metrics::result::{SearchEntry, SearchPointEntry, StoppedEarly};
use servebench_metrics::RunSummary;

use crate::matrix::bench::Bench;
use crate::matrix::frontier::{sweep_point, user_latency};
use crate::matrix::layout::{self, PointEntry, SweepEntry};
use crate::matrix::plan::{MatrixPlan, Rate, Scale};
use crate::matrix::render;
use crate::matrix::repeat::{run_repeated, Repeated};
use crate::sweep_cmd::{
    create_experiment, run_validity, sweep_entry, sweep_experiment, Ctx, Sweep, SweepArgs, Variable,
};

/// `servebench sweep` flags of the operating-point search and the frontier's per-GPU axis.
#[derive(Debug, Clone, Default, Args)]
pub struct SearchArgs {
    /// Find the highest load that meets every --slo instead of measuring every listed point:
    /// the --request-rate (or --max-concurrency) list gives the first load (its lowest) and
    /// the highest allowed (its highest); loads double until one fails, then bisect.
    #[arg(long, help_heading = "Search")]
    pub search: bool,
    /// Stop bisecting once the passing and failing rates are this close (relative).
    #[arg(
        long,
        default_value_t = 0.05,
        value_name = "FRACTION",
        help_heading = "Search"
    )]
    pub search_tolerance: f64,
    /// Most loads a search measures.
    #[arg(long, default_value_t = 16, value_name = "N", help_heading = "Search")]
    pub search_max_points: usize,
    /// GPUs serving the target, for the frontier's output tok/s per GPU [default: the
    /// simulator's tensor-parallel size, else 1].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), help_heading = "Search")]
    pub gpus: Option<u32>,
    /// Run every searched load to the end of its schedule, even one that is clearly
    /// over-saturated (by default such a run stops early and the load fails at once).
    #[arg(long, help_heading = "Search")]
    pub search_full_runs: bool,
}

/// One measured load.
struct Measured {
    value: f64,
    summaries: Vec<RunSummary>,
    point: SweepPoint,
    entry: PointEntry,
    verdict: SearchPointEntry,
}

/// Checks the flags before anything runs.
pub fn check(sweep: &Sweep, args: &SweepArgs) -> Result<(f64, f64)> {
    if sweep.slos.is_empty() {
        bail!("--search needs a contract: give --slo (e.g. --slo ttft_p99:500,tpot_p99:50)");
    }
    let s = &args.search;
    if !(s.search_tolerance > 0.0 && s.search_tolerance < 1.0) {
        bail!(
            "--search-tolerance {}: expected a fraction between 0 and 1 (e.g. 0.05)",
            s.search_tolerance
        );
    }
    if s.search_max_points < 2 {
        bail!("--search-max-points must be at least 2");
    }
    let values: Vec<f64> = match &sweep.variable {
        Variable::Rates(v) => v.clone(),
        Variable::Concurrency(v) => v.iter().map(|&c| c as f64).collect(),
        Variable::AutoRates => bail!(
            "--search needs --request-rate LOW,HIGH (or --max-concurrency LOW,HIGH): the first load and the highest allowed"
        ),
    };
    let (Some(&lo), Some(&hi)) = (values.first(), values.last()) else {
        bail!("--search needs two loads to search between");
    };
    if !lo.is_finite() || !hi.is_finite() || lo <= 0.0 {
        bail!("--search searches finite, positive loads: {lo}..{hi}");
    }
    Ok((lo, hi))
}

fn interval(v: &MeanInterval) -> [f64; 3] {
    [v.mean, v.low, v.high]
}

/// Judges one load: the SLO bounds over its repeats, the client's pace, and the
/// over-saturation test (live, when a run stopped itself early, else on each run's records);
/// `point` of the entry is left 0.
fn judge(sweep: &Sweep, dir: &Path, rep: &Repeated, point: &SweepPoint) -> SearchPointEntry {
    let (runs, summaries) = (&rep.runs, &rep.summaries);
    let mut broken = Vec::new();
    let mut values = Vec::new();
    for slo in &sweep.slos {
        let per_run: Vec<f64> = summaries
            .iter()
            .filter_map(|s| user_latency(s, slo.stat()))
            .collect();
        match MeanInterval::of(&per_run) {
            Some(m) => {
                values.push((slo.to_string(), interval(&m)));
                if !slo.admits(m.high) {
                    broken.push(if m.n > 1 {
                        format!(
                            "{} {:.1} ms (95 % upper bound {:.1} ms over {} runs) breaks {slo}",
                            slo.stat(),
                            m.mean,
                            m.high,
                            m.n
                        )
                    } else {
                        format!("{} {:.1} ms breaks {slo}", slo.stat(), m.mean)
                    });
                }
            }
            None => broken.push(format!("{} was not measured", slo.stat())),
        }
    }
    let stopped = rep.stopped_early.as_ref();
    let over = match stopped {
        Some(s) => Some(format!(
            "{}; the test fired {:.1} s into the {:.1} s schedule",
            s.reason, s.at_s, s.span_s
        )),
        None => runs.iter().find_map(|rel| {
            let run = crate::experiment::load_run(&dir.join(rel), rel).ok()?;
            let o = SaturationTest::default().check(&run.records)?;
            Some(format!(
                "{}; the test fired {:.1} s into the {:.1} s schedule",
                o.reason, o.at_s, o.span_s
            ))
        }),
    };
    match (&over, stopped) {
        (Some(o), Some(_)) if rep.skipped > 0 => broken.push(format!(
            "stopped early: {o}; {} more runs skipped",
            rep.skipped
        )),
        (Some(o), Some(_)) => broken.push(format!("stopped early: {o}")),
        (Some(o), None) => broken.push(o.clone()),
        (None, _) => {}
    }
    if point.overloaded {
        broken.push("the client could not keep up with the offered load".to_owned());
    }
    let passed = broken.is_empty();
    SearchPointEntry {
        value: point.offered_load,
        point: 0,
        passed,
        reason: (!passed).then(|| broken.join("; ")),
        over_saturated: over,
        slo_values: values,
        stopped_early: stopped.map(StoppedEarly::describe),
        skipped_runs: rep.skipped,
    }
}

/// Runs the search and writes the experiment (kind "sweep", its points in load order, the
/// search in `sweep.search`).
pub async fn run_search(
    sweep: &Sweep,
    args: &SweepArgs,
    plan: &MatrixPlan,
    bench: &Bench,
    command_line: &[String],
    stop: &StopSignal,
) -> Result<(PathBuf, ExitCode)> {
    let (start, cap) = check(sweep, args)?;
    let kind = sweep.variable.kind();
    let base = bench.base(&sweep.common, &sweep.row.flags)?;
    let ctx = Ctx {
        args,
        bench,
        base: &base,
    };
    sweep.plan(&ctx, &sweep.row, 0, 0, Path::new("."))?;
    let dir = create_experiment(sweep, args, plan, bench, command_line)?;

    let mut search = Search::new(kind, start, cap, args.search.search_tolerance);
    let mut measured: Vec<Measured> = Vec::new();
    let mut stop_reason = String::new();
    let mut exit = ExitCode::SUCCESS;
    while let Some(value) = search.next() {
        if stop.dispatch_stopped() {
            stop_reason = "interrupted".to_owned();
            break;
        }
        if measured.len() >= args.search.search_max_points {
            stop_reason = format!(
                "--search-max-points {} reached before the bracket closed",
                args.search.search_max_points
            );
            break;
        }
        let i = measured.len();
        let mut row = sweep.row.clone();
        match &sweep.variable {
            Variable::Concurrency(_) => row.max_concurrency = Some(value as usize),
            _ => row.request_rate = Rate(value),
        }
        eprintln!("Search point {i}: {}", kind.describe(value));
        let began = std::time::Instant::now();
        let rep = run_repeated(
            bench,
            &dir,
            &dir.join("points").join(i.to_string()),
            args.repeat,
            |k, run_dir: &Path| {
                let (mut plan, mut command_line) = sweep.plan(&ctx, &row, i, k, run_dir)?;
                if !args.search.search_full_runs {
                    plan.stop_when_saturated = true;
                    command_line.push("--stop-when-saturated".to_owned());
                }
                Ok((plan, command_line))
            },
            stop,
            &format!("point {i}"),
        )
        .await
        .with_context(|| format!("search point {i} ({})", kind.describe(value)))?;
        if rep.all_failed_run {
            exit = ExitCode::from(2);
        }
        if rep.summaries.is_empty() {
            break;
        }
        let validity: Vec<_> = rep.runs.iter().map(|r| run_validity(&dir, r)).collect();
        let point = sweep_point(value, &rep.summaries, &validity, &sweep.stats());
        let verdict = judge(sweep, &dir, &rep, &point);
        crate::matrix::repeat::announce(crate::matrix::repeat::completion_line(
            &format!("Search point {i}: {}", kind.describe(value)),
            &rep.summaries,
            &crate::sweep_cmd::point_verdict(&validity),
            began.elapsed(),
        ));
        eprintln!(
            "  {}: {}",
            kind.describe(value),
            match &verdict.reason {
                None => "meets the contract".to_owned(),
                Some(r) => format!("fails: {r}"),
            }
        );
        search.record(value, verdict.passed);
        measured.push(Measured {
            value,
            entry: PointEntry {
                value,
                runs: rep.runs.clone(),
                repeat_summary: rep.repeat_summary.clone(),
            },
            summaries: rep.summaries,
            point,
            verdict,
        });
    }

    // The report reads the points in load order; the search keeps its own order.
    let mut order: Vec<usize> = (0..measured.len()).collect();
    order.sort_by(|&a, &b| measured[a].value.total_cmp(&measured[b].value));
    let mut tried: Vec<SearchPointEntry> = measured.iter().map(|m| m.verdict.clone()).collect();
    for (rank, &i) in order.iter().enumerate() {
        tried[i].point = rank;
    }
    let points: Vec<SweepPoint> = order.iter().map(|&i| measured[i].point.clone()).collect();
    let entries: Vec<PointEntry> = order.iter().map(|&i| measured[i].entry.clone()).collect();

    let (answer, first_failing) = search.bracket();
    let at_answer = answer.and_then(|a| measured.iter().find(|m| m.value == a));
    let throughput = at_answer.and_then(|m| {
        MeanInterval::of(
            &m.summaries
                .iter()
                .map(|s| s.output_throughput)
                .collect::<Vec<_>>(),
        )
    });
    let headline = headline(sweep, kind, &search, answer, first_failing, throughput);
    let gpus = args.search.gpus;

    // Loads whose runs all stopped early before a request completed measured nothing to
    // draw: with only those, there is no frontier.
    let analysis = if points.is_empty() || tried.iter().all(|t| t.slo_values.is_empty()) {
        None
    } else {
        Some(analyze_sweep(&points, sweep.stat, &sweep.slos, kind)?)
    };
    let quick = args.scale == Scale::Quick;
    let mut notes: Vec<String> = Vec::new();
    if quick {
        notes.push(
            "Quick run: each point sent a tenth of its requests; percentiles are rough.".to_owned(),
        );
    }
    for t in &tried {
        match (&t.stopped_early, &t.over_saturated) {
            (Some(s), _) if t.skipped_runs > 0 => notes.push(format!(
                "{}: {s}; {} more runs skipped",
                kind.describe(t.value),
                t.skipped_runs
            )),
            (Some(s), _) => notes.push(format!("{}: {s}", kind.describe(t.value))),
            (None, Some(o)) => notes.push(format!("{}: {o}", kind.describe(t.value))),
            (None, None) => {}
        }
    }
    let title = args.title.clone().unwrap_or_else(|| {
        format!(
            "Operating-point search on row {} ({})",
            sweep.row.id,
            sweep.variable.name()
        )
    });
    let entry = SweepEntry {
        stopped_early: !stop_reason.is_empty(),
        stop_reason: stop_reason.clone(),
        best_under_slo: answer.and_then(|a| points.iter().position(|p| p.offered_load == a)),
        headline: Some(headline.clone()),
        search: Some(SearchEntry {
            tolerance: args.search.search_tolerance,
            start,
            cap,
            tried: tried.clone(),
            answer,
            first_failing,
            throughput: throughput.as_ref().map(interval),
            headline: headline.clone(),
        }),
        gpus,
        ..sweep_entry(sweep, args, entries, analysis.as_ref())
    };
    let experiment = sweep_experiment(sweep, args, quick, title, entry, notes.clone());
    layout::write_json(&dir.join("experiment.json"), &experiment)?;
    crate::results_index::experiment_written(&dir);

    println!(
        "\nOperating-point search on row {} over {} ({}; latencies in ms{})",
        sweep.row.id,
        sweep.variable.name(),
        sweep.row.shape(),
        if quick { ", QUICK RUN" } else { "" }
    );
    print!("{}", search_table(kind, &tried, &measured));
    if !stop_reason.is_empty() {
        println!("Stopped: {stop_reason}");
    }
    for n in &notes {
        println!("Note: {n}");
    }
    println!(
        "\n{} loads measured ({} runs).\n{headline}",
        measured.len(),
        measured.len() * args.repeat
    );
    render::render_or_warn(&dir);
    Ok((dir, exit))
}

fn headline(
    sweep: &Sweep,
    kind: LoadKind,
    search: &Search,
    answer: Option<f64>,
    first_failing: Option<f64>,
    throughput: Option<MeanInterval>,
) -> String {
    let contract = sweep
        .slos
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" and ");
    match (answer, throughput) {
        (Some(a), Some(t)) => {
            let ci = if t.n > 1 {
                format!(
                    " (95 % CI {:.0}–{:.0} over {} runs)",
                    t.low.max(0.0),
                    t.high,
                    t.n
                )
            } else {
                " (one run: no interval)".to_owned()
            };
            let limit = match first_failing {
                Some(f) => format!("; it breaks by {}", kind.describe(f)),
                None if search.capped() => {
                    " (the highest load searched; the limit is higher)".to_owned()
                }
                None => String::new(),
            };
            format!(
                "{:.0} output tok/s{ci} at {contract}: {}{limit}",
                t.mean,
                kind.describe(a)
            )
        }
        _ => match first_failing {
            Some(f) => format!(
                "No load searched meets {contract}: even {} fails",
                kind.describe(f)
            ),
            None => format!("The search measured no load against {contract}"),
        },
    }
}

/// The loads in the order measured, with each SLO's percentile (mean [95 % interval]) and
/// the verdict.
fn search_table(kind: LoadKind, tried: &[SearchPointEntry], measured: &[Measured]) -> String {
    let mut out = String::new();
    for (i, (t, m)) in tried.iter().zip(measured).enumerate() {
        let slos: Vec<String> = t
            .slo_values
            .iter()
            .map(|(name, [mean, lo, hi])| {
                let stat = name.split(" <").next().unwrap_or(name);
                if (hi - lo).abs() > 0.0 {
                    format!("{stat} {mean:.1} [{lo:.1}, {hi:.1}]")
                } else {
                    format!("{stat} {mean:.1}")
                }
            })
            .collect();
        out.push_str(&format!(
            "{i:>2}  {:<22} {:>9.1} tok/s  {}  {}\n",
            kind.describe(t.value),
            m.point.throughput,
            slos.join("  "),
            if t.passed {
                "meets".to_owned()
            } else if t.stopped_early.is_some() {
                "FAILS (over-saturated, stopped early)".to_owned()
            } else if t.over_saturated.is_some() {
                "FAILS (over-saturated)".to_owned()
            } else {
                "FAILS".to_owned()
            }
        ));
    }
    out
}
