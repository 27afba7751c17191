//! The terminal summary: vLLM's layout line for line, then servebench's own lines.

use std::fmt::Write as _;

use crate::pyjson::{OrderedObject, PyValue};
use crate::vllm::{percentile_word, BLOCK_ORDER};

pub(crate) fn num(o: &OrderedObject, k: &str) -> f64 {
    o.get(k).and_then(PyValue::as_f64).unwrap_or(0.0)
}

pub(crate) fn line(out: &mut String, label: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "{label:<40} {value:<10}");
}

pub(crate) fn line2(out: &mut String, label: &str, value: f64) {
    let _ = writeln!(out, "{label:<40} {:<10}", format!("{value:.2}"));
}

pub(crate) fn header(out: &mut String, title: &str, fill: char) {
    let width = 50usize;
    let t = title.chars().count();
    let left = width.saturating_sub(t) / 2;
    let right = width.saturating_sub(t + left);
    let _ = writeln!(
        out,
        "{}{}{}",
        fill.to_string().repeat(left),
        title,
        fill.to_string().repeat(right)
    );
}

/// Display names of the percentile metrics, as vLLM prints them.
pub(crate) fn metric_titles(metric: &str) -> (&str, &str) {
    match metric {
        "ttft" => ("TTFT", "Time to First Token"),
        "tpot" => ("TPOT", "Time per Output Token (excl. 1st token)"),
        "itl" => ("ITL", "Inter-token Latency"),
        "e2el" => ("E2EL", "End-to-end Latency"),
        "queue" | "client_queue_time" => ("Client Queue Time", "Client-side Queueing"),
        "user_ttft" => ("User TTFT", "User TTFT (incl. client queue)"),
        "user_e2el" | "e2el_including_client_queue" => (
            "E2EL incl. Client Queue",
            "Queue-inclusive End-to-end Latency",
        ),
        other => (other, other),
    }
}

/// Render vLLM's "Serving Benchmark Result" block from its result object: the statistics
/// blocks the object holds, in vLLM's fixed order, then the speculative-decoding block.
pub fn vllm_block(o: &OrderedObject, percentiles: &[f64], has_goodput: bool) -> String {
    let mut out = String::new();
    header(&mut out, " Serving Benchmark Result ", '=');
    line(&mut out, "Successful requests:", num(o, "completed") as u64);
    line(&mut out, "Failed requests:", num(o, "failed") as u64);
    if let Some(c) = o.get("max_concurrency").and_then(PyValue::as_u64) {
        line(&mut out, "Maximum request concurrency:", c);
    }
    if let Some(r) = o.get("request_rate").and_then(PyValue::as_f64) {
        line2(&mut out, "Request rate configured (RPS):", r);
    }
    line2(&mut out, "Benchmark duration (s):", num(o, "duration"));
    line(
        &mut out,
        "Total input tokens:",
        num(o, "total_input_tokens") as u64,
    );
    line(
        &mut out,
        "Total generated tokens:",
        num(o, "total_output_tokens") as u64,
    );
    line2(
        &mut out,
        "Request throughput (req/s):",
        num(o, "request_throughput"),
    );
    if has_goodput {
        line2(
            &mut out,
            "Request goodput (req/s):",
            num(o, "request_goodput"),
        );
    }
    line2(
        &mut out,
        "Output token throughput (tok/s):",
        num(o, "output_throughput"),
    );
    line2(
        &mut out,
        "Peak output token throughput (tok/s):",
        num(o, "max_output_tokens_per_s"),
    );
    line2(
        &mut out,
        "Peak concurrent requests:",
        num(o, "max_concurrent_requests"),
    );
    line2(
        &mut out,
        "Total token throughput (tok/s):",
        num(o, "total_token_throughput"),
    );
    for metric in BLOCK_ORDER {
        latency_lines(&mut out, o, metric, percentiles);
    }
    spec_decode_lines(&mut out, o);
    out.push_str(&"=".repeat(50));
    out.push('\n');
    out
}

/// vLLM's "Speculative Decoding" lines, when the result holds the `spec_decode_*` keys.
/// One latency metric's block (mean, median, the requested percentiles) as vLLM prints it;
/// nothing when the result has no such metric.
pub(crate) fn latency_lines(
    out: &mut String,
    o: &OrderedObject,
    metric: &str,
    percentiles: &[f64],
) {
    if o.get(&format!("mean_{metric}_ms")).is_none() {
        return;
    }
    let (name, title) = metric_titles(metric);
    header(out, title, '-');
    line2(
        out,
        &format!("Mean {name} (ms):"),
        num(o, &format!("mean_{metric}_ms")),
    );
    line2(
        out,
        &format!("Median {name} (ms):"),
        num(o, &format!("median_{metric}_ms")),
    );
    for p in percentiles {
        let w = percentile_word(*p);
        line2(
            out,
            &format!("P{w} {name} (ms):"),
            num(o, &format!("p{w}_{metric}_ms")),
        );
    }
}

fn spec_decode_lines(out: &mut String, o: &OrderedObject) {
    if o.get("spec_decode_acceptance_rate").is_none() {
        return;
    }
    header(out, "Speculative Decoding", '-');
    line2(
        out,
        "Acceptance rate (%):",
        num(o, "spec_decode_acceptance_rate"),
    );
    line2(
        out,
        "Acceptance length:",
        num(o, "spec_decode_acceptance_length"),
    );
    line(out, "Drafts:", num(o, "spec_decode_num_drafts") as i64);
    line(
        out,
        "Draft tokens:",
        num(o, "spec_decode_draft_tokens") as i64,
    );
    line(
        out,
        "Accepted tokens:",
        num(o, "spec_decode_accepted_tokens") as i64,
    );
    let per_pos = o
        .get("spec_decode_per_position_acceptance_rates")
        .and_then(PyValue::as_list)
        .unwrap_or(&[]);
    if !per_pos.is_empty() {
        out.push_str("Per-position acceptance (%):\n");
        for (i, rate) in per_pos.iter().enumerate() {
            line2(
                out,
                &format!("  Position {i}:"),
                rate.as_f64().unwrap_or(0.0) * 100.0,
            );
        }
    }
}

/// The latency table: the name column left-aligned, figures right-aligned, the CI last.
/// Columns keep their usual widths (22, then 9 each) but grow to the widest cell plus a space,
/// so huge figures never run into their neighbours.
fn metric_table(head: &[String; 6], rows: &[[String; 6]]) -> String {
    let widest = |i: usize| {
        rows.iter()
            .chain(std::iter::once(head))
            .map(|r| r[i].chars().count())
            .max()
            .unwrap_or(0)
    };
    let name_w = 22.max(widest(0) + 1);
    let fig_w: Vec<usize> = (1..5).map(|i| 9.max(widest(i) + 1)).collect();
    let mut out = String::new();
    for r in std::iter::once(head).chain(rows) {
        let _ = write!(out, "{:<name_w$}", r[0]);
        for (cell, w) in r[1..5].iter().zip(&fig_w) {
            let _ = write!(out, "{cell:>w$}");
        }
        let _ = writeln!(out, "  {}", r[5]);
    }
    out
}

/// The reasoning share of output and the requests that reasoned, called tools, or never
/// reached their answer.
fn reasoning_lines(out: &mut String, r: &servebench_metrics::ReasoningSummary) {
    let _ = writeln!(
        out,
        "{:<40} {:<10}",
        "Reasoning share of output (%):",
        format!("{:.1}", r.reasoning_share * 100.0)
    );
    line(
        out,
        "Reasoning / answer tokens:",
        format!("{} / {}", r.reasoning_tokens, r.answer_tokens),
    );
    line(
        out,
        "Requests reasoning / with tool calls:",
        format!(
            "{} / {}",
            r.requests_with_reasoning, r.requests_with_tool_calls
        ),
    );
    if r.requests_without_answer > 0 {
        line(
            out,
            "Requests that ended before answering:",
            r.requests_without_answer,
        );
    }
}

fn opt(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into())
}

/// servebench's own lines after vLLM's block: honest latencies (from the intended send time),
/// percentiles with their 95 % confidence intervals, failures by kind and client health.
pub fn servebench_block(
    s: &servebench_metrics::RunSummary,
    health: &servebench_metrics::result::ClientHealth,
    simulated: bool,
) -> String {
    let mut out = String::new();
    header(&mut out, " servebench ", '=');
    if simulated {
        let _ = writeln!(
            out,
            "Target: simulated engine (figures are the cost model's, not a GPU's)"
        );
    }
    line2(
        &mut out,
        "Prompt token throughput (tok/s):",
        s.prompt_throughput,
    );
    if let Some(g) = &s.goodput {
        line2(&mut out, "Goodput (output tok/s):", g.output_tokens_per_s);
        let _ = writeln!(
            out,
            "{:<40} {:<10}",
            "SLO attainment (%):",
            opt(g.attainment_pct)
        );
    }
    if let Some(c) = s.total_cached_tokens {
        line(&mut out, "Cached prompt tokens (server):", c);
    }
    let mut rows = Vec::new();
    // Time to first answer token sits next to TTFT, only for runs that reasoned or called
    // tools (an empty summary is skipped below like any metric without samples).
    let no_answer = servebench_metrics::MetricSummary::default();
    let ttfat = s.reasoning.as_ref().map_or(&no_answer, |r| &r.ttfat);
    for (name, m) in [
        ("TTFT", &s.ttft),
        ("TTFAT (first answer)", ttfat),
        ("TPOT", &s.tpot),
        ("ITL", &s.itl),
        ("E2EL", &s.e2el),
        ("Queue", &s.queue),
        ("User TTFT (+queue)", &s.user_ttft),
        ("User E2EL (+queue)", &s.user_e2el),
    ] {
        if m.n == 0 {
            continue;
        }
        let p = |q: f64| m.percentile(q).map(|x| x.value);
        let ci = m
            .percentile(99.0)
            .map(|x| {
                let lo = opt(x.ci_low);
                // Too few samples above the p99 to bound it from above: an open interval,
                // named as such (a bare "-" read as a missing figure).
                match x.ci_high {
                    None => format!("[{lo}, ∞) (no upper bound: too few samples)"),
                    Some(hi) if x.unstable => {
                        format!("[{lo}, {}] (unstable: too few samples)", opt(Some(hi)))
                    }
                    Some(hi) => format!("[{lo}, {}]", opt(Some(hi))),
                }
            })
            .unwrap_or_default();
        rows.push([
            name.to_owned(),
            opt(m.mean),
            opt(p(50.0)),
            opt(p(90.0)),
            opt(p(99.0)),
            ci,
        ]);
    }
    let head = ["metric (ms)", "mean", "p50", "p90", "p99", "p99 95% CI"].map(str::to_owned);
    out.push_str(&metric_table(&head, &rows));
    if let Some(r) = &s.reasoning {
        reasoning_lines(&mut out, r);
    }
    if let Some(ls) = s.longest_stall_ms {
        let _ = writeln!(
            out,
            "{:<40} {:<10}",
            "Longest stall (ms):",
            format!("{ls:.2}")
        );
        line(
            &mut out,
            "Stalls (requests with stalls):",
            format!("{} ({})", s.total_stalls, s.requests_with_stalls),
        );
    }
    if !s.failures_by_kind.is_empty() {
        let kinds: Vec<String> = s
            .failures_by_kind
            .iter()
            .map(|(k, n)| format!("{k}: {n}"))
            .collect();
        line(&mut out, "Failures by kind:", kinds.join(", "));
    }
    if let Some(c) = &s.answer_checks {
        line(
            &mut out,
            "Valid answers (passed/checked):",
            format!("{}/{} ({:.1} %)", c.passed, c.checked, c.validity_pct()),
        );
    }
    let srcs: Vec<String> = s
        .output_sources
        .iter()
        .map(|(k, n)| format!("{k}: {n}"))
        .collect();
    if !srcs.is_empty() {
        line(&mut out, "Output token counts from:", srcs.join(", "));
    }
    if let Some(c) = &s.connections {
        let _ = writeln!(out, "{}", c.line());
    }
    if let Some(p) = &s.phases {
        let _ = writeln!(out, "{}", p.line());
    }
    if let Some(h) = health.measured() {
        header(&mut out, "Client health", '-');
        let _ = writeln!(
            out,
            "{:<40} {:<10}",
            "Dispatch lag p50/p99/max (ms):",
            format!(
                "{}/{}/{}",
                opt(h.dispatch_lag_p50_ms),
                opt(h.dispatch_lag_p99_ms),
                opt(h.dispatch_lag_max_ms)
            )
        );
        let _ = writeln!(
            out,
            "{:<40} {:<10}",
            "Client CPU (% of one core):",
            opt(Some(h.cpu_percent))
        );
        if h.client_limited {
            let _ = writeln!(out, "{}", client_limited_warning(h));
        }
    }
    for w in &s.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    out.push_str(&"=".repeat(50));
    out.push('\n');
    out
}

/// Why the client limited a run, in the words that fit what was measured: its own CPU filled
/// the cores, or requests left late while it used little (other work held the machine).
pub fn client_limited_warning(h: &servebench_metrics::result::MeasuredHealth) -> String {
    if h.cpu_saturated() {
        return format!(
            "WARNING: the CLIENT limited this run: servebench used {:.0} % of one core on {} cores, \
             so requests left late; the server was not driven as planned: use a bigger client \
             machine or fewer streams",
            h.cpu_percent, h.cpus
        );
    }
    let load = h
        .load_average
        .map(|l| format!(" (load average {l:.1} on {} cores)", h.cpus))
        .unwrap_or_default();
    format!(
        "WARNING: requests left late (dispatch lag p99 {} ms) while servebench used only {:.0} % \
         of one core: other work on this machine held the CPU{load}, so the server was not \
         driven as planned; measure on a quieter machine",
        opt(h.dispatch_lag_p99_ms),
        h.cpu_percent
    )
}

/// `--repeat N`: every headline figure as mean ± std across runs, then the per-run values.
pub fn repeat_block(r: &servebench_metrics::RepeatSummary) -> String {
    let mut out = String::new();
    header(&mut out, &format!(" {} repeats ", r.runs), '=');
    for f in &r.figures {
        let (Some(mean), Some(std)) = (f.mean, f.std) else {
            continue;
        };
        let per_run: Vec<String> = f.values.iter().map(|v| opt(*v)).collect();
        let _ = writeln!(
            out,
            "{:<32} {:>12} ± {:<10} [{}]",
            f.name,
            format!("{mean:.2}"),
            format!("{std:.2}"),
            per_run.join(", ")
        );
    }
    out.push_str(&"=".repeat(50));
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Requests sent 1 s apart whose first token takes `ttft_ms` (plus a little per request),
    /// then 4 tokens 10 ms apart.
    fn summary_with_ttft(ttft_ms: u64) -> servebench_metrics::RunSummary {
        use servebench_metrics::{CountSource, RequestRecord, SummaryOptions, TokenEvent};
        const MS: u64 = 1_000_000;
        let records: Vec<RequestRecord> = (0..20u64)
            .map(|i| {
                let sent = i * 1000 * MS;
                let first = sent + (ttft_ms + i * 7919) * MS;
                let events: Vec<TokenEvent> = (0..4u64)
                    .map(|k| TokenEvent {
                        t: first + k * 10 * MS,
                        chars: 4,
                    })
                    .collect();
                let end = events.last().map(|e| e.t);
                RequestRecord {
                    phases: None,
                    images: None,
                    id: i,
                    intended: sent,
                    released: sent,
                    sent,
                    started: None,
                    bare_events: Vec::new(),
                    first_token: Some(first),
                    end,
                    done: end,
                    waited_for_slot: false,
                    events,
                    input_tokens: 16,
                    input_source: CountSource::Usage,
                    output_tokens: 4,
                    output_source: CountSource::Usage,
                    intended_input_tokens: 16,
                    max_tokens: Some(4),
                    cached_tokens: None,
                    finish_reason: Some("length".into()),
                    text: None,
                    failure: None,
                    resent: 0,
                    answer_checked: false,
                    output_split: None,
                    session_id: None,
                    turn: None,
                    stamp_clock: None,
                    lora: None,
                    served_by: None,
                }
            })
            .collect();
        servebench_metrics::summarize(&records, &SummaryOptions::default())
    }

    fn latency_lines(block: &str) -> Vec<&str> {
        block
            .lines()
            .skip_while(|l| !l.starts_with("metric (ms)"))
            .take_while(|l| !l.starts_with('='))
            .collect()
    }

    fn health(cpu_percent: f64, load: Option<f64>) -> servebench_metrics::result::MeasuredHealth {
        servebench_metrics::result::MeasuredHealth {
            dispatch_lag_p99_ms: Some(15.3),
            cpu_percent,
            cpus: 2,
            client_limited: true,
            load_average: load,
            ..Default::default()
        }
    }

    #[test]
    fn a_busy_machine_is_not_blamed_on_the_client() {
        let w = client_limited_warning(&health(5.4, Some(6.2)));
        assert!(w.contains("other work on this machine"), "{w}");
        assert!(w.contains("load average 6.2 on 2 cores"), "{w}");
        assert!(w.contains("15.30 ms") || w.contains("15.3"), "{w}");
        assert!(!w.contains("bigger client machine"), "{w}");
        let w = client_limited_warning(&health(5.4, None));
        assert!(!w.contains("load average"), "{w}");
    }

    #[test]
    fn a_saturated_client_is_told_to_get_a_bigger_machine() {
        let w = client_limited_warning(&health(185.0, Some(2.0)));
        assert!(w.contains("the CLIENT limited this run"), "{w}");
        assert!(w.contains("bigger client machine"), "{w}");
    }

    #[test]
    fn reasoning_lines_appear_only_for_runs_that_reasoned() {
        let health = servebench_metrics::result::ClientHealth::virtual_time();
        let mut s = summary_with_ttft(20);
        let plain = servebench_block(&s, &health, true);
        assert!(
            !plain.contains("TTFAT") && !plain.contains("Reasoning"),
            "{plain}"
        );
        s.reasoning = Some(servebench_metrics::ReasoningSummary {
            ttfat: servebench_metrics::MetricSummary::from_ms(vec![120.0, 140.0], &[50.0, 99.0]),
            reasoning_tokens: 64,
            answer_tokens: 36,
            reasoning_share: 0.64,
            requests_with_reasoning: 2,
            requests_with_tool_calls: 1,
            requests_without_answer: 0,
        });
        let block = servebench_block(&s, &health, true);
        let lines = latency_lines(&block);
        let ttft = lines
            .iter()
            .position(|l| l.starts_with("TTFT "))
            .unwrap_or_else(|| panic!("{block}"));
        assert!(
            lines[ttft + 1].starts_with("TTFAT (first answer)"),
            "{block}"
        );
        assert!(lines[ttft + 1].contains("130.00"), "{block}");
        let share = block
            .lines()
            .find_map(|l| l.strip_prefix("Reasoning share of output (%):"))
            .unwrap_or_else(|| panic!("{block}"));
        assert_eq!(share.trim(), "64.0", "{block}");
        assert!(block.contains("64 / 36"), "{block}");
        assert!(!block.contains("ended before answering"), "{block}");
    }

    #[test]
    fn terminal_latency_table_columns_never_run_together_for_huge_values() {
        let health = servebench_metrics::result::ClientHealth::virtual_time();
        let block = servebench_block(&summary_with_ttft(3_295_997_023), &health, true);
        let lines = latency_lines(&block);
        let ttft = lines
            .iter()
            .find(|l| l.starts_with("TTFT"))
            .unwrap_or_else(|| panic!("{block}"));
        // name, mean, p50, p90, p99, then the CI: each figure its own word.
        let words: Vec<&str> = ttft.split_whitespace().collect();
        assert!(words.len() >= 6, "columns ran together:\n{block}");
        for w in &words[1..5] {
            assert!(
                w.parse::<f64>().is_ok(),
                "'{w}' is not one figure:\n{block}"
            );
        }
        // Right-aligned figures stay aligned with their headers.
        let head = lines[0];
        let p99_end = head.find("p99").unwrap_or_else(|| panic!("{block}")) + 3;
        assert_eq!(&ttft[p99_end - 1..p99_end], &words[4][words[4].len() - 1..]);

        // Ordinary figures keep the usual layout: 22 for the name, 9 per figure.
        let block = servebench_block(&summary_with_ttft(20), &health, true);
        let lines = latency_lines(&block);
        assert!(
            lines[0].starts_with(&format!("{:<22}{:>9}{:>9}", "metric (ms)", "mean", "p50")),
            "{block}"
        );
    }

    #[test]
    fn header_is_centered_like_python_format() {
        let mut s = String::new();
        header(&mut s, " Serving Benchmark Result ", '=');
        assert_eq!(s, "============ Serving Benchmark Result ============\n");
        let mut s = String::new();
        header(&mut s, "Time to First Token", '-');
        assert_eq!(s, "---------------Time to First Token----------------\n");
    }
}
