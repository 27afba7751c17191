//! `decision.md` of a `sweep serve`: every combination on every axis (mean over its runs),
//! its change against the baseline tested for significance as `compare` tests (per-request
//! samples where the runs kept them) and held against the baseline's run-to-run noise, the
//! verdict against `--slo`, and the accepted configuration.

use std::fmt::Write as _;

use serde_json::Value;
use servebench_analysis::frontier::Slo;

use super::runner::CombRecord;

/// An axis of the table: the result key, its heading, whether higher is better, and the
/// latency metric whose per-request samples test it.
const AXES: [(&str, &str, bool, Option<&str>); 6] = [
    ("output_throughput", "output tok/s", true, None),
    ("request_throughput", "req/s", true, None),
    ("p99_ttft_ms", "p99 TTFT ms", false, Some("ttft")),
    ("p99_tpot_ms", "p99 TPOT ms", false, Some("tpot")),
    ("p99_itl_ms", "p99 ITL ms", false, Some("itl")),
    ("p99_e2el_ms", "p99 E2EL ms", false, Some("e2el")),
];

/// Mean and sample standard deviation of one result key over a combination's runs.
fn stat(runs: &[Value], key: &str) -> Option<(f64, f64, usize)> {
    let v: Vec<f64> = runs
        .iter()
        .filter_map(|r| r.get(key).and_then(Value::as_f64))
        .filter(|x| x.is_finite())
        .collect();
    if v.is_empty() {
        return None;
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let sd = if v.len() > 1 {
        (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    Some((mean, sd, v.len()))
}

/// vLLM's result key of an objective's percentile (`p99_ttft_ms`, `p99.9_ttft_ms`).
fn slo_key(slo: &Slo) -> String {
    let p = slo.percentile.unwrap_or(100.0);
    let p = if p.fract() == 0.0 {
        format!("{}", p as i64)
    } else {
        format!("{p}")
    };
    format!("p{p}_{}_ms", slo.metric.as_str())
}

/// The objectives a combination misses (with its value), or why it cannot be judged.
fn misses(c: &CombRecord, slos: &[Slo]) -> Vec<String> {
    slos.iter()
        .filter_map(|s| {
            let key = slo_key(s);
            match stat(&c.runs, &key) {
                Some((m, _, _)) if s.admits(m) => None,
                Some((m, _, _)) => Some(format!("{key} {m:.1} > {} ms", s.threshold_ms)),
                None => Some(format!("{key} not in the results")),
            }
        })
        .collect()
}

fn failed_requests(c: &CombRecord) -> f64 {
    c.runs
        .iter()
        .filter_map(|r| r.get("failed").and_then(Value::as_f64))
        .sum()
}

fn label(c: &CombRecord) -> String {
    match (c.serve_name.is_empty(), c.bench_name.is_empty()) {
        (false, false) => format!("{} × {}", c.serve_name, c.bench_name),
        (false, true) => c.serve_name.clone(),
        (true, false) => c.bench_name.clone(),
        (true, true) => "(as given)".to_owned(),
    }
}

/// The per-run values of one result key.
fn values(runs: &[Value], key: &str) -> Vec<f64> {
    runs.iter()
        .filter_map(|r| r.get(key).and_then(Value::as_f64))
        .filter(|x| x.is_finite())
        .collect()
}

/// How one axis of a change was judged.
#[derive(Debug, Clone, PartialEq)]
struct Judgement {
    /// The test and its sample sizes, as the table shows them.
    test: String,
    /// Two-sided p-value (`None`: no test was possible).
    p: Option<f64>,
    /// Twice the baseline's run-to-run standard deviation (`None`: one baseline run).
    floor: Option<f64>,
    verdict: String,
}

/// One axis of a change: the runs' values of the axis on both sides (its percentile per run)
/// and, for latency axes, the per-request samples pooled over each side's runs.
struct AxisData<'a> {
    base_runs: &'a [f64],
    runs: &'a [f64],
    /// `(metric, baseline's requests, the change's requests)`.
    requests: Option<(&'a str, &'a [f64], &'a [f64])>,
    higher_better: bool,
}

/// Judges one axis: significant (p < `alpha`) by the per-request Mann–Whitney test where the
/// requests are there, else by Welch's t-test over the runs; and beyond the noise floor.
/// Only a change that is both is better or worse.
fn judge(d: &AxisData<'_>, alpha: f64) -> Option<Judgement> {
    let mean = |x: &[f64]| x.iter().sum::<f64>() / x.len() as f64;
    if d.base_runs.is_empty() || d.runs.is_empty() {
        return None;
    }
    let (b, v) = (mean(d.base_runs), mean(d.runs));
    let floor = (d.base_runs.len() >= 2).then(|| {
        let sd = (d.base_runs.iter().map(|x| (x - b).powi(2)).sum::<f64>()
            / (d.base_runs.len() - 1) as f64)
            .sqrt();
        2.0 * sd
    });
    let per_request = d.requests.and_then(|(metric, a, c)| {
        let t = crate::significance::finish_test(
            metric,
            crate::significance::sample_name(metric),
            a,
            c,
            alpha,
        );
        let r = t.result?;
        Some((
            format!("Mann–Whitney per {} ({}/{})", t.sample, r.n1, r.n2),
            r.p_value,
        ))
    });
    let tested = per_request.or_else(|| {
        let r = servebench_analysis::compare::welch_t_test(d.base_runs, d.runs).ok()?;
        Some((format!("Welch t per run ({}/{})", r.n1, r.n2), r.p_value))
    });
    let (test, p) = match tested {
        Some((t, p)) => (t, Some(p)),
        None => (
            format!(
                "none: needs 2 runs a side ({}/{})",
                d.base_runs.len(),
                d.runs.len()
            ),
            None,
        ),
    };
    let direction = if (v > b) == d.higher_better {
        "better"
    } else {
        "worse"
    };
    let beyond = floor.map(|f| (v - b).abs() > f);
    let verdict = match (p.map(|p| p < alpha), beyond) {
        (Some(true), Some(true)) => format!("beyond noise, {direction}"),
        (Some(true), None) => {
            format!("significant, {direction} (no noise floor: 1 baseline run)")
        }
        (Some(true), Some(false)) => "within noise (significant, inside the noise floor)".into(),
        (Some(false), _) => "within noise".into(),
        (None, _) => "not judged (no test)".into(),
    };
    Some(Judgement {
        test,
        p,
        floor,
        verdict,
    })
}

/// Each combination against the baseline of its benchmark combination (the server
/// combination named `baseline`, else the first one measured): the change on every axis,
/// the test that judged it, and the verdict.
fn effects(md: &mut String, measured: &[&CombRecord], alpha: f64) {
    // A change is always against the baseline of its own benchmark combination, so the
    // server side names it unless several benchmark combinations share the table.
    let one_bench = measured.iter().all(|c| {
        measured
            .first()
            .is_some_and(|f| f.bench_name == c.bench_name)
    });
    let name = |c: &CombRecord| {
        if one_bench && !c.serve_name.is_empty() {
            c.serve_name.clone()
        } else {
            label(c)
        }
    };
    let mut header = false;
    for c in measured {
        let base = measured
            .iter()
            .filter(|b| b.bench_name == c.bench_name)
            .find(|b| b.serve_name == super::vary::BASELINE)
            .or_else(|| measured.iter().find(|b| b.bench_name == c.bench_name));
        let Some(base) = base.filter(|b| !std::ptr::eq(**b, *c)) else {
            continue;
        };
        if !header {
            header = true;
            let _ = writeln!(
                md,
                "\n## Effects against the baseline\n\n\
                 Latency axes are tested with the two-sided Mann–Whitney U test over the \
                 per-request samples pooled over each side's runs (ITL: each request's median \
                 gap; exact or normal approximation as `servebench compare` picks), where the \
                 runs kept their requests; other axes, one value per run, with Welch's t-test \
                 over the runs (2 runs a side at least). The noise floor is twice the baseline's \
                 run-to-run standard deviation of the axis (--num-runs ≥ 2 measures it). A change \
                 is better or worse only when p < {alpha} (--alpha) and the effect is beyond the \
                 noise floor; otherwise it is within noise.\n"
            );
            md.push_str("| change | against | axis | baseline | value | effect | noise floor | test (n per side) | p | verdict |\n|---|---|---|---|---|---|---|---|---|---|\n");
        }
        for (k, axis, higher_better, metric) in AXES {
            let (base_runs, runs) = (values(&base.runs, k), values(&c.runs, k));
            let samples = metric
                .filter(|_| !base.details.is_empty() && !c.details.is_empty())
                .map(|m| {
                    (
                        m,
                        crate::significance::test_samples(&base.details, m),
                        crate::significance::test_samples(&c.details, m),
                    )
                });
            let data = AxisData {
                base_runs: &base_runs,
                runs: &runs,
                requests: samples.as_ref().map(|(m, a, b)| (*m, &a[..], &b[..])),
                higher_better,
            };
            let Some(j) = judge(&data, alpha) else {
                continue;
            };
            let mean = |x: &[f64]| x.iter().sum::<f64>() / x.len() as f64;
            let (b, v) = (mean(&base_runs), mean(&runs));
            let change = if b != 0.0 {
                (v - b) / b * 100.0
            } else {
                f64::NAN
            };
            let floor = j.floor.map_or("–".to_owned(), |f| format!("±{f:.1}"));
            let p = j.p.map_or("–".to_owned(), crate::significance::p_text);
            let _ = writeln!(
                md,
                "| {} | {} | {axis} | {b:.1} | {v:.1} | {change:+.1} % | {floor} | {} | {p} | {} |",
                name(c),
                name(base),
                j.test,
                j.verdict
            );
        }
    }
}

/// The markdown.
pub fn render(combs: &[CombRecord], slos: &[Slo], alpha: f64) -> String {
    let mut md = String::from("# Decision: sweep serve\n\n");
    let contract = if slos.is_empty() {
        "none given (--slo); the highest output throughput is accepted".to_owned()
    } else {
        slos.iter()
            .map(|s| format!("{} ≤ {} ms", slo_key(s), s.threshold_ms))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(md, "Contract: {contract}\n");
    // An interrupted combination's runs are too few to weigh against the others.
    let measured: Vec<&CombRecord> = combs
        .iter()
        .filter(|c| c.status == "ok" || c.status == "resumed")
        .collect();
    let accepted = measured
        .iter()
        .filter(|c| misses(c, slos).is_empty() && failed_requests(c) == 0.0)
        .max_by(|a, b| {
            let t = |c: &CombRecord| stat(&c.runs, "output_throughput").map_or(0.0, |s| s.0);
            t(a).total_cmp(&t(b))
        });
    match accepted {
        Some(c) => {
            let tput = stat(&c.runs, "output_throughput").map_or(0.0, |s| s.0);
            let ttft = stat(&c.runs, "p99_ttft_ms").map_or(f64::NAN, |s| s.0);
            let _ = writeln!(
                md,
                "**Accepted: {}** — {tput:.1} output tok/s at p99 TTFT {ttft:.1} ms ({} run(s)).\n",
                label(c),
                c.runs.len()
            );
        }
        None => {
            let _ = writeln!(md, "**No combination accepted.**\n");
        }
    }
    md.push_str("| combination | runs | ");
    md.push_str(&AXES.iter().map(|a| a.1).collect::<Vec<_>>().join(" | "));
    md.push_str(" | failed requests | verdict |\n|---|---|");
    md.push_str(&"---|".repeat(AXES.len() + 2));
    md.push('\n');
    for c in combs {
        if c.status == "failed" || c.status == "interrupted" {
            let why = c
                .error
                .as_deref()
                .and_then(|e| e.lines().next())
                .unwrap_or(c.status);
            let _ = writeln!(
                md,
                "| {} | {} | {} | – | {}: {} |",
                label(c),
                c.runs.len(),
                vec!["–"; AXES.len()].join(" | "),
                c.status,
                why.replace('|', "/")
            );
            continue;
        }
        let cells: Vec<String> = AXES
            .iter()
            .map(|(k, _, _, _)| match stat(&c.runs, k) {
                Some((m, sd, n)) if n > 1 => format!("{m:.1} ± {sd:.1}"),
                Some((m, _, _)) => format!("{m:.1}"),
                None => "–".to_owned(),
            })
            .collect();
        let miss = misses(c, slos);
        let failed = failed_requests(c);
        let verdict = if accepted.is_some_and(|a| std::ptr::eq(*a, c)) {
            "**accepted**".to_owned()
        } else if !miss.is_empty() {
            format!("rejected: {}", miss.join("; "))
        } else if failed > 0.0 {
            "rejected: failed requests".to_owned()
        } else {
            "meets the contract".to_owned()
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {failed:.0} | {verdict} |",
            label(c),
            c.runs.len(),
            cells.join(" | ")
        );
    }
    effects(&mut md, &measured, alpha);
    let failures: Vec<&CombRecord> = combs.iter().filter(|c| c.status == "failed").collect();
    if !failures.is_empty() {
        md.push_str("\n## Failed combinations\n");
        for c in failures {
            let _ = writeln!(
                md,
                "\n### {}\n\n{}\n",
                label(c),
                c.error
                    .as_deref()
                    .unwrap_or("failed")
                    .lines()
                    .next()
                    .unwrap_or("")
            );
            if let Some(t) = c.log_tail.as_deref().filter(|t| !t.is_empty()) {
                let _ = writeln!(md, "Server log (last lines):\n\n```\n{t}\n```");
            }
        }
    }
    md
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// `runs` runs of `per_run` requests each, spread evenly over `low..low + width` ms.
    fn requests(runs: usize, per_run: usize, low: f64, width: f64) -> Vec<f64> {
        let n = runs * per_run;
        (0..n)
            .map(|i| low + width * (i as f64 + 0.5) / n as f64)
            .collect()
    }

    fn ttft<'a>(base_runs: &'a [f64], runs: &'a [f64], a: &'a [f64], b: &'a [f64]) -> AxisData<'a> {
        AxisData {
            base_runs,
            runs,
            requests: Some(("ttft", a, b)),
            higher_better: false,
        }
    }

    #[test]
    fn a_clear_shift_over_three_runs_a_side_is_significant_per_request() {
        let base = requests(3, 30, 100.0, 30.0);
        let fast = requests(3, 30, 60.0, 30.0);
        let (base_p99, fast_p99) = ([129.0, 130.5, 128.0], [89.0, 90.0, 88.5]);
        let j = judge(&ttft(&base_p99, &fast_p99, &base, &fast), 0.01).unwrap();
        assert!(j.p.unwrap() < 0.01, "{j:?}");
        assert_eq!(j.verdict, "beyond noise, better");
        assert!(
            j.test.starts_with("Mann–Whitney per request (90/90)"),
            "{j:?}"
        );
        // Over the three runs' values alone, Mann–Whitney cannot get below p = 0.1.
        let runs_only = servebench_analysis::compare::mann_whitney_u(&base_p99, &fast_p99).unwrap();
        assert!(runs_only.p_value >= 0.1, "{runs_only:?}");
        // The other way round it is worse.
        let j = judge(&ttft(&fast_p99, &base_p99, &fast, &base), 0.01).unwrap();
        assert_eq!(j.verdict, "beyond noise, worse");
    }

    #[test]
    fn the_same_configuration_twice_is_within_noise() {
        // Interleaved requests of one distribution, and p99s that differ by run-to-run noise.
        let all = requests(6, 30, 100.0, 30.0);
        let a: Vec<f64> = all.iter().copied().step_by(2).collect();
        let b: Vec<f64> = all.iter().copied().skip(1).step_by(2).collect();
        let j = judge(
            &ttft(&[129.0, 131.0, 127.0], &[130.0, 128.0, 129.5], &a, &b),
            0.01,
        )
        .unwrap();
        assert!(j.p.unwrap() > 0.5, "{j:?}");
        assert_eq!(j.verdict, "within noise");
        assert_eq!(j.floor, Some(4.0));
    }

    #[test]
    fn a_significant_change_inside_the_noise_floor_is_within_noise() {
        let base = requests(3, 30, 100.0, 30.0);
        let fast = requests(3, 30, 60.0, 30.0);
        // The baseline's p99 wanders by ±40 ms from run to run: 40 ms less is not beyond it.
        let j = judge(
            &ttft(&[90.0, 130.0, 170.0], &[89.0, 90.0, 91.0], &base, &fast),
            0.01,
        )
        .unwrap();
        assert!(j.p.unwrap() < 0.01);
        assert_eq!(
            j.verdict,
            "within noise (significant, inside the noise floor)"
        );
    }

    #[test]
    fn throughput_is_tested_over_the_runs_with_welch() {
        let d = AxisData {
            base_runs: &[1000.0, 1010.0, 990.0],
            runs: &[1500.0, 1510.0, 1490.0],
            requests: None,
            higher_better: true,
        };
        let j = judge(&d, 0.01).unwrap();
        assert_eq!(j.test, "Welch t per run (3/3)");
        assert!(j.p.unwrap() < 1e-4, "{j:?}");
        assert_eq!(j.verdict, "beyond noise, better");
        let d = AxisData {
            base_runs: &[1000.0, 1010.0, 990.0],
            runs: &[1004.0, 996.0, 1001.0],
            requests: None,
            higher_better: true,
        };
        assert_eq!(judge(&d, 0.01).unwrap().verdict, "within noise");
    }

    #[test]
    fn single_runs_are_tested_per_request_or_not_judged() {
        let base = requests(1, 64, 1000.0, 2000.0);
        let fast = requests(1, 64, 50.0, 100.0);
        let j = judge(&ttft(&[2990.0], &[149.0], &base, &fast), 0.01).unwrap();
        assert_eq!(j.floor, None);
        assert_eq!(
            j.verdict,
            "significant, better (no noise floor: 1 baseline run)"
        );
        let d = AxisData {
            base_runs: &[1000.0],
            runs: &[1500.0],
            requests: None,
            higher_better: true,
        };
        let j = judge(&d, 0.01).unwrap();
        assert_eq!((j.p, j.verdict.as_str()), (None, "not judged (no test)"));
        assert!(j.test.contains("needs 2 runs a side (1/1)"), "{j:?}");
    }
}
