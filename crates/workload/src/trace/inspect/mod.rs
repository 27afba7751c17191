//! What a trace's traffic looks like: request count, span, arrival rate and its
//! burstiness, length percentiles, and for traces that name prompt blocks the ideal
//! prefix reuse.
//!
//! Definitions:
//! - **span**: last arrival − first arrival, after sorting by arrival;
//! - **mean rate**: 1 / mean inter-arrival time = (requests − 1) / span;
//! - **peak rate**: the most arrivals in one 1-second bucket, buckets counted from the first
//!   arrival;
//! - **inter-arrival CV**: population standard deviation of the gaps between consecutive
//!   arrivals over their mean (1 for Poisson arrivals, 0 for evenly spaced ones, above 1 for
//!   bursts);
//! - **length percentiles**: NumPy's `linear` method, as everywhere in servebench;
//! - **ideal prefix reuse** (block-id traces such as Mooncake): tokens in full blocks whose id
//!   an earlier block of the trace already had, over all prompt tokens. One id stands for
//!   `block_size` tokens (the trace's chunk size: 512 for Mooncake). A trailing partial block is
//!   never counted, since a prefix cache stores only full blocks. This is the hit rate of a
//!   cache that never evicts.
//!
//! The file is streamed: memory grows by 16 bytes per row plus one entry per distinct block
//! id, so traces of millions of rows inspect in little memory. Rows out of arrival order are
//! sorted and counted.

pub(crate) mod rows;
mod stats;

use std::io::BufRead;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::WorkloadError;
use crate::trace::replay::MOONCAKE_BLOCK_TOKENS;
use crate::trace::TraceFormat;

use stats::Accumulator;

/// How to read the trace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InspectOptions {
    /// The format; detected from the first line when `None`.
    pub format: Option<TraceFormat>,
    /// Tokens per block id; `MOONCAKE_BLOCK_TOKENS` (512) when `None`.
    pub block_size: Option<u64>,
}

/// The figures of one trace, in the order `--json` prints them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceInspection {
    /// `azure`, `mooncake` or `burstgpt`.
    pub format: String,
    /// Rows in the trace.
    pub requests: u64,
    /// Rows whose arrival is earlier than a row above them; the figures sort them.
    pub out_of_order: u64,
    /// Last arrival − first arrival, in seconds.
    pub span_s: f64,
    /// Arrival rate and burstiness.
    pub arrivals: ArrivalStats,
    /// Prompt lengths in tokens.
    pub input_tokens: LengthStats,
    /// Output lengths in tokens.
    pub output_tokens: LengthStats,
    /// Ideal prefix reuse; `None` when no row names prompt blocks.
    pub prefix_reuse: Option<PrefixReuse>,
}

/// Arrival rate per second.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ArrivalStats {
    /// (requests − 1) / span; `None` with fewer than two distinct arrival times.
    pub mean_per_s: Option<f64>,
    /// Most arrivals in one 1-second bucket.
    pub peak_per_s: u64,
    /// That bucket's start, in whole seconds after the first arrival.
    pub peak_second: u64,
    /// Coefficient of variation of the inter-arrival times; `None` as for the mean.
    pub interarrival_cv: Option<f64>,
}

/// Percentiles of a length, in tokens.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LengthStats {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: u64,
    /// Sum over all rows.
    pub total: u64,
}

/// Ideal prefix reuse of a trace whose rows name their prompt blocks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrefixReuse {
    /// Tokens one block id stands for.
    pub block_size: u64,
    /// Rows with at least one block id.
    pub requests_with_blocks: u64,
    /// Full blocks over all rows.
    pub full_blocks: u64,
    /// Distinct ids among the full blocks.
    pub distinct_blocks: u64,
    /// (full blocks − distinct blocks) × block size.
    pub reused_tokens: u64,
    /// Sum of all prompt lengths.
    pub prompt_tokens: u64,
    /// reused_tokens / prompt_tokens.
    pub ratio: f64,
}

/// Arrivals per second over time, for a plot.
#[derive(Debug, Clone, PartialEq)]
pub struct RateSeries {
    /// Width of each bin in seconds (1 s unless the span needs more than 600 bins).
    pub bin_seconds: u64,
    /// Mean arrivals per second in each bin, from the first arrival on.
    pub requests_per_s: Vec<f64>,
}

/// Counts of a length in equal-width bins from 0.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    /// Tokens per bin: bin `i` holds lengths in `[i·w, (i+1)·w)`.
    pub bin_width: u64,
    /// Rows per bin.
    pub counts: Vec<u64>,
}

/// The figures plus the series behind the plots.
#[derive(Debug, Clone, PartialEq)]
pub struct Inspection {
    /// The figures.
    pub summary: TraceInspection,
    /// Arrival rate over time.
    pub rate: RateSeries,
    /// Prompt length histogram.
    pub input_histogram: Histogram,
    /// Output length histogram.
    pub output_histogram: Histogram,
}

/// Inspects the trace file at `path`.
pub fn inspect_file(path: &Path, opts: &InspectOptions) -> Result<Inspection, WorkloadError> {
    let file = std::fs::File::open(path).map_err(|e| WorkloadError::io(path, e))?;
    inspect_reader(std::io::BufReader::new(file), path, opts)
}

/// Inspects a trace read from `reader`; `path` only names the source in errors.
pub fn inspect_reader(
    reader: impl BufRead,
    path: &Path,
    opts: &InspectOptions,
) -> Result<Inspection, WorkloadError> {
    let block_size = opts.block_size.unwrap_or(MOONCAKE_BLOCK_TOKENS);
    if block_size == 0 {
        return Err(WorkloadError::InvalidConfig(
            "block size must be at least 1 token".to_owned(),
        ));
    }
    let mut acc = Accumulator::new(block_size);
    let format = rows::for_each_row(reader, path, opts.format, |r| {
        acc.push(r.at_ns, r.input_tokens, r.output_tokens, &r.block_hashes)
    })?;
    if acc.requests() == 0 {
        return Err(WorkloadError::Empty {
            path: path.to_path_buf(),
            reason: "empty trace: a header but no rows".to_owned(),
        });
    }
    Ok(finish(&mut acc, format))
}

fn finish(acc: &mut Accumulator, format: TraceFormat) -> Inspection {
    let (span_s, arrivals, rate) = acc.arrivals();
    let ((input_tokens, input_histogram), (output_tokens, output_histogram)) = acc.lengths();
    Inspection {
        summary: TraceInspection {
            format: format_name(format).to_owned(),
            requests: acc.requests(),
            out_of_order: acc.out_of_order(),
            span_s,
            arrivals,
            input_tokens,
            output_tokens,
            prefix_reuse: acc.prefix_reuse(),
        },
        rate,
        input_histogram,
        output_histogram,
    }
}

/// The name a format goes by in output.
pub fn format_name(format: TraceFormat) -> &'static str {
    match format {
        TraceFormat::Azure => "azure",
        TraceFormat::Mooncake => "mooncake",
        TraceFormat::BurstGpt => "burstgpt",
        TraceFormat::Vllm => "vllm",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn inspect(text: &str, opts: &InspectOptions) -> Result<Inspection, WorkloadError> {
        inspect_reader(text.as_bytes(), Path::new("t.jsonl"), opts)
    }

    #[test]
    fn mooncake_text_end_to_end() {
        // Block size 512: row 1 has 2 full blocks (0, 1), row 2 has 1 full block (0, seen)
        // and a partial one, row 3 has 2 full blocks (0, 1 both seen). Reused 3 × 512 of
        // 1100 + 600 + 1024 prompt tokens.
        let text = "{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 6, \"hash_ids\": [0, 1, 2]}\n\
                    {\"timestamp\": 2500, \"input_length\": 600, \"output_length\": 3, \"hash_ids\": [0, 3]}\n\
                    {\"timestamp\": 1000, \"input_length\": 1024, \"output_length\": 9, \"hash_ids\": [0, 1]}\n";
        let i = inspect(text, &InspectOptions::default()).unwrap();
        let s = &i.summary;
        assert_eq!(s.format, "mooncake");
        assert_eq!(s.requests, 3);
        assert_eq!(s.out_of_order, 1);
        assert_eq!(s.span_s, 2.5);
        assert_eq!(s.arrivals.mean_per_s, Some(0.8));
        let r = s.prefix_reuse.as_ref().unwrap();
        assert_eq!(r.reused_tokens, 3 * 512);
        assert_eq!(r.prompt_tokens, 2724);
        assert_eq!(s.input_tokens.max, 1100);
        assert_eq!(s.output_tokens.p50, 6.0);

        // With 100-token blocks every listed id is a full block: 0 seen twice, 1 once.
        let small = InspectOptions {
            block_size: Some(100),
            ..InspectOptions::default()
        };
        let r = inspect(text, &small).unwrap().summary.prefix_reuse.unwrap();
        assert_eq!(r.reused_tokens, 300);
    }

    #[test]
    fn a_header_without_rows_is_empty_and_block_size_zero_is_refused() {
        let err = inspect(
            "TIMESTAMP,ContextTokens,GeneratedTokens\n",
            &InspectOptions::default(),
        )
        .unwrap_err();
        assert!(matches!(err, WorkloadError::Empty { .. }), "{err}");
        let zero = InspectOptions {
            block_size: Some(0),
            ..InspectOptions::default()
        };
        assert!(inspect("{}", &zero).is_err());
    }

    #[test]
    fn json_keys_keep_their_order() {
        let i = inspect(
            "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n",
            &InspectOptions::default(),
        )
        .unwrap();
        let json = serde_json::to_string(&i.summary).unwrap();
        let keys = [
            "\"format\"",
            "\"requests\"",
            "\"out_of_order\"",
            "\"span_s\"",
            "\"arrivals\"",
            "\"input_tokens\"",
            "\"output_tokens\"",
            "\"prefix_reuse\"",
        ];
        let at: Vec<usize> = keys.iter().map(|k| json.find(k).unwrap()).collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{json}");
    }

    proptest! {
        #[test]
        fn figures_hold_together_on_any_rows(
            rows in proptest::collection::vec(
                (any::<i64>(), any::<u64>(), any::<u64>(),
                 proptest::collection::vec(0u64..20, 0..8)),
                1..60,
            ),
            block in 1u64..2000,
        ) {
            let mut acc = Accumulator::new(block);
            for (t, i, o, ids) in &rows {
                acc.push(*t, *i, *o, ids);
            }
            let n = rows.len() as u64;
            let out = finish(&mut acc, TraceFormat::Mooncake);
            let s = &out.summary;
            prop_assert_eq!(s.requests, n);
            prop_assert!(s.out_of_order < n);
            prop_assert!(s.span_s >= 0.0);
            prop_assert!(s.arrivals.peak_per_s >= 1 && s.arrivals.peak_per_s <= n);
            if let Some(cv) = s.arrivals.interarrival_cv {
                prop_assert!(cv.is_finite() && cv >= 0.0);
            }
            for l in [&s.input_tokens, &s.output_tokens] {
                prop_assert!(l.p50 <= l.p90 && l.p90 <= l.p99 && l.p99 <= l.max as f64);
            }
            if let Some(r) = &s.prefix_reuse {
                prop_assert!(r.ratio >= 0.0 && r.ratio.is_finite());
                prop_assert!(r.distinct_blocks <= r.full_blocks);
            }
            prop_assert!(out.rate.requests_per_s.len() <= 600);
            prop_assert_eq!(out.input_histogram.counts.iter().sum::<u64>(), n);
        }

        #[test]
        fn any_text_gives_figures_or_an_error(text in ".{0,400}") {
            let _ = inspect(&text, &InspectOptions::default());
        }

        #[test]
        fn any_bytes_give_figures_or_an_error(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = inspect_reader(&bytes[..], Path::new("b"), &InspectOptions::default());
        }

        #[test]
        fn near_valid_lines_give_figures_or_an_error_naming_the_line(
            lines in proptest::collection::vec(
                ("-?[0-9]{0,25}(\\.[0-9]{0,3})?|\"x\"|null", "[0-9]{0,22}|-1|1e400", "\\[[0-9, ]{0,30}\\]|\\{\\}"),
                1..20,
            ),
            format in prop_oneof![Just(None), Just(Some(TraceFormat::Azure)), Just(Some(TraceFormat::Mooncake))],
        ) {
            let text: String = lines
                .iter()
                .map(|(t, n, ids)| format!(
                    "{{\"timestamp\": {t}, \"input_length\": {n}, \"output_length\": 1, \"hash_ids\": {ids}}}\n"
                ))
                .collect();
            let opts = InspectOptions { format, block_size: Some(16) };
            if let Err(e) = inspect(&text, &opts) {
                prop_assert!(e.to_string().starts_with("t.jsonl"), "{}", e);
            }
        }
    }
}
