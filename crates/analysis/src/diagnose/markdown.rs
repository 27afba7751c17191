//! `interpretation.md`: the findings with their evidence, the bandwidth table, the rules that
//! ran and the groups' key figures. Generated entirely from the [`Diagnosis`].

use std::fmt::Write as _;

use super::diagnosis::{Diagnosis, KnownTarget};
use crate::bandwidth::bandwidth_section_markdown;
use crate::explained::format_quantity;
use crate::rules::Rule;

fn ms(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format_quantity(v / 1e3, "s"))
}

/// Renders the diagnosis; `extra` sections (heading, markdown body) are appended, e.g. cost.
pub fn interpretation_markdown(
    d: &Diagnosis,
    target: Option<&KnownTarget>,
    extra: &[(String, String)],
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Interpretation: {}\n", d.title);
    let _ = writeln!(
        out,
        "Diagnosed from {} {} of a {} experiment; {}.\n",
        d.rows.len(),
        match (d.kind == "sweep", d.rows.len() == 1) {
            (true, true) => "group (row or sweep point)",
            (true, false) => "groups (rows and sweep points)",
            (false, true) => "row",
            (false, false) => "rows",
        },
        d.kind,
        d.target_note
    );
    for n in &d.notes {
        let _ = writeln!(out, "> Note: {n}\n");
    }

    let _ = writeln!(out, "## Findings\n");
    if d.findings.is_empty() {
        let _ = writeln!(
            out,
            "No rule fired: none of the symptoms below shows in these figures.\n"
        );
    }
    for (i, f) in d.findings.iter().enumerate() {
        let _ = writeln!(
            out,
            "### {}. {} ({}) — confidence: {}\n",
            i + 1,
            capitalize(&f.regime),
            f.rows.join(", "),
            f.confidence.as_str()
        );
        let _ = writeln!(out, "{}\n", f.summary);
        let _ = writeln!(out, "**Evidence**\n");
        for e in &f.evidence {
            let _ = writeln!(out, "- {e}");
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "**Confidence:** {} ({}).\n",
            f.confidence.as_str(),
            f.confidence_reason
        );
        let _ = writeln!(out, "**Confirm with:** {}.\n", f.confirm_with);
        let _ = writeln!(out, "**First response:** {}.\n", f.first_response);
        let _ = writeln!(out, "**Next experiment:** {}.\n", f.next_experiment);
    }

    let _ = writeln!(out, "## Bandwidth check\n");
    match target {
        Some(t) => out.push_str(&bandwidth_section_markdown(
            &d.bandwidth,
            &t.deployment,
            &t.source,
        )),
        None => {
            let _ = writeln!(
                out,
                "Not available: {}. Pass --gpu and --model-preset to compare.",
                d.target_note
            );
        }
    }
    out.push('\n');

    let _ = writeln!(out, "## Figures per row\n");
    let _ = writeln!(
        out,
        "| row | runs | completed | prompt tok | output tok | in flight | output tok/s | TTFT p50 | TTFT p99 | TPOT mean | ITL p99 | cached tok/req |"
    );
    let _ = writeln!(
        out,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in &d.rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.label,
            r.runs,
            r.completed,
            format_quantity(r.mean_input_tokens.round(), ""),
            format_quantity(r.mean_output_tokens.round(), ""),
            format_quantity(r.concurrency, ""),
            format_quantity(r.output_throughput.round(), ""),
            ms(r.ttft.p50),
            ms(r.ttft.p99),
            ms(r.tpot.mean),
            ms(r.itl.p99),
            r.mean_cached_tokens
                .map_or("–".into(), |c| format_quantity(c.round(), "")),
        );
    }
    out.push('\n');

    for (heading, body) in extra {
        let _ = writeln!(out, "## {heading}\n\n{}\n", body.trim_end());
    }

    let _ = writeln!(out, "## Rules checked\n");
    let _ = writeln!(out, "| rule | symptom | rows examined | findings | note |");
    let _ = writeln!(out, "|---|---|---|---:|---|");
    for rule in Rule::ALL {
        if let Some(c) = d.checks.iter().find(|c| c.rule == rule) {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                rule.as_str(),
                rule.symptom(),
                if c.examined.is_empty() {
                    "–".to_string()
                } else {
                    c.examined.join(", ")
                },
                c.findings,
                c.note.as_deref().unwrap_or("")
            );
        }
    }
    out
}

fn capitalize(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}
