//! `servebench merge`: the shards of one split run (`run --shard I/N`) joined into the run's
//! result, computed from all their records as one run — never from their summaries, so
//! every percentile of the merged run is exact.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use servebench_loadgen::JsonlSink;
use servebench_metrics::result::{
    ClientHealth, ClockAnchor, MeasuredHealth, RunResult, ShardInfo, TargetInfo,
};
use servebench_metrics::RequestRecord;

use crate::run::args::RunArgs;
use crate::run::output::{self, FileNames, Finish};

/// Arguments of `servebench merge`.
#[derive(Debug, Clone, Args)]
pub struct MergeArgs {
    /// Shard results: `*.servebench.json` files of `run --shard`, or directories holding them.
    #[arg(required = true, value_name = "DIR|FILE")]
    pub inputs: Vec<PathBuf>,
    /// Where the merged files go [default: the first input's directory].
    #[arg(short = 'o', long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Warn loudly when the shards' clock anchors are further apart than this (ms), or a
    /// shard's dispatch lag p99 exceeds it.
    #[arg(long, default_value_t = 10.0, value_name = "MS")]
    pub max_clock_spread_ms: f64,
    /// Merge a shard whose records file holds fewer or more records than its result states
    /// (a cut file): with a warning carried into the merged result, instead of an error.
    #[arg(long)]
    pub allow_incomplete: bool,
    #[command(flatten)]
    pub db: crate::results_index::DbFlags,
}

/// One shard's result as read from disk.
#[derive(Debug)]
struct ShardFile {
    path: PathBuf,
    result: RunResult,
    shard: ShardInfo,
    index: u32,
}

/// `servebench merge`.
pub fn merge(args: MergeArgs, command_line: Vec<String>) -> Result<ExitCode> {
    crate::results_index::configure(&args.db);
    let files = shard_files(&args.inputs)?;
    let shards = check_shards(files)?;
    let first = &shards[0];
    let count = first.shard.count;

    let mut records = Vec::new();
    let mut warnings = Vec::new();
    for s in &shards {
        let mine = shard_records(s)?;
        if let Some(problem) = count_mismatch(s, mine.len()) {
            if !args.allow_incomplete {
                bail!("{problem}; pass --allow-incomplete to merge what is there, with a warning in the merged result");
            }
            warnings.push(problem);
        }
        records.extend(mine);
    }
    // A shard that stopped early measured only part of its schedule: so did the merged run.
    let interrupted: Vec<String> = shards
        .iter()
        .filter(|s| s.result.interrupted)
        .map(|s| {
            format!(
                "shard {}/{count} was interrupted ({})",
                s.index,
                s.result
                    .interrupted_reason
                    .as_deref()
                    .unwrap_or("no reason recorded")
            )
        })
        .collect();
    if !interrupted.is_empty() {
        crate::run::mark_interrupted(interrupted.join("; "));
        warnings.extend(interrupted);
    }
    records.sort_by_key(|r| r.id);
    if let Some(w) = records.windows(2).find(|w| w[0].id == w[1].id) {
        bail!(
            "request id {} appears in two shards' records: the shards did not split one schedule",
            w[0].id
        );
    }

    let anchors: Vec<(u32, &ClockAnchor)> = shards
        .iter()
        .filter_map(|s| {
            s.result
                .metadata
                .clock_anchor
                .as_ref()
                .map(|a| (s.index, a))
        })
        .collect();
    if anchors.len() != shards.len() {
        bail!("a shard result has no clock anchor (metadata.clock_anchor): it was written by an older servebench or in virtual time");
    }
    let min_anchor = anchors.iter().map(|(_, a)| a.unix_ns).min().unwrap_or(0);
    let max_anchor = anchors.iter().map(|(_, a)| a.unix_ns).max().unwrap_or(0);
    let spread_ms = (max_anchor - min_anchor) as f64 / 1e6;
    let lag_p99: Vec<Option<f64>> = shards
        .iter()
        .map(|s| {
            s.result
                .client_health
                .as_ref()
                .and_then(|h| h.measured())
                .and_then(|m| m.dispatch_lag_p99_ms)
        })
        .collect();
    if spread_ms > args.max_clock_spread_ms {
        warnings.push(format!(
            "the shards' clock anchors are {spread_ms:.3} ms apart (above {} ms): their records do not share one time zero; start them with --start-at",
            args.max_clock_spread_ms
        ));
    }
    for (s, lag) in shards.iter().zip(&lag_p99) {
        if let Some(l) = lag.filter(|l| *l > args.max_clock_spread_ms) {
            warnings.push(format!(
                "shard {}/{count} sent late: dispatch lag p99 {l:.3} ms (above {} ms)",
                s.index, args.max_clock_spread_ms
            ));
        }
    }
    for w in &warnings {
        eprintln!("WARNING: {w}");
    }

    let mut run_args = run_args_of(first)?;
    let out_dir = args.output_dir.clone().unwrap_or_else(|| {
        first
            .path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
    });
    run_args.shard = None;
    run_args.shards = None;
    run_args.output_dir = out_dir.clone();
    run_args.result_dir = Some(out_dir.clone());
    run_args.save_result = true;
    run_args.append_result = false;

    let info = ShardInfo {
        index: None,
        count,
        plan_hash: first.shard.plan_hash.clone(),
        schedule_requests: first.shard.schedule_requests,
        anchor_spread_ms: Some(spread_ms),
        dispatch_lag_p99_ms: lag_p99,
        warnings,
    };
    let anchor = ClockAnchor {
        unix_ns: min_anchor,
        source: output::CLOCK_SOURCE.to_owned(),
        start_at: first
            .result
            .metadata
            .clock_anchor
            .as_ref()
            .and_then(|a| a.start_at.clone()),
    };
    let health = merged_health(&shards);
    let meta = &first.result.metadata;
    let tokenizer = crate::run::load_tokenizer(run_args.tokenizer.as_deref(), false)?;
    let ramp_up = crate::run::options::check_ramp_up(&run_args)?;
    let mut names = FileNames::new(&run_args, &meta.model_id, ramp_up.as_ref());
    let (jsonl_path, file) = names.claim(&out_dir)?;
    let mut sink = JsonlSink::from_file(&jsonl_path, file);
    for r in &records {
        sink.append(r)?;
    }
    drop(sink);
    let finish = Finish {
        args: &run_args,
        model_id: meta.model_id.clone(),
        tokenizer: &tokenizer,
        names,
        jsonl_path,
        ramp_up,
        percentile_metrics: crate::run::options::percentile_metrics(
            run_args.percentile_metrics.as_deref(),
        )?,
        percentiles: crate::run::options::metric_percentiles(&run_args.metric_percentiles)?,
        goodput: crate::run::options::goodput(&run_args.goodput)?,
        metadata: crate::run::options::key_values("--metadata", &run_args.metadata)?,
        command_line,
        print: true,
        shard: Some(info),
        merged: Some((health, anchor)),
        // Each shard's client opened its own connections; a merge has none of its own.
        connections: None,
        stopped_early: None,
        probes: None,
        agent_nodes: None,
    };
    let duration_ns = records
        .iter()
        .map(|r| r.end.max(r.done).unwrap_or(r.sent))
        .max()
        .unwrap_or(0);
    let target: TargetInfo = meta.target.clone();
    let out = output::write_results(
        &finish,
        &records,
        duration_ns,
        None,
        None,
        None,
        target,
        first.result.simulated,
    )?;
    crate::results_index::run_written(&out.native_path);
    eprintln!(
        "merged {} shards ({} records) of plan {}",
        count,
        records.len(),
        first.shard.plan_hash
    );
    Ok(out.exit)
}

/// The `*.servebench.json` files the inputs name (a directory contributes every one in it).
fn shard_files(inputs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for input in inputs {
        if input.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(input)
                .with_context(|| format!("reading {}", input.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.to_string_lossy().ends_with(".servebench.json"))
                .collect();
            found.sort();
            if found.is_empty() {
                bail!("{} holds no *.servebench.json", input.display());
            }
            out.extend(found);
        } else if input.is_file() {
            out.push(input.clone());
        } else {
            bail!("{}: no such file or directory", input.display());
        }
    }
    Ok(out)
}

/// Read the shard results and check they are the shards of one plan, each index once.
fn check_shards(files: Vec<PathBuf>) -> Result<Vec<ShardFile>> {
    let mut shards = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let result: RunResult = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a servebench result", path.display()))?;
        let Some(shard) = result.metadata.shard.clone() else {
            // A merged result in the same directory is not a shard; anything else is a mistake.
            bail!(
                "{} is not a shard result (no metadata.shard): run with --shard I/N",
                path.display()
            );
        };
        let Some(index) = shard.index else {
            eprintln!(
                "note: skipping {} (an earlier merge's result)",
                path.display()
            );
            continue;
        };
        shards.push(ShardFile {
            path,
            result,
            shard,
            index,
        });
    }
    let Some(first) = shards.first() else {
        bail!("no shard results among the inputs");
    };
    let (count, hash) = (first.shard.count, first.shard.plan_hash.clone());
    for s in &shards {
        if s.shard.plan_hash != hash || s.shard.count != count {
            bail!(
                "{} is shard {}/{} of plan {}, but {} is shard {}/{count} of plan {hash}: the shards come from different runs",
                s.path.display(),
                s.index,
                s.shard.count,
                s.shard.plan_hash,
                first.path.display(),
                first.index,
            );
        }
    }
    let mut by_index: BTreeMap<u32, &ShardFile> = BTreeMap::new();
    for s in &shards {
        if let Some(other) = by_index.insert(s.index, s) {
            bail!(
                "shard {}/{count} appears twice: {} and {}",
                s.index,
                other.path.display(),
                s.path.display()
            );
        }
    }
    let missing: Vec<String> = (0..count)
        .filter(|i| !by_index.contains_key(i))
        .map(|i| format!("{i}/{count}"))
        .collect();
    if !missing.is_empty() {
        bail!(
            "missing shard{} {} of plan {hash} (found {} of {count})",
            if missing.len() > 1 { "s" } else { "" },
            missing.join(", "),
            by_index.len()
        );
    }
    shards.sort_by_key(|s| s.index);
    Ok(shards)
}

/// A shard's records, from the file its result names (beside the result).
fn shard_records(s: &ShardFile) -> Result<Vec<RequestRecord>> {
    let Some(name) = &s.result.records_path else {
        bail!("{} names no records file", s.path.display());
    };
    let dir = s.path.parent().unwrap_or_else(|| Path::new("."));
    let path = dir.join(name);
    let records = servebench_metrics::read_jsonl(&path)
        .with_context(|| format!("reading the records of shard {}", s.index))?;
    if let Some(r) = records
        .iter()
        .find(|r| r.id % u64::from(s.shard.count) != u64::from(s.index))
    {
        bail!(
            "{}: request id {} does not belong to shard {}/{}",
            path.display(),
            r.id,
            s.index,
            s.shard.count
        );
    }
    Ok(records)
}

/// A shard whose records file does not hold the requests its own result counts
/// (`completed + failed`): the file was cut, or belongs to another run of the same name.
fn count_mismatch(s: &ShardFile, records: usize) -> Option<String> {
    let sum = &s.result.summary;
    let stated = sum.completed + sum.failed;
    (records as u64 != stated).then(|| {
        format!(
            "shard {}/{} ({}) states {stated} requests ({} completed, {} failed) but its records file holds {records}",
            s.index,
            s.shard.count,
            s.path.display(),
            sum.completed,
            sum.failed
        )
    })
}

/// The `servebench run` flags a shard ran with, from its recorded command line.
fn run_args_of(s: &ShardFile) -> Result<RunArgs> {
    let argv = &s.result.metadata.command_line;
    let cli = crate::try_parse_cli(argv).with_context(|| {
        format!(
            "{}: its recorded command line is not a servebench run",
            s.path.display()
        )
    })?;
    match cli.command {
        crate::Command::Run { args, .. } => Ok(*args),
        _ => bail!(
            "{}: recorded by another command than `servebench run`",
            s.path.display()
        ),
    }
}

/// The client side of the merged run: the worst shard's dispatch lags; CPU adds up
/// over the shards (each ran on its own cores); any shard that limited the run limited it.
fn merged_health(shards: &[ShardFile]) -> ClientHealth {
    let mut h = MeasuredHealth::default();
    for s in shards {
        if let Some(m) = s.result.client_health.as_ref().and_then(|c| c.measured()) {
            h.cpu_user_s += m.cpu_user_s;
            h.cpu_system_s += m.cpu_system_s;
            h.cpu_percent += m.cpu_percent;
            h.cpus += m.cpus;
            h.client_limited |= m.client_limited;
            h.not_dispatched += m.not_dispatched;
            h.resent += m.resent;
            h.dispatch_lag_p50_ms = max_opt(h.dispatch_lag_p50_ms, m.dispatch_lag_p50_ms);
            h.dispatch_lag_p99_ms = max_opt(h.dispatch_lag_p99_ms, m.dispatch_lag_p99_ms);
            h.dispatch_lag_max_ms = max_opt(h.dispatch_lag_max_ms, m.dispatch_lag_max_ms);
            h.load_average = max_opt(h.load_average, m.load_average);
        }
    }
    ClientHealth::Measured(h)
}

fn max_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}
