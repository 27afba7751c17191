//! Properties every percentile must have, whatever the sample.
#![allow(clippy::unwrap_used)]

use proptest::prelude::*;
use servebench_metrics::stats;

fn sample() -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(-1e9f64..1e9, 1..300)
}

proptest! {
    #[test]
    fn percentile_is_monotone_bounded_and_exact_at_the_ends(
        xs in sample(),
        mut ps in prop::collection::vec(0.0f64..=100.0, 2..20),
    ) {
        let sorted = stats::sorted_copy(&xs);
        let (min, max) = (sorted[0], sorted[sorted.len() - 1]);
        prop_assert_eq!(stats::percentile_sorted(&sorted, 0.0), Some(min));
        prop_assert_eq!(stats::percentile_sorted(&sorted, 100.0), Some(max));
        ps.sort_by(f64::total_cmp);
        let mut last = f64::NEG_INFINITY;
        for p in ps {
            let v = stats::percentile_sorted(&sorted, p).unwrap();
            prop_assert!(v >= min && v <= max, "p{} = {} outside [{}, {}]", p, v, min, max);
            prop_assert!(v >= last, "p{} = {} < previous {}", p, v, last);
            last = v;
        }
    }

    #[test]
    fn ci_brackets_the_estimate(xs in sample(), p in 0.0f64..=100.0) {
        let sorted = stats::sorted_copy(&xs);
        let s = stats::percentile_stat(&sorted, p).unwrap();
        if let Some(lo) = s.ci_low {
            prop_assert!(lo <= s.value);
        }
        if let Some(hi) = s.ci_high {
            prop_assert!(hi >= s.value);
        }
        prop_assert_eq!(s.unstable, stats::is_unstable(xs.len(), p));
    }

    #[test]
    fn median_equals_the_50th_percentile(xs in sample()) {
        let m = stats::median(&xs).unwrap();
        let p50 = stats::percentile(&xs, 50.0).unwrap();
        prop_assert!((m - p50).abs() <= 1e-9 * m.abs().max(1.0));
    }
}
