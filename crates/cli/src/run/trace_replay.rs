//! A timed trace as a run's workload: requests at the trace's lengths and, when self-timed,
//! arrivals at the trace's own (scaled) timestamps.

use anyhow::{Context, Result};
use servebench_tokenizer::Tokenizer;
use servebench_workload::trace::{full_block_ids, lengths_only, load_timed_trace, TracePrompts};
use servebench_workload::{DatasetConfig, RequestSpec};

use super::dataset;
use super::executor::TraceBlocks;
use super::plan::RunPlan;

/// What a timed trace gives a run.
pub struct TraceRun {
    pub requests: Vec<RequestSpec>,
    /// Intended send offsets, ns: the trace's when self-timed.
    pub schedule: Vec<u64>,
    /// Each request's full block ids, for virtual time (whose prompts are token ids).
    pub blocks: Option<TraceBlocks>,
    /// The prompts, to build while the run goes (over HTTP; `requests` hold lengths only).
    pub prompts: Option<TracePrompts>,
}

/// The plan's timed trace as requests and a schedule; `None` for other datasets.
/// No prompt text is built here: virtual time needs lengths and block ids, and over HTTP the
/// prompts are built while the run goes (see [`TracePrompts`]).
pub fn build(
    plan: &RunPlan,
    tokenizer: &Tokenizer,
    lengths_only_: bool,
) -> Result<Option<TraceRun>> {
    let DatasetConfig::TimedTrace(cfg) = dataset::config(plan) else {
        return Ok(None);
    };
    let file = cfg.path.display().to_string();
    let trace = load_timed_trace(&cfg).context("reading the timed trace")?;
    if trace.reordered > 0 {
        eprintln!(
            "warning: {file}: {} of {} entries were out of time order; they are replayed sorted by arrival",
            trace.reordered, trace.total
        );
    }
    if trace.capped > 0 {
        eprintln!(
            "note: replaying the first {} requests of {file} (--num-prompts); {} more in the window are left out",
            trace.entries.len(),
            trace.capped
        );
    }
    let chunk = trace.chunk_hash_size;
    let requests = lengths_only(&trace.entries, chunk);
    let schedule = if plan.dataset.self_timed().is_some() {
        trace.offsets_ns()
    } else {
        dataset::schedule(plan, requests.len())?
    };
    let (blocks, prompts) = if lengths_only_ {
        let blocks = TraceBlocks {
            block_tokens: chunk,
            ids: trace
                .entries
                .iter()
                .map(|e| full_block_ids(e, chunk).to_vec())
                .collect(),
        };
        (Some(blocks), None)
    } else {
        // The entries move into the builder: a trace of millions of rows is held once.
        let prompts = trace
            .into_prompts(tokenizer, plan.seed)
            .with_context(|| format!("building the prompts of {file}"))?;
        (None, Some(prompts))
    };
    let requests = dataset::cycle_to(requests, schedule.len());
    Ok(Some(TraceRun {
        requests,
        schedule,
        blocks,
        prompts,
    }))
}
