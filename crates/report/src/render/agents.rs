//! An agent run (`--dataset-name agentic`): what its sessions' users felt, and the by-depth
//! table of TTFT, time to first answer token and cached prompt tokens.

use servebench_metrics::sessions_metrics::{AgentStats, Spread};

use super::tables::Table;

fn cell(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".to_owned(), |x| format!("{x:.decimals$}"))
}

/// One row per depth (0: main agents).
pub fn depth_table(s: &AgentStats) -> Table {
    let columns = [
        ("Depth", true),
        ("Agents", true),
        ("Completed", true),
        ("Failed", true),
        ("TTFT p50 (ms)", true),
        ("TTFT p99 (ms)", true),
        ("TTFAT p50 (ms)", true),
        ("Prompt tokens (mean)", true),
        ("Cached tokens (mean)", true),
        ("Cached share", true),
    ];
    Table {
        headers: columns.iter().map(|(h, _)| (*h).to_owned()).collect(),
        numeric: columns.iter().map(|(_, n)| *n).collect(),
        rows: s
            .by_depth
            .iter()
            .map(|d| {
                vec![
                    d.depth.to_string(),
                    d.agents.to_string(),
                    d.completed.to_string(),
                    d.failed.to_string(),
                    cell(d.ttft_p50_ms, 2),
                    cell(d.ttft_p99_ms, 2),
                    cell(d.ttfat_p50_ms, 2),
                    cell(d.prompt_tokens_mean, 1),
                    cell(d.cached_tokens_mean, 1),
                    d.cached_share
                        .map_or_else(|| "-".to_owned(), |x| format!("{:.1}%", x * 100.0)),
                ]
            })
            .collect(),
    }
}

fn spread_s(label: &str, s: &Spread) -> String {
    let s_of = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |ms| format!("{:.2}", ms / 1e3));
    format!(
        "{:<40}{:>10} {:>10} {:>10} {:>10}\n",
        label,
        s_of(s.mean),
        s_of(s.p50),
        s_of(s.p90),
        s_of(s.p99)
    )
}

/// The terminal block of an agent run.
pub fn agent_block(s: &AgentStats) -> String {
    let mut out = format!("{:-^50}\n", " Agent sessions ");
    out.push_str(&format!(
        "{:<40}{:<10}\n",
        "Sessions (completed / failed):",
        format!("{} ({} / {})", s.sessions, s.completed_sessions, s.failed_sessions)
    ));
    out.push_str(&format!("{:<40}{:<10}\n", "Sub-agents:", s.subagents));
    out.push_str(&format!("{:<40}{:<10}\n", "Turns sent:", s.turns));
    out.push_str(&format!("{:<40}{:<10}\n", "Tool calls:", s.tool_calls));
    if let Some(share) = s.server_share {
        out.push_str(&format!(
            "{:<40}{:<10}\n",
            "Share of session time on the server:",
            format!("{:.1}%", share * 100.0)
        ));
    }
    out.push_str(&format!(
        "{:<40}{:>10} {:>10} {:>10} {:>10}\n",
        "Per session (s)", "mean", "p50", "p90", "p99"
    ));
    out.push_str(&spread_s("  Completion time", &s.completion_ms));
    out.push_str(&spread_s("  Waiting on the server (main agent)", &s.server_ms));
    out.push_str(&spread_s("  Waiting on tools (main agent)", &s.tool_ms));
    let t = &s.turns_per_session;
    out.push_str(&format!(
        "{:<40}{:>10} {:>10} {:>10} {:>10}\n",
        "  Turns per session",
        cell(t.mean, 1),
        cell(t.p50, 1),
        cell(t.p90, 1),
        cell(t.p99, 1)
    ));
    out.push_str(&format!("{:-^50}\n", " By depth (agents) "));
    out.push_str(&depth_table(s).to_text());
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use servebench_metrics::sessions_metrics::DepthStats;

    #[test]
    fn the_block_names_sessions_and_has_a_row_per_depth() {
        let s = AgentStats {
            sessions: 2,
            completed_sessions: 2,
            completion_ms: Spread {
                mean: Some(1500.0),
                p50: Some(1500.0),
                p90: None,
                p99: None,
            },
            server_share: Some(0.25),
            by_depth: vec![DepthStats {
                depth: 0,
                agents: 2,
                completed: 6,
                failed: 0,
                ttft_p50_ms: Some(12.345),
                ttft_p99_ms: None,
                ttfat_p50_ms: Some(12.345),
                prompt_tokens_mean: Some(100.0),
                cached_tokens_mean: Some(64.0),
                cached_share: Some(0.64),
            }],
            ..AgentStats::default()
        };
        let b = agent_block(&s);
        assert!(b.contains("Agent sessions"), "{b}");
        assert!(b.contains("1.50"), "{b}");
        assert!(b.contains("25.0%"), "{b}");
        assert!(b.contains("By depth"), "{b}");
        assert_eq!(
            depth_table(&s).rows[0],
            ["0", "2", "6", "0", "12.35", "-", "12.35", "100.0", "64.0", "64.0%"]
        );
    }
}
