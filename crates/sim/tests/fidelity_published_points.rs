//! Every published real-GPU point of the fixture (crates/sim/fidelity/published_points.toml)
//! runs in virtual time, and each of its figures must land within the point's tolerance
//! (±15 % unless the point states the honest bound it reaches today; docs/simulator.md says
//! which points miss and why). `servebench sim fidelity` prints the same table.
//!
//! Each source is also predicted with the factors fitted on it reverted (leave one source out,
//! docs/simulator.md §12.3), and that held-out error must not rise over the committed baseline
//! (crates/sim/tests/fixtures/fidelity_heldout_baseline.json, written by
//! `servebench sim fidelity --write-baseline`): in-sample error alone rewards fitting a factor
//! per source, held-out error does not.
#![allow(clippy::unwrap_used)]

use std::sync::OnceLock;

use servebench_sim::fidelity::heldout::{
    check_baseline, run_loso, Baseline, FittedFactors, Loso, BASELINE_COMMAND, OVERALL_RISE_PP,
    SOURCE_RISE_PP,
};
use servebench_sim::fidelity::{markdown_table, Fixture};

/// One run of the fixture shared by both tests (it takes most of this file's time).
fn loso() -> &'static Loso {
    static LOSO: OnceLock<Loso> = OnceLock::new();
    LOSO.get_or_init(|| {
        let fixture = Fixture::builtin().unwrap();
        let loso = run_loso(&fixture, &FittedFactors::builtin().unwrap()).unwrap();
        assert_eq!(loso.in_sample.len(), fixture.points.len());
        loso
    })
}

#[test]
fn published_points_are_within_their_tolerance() {
    let outcomes = &loso().in_sample;
    eprintln!("{}", markdown_table(outcomes));
    let misses: Vec<String> = outcomes
        .iter()
        .flat_map(|o| o.comparisons.iter().map(move |c| (o, c)))
        .filter(|(_, c)| !c.passes())
        .map(|(o, c)| {
            format!(
                "{} {}: published {}, simulated {:.1}, error {:+.1} % outside ±{:.0} %",
                o.id,
                c.metric,
                c.published,
                c.simulated,
                c.error() * 100.0,
                c.tolerance * 100.0
            )
        })
        .collect();
    for o in outcomes {
        assert!(!o.comparisons.is_empty(), "{} compared nothing", o.id);
    }
    assert!(
        misses.is_empty(),
        "points outside tolerance:\n{}",
        misses.join("\n")
    );
}

#[test]
fn held_out_error_does_not_rise_over_the_baseline() {
    let loso = loso();
    eprintln!("{}", loso.markdown());
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/fidelity_heldout_baseline.json"
    );
    let baseline = Baseline::parse(&std::fs::read_to_string(path).unwrap(), path).unwrap();
    let check = check_baseline(&loso.baseline(), &baseline);
    assert!(
        check.mismatches.is_empty(),
        "the fixture's sources or figures differ from the held-out baseline, so it cannot be \
         compared; regenerate it from the repository root with `{BASELINE_COMMAND}` and say in \
         the commit why the figures changed:\n{}",
        check.mismatches.join("\n")
    );
    assert!(
        check.rises.is_empty(),
        "held-out error rose: a change that lowers in-sample error and raises held-out error is a \
         regression (allowed: {OVERALL_RISE_PP} points overall, {SOURCE_RISE_PP} per source; a \
         deliberate change regenerates the baseline with `{BASELINE_COMMAND}`):\n{}",
        check.rises.join("\n")
    );
    for line in &check.falls {
        eprintln!("held-out error fell; `{BASELINE_COMMAND}` would tighten the baseline: {line}");
    }
}
