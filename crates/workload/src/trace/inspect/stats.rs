//! The figures of a trace, from its rows in any order.
//!
//! Per row only what the figures need stays in memory: the arrival (8 bytes) and both
//! lengths (4 bytes each, saturating), plus one set entry per distinct block id. Reuse
//! does not depend on row order: every full-block occurrence of an id but its first is a
//! reused block, so sorting is needed only for the arrival figures.

use std::collections::HashSet;

use servebench_metrics::units::NS_PER_S;

use super::{ArrivalStats, Histogram, LengthStats, PrefixReuse, RateSeries};

/// At most this many bars in the arrival-rate plot.
const MAX_RATE_BINS: usize = 600;
/// Bars in each length histogram.
const HISTOGRAM_BINS: usize = 40;
/// Plot bin widths (seconds) to choose from: the first that keeps the bars within
/// [`MAX_RATE_BINS`], so the axis reads in round units.
const RATE_BIN_SECONDS: [u64; 16] = [
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21_600, 86_400,
];

/// Rows folded in one at a time.
#[derive(Debug)]
pub(crate) struct Accumulator {
    block_size: u64,
    arrivals_ns: Vec<i64>,
    input: Vec<u32>,
    output: Vec<u32>,
    input_total: u64,
    output_total: u64,
    /// Rows whose arrival is earlier than an arrival on an earlier line.
    out_of_order: u64,
    latest_ns: Option<i64>,
    hashed_requests: u64,
    block_occurrences: u64,
    distinct_blocks: HashSet<u64>,
}

impl Accumulator {
    /// `block_size` (> 0) is the tokens one block id stands for.
    pub(crate) fn new(block_size: u64) -> Self {
        Self {
            block_size: block_size.max(1),
            arrivals_ns: Vec::new(),
            input: Vec::new(),
            output: Vec::new(),
            input_total: 0,
            output_total: 0,
            out_of_order: 0,
            latest_ns: None,
            hashed_requests: 0,
            block_occurrences: 0,
            distinct_blocks: HashSet::new(),
        }
    }

    pub(crate) fn push(&mut self, at_ns: i64, input: u64, output: u64, block_hashes: &[u64]) {
        match self.latest_ns {
            Some(latest) if at_ns < latest => self.out_of_order += 1,
            _ => self.latest_ns = Some(at_ns),
        }
        self.arrivals_ns.push(at_ns);
        self.input.push(u32::try_from(input).unwrap_or(u32::MAX));
        self.output.push(u32::try_from(output).unwrap_or(u32::MAX));
        self.input_total = self.input_total.saturating_add(input);
        self.output_total = self.output_total.saturating_add(output);
        if !block_hashes.is_empty() {
            self.hashed_requests += 1;
        }
        // Only whole blocks count: a prefix cache keeps full blocks, and replay shares
        // only those, so a trailing partial block is never reuse.
        let full = usize::try_from(input / self.block_size).unwrap_or(usize::MAX);
        for id in block_hashes.iter().take(full) {
            self.block_occurrences += 1;
            self.distinct_blocks.insert(*id);
        }
    }

    pub(crate) fn requests(&self) -> u64 {
        self.arrivals_ns.len() as u64
    }

    pub(crate) fn out_of_order(&self) -> u64 {
        self.out_of_order
    }

    /// Span in seconds, arrival figures and the plot series.
    pub(crate) fn arrivals(&mut self) -> (f64, ArrivalStats, RateSeries) {
        self.arrivals_ns.sort_unstable();
        arrival_stats(&self.arrivals_ns)
    }

    /// Input and output length figures, with their histograms.
    pub(crate) fn lengths(&mut self) -> ((LengthStats, Histogram), (LengthStats, Histogram)) {
        self.input.sort_unstable();
        self.output.sort_unstable();
        (
            (
                length_stats(&self.input, self.input_total),
                histogram(&self.input),
            ),
            (
                length_stats(&self.output, self.output_total),
                histogram(&self.output),
            ),
        )
    }

    /// The ideal prefix reuse, when any row named blocks.
    pub(crate) fn prefix_reuse(&self) -> Option<PrefixReuse> {
        if self.hashed_requests == 0 {
            return None;
        }
        let reused_blocks = self.block_occurrences - self.distinct_blocks.len() as u64;
        let reused_tokens = reused_blocks.saturating_mul(self.block_size);
        Some(PrefixReuse {
            block_size: self.block_size,
            requests_with_blocks: self.hashed_requests,
            full_blocks: self.block_occurrences,
            distinct_blocks: self.distinct_blocks.len() as u64,
            reused_tokens,
            prompt_tokens: self.input_total,
            ratio: if self.input_total == 0 {
                0.0
            } else {
                reused_tokens as f64 / self.input_total as f64
            },
        })
    }
}

fn arrival_stats(sorted_ns: &[i64]) -> (f64, ArrivalStats, RateSeries) {
    let (first, last) = match (sorted_ns.first(), sorted_ns.last()) {
        (Some(f), Some(l)) => (*f, *l),
        _ => {
            return (
                0.0,
                ArrivalStats::default(),
                RateSeries {
                    bin_seconds: 1,
                    requests_per_s: Vec::new(),
                },
            )
        }
    };
    let span_ns = (i128::from(last) - i128::from(first)) as f64;
    let span_s = span_ns / NS_PER_S as f64;
    let gaps = sorted_ns.len() - 1;
    let (mean_per_s, cv) = if gaps == 0 || span_ns == 0.0 {
        (None, None)
    } else {
        let mean_gap = span_ns / gaps as f64;
        let var = sorted_ns
            .windows(2)
            .map(|w| {
                let d = (i128::from(w[1]) - i128::from(w[0])) as f64 - mean_gap;
                d * d
            })
            .sum::<f64>()
            / gaps as f64;
        (
            Some(NS_PER_S as f64 / mean_gap),
            Some(var.sqrt() / mean_gap),
        )
    };

    // Peak one-second bucket, buckets counted from the first arrival.
    let mut peak = (0u64, 0u64);
    let mut current = (0u64, 0u64);
    for &t in sorted_ns {
        let bucket = offset_ns(first, t) / NS_PER_S;
        if bucket != current.0 {
            current = (bucket, 0);
        }
        current.1 += 1;
        if current.1 > peak.1 {
            peak = current;
        }
    }

    let span_whole_s = offset_ns(first, last) / NS_PER_S + 1;
    let bin_seconds = RATE_BIN_SECONDS
        .iter()
        .copied()
        .find(|b| span_whole_s.div_ceil(*b) <= MAX_RATE_BINS as u64)
        .unwrap_or_else(|| span_whole_s.div_ceil(MAX_RATE_BINS as u64));
    let bins = usize::try_from(span_whole_s.div_ceil(bin_seconds)).unwrap_or(MAX_RATE_BINS);
    let mut counts = vec![0u64; bins.max(1)];
    let bin_ns = bin_seconds.saturating_mul(NS_PER_S);
    for &t in sorted_ns {
        let i = usize::try_from(offset_ns(first, t) / bin_ns).unwrap_or(usize::MAX);
        if let Some(c) = counts.get_mut(i) {
            *c += 1;
        }
    }
    let series = RateSeries {
        bin_seconds,
        requests_per_s: counts
            .into_iter()
            .map(|c| c as f64 / bin_seconds as f64)
            .collect(),
    };
    (
        span_s,
        ArrivalStats {
            mean_per_s,
            peak_per_s: peak.1,
            peak_second: peak.0,
            interarrival_cv: cv,
        },
        series,
    )
}

/// `t - first` in ns; `t >= first` for sorted arrivals.
fn offset_ns(first: i64, t: i64) -> u64 {
    u64::try_from(i128::from(t) - i128::from(first)).unwrap_or(0)
}

/// `np.percentile(xs, p)` (method `linear`) of ascending `sorted`, non-empty.
fn percentile(sorted: &[u32], p: f64) -> f64 {
    let Some(&last) = sorted.last() else {
        return 0.0;
    };
    let index = (sorted.len() - 1) as f64 * (p / 100.0).clamp(0.0, 1.0);
    let lo = index.floor();
    let i = lo as usize;
    match sorted.get(i + 1) {
        Some(&b) => {
            // NumPy's `_lerp`, from the nearer end, so figures match its digits.
            let (a, b, t) = (f64::from(sorted[i]), f64::from(b), index - lo);
            if t >= 0.5 {
                b - (b - a) * (1.0 - t)
            } else {
                a + (b - a) * t
            }
        }
        None => f64::from(last),
    }
}

fn length_stats(sorted: &[u32], total: u64) -> LengthStats {
    LengthStats {
        mean: if sorted.is_empty() {
            0.0
        } else {
            total as f64 / sorted.len() as f64
        },
        p50: percentile(sorted, 50.0),
        p90: percentile(sorted, 90.0),
        p99: percentile(sorted, 99.0),
        max: sorted.last().copied().map_or(0, u64::from),
        total,
    }
}

/// Equal-width bins from 0 to the maximum, the last closed.
fn histogram(sorted: &[u32]) -> Histogram {
    let max = sorted.last().copied().map_or(0, u64::from);
    let width = (max / HISTOGRAM_BINS as u64 + 1).max(1);
    let bins = usize::try_from(max / width + 1).unwrap_or(HISTOGRAM_BINS);
    let mut counts = vec![0u64; bins];
    for &v in sorted {
        let i = usize::try_from(u64::from(v) / width).unwrap_or(usize::MAX);
        if let Some(c) = counts.get_mut(i.min(bins - 1)) {
            *c += 1;
        }
    }
    Histogram {
        bin_width: width,
        counts,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const S: i64 = NS_PER_S as i64;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn rate_peak_and_cv_of_hand_made_arrivals() {
        // Arrivals at 0, 0.5, 1, 3 s: gaps 0.5, 0.5, 2 → mean 1 s, population sd
        // sqrt((0.25 + 0.25 + 1) / 3) = sqrt(0.5).
        let mut acc = Accumulator::new(512);
        for t in [S / 2, 0, S, 3 * S] {
            acc.push(t, 10, 1, &[]);
        }
        assert_eq!(acc.out_of_order(), 1);
        let (span, a, series) = acc.arrivals();
        assert!(close(span, 3.0));
        assert!(close(a.mean_per_s.unwrap(), 1.0));
        assert!(close(a.interarrival_cv.unwrap(), 0.5f64.sqrt()));
        // Buckets [0,1): 2, [1,2): 1, [3,4): 1.
        assert_eq!((a.peak_per_s, a.peak_second), (2, 0));
        assert_eq!(series.bin_seconds, 1);
        assert_eq!(series.requests_per_s, vec![2.0, 1.0, 0.0, 1.0]);
    }

    #[test]
    fn evenly_spaced_arrivals_have_cv_zero_and_one_arrival_has_none() {
        let mut acc = Accumulator::new(512);
        for i in 0..5 {
            acc.push(i * S / 4, 1, 1, &[]);
        }
        let (span, a, _) = acc.arrivals();
        assert!(close(span, 1.0));
        assert!(close(a.mean_per_s.unwrap(), 4.0));
        assert!(close(a.interarrival_cv.unwrap(), 0.0));
        // 0, .25, .5, .75 in the first second, 1.0 in the next.
        assert_eq!((a.peak_per_s, a.peak_second), (4, 0));

        let mut one = Accumulator::new(512);
        one.push(7, 1, 1, &[]);
        let (span, a, series) = one.arrivals();
        assert_eq!(span, 0.0);
        assert_eq!(a.mean_per_s, None);
        assert_eq!(a.interarrival_cv, None);
        assert_eq!(a.peak_per_s, 1);
        assert_eq!(series.requests_per_s, vec![1.0]);
    }

    #[test]
    fn long_spans_use_wider_plot_bins() {
        let mut acc = Accumulator::new(512);
        // One arrival a minute for a day: 1441 seconds-worth of bins is too many at 1 s.
        for m in 0..=1440 {
            acc.push(m * 60 * S, 1, 1, &[]);
        }
        let (_, _, series) = acc.arrivals();
        assert_eq!(series.bin_seconds, 300);
        assert!(series.requests_per_s.len() <= MAX_RATE_BINS);
        assert!(close(series.requests_per_s[0], 5.0 / 300.0));
    }

    #[test]
    fn length_percentiles_follow_numpy_linear() {
        // np.percentile([1..=10], [50, 90, 99]) = 5.5, 9.1, 9.91.
        let mut acc = Accumulator::new(512);
        for (i, v) in [7u64, 3, 10, 1, 5, 9, 2, 8, 4, 6].into_iter().enumerate() {
            acc.push(i as i64, v, 11 - v, &[]);
        }
        let ((input, hist), (output, _)) = acc.lengths();
        assert!(close(input.p50, 5.5));
        assert!(close(input.p90, 9.1));
        assert!(close(input.p99, 9.91));
        assert_eq!(input.max, 10);
        assert_eq!(input.total, 55);
        assert!(close(input.mean, 5.5));
        assert_eq!(output.max, 10);
        assert_eq!(hist.counts.iter().sum::<u64>(), 10);
        assert_eq!(hist.bin_width, 1);
    }

    #[test]
    fn reuse_counts_full_blocks_seen_before() {
        // Block size 4. Row 1 (8 tokens): blocks 1, 2 new. Row 2 (10 tokens, 2 full
        // blocks): 1 seen, 3 new; its third id covers a partial block and never counts.
        // Row 3 (8 tokens): 1 and 2 seen. Row 4: no ids. Reused: 3 blocks × 4 = 12 of
        // 8 + 10 + 8 + 6 = 32 prompt tokens.
        let mut acc = Accumulator::new(4);
        acc.push(0, 8, 1, &[1, 2]);
        acc.push(1, 10, 1, &[1, 3, 2]);
        acc.push(2, 8, 1, &[1, 2]);
        acc.push(3, 6, 1, &[]);
        let r = acc.prefix_reuse().unwrap();
        assert_eq!(r.reused_tokens, 12);
        assert_eq!(r.prompt_tokens, 32);
        assert_eq!(r.full_blocks, 6);
        assert_eq!(r.distinct_blocks, 3);
        assert_eq!(r.requests_with_blocks, 3);
        assert!(close(r.ratio, 0.375));

        let mut none = Accumulator::new(4);
        none.push(0, 8, 1, &[]);
        assert!(none.prefix_reuse().is_none());
    }

    #[test]
    fn reuse_does_not_depend_on_row_order() {
        let rows: [(i64, u64, &[u64]); 3] = [(5, 8, &[1, 2]), (0, 8, &[1, 9]), (9, 4, &[1])];
        let mut a = Accumulator::new(4);
        let mut b = Accumulator::new(4);
        for (t, n, ids) in rows {
            a.push(t, n, 1, ids);
        }
        for (t, n, ids) in rows.iter().rev() {
            b.push(*t, *n, 1, ids);
        }
        assert_eq!(a.prefix_reuse(), b.prefix_reuse());
        assert_eq!(a.prefix_reuse().unwrap().reused_tokens, 8);
    }
}
