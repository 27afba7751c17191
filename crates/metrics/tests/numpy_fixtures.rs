//! `stats` against NumPy's own output (fixtures/numpy_stats.json, made by fixtures/gen.py).
//! The comparison is bit-for-bit: vLLM parity means the same floats, not just close ones.
#![allow(clippy::unwrap_used)]

use serde::Deserialize;
use servebench_metrics::stats;

#[derive(Deserialize)]
struct Fixture {
    numpy_version: String,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    values: Vec<f64>,
    mean: f64,
    median: f64,
    std: f64,
    percentiles: Vec<(f64, f64)>,
}

fn fixture() -> Fixture {
    let text = include_str!("fixtures/numpy_stats.json");
    serde_json::from_str(text).unwrap()
}

fn same(what: &str, case: &str, got: Option<f64>, want: f64) {
    let got = got.unwrap();
    assert!(
        got.to_bits() == want.to_bits(),
        "{case}: {what}: got {got:e}, NumPy {want:e}"
    );
}

#[test]
fn matches_numpy_bit_for_bit() {
    let f = fixture();
    assert!(f.cases.len() >= 15, "numpy {}", f.numpy_version);
    for c in &f.cases {
        same("mean", &c.name, stats::mean(&c.values), c.mean);
        same("std", &c.name, stats::std_dev(&c.values), c.std);
        same("median", &c.name, stats::median(&c.values), c.median);
        let sorted = stats::sorted_copy(&c.values);
        for &(p, want) in &c.percentiles {
            same(
                &format!("p{p}"),
                &c.name,
                stats::percentile_sorted(&sorted, p),
                want,
            );
        }
    }
}
