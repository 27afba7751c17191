//! The rules. Each reads the groups' figures (and, for predictions, the deployment) and returns
//! the findings it supports with the figures that triggered them.

use std::collections::BTreeSet;

use servebench_metrics::RequestRecord;
use servebench_roofline::{kv_capacity, scheduler_defaults, Deployment, KvSizing};

use super::figures::RowFigures;
use super::{Confidence, Finding, Rule, RuleCheck};
use crate::bandwidth::{bandwidth_check, BandwidthRegime};
use crate::format_quantity;

/// The thresholds the rules apply; each says what it guards against.
pub mod thresholds {
    /// Prefill cost: the long-prompt row has at least this many times the short row's input...
    pub const PREFILL_INPUT_RATIO: f64 = 2.0;
    /// ...and at least this many times its TTFT p50...
    pub const PREFILL_TTFT_RATIO: f64 = 2.0;
    /// ...and the difference is at least this many ms (below it prefill is not worth a line).
    pub const PREFILL_MIN_DELTA_MS: f64 = 20.0;
    /// Prefill slower than the roofline when measured TTFT exceeds the idle prediction by this.
    pub const PREFILL_SLOW_RATIO: f64 = 1.5;
    /// Tail latency: p99 TTFT at least this many times p50...
    pub const TAIL_RATIO: f64 = 3.0;
    /// ...and at least this many ms above it (jitter on a fast p50 is not queueing)...
    pub const TAIL_MIN_DELTA_MS: f64 = 50.0;
    /// ...with at least this many TTFT samples (a p99 of fewer is the maximum).
    pub const TAIL_MIN_SAMPLES: u64 = 20;
    /// Batching trade-off: concurrency at least this many times the baseline's...
    pub const TRADEOFF_CONCURRENCY_RATIO: f64 = 2.0;
    /// ...bought at least this many times the throughput...
    pub const TRADEOFF_THROUGHPUT_RATIO: f64 = 1.5;
    /// ...for at least this many times the per-user TPOT.
    pub const TRADEOFF_TPOT_RATIO: f64 = 1.25;
    /// Prefix cache: fewer cached tokens than this fraction of the shared prefix is a miss.
    pub const PREFIX_HIT_FRACTION: f64 = 0.5;
    /// Prefix cache: a warm TTFT p50 above this fraction of the cold one gained nothing.
    pub const PREFIX_SAME_TTFT: f64 = 0.8;
    /// Throughput below this fraction of the roofline's at the same concurrency.
    pub const THROUGHPUT_BELOW: f64 = 0.5;
    /// An open-loop run served at least this fraction of its offered request rate kept up:
    /// its throughput is the load's, not the server's capacity.
    pub const KEPT_UP: f64 = 0.8;
    /// Saturation: the last quarter of arrivals waits this many times longer for a first
    /// token than the first quarter...
    pub const TTFT_GROWTH_RATIO: f64 = 3.0;
    /// ...and at least this many ms longer.
    pub const TTFT_GROWTH_MIN_MS: f64 = 100.0;
    /// KV exhaustion: TTFT p50 at least this many times the idle prefill (or the same
    /// workload's at lower concurrency) is a cliff.
    pub const TTFT_CLIFF_RATIO: f64 = 10.0;
}

use thresholds::*;

/// What the rules read.
pub(super) struct Ctx<'a> {
    pub rows: &'a [RowFigures],
    /// Each group's runs' records, parallel to `rows`.
    pub records: &'a [Vec<&'a [RequestRecord]>],
    pub deployment: Option<&'a Deployment>,
}

impl Ctx<'_> {
    /// The step token budget (prefill chunk) of the target.
    fn budget(&self, row: &RowFigures) -> u32 {
        if let Some(b) = row.target.max_num_batched_tokens {
            return u32::try_from(b).unwrap_or(u32::MAX);
        }
        match self.deployment {
            Some(d) => scheduler_defaults(d.gpu(), true, d.model().max_position_embeddings).0,
            None => 8192,
        }
    }

    /// Idle-engine prefill of `tokens`, ms.
    fn idle_prefill_ms(&self, row: &RowFigures, tokens: f64) -> Option<f64> {
        let d = self.deployment?;
        let tokens = tokens.round().clamp(1.0, f64::from(u32::MAX)) as u32;
        Some(d.prefill_time(tokens, self.budget(row)).total_s * 1e3)
    }

    /// KV-cache tokens and where the figure comes from.
    fn kv_capacity(&self, row: &RowFigures) -> Option<(u64, &'static str)> {
        if let Some(t) = row.target.kv_cache_tokens {
            return Some((t, "the server's configuration"));
        }
        let d = self.deployment?;
        let kv = kv_capacity(d, &KvSizing::server_defaults(d)).ok()?;
        Some((
            kv.tokens,
            "predicted at vLLM's defaults (gpu_memory_utilization 0.9)",
        ))
    }
}

fn ms(v: f64) -> String {
    format_quantity(v / 1e3, "s")
}

fn tok_s(v: f64) -> String {
    format_quantity(v, "tok/s")
}

fn tokens(v: f64) -> String {
    format_quantity(v.round(), "tokens")
}

fn ratio(v: f64) -> String {
    format_quantity(v, "×")
}

/// Runs every rule; findings come in [`Rule::ALL`] order.
pub(super) fn run_all(ctx: &Ctx<'_>) -> (Vec<Finding>, Vec<RuleCheck>) {
    let (kv_check, kv_findings, kv_rows) = kv_exhaustion(ctx);
    let (queue_check, queue_findings, queued_rows) = server_queueing(ctx, &kv_rows);
    let unhealthy_p50: BTreeSet<usize> = kv_rows.union(&queued_rows).copied().collect();
    let results = [
        (kv_check, kv_findings),
        (queue_check, queue_findings),
        decode_speed(ctx),
        throughput_below_prediction(ctx, &kv_rows),
        prefix_cache_miss(ctx),
        tail_latency(ctx, &unhealthy_p50),
        batching_trade_off(ctx),
        prefill_cost(ctx),
    ];
    let mut findings = Vec::new();
    let mut checks = Vec::new();
    for (mut check, mut f) in results {
        check.findings = f.len();
        findings.append(&mut f);
        checks.push(check);
    }
    (findings, checks)
}

fn check(rule: Rule) -> RuleCheck {
    RuleCheck {
        rule,
        examined: Vec::new(),
        findings: 0,
        note: None,
    }
}

/// Preemption / KV exhaustion. Returns the indices of the rows it fired on, whose tail and
/// throughput the other rules then leave to it.
fn kv_exhaustion(ctx: &Ctx<'_>) -> (RuleCheck, Vec<Finding>, BTreeSet<usize>) {
    let mut c = check(Rule::KvExhaustion);
    let mut findings = Vec::new();
    let mut fired = BTreeSet::new();
    for (i, row) in ctx.rows.iter().enumerate() {
        c.examined.push(row.id.clone());
        let mut evidence = Vec::new();
        let preemptions = row.server.preemptions.filter(|p| *p > 0.0);
        if let Some(p) = preemptions {
            evidence.push(format!(
                "the server counted {} preemptions (vllm:num_preemptions_total){}",
                format_quantity(p, ""),
                if row.runs > 1 {
                    " over the repeats"
                } else {
                    ""
                }
            ));
        }
        if let Some(kv) = row.server.max_kv_usage.filter(|k| *k >= 0.9) {
            evidence.push(format!("KV-cache use peaked at {:.0} %", kv * 100.0));
        }
        let caching_on = row.target.prefix_caching != Some(false);
        let shared = if caching_on {
            row.planned.shared_prefix_tokens as f64
        } else {
            0.0
        };
        let per_request = (row.mean_input_tokens + row.mean_output_tokens - shared).max(1.0);
        let running = match row.target.max_num_seqs {
            Some(s) => (row.peak_concurrency as f64).min(s as f64),
            None => row.peak_concurrency as f64,
        };
        let demand = running * per_request + shared;
        let capacity = ctx.kv_capacity(row);
        let over = capacity.is_some_and(|(cap, _)| demand > cap as f64);
        if let Some((cap, source)) = capacity {
            if over {
                evidence.push(format!(
                    "KV demand {} ({} requests × {} of prompt and output{}) exceeds the KV cache of {} ({source}) by {}",
                    tokens(demand),
                    format_quantity(running, ""),
                    tokens(per_request),
                    if shared > 0.0 { format!(", plus {} shared", tokens(shared)) } else { String::new() },
                    tokens(cap as f64),
                    ratio(demand / cap as f64),
                ));
            }
        }
        let uncached = row.mean_input_tokens - row.mean_cached_tokens.unwrap_or(0.0);
        let idle = ctx.idle_prefill_ms(row, uncached);
        let lighter_p50 = ctx
            .rows
            .iter()
            .filter(|o| o.id != row.id && o.same_workload(row) && o.concurrency < row.concurrency)
            .filter_map(|o| o.ttft.p50.map(|p| (o, p)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        let cliff = match (row.ttft.p50, idle, lighter_p50) {
            (Some(p50), Some(idle), _) if p50 >= TTFT_CLIFF_RATIO * idle => {
                evidence.push(format!(
                    "TTFT p50 {} is {} the {} an idle engine needs to prefill {}",
                    ms(p50),
                    ratio(p50 / idle),
                    ms(idle),
                    tokens(uncached)
                ));
                true
            }
            (Some(p50), None, Some((o, lp))) if p50 >= TTFT_CLIFF_RATIO * lp => {
                evidence.push(format!(
                    "TTFT p50 {} is {} that of {} ({}) with the same workload at lower concurrency",
                    ms(p50),
                    ratio(p50 / lp),
                    o.label,
                    ms(lp)
                ));
                true
            }
            _ => false,
        };
        let reprefill = ctx.idle_prefill_ms(row, row.mean_decode_context());
        let gaps = match (row.total_stalls, row.longest_stall_ms) {
            (n, Some(longest)) if n > 0 && reprefill.is_none_or(|r| longest >= 0.8 * r) => {
                evidence.push(format!(
                    "{n} stalls; the longest inter-token gap is {}{}, the signature of a preempted request re-prefilling",
                    ms(longest),
                    reprefill
                        .map(|r| format!(" (re-prefilling {} takes {})", tokens(row.mean_decode_context()), ms(r)))
                        .unwrap_or_default()
                ));
                true
            }
            _ => false,
        };
        let (confidence, reason) = if preemptions.is_some() {
            (Confidence::High, "the server's own preemption counter")
        } else if over && (cliff || gaps) {
            (
                Confidence::High,
                "KV demand over capacity and its symptoms in the latencies agree",
            )
        } else if over {
            (
                Confidence::Medium,
                "KV demand exceeds capacity, but the latencies show no cliff yet",
            )
        } else if cliff && gaps && capacity.is_none() {
            (
                Confidence::Medium,
                "a TTFT cliff and re-prefill gaps, without the KV capacity to check against",
            )
        } else {
            continue;
        };
        fired.insert(i);
        let fit = capacity.map(|(cap, _)| ((cap as f64 - shared).max(0.0) / per_request).floor());
        let next = match fit {
            Some(n) if n >= 1.0 => format!(
                "re-run {} with only the concurrency lowered to {} (--max-concurrency {}, what {} KV tokens hold at {} per request): preemptions and the TTFT cliff should vanish",
                row.id,
                format_quantity(n, ""),
                format_quantity(n, ""),
                format_quantity(capacity.map_or(0.0, |c| c.0 as f64), ""),
                tokens(per_request),
            ),
            _ => format!(
                "re-run {} with only --gpu-memory-utilization raised (or --max-model-len lowered): not one request fits the cache now",
                row.id
            ),
        };
        let gmu = row
            .target
            .gpu_memory_utilization
            .map(|g| format!(" (now {g})"))
            .unwrap_or_default();
        findings.push(Finding {
            rule: Rule::KvExhaustion,
            regime: "KV-cache exhaustion and preemption".into(),
            rows: vec![row.id.clone()],
            summary: format!(
                "{}: the running requests need more KV cache than the server has, so it preempts and re-prefills them; TTFT and stalls pay for it",
                row.label
            ),
            evidence,
            confidence,
            confidence_reason: reason.into(),
            confirm_with: "vllm:num_preemptions_total rising and vllm:kv_cache_usage_perc near 1.0 during the run; the server log's \"GPU KV cache size\" against the demand".into(),
            first_response: format!(
                "give the KV cache room or ask less of it: raise --gpu-memory-utilization{gmu}, cap --max-num-seqs{}, use an FP8 KV cache, or add GPUs (tensor parallelism)",
                fit.filter(|n| *n >= 1.0).map(|n| format!(" at {}", format_quantity(n, ""))).unwrap_or_default()
            ),
            next_experiment: next,
        });
    }
    if ctx.rows.is_empty() {
        c.note = Some("no group completed a request".into());
    }
    (c, findings, fired)
}

/// TPOT of single-stream groups against the bandwidth prediction.
fn decode_speed(ctx: &Ctx<'_>) -> (RuleCheck, Vec<Finding>) {
    let mut c = check(Rule::DecodeSpeed);
    let mut findings = Vec::new();
    let Some(d) = ctx.deployment else {
        c.note = Some("no GPU and model known: nothing to judge TPOT against".into());
        return (c, findings);
    };
    let singles: Vec<&RowFigures> = ctx.rows.iter().filter(|r| r.is_single_stream()).collect();
    if singles.is_empty() {
        c.note = Some("no single-stream group (concurrency 1)".into());
    }
    for row in singles {
        c.examined.push(row.id.clone());
        let Some(b) = bandwidth_check(row, d) else {
            continue;
        };
        let enough = row.tpot.n >= 10;
        let head = format!(
            "{}: mean TPOT {} against a predicted {} (floor {}) at context {}, gap {:+.0} %",
            row.label,
            ms(b.measured_tpot_ms),
            ms(b.predicted_tpot_ms),
            ms(b.floor_ms),
            b.context_tokens,
            b.gap_pct
        );
        let (regime, confidence, reason, first, next) = match b.regime {
            BandwidthRegime::AtLimit => continue,
            BandwidthRegime::BelowFloor => (
                "measurement or configuration error (faster than the hardware allows)",
                if enough { Confidence::High } else { Confidence::Medium },
                "no decode step can move these bytes faster than peak bandwidth",
                "check what the server really runs (GPU, model, dtype, tensor parallelism, speculative decoding) against the assumed target".to_string(),
                format!(
                    "re-run {} with only --random-output-len doubled to {}: a real decode keeps its TPOT, a shortcut (cached or speculative output) changes it",
                    row.id,
                    format_quantity((row.mean_output_tokens * 2.0).round(), "")
                ),
            ),
            BandwidthRegime::FasterThanPredicted => (
                "decode faster than the catalog's efficiency (uncalibrated MBU)",
                Confidence::Low,
                "above the floor, so possible; the catalog's MBU is likely conservative for this GPU",
                "calibrate the GPU's MBU from this TPOT before trusting other predictions".to_string(),
                format!(
                    "re-run {} with only --random-input-len doubled to {}: the TPOT increase measures the KV bytes per token and pins the MBU",
                    row.id,
                    format_quantity((row.mean_input_tokens * 2.0).round(), "")
                ),
            ),
            BandwidthRegime::Above | BandwidthRegime::FarAbove => (
                if b.regime == BandwidthRegime::FarAbove {
                    "inefficient decode or a non-memory bottleneck"
                } else {
                    "decode somewhat slower than the bandwidth limit"
                },
                match (b.regime == BandwidthRegime::FarAbove, enough) {
                    (true, true) => Confidence::High,
                    (true, false) | (false, true) => Confidence::Medium,
                    (false, false) => Confidence::Low,
                },
                if b.regime == BandwidthRegime::FarAbove {
                    "the gap is far beyond the roofline model's ±20 %"
                } else {
                    "the gap is within what overheads and model error can explain"
                },
                "profile one stream: CUDA graphs and async scheduling on, detokenisation and streaming cost, CPU frequency, another tenant on the GPU".to_string(),
                format!(
                    "re-run {} with only --max-concurrency 4: a memory-bound decode keeps TPOT within ≈10 % (4 streams share one weight read); a per-request cost (CPU, sampling) raises it",
                    row.id
                ),
            ),
        };
        findings.push(Finding {
            rule: Rule::DecodeSpeed,
            regime: regime.into(),
            rows: vec![row.id.clone()],
            summary: format!("{}: {}", row.label, b.verdict),
            evidence: vec![
                head,
                format!(
                    "TPOT p50 {}, p99 {} over {} requests",
                    row.tpot.p50.map_or("–".into(), ms),
                    row.tpot.p99.map_or("–".into(), ms),
                    row.tpot.n
                ),
            ],
            confidence,
            confidence_reason: reason.into(),
            confirm_with: "the server's per-step time (vllm iteration timing, sim:step_duration_seconds) at batch 1, and GPU memory-bandwidth utilisation from the profiler".into(),
            first_response: first,
            next_experiment: next,
        });
    }
    (c, findings)
}

/// Batched groups' output throughput against the roofline's at the same concurrency.
fn throughput_below_prediction(
    ctx: &Ctx<'_>,
    kv_rows: &BTreeSet<usize>,
) -> (RuleCheck, Vec<Finding>) {
    let mut c = check(Rule::ThroughputBelowPrediction);
    let mut findings = Vec::new();
    let Some(d) = ctx.deployment else {
        c.note = Some("no GPU and model known: no throughput prediction".into());
        return (c, findings);
    };
    for (i, row) in ctx.rows.iter().enumerate() {
        if row.is_single_stream() {
            continue;
        }
        c.examined.push(row.id.clone());
        if kv_rows.contains(&i) {
            continue;
        }
        // An open-loop run the server kept up with delivers the offered load whatever the
        // GPU could do: only a closed loop, or a server falling behind its arrivals, shows
        // its capacity.
        if let Some(rate) = row.planned.request_rate.filter(|r| r.is_finite()) {
            if row.request_throughput >= KEPT_UP * rate {
                continue;
            }
        }
        let Some(b) = bandwidth_check(row, d) else {
            continue;
        };
        let predicted = f64::from(b.batch) * 1e3 / b.predicted_tpot_ms;
        let measured = row.output_throughput;
        if predicted.is_nan() || predicted <= 0.0 || measured >= THROUGHPUT_BELOW * predicted {
            continue;
        }
        let share = measured / predicted;
        findings.push(Finding {
            rule: Rule::ThroughputBelowPrediction,
            regime: "non-memory bottleneck".into(),
            rows: vec![row.id.clone()],
            summary: format!(
                "{}: {} where the roofline gives {} at the same concurrency ({:.0} % of it)",
                row.label,
                tok_s(measured),
                tok_s(predicted),
                share * 100.0
            ),
            evidence: vec![
                format!(
                    "measured output throughput {} with {} requests in flight on average ({} decoding together)",
                    tok_s(measured),
                    format_quantity(row.concurrency, ""),
                    b.batch
                ),
                format!(
                    "predicted step of {} decodes at context {} plus {} prefill tokens: {}, i.e. {}",
                    b.batch,
                    b.context_tokens,
                    b.prefill_tokens_per_step,
                    ms(b.predicted_tpot_ms),
                    tok_s(predicted)
                ),
                format!(
                    "measured mean TPOT {} ({:+.0} % against the predicted step)",
                    ms(b.measured_tpot_ms),
                    b.gap_pct
                ),
            ],
            confidence: if share < 0.35 {
                Confidence::High
            } else {
                Confidence::Medium
            },
            confidence_reason: if share < 0.35 {
                "the shortfall is far beyond the roofline model's ±20 %".into()
            } else {
                "the shortfall exceeds the model's error, but not by a wide margin".into()
            },
            confirm_with: "the server's step time against the roofline (sim:step_duration_seconds; vLLM iteration timings), CPU use of the server process, GPU utilisation".into(),
            first_response: "find the bottleneck outside the memory system: CPU-bound scheduling or detokenisation (async scheduling), a low --max-num-seqs, the network or the client".into(),
            next_experiment: format!(
                "re-run {} with only the concurrency doubled (≈{} in flight): throughput that does not move confirms a limit outside the GPU's bandwidth",
                row.id,
                format_quantity((row.concurrency * 2.0).round(), "")
            ),
        });
    }
    if c.examined.is_empty() && c.note.is_none() {
        c.note = Some("no batched group (all at concurrency 1)".into());
    }
    (c, findings)
}

/// Groups with a shared prefix that did not get it from the cache.
fn prefix_cache_miss(ctx: &Ctx<'_>) -> (RuleCheck, Vec<Finding>) {
    let mut c = check(Rule::PrefixCacheMiss);
    let mut findings = Vec::new();
    for row in ctx.rows {
        let block = row.target.block_size.unwrap_or(16).max(1);
        let shared = row.planned.shared_prefix_tokens;
        if shared < block || row.completed < 2 {
            continue;
        }
        c.examined.push(row.id.clone());
        let cacheable = (shared / block * block) as f64;
        // The first request of each run finds the cache cold.
        let expected = cacheable * (row.completed as f64 - row.runs as f64) / row.completed as f64;
        let cold_twin = ctx
            .rows
            .iter()
            .filter(|o| o.id != row.id && o.planned.shared_prefix_tokens == 0)
            .filter(|o| o.same_workload(row) && o.ttft.p50.is_some())
            .min_by(|a, b| {
                (a.concurrency - row.concurrency)
                    .abs()
                    .total_cmp(&(b.concurrency - row.concurrency).abs())
            });
        let ttft_same = match (row.ttft.p50, cold_twin.and_then(|t| t.ttft.p50)) {
            (Some(w), Some(k)) => Some((w, k, w >= PREFIX_SAME_TTFT * k)),
            _ => None,
        };
        let mut evidence = vec![format!(
            "the workload shares a {} prefix across requests ({} of it cacheable in {}-token blocks)",
            tokens(shared as f64),
            tokens(cacheable),
            block
        )];
        let (confidence, reason) = match row.mean_cached_tokens {
            Some(cached) if cached < PREFIX_HIT_FRACTION * expected => {
                if let (Some(h), Some(q)) = (
                    row.server.prefix_cache_hits,
                    row.server.prefix_cache_queries,
                ) {
                    evidence.push(format!(
                        "the server's prefix cache hit {} of {} queried tokens ({:.1} %)",
                        format_quantity(h, ""),
                        format_quantity(q, ""),
                        if q > 0.0 { h / q * 100.0 } else { 0.0 }
                    ));
                }
                evidence.push(format!(
                    "the server reported {} cached per request on average, against ≈{} expected ({:.0} % of it)",
                    tokens(cached),
                    tokens(expected),
                    if expected > 0.0 { cached / expected * 100.0 } else { 0.0 }
                ));
                (
                    Confidence::High,
                    "the server's own cached_tokens counts".to_string(),
                )
            }
            Some(_) => continue,
            None => match ttft_same {
                Some((_, _, true)) => (
                    Confidence::Medium,
                    "the server does not report cached_tokens; only TTFT speaks".to_string(),
                ),
                _ => {
                    c.note = Some(format!(
                        "{}: the server reports no cached_tokens and there is no cold row to compare TTFT with",
                        row.id
                    ));
                    continue;
                }
            },
        };
        if let (Some((w, k, _)), Some(twin)) = (ttft_same, cold_twin) {
            evidence.push(format!(
                "TTFT p50 {} warm against {} for the cold {} ({:.0} %)",
                ms(w),
                ms(k),
                twin.label,
                w / k * 100.0
            ));
        }
        let off = row.target.prefix_caching == Some(false);
        if off {
            evidence.push("the server runs with prefix caching off".into());
        }
        findings.push(Finding {
            rule: Rule::PrefixCacheMiss,
            regime: if off {
                "prefix caching disabled".into()
            } else {
                "prefix-cache miss or eviction".into()
            },
            rows: vec![row.id.clone()],
            summary: format!(
                "{}: the shared prefix is recomputed instead of read from the cache, so the warm row gains nothing over a cold one",
                row.label
            ),
            evidence,
            confidence,
            confidence_reason: reason,
            confirm_with: "usage.prompt_tokens_details.cached_tokens per request, and vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total over the run".into(),
            first_response: if off {
                "enable prefix caching on the server (--enable-prefix-caching)".into()
            } else {
                "keep the shared prefix byte-identical and first in the prompt, give the KV cache room to keep it (it is evicted LRU), route requests that share a prefix to one replica".into()
            },
            next_experiment: if off {
                format!(
                    "restart the server with --enable-prefix-caching and re-run {} unchanged: cached_tokens should reach ≈{} per request",
                    row.id,
                    tokens(cacheable)
                )
            } else {
                format!(
                    "re-run {} with only --max-concurrency 1: cached tokens that appear alone but vanish under load mean eviction; none at all means the prefix differs between requests",
                    row.id
                )
            },
        });
    }
    if c.examined.is_empty() {
        c.note = Some("no group shares a prefix across requests".into());
    }
    (c, findings)
}

/// TTFT p50 itself far above what prefill needs, with the KV cache not to blame: requests
/// wait in the server's queue because it runs as many as it will (saturation, `max_num_seqs`).
fn server_queueing(
    ctx: &Ctx<'_>,
    kv_rows: &BTreeSet<usize>,
) -> (RuleCheck, Vec<Finding>, BTreeSet<usize>) {
    let mut c = check(Rule::ServerQueueing);
    let mut findings = Vec::new();
    let mut fired = BTreeSet::new();
    for (i, row) in ctx.rows.iter().enumerate() {
        let Some(p50) = row.ttft.p50 else {
            continue;
        };
        c.examined.push(row.id.clone());
        if kv_rows.contains(&i) {
            continue;
        }
        let uncached = row.mean_input_tokens - row.mean_cached_tokens.unwrap_or(0.0);
        let lighter = ctx
            .rows
            .iter()
            .filter(|o| o.id != row.id && o.same_workload(row) && o.concurrency < row.concurrency)
            .filter_map(|o| o.ttft.p50.map(|p| (o, p)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        let seqs = row.target.max_num_seqs;
        let capped = seqs.filter(|s| row.concurrency > *s as f64 * 1.05);
        let mut evidence = Vec::new();
        let cliff = match (ctx.idle_prefill_ms(row, uncached), lighter) {
            (Some(idle), _) if p50 >= TTFT_CLIFF_RATIO * idle => {
                evidence.push(format!(
                    "TTFT p50 {} is {} the {} an idle engine needs to prefill {}",
                    ms(p50),
                    ratio(p50 / idle),
                    ms(idle),
                    tokens(uncached)
                ));
                true
            }
            (None, Some((o, lp))) if p50 >= TTFT_CLIFF_RATIO * lp => {
                evidence.push(format!(
                    "TTFT p50 {} is {} that of {} ({}) with the same workload at lower concurrency",
                    ms(p50),
                    ratio(p50 / lp),
                    o.label,
                    ms(lp)
                ));
                true
            }
            _ => false,
        };
        // Three ways to tell queueing from the brief wait of a batch of prefills: more
        // requests than the server runs at once; an open loop the server fell behind; or a
        // median beyond what prefilling every request in flight at once would take.
        let fell_behind = ctx.records[i]
            .first()
            .and_then(|recs| growing_ttft(recs))
            .filter(|_| row.planned.request_rate.is_some_and(f64::is_finite));
        let all_at_once = ctx.idle_prefill_ms(row, uncached * row.concurrency.max(1.0));
        let beyond_batch = all_at_once.filter(|t| p50 >= TTFT_CLIFF_RATIO * t);
        if let Some((early, late)) = fell_behind {
            evidence.push(format!(
                "TTFT p50 grew from {} for the first quarter of arrivals to {} for the last: the server fell behind the offered {} req/s and its queue grew all run (it served {} req/s)",
                ms(early),
                ms(late),
                format_quantity(row.planned.request_rate.unwrap_or(0.0), ""),
                format_quantity(row.request_throughput, "")
            ));
        }
        if let Some(t) = beyond_batch {
            evidence.push(format!(
                "prefilling all {} requests in flight at once would take {}",
                format_quantity(row.concurrency.round(), ""),
                ms(t)
            ));
        }
        if !(cliff && capped.is_some()) && fell_behind.is_none() && beyond_batch.is_none() {
            continue;
        }
        fired.insert(i);
        evidence.push(format!(
            "{} requests in flight on average{}",
            format_quantity(row.concurrency, ""),
            match (seqs, capped) {
                (Some(s), Some(_)) => format!(
                    ", but the server runs at most {s} at once (max_num_seqs): the rest wait"
                ),
                (Some(s), None) => format!(" (max_num_seqs {s})"),
                (None, _) => String::new(),
            }
        ));
        if let Some(t) = row.tpot.mean {
            evidence.push(format!(
                "mean TPOT stays {}: the requests that run are served normally; the time is lost before they start",
                ms(t)
            ));
        }
        if let Some(w) = row.server.max_waiting.filter(|w| *w >= 1.0) {
            evidence.push(format!(
                "the server's waiting queue reached {} requests",
                format_quantity(w, "")
            ));
        }
        let load = match (row.planned.request_rate, row.planned.max_concurrency) {
            (Some(r), _) if r.is_finite() => format!(
                "the request rate halved (--request-rate {})",
                format_quantity(r / 2.0, "")
            ),
            (_, Some(cap)) if cap > 1 => {
                format!("the concurrency halved (--max-concurrency {})", cap / 2)
            }
            _ => "the offered load halved".into(),
        };
        findings.push(Finding {
            rule: Rule::ServerQueueing,
            regime: match capped {
                Some(_) => "queueing behind the server's sequence limit".into(),
                None => "queueing in a saturated server".into(),
            },
            rows: vec![row.id.clone()],
            summary: format!(
                "{}: even the median request waits {} for its first token; the server is past saturation for this load",
                row.label,
                ms(p50)
            ),
            evidence,
            confidence: if row.ttft.n >= 20 {
                Confidence::High
            } else {
                Confidence::Medium
            },
            confidence_reason: "the median itself, not a tail, is far above the prefill time".into(),
            confirm_with: "vllm:num_requests_waiting staying high and vllm:request_queue_time_seconds carrying most of TTFT".into(),
            first_response: match (capped, seqs) {
                (Some(_), Some(s)) => format!(
                    "raise --max-num-seqs (now {s}) if the KV cache holds the extra sequences, or cap the offered load at what {s} sequences serve"
                ),
                _ => "keep the offered load below saturation (admission control) or add replicas".into(),
            },
            next_experiment: match (capped, seqs) {
                (Some(_), Some(s)) => format!(
                    "re-run {} with only --max-num-seqs raised from {s} to {}: TTFT p50 should fall towards the prefill time",
                    row.id,
                    format_quantity(row.concurrency.ceil(), "")
                ),
                _ => format!(
                    "re-run {} with only {load}: TTFT p50 should fall back towards the prefill time",
                    row.id
                ),
            },
        });
    }
    (c, findings, fired)
}

/// p99 TTFT far above a healthy p50.
fn tail_latency(ctx: &Ctx<'_>, kv_rows: &BTreeSet<usize>) -> (RuleCheck, Vec<Finding>) {
    let mut c = check(Rule::TailLatency);
    let mut findings = Vec::new();
    for (i, row) in ctx.rows.iter().enumerate() {
        let (Some(p50), Some(p99)) = (row.ttft.p50, row.ttft.p99) else {
            continue;
        };
        if row.ttft.n < TAIL_MIN_SAMPLES {
            continue;
        }
        c.examined.push(row.id.clone());
        if kv_rows.contains(&i) || p99 < TAIL_RATIO * p50 || p99 - p50 < TAIL_MIN_DELTA_MS {
            continue;
        }
        let mut evidence = vec![format!(
            "TTFT p99 {} against p50 {} ({}), over {} requests",
            ms(p99),
            ms(p50),
            ratio(p99 / p50),
            row.ttft.n
        )];
        if let Some(idle) = ctx.idle_prefill_ms(
            row,
            row.mean_input_tokens - row.mean_cached_tokens.unwrap_or(0.0),
        ) {
            evidence.push(format!(
                "an idle engine prefills the mean prompt in {}: the p99 request waited ≈{} for others",
                ms(idle),
                ms((p99 - idle).max(0.0))
            ));
        }
        if let (Some(i50), Some(i99)) = (row.itl.p50, row.itl.p99) {
            if i99 >= TAIL_RATIO * i50 {
                evidence.push(format!(
                    "ITL p99 {} against p50 {}: prefill chunks share steps with decodes (interference)",
                    ms(i99),
                    ms(i50)
                ));
            }
        }
        if let Some(w) = row.server.max_waiting.filter(|w| *w >= 1.0) {
            evidence.push(format!(
                "the server's waiting queue reached {} requests",
                format_quantity(w, "")
            ));
        }
        if let Some(q99) = row.queue.p99.filter(|q| *q >= 1.0) {
            evidence.push(format!(
                "client-side queue p99 {} on top (requests waiting for a concurrency slot)",
                ms(q99)
            ));
        }
        let burst = ctx.records[i].first().and_then(|recs| startup_burst(recs));
        if let Some((share, n)) = burst {
            evidence.push(format!(
                "{:.0} % of the {n} slowest requests (top 5 % TTFT) arrived in the first tenth of the run: a start-up burst, as when every closed-loop user starts at once",
                share * 100.0
            ));
        }
        let confidence = if row.ttft.n >= 200 && p99 >= 5.0 * p50 {
            Confidence::High
        } else if row.ttft.n >= 50 {
            Confidence::Medium
        } else {
            Confidence::Low
        };
        let load = match (row.planned.request_rate, row.planned.max_concurrency) {
            (Some(r), _) if r.is_finite() => format!(
                "the request rate halved (--request-rate {})",
                format_quantity(r / 2.0, "")
            ),
            (_, Some(cap)) if cap > 1 => {
                format!("the concurrency halved (--max-concurrency {})", cap / 2)
            }
            _ => "the offered load halved".into(),
        };
        findings.push(Finding {
            rule: Rule::TailLatency,
            regime: "queueing or interference".into(),
            rows: vec![row.id.clone()],
            summary: format!(
                "{}: most requests start fast, but the slowest 1 % wait {} for a first token",
                row.label,
                ratio(p99 / p50)
            ),
            evidence,
            confidence,
            confidence_reason: match confidence {
                Confidence::High => "a wide, well-sampled gap between p50 and p99".into(),
                Confidence::Medium => "a clear gap, but p99 rests on few samples".into(),
                Confidence::Low => "p99 rests on fewer than 50 samples".into(),
            },
            confirm_with: "the server's waiting queue (vllm:num_requests_waiting) and queue-time histogram during the run, and the arrival times of the slowest requests".into(),
            first_response: "keep the load below the knee (admission control, more replicas); bound prefill interference with a smaller --max-num-batched-tokens; smooth bursts".into(),
            next_experiment: if burst.is_some() {
                format!(
                    "re-run {} with only --num-prompts ×4: a start-up burst weighs less in p99 of a longer run, steady-state queueing does not",
                    row.id
                )
            } else {
                format!(
                    "re-run {} with only {load}: queueing makes p99 TTFT fall sharply while p50 barely moves",
                    row.id
                )
            },
        });
    }
    (c, findings)
}

/// Median TTFT (ms) of the first and the last quarter of arrivals, when the last is at least
/// [`TTFT_GROWTH_RATIO`] times the first and [`TTFT_GROWTH_MIN_MS`] above it: a queue that
/// grows for the whole run.
fn growing_ttft(records: &[RequestRecord]) -> Option<(f64, f64)> {
    let mut ok: Vec<(u64, f64)> = records
        .iter()
        .filter(|r| r.is_success())
        .filter_map(|r| r.ttft_ns().map(|t| (r.intended, t as f64 / 1e6)))
        .collect();
    if ok.len() < 20 {
        return None;
    }
    ok.sort_by_key(|(intended, _)| *intended);
    let q = ok.len() / 4;
    let median = |part: &[(u64, f64)]| {
        let v: Vec<f64> = part.iter().map(|(_, t)| *t).collect();
        servebench_metrics::stats::median(&v)
    };
    let early = median(&ok[..q])?;
    let late = median(&ok[ok.len() - q..])?;
    (late >= TTFT_GROWTH_RATIO * early && late - early >= TTFT_GROWTH_MIN_MS)
        .then_some((early, late))
}

/// Share of the slowest 5 % of requests (by TTFT) that arrived in the first tenth of the run,
/// when it is at least half: `(share, how many slow requests)`.
fn startup_burst(records: &[RequestRecord]) -> Option<(f64, usize)> {
    let mut ok: Vec<(&RequestRecord, u64)> = records
        .iter()
        .filter(|r| r.is_success())
        .filter_map(|r| r.ttft_ns().map(|t| (r, t)))
        .collect();
    if ok.len() < 20 {
        return None;
    }
    let start = ok.iter().map(|(r, _)| r.intended).min()?;
    let end = ok.iter().map(|(r, _)| r.intended).max()?;
    if end <= start {
        // Everything arrived at once: the burst is the whole run, not its start.
        return None;
    }
    let cut = start + (end - start) / 10;
    ok.sort_by_key(|(_, t)| std::cmp::Reverse(*t));
    let n = (ok.len() / 20).max(1);
    let early = ok[..n].iter().filter(|(r, _)| r.intended <= cut).count();
    let share = early as f64 / n as f64;
    (share >= 0.5).then_some((share, n))
}

/// Same workload at higher concurrency: more throughput, worse TPOT.
fn batching_trade_off(ctx: &Ctx<'_>) -> (RuleCheck, Vec<Finding>) {
    let mut c = check(Rule::BatchingTradeOff);
    let mut findings = Vec::new();
    let mut used = BTreeSet::new();
    for (bi, base) in ctx.rows.iter().enumerate() {
        if used.contains(&bi) || base.tpot.mean.is_none() {
            continue;
        }
        // The lightest group of this workload is the baseline; others are compared with it.
        let class: Vec<usize> = (0..ctx.rows.len())
            .filter(|&j| ctx.rows[j].same_workload(base) && ctx.rows[j].tpot.mean.is_some())
            .collect();
        used.extend(class.iter().copied());
        let Some(&lightest) = class
            .iter()
            .min_by(|&&a, &&b| ctx.rows[a].concurrency.total_cmp(&ctx.rows[b].concurrency))
        else {
            continue;
        };
        if class.len() < 2 {
            continue;
        }
        let base = &ctx.rows[lightest];
        c.examined
            .extend(class.iter().map(|&j| ctx.rows[j].id.clone()));
        let (Some(base_tpot), true) = (base.tpot.mean, base.output_throughput > 0.0) else {
            continue;
        };
        let mut heavier: Vec<&RowFigures> = class
            .iter()
            .map(|&j| &ctx.rows[j])
            .filter(|r| r.concurrency >= TRADEOFF_CONCURRENCY_RATIO * base.concurrency.max(0.5))
            .filter(|r| r.output_throughput >= TRADEOFF_THROUGHPUT_RATIO * base.output_throughput)
            .filter(|r| {
                r.tpot
                    .mean
                    .is_some_and(|t| t >= TRADEOFF_TPOT_RATIO * base_tpot)
            })
            .collect();
        if heavier.is_empty() {
            continue;
        }
        heavier.sort_by(|a, b| a.concurrency.total_cmp(&b.concurrency));
        let evidence: Vec<String> = heavier
            .iter()
            .map(|r| {
                let t = r.tpot.mean.unwrap_or(base_tpot);
                format!(
                    "{} → {}: concurrency {} → {}, output throughput {} → {} ({}), mean TPOT {} → {} ({})",
                    base.label,
                    r.label,
                    format_quantity(base.concurrency, ""),
                    format_quantity(r.concurrency, ""),
                    tok_s(base.output_throughput),
                    tok_s(r.output_throughput),
                    ratio(r.output_throughput / base.output_throughput),
                    ms(base_tpot),
                    ms(t),
                    ratio(t / base_tpot),
                )
            })
            .collect();
        let top = heavier[heavier.len() - 1];
        let sampled = base.tpot.n >= 20 && top.tpot.n >= 20;
        let mut rows = vec![base.id.clone()];
        rows.extend(heavier.iter().map(|r| r.id.clone()));
        findings.push(Finding {
            rule: Rule::BatchingTradeOff,
            regime: "batching trade-off".into(),
            rows,
            summary: format!(
                "the same workload at higher concurrency buys {} the throughput for {} the per-user TPOT ({} against {})",
                ratio(top.output_throughput / base.output_throughput),
                ratio(top.tpot.mean.unwrap_or(base_tpot) / base_tpot),
                top.label,
                base.label
            ),
            evidence,
            confidence: if sampled { Confidence::High } else { Confidence::Medium },
            confidence_reason: if sampled {
                "both sides measured directly on the same workload".into()
            } else {
                "measured directly, but on fewer than 20 requests".into()
            },
            confirm_with: "a concurrency sweep on this workload: throughput flattening while TPOT keeps rising marks the knee".into(),
            first_response: "choose the operating point on the frontier: cap concurrency (or --max-num-seqs) where per-user TPOT still meets its SLO".into(),
            next_experiment: format!(
                "sweep only the concurrency from {} to {} on this workload (servebench sweep over max_concurrency) and take the highest point whose TPOT meets the contract",
                format_quantity(base.concurrency.round().max(1.0), ""),
                format_quantity(top.concurrency.round(), "")
            ),
        });
    }
    if c.examined.is_empty() {
        c.note = Some("no two groups share a workload at different concurrency".into());
    }
    (c, findings)
}

/// TTFT growing with the prompt at low concurrency.
fn prefill_cost(ctx: &Ctx<'_>) -> (RuleCheck, Vec<Finding>) {
    let mut c = check(Rule::PrefillCost);
    let singles: Vec<&RowFigures> = ctx
        .rows
        .iter()
        .filter(|r| r.is_single_stream() && r.ttft.p50.is_some())
        .collect();
    c.examined = singles.iter().map(|r| r.id.clone()).collect();
    let uncached = |r: &RowFigures| r.mean_input_tokens - r.mean_cached_tokens.unwrap_or(0.0);
    let short = singles
        .iter()
        .min_by(|a, b| uncached(a).total_cmp(&uncached(b)));
    let long = singles
        .iter()
        .max_by(|a, b| uncached(a).total_cmp(&uncached(b)));
    let (Some(short), Some(long)) = (short, long) else {
        c.note = Some("no single-stream group".into());
        return (c, Vec::new());
    };
    let (Some(ts), Some(tl)) = (short.ttft.p50, long.ttft.p50) else {
        return (c, Vec::new());
    };
    let (is, il) = (uncached(short), uncached(long));
    if is <= 0.0
        || il < PREFILL_INPUT_RATIO * is
        || tl < PREFILL_TTFT_RATIO * ts
        || tl - ts < PREFILL_MIN_DELTA_MS
    {
        if singles.len() < 2 {
            c.note = Some("needs two single-stream groups with different prompt lengths".into());
        }
        return (c, Vec::new());
    }
    let slope_us = (tl - ts) / (il - is) * 1e3;
    let mut evidence = vec![
        format!(
            "{}: TTFT p50 {} for {} of uncached prompt",
            short.label,
            ms(ts),
            tokens(is)
        ),
        format!(
            "{}: TTFT p50 {} for {} of uncached prompt",
            long.label,
            ms(tl),
            tokens(il)
        ),
        format!("≈{slope_us:.1} µs per prompt token between them"),
    ];
    let predicted = ctx.idle_prefill_ms(long, il);
    let slow = predicted.is_some_and(|p| tl > PREFILL_SLOW_RATIO * p);
    if let Some(p) = predicted {
        evidence.push(format!(
            "the roofline prefills {} in {} on an idle engine: measured is {}",
            tokens(il),
            ms(p),
            ratio(tl / p)
        ));
    }
    let sampled = short.ttft.n >= 20 && long.ttft.n >= 20;
    let confidence = match (predicted, sampled) {
        (Some(_), true) => Confidence::High,
        (None, true) | (Some(_), false) => Confidence::Medium,
        (None, false) => Confidence::Low,
    };
    let half = (long.mean_input_tokens / 2.0).round();
    let finding = Finding {
        rule: Rule::PrefillCost,
        regime: if slow {
            "prefill slower than the roofline (inefficient prefill)".into()
        } else {
            "prefill cost".into()
        },
        rows: vec![short.id.clone(), long.id.clone()],
        summary: format!(
            "at concurrency 1, TTFT grows with the prompt: {} → {} from {} to {} tokens; long prompts pay for prefill compute",
            ms(ts),
            ms(tl),
            format_quantity(is.round(), ""),
            format_quantity(il.round(), "")
        ),
        evidence,
        confidence,
        confidence_reason: match confidence {
            Confidence::High => "measured on both rows and checked against the roofline".into(),
            Confidence::Medium => "measured, but without a prediction or with few samples".into(),
            Confidence::Low => "few samples and no prediction".into(),
        },
        confirm_with: "TTFT against prompt length at concurrency 1 is a straight line whose slope is the per-token prefill cost; vllm:request_prefill_time_seconds on the server".into(),
        first_response: if slow {
            "prefill runs slower than the compute allows: check chunked-prefill settings, prompt tokenisation on the server, and GPU clocks".into()
        } else {
            "shorten or cache prompts (prefix caching for shared system prompts), cap the input length, or buy compute (FP8, tensor parallelism)".into()
        },
        next_experiment: format!(
            "re-run {} with only --random-input-len halved to {}: if prefill cost is the cause, TTFT falls by ≈{}",
            long.id,
            format_quantity(half, ""),
            ms(slope_us * half / 1e3)
        ),
    };
    (c, vec![finding])
}
