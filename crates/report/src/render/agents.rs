//! An agent run (`--dataset-name agentic`): what its sessions' users felt, and the by-depth
//! table of TTFT, time to first answer token and cached prompt tokens.

use servebench_metrics::sessions_metrics::{AgentNode, AgentStats, Spread};
use servebench_metrics::RequestRecord;

use super::format::html_escape;

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
        format!(
            "{} ({} / {})",
            s.sessions, s.completed_sessions, s.failed_sessions
        )
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
    out.push_str(&spread_s(
        "  Waiting on the server (main agent)",
        &s.server_ms,
    ));
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

/// Most lanes drawn (agents, in session order): beyond them a note says how many were left.
const MAX_LANES: usize = 120;

/// A swim-lane timeline of the sessions: one lane per agent (a session's sub-agents under it,
/// indented by depth), its requests as bars from send to done, its tool waits as hatched
/// bars, on the run's time axis. A self-contained SVG.
pub fn swimlanes_svg(s: &AgentStats, records: &[RequestRecord]) -> String {
    use std::collections::HashMap;
    use std::fmt::Write as _;

    let mut by_agent: HashMap<&str, Vec<&RequestRecord>> = HashMap::new();
    for r in records {
        if let Some(id) = r.session_id.as_deref() {
            by_agent.entry(id).or_default().push(r);
        }
    }
    // Lanes: sessions by start, each followed by its agents in tree order (ids sort as the
    // tree: `s`, `s/0.0`, `s/0.0/1.0`, `s/0.1`, …, which a plain sort gives only up to 10).
    let mut sessions: Vec<&AgentNode> = s.nodes.iter().filter(|n| n.parent.is_none()).collect();
    sessions.sort_by_key(|n| (n.start, n.id.clone()));
    let tree_key = |id: &str| -> Vec<(u64, u64)> {
        id.split('/')
            .skip(1)
            .map(|part| {
                let mut it = part.split('.').map(|x| x.parse::<u64>().unwrap_or(0));
                (it.next().unwrap_or(0), it.next().unwrap_or(0))
            })
            .collect()
    };
    let mut lanes: Vec<&AgentNode> = Vec::new();
    for root in &sessions {
        let mut members: Vec<&AgentNode> = s
            .nodes
            .iter()
            .filter(|n| n.session == root.session)
            .collect();
        members.sort_by_key(|n| (n.parent.is_some(), tree_key(&n.id)));
        lanes.extend(members);
    }
    let left_out = lanes.len().saturating_sub(MAX_LANES);
    lanes.truncate(MAX_LANES);
    let end_ns = lanes
        .iter()
        .filter_map(|n| {
            let last = by_agent
                .get(n.id.as_str())
                .and_then(|rs| rs.iter().filter_map(|r| r.done).max());
            n.end.max(last)
        })
        .max()
        .unwrap_or(1)
        .max(1);
    let (label_w, plot_w, lane_h, top) = (170.0, 760.0, 14.0, 24.0);
    let width = label_w + plot_w + 20.0;
    let height = top + lane_h * lanes.len() as f64 + 30.0;
    let x = |ns: u64| label_w + plot_w * (ns as f64 / end_ns as f64);
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg class=\"swimlanes\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\" role=\"img\" aria-label=\"agent sessions over time\">\n\
         <defs><pattern id=\"tool-hatch\" width=\"4\" height=\"4\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\"><rect width=\"2\" height=\"4\" fill=\"#e8a33d\"/></pattern></defs>\n"
    );
    let _ = writeln!(
        out,
        "<text x=\"{label_w}\" y=\"14\" font-size=\"11\">requests (send → done) <tspan fill=\"#e8a33d\">▨ tool waits</tspan> · 0 – {:.1} s</text>",
        end_ns as f64 / 1e9
    );
    for (i, n) in lanes.iter().enumerate() {
        let y = top + lane_h * i as f64;
        let indent = 8.0 * f64::from(n.depth);
        let name = n.id.rsplit('/').next().unwrap_or(&n.id);
        let label = if n.depth == 0 { n.id.as_str() } else { name };
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\">{}{}</text>",
            4.0 + indent,
            y + lane_h - 4.0,
            if n.depth > 0 { "↳ " } else { "" },
            html_escape(label)
        );
        let _ = writeln!(
            out,
            "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#ccc\" stroke-width=\"1\"/>",
            x(n.start),
            x(n.end.unwrap_or(end_ns)),
            y + lane_h / 2.0,
            y + lane_h / 2.0
        );
        for w in &n.tool_waits {
            let _ = writeln!(
                out,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"url(#tool-hatch)\"><title>{}: tool {:.0} ms</title></rect>",
                x(w[0]),
                y + 3.0,
                (x(w[1]) - x(w[0])).max(0.5),
                lane_h - 6.0,
                html_escape(&n.id),
                (w[1].saturating_sub(w[0])) as f64 / 1e6
            );
        }
        for r in by_agent.get(n.id.as_str()).into_iter().flatten() {
            let done = r.done.unwrap_or(r.sent);
            let fill = if r.failure.is_some() {
                "#c0392b"
            } else {
                "#3b6fb6"
            };
            let _ = writeln!(
                out,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{fill}\"><title>{} turn {}: {:.0} ms, {} prompt tokens ({} cached)</title></rect>",
                x(r.sent),
                y + 2.0,
                (x(done) - x(r.sent)).max(0.8),
                lane_h - 4.0,
                html_escape(&n.id),
                r.turn.unwrap_or(0),
                done.saturating_sub(r.sent) as f64 / 1e6,
                r.input_tokens,
                r.cached_tokens.map_or_else(|| "-".to_owned(), |c| c.to_string())
            );
        }
    }
    if left_out > 0 {
        let _ = writeln!(
            out,
            "<text x=\"4\" y=\"{:.1}\" font-size=\"10\">… {left_out} more agents not drawn</text>",
            height - 8.0
        );
    }
    out.push_str("</svg>\n");
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
        let svg = swimlanes_svg(&s, &[]);
        assert!(svg.starts_with("<svg"), "{svg}");
        assert_eq!(
            depth_table(&s).rows[0],
            ["0", "2", "6", "0", "12.35", "-", "12.35", "100.0", "64.0", "64.0%"]
        );
    }

    #[test]
    fn the_swim_lanes_draw_each_agent_its_requests_and_tool_waits() {
        let rec = |id: u64, session: &str, turn: u32, sent: u64, done: u64| -> RequestRecord {
            serde_json::from_value(serde_json::json!({
                "id": id, "intended": sent, "released": sent, "sent": sent, "done": done,
                "first_token": done, "end": done, "input_tokens": 10, "input_source": "usage",
                "output_tokens": 2, "output_source": "usage", "intended_input_tokens": 10,
                "session_id": session, "turn": turn, "cached_tokens": 4}))
            .unwrap()
        };
        let ms = 1_000_000;
        let s = AgentStats {
            nodes: vec![
                AgentNode {
                    id: "s<1>".into(),
                    session: "s<1>".into(),
                    start: 0,
                    end: Some(100 * ms),
                    tool_waits: vec![[10 * ms, 40 * ms]],
                    ..AgentNode::default()
                },
                AgentNode {
                    id: "s<1>/1.0".into(),
                    session: "s<1>".into(),
                    parent: Some("s<1>".into()),
                    depth: 1,
                    start: 50 * ms,
                    end: Some(80 * ms),
                    ..AgentNode::default()
                },
            ],
            ..AgentStats::default()
        };
        let records = [
            rec(0, "s<1>", 0, 0, 10 * ms),
            rec(1, "s<1>", 1, 40 * ms, 50 * ms),
            rec(2, "s<1>/1.0", 0, 50 * ms, 80 * ms),
            rec(3, "s<1>", 2, 80 * ms, 100 * ms),
        ];
        let svg = swimlanes_svg(&s, &records);
        assert_eq!(svg.matches("fill=\"#3b6fb6\"").count(), 4, "{svg}");
        assert_eq!(svg.matches("url(#tool-hatch)").count(), 1, "{svg}");
        assert!(
            svg.contains("s&lt;1&gt; turn 1: 10 ms, 10 prompt tokens (4 cached)"),
            "{svg}"
        );
        assert!(svg.contains("↳ 1.0"), "{svg}");
        assert!(!svg.contains("s<1>"), "escaped: {svg}");
    }
}
