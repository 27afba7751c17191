//! Where a request's time went: the phase table of a run (docs/metrics.md "Where a
//! request's time went").

use servebench_metrics::PhaseSummary;

use super::tables::Table;

fn cell(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_owned(), |x| format!("{x:.2}"))
}

/// One line per phase that some request has: what it covers, how many requests, mean, p50,
/// p90, p99 and max in ms.
pub fn phase_table(s: &PhaseSummary) -> Table {
    let columns = [
        ("Phase", false),
        ("From → to", false),
        ("Requests", true),
        ("Mean (ms)", true),
        ("p50 (ms)", true),
        ("p90 (ms)", true),
        ("p99 (ms)", true),
        ("Max (ms)", true),
    ];
    Table {
        headers: columns.iter().map(|(h, _)| (*h).to_owned()).collect(),
        numeric: columns.iter().map(|(_, n)| *n).collect(),
        rows: s
            .named()
            .iter()
            .filter(|(_, p)| p.n > 0)
            .map(|(name, p)| {
                vec![
                    (*name).to_owned(),
                    PhaseSummary::describe(name).to_owned(),
                    p.n.to_string(),
                    cell(p.mean_ms),
                    cell(p.p50_ms),
                    cell(p.p90_ms),
                    cell(p.p99_ms),
                    cell(p.max_ms),
                ]
            })
            .collect(),
    }
}

/// The sentence under the table: connection reuse.
pub fn reuse_note(s: &PhaseSummary) -> Option<String> {
    let known = s.reused + s.new_connections;
    (known > 0).then(|| {
        format!(
            "{} of {known} requests went out on a reused connection; {} opened theirs (or took one opened ahead of the run). On HTTP/2 the streams share one connection and only the headers are stamped.",
            s.reused, s.new_connections
        )
    })
}
