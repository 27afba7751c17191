//! `decision.md`, generated from a [`Decision`]: every sentence carries figures from the data.

use std::fmt::Write as _;

use super::{format_usd, CandidateEval, Decision, PointEval, Verdict};
use crate::format_quantity;
use crate::frontier::SloStat;

fn ms(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format_quantity(v / 1e3, "s"))
}

/// Joins a command line into one string that a POSIX shell splits back into the same words,
/// so a command copied from decision.md runs as recorded (a `--sim` spec keeps its spaces).
pub(super) fn shell_join(argv: &[String]) -> String {
    argv.iter()
        .map(|w| shell_quote(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A word as is when the shell would not change it, else single-quoted (a `'` inside becomes
/// `'\''`: close, escaped quote, reopen), the one quoting with no special characters inside.
fn shell_quote(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=,+@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Markdown inline code whose fence is longer than any run of backticks inside, so the text
/// comes out verbatim whatever it holds.
fn code_span(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// Renders the decision record.
pub fn decision_markdown(d: &Decision) -> String {
    let mut out = String::new();
    let o = &d.options;
    let conditions = o
        .contract
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" and ");
    let title = match d.candidates.as_slice() {
        [one] => one.title.clone(),
        many => format!("{} configurations compared", many.len()),
    };
    let _ = writeln!(out, "# Decision: {title}\n");
    let _ = writeln!(out, "**{}.**\n", d.headline);

    let _ = writeln!(out, "## Workload target\n");
    let on = o
        .requests
        .as_ref()
        .map(|f| format!(", judged on the requests with {} only", code_span(&f.text)))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "- Contract: {conditions}{on} (from {}).",
        o.contract_source
    );
    for c in &d.candidates {
        let _ = writeln!(out, "- Workload of {}: {}.", c.dir, c.workload);
    }
    if let Some(note) = &d.gpu_note {
        let _ = writeln!(out, "- Fleet layouts: {note}.");
        for c in &d.candidates {
            if let Some(l) = &c.layout {
                let _ = writeln!(
                    out,
                    "  - {}: {} — {} GPU{}.",
                    c.dir,
                    l.description,
                    l.gpus,
                    if l.gpus == 1 { "" } else { "s" }
                );
            }
        }
    }
    match o.cost {
        Some(p) => {
            let _ = writeln!(
                out,
                "- Cost basis: {} per GPU-hour × {} GPU{}.",
                format_quantity(p.gpu_hourly_cost, "USD"),
                format_quantity(p.gpus, ""),
                if p.gpus == 1.0 { "" } else { "s" }
            );
            if d.candidates
                .iter()
                .any(|c| c.layout.as_ref().is_some_and(|l| l.fleet))
            {
                let _ = writeln!(
                    out,
                    "- A fleet layout is priced at its own GPU count (above), not at --gpus."
                );
            }
        }
        None => {
            let _ = writeln!(out, "- Cost: not computed (no --gpu-hourly-cost given).");
        }
    }
    out.push('\n');

    match d.accepted.map(|i| &d.candidates[i]) {
        Some(c) => {
            let _ = writeln!(out, "## Accepted configuration\n");
            candidate_block(&mut out, c);
        }
        None => {
            let _ = writeln!(out, "## Accepted configuration\n");
            let _ = writeln!(
                out,
                "None: no configuration meets {conditions}. The closest figures are listed under Rejected.\n"
            );
        }
    }

    let rejected: Vec<&CandidateEval> = d
        .candidates
        .iter()
        .filter(|c| c.verdict != Verdict::Accepted)
        .collect();
    if !rejected.is_empty() {
        let _ = writeln!(out, "## Rejected\n");
        for c in rejected {
            let _ = writeln!(out, "### {} ({})\n", c.label, c.dir);
            let _ = writeln!(out, "{}.\n", capitalize(&c.reason));
            candidate_block(&mut out, c);
        }
    }

    let _ = writeln!(out, "## Every point against the contract\n");
    for c in &d.candidates {
        points_table(&mut out, c, d);
    }

    let _ = writeln!(out, "## Versions\n");
    let _ = writeln!(out, "- servebench (this decision): {}", o.tool_version);
    for c in &d.candidates {
        for (k, v) in &c.versions {
            let _ = writeln!(out, "- {k} ({}): {v}", c.dir);
        }
    }
    out.push('\n');

    let _ = writeln!(out, "## Stopping reason\n");
    for c in &d.candidates {
        let _ = writeln!(out, "- {}: {}.", c.dir, c.stop_reason);
    }
    out
}

fn candidate_block(out: &mut String, c: &CandidateEval) {
    let _ = writeln!(out, "- Configuration: {} ({}, {}).", c.label, c.dir, c.kind);
    if !c.distinguishing.is_empty() {
        let _ = writeln!(
            out,
            "- Differs from the others in: {}.",
            c.distinguishing
                .iter()
                .map(|(k, v)| format!("`{k} = {v}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if !c.server.is_empty() {
        let _ = writeln!(out, "- Server: `{}`.", c.server);
    }
    let points = c.operating_points();
    let shown: Vec<&PointEval> = if points.is_empty() {
        // A rejected sweep: its lightest load is the closest it came.
        c.points
            .iter()
            .min_by(|a, b| {
                a.load
                    .unwrap_or(f64::INFINITY)
                    .total_cmp(&b.load.unwrap_or(f64::INFINITY))
            })
            .into_iter()
            .collect()
    } else {
        points
    };
    for p in shown {
        let _ = writeln!(
            out,
            "- {}: {} — {}.",
            if c.operating.is_some() {
                "Operating point"
            } else {
                "Point"
            },
            p.label,
            p.checks
                .iter()
                .map(super::SloCheck::describe)
                .collect::<Vec<_>>()
                .join(", ")
        );
        if let Some(cmd) = &p.command_line {
            let _ = writeln!(out, "- Run flags: {}.", code_span(cmd));
        }
        let _ = writeln!(
            out,
            "- Throughput: {} output tok/s, {} req/s; accepted (goodput) {} tok/s; {} completed, {} failed.",
            format_quantity(p.output_throughput.round(), ""),
            format_quantity(p.request_throughput, ""),
            p.accepted_tokens_per_s
                .map_or("–".into(), |v| format_quantity(v.round(), "")),
            p.completed,
            p.failed
        );
        if let (Some(per_gpu), Some(gpus)) = (p.output_per_gpu(), p.gpus) {
            if c.layout.as_ref().is_some_and(|l| l.fleet) {
                let _ = writeln!(
                    out,
                    "- Capacity per GPU: {} output tok/s, {} req/s ({} GPUs).",
                    format_quantity(per_gpu.round(), ""),
                    format_quantity(p.request_throughput / f64::from(gpus.max(1)), ""),
                    gpus
                );
            }
        }
        if let Some(cost) = &p.cost {
            let _ = writeln!(
                out,
                "- Cost: {} per million output tokens, {} per million accepted tokens.",
                format_usd(cost.per_million_output_tokens),
                format_usd(cost.per_million_accepted_tokens)
            );
        }
        let _ = writeln!(out, "\n| metric | mean | p50 | p90 | p95 | p99 |");
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
        for (name, s) in &p.latencies {
            let _ = writeln!(
                out,
                "| {name} | {} | {} | {} | {} | {} |",
                ms(s.mean),
                ms(s.p50),
                ms(s.p90),
                ms(s.p95),
                ms(s.p99)
            );
        }
        if !p.pools.is_empty() {
            let _ = writeln!(
                out,
                "\n| pool | completed | failed | p99 TTFT | p99 TPOT |\n|---|---:|---:|---:|---:|"
            );
            for pool in &p.pools {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} |",
                    pool.pool,
                    pool.completed,
                    pool.failed,
                    ms(pool.ttft_p99_ms),
                    ms(pool.tpot_p99_ms)
                );
            }
        }
        out.push('\n');
    }
}

fn points_table(out: &mut String, c: &CandidateEval, d: &Decision) {
    let _ = writeln!(out, "{} ({}):\n", c.label, c.dir);
    let mut header = "| point | output tok/s |".to_string();
    let mut rule = "|---|---:|".to_string();
    for slo in &d.options.contract {
        header.push_str(&format!(
            " {} (< {}) |",
            slo.stat(),
            ms(Some(slo.threshold_ms))
        ));
        rule.push_str("---:|");
    }
    if d.options.cost.is_some() {
        header.push_str(" $ per M accepted |");
        rule.push_str("---:|");
    }
    header.push_str(" verdict |");
    rule.push_str("---|");
    let _ = writeln!(out, "{header}\n{rule}");
    for (i, p) in c.points.iter().enumerate() {
        let mut line = format!(
            "| {} | {} |",
            p.label,
            format_quantity(p.output_throughput.round(), "")
        );
        for check in &p.checks {
            line.push_str(&format!(
                " {}{} |",
                ms(check.measured_ms),
                if check.met { "" } else { " ✗" }
            ));
        }
        if d.options.cost.is_some() {
            line.push_str(&format!(
                " {} |",
                format_usd(p.cost.and_then(|c| c.per_million_accepted_tokens))
            ));
        }
        let verdict = if !p.meets {
            format!("fails: {}", p.failures().join(", "))
        } else if c.operating == Some(i) {
            "operating point".to_string()
        } else if c.operating.is_some() {
            "meets, less throughput".to_string()
        } else {
            "meets".to_string()
        };
        line.push_str(&format!(" {verdict} |"));
        let _ = writeln!(out, "{line}");
    }
    out.push('\n');
}

fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The words `sh` makes of `line`.
    fn sh_words(line: &str) -> Vec<String> {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("printf '%s\\0' {line}"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{line}: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let mut words: Vec<String> = text.split('\0').map(str::to_owned).collect();
        words.pop();
        words
    }

    #[test]
    fn run_flags_line_is_shell_quoted_so_it_pastes_back() {
        let argv: Vec<String> = [
            "servebench",
            "sweep",
            "--sim",
            "llama-3.1-70b --gpu h100 --tensor-parallel-size 2",
            "--slo",
            "ttft:p99:1000",
            "--metadata",
            "note=it's \"quoted\" $HOME `date` *.json \\ ;|&",
            "",
            "--title",
            "tab\there",
        ]
        .map(str::to_owned)
        .to_vec();
        let line = shell_join(&argv);
        assert_eq!(sh_words(&line), argv, "{line}");
        assert!(
            line.starts_with("servebench sweep --sim 'llama-3.1-70b --gpu h100"),
            "{line}"
        );
    }

    #[test]
    fn code_span_fences_past_backticks_inside() {
        assert_eq!(code_span("a b"), "`a b`");
        assert_eq!(code_span("x `date` y"), "``x `date` y``");
        assert_eq!(code_span("`a`"), "`` `a` ``");
    }
}
