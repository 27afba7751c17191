//! The default workload matrix (rows A–F: README.md's quickstart, docs/matrix.md): the rows
//! a first look at a server needs, each with the question it answers.

use std::path::Path;

use super::plan::{Defaults, MatrixPlan, PrefixReuse, Rate, RowSpec, TargetTable};

/// Requests per second of row E ("steady"): about ten requests in flight on an H100-class
/// server (each takes about 2.5 s there), so the cap of 16 is exercised without queueing.
/// At 8 req/s the simulated H100 carried only 4.4: the row was overloaded by its own rules.
pub const ROW_E_RATE: f64 = 4.0;

fn row(
    id: &str,
    name: &str,
    hypothesis: &str,
    (input_len, output_len): (u64, u64),
    max_concurrency: Option<usize>,
    rate: f64,
    num_prompts: usize,
) -> RowSpec {
    RowSpec {
        id: id.to_owned(),
        name: name.to_owned(),
        hypothesis: hypothesis.to_owned(),
        input_len,
        output_len,
        max_concurrency,
        request_rate: Rate(rate),
        num_prompts,
        prefix_len: 0,
        prefix: PrefixReuse::Cold,
        trace: None,
        flags: Vec::new(),
    }
}

/// Rows A–E, and row F when a trace is given.
///
/// Request counts are sized so that each row's p99 rests on at least 40 requests (and TPOT
/// and ITL on thousands of tokens) at full scale, and the whole matrix takes about twelve
/// minutes against the real-time simulator of an H100; a quick run sends a tenth of them and
/// takes under two minutes.
pub fn default_matrix(trace: Option<&Path>) -> MatrixPlan {
    let mut rows = vec![
        row(
            "A",
            "single-user interactive baseline",
            "One user with short prompts and answers sees the server's best latency: TTFT is one \
             short prefill and TPOT is the bandwidth floor of one decode step.",
            (256, 128),
            Some(1),
            // One user who sends the next prompt when the answer arrives (a closed loop):
            // at a fixed 1 req/s, Poisson gaps shorter than a 0.9 s answer queued behind the
            // cap, and the row measured that queue (overloaded by its own rules).
            f64::INFINITY,
            100,
        ),
        row(
            "B",
            "long prefill",
            "An 8× longer prompt raises TTFT about in proportion to prefill compute, while TPOT \
             stays at row A's.",
            (2048, 128),
            Some(1),
            // One user who sends the next prompt when the answer arrives (a closed loop):
            // at a fixed 1 req/s, Poisson gaps shorter than a 0.9 s answer queued behind the
            // cap, and the row measured that queue (overloaded by its own rules).
            f64::INFINITY,
            100,
        ),
        row(
            "C",
            "single-stream decode",
            "One long answer at a time measures single-stream decode speed: TPOT near the \
             weights-bandwidth floor and E2EL about output_len × TPOT.",
            (256, 1024),
            Some(1),
            // One user sending the next request when the answer arrives (a closed loop): at a
            // fixed 1 req/s, 7 s answers queued behind the cap and the row was overloaded.
            f64::INFINITY,
            40,
        ),
        row(
            "D",
            "mixed workload at saturation",
            "Eight concurrent long requests with unlimited arrivals find where the mixed \
             workload saturates: throughput rises well above row C's while TPOT grows with \
             the batch and TTFT includes queueing.",
            (2048, 1024),
            Some(8),
            f64::INFINITY,
            160,
        ),
    ];
    let mut e = row(
        "E",
        "warm shared prefix",
        "When three quarters of a long prompt is a shared prefix already in the cache, TTFT \
         drops well below a cold prompt of the same length, since only the rest is prefilled.",
        (4096, 256),
        Some(16),
        ROW_E_RATE,
        400,
    );
    e.prefix_len = 3072;
    e.prefix = PrefixReuse::Warm;
    rows.push(e);
    if let Some(path) = trace {
        rows.push(RowSpec {
            id: "F".to_owned(),
            name: "production trace".to_owned(),
            hypothesis: "With production's length mix, prefix reuse and arrivals (on the trace's \
                         own clock, bursts included), the conclusions of rows A–E still hold."
                .to_owned(),
            input_len: 0,
            output_len: 0,
            max_concurrency: None,
            request_rate: Rate(f64::INFINITY),
            num_prompts: 500,
            prefix_len: 0,
            prefix: PrefixReuse::Cold,
            trace: Some(path.to_path_buf()),
            flags: Vec::new(),
        });
    }
    MatrixPlan {
        title: "Default workload matrix".to_owned(),
        target: TargetTable::default(),
        defaults: Defaults::default(),
        rows,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn rows_a_to_e_match_the_design_table_and_validate() {
        let m = default_matrix(None);
        m.validate().unwrap();
        let ids: Vec<&str> = m.rows.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["A", "B", "C", "D", "E"]);
        let d = &m.rows[3];
        assert_eq!(
            (d.input_len, d.output_len, d.max_concurrency),
            (2048, 1024, Some(8))
        );
        assert!(d.request_rate.0.is_infinite());
        assert_eq!(m.rows[4].prefix, PrefixReuse::Warm);
        assert!(m.rows.iter().all(|r| !r.hypothesis.is_empty()));
    }

    #[test]
    fn a_trace_adds_row_f() {
        let m = default_matrix(Some(Path::new("t.jsonl")));
        assert_eq!(m.rows.last().unwrap().id, "F");
        m.validate().unwrap();
    }
}
