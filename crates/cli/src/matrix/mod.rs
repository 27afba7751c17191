//! `servebench matrix`: run a workload matrix (a TOML file, or the default rows A–E, plus
//! F from a trace) against one target, each row with its own warm-up, seed and result files,
//! into one experiment directory.

pub mod bench;
pub mod defaults;
pub mod frontier;
pub mod layout;
pub mod plan;
pub mod render;
pub mod repeat;
pub mod table;
pub mod tls_flags;
pub mod trace_row;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use servebench_tokenizer::Tokenizer;

use self::bench::{Bench, TargetArgs};
use self::layout::{ExperimentFile, RowEntry, EXPERIMENT_SCHEMA};
use self::plan::{run_seed, MatrixPlan, RowSpec, Scale};
use self::repeat::{run_repeated, Repeated};
use crate::run::overrides::{Override, RunBase};

/// Arguments of `servebench matrix`.
#[derive(Debug, Clone, Args)]
pub struct MatrixArgs {
    /// The matrix (TOML: `[[row]]` tables; see examples/matrix.toml) [default: rows A–E].
    #[arg(long, value_name = "FILE")]
    pub matrix: Option<PathBuf>,
    /// Run only these rows (comma-separated ids, e.g. A,C).
    #[arg(long, value_delimiter = ',', value_name = "IDS")]
    pub rows: Vec<String>,
    /// `quick` sends a tenth of each row's requests for a fast, rough look [default: full,
    /// or the file's].
    #[arg(long, value_enum)]
    pub scale: Option<Scale>,
    /// Measure each row N times: figures as mean ± std with the per-run values.
    #[arg(long, value_name = "N")]
    pub repeat: Option<usize>,
    /// Warm-up requests before each measured run, outside the measured window [default: 2].
    #[arg(long, value_name = "N")]
    pub num_warmups: Option<usize>,
    /// Base seed; each run derives its own [default: 0].
    #[arg(long)]
    pub seed: Option<u64>,
    /// A production trace (Mooncake, Azure or BurstGPT) to replay as row F.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Root of the results: the experiment goes to <DIR>/<model>/<hardware>/<timestamp>/.
    #[arg(long, default_value = "results", value_name = "DIR")]
    pub results_dir: PathBuf,
    /// Report title [default: the file's, or "Default workload matrix"].
    #[arg(long)]
    pub title: Option<String>,
    /// Every completed answer of every row must match this regex (as `run --expect-regex`;
    /// a row's own checks go in its `flags`). Repeatable.
    #[arg(long, value_name = "RE", help_heading = "Answer checks")]
    pub expect_regex: Vec<String>,
    /// Every completed answer of every row must be JSON valid against this schema file (as
    /// `run --expect-json-schema`). Repeatable.
    #[arg(long, value_name = "FILE", help_heading = "Answer checks")]
    pub expect_json_schema: Vec<PathBuf>,
    #[command(flatten)]
    pub target: TargetArgs,
    /// `servebench run` flags added to every row, after `--` (e.g. -- --backend openai-chat).
    #[arg(last = true, value_name = "RUN FLAGS")]
    pub run_flags: Vec<String>,
    #[command(flatten)]
    pub server: crate::server_proc::managed::ServerCmdArgs,
}

/// The plan the flags and the file describe together (flags win), as saved in `plan.toml`.
pub fn effective_plan(args: &MatrixArgs) -> Result<MatrixPlan> {
    let mut plan = match &args.matrix {
        Some(path) => MatrixPlan::load(path)?,
        None => defaults::default_matrix(None),
    };
    if let Some(trace) = &args.trace {
        if plan.rows.iter().any(|r| r.id == "F") {
            bail!("--trace adds row F, but the matrix already has a row F");
        }
        let abs =
            std::path::absolute(trace).with_context(|| format!("--trace {}", trace.display()))?;
        let f = defaults::default_matrix(Some(&abs))
            .rows
            .pop()
            .context("the default matrix has a row F")?;
        plan.rows.push(f);
    }
    if let Some(t) = &args.title {
        plan.title = t.clone();
    }
    merge_target(&mut plan.target, &args.target);
    // Name the simulator explicitly so plan.toml still means the same one if the default changes.
    if plan.target.base_url.is_none() && plan.target.sim.is_none() {
        plan.target.sim = Some(crate::run::target::DEFAULT_SIM_SPEC.to_owned());
    }
    let d = &mut plan.defaults;
    if let Some(s) = args.scale {
        d.scale = s;
    }
    if let Some(r) = args.repeat {
        d.repeat = r;
    }
    if let Some(w) = args.num_warmups {
        d.num_warmups = w;
    }
    if let Some(s) = args.seed {
        d.seed = s;
    }
    for re in &args.expect_regex {
        d.flags.extend(["--expect-regex".to_owned(), re.clone()]);
    }
    // Absolute, so plan.toml re-runs from anywhere.
    for schema in &args.expect_json_schema {
        let abs = std::path::absolute(schema).unwrap_or_else(|_| schema.clone());
        d.flags
            .extend(["--expect-json-schema".to_owned(), abs.display().to_string()]);
    }
    d.flags.extend(args.run_flags.iter().cloned());
    if !args.rows.is_empty() {
        plan.select(&args.rows)?;
    }
    // Trace paths become absolute so plan.toml re-runs from anywhere.
    for r in &mut plan.rows {
        if let Some(t) = &r.trace {
            r.trace = Some(std::path::absolute(t).unwrap_or_else(|_| t.clone()));
        }
    }
    plan.validate()?;
    Ok(plan)
}

/// Command-line target flags over the file's `[target]`: a server given on the command line
/// replaces the file's simulator, and a simulator given there replaces the file's server.
pub fn merge_target(file: &mut plan::TargetTable, cli: &TargetArgs) {
    if cli.base_url.is_some() {
        file.base_url = cli.base_url.clone();
        file.sim = None;
        file.virtual_time = false;
    }
    if cli.sim.is_some() || cli.virtual_time {
        file.base_url = None;
    }
    if cli.sim.is_some() {
        file.sim = cli.sim.clone();
    }
    file.virtual_time |= cli.virtual_time;
    if cli.model.is_some() {
        file.model = cli.model.clone();
    }
    if cli.tokenizer.is_some() {
        file.tokenizer = cli.tokenizer.clone();
    }
}

/// The target of a plan, with the command line's API key.
pub fn target_args(plan: &MatrixPlan, api_key: Option<String>) -> TargetArgs {
    TargetArgs {
        base_url: plan.target.base_url.clone(),
        model: plan.target.model.clone(),
        api_key,
        sim: plan.target.sim.clone(),
        virtual_time: plan.target.virtual_time,
        tokenizer: plan.target.tokenizer.clone(),
        tls: Default::default(),
    }
}

/// `servebench matrix`.
pub async fn matrix(mut args: MatrixArgs, command_line: Vec<String>) -> Result<ExitCode> {
    let server =
        crate::server_proc::managed::start(&args.server, &mut args.target, &args.results_dir)
            .await?;
    let plan = effective_plan(&args)?;
    let mut target = target_args(&plan, args.target.api_key.clone());
    target.tls = args.target.tls.clone();
    let bench = Bench::start(&target).await?;
    let stop = crate::run::interrupt_on_ctrl_c();
    let result = run_matrix(&plan, &bench, &args.results_dir, &command_line, &stop).await;
    bench.shutdown().await;
    crate::server_proc::managed::stop(server).await?;
    let (dir, exit) = result?;
    println!("experiment: {}", dir.display());
    // Interrupted (Ctrl-C, SIGTERM) or stopped by a failing records file: the same exit
    // codes as `run`, so a script never mistakes a cut-short experiment for a finished one.
    Ok(crate::run::final_exit(exit))
}

/// Parses every row's flags and checks its plan before anything runs, so a typo in row E
/// does not surface after rows A–D have run.
fn row_bases(plan: &MatrixPlan, bench: &Bench) -> Result<Vec<RunBase>> {
    let mut bases = Vec::new();
    for (i, row) in plan.rows.iter().enumerate() {
        let base = bench.base(&plan.defaults.flags, &row.flags)?;
        let (workload, run) = row_overrides(plan, row, i, 0, None);
        bench
            .plan(&base, &workload, &run, Path::new("."))
            .with_context(|| format!("row {}", row.id))?;
        bases.push(base);
    }
    Ok(bases)
}

/// What run `repeat` of row `index` sets on the row's flags: the row's workload, then the
/// run's seed, warm-ups and label.
fn row_overrides(
    plan: &MatrixPlan,
    row: &RowSpec,
    index: usize,
    repeat: usize,
    trace: Option<&trace_row::TraceDataset>,
) -> (Vec<Override>, Vec<Override>) {
    let d = &plan.defaults;
    let n = d.scale.prompts(row.num_prompts, row.max_concurrency);
    let workload = match trace {
        Some(t) => {
            // Self-timed, the trace sets every arrival; the row's rate stays unset.
            let trace_row = row.clone();
            let mut w = vec![trace_row::dataset(t)];
            w.extend(trace_row.workload(t.requests));
            w
        }
        None => row.workload(n),
    };
    let mut warmups = d.scale.warmups(d.num_warmups);
    // A warm row's warm-up doubles as priming: its requests carry the shared prefix.
    if row.prefix == plan::PrefixReuse::Warm {
        warmups = warmups.max(1);
    }
    let run = vec![
        Override::Seed(run_seed(d.seed, index, repeat)),
        Override::NumWarmups(warmups),
        Override::Label(format!("row-{}", row.id)),
    ];
    (workload, run)
}

/// Runs every row of `plan` into a new experiment directory under `root`; returns the
/// directory and the exit code (2 when some run failed every request).
pub async fn run_matrix(
    plan: &MatrixPlan,
    bench: &Bench,
    root: &Path,
    command_line: &[String],
    stop: &servebench_loadgen::StopSignal,
) -> Result<(PathBuf, ExitCode)> {
    let bases = row_bases(plan, bench)?;
    let dir = layout::create_experiment_dir(root, bench)?;
    eprintln!("Experiment directory: {}", dir.display());
    std::fs::write(dir.join("plan.toml"), plan.to_toml()?).context("writing plan.toml")?;
    layout::write_environment(&dir, bench, command_line)?;

    let quick = plan.defaults.scale == Scale::Quick;
    let mut notes = Vec::new();
    if quick {
        notes.push(
            "Quick run: each row sent a tenth of its requests; percentiles are rough. Run without \
             --scale quick for the numbers to act on."
                .to_owned(),
        );
    }
    if bench.is_virtual() && plan.defaults.num_warmups > 0 {
        notes.push(
            "Virtual time: every run starts from a fresh simulated engine; its warm-up requests run \
             in the same virtual timeline before the measured window (priming warm prefixes)."
                .to_owned(),
        );
    }
    let mut rows_out: Vec<RowEntry> = Vec::new();
    let mut results: Vec<(usize, Repeated)> = Vec::new();
    let mut exit = ExitCode::SUCCESS;
    let tokenizer = match &plan.target.tokenizer {
        Some(spec) => Tokenizer::load(spec).with_context(|| format!("--tokenizer {spec}"))?,
        None => Tokenizer::builtin(),
    };
    for (i, row) in plan.rows.iter().enumerate() {
        if stop.dispatch_stopped() {
            notes.push(format!("Interrupted: rows from {} on did not run.", row.id));
            break;
        }
        let row_dir = dir.join("rows").join(&row.id);
        std::fs::create_dir_all(&row_dir)
            .with_context(|| format!("creating {}", row_dir.display()))?;
        let trace = match &row.trace {
            Some(t) => {
                let n = plan
                    .defaults
                    .scale
                    .prompts(row.num_prompts, row.max_concurrency);
                let data = if row.request_rate.0.is_finite() {
                    trace_row::prepare(
                        t,
                        n,
                        &tokenizer,
                        plan.defaults.seed,
                        &row_dir.join("trace-dataset.jsonl"),
                    )?
                } else {
                    trace_row::self_timed(t, n)?
                };
                let arrivals = if data.self_timed.is_some() {
                    format!(
                        "replayed on the trace's own clock (mean {:.3} req/s, its bursts kept)",
                        data.mean_rate
                    )
                } else {
                    format!("Poisson arrivals at the row's {} req/s", row.request_rate)
                };
                notes.push(format!(
                    "Row {}: {} requests of trace {}; prompt tokens p50 {} / p90 {}, output tokens p50 {} / p90 {}; \
                     {arrivals}.",
                    row.id,
                    data.requests,
                    t.display(),
                    data.input_p50,
                    data.input_p90,
                    data.output_p50,
                    data.output_p90,
                ));
                Some(data)
            }
            None => None,
        };
        let n = match &trace {
            Some(t) => t.requests,
            None => plan
                .defaults
                .scale
                .prompts(row.num_prompts, row.max_concurrency),
        };
        eprintln!(
            "Row {} ({}): {}, concurrency {}, rate {}, {} requests{}",
            row.id,
            row.name,
            row.shape(),
            row.max_concurrency
                .map(|c| c.to_string())
                .unwrap_or_else(|| "unlimited".into()),
            row.request_rate,
            n,
            if plan.defaults.repeat > 1 {
                format!(" × {} runs", plan.defaults.repeat)
            } else {
                String::new()
            },
        );
        let plan_for = |k: usize, run_dir: &Path| {
            let (workload, run) = row_overrides(plan, row, i, k, trace.as_ref());
            bench.plan(&bases[i], &workload, &run, run_dir)
        };
        let began = std::time::Instant::now();
        let rep = run_repeated(
            bench,
            &dir,
            &row_dir,
            plan.defaults.repeat,
            plan_for,
            stop,
            &format!("row {}", row.id),
        )
        .await
        .with_context(|| format!("row {}", row.id))?;
        if rep.all_failed_run {
            exit = ExitCode::from(2);
        }
        if !rep.summaries.is_empty() {
            let validity: Vec<_> = rep
                .runs
                .iter()
                .map(|r| crate::sweep_cmd::run_validity(&dir, r))
                .collect();
            eprintln!(
                "{}",
                repeat::completion_line(
                    &format!("Row {} ({})", row.id, row.name),
                    &rep.summaries,
                    &crate::sweep_cmd::point_verdict(&validity),
                    began.elapsed()
                )
            );
        }
        rows_out.push(RowEntry {
            id: row.id.clone(),
            name: row.name.clone(),
            hypothesis: row.hypothesis.clone(),
            runs: rep.runs.clone(),
            repeat_summary: rep.repeat_summary.clone(),
        });
        results.push((i, rep));
    }

    let experiment = ExperimentFile {
        schema: EXPERIMENT_SCHEMA.to_owned(),
        kind: "matrix".to_owned(),
        quick,
        title: plan.title.clone(),
        rows: rows_out,
        sweep: None,
        repeat: plan.defaults.repeat,
        notes: notes.clone(),
    };
    layout::write_json(&dir.join("experiment.json"), &experiment)?;

    let lines: Vec<table::Line<'_>> = results
        .iter()
        .map(|(i, rep)| {
            let row = &plan.rows[*i];
            table::Line {
                lead: vec![
                    row.id.clone(),
                    row.shape(),
                    row.max_concurrency
                        .map(|c| c.to_string())
                        .unwrap_or("-".into()),
                    row.request_rate.to_string(),
                ],
                runs: &rep.summaries,
            }
        })
        .collect();
    println!(
        "\n{} ({} rows{}; latencies in ms)",
        plan.title,
        results.len(),
        if quick { ", QUICK RUN" } else { "" }
    );
    print!(
        "{}",
        table::render(&["row", "prompt → output", "conc", "rate"], &lines)
    );
    println!();
    // Each row's verdict with its reasons: which rows to act on, and why the others fall short.
    for (i, rep) in &results {
        let row = &plan.rows[*i];
        for (k, run) in rep.runs.iter().enumerate() {
            if let Some(v) = crate::sweep_cmd::run_validity(&dir, run) {
                let which = if rep.runs.len() > 1 {
                    format!("{} (run {})", row.id, k + 1)
                } else {
                    row.id.clone()
                };
                println!("{which} verdict: {}", v.verdict);
            }
        }
    }
    println!();
    for (i, _) in &results {
        let row = &plan.rows[*i];
        println!("{} {}: {}", row.id, row.name, row.hypothesis);
    }
    for n in &notes {
        println!("\nNote: {n}");
    }
    render::render_or_warn(&dir);
    Ok((dir, exit))
}

/// Every flag of `servebench matrix` that takes a value, given generated hostile numbers: the
/// plan and every row's run plan end in a plan or a clear error, never a panic, and an
/// accepted run never asks for more requests than one run holds.
#[cfg(test)]
mod hostile_numbers {
    use super::*;
    use crate::run::plan::hostile_numbers::{hostile, valued_flags_of};
    use crate::run::plan::MAX_RUN_REQUESTS;
    use clap::Parser;
    use proptest::prelude::*;

    fn matrix_args(flag: &str) -> Option<MatrixArgs> {
        match crate::Cli::try_parse_from(["servebench", "matrix", flag])
            .ok()?
            .command
        {
            crate::Command::Matrix(a) => Some(*a),
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
            let flags = valued_flags_of("matrix");
            prop_assume!(!flags.is_empty());
            let flag = format!("--{}={value}", flags[which.index(flags.len())]);
            let Some(args) = matrix_args(&flag) else { return Ok(()) };
            let Ok(plan) = effective_plan(&args) else { return Ok(()) };
            let out = std::env::temp_dir();
            for (i, row) in plan.rows.iter().enumerate() {
                let (workload, run) = row_overrides(&plan, row, i, 0, None);
                let Ok(base) = RunBase::parse(&plan.defaults.flags, &row.flags) else { continue };
                if let Ok((p, _)) = base.plan(&workload, &run, &out, None) {
                    prop_assert!(p.num_prompts <= MAX_RUN_REQUESTS, "{flag}: {}", p.num_prompts);
                }
            }
        }
    }

    #[test]
    fn the_flags_are_found() {
        let flags = valued_flags_of("matrix");
        for f in ["repeat", "num-warmups", "seed", "scale"] {
            assert!(flags.iter().any(|x| x == f), "{f} in {flags:?}");
        }
    }
}
