//! Every published real-GPU point of the fixture (crates/sim/fidelity/published_points.toml)
//! runs in virtual time, and each of its figures must land within the point's tolerance
//! (±15 % unless the point states the honest bound it reaches today; docs/simulator.md says
//! which points miss and why). `servebench sim fidelity` prints the same table.
#![allow(clippy::unwrap_used)]

use servebench_sim::fidelity::{markdown_table, run_all, Fixture};

#[test]
fn published_points_are_within_their_tolerance() {
    let fixture = Fixture::builtin().unwrap();
    let outcomes = run_all(&fixture).unwrap();
    eprintln!("{}", markdown_table(&outcomes));
    assert_eq!(outcomes.len(), fixture.points.len());
    let misses: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.passes())
        .map(|o| {
            format!(
                "{}: worst error {:.1} % > ±{:.0} %",
                o.id,
                o.worst_error() * 100.0,
                o.tolerance * 100.0
            )
        })
        .collect();
    for o in &outcomes {
        assert!(!o.comparisons.is_empty(), "{} compared nothing", o.id);
    }
    assert!(misses.is_empty(), "points outside tolerance:\n{}", misses.join("\n"));
}
