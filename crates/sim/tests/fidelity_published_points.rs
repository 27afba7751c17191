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
    for o in &outcomes {
        assert!(!o.comparisons.is_empty(), "{} compared nothing", o.id);
    }
    assert!(
        misses.is_empty(),
        "points outside tolerance:\n{}",
        misses.join("\n")
    );
}
