//! `--prefix-hit-rate` after the run: the target, what this run's requests could reach at
//! best, and what the server reported reusing.

use servebench_loadgen::telemetry::ServerTelemetry;
use servebench_metrics::result::PrefixHitCheck;
use servebench_metrics::RequestRecord;
use servebench_workload::random::{achievable, PrefixHit, DEFAULT_PREFIX_POOL};
use servebench_workload::{PrefixMode, RandomConfig};

use super::args::RunArgs;

/// The check of a `--prefix-hit-rate` run; `None` for any other run.
pub fn check(
    args: &RunArgs,
    records: &[RequestRecord],
    telemetry: Option<&ServerTelemetry>,
) -> Option<PrefixHitCheck> {
    let rate = args.prefix_hit_rate?;
    let hit = PrefixHit {
        rate,
        pool: args.prefix_pool.unwrap_or(DEFAULT_PREFIX_POOL),
    };
    let cfg = RandomConfig {
        num_prompts: args.num_prompts,
        input_len: args.input_len.unwrap_or(args.random_input_len),
        output_len: args.random_output_len,
        range_ratio: args.random_range_ratio,
        prefix_len: 0,
        prefix_mode: PrefixMode::Shared,
        seed: args.seed,
        prefix_hit: Some(hit),
    };
    // Requests are sent in id order; a record per request sent (cycled past the dataset's end
    // for --duration runs).
    let sent = records.iter().map(|r| r.id + 1).max().unwrap_or(0) as usize;
    let best = achievable(&cfg, sent, args.num_warmups > 0)?;
    Some(PrefixHitCheck::measure(
        rate,
        hit.pool as u64,
        best.achievable,
        records,
        telemetry,
    ))
}
