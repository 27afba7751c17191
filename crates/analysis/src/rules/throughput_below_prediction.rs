//! Throughput below the prediction: batched groups' output throughput far under the
//! roofline's at the same concurrency points outside the memory system.

use std::collections::BTreeSet;

use super::context::Ctx;
use super::finding::{Confidence, Finding, Rule, RuleCheck};
use super::wording::{ms, tok_s};
use crate::bandwidth::bandwidth_check;
use crate::explained::format_quantity;
use crate::thresholds::{KEPT_UP, THROUGHPUT_BELOW, THROUGHPUT_FAR_BELOW};

/// Batched groups' output throughput against the roofline's at the same concurrency.
pub(super) fn throughput_below_prediction(
    ctx: &Ctx<'_>,
    kv_rows: &BTreeSet<usize>,
) -> (RuleCheck, Vec<Finding>) {
    let mut c = RuleCheck::new(Rule::ThroughputBelowPrediction);
    let mut findings = Vec::new();
    let Some(d) = ctx.deployment else {
        c.note = Some("no GPU and model known: no throughput prediction".into());
        return (c, findings);
    };
    for (i, row) in ctx.rows.iter().enumerate() {
        if row.is_single_stream() {
            continue;
        }
        c.examined.push(row.id.clone());
        if kv_rows.contains(&i) {
            continue;
        }
        // An open-loop run the server kept up with delivers the offered load whatever the
        // GPU could do: only a closed loop, or a server falling behind its arrivals, shows
        // its capacity.
        if let Some(rate) = row.planned.request_rate.filter(|r| r.is_finite()) {
            if row.request_throughput >= KEPT_UP * rate {
                continue;
            }
        }
        let Some(b) = bandwidth_check(row, d) else {
            continue;
        };
        let predicted = f64::from(b.batch) * 1e3 / b.predicted_tpot_ms;
        let measured = row.output_throughput;
        if predicted.is_nan() || predicted <= 0.0 || measured >= THROUGHPUT_BELOW * predicted {
            continue;
        }
        let share = measured / predicted;
        findings.push(Finding {
            rule: Rule::ThroughputBelowPrediction,
            regime: "non-memory bottleneck".into(),
            rows: vec![row.id.clone()],
            summary: format!(
                "{}: {} where the roofline gives {} at the same concurrency ({:.0} % of it)",
                row.label,
                tok_s(measured),
                tok_s(predicted),
                share * 100.0
            ),
            evidence: vec![
                format!(
                    "measured output throughput {} with {} requests in flight on average ({} decoding together)",
                    tok_s(measured),
                    format_quantity(row.concurrency, ""),
                    b.batch
                ),
                format!(
                    "predicted step of {} decodes at context {} plus {} prefill tokens: {}, i.e. {}",
                    b.batch,
                    b.context_tokens,
                    b.prefill_tokens_per_step,
                    ms(b.predicted_tpot_ms),
                    tok_s(predicted)
                ),
                format!(
                    "measured mean TPOT {} ({:+.0} % against the predicted step)",
                    ms(b.measured_tpot_ms),
                    b.gap_pct
                ),
            ],
            confidence: if share < THROUGHPUT_FAR_BELOW {
                Confidence::High
            } else {
                Confidence::Medium
            },
            confidence_reason: if share < THROUGHPUT_FAR_BELOW {
                "the shortfall is far beyond the roofline model's ±20 %".into()
            } else {
                "the shortfall exceeds the model's error, but not by a wide margin".into()
            },
            confirm_with: "the server's step time against the roofline (sim:step_duration_seconds; vLLM iteration timings), CPU use of the server process, GPU utilisation".into(),
            first_response: "find the bottleneck outside the memory system: CPU-bound scheduling or detokenisation (async scheduling), a low --max-num-seqs, the network or the client".into(),
            next_experiment: format!(
                "re-run {} with only the concurrency doubled (≈{} in flight): throughput that does not move confirms a limit outside the GPU's bandwidth",
                row.id,
                format_quantity((row.concurrency * 2.0).round(), "")
            ),
        });
    }
    if c.examined.is_empty() && c.note.is_none() {
        c.note = Some("no batched group (all at concurrency 1)".into());
    }
    (c, findings)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::testing::{batched, fired, h100_8b, row, run};
    use super::*;
    use crate::figures::RowFigures;

    /// A closed-loop row at concurrency 8 delivering `share` of the roofline's throughput.
    fn delivering(share: f64) -> RowFigures {
        let d = h100_8b();
        let mut r = batched("D", 8.0);
        let b = bandwidth_check(&r, &d).unwrap();
        r.output_throughput = share * f64::from(b.batch) * 1e3 / b.predicted_tpot_ms;
        r
    }

    #[test]
    fn far_below_the_prediction_fires() {
        let d = h100_8b();
        let (c, f) = run(&[delivering(0.2)], Some(&d), |ctx| {
            throughput_below_prediction(ctx, &BTreeSet::new())
        });
        assert_eq!(fired(&f), vec![vec!["D".to_string()]]);
        assert_eq!(f[0].confidence, Confidence::High);
        assert_eq!(c.examined, vec!["D".to_string()]);
        let (_, f) = run(&[delivering(0.4)], Some(&d), |ctx| {
            throughput_below_prediction(ctx, &BTreeSet::new())
        });
        assert_eq!(f[0].confidence, Confidence::Medium);
    }

    #[test]
    fn at_the_threshold_it_stays_silent() {
        let d = h100_8b();
        let none = BTreeSet::new();
        let at = |share: f64| {
            run(&[delivering(share)], Some(&d), |ctx| {
                throughput_below_prediction(ctx, &none)
            })
            .1
        };
        assert!(at(THROUGHPUT_BELOW).is_empty());
        assert_eq!(at(THROUGHPUT_BELOW - 0.01).len(), 1);
        assert!(at(1.0).is_empty());
    }

    #[test]
    fn an_open_loop_that_kept_up_or_a_row_left_to_kv_exhaustion_is_not_judged() {
        let d = h100_8b();
        let mut r = delivering(0.2);
        // It served all of the 1 req/s it was offered.
        r.planned.request_rate = Some(r.request_throughput);
        assert!(run(&[r], Some(&d), |ctx| {
            throughput_below_prediction(ctx, &BTreeSet::new())
        })
        .1
        .is_empty());
        let kv = BTreeSet::from([0]);
        assert!(run(&[delivering(0.2)], Some(&d), |ctx| {
            throughput_below_prediction(ctx, &kv)
        })
        .1
        .is_empty());
    }

    #[test]
    fn single_streams_are_left_to_decode_speed() {
        let d = h100_8b();
        let (c, f) = run(&[row("A")], Some(&d), |ctx| {
            throughput_below_prediction(ctx, &BTreeSet::new())
        });
        assert!(f.is_empty());
        assert_eq!(
            c.note.as_deref(),
            Some("no batched group (all at concurrency 1)")
        );
    }
}
