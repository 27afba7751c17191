//! `decision.md` of a `sweep serve`: every combination on every axis (mean over its runs),
//! its change against the first combination judged against that combination's run-to-run
//! noise, the verdict against `--slo`, and the accepted configuration.

use std::fmt::Write as _;

use serde_json::Value;
use servebench_analysis::frontier::Slo;

use super::runner::CombRecord;

/// An axis of the table: the result key, its heading, and whether higher is better.
const AXES: [(&str, &str, bool); 6] = [
    ("output_throughput", "output tok/s", true),
    ("request_throughput", "req/s", true),
    ("p99_ttft_ms", "p99 TTFT ms", false),
    ("p99_tpot_ms", "p99 TPOT ms", false),
    ("p99_itl_ms", "p99 ITL ms", false),
    ("p99_e2el_ms", "p99 E2EL ms", false),
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

/// Each combination against the baseline of its benchmark combination (the server
/// combination named `baseline`, else the first one measured): the change on every axis,
/// whether it clears the baseline's noise floor (twice its run-to-run standard deviation),
/// and a Mann–Whitney p-value over the runs.
fn effects(md: &mut String, measured: &[&CombRecord]) {
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
                "\n## Effects against the baseline\n\nThe noise floor is twice the baseline's run-to-run standard deviation (--num-runs ≥ 2 measures it); p is the two-sided Mann–Whitney test over the runs' values.\n"
            );
            md.push_str("| change | against | axis | baseline | value | effect | noise floor | p | verdict |\n|---|---|---|---|---|---|---|---|---|\n");
        }
        for (k, name, higher_better) in AXES {
            let (Some((b, bsd, bn)), Some((v, _, vn))) = (stat(&base.runs, k), stat(&c.runs, k))
            else {
                continue;
            };
            let change = if b != 0.0 {
                (v - b) / b * 100.0
            } else {
                f64::NAN
            };
            let floor = 2.0 * bsd;
            let p = if bn >= 2 && vn >= 2 {
                servebench_analysis::compare::mann_whitney_u(
                    &values(&base.runs, k),
                    &values(&c.runs, k),
                )
                .map(|t| format!("{:.3}", t.p_value))
                .unwrap_or_else(|_| "–".to_owned())
            } else {
                "–".to_owned()
            };
            let verdict = if bn < 2 {
                "no noise floor (1 baseline run)".to_owned()
            } else if (v - b).abs() > floor {
                let better = (v > b) == higher_better;
                format!("beyond noise, {}", if better { "better" } else { "worse" })
            } else {
                "within noise".to_owned()
            };
            let floor_text = if bn < 2 {
                "–".to_owned()
            } else {
                format!("±{floor:.1}")
            };
            let _ = writeln!(
                md,
                "| {} | {} | {name} | {b:.1} | {v:.1} | {change:+.1} % | {floor_text} | {p} | {verdict} |",
                label(c),
                label(base)
            );
        }
    }
}

/// The markdown.
pub fn render(combs: &[CombRecord], slos: &[Slo]) -> String {
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
    let measured: Vec<&CombRecord> = combs.iter().filter(|c| c.status != "failed").collect();
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
        if c.status == "failed" {
            let why = c
                .error
                .as_deref()
                .and_then(|e| e.lines().next())
                .unwrap_or("failed");
            let _ = writeln!(
                md,
                "| {} | 0 | {} | – | failed: {} |",
                label(c),
                vec!["–"; AXES.len()].join(" | "),
                why.replace('|', "/")
            );
            continue;
        }
        let cells: Vec<String> = AXES
            .iter()
            .map(|(k, _, _)| match stat(&c.runs, k) {
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
    effects(&mut md, &measured);
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
