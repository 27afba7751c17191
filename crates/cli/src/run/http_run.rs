//! A plan measured over HTTP: the load generator's dispatcher drives the HTTP client
//! (`BackendClient`) against a server — an external one or the simulator in-process.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use servebench_loadgen::client::Prepared;
use servebench_loadgen::{
    run_load, run_load_feed, warm_up, Backend, BackendClient, ClientOptions, JsonlSink,
    LoadOutcome, LoadSpec, Progress, StopSignal, Target,
};
use servebench_workload::PrefixMode;

use super::executor::{Executor, Workload};
use super::plan::RunPlan;
use super::target::SimInfo;
use super::{output, RunOutcome};

/// How long model discovery (`GET /v1/models` without `--model`) waits at most; a shorter
/// `--request-timeout` bounds it instead.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// A server at `base_url`; `sim` when it is a simulator servebench started.
pub struct HttpTarget {
    pub base_url: String,
    pub sim: Option<SimInfo>,
}

impl Executor for HttpTarget {
    async fn measure(
        &self,
        plan: &RunPlan,
        work: Workload,
        command_line: Vec<String>,
        stop: &StopSignal,
        print: bool,
    ) -> Result<RunOutcome> {
        let Workload {
            requests,
            schedule,
            tokenizer,
            expected,
            shard,
            trace_blocks: _,
            trace_prompts,
        } = work;
        let (client, model_id) = connect(&self.base_url, plan, &tokenizer, print).await?;
        let mut feed = None;
        let prepared: Vec<_> = match trace_prompts {
            // Only the first request is built now (for the ready check and warm-up); the rest
            // are built while the run goes.
            Some(mut prompts) => {
                let first = prompts.build(0)?;
                let first = client.prepare(0, &first.prompt, first.prompt_tokens, first.max_tokens);
                feed = Some(PromptFeed::start(
                    Arc::clone(&client),
                    prompts,
                    first.clone(),
                    schedule.len(),
                ));
                vec![first]
            }
            None => requests
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    // A shard's requests keep their ids in the whole schedule.
                    let id = if shard.is_some() { r.id } else { i as u64 };
                    client
                        .prepare_spec(id, r)
                        .with_expected(expected.get(i).cloned().flatten())
                })
                .collect(),
        };
        let prepared = match &plan.lora {
            Some(l) => super::lora::apply(l, plan.seed, prepared)?,
            None => prepared,
        };

        // The records file is open before the first request (ready check and warm-up
        // included), and a write error on it later stops the run instead of going unnoticed.
        let report_args = plan.to_args();
        let (mut finish, sink) =
            output::Finish::open(&report_args, model_id, &tokenizer, command_line, print)?;
        finish.shard = shard;
        let sink = output::stopping_on_write_error(sink);

        if let Some(timeout) = plan.ready_check_timeout {
            output::ready_check(&client, &prepared[0], timeout, stop).await?;
        }
        let warmups = plan.traffic.num_warmups;
        if warmups > 0 {
            if print {
                eprintln!("Warming up with {warmups} requests...");
            }
            let ok = warm_up(
                Arc::clone(&client),
                prepared[0].clone(),
                warmups,
                plan.traffic.max_concurrency,
                stop,
            )
            .await;
            if print {
                eprintln!("Warm-up completed ({ok}/{warmups} succeeded).");
            }
        }

        // Cold prefixes must stay cold: the warm-up request's prefix would otherwise be cached
        // for the first measured request. Best effort: not every server has the endpoint.
        if warmups > 0 && plan.random.prefix_mode == PrefixMode::PerRequest {
            let status = servebench_loadgen::probe::post_status(
                client.target(),
                "/reset_prefix_cache",
                Duration::from_secs(10),
            )
            .await;
            if print && !matches!(status, Ok(200)) {
                eprintln!("note: the server did not reset its prefix cache after warm-up; the first request may hit the cache");
            }
        }
        if print {
            print_traffic(plan);
        }
        // Probes of a server that never answers end within the user's --request-timeout.
        let metrics_timeout = output::probe_timeout(plan.request_timeout);
        if let Some(start) = &plan.scale_out.start_at {
            // The schedule keeps the agreed time zero; whatever was due before now goes late.
            if let Ok(late) = std::time::SystemTime::now().duration_since(start.at) {
                eprintln!(
                    "warning: --start-at {} passed {:.3} s before the schedule could begin (prompts, ready check, warm-up); the requests due until now are sent late, and dispatch lag shows it — start further ahead",
                    start.given,
                    late.as_secs_f64()
                );
            } else if print {
                eprintln!("Starting the schedule at {}", start.given);
            }
        }
        // What the server says about itself does not change with load: asked together with
        // the counters before the run, so a server that answers nothing costs one wait.
        let (spec_before, server) = tokio::join!(
            servebench_loadgen::probe::spec_decode_counters(client.target(), metrics_timeout),
            output::ServerInfo::fetch(client.target(), self.sim.clone(), plan.request_timeout)
        );
        let spec = LoadSpec {
            // Each shard takes its part of the cap, so the shards together hold it.
            max_concurrency: plan
                .traffic
                .max_concurrency
                .map(|c| plan.scale_out.shard.map_or(c, |s| s.concurrency(c))),
            start_at: plan.scale_out.start_at.as_ref().map(|s| s.at),
            progress: plan.report.progress.then(|| Progress {
                ui: plan.report.ui.view().unwrap_or_default(),
                total: Some(schedule.len()),
                label: plan
                    .report
                    .progress_label
                    .clone()
                    .unwrap_or_else(|| "run".into()),
            }),
            scrape_every: Some(Duration::from_secs(1)),
            schedule,
        };
        let gpu = super::gpu_telemetry::GpuWatch::start(plan.gpu_metrics_url.as_deref())?;
        let watching = super::saturation_stop::watch_for(plan, &spec.schedule).map(|w| {
            super::saturation_stop::RealTimeWatch::start(
                w,
                &spec.schedule,
                Arc::clone(&client),
                stop,
            )
        });
        if plan.vllm.profile {
            if print {
                eprintln!("Starting profiler...");
            }
            match super::vllm_probe::profile(&client, "/start_profile", metrics_timeout).await {
                Some(w) => eprintln!("{w}"),
                None if print => eprintln!("Profiler started"),
                None => {}
            }
        }
        let probes = (plan.vllm.probe_request_rate > 0.0).then(|| {
            super::vllm_probe::Probes::start(
                Arc::clone(&client),
                plan.vllm.probe_request_rate,
                stop,
            )
        });
        super::measuring_begins();
        let mut outcome = match &watching {
            None => {
                drive(
                    Arc::clone(&client),
                    feed,
                    prepared,
                    spec,
                    sink,
                    stop.clone(),
                )
                .await?
            }
            Some((_, watched, inner)) => {
                drive(
                    Arc::clone(watched),
                    feed,
                    prepared,
                    spec,
                    sink,
                    inner.clone(),
                )
                .await?
            }
        };
        finish.stopped_early = watching.and_then(|(w, _, _)| w.finish());
        if let Some(p) = probes {
            finish.probes = Some(p.finish().await);
        }
        if plan.vllm.profile {
            if print {
                eprintln!("Stopping profiler...");
            }
            if let Some(w) =
                super::vllm_probe::profile(&client, "/stop_profile", metrics_timeout).await
            {
                eprintln!("{w}");
            }
        }
        gpu.finish(&mut outcome).await;
        if let Some(e) = &outcome.write_error {
            eprintln!(
                "warning: writing {} failed: {e}",
                finish.jsonl_path.display()
            );
        }
        // The counters again only when the server gave them before the run: a delta needs
        // both ends, and a server that never answered costs no second wait.
        let spec_after = match &spec_before {
            Some(_) => {
                servebench_loadgen::probe::spec_decode_counters(client.target(), metrics_timeout)
                    .await
            }
            None => None,
        };
        let spec_decode = servebench_metrics::vllm::SpecDecodeStats::between(
            spec_before.as_ref(),
            spec_after.as_ref(),
        );
        let simulated = server.sim.is_some();
        let meta = server.target_info(&client.target().display_url())?;
        // Records written during the run were not kept in memory (it stays flat however long
        // the run); the summary is computed once, over all of them, read back from the file.
        let records = outcome.take_records()?;
        finish.connections = super::transport_plan::connection_summary(&client);
        output::write_results(
            &finish,
            &records,
            outcome.duration_ns,
            Some(&outcome),
            outcome.telemetry.as_ref(),
            spec_decode,
            meta,
            simulated,
        )
    }
}

/// Runs the load on `client`: the requests built before the run, or those `feed` builds
/// while it goes.
async fn drive<B: Backend<Request = Prepared>>(
    client: Arc<B>,
    feed: Option<PromptFeed>,
    prepared: Vec<Prepared>,
    spec: LoadSpec,
    sink: JsonlSink,
    stop: StopSignal,
) -> Result<LoadOutcome> {
    Ok(match feed {
        Some(PromptFeed { receiver, error }) => {
            let outcome = run_load_feed(
                Arc::clone(&client),
                receiver,
                spec,
                Some(sink),
                stop.clone(),
            )
            .await?;
            if let Some(e) = error.lock().ok().and_then(|e| e.clone()) {
                anyhow::bail!(
                    "building the trace's prompts failed after {} requests: {e}",
                    outcome.finished
                );
            }
            outcome
        }
        None => {
            run_load(
                Arc::clone(&client),
                prepared,
                spec,
                Some(sink),
                stop.clone(),
            )
            .await?
        }
    })
}

/// Prompts built on a thread of their own, each into its HTTP body, a bounded channel ahead
/// of the dispatcher: the run starts as soon as the first is built and holds at most
/// [`PromptFeed::AHEAD`] built requests however long the trace.
struct PromptFeed {
    receiver: tokio::sync::mpsc::Receiver<servebench_loadgen::client::Prepared>,
    error: Arc<std::sync::Mutex<Option<String>>>,
}

impl PromptFeed {
    const AHEAD: usize = 64;

    fn start(
        client: Arc<BackendClient>,
        mut prompts: servebench_workload::trace::TracePrompts,
        first: servebench_loadgen::client::Prepared,
        count: usize,
    ) -> PromptFeed {
        let (tx, receiver) = tokio::sync::mpsc::channel(Self::AHEAD);
        // The first request is already built: it is ready before the run starts.
        let _ = tx.try_send(first);
        let error = Arc::new(std::sync::Mutex::new(None));
        let failed = Arc::clone(&error);
        std::thread::spawn(move || {
            // Bulk tokenizer work: never at the dispatcher's real-time priority.
            servebench_loadgen::realtime::make_current_thread_ordinary();
            for i in 1..count {
                let spec = match prompts.build(i) {
                    Ok(s) => s,
                    Err(e) => {
                        if let Ok(mut slot) = failed.lock() {
                            *slot = Some(e.to_string());
                        }
                        return;
                    }
                };
                let p = client.prepare(i as u64, &spec.prompt, spec.prompt_tokens, spec.max_tokens);
                // The run ended (or was interrupted): nobody wants the rest.
                if tx.blocking_send(p).is_err() {
                    return;
                }
            }
        });
        PromptFeed { receiver, error }
    }
}

/// The HTTP client for the server at `base_url` as the plan describes it, and the model id results name (`--model`, or the
/// server's first model).
pub async fn connect(
    base_url: &str,
    plan: &RunPlan,
    tokenizer: &servebench_tokenizer::Tokenizer,
    print: bool,
) -> Result<(Arc<BackendClient>, String)> {
    let mut target = Target {
        base_url: base_url.to_owned(),
        endpoint: plan.endpoint.path.clone(),
        api: plan.endpoint.api,
        model: String::new(),
        headers: plan.headers.clone(),
        api_key: plan.api_key.clone(),
        extra_body: plan.extra_body.clone(),
        ignore_eos: plan.ignore_eos(),
        transport: plan.transport.clone(),
    };
    // As vLLM: without --model, requests name the first model's `id` and the result's
    // `model_id` is its `root` (the path or hub id behind the served name).
    let (model_name, model_id) = match &plan.model {
        Some(m) => (
            plan.served_model_name.clone().unwrap_or_else(|| m.clone()),
            m.clone(),
        ),
        None => {
            // Bounded by the user's --request-timeout when it is shorter than the default.
            let wait = plan
                .request_timeout
                .map_or(DISCOVERY_TIMEOUT, |t| t.min(DISCOVERY_TIMEOUT));
            let (id, root) = servebench_loadgen::probe::first_model_card(&target, wait).await?;
            if print {
                eprintln!(
                    "Model not specified; using the server's first model: {} (root {})",
                    servebench_wire::printable::printable(&id),
                    servebench_wire::printable::printable(&root)
                );
            }
            (plan.served_model_name.clone().unwrap_or(id), root)
        }
    };
    target.model = model_name;
    let client = Arc::new(BackendClient::new(
        target,
        ClientOptions {
            request_timeout: plan.request_timeout,
            // A conversation's next turn carries the text of this one's answer.
            keep_text: plan.report.save_detailed
                || plan.multi_turn.is_some()
                || matches!(plan.dataset, super::plan::DatasetChoice::Agentic(_)),
            tokenizer: Some(tokenizer.clone()),
            checks: plan.answer.checks.clone(),
        },
    )?);
    Ok((client, model_id))
}

pub(super) fn print_traffic(plan: &RunPlan) {
    let t = &plan.traffic;
    if plan.dataset.self_timed().is_some() {
        eprintln!(
            "Traffic: self-timed: each request is sent at its trace timestamp (× the multiplier)"
        );
        match t.max_concurrency {
            Some(c) => eprintln!("Maximum request concurrency: {c}"),
            None => eprintln!("Maximum request concurrency: None"),
        }
        return;
    }
    if let Some((s, a, b)) = t.ramp_up.map(|r| r.described()) {
        eprintln!("Traffic ramp-up strategy: {s}, from {a} to {b} RPS over the run.");
    } else {
        eprintln!(
            "Traffic request rate: {}",
            super::options::python_float(t.request_rate)
        );
    }
    let dist = if t.burstiness == 1.0 {
        "Poisson process"
    } else {
        "Gamma distribution"
    };
    eprintln!("Burstiness factor: {} ({dist})", t.burstiness);
    match t.max_concurrency {
        Some(c) => eprintln!("Maximum request concurrency: {c}"),
        None => eprintln!("Maximum request concurrency: None"),
    }
}
