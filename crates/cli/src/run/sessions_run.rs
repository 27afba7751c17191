//! `servebench run --multi-turn`: the dataset's sessions replayed as conversations over HTTP
//! (the load generator's session driver), then the same writers as any run.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use servebench_loadgen::{
    run_sessions, ConversationBackend, Progress, ScriptedSession, ScriptedTurn, SessionSpec,
    StopSignal,
};
use servebench_tokenizer::Tokenizer;
use servebench_workload::{custom_sessions, sharegpt_sessions, Session, SessionSelection};

use super::http_run::{connect, print_traffic, HttpTarget};
use super::plan::{DatasetChoice, MultiTurn, RunPlan};
use super::{dataset, output, RunOutcome, RunTarget};

/// The plan's sessions, as the dataset gives them.
pub fn sessions(plan: &RunPlan, tokenizer: &Tokenizer) -> Result<Vec<Session>> {
    let pick = SessionSelection {
        num_sessions: plan.num_prompts,
        seed: plan.seed,
        disable_shuffle: plan.disable_shuffle,
        no_oversample: plan.no_oversample,
    };
    Ok(match &plan.dataset {
        DatasetChoice::ShareGpt { path, output_len } => {
            sharegpt_sessions(path, *output_len, &pick, tokenizer)?
        }
        DatasetChoice::Custom { path, output_len } => {
            custom_sessions(path, *output_len, &pick, tokenizer)?
        }
        _ => bail!("--multi-turn replays the conversations of --dataset-name sharegpt or custom"),
    })
}

/// Sessions as the driver sends them: each turn's think time resolved against the default.
pub fn scripted(sessions: Vec<Session>, mt: MultiTurn) -> Vec<ScriptedSession> {
    sessions
        .into_iter()
        .map(|s| ScriptedSession {
            id: s.id,
            turns: s
                .turns
                .into_iter()
                .map(|t| ScriptedTurn {
                    think_time: Duration::from_millis(t.think_time_ms.unwrap_or(mt.think_time_ms)),
                    prompt: t.prompt,
                    input_tokens: t.prompt_tokens,
                    max_tokens: t.max_tokens,
                })
                .collect(),
        })
        .collect()
}

/// Measure the plan's conversations against `target` and write the results.
pub async fn execute(
    plan: &RunPlan,
    mt: MultiTurn,
    target: &RunTarget,
    command_line: Vec<String>,
    stop: &StopSignal,
    print: bool,
) -> Result<RunOutcome> {
    let tokenizer = super::load_tokenizer(plan.tokenizer.as_deref(), print)?;
    let sessions = scripted(sessions(plan, &tokenizer)?, mt);
    if sessions.is_empty() {
        bail!("the dataset produced no sessions");
    }
    let arrivals = dataset::schedule(plan, sessions.len())?;
    match target {
        RunTarget::Http(http) => {
            measure(
                http,
                plan,
                sessions,
                arrivals,
                &tokenizer,
                command_line,
                stop,
                print,
            )
            .await
        }
        RunTarget::Virtual(v) => {
            if plan.traffic.num_warmups > 0 {
                bail!("--num-warmups is not supported with --multi-turn --virtual-time: the sessions start on a cold engine");
            }
            let (records, duration_ns, telemetry) =
                super::sessions_virtual::simulate_sessions(&v.sim, plan, &sessions, &arrivals)?;
            v.write(
                plan,
                &tokenizer,
                command_line,
                print,
                &records,
                duration_ns,
                &telemetry,
            )
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    http: &HttpTarget,
    plan: &RunPlan,
    sessions: Vec<ScriptedSession>,
    arrivals: Vec<u64>,
    tokenizer: &Tokenizer,
    command_line: Vec<String>,
    stop: &StopSignal,
    print: bool,
) -> Result<RunOutcome> {
    let (client, model_id) = connect(&http.base_url, plan, tokenizer, print).await?;
    // The ready check and warm-ups send the first session's opening turn on its own.
    let first = sessions.first().and_then(|s| s.turns.first()).map(|t| {
        let history = [servebench_loadgen::sessions::Message {
            role: "user",
            text: t.prompt.clone(),
        }];
        client.prepare_turn(0, &history, t.input_tokens, t.max_tokens)
    });
    let Some(first) = first else {
        bail!("the dataset produced no sessions");
    };
    let report_args = plan.to_args();
    let (mut finish, sink) =
        output::Finish::open(&report_args, model_id, tokenizer, command_line, print)?;
    let sink = output::stopping_on_write_error(sink);
    output::ready_and_warm_up(plan, &client, first, stop, print).await?;
    let total_turns: usize = sessions.iter().map(|s| s.turns.len()).sum();
    if print {
        print_traffic(plan);
        eprintln!(
            "Multi-turn: {} sessions, {total_turns} turns (rate and concurrency count sessions)",
            sessions.len()
        );
    }
    let spec = SessionSpec {
        arrivals,
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
    };
    let gpu = super::gpu_telemetry::GpuWatch::start(plan.gpu_metrics_url.as_deref())?;
    super::measuring_begins();
    let mut outcome = run_sessions(
        Arc::clone(&client),
        sessions,
        spec,
        Some(sink),
        stop.clone(),
    )
    .await?;
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
