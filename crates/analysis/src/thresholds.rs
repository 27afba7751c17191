//! Every threshold the diagnosis applies, in one place: the rules of `crate::rules` and the
//! bandwidth classification of [`crate::bandwidth`]. Each constant says what it guards
//! against; a rule's unit tests sit on both sides of the thresholds it reads.
//!
//! Two figures the rules read are defined with the group figures they qualify:
//! [`SINGLE_STREAM_CONCURRENCY`] (when a group counts as one stream) and the 25 % tolerance of
//! [`crate::figures::RowFigures::same_workload`].

pub use crate::figures::SINGLE_STREAM_CONCURRENCY;

// --- Bandwidth classification -------------------------------------------------------------

/// Relative gap within which measured TPOT counts as at the prediction.
pub const AT_LIMIT_PCT: f64 = 10.0;
/// Relative gap above which measured TPOT counts as far above the prediction.
pub const FAR_ABOVE_PCT: f64 = 50.0;

// --- Prefill cost ---------------------------------------------------------------------------

/// Prefill cost: the long-prompt row has at least this many times the short row's input...
pub const PREFILL_INPUT_RATIO: f64 = 2.0;
/// ...and at least this many times its TTFT p50...
pub const PREFILL_TTFT_RATIO: f64 = 2.0;
/// ...and the difference is at least this many ms (below it prefill is not worth a line).
pub const PREFILL_MIN_DELTA_MS: f64 = 20.0;
/// Prefill slower than the roofline when measured TTFT exceeds the idle prediction by this.
pub const PREFILL_SLOW_RATIO: f64 = 1.5;
/// TTFT samples each of the two rows needs for a finding to count as well sampled.
pub const PREFILL_WELL_SAMPLED: u64 = 20;

// --- Tail latency ---------------------------------------------------------------------------

/// Tail latency: p99 TTFT at least this many times p50 (and ITL p99 this many times its p50
/// counts as interference)...
pub const TAIL_RATIO: f64 = 3.0;
/// ...and at least this many ms above it (jitter on a fast p50 is not queueing)...
pub const TAIL_MIN_DELTA_MS: f64 = 50.0;
/// ...with at least this many TTFT samples (a p99 of fewer is the maximum).
pub const TAIL_MIN_SAMPLES: u64 = 20;
/// High confidence needs this many TTFT samples...
pub const TAIL_HIGH_SAMPLES: u64 = 200;
/// ...and p99 at least this many times p50.
pub const TAIL_HIGH_RATIO: f64 = 5.0;
/// Below this many TTFT samples a tail finding has low confidence (p99 rests on a handful).
pub const TAIL_MEDIUM_SAMPLES: u64 = 50;
/// Start-up burst: at least this many completed requests with a TTFT before judging when the
/// slowest arrived.
pub const BURST_MIN_SAMPLES: usize = 20;
/// The slowest requests are the top `1 / BURST_SLOWEST_DIVISOR` by TTFT (5 %).
pub const BURST_SLOWEST_DIVISOR: usize = 20;
/// The start of a run is its first `1 / BURST_WINDOW_DIVISOR` of arrival time (a tenth).
pub const BURST_WINDOW_DIVISOR: u64 = 10;
/// A burst: at least this share of the slowest requests arrived at the start.
pub const BURST_SHARE: f64 = 0.5;

// --- Batching trade-off ---------------------------------------------------------------------

/// Batching trade-off: concurrency at least this many times the baseline's...
pub const TRADEOFF_CONCURRENCY_RATIO: f64 = 2.0;
/// ...where a baseline below this concurrency counts as this (an idle-looking baseline would
/// otherwise make any load look like a multiple of it)...
pub const TRADEOFF_MIN_BASE_CONCURRENCY: f64 = 0.5;
/// ...bought at least this many times the throughput...
pub const TRADEOFF_THROUGHPUT_RATIO: f64 = 1.5;
/// ...for at least this many times the per-user TPOT.
pub const TRADEOFF_TPOT_RATIO: f64 = 1.25;
/// TPOT samples both sides need for high confidence.
pub const TRADEOFF_WELL_SAMPLED: u64 = 20;

// --- Prefix cache ---------------------------------------------------------------------------

/// Prefix cache: fewer cached tokens than this fraction of the shared prefix is a miss.
pub const PREFIX_HIT_FRACTION: f64 = 0.5;
/// Prefix cache: a warm TTFT p50 above this fraction of the cold one gained nothing.
pub const PREFIX_SAME_TTFT: f64 = 0.8;
/// Completed requests a warm group needs: the first of each run finds the cache cold.
pub const PREFIX_MIN_REQUESTS: u64 = 2;
/// KV block size assumed when the server does not tell (vLLM's default): only whole blocks of
/// the shared prefix can be cached.
pub const DEFAULT_BLOCK_SIZE: u64 = 16;

// --- Throughput against the prediction ------------------------------------------------------

/// Throughput below this fraction of the roofline's at the same concurrency.
pub const THROUGHPUT_BELOW: f64 = 0.5;
/// Throughput below this fraction is beyond any model error: high confidence.
pub const THROUGHPUT_FAR_BELOW: f64 = 0.35;
/// An open-loop run served at least this fraction of its offered request rate kept up:
/// its throughput is the load's, not the server's capacity.
pub const KEPT_UP: f64 = 0.8;

// --- Decode speed ---------------------------------------------------------------------------

/// TPOT samples a single-stream row needs for its gap to the prediction to be trusted.
pub const DECODE_WELL_SAMPLED: u64 = 10;

// --- Server queueing and saturation ---------------------------------------------------------

/// Saturation: the last quarter of arrivals waits this many times longer for a first
/// token than the first quarter...
pub const TTFT_GROWTH_RATIO: f64 = 3.0;
/// ...and at least this many ms longer...
pub const TTFT_GROWTH_MIN_MS: f64 = 100.0;
/// ...judged on at least this many completed requests (a quarter of fewer is noise).
pub const TTFT_GROWTH_MIN_SAMPLES: usize = 20;
/// Arrivals are cut into this many parts by intended send time, and the first part is compared
/// with the last (quarters).
pub const TTFT_GROWTH_PARTS: usize = 4;
/// Mean requests in flight above `max_num_seqs` by this factor: the rest wait for a slot
/// (a little above 1, because Little's law over a run's edges overshoots slightly).
pub const SEQ_LIMIT_MARGIN: f64 = 1.05;
/// TTFT samples a queueing finding needs for high confidence.
pub const QUEUEING_WELL_SAMPLED: u64 = 20;
/// The server's waiting queue counts as used once it held this many requests.
pub const WAITING_MIN_REQUESTS: f64 = 1.0;
/// Client-side queue time p99 worth a line, ms.
pub const CLIENT_QUEUE_MIN_MS: f64 = 1.0;

// --- KV exhaustion --------------------------------------------------------------------------

/// KV exhaustion: TTFT p50 at least this many times the idle prefill (or the same
/// workload's at lower concurrency) is a cliff. Server queueing reads the same cliff.
pub const TTFT_CLIFF_RATIO: f64 = 10.0;
/// KV-cache use at or above this fraction of capacity is near exhaustion.
pub const KV_USAGE_HIGH: f64 = 0.9;
/// A longest inter-token gap at least this fraction of the idle re-prefill of the mean
/// context is the signature of a preempted request prefilling again.
pub const REPREFILL_GAP_FRACTION: f64 = 0.8;
/// Step token budget (prefill chunk) assumed when neither the server's configuration nor a
/// known deployment gives one.
pub const DEFAULT_BATCHED_TOKENS: u32 = 8192;
