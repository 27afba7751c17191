//! `--multi-turn --virtual-time`: conversations through the simulator's engine core in virtual
//! time. Each turn's prompt is the history as token ids — the previous turn's prompt, the ids
//! the engine generated for it, then this turn's own text — so the prefix cache sees what a
//! server would. A session holds one of `--max-concurrency` slots for all its turns; a turn
//! the engine refuses ends its session.

use std::collections::VecDeque;

use anyhow::Result;
use servebench_loadgen::telemetry::ServerTelemetry;
use servebench_loadgen::ScriptedSession;
use servebench_metrics::RequestRecord;
use servebench_sim::engine::{FinishReason, NewRequest};
use servebench_sim::virtual_time::{VirtualArrival, VirtualDriver};
use servebench_sim::ResolvedSim;
use servebench_workload::RequestSpec;

use super::plan::RunPlan;

/// A session on its way through the engine.
struct Active {
    session: usize,
    turn: usize,
    /// Index of the current turn's trace.
    trace: usize,
    /// Prompt ids of the current turn.
    prompt: Vec<u32>,
}

/// Records (one per turn sent, in sending order), the run's duration and engine counters.
pub fn simulate_sessions(
    sim: &ResolvedSim,
    plan: &RunPlan,
    sessions: &[ScriptedSession],
    arrivals: &[u64],
) -> Result<(Vec<RequestRecord>, u64, ServerTelemetry)> {
    if sim.fleet.is_some() {
        anyhow::bail!("multi-turn sessions in virtual time run on one engine: drop the fleet flags (--replicas, --pool, --route, --rate-limit, --prefill-replicas) from --sim, or run against `servebench sim` with them over HTTP");
    }
    let mut driver = VirtualDriver::new(sim.engine.clone(), None)?;
    driver.keep_output_ids();
    let cap = plan.traffic.max_concurrency.unwrap_or(usize::MAX).max(1);
    let ignore_eos = plan.ignore_eos();
    let mut waiting: VecDeque<usize> = (0..sessions.len()).collect();
    let mut active: Vec<Active> = Vec::new();
    // (session, turn, spec) per trace, in submission order.
    let mut sent: Vec<(usize, usize, RequestSpec)> = Vec::new();
    let submit = |driver: &mut VirtualDriver,
                  sent: &mut Vec<(usize, usize, RequestSpec)>,
                  session: usize,
                  turn: usize,
                  prompt: Vec<u32>,
                  intended_ns: u64|
     -> usize {
        let t = &sessions[session].turns[turn];
        let id = sent.len() as u64;
        let max_tokens = t.max_tokens.map(|m| m.min(u64::from(u32::MAX)) as u32);
        sent.push((
            session,
            turn,
            RequestSpec {
                images: Vec::new(),
                id,
                prompt: String::new(),
                prompt_tokens: prompt.len() as u64,
                max_tokens: t.max_tokens,
                prefix_tokens: 0,
            },
        ));
        driver.submit(VirtualArrival {
            intended_ns,
            request: NewRequest {
                lora: None,
                id,
                prompt,
                // vLLM's completions default when the dataset leaves the length open.
                max_tokens: max_tokens.unwrap_or(16),
                min_tokens: 0,
                ignore_eos,
                seed: None,
                cache_salt: None,
                arrival_ns: intended_ns,
            },
        });
        driver.traces().len() - 1
    };
    let own_ids = |session: usize, turn: usize| -> Vec<u32> {
        let ids = sim.tokenizer.encode(&sessions[session].turns[turn].prompt);
        if ids.is_empty() {
            vec![0]
        } else {
            ids
        }
    };
    let start_waiting = |driver: &mut VirtualDriver,
                         sent: &mut Vec<(usize, usize, RequestSpec)>,
                         active: &mut Vec<Active>,
                         waiting: &mut VecDeque<usize>| {
        while active.len() < cap {
            let Some(s) = waiting.pop_front() else { break };
            let prompt = own_ids(s, 0);
            let trace = submit(driver, sent, s, 0, prompt.clone(), arrivals[s]);
            active.push(Active {
                session: s,
                turn: 0,
                trace,
                prompt,
            });
        }
    };
    start_waiting(&mut driver, &mut sent, &mut active, &mut waiting);
    while driver.step()? {
        let mut i = 0;
        while i < active.len() {
            let a = &active[i];
            let t = &driver.traces()[a.trace];
            let Some(end) = t.end_ns else {
                i += 1;
                continue;
            };
            let ok = matches!(t.finish_reason, Some(r) if r != FinishReason::Abort)
                && !t.token_times_ns.is_empty();
            let next = a.turn + 1;
            if !ok || next >= sessions[a.session].turns.len() {
                active.swap_remove(i);
                start_waiting(&mut driver, &mut sent, &mut active, &mut waiting);
                continue;
            }
            let mut prompt = a.prompt.clone();
            prompt.extend_from_slice(&t.output_ids);
            prompt.extend(own_ids(a.session, next));
            let think = u64::try_from(sessions[a.session].turns[next].think_time.as_nanos())
                .unwrap_or(u64::MAX);
            let session = a.session;
            let trace = submit(
                &mut driver,
                &mut sent,
                session,
                next,
                prompt.clone(),
                end.saturating_add(think),
            );
            active[i] = Active {
                session,
                turn: next,
                trace,
                prompt,
            };
            i += 1;
        }
    }
    let run = driver.finish();
    let records: Vec<RequestRecord> = run
        .traces
        .iter()
        .zip(&sent)
        .map(|(t, (session, turn, spec))| {
            let mut r = super::virtual_run::record(t, spec, true);
            r.session_id = Some(sessions[*session].id.clone());
            r.turn = Some(u32::try_from(*turn).unwrap_or(u32::MAX));
            r
        })
        .collect();
    let (duration, telemetry) = super::virtual_run::run_totals(&records, &run);
    Ok((records, duration, telemetry))
}
