//! `servebench run --dataset-name agentic`: agent session trees (docs/agents.md) over HTTP
//! (the load generator's agent driver) or through the simulator in virtual time, then the
//! same writers as any run, with the per-session figures and the by-depth table.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use servebench_loadgen::{
    run_agents, AgentSpec, AgentStart, ConversationBackend, Progress, StopSignal,
};
use servebench_tokenizer::Tokenizer;
use servebench_workload::agentic::{
    materialize, otel, synthetic, trace, AgentScript, AgentSession,
};

use super::agents_plan::{AgentPlan, AgentSource, AgentTraceFormat};
use super::http_run::{connect, print_traffic, HttpTarget};
use super::plan::RunPlan;
use super::{dataset, output, RunOutcome, RunTarget};

/// The sessions of a trace file, in its format (given or detected).
pub fn read_trace(path: &Path, format: Option<AgentTraceFormat>) -> Result<Vec<AgentSession>> {
    let format = match format {
        Some(f) => f,
        None => {
            let text = std::fs::read(path)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
            let head = String::from_utf8_lossy(&text[..text.len().min(4096)]).into_owned();
            if otel::looks_like_otlp(&head) {
                AgentTraceFormat::Otel
            } else {
                AgentTraceFormat::Servebench
            }
        }
    };
    Ok(match format {
        AgentTraceFormat::Otel => otel::read_otel(path)?,
        AgentTraceFormat::Servebench => trace::read_agent_trace(path)?,
    })
}

/// The plan's session trees as sent, and the trace's own arrival times when it gives them
/// for every session.
pub fn scripts(
    plan: &RunPlan,
    agents: &AgentPlan,
    tokenizer: &Tokenizer,
) -> Result<(Vec<AgentScript>, Option<Vec<u64>>)> {
    let (sessions, default_think_ns) = match &agents.source {
        AgentSource::Synthetic(c) => {
            let mut c = c.clone();
            c.num_sessions = plan.num_prompts;
            c.seed = plan.seed;
            (synthetic::generate(&c)?, 0)
        }
        AgentSource::Trace {
            path,
            format,
            default_think_ns,
        } => {
            let mut s = read_trace(path, *format)?;
            // A replay keeps the file's order; --num-prompts caps the sessions taken.
            s.truncate(plan.num_prompts);
            (s, *default_think_ns)
        }
    };
    let arrivals: Option<Vec<u64>> = sessions.iter().map(|s| s.arrival_ns).collect();
    let arrivals = arrivals.map(|mut a| {
        // Offsets from the first session taken.
        let first = a.iter().copied().min().unwrap_or(0);
        a.iter_mut().for_each(|t| *t -= first);
        a
    });
    let started = std::time::Instant::now();
    let scripts = materialize(&sessions, tokenizer, plan.seed, default_think_ns)?;
    let took = started.elapsed();
    if took > Duration::from_secs(2) {
        eprintln!(
            "Built {} agent sessions in {:.1} s",
            scripts.len(),
            took.as_secs_f64()
        );
    }
    Ok((scripts, arrivals))
}

/// How sessions start: a population of users, a rate, or the trace's own clock (all at once
/// when it has none).
pub fn start(
    plan: &RunPlan,
    agents: &AgentPlan,
    n: usize,
    trace_arrivals: Option<Vec<u64>>,
) -> Result<AgentStart> {
    if let Some(users) = agents.num_users {
        return Ok(AgentStart::Users(users));
    }
    let rated = plan.traffic.request_rate.is_finite();
    Ok(match trace_arrivals {
        Some(mut a) if !rated => {
            // A trace's sessions in arrival order (the driver starts them in list order).
            a.sort_unstable();
            AgentStart::Arrivals(a)
        }
        _ => AgentStart::Arrivals(dataset::schedule(plan, n)?),
    })
}

/// The sessions in the order their arrival times go (a trace's arrivals may be out of file
/// order).
fn in_arrival_order(
    scripts: Vec<AgentScript>,
    arrivals: &Option<Vec<u64>>,
    plan: &RunPlan,
    agents: &AgentPlan,
) -> Vec<AgentScript> {
    match arrivals {
        Some(a) if agents.num_users.is_none() && !plan.traffic.request_rate.is_finite() => {
            let mut paired: Vec<(u64, AgentScript)> = a.iter().copied().zip(scripts).collect();
            paired.sort_by_key(|(t, _)| *t);
            paired.into_iter().map(|(_, s)| s).collect()
        }
        _ => scripts,
    }
}

/// Measure the plan's agent sessions against `target` and write the results.
pub async fn execute(
    plan: &RunPlan,
    agents: &AgentPlan,
    target: &RunTarget,
    command_line: Vec<String>,
    stop: &StopSignal,
    print: bool,
) -> Result<RunOutcome> {
    let tokenizer = super::load_tokenizer(plan.tokenizer.as_deref(), print)?;
    let (scripts, arrivals) = scripts(plan, agents, &tokenizer)?;
    if scripts.is_empty() {
        bail!("the dataset produced no agent session");
    }
    let scripts = in_arrival_order(scripts, &arrivals, plan, agents);
    let start = start(plan, agents, scripts.len(), arrivals)?;
    match target {
        RunTarget::Http(http) => {
            measure(
                http,
                plan,
                agents,
                scripts,
                start,
                &tokenizer,
                command_line,
                stop,
                print,
            )
            .await
        }
        RunTarget::Virtual(v) => {
            if plan.traffic.num_warmups > 0 {
                bail!("--num-warmups is not supported with --dataset-name agentic --virtual-time: the sessions start on a cold engine");
            }
            let run = super::agents_virtual::simulate_agents(&v.sim, plan, &scripts, &start)?;
            super::agents_virtual::write(v, plan, &tokenizer, command_line, print, run)
        }
    }
}

/// One line on what the run sends.
fn describe(scripts: &[AgentScript], start: &AgentStart) -> String {
    let turns: usize = scripts.iter().map(AgentScript::total_turns).sum();
    let agents: usize = scripts.iter().map(|s| s.walk().len()).sum();
    let how = match start {
        AgentStart::Users(n) => format!("{n} users, each starting a session when its last ended"),
        AgentStart::Arrivals(_) => "rate and concurrency count sessions".to_owned(),
    };
    format!(
        "Agents: {} sessions, {} sub-agents, {turns} turns ({how})",
        scripts.len(),
        agents - scripts.len()
    )
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    http: &HttpTarget,
    plan: &RunPlan,
    agents: &AgentPlan,
    scripts: Vec<AgentScript>,
    start: AgentStart,
    tokenizer: &Tokenizer,
    command_line: Vec<String>,
    stop: &StopSignal,
    print: bool,
) -> Result<RunOutcome> {
    let (client, model_id) = connect(&http.base_url, plan, tokenizer, print).await?;
    // The ready check and warm-ups send the first session's opening turn on its own.
    let first = scripts.first().and_then(|s| {
        let t = s.turns.first()?;
        let mut history = Vec::new();
        let mut tokens = t.input.tokens;
        if let Some(sys) = &s.system {
            history.push(servebench_loadgen::sessions::Message {
                role: "system",
                text: sys.text.clone(),
            });
            tokens += sys.tokens;
        }
        history.push(servebench_loadgen::sessions::Message {
            role: "user",
            text: t.input.text.clone(),
        });
        Some(client.prepare_turn(0, &history, tokens, Some(t.max_tokens)))
    });
    let Some(first) = first else {
        bail!("the dataset produced no agent session");
    };
    let report_args = plan.to_args();
    let (mut finish, sink) =
        output::Finish::open(&report_args, model_id, tokenizer, command_line, print)?;
    let sink = output::stopping_on_write_error(sink);
    output::ready_and_warm_up(plan, &client, first, stop, print).await?;
    let total_turns: usize = scripts.iter().map(AgentScript::total_turns).sum();
    if print {
        if agents.num_users.is_none() {
            print_traffic(plan);
        }
        eprintln!("{}", describe(&scripts, &start));
    }
    let spec = AgentSpec {
        start,
        max_concurrency: plan.traffic.max_concurrency,
        progress: plan.report.progress.then(|| Progress {
            ui: plan.report.ui.view().unwrap_or_default(),
            total: Some(total_turns),
            label: plan
                .report
                .progress_label
                .as_ref()
                .map_or_else(|| "turns".into(), |l| format!("{l} turns")),
        }),
        scrape_every: Some(Duration::from_secs(1)),
        keep_text: plan.report.save_detailed,
        session_header: agents.session_header.clone(),
    };
    let gpu = super::gpu_telemetry::GpuWatch::start(plan.gpu_metrics_url.as_deref())?;
    super::measuring_begins();
    let out = run_agents(Arc::clone(&client), scripts, spec, Some(sink), stop.clone()).await?;
    let mut outcome = out.load;
    gpu.finish(&mut outcome).await;
    if let Some(e) = &outcome.write_error {
        eprintln!(
            "warning: writing {} failed: {e}",
            finish.jsonl_path.display()
        );
    }
    let server =
        output::ServerInfo::fetch(client.target(), http.sim.clone(), plan.request_timeout).await;
    let simulated = server.sim.is_some();
    let meta = server.target_info(&client.target().display_url())?;
    let records = outcome.take_records()?;
    finish.connections = super::transport_plan::connection_summary(&client);
    finish.agent_nodes = Some(out.nodes);
    output::write_results(
        &finish,
        &records,
        outcome.duration_ns,
        Some(&outcome),
        outcome.telemetry.as_ref(),
        None,
        meta,
        simulated,
    )
}
