//! The validity verdict in words: the terminal block after a run, and the short forms the
//! report tables use (offered against achieved rate, the status label).

use std::fmt::Write as _;

use servebench_metrics::validity::{LoadVerdict, RunValidity};

/// `4 → 0.94 req/s`: offered rate against the rate actually sent (`inf` when unlimited).
pub fn rate_cell(load: &LoadVerdict) -> String {
    // At an unlimited rate every request is due at once: the rate the client sent them at is
    // its dispatch speed, not a load the server achieved.
    match (load.offered_rate, load.achieved_rate) {
        (None, _) => "inf".to_owned(),
        (Some(r), Some(a)) => format!("{r:.2} → {a:.2}"),
        (Some(r), None) => format!("{r:.2}"),
    }
}

/// The status label with `, overloaded` when the client fell behind its schedule.
pub fn status_cell(v: &RunValidity) -> String {
    let label = v.verdict.status.label();
    if v.overloaded() {
        format!("{label} (overloaded)")
    } else {
        label.to_owned()
    }
}

/// The verdict block of the terminal summary: one line with the status and every reason,
/// then offered against achieved load and the warm-up found.
pub fn verdict_block(v: &RunValidity) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Verdict: {}", v.verdict);
    if let Some(l) = &v.load {
        match l.offered_rate {
            // Every request due at once: the client's send rate would only be its dispatch
            // speed, so it is not shown as an achieved load.
            None => out.push_str("Load: offered unlimited (every request due at once)"),
            Some(r) => {
                let achieved = l
                    .achieved_rate
                    .map_or_else(|| "-".to_owned(), |a| format!("{a:.2} req/s"));
                let _ = write!(out, "Load: offered {r:.2} req/s, achieved {achieved}");
            }
        }
        if let Some(q) = l.queue_max_ms.filter(|q| *q > 0.0) {
            let _ = write!(out, ", client queue up to {:.1} s", q / 1e3);
        }
        if let Some(b) = l.server.filter(|b| b.behind) {
            let _ = write!(
                out,
                " — OVERLOADED: the server queued the arrivals itself (TTFT {:.1} s → {:.1} s; {:.0} s of arrivals served in {:.0} s)",
                b.ttft_start_ms / 1e3,
                b.ttft_end_ms / 1e3,
                b.arrival_span_s,
                b.serve_span_s
            );
        } else if l.overloaded {
            out.push_str(" — OVERLOADED: users also waited the queue time (see user TTFT)");
        }
        out.push('\n');
    }
    if let Some(s) = &v.steady_state {
        let what = match s.mode {
            servebench_metrics::SteadyStateMode::Auto if s.excluded_s > 0.0 => {
                format!(
                    "{:.0} s warm-up excluded from the steady window",
                    s.excluded_s
                )
            }
            // A short series reaches the half-way boundary by chance (40 % of 20-sample
            // series): saying "no steady state" there would be false more often than not.
            servebench_metrics::SteadyStateMode::Auto
                if !s.steady
                    && s.in_flight.len.min(s.output_throughput.len)
                        < servebench_metrics::MSER_TRUSTED_LEN =>
            {
                format!(
                    "too short to tell a warm-up from noise ({:.0} s; MSER-5 needs about {:.0} s); nothing excluded",
                    s.in_flight.len.min(s.output_throughput.len) as f64 * s.bucket_s,
                    servebench_metrics::MSER_TRUSTED_LEN as f64 * s.bucket_s
                )
            }
            servebench_metrics::SteadyStateMode::Auto if !s.steady => {
                "no steady state reached in the first half; nothing excluded".to_owned()
            }
            servebench_metrics::SteadyStateMode::Auto => "no warm-up transient found".to_owned(),
            servebench_metrics::SteadyStateMode::Off => format!(
                "{:.0} s warm-up should have been excluded (--steady-state off)",
                s.warmup_s
            ),
        };
        let _ = writeln!(out, "Steady state (MSER-5): {what}");
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use servebench_metrics::validity::{Reason, Verdict, VerdictStatus};

    fn overloaded() -> RunValidity {
        let load = LoadVerdict {
            offered_rate: Some(16.0),
            scheduled_rate: Some(16.0),
            achieved_rate: Some(0.94),
            queue_p99_ms: Some(150_000.0),
            queue_max_ms: Some(153_000.0),
            queue_growth: Some(15.0),
            overloaded: true,
            server: None,
        };
        RunValidity {
            verdict: Verdict {
                status: VerdictStatus::NotSteady,
                reasons: vec![Reason::Overloaded {
                    reference_rate: Some(16.0),
                    achieved_rate: Some(0.94),
                    queue_max_ms: Some(153_000.0),
                    queue_growth: Some(15.0),
                    server: None,
                }],
                needed: None,
            },
            load: Some(load),
            steady_state: None,
        }
    }

    /// A steady-state block for a series of `len` one-second samples that MSER could not
    /// call steady.
    fn unsteady(len: usize) -> RunValidity {
        let t = servebench_metrics::Truncation {
            len,
            index: len / 2,
            steady_mean: Some(1.0),
            steady: false,
        };
        RunValidity {
            verdict: Verdict {
                status: VerdictStatus::Valid,
                reasons: Vec::new(),
                needed: None,
            },
            load: None,
            steady_state: Some(servebench_metrics::SteadyState {
                mode: servebench_metrics::SteadyStateMode::Auto,
                bucket_s: 1.0,
                in_flight: t,
                output_throughput: t,
                warmup_s: len as f64 / 2.0,
                excluded_s: 0.0,
                steady: false,
            }),
        }
    }

    /// A 21 s run is too short for MSER to tell a warm-up from noise: it says so instead of
    /// claiming the run never reached a steady state (which chance makes false in 40 % of
    /// 20-sample series); a long series still gets the claim.
    #[test]
    fn a_short_series_is_not_called_unsteady() {
        let short = verdict_block(&unsteady(21));
        assert!(
            short.contains("too short to tell a warm-up from noise (21 s"),
            "{short}"
        );
        assert!(!short.contains("no steady state reached"), "{short}");
        let long = verdict_block(&unsteady(300));
        assert!(
            long.contains("no steady state reached in the first half"),
            "{long}"
        );
    }

    #[test]
    fn an_overloaded_run_says_so_with_both_rates() {
        let v = overloaded();
        let block = verdict_block(&v);
        assert!(
            block.starts_with("Verdict: NOT STEADY: overloaded"),
            "{block}"
        );
        assert!(
            block.contains("offered 16.00 req/s, achieved 0.94 req/s"),
            "{block}"
        );
        assert!(block.contains("OVERLOADED"), "{block}");
        assert_eq!(rate_cell(v.load.as_ref().unwrap()), "16.00 → 0.94");
        assert_eq!(status_cell(&v), "NOT STEADY (overloaded)");
    }
}
