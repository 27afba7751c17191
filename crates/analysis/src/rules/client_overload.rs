//! Client overload: an open-loop group whose client could not send at the offered rate.
//! Its requests waited in the client queue, so every latency it reports from the send
//! describes a server running at its own pace, and its rate is no capacity figure.

use servebench_metrics::validity::{load_verdict, LoadVerdict};

use super::context::Ctx;
use super::finding::{Confidence, Finding, Rule, RuleCheck};
use crate::figures::RowFigures;

/// Groups whose runs sent short of their offered rate (see `servebench_metrics::validity`).
pub(super) fn client_overload(ctx: &Ctx<'_>) -> (RuleCheck, Vec<Finding>) {
    let mut c = RuleCheck::new(Rule::ClientOverload);
    let mut findings = Vec::new();
    for (i, row) in ctx.rows.iter().enumerate() {
        let Some(rate) = row
            .planned
            .request_rate
            .filter(|r| r.is_finite() && *r > 0.0)
        else {
            continue;
        };
        let runs = ctx.records.get(i).map_or(&[][..], Vec::as_slice);
        if runs.is_empty() {
            continue;
        }
        c.examined.push(row.id.clone());
        let worst = runs
            .iter()
            .map(|records| load_verdict(Some(rate), records))
            .filter(|l| l.overloaded)
            .max_by(|a, b| {
                a.queue_max_ms
                    .unwrap_or(0.0)
                    .total_cmp(&b.queue_max_ms.unwrap_or(0.0))
            });
        if let Some(load) = worst {
            findings.push(finding(row, rate, &load));
        }
    }
    if c.examined.is_empty() {
        c.note = Some("no open-loop group with records (a finite request rate)".into());
    }
    (c, findings)
}

fn finding(row: &RowFigures, rate: f64, load: &LoadVerdict) -> Finding {
    let achieved = load.achieved_rate.unwrap_or(f64::NAN);
    let mut summary = format!(
        "{}: offered {rate:.2} req/s, achieved {achieved:.2} req/s",
        row.label
    );
    if let Some(q) = load.queue_max_ms {
        summary.push_str(&format!(
            "; requests waited up to {:.1} s in the client queue",
            q / 1e3
        ));
    }
    summary.push_str(
        "; its latencies from the send hide that wait, and its rate is no capacity figure",
    );
    let mut evidence = vec![
        format!("offered {rate:.2} req/s"),
        format!("achieved {achieved:.2} req/s"),
    ];
    if let Some(s) = load.reference_rate() {
        evidence.push(format!("scheduled {s:.2} req/s"));
    }
    if let Some(q) = load.queue_p99_ms {
        evidence.push(format!("p99 client queue {:.1} s", q / 1e3));
    }
    if let Some(g) = load.queue_growth {
        evidence.push(format!("queue grew {g:.2} s per s"));
    }
    let cap = row.planned.max_concurrency.map_or_else(String::new, |c| {
        format!(" (or --max-concurrency above {c})")
    });
    Finding {
        rule: Rule::ClientOverload,
        regime: "offered load above what the server (or the concurrency cap) sustains".into(),
        rows: vec![row.id.clone()],
        summary,
        evidence,
        confidence: Confidence::High,
        confidence_reason: "measured directly: send times against the schedule".into(),
        confirm_with: "user TTFT (from the intended send time) against TTFT: the gap is the \
                       client queue"
            .into(),
        first_response: format!(
            "treat {} as past capacity: never its rate as an operating point or per-GPU figure",
            row.id
        ),
        next_experiment: format!(
            "servebench sweep --request-rate auto on row {}{cap}: find the rate the server sustains \
             and measure below it",
            row.id
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::testing::{record, row};
    use super::*;
    use servebench_metrics::RequestRecord;

    /// 40 requests due every `gap_ms`, sent every `sent_gap_ms` (a slower client queues).
    fn records(gap_ms: u64, sent_gap_ms: u64) -> Vec<RequestRecord> {
        (0..40)
            .map(|i| {
                let mut r = record(i, i * sent_gap_ms, 50);
                r.intended = i * gap_ms * 1_000_000;
                r.released = r.intended;
                r
            })
            .collect()
    }

    fn check(rate: Option<f64>, recs: &[RequestRecord]) -> (RuleCheck, Vec<Finding>) {
        let mut r = row("D");
        r.planned.request_rate = rate;
        r.planned.max_concurrency = Some(8);
        let rows = [r];
        let records: Vec<Vec<&[RequestRecord]>> = vec![vec![recs]];
        let ctx = Ctx {
            rows: &rows,
            records: &records,
            deployment: None,
        };
        client_overload(&ctx)
    }

    #[test]
    fn fires_when_the_client_sends_short_of_the_offered_rate() {
        // Due every 62.5 ms (16 req/s), sent every 1064 ms (0.94 req/s).
        let recs = records(62, 1064);
        let (c, f) = check(Some(16.0), &recs);
        assert_eq!(c.examined, vec!["D"]);
        assert_eq!(f.len(), 1);
        let s = &f[0].summary;
        assert!(
            s.contains("offered 16.00 req/s, achieved 0.94 req/s"),
            "{s}"
        );
        assert!(s.contains("waited up to 39.1 s in the client queue"), "{s}");
        assert!(f[0].next_experiment.contains("--request-rate auto"));
        assert!(f[0].next_experiment.contains("--max-concurrency above 8"));
    }

    #[test]
    fn stays_quiet_when_the_client_keeps_up() {
        let recs = records(1000, 1000);
        assert!(check(Some(1.0), &recs).1.is_empty());
        // 4 % short of the schedule is within the 5 % tolerance.
        let recs = records(1000, 1040);
        assert!(check(Some(1.0), &recs).1.is_empty());
        // 6 % short is not.
        let recs = records(1000, 1064);
        assert_eq!(check(Some(1.0), &recs).1.len(), 1);
    }

    #[test]
    fn an_unlimited_rate_is_never_overloaded() {
        let recs = records(0, 1000);
        let (c, f) = check(None, &recs);
        assert!(f.is_empty());
        assert!(c.examined.is_empty() && c.note.is_some());
    }
}
