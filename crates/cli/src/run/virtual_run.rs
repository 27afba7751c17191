//! `servebench run --virtual-time`: the same workload and schedule fed to the simulator's
//! engine core in virtual time; the records that come out go through the same metrics and
//! writers as a real run (marked simulated).

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use servebench_analysis::saturation_watch::LiveWatch;
use servebench_answer::Expected;
use servebench_loadgen::telemetry::ServerTelemetry;
use servebench_metrics::{CountSource, OutputSplit, RequestRecord, TokenEvent};
use servebench_sim::engine::{FinishReason, NewRequest};
use servebench_sim::reasoning::ReasoningSplit;
use servebench_sim::virtual_driver::{submit_after_warm_up, warm_up, WarmedRun};
use servebench_sim::virtual_time::{
    run_virtual, run_virtual_keeping_output, RequestTrace, VirtualArrival, VirtualDriver,
    VirtualRun, VirtualWorkload,
};
use servebench_sim::ResolvedSim;
use servebench_workload::RequestSpec;

use super::executor::{Executor, TraceBlocks, Workload};
use super::plan::RunPlan;
use super::{output, RunOutcome};

/// The simulator's engine core in virtual time: the whole schedule is simulated at once (no
/// server, no sleeping), then the records go through the same writers as a real run.
pub struct VirtualTarget {
    pub sim: Box<ResolvedSim>,
    /// The `--sim` spec it was resolved from (recorded in results).
    pub spec: String,
}

impl VirtualTarget {
    /// A virtual run's files: the records (written after the fact: nothing ran in real time)
    /// and the results, as over HTTP.
    #[allow(clippy::too_many_arguments)]
    pub fn write(
        &self,
        plan: &RunPlan,
        tokenizer: &servebench_tokenizer::Tokenizer,
        command_line: Vec<String>,
        print: bool,
        records: &[RequestRecord],
        duration_ns: u64,
        telemetry: &ServerTelemetry,
    ) -> anyhow::Result<RunOutcome> {
        self.write_stopped(
            plan,
            tokenizer,
            command_line,
            print,
            records,
            duration_ns,
            telemetry,
            None,
        )
    }

    /// [`VirtualTarget::write`] of a run that may have stopped itself early.
    #[allow(clippy::too_many_arguments)]
    fn write_stopped(
        &self,
        plan: &RunPlan,
        tokenizer: &servebench_tokenizer::Tokenizer,
        command_line: Vec<String>,
        print: bool,
        records: &[RequestRecord],
        duration_ns: u64,
        telemetry: &ServerTelemetry,
        stopped: Option<servebench_metrics::result::StoppedEarly>,
    ) -> anyhow::Result<RunOutcome> {
        let model_id = plan
            .model
            .clone()
            .unwrap_or_else(|| self.sim.served_model_name.clone());
        let report_args = plan.to_args();
        let (mut finish, mut sink) =
            output::Finish::open(&report_args, model_id, tokenizer, command_line, print)?;
        finish.stopped_early = stopped;
        for r in records {
            sink.append(r)?;
        }
        let meta = servebench_metrics::result::TargetInfo::simulator(
            "virtual",
            &self.spec,
            output::sim_config(&self.sim.config_json)?,
        );
        output::write_results(
            &finish,
            records,
            duration_ns,
            None,
            Some(telemetry),
            None,
            meta,
            true,
        )
    }
}

impl Executor for VirtualTarget {
    async fn measure(
        &self,
        plan: &RunPlan,
        work: Workload,
        command_line: Vec<String>,
        _stop: &servebench_loadgen::StopSignal,
        print: bool,
    ) -> anyhow::Result<RunOutcome> {
        let watch = super::saturation_stop::watch_for(plan, &work.schedule);
        if watch.is_some() && self.sim.fleet.is_some() {
            eprintln!("note: --stop-when-saturated does not watch a fleet of simulators; this run goes to the end of its schedule");
        }
        let (records, duration_ns, telemetry, stopped) = simulate_watched(
            &self.sim,
            plan,
            &work.requests,
            &work.expected,
            &work.schedule,
            work.trace_blocks.as_ref(),
            watch.as_ref(),
        )?;
        self.write_stopped(
            plan,
            &work.tokenizer,
            command_line,
            print,
            &records,
            duration_ns,
            &telemetry,
            stopped,
        )
    }
}

/// Token ids for each request: a shared prefix (the same ids in every request, so the prefix
/// cache sees the reuse the dataset intends) followed by unique ids, at the dataset's exact
/// lengths. Ids are drawn from the tokenizer's ordinary (non-special) vocabulary. A request
/// that carries its text opens with its own prefix tokens instead, so datasets with several
/// prefixes (prefix_repetition) or a prefix taken from a file (sonnet) share exactly what
/// their texts share.
pub fn prompt_ids(sim: &ResolvedSim, requests: &[RequestSpec], seed: u64) -> Vec<Vec<u32>> {
    let pool = sim.tokenizer.ordinary_ids();
    let vocab = sim.engine.vocab_size.max(1);
    let pick = |rng: &mut ChaCha8Rng| -> u32 {
        if pool.is_empty() {
            rng.random_range(0..vocab)
        } else {
            pool[rng.random_range(0..pool.len())]
        }
    };
    let longest_prefix = requests.iter().map(|r| r.prefix_tokens).max().unwrap_or(0) as usize;
    let mut prefix_rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_f00d);
    let prefix: Vec<u32> = (0..longest_prefix).map(|_| pick(&mut prefix_rng)).collect();
    // Many requests carry the same text when they hold only their pool member's prefix
    // (`--prefix-hit-rate` in virtual time): encode each text once.
    let mut encoded: HashMap<&str, Vec<u32>> = HashMap::new();
    requests
        .iter()
        .map(|r| {
            let mut rng =
                ChaCha8Rng::seed_from_u64(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ r.id);
            let p = (r.prefix_tokens as usize).min(r.prompt_tokens as usize);
            let mut ids = if r.prompt.is_empty() || p == 0 {
                prefix[..p].to_vec()
            } else {
                let whole = encoded
                    .entry(r.prompt.as_str())
                    .or_insert_with(|| sim.tokenizer.encode(&r.prompt));
                let mut own: Vec<u32> = whole[..p.min(whole.len())].to_vec();
                own.truncate(p);
                // Another tokenizer than the workload's may count fewer tokens.
                let have = own.len();
                own.extend_from_slice(&prefix[have..p]);
                own
            };
            ids.extend((p..r.prompt_tokens.max(1) as usize).map(|_| pick(&mut rng)));
            ids
        })
        .collect()
}

/// Token ids for the requests of a trace: each full block id stands for the same
/// `block_tokens` ids wherever it appears (drawn from a stream seeded by the id), so the
/// prefix cache sees exactly the reuse the trace's hash ids describe; the rest of each
/// prompt is the request's own. Block ids are cached, so memory grows with the distinct
/// blocks, not with the prompts.
pub fn trace_prompt_ids(
    sim: &ResolvedSim,
    requests: &[RequestSpec],
    blocks: &TraceBlocks,
    seed: u64,
) -> Vec<Vec<u32>> {
    let pool = sim.tokenizer.ordinary_ids();
    let vocab = sim.engine.vocab_size.max(1);
    let pick = |rng: &mut ChaCha8Rng| -> u32 {
        if pool.is_empty() {
            rng.random_range(0..vocab)
        } else {
            pool[rng.random_range(0..pool.len())]
        }
    };
    let block_len = blocks.block_tokens.max(1) as usize;
    let mut cache: HashMap<u64, std::sync::Arc<[u32]>> = HashMap::new();
    requests
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let len = r.prompt_tokens.max(1) as usize;
            let mut ids = Vec::with_capacity(len);
            let own = blocks
                .ids
                .get(i % blocks.ids.len().max(1))
                .map_or(&[][..], Vec::as_slice);
            for id in own {
                if ids.len() + block_len > len {
                    break;
                }
                let block = cache.entry(*id).or_insert_with(|| {
                    let mut rng = ChaCha8Rng::seed_from_u64(
                        seed.wrapping_mul(0xa076_1d64_78bd_642f)
                            ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                    );
                    (0..block_len).map(|_| pick(&mut rng)).collect()
                });
                ids.extend_from_slice(block);
            }
            let mut rng = ChaCha8Rng::seed_from_u64(
                seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ r.id ^ 0x7a11_0000_0000_0000,
            );
            while ids.len() < len {
                ids.push(pick(&mut rng));
            }
            ids
        })
        .collect()
}

/// Run the workload through the engine core in virtual time, one record per request,
/// holding each answer against the plan's answer checks and the request's own
/// `expected` (by position; `expected` may be empty). The answer is the text the simulator's
/// server would stream for the same tokens (its filler words), rebuilt only when a check
/// needs it.
///
/// Under the live over-saturation watch (`--stop-when-saturated`), when one is given, a run
/// it stops keeps the records a real run stopped then would have, and says why and when. A
/// fleet of simulators is not watched.
#[allow(clippy::type_complexity)]
pub fn simulate_watched(
    sim: &ResolvedSim,
    plan: &RunPlan,
    requests: &[RequestSpec],
    expected: &[Option<Expected>],
    schedule: &[u64],
    blocks: Option<&TraceBlocks>,
    watch: Option<&LiveWatch>,
) -> anyhow::Result<(
    Vec<RequestRecord>,
    u64,
    ServerTelemetry,
    Option<servebench_metrics::result::StoppedEarly>,
)> {
    let checks = &plan.answer.checks;
    let keep_output = !checks.is_empty() || expected.iter().any(Option::is_some);
    let ignore_eos = plan.ignore_eos();
    let chat = plan.endpoint.api == servebench_loadgen::ApiKind::Chat;
    let max_concurrency = plan.traffic.max_concurrency;
    let closed_loop = servebench_loadgen::is_closed_loop(schedule, max_concurrency);
    let num_warmups = plan.traffic.num_warmups;
    let cold = plan.random.prefix_mode == servebench_workload::PrefixMode::PerRequest;
    let lora = plan.lora.as_ref().map(|l| {
        let n = requests.iter().map(|r| r.id + 1).max().unwrap_or(0) as usize;
        (l, l.assign(n, plan.seed))
    });
    let engine_lora = super::lora::engine_ids(sim, lora.as_ref(), requests)?;
    let ids = match blocks {
        Some(b) => trace_prompt_ids(sim, requests, b, plan.seed),
        None => prompt_ids(sim, requests, plan.seed),
    };
    let arrivals = requests
        .iter()
        .zip(ids)
        .zip(schedule.iter().copied())
        .zip(engine_lora)
        .map(|(((r, prompt), intended_ns), lora)| VirtualArrival {
            intended_ns,
            request: NewRequest {
                lora,
                id: r.id,
                prompt,
                // vLLM's completions default when the dataset leaves the length open.
                max_tokens: r
                    .max_tokens
                    .map(|m| m.min(u64::from(u32::MAX)) as u32)
                    .unwrap_or(16),
                min_tokens: 0,
                ignore_eos,
                seed: None,
                cache_salt: None,
                arrival_ns: intended_ns,
            },
        })
        .collect();
    let workload = VirtualWorkload {
        arrivals,
        max_concurrency,
    };
    let span = schedule.iter().max().unwrap_or(&0) - schedule.iter().min().unwrap_or(&0);
    let (run, served, stop) = match &sim.fleet {
        Some(fleet) => {
            let f = super::virtual_fleet::run(fleet, workload, num_warmups, cold, keep_output)?;
            (f.run, f.served, None)
        }
        None => match (num_warmups, keep_output, watch) {
            (0, false, None) => (run_virtual(sim.engine.clone(), workload)?, Vec::new(), None),
            (0, true, None) => (
                run_virtual_keeping_output(sim.engine.clone(), workload)?,
                Vec::new(),
                None,
            ),
            _ => {
                let watch = watch.map(|w| (w, span));
                let (run, stop) = warmed_up(sim, workload, num_warmups, cold, keep_output, watch)?;
                (run, Vec::new(), stop)
            }
        },
    };
    let answers = keep_output.then(|| SimulatedAnswers::new(sim));
    let records: Vec<RequestRecord> = run
        .traces
        .iter()
        .zip(requests)
        .enumerate()
        .map(|(i, (t, r))| {
            let mut rec = record(t, r, chat);
            // As the HTTP dispatcher does: a closed loop's user sends when a slot frees.
            if closed_loop && rec.waited_for_slot {
                rec.intended = rec.released;
            }
            if plan.pooling.is_some() {
                super::pooling::virtual_record(&mut rec);
            }
            if let Some((l, assigned)) = &lora {
                rec.lora = l.name_of(assigned, rec.id).map(str::to_owned);
            }
            if let Some(s) = served.get(i) {
                super::virtual_fleet::annotate(&mut rec, s);
            }
            if chat {
                split_output(&mut rec, t, sim.reasoning);
            }
            if let Some(a) = &answers {
                a.check(
                    &mut rec,
                    t,
                    checks,
                    expected.get(i).and_then(Option::as_ref),
                );
            }
            rec
        })
        .collect();
    let records = match &stop {
        Some(s) => super::saturation_stop::cut_virtual(records, s),
        None => records,
    };
    let (duration, telemetry) = run_totals(&records, &run);
    let stopped = stop.map(|s| super::saturation_stop::stopped_early(&s.over));
    Ok((records, duration, telemetry, stopped))
}

/// A virtual run's duration (the last request's end) and the simulator's counters as the
/// telemetry a scrape of its `/metrics` would have given.
pub fn run_totals(
    records: &[RequestRecord],
    run: &servebench_sim::virtual_time::VirtualRun,
) -> (u64, ServerTelemetry) {
    let duration = records
        .iter()
        .filter_map(|r| r.end.or(r.done))
        .max()
        .unwrap_or(run.end_ns);
    let m = &run.metrics;
    let counters = [
        ("vllm:num_preemptions_total", m.num_preemptions_total),
        (
            "vllm:prefix_cache_queries_total",
            m.prefix_cache_queries_total,
        ),
        ("vllm:prefix_cache_hits_total", m.prefix_cache_hits_total),
        ("vllm:prompt_tokens_total", m.prompt_tokens_total),
        ("vllm:generation_tokens_total", m.generation_tokens_total),
    ];
    let telemetry = ServerTelemetry {
        counter_increase: counters
            .iter()
            .map(|(k, v)| ((*k).to_owned(), *v as f64))
            .collect(),
        ..ServerTelemetry::default()
    };
    (duration, telemetry)
}

/// Warm-ups in virtual time, as over HTTP: `num_warmups` copies of the first request (same
/// concurrency cap) run to completion first, so a warm prefix is cached before the measured
/// window; then the measured arrivals follow, and their times are shifted back so the run
/// starts at 0. Engine counters include the warm-ups. `cold` resets the prefix cache after them.
/// With `watch` (and the schedule's span), the measured arrivals run under the live
/// over-saturation watch, and stepping stops where it fires.
fn warmed_up(
    sim: &ResolvedSim,
    workload: VirtualWorkload,
    num_warmups: usize,
    cold: bool,
    keep_output: bool,
    watch: Option<(&LiveWatch, u64)>,
) -> anyhow::Result<(VirtualRun, Option<super::saturation_stop::VirtualStop>)> {
    let VirtualWorkload {
        arrivals,
        max_concurrency,
    } = workload;
    let mut driver = VirtualDriver::new(sim.engine.clone(), max_concurrency)?;
    if keep_output {
        driver.keep_output_ids();
    }
    // Cold rows stay cold, as over HTTP where the prefix cache is reset after warm-up.
    let offset = warm_up(
        &mut driver,
        arrivals.first(),
        num_warmups,
        cold && num_warmups > 0,
    )?;
    submit_after_warm_up(&mut driver, arrivals, offset);
    let stop = match watch {
        Some((w, span)) => {
            super::saturation_stop::drive_virtual(&mut driver, offset, num_warmups, span, w)?
        }
        None => {
            driver.run_until_idle()?;
            None
        }
    };
    let mut run = driver.finish();
    run.drop_warmups(num_warmups, offset);
    Ok((run, stop))
}

/// Rebuilds the answer the simulator's server would have streamed for a simulated request
/// (each token's filler word, the tokenizer's decoding for any other id) and holds it
/// against the answer checks. Needs the engine to have kept the output token ids.
pub struct SimulatedAnswers<'a> {
    sim: &'a ResolvedSim,
    words: HashMap<u32, String>,
}

impl<'a> SimulatedAnswers<'a> {
    pub fn new(sim: &'a ResolvedSim) -> Self {
        let words = sim
            .tokenizer
            .filler_words()
            .into_iter()
            .map(|(w, id)| (id, w))
            .collect();
        SimulatedAnswers { sim, words }
    }

    fn text(&self, ids: &[u32]) -> String {
        let mut text = String::new();
        for id in ids {
            match self.words.get(id) {
                Some(w) => text.push_str(w),
                None => text.push_str(&self.sim.tokenizer.decode(&[*id])),
            }
        }
        text
    }

    /// Judge a completed request's answer: a miss turns the record into an
    /// `invalid_output` failure.
    pub fn check(
        &self,
        rec: &mut RequestRecord,
        t: &RequestTrace,
        checks: &servebench_answer::AnswerChecks,
        own: Option<&Expected>,
    ) {
        if rec.failure.is_none() && checks.applies(own) {
            rec.failure = checks.judge(&self.text(&t.output_ids), own);
            rec.answer_checked = true;
        }
    }
}

/// The record of one simulated request, as the HTTP client would have written it. `chat`:
/// the stream the simulator would have written opens with a role-only chunk, sent together
/// with the first content chunk; it is kept as the bare event vLLM's client counts.
pub fn record(t: &RequestTrace, spec: &RequestSpec, chat: bool) -> RequestRecord {
    let first = t.token_times_ns.first().copied();
    let end = t.token_times_ns.last().copied();
    let failure = match (t.finish_reason, first) {
        (Some(FinishReason::Abort), _) | (None, _) | (_, None) => {
            Some(servebench_metrics::Failure {
                kind: servebench_metrics::FailureKind::EmptyOutput,
                status: None,
                message: "the simulated request produced no output".into(),
            })
        }
        _ => None,
    };
    RequestRecord {
        phases: None,
        images: spec.image_usage(),
        id: spec.id,
        intended: t.intended_ns,
        released: t.sent_ns,
        sent: t.sent_ns,
        started: None,
        bare_events: if chat {
            first.into_iter().collect()
        } else {
            Vec::new()
        },
        first_token: first,
        end,
        done: end.or(t.end_ns),
        waited_for_slot: t.sent_ns > t.intended_ns,
        // Each simulated token is one filler word: a leading space and about five letters.
        events: t
            .token_times_ns
            .iter()
            .map(|&ts| TokenEvent { t: ts, chars: 6 })
            .collect(),
        input_tokens: u64::from(t.prompt_tokens),
        input_source: CountSource::Usage,
        output_tokens: u64::from(t.completion_tokens),
        output_source: CountSource::Usage,
        intended_input_tokens: spec.prompt_tokens,
        max_tokens: spec.max_tokens,
        cached_tokens: Some(u64::from(t.cached_tokens)),
        finish_reason: t.finish_reason.map(|f| f.as_str().to_owned()),
        text: None,
        failure,
        resent: 0,
        answer_checked: false,
        output_split: None,
        session_id: None,
        turn: None,
        stamp_clock: None,
        lora: None,
        served_by: None,
    }
}

/// A chat record of a simulator acting as a reasoning model (`--reasoning-tokens`,
/// `--reasoning-fraction`): its first tokens were reasoning, as the server would have
/// streamed and reported them in usage. Nothing changes without a split.
pub fn split_output(rec: &mut RequestRecord, t: &RequestTrace, split: Option<ReasoningSplit>) {
    let Some(split) = split else {
        return;
    };
    let reasoning = split.reasoning_tokens(t.completion_tokens);
    rec.output_split = Some(OutputSplit {
        first_answer: usize::try_from(reasoning)
            .ok()
            .and_then(|i| t.token_times_ns.get(i).copied()),
        reasoning_tokens: u64::from(reasoning),
        reasoning_source: CountSource::Usage,
        tool_calls: false,
    });
}
