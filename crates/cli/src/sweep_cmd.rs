//! `servebench sweep`: one workload row measured at a series of request rates or
//! concurrencies, each point a full run; the throughput–latency frontier, its knee, and the
//! highest point that meets every SLO, in one experiment directory (kind "sweep").

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use servebench_analysis::frontier::{
    analyze_sweep, parse_slos, LatencyStat, LoadKind, Slo, SloStat, SweepAnalysis, SweepPoint,
};
use servebench_loadgen::StopSignal;
use servebench_metrics::result::RunResult;
use servebench_metrics::validity::RunValidity;

use crate::matrix::bench::{Bench, TargetArgs};
use crate::matrix::frontier::{extra_percentiles, past_saturation, render_table, sweep_point};
use crate::matrix::layout::{self, ExperimentFile, PointEntry, ProbeEntry, RowEntry, SweepEntry};
use crate::matrix::plan::{run_seed, MatrixPlan, PrefixReuse, Rate, RowSpec, Scale};
use crate::matrix::repeat::{completion_line, run_repeated};
use crate::matrix::{defaults, merge_target, render, target_args};
use crate::run::overrides::{Override, RunBase};
use crate::run::plan::RunPlan;

/// Arguments of `servebench sweep`.
#[derive(Debug, Clone, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SweepArgs {
    /// Sweep this row of the default matrix (or of --matrix FILE), e.g. D. Row flags below
    /// override its fields.
    #[arg(long, value_name = "ID")]
    pub row: Option<String>,
    /// The matrix file --row is taken from [default: the default matrix].
    #[arg(long, value_name = "FILE")]
    pub matrix: Option<PathBuf>,
    /// Request rates to sweep (1,2,4,8), or `auto` (find the saturation rate with a
    /// closed-loop probe and space points up to it); a single value holds the rate while
    /// --max-concurrency is swept.
    #[arg(long, value_name = "LIST|auto")]
    pub request_rate: Option<String>,
    /// Concurrencies to sweep (1,2,4,8); a single value (or `none`) sets the row's cap while
    /// --request-rate is swept.
    #[arg(long, value_name = "LIST")]
    pub max_concurrency: Option<String>,
    /// The latency percentile of the frontier and the saturation test.
    #[arg(long, default_value = "ttft:p99", value_name = "METRIC:pNN")]
    pub latency_metric: String,
    /// The latency contract: the headline names the highest measured point meeting every SLO
    /// (e.g. --slo ttft:p99:500 tpot:p95:40).
    #[arg(long, num_args = 1.., value_name = "METRIC:pNN:MS")]
    pub slo: Vec<String>,
    /// Points below the saturation rate for `--request-rate auto` (two more probe past it).
    #[arg(long, default_value_t = 6, value_name = "N")]
    pub points: usize,
    /// Concurrency cap of the `auto` probe [default: the row's, else 64].
    #[arg(long, value_name = "N")]
    pub probe_concurrency: Option<usize>,
    /// Measure every point, even past saturation.
    #[arg(long)]
    pub no_early_stop: bool,

    /// Prompt tokens (shared prefix included) [default: 1024, or the row's].
    #[arg(long, help_heading = "Row")]
    pub input_len: Option<u64>,
    /// Output tokens [default: 128, or the row's].
    #[arg(long, help_heading = "Row")]
    pub output_len: Option<u64>,
    /// Requests per point [default: 200, or the row's].
    #[arg(long, help_heading = "Row")]
    pub num_prompts: Option<usize>,
    /// Leading prompt tokens that are a prefix.
    #[arg(long, help_heading = "Row")]
    pub prefix_len: Option<u64>,
    /// Whether the prefix is shared and primed (`warm`) or fresh per request (`cold`).
    #[arg(long, value_enum, help_heading = "Row")]
    pub prefix: Option<PrefixReuse>,

    /// `quick` sends a tenth of the requests per point.
    #[arg(long, value_enum, default_value = "full")]
    pub scale: Scale,
    /// Measure each point N times (mean ± std, per-run values kept).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub repeat: usize,
    /// Warm-up requests before each measured run.
    #[arg(long, default_value_t = 2, value_name = "N")]
    pub num_warmups: usize,
    /// Base seed; each run derives its own.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Root of the results: <DIR>/<model>/<hardware>/<timestamp>/.
    #[arg(long, default_value = "results", value_name = "DIR")]
    pub results_dir: PathBuf,
    /// Report title.
    #[arg(long)]
    pub title: Option<String>,
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub search: crate::sweep_search::SearchArgs,
    /// `servebench run` flags added to every point, after `--`.
    #[arg(last = true, value_name = "RUN FLAGS")]
    pub run_flags: Vec<String>,
    #[command(flatten)]
    pub server: crate::server_proc::managed::ServerCmdArgs,
    #[command(subcommand)]
    pub serve: Option<SweepCommand>,
}

/// `servebench sweep serve`: the server's own parameters swept, one server per combination.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum SweepCommand {
    /// Sweep server parameters × benchmark parameters (flags and files of `vllm bench sweep
    /// serve`): a server started, checked ready, measured and stopped per combination.
    Serve(Box<crate::sweep_serve::SweepServeArgs>),
}

/// What is swept.
#[derive(Debug, Clone, PartialEq)]
pub enum Variable {
    /// These request rates (req/s).
    Rates(Vec<f64>),
    /// Rates found by a closed-loop probe.
    AutoRates,
    /// These concurrency caps.
    Concurrency(Vec<usize>),
}

impl Variable {
    pub(crate) fn kind(&self) -> LoadKind {
        match self {
            Variable::Concurrency(_) => LoadKind::Concurrency,
            _ => LoadKind::RequestRate,
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Variable::Concurrency(_) => "max_concurrency",
            _ => "request_rate",
        }
    }
}

fn list(text: &str) -> Vec<&str> {
    text.split([',', ' '])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// Which flag is swept, and what the other sets on the row.
pub fn parse_variable(args: &SweepArgs, row: &mut RowSpec) -> Result<Variable> {
    let rates = args.request_rate.as_deref().map(list).unwrap_or_default();
    let concs = args
        .max_concurrency
        .as_deref()
        .map(list)
        .unwrap_or_default();
    let sweep_rates = rates.len() > 1
        || rates
            .first()
            .is_some_and(|r| r.eq_ignore_ascii_case("auto"));
    let sweep_concs = concs.len() > 1;
    if sweep_rates && sweep_concs {
        bail!("sweep one variable at a time: --request-rate and --max-concurrency are both lists");
    }
    if !sweep_rates && !sweep_concs {
        bail!("nothing to sweep: give --request-rate a list (1,2,4,8) or auto, or --max-concurrency a list (1,4,16,64)");
    }
    if sweep_rates {
        if let Some(c) = concs.first() {
            row.max_concurrency = match c.to_ascii_lowercase().as_str() {
                "none" | "unlimited" => None,
                n => Some(n.parse().ok().filter(|&n: &usize| n > 0).with_context(|| {
                    format!("--max-concurrency {n:?}: expected a positive integer or none")
                })?),
            };
        }
        if rates.len() == 1 {
            return Ok(Variable::AutoRates);
        }
        let mut v: Vec<f64> = rates
            .iter()
            .map(|r| r.parse::<Rate>().map(|r| r.0).map_err(anyhow::Error::msg))
            .collect::<Result<_>>()?;
        v.sort_by(f64::total_cmp);
        v.dedup();
        return Ok(Variable::Rates(v));
    }
    if let Some(r) = rates.first() {
        row.request_rate = r.parse::<Rate>().map_err(anyhow::Error::msg)?;
    }
    let mut v: Vec<usize> = concs
        .iter()
        .map(|c| {
            c.parse()
                .ok()
                .filter(|&n: &usize| n > 0)
                .with_context(|| format!("--max-concurrency {c:?}: expected positive integers"))
        })
        .collect::<Result<_>>()?;
    v.sort_unstable();
    v.dedup();
    Ok(Variable::Concurrency(v))
}

/// The row to sweep: `--row` from the matrix, with the row flags over it.
pub fn sweep_row(args: &SweepArgs) -> Result<(RowSpec, MatrixPlan)> {
    let plan = match &args.matrix {
        Some(p) => MatrixPlan::load(p)?,
        None => defaults::default_matrix(None),
    };
    let mut row = match &args.row {
        Some(id) => plan
            .rows
            .iter()
            .find(|r| r.id.eq_ignore_ascii_case(id))
            .cloned()
            .with_context(|| {
                format!(
                    "--row {id}: no such row (rows: {})",
                    plan.rows
                        .iter()
                        .map(|r| r.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?,
        None => RowSpec {
            id: "S".to_owned(),
            name: "sweep".to_owned(),
            hypothesis: String::new(),
            input_len: 1024,
            output_len: 128,
            max_concurrency: None,
            request_rate: Rate(f64::INFINITY),
            num_prompts: 200,
            prefix_len: 0,
            prefix: PrefixReuse::Cold,
            trace: None,
            flags: Vec::new(),
        },
    };
    if row.trace.is_some() {
        bail!(
            "row {} replays a trace; sweep a synthetic row instead",
            row.id
        );
    }
    if let Some(v) = args.input_len {
        row.input_len = v;
    }
    if let Some(v) = args.output_len {
        row.output_len = v;
    }
    if let Some(v) = args.num_prompts {
        row.num_prompts = v;
    }
    if let Some(v) = args.prefix_len {
        row.prefix_len = v;
    }
    if let Some(v) = args.prefix {
        row.prefix = v;
    }
    Ok((row, plan))
}

/// Everything a sweep run needs, resolved from the flags.
pub(crate) struct Sweep {
    pub(crate) row: RowSpec,
    pub(crate) variable: Variable,
    pub(crate) stat: LatencyStat,
    pub(crate) slos: Vec<Slo>,
    pub(crate) slo_text: Vec<String>,
    pub(crate) common: Vec<String>,
}

impl Sweep {
    /// Stats every point must report: the frontier's and the SLOs'.
    pub(crate) fn stats(&self) -> Vec<LatencyStat> {
        let mut s = vec![self.stat];
        s.extend(self.slos.iter().map(SloStat::stat));
        s
    }

    /// What one run of the row, with `row` adjusted for the point, sets on the user's
    /// flags: the row's workload, then the run's percentiles, seed, warm-ups and label.
    pub(crate) fn overrides(
        &self,
        row: &RowSpec,
        args: &SweepArgs,
        index: usize,
        repeat: usize,
    ) -> (Vec<Override>, Vec<Override>) {
        let n = args.scale.prompts(row.num_prompts, row.max_concurrency);
        let workload = row.workload(n);
        let mut run = Vec::new();
        if let Some(p) = extra_percentiles(&self.stats()) {
            run.push(Override::MetricPercentiles(p));
        }
        let mut warmups = args.scale.warmups(args.num_warmups);
        // A warm row's warm-up doubles as priming: its requests carry the shared prefix.
        if row.prefix == PrefixReuse::Warm {
            warmups = warmups.max(1);
        }
        run.extend([
            Override::Seed(run_seed(args.seed, index, repeat)),
            Override::NumWarmups(warmups),
            Override::Label(format!("sweep-{}", row.id)),
        ]);
        (workload, run)
    }

    /// The plan and recorded command line of one run.
    pub(crate) fn plan(
        &self,
        ctx: &Ctx<'_>,
        row: &RowSpec,
        index: usize,
        repeat: usize,
        dir: &Path,
    ) -> Result<(RunPlan, Vec<String>)> {
        let (workload, run) = self.overrides(row, ctx.args, index, repeat);
        ctx.bench.plan(ctx.base, &workload, &run, dir)
    }
}

/// What every run of a sweep shares: its flags, target and the user's flags parsed.
pub(crate) struct Ctx<'a> {
    pub(crate) args: &'a SweepArgs,
    pub(crate) bench: &'a Bench,
    pub(crate) base: &'a RunBase,
}

/// `servebench sweep`.
pub async fn sweep(mut args: SweepArgs, command_line: Vec<String>) -> Result<ExitCode> {
    if let Some(SweepCommand::Serve(serve)) = args.serve {
        return crate::sweep_serve::sweep_serve(*serve, command_line).await;
    }
    let server =
        crate::server_proc::managed::start(&args.server, &mut args.target, &args.results_dir)
            .await?;
    let (sweep, plan) = sweep_plan(&args)?;

    let mut target = target_args(&plan, args.target.api_key.clone());
    target.tls = args.target.tls.clone();
    let bench = Bench::start(&target).await?;
    let stop = crate::run::interrupt_on_ctrl_c();
    let result = if args.search.search {
        crate::sweep_search::run_search(&sweep, &args, &plan, &bench, &command_line, &stop).await
    } else {
        run_sweep(&sweep, &args, &plan, &bench, &command_line, &stop).await
    };
    bench.shutdown().await;
    crate::server_proc::managed::stop(server).await?;
    let (dir, exit) = result?;
    println!("experiment: {}", dir.display());
    // Interrupted (Ctrl-C, SIGTERM) or stopped by a failing records file: the same exit
    // codes as `run`, so a script never mistakes a cut-short experiment for a finished one.
    Ok(crate::run::final_exit(exit))
}

/// What the sweep's flags describe, checked: the row, the swept variable, the statistic and
/// the SLOs, and the matrix plan with the command line's target over it.
pub(crate) fn sweep_plan(args: &SweepArgs) -> Result<(Sweep, MatrixPlan)> {
    if args.repeat == 0 {
        bail!("--repeat must be at least 1");
    }
    let (mut row, mut plan) = sweep_row(args)?;
    let variable = parse_variable(args, &mut row)?;
    row.validate()?;
    let stat = crate::matrix::frontier::parse_stat(&args.latency_metric)?;
    let slo_text: Vec<String> = args
        .slo
        .iter()
        .flat_map(|s| list(s))
        .map(str::to_owned)
        .collect();
    let slos = if slo_text.is_empty() {
        Vec::new()
    } else {
        parse_slos(&slo_text.join(" "))?
    };
    merge_target(&mut plan.target, &args.target);
    let mut common = plan.defaults.flags.clone();
    common.extend(args.run_flags.iter().cloned());
    let sweep = Sweep {
        row,
        variable,
        stat,
        slos,
        slo_text,
        common,
    };
    Ok((sweep, plan))
}

/// A sweep's experiment directory, created and announced, with its `plan.toml` and
/// environment written before any run.
pub(crate) fn create_experiment(
    sweep: &Sweep,
    args: &SweepArgs,
    plan: &MatrixPlan,
    bench: &Bench,
    command_line: &[String],
) -> Result<PathBuf> {
    let dir = layout::create_experiment_dir(&args.results_dir, bench)?;
    eprintln!("Experiment directory: {}", dir.display());
    std::fs::write(
        dir.join("plan.toml"),
        plan_toml(sweep, args, plan, command_line)?,
    )
    .context("writing plan.toml")?;
    layout::write_environment(&dir, bench, command_line)?;
    Ok(dir)
}

/// The plan.toml of a sweep: the swept row (at its first point) as a one-row matrix, and the
/// sweep itself as a comment, so the row re-runs with `servebench matrix --matrix plan.toml`.
fn plan_toml(
    sweep: &Sweep,
    args: &SweepArgs,
    plan: &MatrixPlan,
    command_line: &[String],
) -> Result<String> {
    let mut p = plan.clone();
    p.title = args
        .title
        .clone()
        .unwrap_or_else(|| format!("Sweep of row {}", sweep.row.id));
    p.rows = vec![sweep.row.clone()];
    p.defaults.flags = sweep.common.clone();
    p.defaults.seed = args.seed;
    p.defaults.num_warmups = args.num_warmups;
    p.defaults.repeat = args.repeat;
    p.defaults.scale = args.scale;
    let sweep_cmd = crate::redact_argv(command_line).join(" ");
    Ok(format!("# Sweep: {sweep_cmd}\n{}", p.to_toml()?))
}

async fn run_sweep(
    sweep: &Sweep,
    args: &SweepArgs,
    plan: &MatrixPlan,
    bench: &Bench,
    command_line: &[String],
    stop: &StopSignal,
) -> Result<(PathBuf, ExitCode)> {
    let kind = sweep.variable.kind();
    // Flags are checked before any run.
    let base = bench.base(&sweep.common, &sweep.row.flags)?;
    let ctx = Ctx {
        args,
        bench,
        base: &base,
    };
    sweep.plan(&ctx, &sweep.row, 0, 0, Path::new("."))?;

    let dir = create_experiment(sweep, args, plan, bench, command_line)?;

    let mut notes = Vec::new();
    let quick = args.scale == Scale::Quick;
    if quick {
        notes.push(
            "Quick run: each point sent a tenth of its requests; percentiles are rough.".to_owned(),
        );
    }
    let mut probe = None;
    let values: Vec<f64> = match &sweep.variable {
        Variable::Rates(v) => v.clone(),
        Variable::Concurrency(v) => v.iter().map(|&c| c as f64).collect(),
        Variable::AutoRates => {
            let (entry, rate) = run_probe(sweep, &ctx, &dir, stop).await?;
            probe = Some(entry);
            auto_rates(rate, args.points)
        }
    };

    let mut points: Vec<SweepPoint> = Vec::new();
    let mut entries: Vec<PointEntry> = Vec::new();
    let mut summaries = Vec::new();
    let mut verdicts: Vec<String> = Vec::new();
    let mut causes: Vec<Option<OverloadCause>> = Vec::new();
    let mut stop_reason = String::new();
    let mut exit = ExitCode::SUCCESS;
    for (i, &value) in values.iter().enumerate() {
        if stop.dispatch_stopped() {
            stop_reason = "interrupted".to_owned();
            break;
        }
        let mut row = sweep.row.clone();
        match &sweep.variable {
            Variable::Concurrency(_) => row.max_concurrency = Some(value as usize),
            _ => row.request_rate = Rate(value),
        }
        eprintln!(
            "Point {i}: {} ({} requests)",
            kind.describe(value),
            args.scale.prompts(row.num_prompts, row.max_concurrency)
        );
        let base = dir.join("points").join(i.to_string());
        let began = std::time::Instant::now();
        let rep = run_repeated(
            bench,
            &dir,
            &base,
            args.repeat,
            |k, run_dir: &Path| sweep.plan(&ctx, &row, i, k, run_dir),
            stop,
            &format!("point {i}"),
        )
        .await
        .with_context(|| format!("sweep point {i} ({})", kind.describe(value)))?;
        if rep.all_failed_run {
            exit = ExitCode::from(2);
        }
        if rep.summaries.is_empty() {
            break;
        }
        let validity: Vec<Option<RunValidity>> =
            rep.runs.iter().map(|r| run_validity(&dir, r)).collect();
        causes.push(overload_cause(&validity, row.max_concurrency));
        let verdict = point_verdict(&validity);
        eprintln!(
            "{}",
            completion_line(
                &format!("Point {i}: {}", kind.describe(value)),
                &rep.summaries,
                &verdict,
                began.elapsed()
            )
        );
        verdicts.push(verdict);
        points.push(sweep_point(
            value,
            &rep.summaries,
            &validity,
            &sweep.stats(),
        ));
        entries.push(PointEntry {
            value,
            runs: rep.runs.clone(),
            repeat_summary: rep.repeat_summary.clone(),
        });
        summaries.push(rep.summaries);
        if !args.no_early_stop {
            if let Some(why) = past_saturation(&points, sweep.stat, kind) {
                if i + 1 < values.len() {
                    stop_reason = format!(
                        "{why}; the {} heavier point(s) were skipped",
                        values.len() - i - 1
                    );
                }
                break;
            }
        }
    }
    let stopped_early = !stop_reason.is_empty();

    let analysis = if points.is_empty() {
        None
    } else {
        Some(analyze_sweep(&points, sweep.stat, &sweep.slos, kind)?)
    };
    let headline = analysis
        .as_ref()
        .and_then(|a| a.slo.as_ref())
        .map(|o| o.headline.clone());
    let title = args
        .title
        .clone()
        .unwrap_or_else(|| format!("Sweep of row {} ({})", sweep.row.id, sweep.variable.name()));
    let entry = SweepEntry {
        stopped_early,
        stop_reason: stop_reason.clone(),
        probe,
        ..sweep_entry(sweep, args, entries, analysis.as_ref())
    };
    let experiment = sweep_experiment(sweep, args, quick, title, entry, notes.clone());
    layout::write_json(&dir.join("experiment.json"), &experiment)?;

    println!(
        "\nSweep of row {} over {} ({}; latencies in ms{})",
        sweep.row.id,
        sweep.variable.name(),
        sweep.row.shape(),
        if quick { ", QUICK RUN" } else { "" }
    );
    if let Some(a) = &analysis {
        print!("{}", render_table(&points, a, &sweep.slos, kind, &verdicts));
        match a.knee {
            Some(k) => println!(
                "\nKnee: {} ({} output tok/s at {} {:.1} ms)",
                kind.describe(points[k.index].offered_load),
                points[k.index].throughput.round(),
                sweep.stat,
                points[k.index].latency(sweep.stat).unwrap_or(f64::NAN)
            ),
            None if points.iter().all(|p| p.overloaded) => {
                // A cap that bound every point sets the ceiling itself: name it.
                let capped = causes.iter().flatten().find_map(|c| match c {
                    OverloadCause::Cap(n) => Some(*n),
                    _ => None,
                });
                let ceiling = points
                    .iter()
                    .filter_map(|p| p.achieved_rate)
                    .reduce(f64::max);
                match (capped, ceiling) {
                    (Some(n), Some(r)) => println!(
                        "\nKnee: none (every point was overloaded: the concurrency cap of {n} carries about {r:.2} req/s at most; sweep rates below it, or raise the cap)"
                    ),
                    _ => println!("\nKnee: none (every point was overloaded: sweep lighter loads)"),
                }
            }
            None => {
                println!("\nKnee: none found (the curve has not bent yet: sweep heavier loads)")
            }
        }
    }
    // One line per cause (each cap its own), in the order the points first show it.
    let mut distinct: Vec<OverloadCause> = Vec::new();
    for c in points
        .iter()
        .zip(&causes)
        .filter(|(p, _)| p.overloaded)
        .filter_map(|(_, c)| *c)
    {
        if !distinct.contains(&c) {
            distinct.push(c);
        }
    }
    for cause in distinct {
        let named: Vec<String> = points
            .iter()
            .zip(&causes)
            .filter(|(p, c)| p.overloaded && **c == Some(cause))
            .map(|(p, _)| {
                let achieved = p
                    .achieved_rate
                    .map_or_else(String::new, |a| format!(" (achieved {a:.2} req/s)"));
                format!("{}{achieved}", kind.describe(p.offered_load))
            })
            .collect();
        let why = match cause {
            OverloadCause::Cap(cap) => format!(
                "The concurrency cap of {cap} (--max-concurrency, or the row's own) lets only the achieved rate through at these latencies, so requests waited for a free slot: the cap, not the server or the client, stopped these rates; raise it to offer them"
            ),
            OverloadCause::Server => "The server fell behind the arrivals (TTFT grew through each run): these rates are past its capacity".to_owned(),
            OverloadCause::Client => "The client could not send at these rates and requests waited in its queue".to_owned(),
        };
        println!(
            "\nOverloaded: {}. {why}; latencies above count from the intended send time, and no \
             overloaded point is an operating point, the knee or a capacity figure.",
            named.join(", ")
        );
    }
    if stopped_early {
        println!("Stopped early: {stop_reason}");
    }
    if let Some(h) = &headline {
        println!("\n{h}");
    }
    if args.repeat > 1 {
        let lines: Vec<crate::matrix::table::Line<'_>> = summaries
            .iter()
            .zip(&points)
            .enumerate()
            .map(|(i, (runs, p))| crate::matrix::table::Line {
                lead: vec![i.to_string(), kind.describe(p.offered_load)],
                runs,
            })
            .collect();
        println!("\nPer point across {} runs (mean ± std):", args.repeat);
        print!("{}", crate::matrix::table::render(&["#", "load"], &lines));
    }
    for n in &notes {
        println!("\nNote: {n}");
    }
    render::render_or_warn(&dir);
    Ok((dir, exit))
}

/// What made a point overloaded, so the message names what to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OverloadCause {
    /// The point's concurrency cap bound: requests waited for a free slot.
    Cap(usize),
    /// The client kept its schedule but the server fell behind the arrivals.
    Server,
    /// The client itself fell behind (late dispatch, no CPU).
    Client,
}

/// Why a point's runs were overloaded (`None` when none was): the server's backlog when a
/// run shows one, else the concurrency cap when the point had one, else the client.
fn overload_cause(validity: &[Option<RunValidity>], cap: Option<usize>) -> Option<OverloadCause> {
    let loads: Vec<_> = validity
        .iter()
        .flatten()
        .filter_map(|v| v.load)
        .filter(|l| l.overloaded)
        .collect();
    if loads.is_empty() {
        return None;
    }
    if loads.iter().any(|l| l.server.is_some_and(|b| b.behind)) {
        return Some(OverloadCause::Server);
    }
    Some(match cap {
        Some(n) => OverloadCause::Cap(n),
        None => OverloadCause::Client,
    })
}

/// The validity stored in a point's result file (`rel` to the experiment directory); `None`
/// when the file cannot be read back, which leaves the point unjudged rather than failing
/// the sweep.
pub(crate) fn run_validity(dir: &Path, rel: &str) -> Option<RunValidity> {
    let text = std::fs::read_to_string(dir.join(rel)).ok()?;
    serde_json::from_str::<RunResult>(&text).ok()?.validity
}

/// A point's verdict cell: its run's status, or the worst across repeats.
pub(crate) fn point_verdict(validity: &[Option<RunValidity>]) -> String {
    use servebench_metrics::VerdictStatus;
    let rank = |s: VerdictStatus| match s {
        VerdictStatus::Valid => 0,
        VerdictStatus::NotSteady => 1,
        VerdictStatus::NotEnoughData => 2,
    };
    validity
        .iter()
        .flatten()
        .max_by_key(|v| rank(v.verdict.status))
        .map_or_else(|| "-".to_owned(), |v| v.verdict.status.label().to_owned())
}

/// Rates for `--request-rate auto`: `n` evenly spaced up to the saturation rate, then 1.25×
/// and 1.5× of it to see the curve bend.
pub fn auto_rates(saturation_rate: f64, n: usize) -> Vec<f64> {
    let n = n.max(1);
    let mut v: Vec<f64> = (1..=n)
        .map(|k| round3(saturation_rate * k as f64 / n as f64))
        .collect();
    v.push(round3(saturation_rate * 1.25));
    v.push(round3(saturation_rate * 1.5));
    v.retain(|r| *r > 0.0);
    v.dedup();
    v
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// The seed slot of the probe, apart from every point's.
const PROBE_SEED_INDEX: usize = 999;

/// The closed-loop probe: unlimited arrivals under a concurrency cap; its request
/// throughput is the saturation rate.
async fn run_probe(
    sweep: &Sweep,
    ctx: &Ctx<'_>,
    dir: &Path,
    stop: &StopSignal,
) -> Result<(ProbeEntry, f64)> {
    let cap = ctx
        .args
        .probe_concurrency
        .or(sweep.row.max_concurrency)
        .unwrap_or(64);
    let mut row = sweep.row.clone();
    row.request_rate = Rate(f64::INFINITY);
    row.max_concurrency = Some(cap);
    // Enough requests that the cap stays full for most of the probe.
    row.num_prompts = row.num_prompts.max(4 * cap);
    eprintln!("Probe: unlimited rate at concurrency {cap} to find the saturation rate");
    let (mut plan, command_line) = sweep
        .plan(ctx, &row, PROBE_SEED_INDEX, 0, &dir.join("probe"))
        .context("the saturation probe")?;
    plan.report.progress_label = Some("probe".into());
    let outcome = ctx
        .bench
        .measure(&plan, command_line, stop)
        .await
        .context("the saturation probe")?;
    let rate = outcome.summary.request_throughput;
    if rate.is_nan() || rate <= 0.0 {
        bail!("the saturation probe completed no request; check the target");
    }
    eprintln!("Probe: {rate:.3} req/s sustained at concurrency {cap}");
    Ok((
        ProbeEntry {
            max_concurrency: cap,
            request_throughput: rate,
            run: layout::relative(dir, &outcome.native_path),
        },
        rate,
    ))
}

/// A sweep's `sweep` entry as its points and their analysis give it; callers set how the
/// sweep ended and what chose its points (a probe, a search).
pub(crate) fn sweep_entry(
    sweep: &Sweep,
    args: &SweepArgs,
    points: Vec<PointEntry>,
    analysis: Option<&SweepAnalysis>,
) -> SweepEntry {
    SweepEntry {
        row: sweep.row.id.clone(),
        variable: sweep.variable.name().to_owned(),
        slos: sweep.slo_text.clone(),
        latency_metric: args.latency_metric.clone(),
        points,
        stopped_early: false,
        stop_reason: String::new(),
        knee: analysis.and_then(|a| a.knee.map(|k| k.index)),
        frontier: analysis.map(|a| a.frontier.clone()).unwrap_or_default(),
        saturation: analysis.and_then(|a| a.saturation.map(|s| s.index)),
        best_under_slo: analysis.and_then(|a| a.slo.as_ref().and_then(|o| o.best)),
        headline: analysis
            .and_then(|a| a.slo.as_ref())
            .map(|o| o.headline.clone()),
        probe: None,
        search: None,
        gpus: args.search.gpus,
    }
}

/// The `experiment.json` of a sweep: its one row and its sweep entry.
pub(crate) fn sweep_experiment(
    sweep: &Sweep,
    args: &SweepArgs,
    quick: bool,
    title: String,
    entry: SweepEntry,
    notes: Vec<String>,
) -> ExperimentFile {
    ExperimentFile {
        schema: layout::EXPERIMENT_SCHEMA.to_owned(),
        kind: "sweep".to_owned(),
        quick,
        title,
        rows: vec![RowEntry {
            id: sweep.row.id.clone(),
            name: sweep.row.name.clone(),
            hypothesis: sweep.row.hypothesis.clone(),
            runs: Vec::new(),
            repeat_summary: None,
        }],
        sweep: Some(entry),
        repeat: args.repeat,
        notes,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct W {
        #[command(flatten)]
        a: SweepArgs,
    }

    fn parse(flags: &[&str]) -> (SweepArgs, RowSpec, Result<Variable>) {
        let mut argv = vec!["x"];
        argv.extend_from_slice(flags);
        let a = W::try_parse_from(argv).unwrap().a;
        let (mut row, _) = sweep_row(&a).unwrap();
        let v = parse_variable(&a, &mut row);
        (a, row, v)
    }

    #[test]
    fn one_list_is_swept_and_a_single_value_sets_the_row() {
        let (_, row, v) = parse(&[
            "--row",
            "D",
            "--request-rate",
            "4,1,2",
            "--max-concurrency",
            "none",
        ]);
        assert_eq!(v.unwrap(), Variable::Rates(vec![1.0, 2.0, 4.0]));
        assert_eq!(row.max_concurrency, None);
        let (_, row, v) = parse(&["--max-concurrency", "1,8,2", "--request-rate", "3"]);
        assert_eq!(v.unwrap(), Variable::Concurrency(vec![1, 2, 8]));
        assert_eq!(row.request_rate, Rate(3.0));
        let (_, _, v) = parse(&["--request-rate", "auto"]);
        assert_eq!(v.unwrap(), Variable::AutoRates);
        assert!(parse(&["--request-rate", "2"]).2.is_err());
        assert!(
            parse(&["--request-rate", "1,2", "--max-concurrency", "1,2"])
                .2
                .is_err()
        );
    }

    #[test]
    fn row_flags_override_the_chosen_row() {
        let (_, row, _) = parse(&["--row", "a", "--output-len", "64", "--request-rate", "1,2"]);
        assert_eq!(
            (row.id.as_str(), row.input_len, row.output_len),
            ("A", 256, 64)
        );
    }

    #[test]
    fn auto_rates_reach_past_saturation() {
        assert_eq!(auto_rates(8.0, 4), vec![2.0, 4.0, 6.0, 8.0, 10.0, 12.0]);
    }
}

/// Every flag of `servebench sweep` that takes a value, given generated hostile numbers: the
/// sweep's plan and its first run's plan end in a plan or a clear error, never a panic; the
/// swept values an accepted plan holds are usable (positive rates and caps) and a run never
/// asks for more requests than one run holds.
#[cfg(test)]
mod hostile_numbers {
    use super::*;
    use crate::run::overrides::RunBase;
    use crate::run::plan::hostile_numbers::{hostile, valued_flags_of};
    use crate::run::plan::MAX_RUN_REQUESTS;
    use clap::Parser;
    use proptest::prelude::*;

    fn sweep_args(flag: &str) -> Option<SweepArgs> {
        // The swept variable is given, so that every other flag is reached.
        match crate::Cli::try_parse_from(["servebench", "sweep", "--max-concurrency", "1,4", flag])
            .ok()?
            .command
        {
            crate::Command::Sweep(a) => Some(*a),
            _ => None,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn every_valued_flag_survives_hostile_numbers(
            which in any::<prop::sample::Index>(),
            value in hostile(),
        ) {
            let flags = valued_flags_of("sweep");
            prop_assume!(!flags.is_empty());
            let flag = format!("--{}={value}", flags[which.index(flags.len())]);
            let Some(args) = sweep_args(&flag) else { return Ok(()) };
            let Ok((sweep, _plan)) = sweep_plan(&args) else { return Ok(()) };
            match &sweep.variable {
                Variable::Rates(v) => prop_assert!(v.iter().all(|r| *r > 0.0 && !r.is_nan()), "{flag}: {v:?}"),
                Variable::Concurrency(v) => prop_assert!(v.iter().all(|c| *c > 0), "{flag}: {v:?}"),
                Variable::AutoRates => {}
            }
            let (workload, run) = sweep.overrides(&sweep.row, &args, 0, 0);
            let Ok(base) = RunBase::parse(&sweep.common, &sweep.row.flags) else { return Ok(()) };
            if let Ok((p, _)) = base.plan(&workload, &run, &std::env::temp_dir(), None) {
                prop_assert!(p.num_prompts <= MAX_RUN_REQUESTS, "{flag}: {}", p.num_prompts);
            }
        }
    }

    #[test]
    fn the_flags_are_found() {
        let flags = valued_flags_of("sweep");
        for f in [
            "request-rate",
            "max-concurrency",
            "input-len",
            "output-len",
            "num-prompts",
        ] {
            assert!(flags.iter().any(|x| x == f), "{f} in {flags:?}");
        }
    }
}
