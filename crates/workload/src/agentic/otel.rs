//! OpenTelemetry GenAI spans in OTLP JSON, replayed as agent session trees (docs/agents.md).
//!
//! The file is an OTLP `ExportTraceServiceRequest` in JSON (`{"resourceSpans": [...]}`), or
//! JSON lines of them (what the OpenTelemetry Collector's file exporter writes). Spans are read
//! by the GenAI semantic conventions:
//! - a model call: `gen_ai.operation.name` `chat`, `text_completion` or `generate_content` (or,
//!   from instrumentations that set no operation, any span with `gen_ai.usage.input_tokens`),
//!   with `gen_ai.usage.input_tokens` and `gen_ai.usage.output_tokens`;
//! - a tool: `execute_tool` (`gen_ai.tool.name`); one that wraps an agent (an agent used as a
//!   tool) is that agent's spawn, not a wait of its own;
//! - an agent: `invoke_agent` (`gen_ai.agent.name`, `gen_ai.conversation.id`).
//!
//! Each span belongs to its nearest agent ancestor. A top-level agent is a session (its id:
//! `gen_ai.conversation.id`, else the trace id); an agent inside another is a sub-agent,
//! spawned after the parent's last model call that ended before it started. Model calls
//! outside any agent make the trace one session of their own, with its top-level agents as
//! sub-agents. Times come from the spans: a session arrives at its first span's start (offsets
//! from the earliest session), a tool's wait runs from the answer before it to the tool's end,
//! a turn's think time is what is left between the end of every wait and its start. A
//! turn's new message is its input tokens less the context before it (the previous input and
//! output, and the final answers of the sub-agents it waited for); a context that shrank (an
//! agent that compacts its history) cannot be replayed as growth and is an error.
//! Tool spans after an agent's last model call are dropped: no request waits for them.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use super::{check_tree, AgentSession, AgentTurn, Content, ToolCall};
use crate::error::WorkloadError;

/// What a span is, by the GenAI conventions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Model,
    Tool,
    Agent,
    Other,
}

#[derive(Debug, Clone)]
struct Span {
    trace: String,
    id: String,
    parent: Option<String>,
    start: u64,
    end: u64,
    kind: Kind,
    input_tokens: Option<i128>,
    output_tokens: Option<i128>,
    tool_name: String,
    agent_name: String,
    conversation: Option<String>,
    /// Where the span is in the file (1-based).
    line: usize,
}

fn field<'a>(o: &'a serde_json::Map<String, Value>, camel: &str, snake: &str) -> Option<&'a Value> {
    o.get(camel).or_else(|| o.get(snake))
}

/// An OTLP `AnyValue` as an integer (`intValue` is a decimal string or a number in JSON).
fn int_value(v: &Value) -> Option<i128> {
    let o = v.as_object()?;
    if let Some(i) = field(o, "intValue", "int_value") {
        return match i {
            Value::String(s) => s.trim().parse().ok(),
            Value::Number(n) => n
                .as_i64()
                .map(i128::from)
                .or_else(|| n.as_u64().map(i128::from)),
            _ => None,
        };
    }
    if let Some(d) = field(o, "doubleValue", "double_value").and_then(Value::as_f64) {
        if d.is_finite() && d.fract() == 0.0 && d.abs() < 1e18 {
            return Some(d as i128);
        }
    }
    None
}

fn string_value(v: &Value) -> Option<String> {
    let o = v.as_object()?;
    field(o, "stringValue", "string_value")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// A `*UnixNano` timestamp: a decimal string or a number.
fn nanos(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::String(s) => s.trim().parse().ok(),
        Value::Number(n) => n.as_u64(),
        _ => None,
    }
}

/// Lines of each `"spanId": "…"` in a pretty-printed document.
fn span_lines(text: &str) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    let key = "\"spanId\"";
    let mut from = 0;
    while let Some(pos) = text[from..].find(key) {
        let at = from + pos;
        from = at + key.len();
        let rest = text[from..].trim_start();
        let Some(rest) = rest.strip_prefix(':') else {
            continue;
        };
        let rest = rest.trim_start();
        let Some(rest) = rest.strip_prefix('"') else {
            continue;
        };
        let Some(end) = rest.find('"') else {
            continue;
        };
        let line = text[..at].matches('\n').count() + 1;
        out.entry(rest[..end].to_owned()).or_insert(line);
    }
    out
}

/// The documents of the file: one whole document, or one per line. Each with the line it is
/// on (a whole document: 0, its spans' lines are looked up).
fn documents(text: &str, path: &Path) -> Result<Vec<(Value, usize)>, WorkloadError> {
    let whole_err = match serde_json::from_str::<Value>(text) {
        Ok(v) => return Ok(vec![(v, 0)]),
        Err(e) => e,
    };
    let first = text.lines().enumerate().find(|(_, l)| !l.trim().is_empty());
    let lines_mode =
        first.is_some_and(|(_, l)| serde_json::from_str::<Value>(l).is_ok_and(|v| v.is_object()));
    if !lines_mode {
        let line = whole_err.line().max(1);
        return Err(WorkloadError::malformed(
            path,
            line,
            format!(
                "not OTLP JSON (an ExportTraceServiceRequest, or JSON lines of them): {whole_err}"
            ),
        ));
    }
    let mut docs = Vec::new();
    for (n, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(l).map_err(|e| {
            WorkloadError::malformed(path, n + 1, format!("not an OTLP JSON object: {e}"))
        })?;
        docs.push((v, n + 1));
    }
    Ok(docs)
}

fn spans_of(text: &str, path: &Path) -> Result<Vec<Span>, WorkloadError> {
    let docs = documents(text, path)?;
    let pretty_lines = if docs.len() == 1 && docs[0].1 == 0 {
        Some(span_lines(text))
    } else {
        None
    };
    let mut spans = Vec::new();
    for (doc, doc_line) in docs {
        let line = |id: &str| match &pretty_lines {
            Some(m) => m.get(id).copied().unwrap_or(1),
            None => doc_line,
        };
        let bad_doc = |m: &str| WorkloadError::malformed(path, doc_line.max(1), m.to_owned());
        let Some(obj) = doc.as_object() else {
            return Err(bad_doc("not OTLP JSON: the document is not an object"));
        };
        let Some(resources) = field(obj, "resourceSpans", "resource_spans") else {
            return Err(bad_doc(
                "not OTLP JSON traces: no resourceSpans (an ExportTraceServiceRequest holds them)",
            ));
        };
        let Some(resources) = resources.as_array() else {
            return Err(bad_doc("resourceSpans must be a list"));
        };
        for r in resources {
            let Some(r) = r.as_object() else {
                return Err(bad_doc("an entry of resourceSpans is not an object"));
            };
            let scopes = field(r, "scopeSpans", "scope_spans")
                .or_else(|| r.get("instrumentationLibrarySpans"))
                .map(|s| {
                    s.as_array()
                        .ok_or_else(|| bad_doc("scopeSpans must be a list"))
                })
                .transpose()?;
            for scope in scopes.into_iter().flatten() {
                let Some(scope) = scope.as_object() else {
                    return Err(bad_doc("an entry of scopeSpans is not an object"));
                };
                let list = match scope.get("spans") {
                    None => continue,
                    Some(Value::Array(a)) => a,
                    Some(_) => return Err(bad_doc("spans must be a list")),
                };
                for s in list {
                    spans.push(span(s, path, doc_line, &line)?);
                }
            }
        }
    }
    Ok(spans)
}

fn span(
    s: &Value,
    path: &Path,
    doc_line: usize,
    line_of: &dyn Fn(&str) -> usize,
) -> Result<Span, WorkloadError> {
    let Some(o) = s.as_object() else {
        return Err(WorkloadError::malformed(
            path,
            doc_line.max(1),
            "a span is not an object",
        ));
    };
    let id = field(o, "spanId", "span_id")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let line = line_of(&id).max(1);
    let bad = |m: String| WorkloadError::malformed(path, line, m);
    if id.is_empty() {
        return Err(bad("a span without spanId".into()));
    }
    let trace = field(o, "traceId", "trace_id")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| bad(format!("span {id}: no traceId")))?
        .to_owned();
    let parent = field(o, "parentSpanId", "parent_span_id")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .map(str::to_owned);
    let start = nanos(field(o, "startTimeUnixNano", "start_time_unix_nano")).ok_or_else(|| {
        bad(format!(
            "span {id}: startTimeUnixNano is missing or not a time"
        ))
    })?;
    let end = nanos(field(o, "endTimeUnixNano", "end_time_unix_nano")).ok_or_else(|| {
        bad(format!(
            "span {id}: endTimeUnixNano is missing or not a time"
        ))
    })?;
    if end < start {
        return Err(bad(format!("span {id} ends before it starts")));
    }
    let mut attrs: HashMap<&str, &Value> = HashMap::new();
    match o.get("attributes") {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) => {
            for a in list {
                let key = a.get("key").and_then(Value::as_str);
                let value = a.get("value");
                match (key, value) {
                    (Some(k), Some(v)) => {
                        attrs.insert(k, v);
                    }
                    _ => {
                        return Err(bad(format!(
                            "span {id}: an attribute without key and value"
                        )))
                    }
                }
            }
        }
        Some(_) => return Err(bad(format!("span {id}: attributes must be a list"))),
    }
    let text = |k: &str| attrs.get(k).and_then(|v| string_value(v));
    let int = |k: &str| -> Result<Option<i128>, WorkloadError> {
        match attrs.get(k) {
            None => Ok(None),
            Some(v) => int_value(v)
                .map(Some)
                .ok_or_else(|| bad(format!("span {id}: {k} is not an integer"))),
        }
    };
    let input_tokens = int("gen_ai.usage.input_tokens")?;
    let output_tokens = int("gen_ai.usage.output_tokens")?;
    let kind = match text("gen_ai.operation.name").as_deref() {
        Some("chat" | "text_completion" | "generate_content") => Kind::Model,
        Some("execute_tool") => Kind::Tool,
        Some("invoke_agent") => Kind::Agent,
        Some(_) => Kind::Other,
        None if input_tokens.is_some() => Kind::Model,
        None => Kind::Other,
    };
    Ok(Span {
        trace,
        parent,
        start,
        end,
        kind,
        input_tokens,
        output_tokens,
        tool_name: text("gen_ai.tool.name").unwrap_or_default(),
        agent_name: text("gen_ai.agent.name").unwrap_or_default(),
        conversation: text("gen_ai.conversation.id"),
        line,
        id,
    })
}

/// A node of the agent tree: an agent span, or the trace itself (model calls outside agents).
#[derive(Debug, Default)]
struct Node {
    /// The agent span, `None` for a trace's implicit root.
    span: Option<usize>,
    models: Vec<usize>,
    tools: Vec<usize>,
    children: Vec<usize>,
}

/// One trace's spans, with the tree of agents over them.
struct Trace<'a> {
    spans: Vec<&'a Span>,
    nodes: Vec<Node>,
}

fn build_trace<'a>(spans: Vec<&'a Span>, path: &Path) -> Result<Trace<'a>, WorkloadError> {
    let mut by_id: HashMap<&str, usize> = HashMap::new();
    for (i, s) in spans.iter().enumerate() {
        if by_id.insert(s.id.as_str(), i).is_some() {
            return Err(WorkloadError::malformed(
                path,
                s.line,
                format!("span {} appears twice in trace {}", s.id, s.trace),
            ));
        }
    }
    let parent = |i: usize| {
        spans[i]
            .parent
            .as_deref()
            .and_then(|p| by_id.get(p).copied())
    };
    // Ancestors of a span, nearest first (a cycle is cut after every span was seen once).
    let ancestors = |i: usize| -> Result<Vec<usize>, WorkloadError> {
        let mut out = Vec::new();
        let mut at = i;
        while let Some(p) = parent(at) {
            out.push(p);
            if out.len() > spans.len() {
                return Err(WorkloadError::malformed(
                    path,
                    spans[i].line,
                    format!("span {}: its parents form a cycle", spans[i].id),
                ));
            }
            at = p;
        }
        Ok(out)
    };
    let mut nearest_agent: Vec<Option<usize>> = Vec::with_capacity(spans.len());
    let mut wrapper_tools: Vec<bool> = vec![false; spans.len()];
    for i in 0..spans.len() {
        let up = ancestors(i)?;
        let agent = up.iter().copied().find(|&a| spans[a].kind == Kind::Agent);
        nearest_agent.push(agent);
        if spans[i].kind == Kind::Agent {
            // Tools between an agent and its parent agent wrap it (an agent used as a tool).
            for &a in &up {
                if spans[a].kind == Kind::Agent {
                    break;
                }
                if spans[a].kind == Kind::Tool {
                    wrapper_tools[a] = true;
                }
            }
        }
    }
    let orphan_models =
        (0..spans.len()).any(|i| spans[i].kind == Kind::Model && nearest_agent[i].is_none());
    let mut nodes: Vec<Node> = Vec::new();
    let mut node_of_agent = HashMap::new();
    if orphan_models {
        nodes.push(Node::default());
    }
    for (i, s) in spans.iter().enumerate() {
        if s.kind == Kind::Agent {
            node_of_agent.insert(i, nodes.len());
            nodes.push(Node {
                span: Some(i),
                ..Node::default()
            });
        }
    }
    for i in 0..spans.len() {
        let owner = match nearest_agent[i] {
            Some(a) => node_of_agent.get(&a).copied(),
            None if orphan_models => Some(0),
            None => None,
        };
        let Some(owner) = owner else { continue };
        match spans[i].kind {
            Kind::Model => nodes[owner].models.push(i),
            Kind::Tool if !wrapper_tools[i] => nodes[owner].tools.push(i),
            Kind::Agent => nodes[owner].children.push(node_of_agent[&i]),
            _ => {}
        }
    }
    Ok(Trace { spans, nodes })
}

impl Trace<'_> {
    /// The sessions of this trace: the implicit root, or every top-level agent.
    fn roots(&self) -> Vec<usize> {
        if self.nodes.first().is_some_and(|n| n.span.is_none()) {
            return vec![0];
        }
        let nested: std::collections::HashSet<usize> = self
            .nodes
            .iter()
            .flat_map(|n| n.children.iter().copied())
            .collect();
        (0..self.nodes.len())
            .filter(|i| !nested.contains(i))
            .collect()
    }

    fn line(&self, node: usize) -> usize {
        let n = &self.nodes[node];
        n.span
            .map(|s| self.spans[s].line)
            .or_else(|| n.models.first().map(|&m| self.spans[m].line))
            .unwrap_or(1)
    }

    /// When a node's agent starts: its span's start, or its first model call's.
    fn start(&self, node: usize) -> u64 {
        let n = &self.nodes[node];
        match n.span {
            Some(s) => self.spans[s].start,
            None => n
                .models
                .iter()
                .map(|&m| self.spans[m].start)
                .min()
                .unwrap_or(0),
        }
    }

    /// When a node's agent ends: its span's end, or its last model call's.
    fn end(&self, node: usize) -> u64 {
        let n = &self.nodes[node];
        let last_model = n
            .models
            .iter()
            .map(|&m| self.spans[m].end)
            .max()
            .unwrap_or(0);
        match n.span {
            Some(s) => self.spans[s].end.max(last_model),
            None => last_model,
        }
    }

    /// The agent of `node`; `spawned_at` is the end of the parent's answer that spawned it
    /// (`None` for a session).
    fn agent(
        &self,
        node: usize,
        spawned_at: Option<u64>,
        depth: usize,
        path: &Path,
    ) -> Result<AgentSession, WorkloadError> {
        let n = &self.nodes[node];
        let bad = |line: usize, m: String| WorkloadError::malformed(path, line, m);
        if depth > super::MAX_DEPTH {
            return Err(bad(
                self.line(node),
                format!("agents nest more than {} levels deep", super::MAX_DEPTH),
            ));
        }
        let span_of = |i: usize| self.spans[i];
        let mut models = n.models.clone();
        models.sort_by_key(|&m| (span_of(m).start, span_of(m).end, span_of(m).line));
        if models.is_empty() {
            return Err(bad(
                self.line(node),
                format!(
                    "agent span {} has no model call (gen_ai.operation.name chat, text_completion or generate_content)",
                    n.span.map(|s| span_of(s).id.as_str()).unwrap_or("?")
                ),
            ));
        }
        // The turn each tool and sub-agent follows: the last model call ended by its start.
        let after = |start: u64| models.iter().rposition(|&m| span_of(m).end <= start);
        let mut tools: Vec<Vec<usize>> = vec![Vec::new(); models.len()];
        for &t in &n.tools {
            if let Some(k) = after(span_of(t).start) {
                tools[k].push(t);
            }
        }
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); models.len()];
        let mut kids = n.children.clone();
        kids.sort_by_key(|&c| (self.start(c), self.line(c)));
        for c in kids {
            match after(self.start(c)) {
                Some(k) => children[k].push(c),
                None => {
                    return Err(bad(
                        self.line(c),
                        "a sub-agent starts before its parent's first model call ended: a \
                         sub-agent is spawned by an answer"
                            .to_owned(),
                    ))
                }
            }
        }
        let last = models.len() - 1;
        if let Some(&c) = children[last].first() {
            return Err(bad(
                self.line(c),
                "a sub-agent starts after its parent's last model call: no turn carries its \
                 result"
                    .to_owned(),
            ));
        }
        tools[last].clear();
        let mut turns = Vec::with_capacity(models.len());
        // (input, output) of the previous call, and the final answers it waited for.
        let mut before: Option<(i128, i128)> = None;
        let mut wait_end = spawned_at.unwrap_or_else(|| self.start(node));
        let mut subagents_before: Vec<AgentSession> = Vec::new();
        for (k, &m) in models.iter().enumerate() {
            let s = span_of(m);
            let bad_here = |msg: String| bad(s.line, format!("span {}: {msg}", s.id));
            let input = s
                .input_tokens
                .ok_or_else(|| bad_here("a model call without gen_ai.usage.input_tokens".into()))?;
            let output = s.output_tokens.ok_or_else(|| {
                bad_here("a model call without gen_ai.usage.output_tokens".into())
            })?;
            let cap = i128::from(super::MAX_MESSAGE_TOKENS) * 1000;
            if !(0..=cap).contains(&input) || !(1..=cap).contains(&output) {
                return Err(bad_here(format!(
                    "token counts out of range (input {input}, output {output})"
                )));
            }
            let context = match before {
                None => 0,
                Some((i, o)) => {
                    i + o
                        + subagents_before
                            .iter()
                            .map(|c| i128::from(c.final_output_tokens()))
                            .sum::<i128>()
                }
            };
            let new = input - context;
            if new < 0 {
                return Err(bad_here(format!(
                    "gen_ai.usage.input_tokens {input} is less than the context before the call \
                     ({context}: the previous call's input and output and the sub-agents' \
                     answers); a context that shrinks (compaction) cannot be replayed"
                )));
            }
            let think = s.start.saturating_sub(wait_end);
            let mut tool = None;
            let mut end_of_waits = s.end;
            if !tools[k].is_empty() {
                let tool_end = tools[k]
                    .iter()
                    .map(|&t| span_of(t).end)
                    .max()
                    .unwrap_or(s.end);
                let names: Vec<&str> = tools[k]
                    .iter()
                    .map(|&t| span_of(t).tool_name.as_str())
                    .filter(|n| !n.is_empty())
                    .collect();
                tool = Some(ToolCall {
                    name: names.join(","),
                    latency_ns: tool_end.saturating_sub(s.end),
                });
                end_of_waits = end_of_waits.max(tool_end);
            }
            let mut subagents = Vec::with_capacity(children[k].len());
            for &c in &children[k] {
                subagents.push(self.agent(c, Some(s.end), depth + 1, path)?);
                end_of_waits = end_of_waits.max(self.end(c));
            }
            turns.push(AgentTurn {
                input: Content::Tokens(new as u64),
                output_tokens: output as u64,
                think_time_ns: Some(think),
                tool,
                subagents: subagents.clone(),
            });
            before = Some((input, output));
            subagents_before = subagents;
            wait_end = end_of_waits;
        }
        let id = match (spawned_at, n.span) {
            (Some(_), Some(a)) => span_of(a).agent_name.clone(),
            (Some(_), None) => String::new(),
            (None, a) => a
                .and_then(|a| span_of(a).conversation.clone())
                .or_else(|| models.iter().find_map(|&m| span_of(m).conversation.clone()))
                .unwrap_or_default(),
        };
        Ok(AgentSession {
            id,
            arrival_ns: None,
            system: None,
            turns,
        })
    }
}

/// The session trees of an OTLP JSON text; `path` names the source in errors.
pub fn parse_otel(text: &str, path: &Path) -> Result<Vec<AgentSession>, WorkloadError> {
    let text = crate::text_file::strip_bom(text);
    let spans = spans_of(text, path)?;
    let mut traces: Vec<(&str, Vec<&Span>)> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for s in &spans {
        let i = *index.entry(s.trace.as_str()).or_insert_with(|| {
            traces.push((s.trace.as_str(), Vec::new()));
            traces.len() - 1
        });
        traces[i].1.push(s);
    }
    // (start, line, session)
    let mut sessions: Vec<(u64, usize, AgentSession)> = Vec::new();
    for (trace_id, spans) in traces {
        if !spans.iter().any(|s| s.kind == Kind::Model) {
            continue;
        }
        let t = build_trace(spans, path)?;
        let roots = t.roots();
        let many = roots.len() > 1;
        for r in roots {
            let mut s = t.agent(r, None, 0, path)?;
            if s.id.is_empty() {
                s.id = match (many, t.nodes[r].span) {
                    (true, Some(a)) => format!("{trace_id}:{}", t.spans[a].id),
                    _ => trace_id.to_owned(),
                };
            }
            sessions.push((t.start(r), t.line(r), s));
        }
    }
    sessions.sort_by_key(|(start, line, _)| (*start, *line));
    let first = sessions.first().map_or(0, |(s, _, _)| *s);
    let mut out = Vec::with_capacity(sessions.len());
    for (start, line, mut s) in sessions {
        s.arrival_ns = Some(start - first);
        check_tree(&s, 0).map_err(|e| {
            WorkloadError::malformed(path, line, format!("session {:?}: {e}", s.id))
        })?;
        out.push(s);
    }
    Ok(out)
}

/// The session trees of the OTLP JSON file at `path`.
pub fn read_otel(path: &Path) -> Result<Vec<AgentSession>, WorkloadError> {
    let text = crate::text_file::read_text(path)?;
    let sessions = parse_otel(&text, path)?;
    if sessions.is_empty() {
        return Err(WorkloadError::Empty {
            path: path.to_path_buf(),
            reason: "no model-call span (gen_ai.operation.name chat, or gen_ai.usage.input_tokens) in the file".to_owned(),
        });
    }
    Ok(sessions)
}

/// Whether a file's text looks like OTLP JSON rather than servebench's agent-trace lines.
pub fn looks_like_otlp(text: &str) -> bool {
    let head: String = crate::text_file::strip_bom(text)
        .chars()
        .take(4096)
        .collect();
    head.contains("\"resourceSpans\"") || head.contains("\"resource_spans\"")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn attr(k: &str, v: Value) -> Value {
        serde_json::json!({"key": k, "value": v})
    }

    fn model(id: &str, parent: &str, start_ms: u64, end_ms: u64, input: u64, output: u64) -> Value {
        serde_json::json!({
        "traceId": "t1", "spanId": id, "parentSpanId": parent, "name": "chat m", "kind": 3,
        "startTimeUnixNano": (start_ms * 1_000_000).to_string(),
        "endTimeUnixNano": (end_ms * 1_000_000).to_string(),
        "attributes": [
            attr("gen_ai.operation.name", serde_json::json!({"stringValue": "chat"})),
            attr("gen_ai.usage.input_tokens", serde_json::json!({"intValue": input.to_string()})),
            attr("gen_ai.usage.output_tokens", serde_json::json!({"intValue": output})),
        ]})
    }

    fn other(id: &str, parent: &str, op: &str, start_ms: u64, end_ms: u64, name: &str) -> Value {
        let key = if op == "execute_tool" {
            "gen_ai.tool.name"
        } else {
            "gen_ai.agent.name"
        };
        serde_json::json!({
        "traceId": "t1", "spanId": id, "parentSpanId": parent, "name": format!("{op} {name}"),
        "startTimeUnixNano": (start_ms * 1_000_000).to_string(),
        "endTimeUnixNano": (end_ms * 1_000_000).to_string(),
        "attributes": [
            attr("gen_ai.operation.name", serde_json::json!({"stringValue": op})),
            attr(key, serde_json::json!({"stringValue": name})),
        ]})
    }

    fn doc(spans: Vec<Value>) -> String {
        serde_json::to_string_pretty(
            &serde_json::json!({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}),
        )
        .unwrap()
    }

    #[test]
    fn an_agent_with_a_tool_and_sub_agents_becomes_one_tree() {
        let text = doc(vec![
            other("a", "", "invoke_agent", 1000, 2000, "main"),
            model("m0", "a", 1010, 1100, 100, 10),
            other("t0", "a", "execute_tool", 1105, 1300, "bash"),
            model("m1", "a", 1310, 1400, 150, 20),
            other("s0", "a", "invoke_agent", 1400, 1600, "helper"),
            model("s0m0", "s0", 1400, 1450, 30, 5),
            model("s0m1", "s0", 1450, 1590, 40, 7),
            other("s1", "a", "invoke_agent", 1400, 1550, "helper"),
            model("s1m0", "s1", 1405, 1540, 25, 9),
            model("m2", "a", 1620, 1700, 150 + 20 + 7 + 9 + 4, 30),
        ]);
        let s = parse_otel(&text, Path::new("o.json")).unwrap();
        assert_eq!(s.len(), 1);
        let a = &s[0];
        assert_eq!(a.id, "t1");
        assert_eq!(a.arrival_ns, Some(0));
        let ms = 1_000_000;
        assert_eq!(a.turns.len(), 3);
        assert_eq!(a.turns[0].input, Content::Tokens(100));
        assert_eq!(a.turns[0].think_time_ns, Some(10 * ms));
        assert_eq!(
            a.turns[0].tool,
            Some(ToolCall {
                name: "bash".into(),
                latency_ns: 200 * ms
            })
        );
        assert_eq!(a.turns[1].input, Content::Tokens(150 - 110));
        assert_eq!(a.turns[1].think_time_ns, Some(10 * ms));
        let subs = &a.turns[1].subagents;
        assert_eq!(subs.len(), 2);
        assert_eq!(subs[0].turns.len(), 2);
        assert_eq!(subs[0].turns[1].input, Content::Tokens(40 - 35));
        assert_eq!(subs[1].turns[0].think_time_ns, Some(5 * ms));
        assert_eq!(a.turns[2].input, Content::Tokens(4));
        // The last wait ends with the slower sub-agent (1600 ms).
        assert_eq!(a.turns[2].think_time_ns, Some(20 * ms));
    }

    #[test]
    fn bad_spans_name_their_line() {
        let shrink = doc(vec![
            model("m0", "", 0, 10, 100, 10),
            model("m1", "", 20, 30, 50, 5),
        ]);
        let e = parse_otel(&shrink, Path::new("o.json"))
            .unwrap_err()
            .to_string();
        let line = shrink.lines().position(|l| l.contains("\"m1\"")).unwrap() + 1;
        assert!(e.starts_with(&format!("o.json:{line}: span m1")), "{e}");
        assert!(e.contains("compaction"), "{e}");
        let lines = format!(
            "{}\n{}\n",
            serde_json::to_string(&serde_json::json!({"resourceSpans": []})).unwrap(),
            "{\"resourceSpans\": 3}"
        );
        let e = parse_otel(&lines, Path::new("o.jsonl"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("o.jsonl:2: "), "{e}");
        let e = parse_otel(
            "{\n \"resourceSpans\": [\n  {\"scopeSpans\": oops}\n]}",
            Path::new("p.json"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("p.json:3: "), "{e}");
        assert!(looks_like_otlp(&shrink));
        assert!(!looks_like_otlp("{\"session_id\": 1}"));
    }
}
