//! The seam between a plan and what measures it: the HTTP load generator against a server,
//! or the simulator's engine core in virtual time. Both take the same plan and workload and
//! leave the same result files.

use anyhow::Result;
use servebench_answer::Expected;
use servebench_loadgen::StopSignal;
use servebench_metrics::result::ShardInfo;
use servebench_tokenizer::Tokenizer;
use servebench_workload::RequestSpec;

use super::plan::RunPlan;
use super::RunOutcome;

/// A plan's requests, built and scheduled before anything is sent.
pub struct Workload {
    /// One request per schedule entry (cycled to the schedule's length).
    pub requests: Vec<RequestSpec>,
    /// Intended send offsets in ns from the run start, non-decreasing.
    pub schedule: Vec<u64>,
    /// The tokenizer prompt lengths were counted with.
    pub tokenizer: Tokenizer,
    /// Each request's own answer check, by position (the dataset's `expected`); empty when
    /// no request has one.
    pub expected: Vec<Option<Expected>>,
    /// The share of a split schedule these requests are (`--shard`), with the whole
    /// schedule's fingerprint.
    pub shard: Option<ShardInfo>,
    /// A timed trace's block ids, when prompts are token ids rather than text (virtual time).
    pub trace_blocks: Option<TraceBlocks>,
    /// A timed trace's prompts, built while the run goes (`requests` then hold the lengths
    /// only): a long trace starts at once and memory stays flat.
    pub trace_prompts: Option<servebench_workload::trace::TracePrompts>,
}

/// Which blocks each prompt of a trace starts with: request `i` (cycled: `i % ids.len()`)
/// opens with the blocks `ids[i]`, each `block_tokens` tokens, equal ids equal tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceBlocks {
    pub block_tokens: u64,
    pub ids: Vec<Vec<u64>>,
}

/// Measures one workload and writes its results.
// Executors run on the caller's task and are never spawned, so their futures need no `Send`.
#[allow(async_fn_in_trait)]
pub trait Executor {
    /// `print` shows the terminal report and progress notes.
    async fn measure(
        &self,
        plan: &RunPlan,
        work: Workload,
        command_line: Vec<String>,
        stop: &StopSignal,
        print: bool,
    ) -> Result<RunOutcome>;
}
