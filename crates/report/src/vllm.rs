//! vLLM's result JSON (`--save-result`): the same keys, in the same order, with the same
//! meaning as `vllm bench serve` writes them (vllm/benchmarks/serve.py). Every figure here is
//! computed from [`vllm_metrics::view`]s of the records: vLLM's clock start and vLLM's token
//! events, not servebench's own (docs/metrics.md "Two clocks and two event rules").

use servebench_metrics::summary::Slo;
use servebench_metrics::units::{ns_f64_to_s, ns_to_s, s_to_ms};
use servebench_metrics::vllm::SpecDecodeStats;
use servebench_metrics::{stats, vllm as vllm_metrics, RequestRecord};

use crate::pyjson::{OrderedObject, PyValue};

/// Everything besides the records that vLLM's result JSON holds.
#[derive(Debug, Clone)]
pub struct VllmRunInfo {
    /// `%Y%m%d-%H%M%S`, local time.
    pub date: String,
    pub backend: String,
    pub label: Option<String>,
    pub model_id: String,
    pub tokenizer_id: String,
    pub num_prompts: usize,
    pub metadata: Vec<(String, String)>,
    pub request_rate: f64,
    pub burstiness: f64,
    pub max_concurrency: Option<usize>,
    /// (strategy, start rps, end rps)
    pub ramp_up: Option<(String, u64, u64)>,
    /// vLLM's `rps_change_events` under ramp-up: (rps, timestamp as Python's
    /// `datetime.now().isoformat()` writes it).
    pub rps_change_events: Vec<(u64, String)>,
    /// The `spec_decode_*` keys, when the server's `/metrics` had them before and after.
    pub spec_decode: Option<SpecDecodeStats>,
    pub duration_s: f64,
    /// `--percentile-metrics`, in the given order (the file uses vLLM's fixed order).
    pub percentile_metrics: Vec<String>,
    /// `--metric-percentiles`.
    pub percentiles: Vec<f64>,
    /// `--goodput`: a request counts when it meets every one (vLLM: TPOT 0 for one token).
    pub goodput: Vec<Slo>,
    /// `--save-detailed`.
    pub detailed: bool,
}

/// The statistics blocks vLLM writes, in the order it writes them whatever the order of
/// `--percentile-metrics`. servebench's own names (`queue`, `user_ttft`, `user_e2el`) follow.
pub const BLOCK_ORDER: &[&str] = &[
    "ttft",
    "tpot",
    "itl",
    "e2el",
    "client_queue_time",
    "e2el_including_client_queue",
    "queue",
    "user_ttft",
    "user_e2el",
];

/// The blocks `vllm_result` writes for these flags, in the order it writes them: vLLM's
/// fixed order; `client_queue_time` only with `--max-concurrency`, and
/// `e2el_including_client_queue` only with `--max-concurrency` and a finite rate (vLLM's
/// conditions).
pub fn written_blocks(
    selected: &[String],
    max_concurrency: Option<usize>,
    request_rate: f64,
) -> Vec<&'static str> {
    BLOCK_ORDER
        .iter()
        .copied()
        .filter(|b| selected.iter().any(|s| s == b))
        .filter(|&b| match b {
            "client_queue_time" => max_concurrency.is_some(),
            "e2el_including_client_queue" => {
                max_concurrency.is_some() && !request_rate.is_infinite()
            }
            _ => true,
        })
        .collect()
}

/// vLLM's name for a percentile key: `99` for 99.0, `99.9` for 99.9.
pub fn percentile_word(p: f64) -> String {
    if p.fract() == 0.0 {
        format!("{}", p as i64)
    } else {
        crate::pyjson::py_float_repr(p)
    }
}

/// numpy's `mean/median/std/percentile` of `xs or 0`, in ms.
pub(crate) fn ms_stats(xs: &[f64], percentiles: &[f64]) -> (f64, f64, f64, Vec<(f64, f64)>) {
    ms_stats_of(xs.to_vec(), percentiles)
}

/// [`ms_stats`] of values the caller gives up: sorted in place, so a run's ITLs (a number per
/// token) are not copied for their percentiles. Mean and standard deviation are summed in the
/// given order first, as numpy sums them.
pub(crate) fn ms_stats_of(
    mut xs: Vec<f64>,
    percentiles: &[f64],
) -> (f64, f64, f64, Vec<(f64, f64)>) {
    if xs.is_empty() {
        xs.push(0.0);
    }
    let mean = stats::mean(&xs).unwrap_or(0.0);
    let std = stats::std_dev(&xs).unwrap_or(0.0);
    let mut sorted = xs;
    sorted.sort_by(f64::total_cmp);
    (
        s_to_ms(mean),
        s_to_ms(stats::median_sorted(&sorted).unwrap_or(0.0)),
        s_to_ms(std),
        percentiles
            .iter()
            .map(|&p| {
                (
                    p,
                    s_to_ms(stats::percentile_sorted(&sorted, p).unwrap_or(0.0)),
                )
            })
            .collect(),
    )
}

/// Build vLLM's result object from the run's records (all of them, failed included, in
/// request order).
pub fn vllm_result(info: &VllmRunInfo, records: &[RequestRecord]) -> OrderedObject {
    if crate::vllm_pooling::is_pooling_backend(&info.backend) {
        return crate::vllm_pooling::pooling_result(info, records);
    }
    // Everything below sees the requests as vLLM's client would have; the views share the
    // records' token events rather than copy them (`events_of`).
    let originals = records;
    let views: Vec<RequestRecord> = originals
        .iter()
        .map(vllm_metrics::view_sharing_events)
        .collect();
    let records = &views[..];
    let events_of = |i: usize| vllm_metrics::view_events(&originals[i], &views[i]);
    // ITLs of the view at `i`: one gap per token-bearing event after the first.
    let itls_of = |i: usize| {
        events_of(i)
            .windows(2)
            .map(|w| ns_to_s(w[1].t.saturating_sub(w[0].t)))
    };
    let ok_index: Vec<usize> = (0..records.len())
        .filter(|&i| records[i].is_success())
        .collect();
    // vLLM's per-request values: seconds, and 0 / empty for a failed request.
    let secs_or_zero = |v: Option<u64>| v.map(ns_to_s).unwrap_or(0.0);
    let ok: Vec<&RequestRecord> = records.iter().filter(|r| r.is_success()).collect();
    let completed = ok.len();
    let failed = records.len() - completed;
    let total_input: u64 = ok.iter().map(|r| r.input_tokens).sum();
    let total_output: u64 = ok.iter().map(|r| r.output_tokens).sum();
    let dur = if info.duration_s > 0.0 {
        info.duration_s
    } else {
        f64::MIN_POSITIVE
    };
    let of_ok = |f: fn(&RequestRecord) -> Option<u64>| -> Vec<f64> {
        ok.iter().map(|r| secs_or_zero(f(r))).collect()
    };
    let ttfts = of_ok(RequestRecord::ttft_ns);
    let e2els = of_ok(RequestRecord::e2el_ns);
    let queue = of_ok(RequestRecord::queue_ns);
    let user_ttft = of_ok(RequestRecord::user_ttft_ns);
    let user_e2el = of_ok(RequestRecord::user_e2el_ns);
    let mut itls: Vec<f64> = ok_index.iter().flat_map(|&i| itls_of(i)).collect();
    let tpots: Vec<f64> = ok
        .iter()
        .filter_map(|r| r.tpot_ns())
        .map(ns_f64_to_s)
        .collect();
    let good = (!info.goodput.is_empty()).then(|| {
        let n = ok_index
            .iter()
            // On a view, TTFT, TPOT and E2EL are vLLM's; `itl` is servebench's own objective.
            .filter(|&&i| {
                info.goodput
                    .iter()
                    .all(|slo| slo.is_met_by_with_events(&records[i], events_of(i)))
            })
            .count();
        n as f64 / dur
    });
    let output_len = |r: &RequestRecord| if r.is_success() { r.output_tokens } else { 0 };

    let mut o = opening_keys(info);
    o.insert("completed", completed);
    o.insert("failed", failed);
    o.insert("total_input_tokens", total_input);
    o.insert("total_output_tokens", total_output);
    o.insert("request_throughput", completed as f64 / dur);
    o.insert("request_goodput", good);
    o.insert("output_throughput", total_output as f64 / dur);
    o.insert(
        "total_token_throughput",
        (total_input + total_output) as f64 / dur,
    );
    // vLLM drops its per-request lists without --save-detailed (only `latencies` and
    // `queue_times` stay): they are not built at all then, as the ITL lists alone hold a
    // number per token of the run.
    let detailed = info.detailed;
    if detailed {
        o.insert(
            "input_lens",
            records.iter().map(|r| r.input_tokens).collect::<Vec<_>>(),
        );
        o.insert(
            "output_lens",
            records.iter().map(output_len).collect::<Vec<_>>(),
        );
    }
    // Per-request arrays cover every request, a failed one with vLLM's zeros.
    let per_request = |f: fn(&RequestRecord) -> Option<u64>| -> Vec<f64> {
        records
            .iter()
            .map(|r| {
                if r.is_success() {
                    secs_or_zero(f(r))
                } else {
                    0.0
                }
            })
            .collect()
    };
    if detailed {
        o.insert("ttfts", per_request(RequestRecord::ttft_ns));
        o.insert(
            "itls",
            (0..records.len())
                .map(|i| {
                    if records[i].is_success() {
                        itls_of(i).collect()
                    } else {
                        Vec::new()
                    }
                })
                .collect::<Vec<Vec<f64>>>(),
        );
    }
    o.insert("latencies", per_request(RequestRecord::e2el_ns));
    if detailed {
        o.insert(
            "start_times",
            records.iter().map(|r| ns_to_s(r.sent)).collect::<Vec<_>>(),
        );
    }
    o.insert(
        "queue_times",
        records
            .iter()
            .map(|r| secs_or_zero(r.queue_ns()))
            .collect::<Vec<_>>(),
    );
    if detailed {
        o.insert(
            "generated_texts",
            records
                .iter()
                .map(|r| r.text.clone().unwrap_or_default())
                .collect::<Vec<_>>(),
        );
        o.insert(
            "errors",
            records
                .iter()
                .map(|r| {
                    r.failure
                        .as_ref()
                        .map(|f| f.message.clone())
                        .unwrap_or_default()
                })
                .collect::<Vec<_>>(),
        );
    }
    o.insert(
        "max_output_tokens_per_s",
        vllm_metrics::max_output_tokens_per_s_of(
            (0..records.len()).map(|i| (&records[i], events_of(i))),
        ),
    );
    o.insert(
        "max_concurrent_requests",
        vllm_metrics::max_concurrent_requests(records),
    );
    o.insert("rtfx", 0.0);

    if !info.rps_change_events.is_empty() {
        let events: Vec<PyValue> = info
            .rps_change_events
            .iter()
            .map(|(rps, ts)| {
                let mut e = OrderedObject::new();
                e.insert("rps", *rps);
                e.insert("timestamp", ts.clone());
                PyValue::Object(e)
            })
            .collect();
        o.insert("rps_change_events", PyValue::List(events));
    }
    if let Some(sd) = &info.spec_decode {
        o.insert("spec_decode_acceptance_rate", sd.acceptance_rate);
        o.insert("spec_decode_acceptance_length", sd.acceptance_length);
        o.insert("spec_decode_num_drafts", sd.num_drafts);
        o.insert("spec_decode_draft_tokens", sd.draft_tokens);
        o.insert("spec_decode_accepted_tokens", sd.accepted_tokens);
        o.insert(
            "spec_decode_per_position_acceptance_rates",
            sd.per_position_acceptance_rates.clone(),
        );
    }

    for metric in written_blocks(
        &info.percentile_metrics,
        info.max_concurrency,
        info.request_rate,
    ) {
        let values: Vec<f64> = match metric {
            "ttft" => ttfts.clone(),
            "tpot" => tpots.clone(),
            // A number per token: handed over, not copied (the block is written once).
            "itl" => std::mem::take(&mut itls),
            "e2el" => e2els.clone(),
            "queue" | "client_queue_time" => queue.clone(),
            "user_ttft" => user_ttft.clone(),
            "user_e2el" | "e2el_including_client_queue" => user_e2el.clone(),
            _ => continue,
        };
        let (mean, median, std, pcts) = ms_stats_of(values, &info.percentiles);
        o.insert(format!("mean_{metric}_ms"), mean);
        o.insert(format!("median_{metric}_ms"), median);
        o.insert(format!("std_{metric}_ms"), std);
        for (p, v) in pcts {
            o.insert(format!("p{}_{metric}_ms", percentile_word(p)), v);
        }
    }

    o
}

/// The metric names `--percentile-metrics` accepts.
pub const PERCENTILE_METRICS: &[&str] = &[
    "ttft",
    "tpot",
    "itl",
    "e2el",
    "queue",
    "user_ttft",
    "user_e2el",
    "client_queue_time",
    "e2el_including_client_queue",
];

/// The keys every vLLM result file opens with, in vLLM's order: the run's identity, its
/// `--metadata` pairs and the load it was offered, up to `duration`.
pub(crate) fn opening_keys(info: &VllmRunInfo) -> OrderedObject {
    let mut o = OrderedObject::new();
    o.insert("date", info.date.clone());
    o.insert("endpoint_type", info.backend.clone());
    o.insert("backend", info.backend.clone());
    o.insert("label", info.label.clone());
    o.insert("model_id", info.model_id.clone());
    o.insert("tokenizer_id", info.tokenizer_id.clone());
    o.insert("num_prompts", info.num_prompts);
    for (k, v) in &info.metadata {
        o.insert(k.clone(), v.clone());
    }
    o.insert(
        "request_rate",
        if info.request_rate.is_finite() {
            PyValue::from(info.request_rate)
        } else {
            PyValue::from("inf")
        },
    );
    o.insert("burstiness", info.burstiness);
    o.insert("max_concurrency", info.max_concurrency);
    if let Some((strategy, start, end)) = &info.ramp_up {
        o.insert("ramp_up_strategy", strategy.clone());
        o.insert("ramp_up_start_rps", *start);
        o.insert("ramp_up_end_rps", *end);
    }
    o.insert("duration", info.duration_s);
    o
}
