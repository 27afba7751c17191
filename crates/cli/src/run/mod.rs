//! `servebench run`: validate flags into a plan, drive the load, render the results.

pub mod args;
pub mod dataset;
pub mod options;
pub mod output;
pub mod target;
pub mod virtual_run;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use servebench_loadgen::{
    run_load, stop_pair, warm_up, BackendClient, ClientOptions, LoadSpec, Progress, StopSignal,
    Target,
};
use servebench_tokenizer::Tokenizer;

use self::args::{DatasetName, RunArgs};
use self::target::{resolve_target, TargetMode};

/// How long in-flight requests may finish after Ctrl-C before they are cancelled.
const GRACE: Duration = Duration::from_secs(5);

/// Where `execute` sends its load.
pub enum RunTarget {
    /// A server at this base URL; `sim` when it is a simulator servebench started.
    Http {
        base_url: String,
        sim: Option<target::SimInfo>,
    },
    /// The simulator's engine core in virtual time.
    Virtual {
        sim: Box<servebench_sim::ResolvedSim>,
        spec: String,
    },
}

/// What one measured run produced.
pub struct RunOutcome {
    pub summary: servebench_metrics::RunSummary,
    pub vllm: servebench_report::OrderedObject,
    /// servebench's own result (`*.servebench.json`).
    pub native_path: std::path::PathBuf,
    pub jsonl_path: std::path::PathBuf,
    pub vllm_path: Option<std::path::PathBuf>,
    pub exit: ExitCode,
}

/// `servebench run`: resolve the target (starting a simulator when none is given), wire
/// Ctrl-C, measure, report.
pub async fn run(args: RunArgs, command_line: Vec<String>) -> Result<ExitCode> {
    validate(&args)?;
    let mode = resolve_target(&args).await?;
    let (target, _guard) = match mode {
        TargetMode::External(url) => (
            RunTarget::Http {
                base_url: url,
                sim: None,
            },
            None,
        ),
        TargetMode::InProcess { url, info, guard } => (
            RunTarget::Http {
                base_url: url,
                sim: Some(info),
            },
            Some(guard),
        ),
        TargetMode::Virtual(sim) => {
            let spec = args
                .sim
                .clone()
                .unwrap_or_else(|| target::DEFAULT_SIM_SPEC.to_owned());
            (RunTarget::Virtual { sim, spec }, None)
        }
    };
    let stop = interrupt_on_ctrl_c();
    if args.repeat <= 1 {
        let out = execute(&args, &target, command_line, &stop, true).await?;
        return Ok(out.exit);
    }
    repeat(&args, &target, command_line, &stop).await
}

/// `--repeat N`: the same measurement N times, then mean ± std of every headline figure.
async fn repeat(
    args: &RunArgs,
    target: &RunTarget,
    command_line: Vec<String>,
    stop: &StopSignal,
) -> Result<ExitCode> {
    let mut summaries = Vec::new();
    let mut exit = ExitCode::SUCCESS;
    for k in 1..=args.repeat {
        if stop.dispatch_stopped() {
            break;
        }
        eprintln!("== repeat {k}/{}", args.repeat);
        let mut a = args.clone();
        a.output_dir = args.output_dir.join(format!("repeat-{k}"));
        if let Some(f) = &args.result_filename {
            a.result_filename = Some(format!("repeat-{k}-{f}"));
        }
        let out = execute(&a, target, command_line.clone(), stop, true).await?;
        if out.exit != ExitCode::SUCCESS {
            exit = out.exit;
        }
        summaries.push(out.summary);
    }
    let agg = servebench_metrics::aggregate(&summaries);
    print!("{}", servebench_report::terminal::repeat_block(&agg));
    let path = args.output_dir.join("repeat-summary.json");
    std::fs::create_dir_all(&args.output_dir)
        .with_context(|| format!("cannot create --output-dir {}", args.output_dir.display()))?;
    let text = serde_json::to_vec_pretty(&serde_json::json!({
        "schema": "servebench.repeat/v1",
        "runs": summaries.len(),
        "repeat": agg,
    }))
    .context("serializing the repeat summary")?;
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("repeat summary: {}", path.display());
    Ok(exit)
}

/// Ctrl-C stops dispatching; a second Ctrl-C or the grace period cancels what is in flight.
pub fn interrupt_on_ctrl_c() -> StopSignal {
    let (handle, stop) = stop_pair();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!(
                "\nInterrupted: no new requests; waiting up to {} s for those in flight (Ctrl-C again to stop now)",
                GRACE.as_secs()
            );
            handle.stop_dispatch();
            tokio::select! {
                _ = tokio::time::sleep(GRACE) => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            handle.cancel();
        }
    });
    stop
}

/// Flag checks that need no I/O.
pub fn validate(args: &RunArgs) -> Result<()> {
    options::check_ramp_up(args)?;
    options::percentile_metrics(args.percentile_metrics.as_deref())?;
    options::metric_percentiles(&args.metric_percentiles)?;
    options::goodput(&args.goodput)?;
    options::key_values("--metadata", &args.metadata)?;
    options::headers(&args.header)?;
    options::extra_body(args)?;
    if args.max_concurrency == Some(0) {
        bail!("--max-concurrency must be greater than 0");
    }
    if args.burstiness.is_nan() || args.burstiness <= 0.0 {
        bail!(
            "--burstiness must be positive (1 = Poisson), got {}",
            args.burstiness
        );
    }
    if args.request_rate.is_nan() || args.request_rate <= 0.0 {
        bail!(
            "--request-rate must be positive or inf, got {}",
            args.request_rate
        );
    }
    Ok(())
}

/// The tokenizer the flags ask for (the built-in one when none is given).
pub fn load_tokenizer(args: &RunArgs, say: bool) -> Result<Tokenizer> {
    Ok(match &args.tokenizer {
        Some(spec) => Tokenizer::load(spec).with_context(|| format!("--tokenizer {spec}"))?,
        None => {
            if say {
                eprintln!(
                    "Tokenizer: built-in {} (no --tokenizer given; prompt lengths are counted with it)",
                    Tokenizer::builtin().name()
                );
            }
            Tokenizer::builtin()
        }
    })
}

/// Measure one workload against `target` and write its results. `print` shows the terminal
/// report and progress notes.
pub async fn execute(
    args: &RunArgs,
    target: &RunTarget,
    command_line: Vec<String>,
    stop: &StopSignal,
    print: bool,
) -> Result<RunOutcome> {
    validate(args)?;
    let headers = options::headers(&args.header)?;
    let extra_body = options::extra_body(args)?;
    let tokenizer = load_tokenizer(args, print)?;

    let virtual_sim = match target {
        RunTarget::Virtual { sim, .. } => Some(sim.as_ref()),
        RunTarget::Http { .. } => None,
    };
    let requests = dataset::build(args, &tokenizer, virtual_sim.is_some())?;
    if requests.is_empty() {
        bail!("the dataset produced no requests");
    }
    let schedule = dataset::schedule(args, requests.len())?;
    let requests = dataset::cycle_to(requests, schedule.len());
    // vLLM: the random dataset ignores EOS so generations run to the requested length.
    let ignore_eos = args.ignore_eos || args.dataset_name == DatasetName::Random;

    let (base_url, sim_info) = match target {
        RunTarget::Virtual { sim, spec } => {
            let (records, duration_ns, telemetry) = virtual_run::simulate(
                sim,
                &requests,
                &schedule,
                args.max_concurrency,
                ignore_eos,
                args.seed,
                args.num_warmups,
                args.random_prefix_mode == args::PrefixModeArg::PerRequest,
            )?;
            let model_id = args
                .model
                .clone()
                .unwrap_or_else(|| sim.served_model_name.clone());
            let (finish, mut sink) =
                output::Finish::open(args, model_id, &tokenizer, command_line, print)?;
            for r in &records {
                sink.append(r)?;
            }
            let meta = servebench_metrics::result::TargetInfo::simulator(
                "virtual",
                spec,
                output::sim_config(&sim.config_json)?,
            );
            return output::write_results(
                &finish,
                &records,
                duration_ns,
                None,
                Some(&telemetry),
                meta,
                true,
            );
        }
        RunTarget::Http { base_url, sim } => (base_url.clone(), sim.clone()),
    };

    let endpoint = args.endpoint.clone().unwrap_or_else(|| match args.backend {
        args::Backend::OpenaiChat => "/v1/chat/completions".into(),
        _ => "/v1/completions".into(),
    });
    let api = servebench_loadgen::client::api_for_endpoint(&endpoint);
    if (args.backend == args::Backend::OpenaiChat) != (api == servebench_loadgen::ApiKind::Chat) {
        bail!(
            "--backend {} does not match --endpoint {endpoint}: use openai-chat with /v1/chat/completions and openai/vllm with /v1/completions",
            args.backend.as_str()
        );
    }
    let mut target = Target {
        base_url,
        endpoint,
        api,
        model: String::new(),
        headers,
        api_key: args.api_key.clone(),
        extra_body,
        ignore_eos,
    };
    let model_id = match &args.model {
        Some(m) => m.clone(),
        None => {
            let m =
                servebench_loadgen::probe::first_model(&target, Duration::from_secs(30)).await?;
            if print {
                eprintln!("Model not specified; using the server's first model: {m}");
            }
            m
        }
    };
    target.model = args
        .served_model_name
        .clone()
        .unwrap_or_else(|| model_id.clone());

    let client = Arc::new(BackendClient::new(
        target,
        ClientOptions {
            request_timeout: args.request_timeout.map(Duration::from_secs_f64),
            keep_text: args.save_detailed,
            tokenizer: Some(tokenizer.clone()),
        },
    )?);
    let prepared: Vec<_> = requests
        .iter()
        .enumerate()
        .map(|(i, r)| client.prepare(i as u64, &r.prompt, r.prompt_tokens, r.max_tokens))
        .collect();

    if args.ready_check_timeout_sec > 0 {
        output::ready_check(
            &client,
            &prepared[0],
            Duration::from_secs(args.ready_check_timeout_sec),
            stop,
        )
        .await?;
    }
    if args.num_warmups > 0 {
        if print {
            eprintln!("Warming up with {} requests...", args.num_warmups);
        }
        let ok = warm_up(
            Arc::clone(&client),
            prepared[0].clone(),
            args.num_warmups,
            args.max_concurrency,
            stop,
        )
        .await;
        if print {
            eprintln!("Warm-up completed ({ok}/{} succeeded).", args.num_warmups);
        }
    }

    // Cold prefixes must stay cold: the warm-up request's prefix would otherwise be cached
    // for the first measured request. Best effort: not every server has the endpoint.
    if args.num_warmups > 0 && args.random_prefix_mode == args::PrefixModeArg::PerRequest {
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
    let (finish, sink) = output::Finish::open(args, model_id, &tokenizer, command_line, print)?;
    if print {
        print_traffic(args, finish.ramp_up.as_ref());
    }
    let spec = LoadSpec {
        schedule,
        max_concurrency: args.max_concurrency,
        progress: (!args.disable_tqdm).then(|| Progress {
            total: Some(prepared.len()),
            label: "run".into(),
        }),
        scrape_every: Some(Duration::from_secs(1)),
    };
    let outcome = run_load(
        Arc::clone(&client),
        prepared,
        spec,
        Some(sink),
        stop.clone(),
    )
    .await?;
    if let Some(e) = &outcome.write_error {
        eprintln!(
            "warning: writing {} failed: {e}",
            finish.jsonl_path.display()
        );
    }
    let server = output::ServerInfo::fetch(client.target(), sim_info).await;
    let simulated = server.sim.is_some();
    let meta = server.target_info(&client.target().base_url)?;
    output::write_results(
        &finish,
        &outcome.records,
        outcome.duration_ns,
        Some(&outcome),
        outcome.telemetry.as_ref(),
        meta,
        simulated,
    )
}

fn print_traffic(args: &RunArgs, ramp_up: Option<&(String, u64, u64)>) {
    if let Some((s, a, b)) = ramp_up {
        eprintln!("Traffic ramp-up strategy: {s}, from {a} to {b} RPS over the run.");
    } else {
        eprintln!(
            "Traffic request rate: {}",
            options::python_float(args.request_rate)
        );
    }
    let dist = if args.burstiness == 1.0 {
        "Poisson process"
    } else {
        "Gamma distribution"
    };
    eprintln!("Burstiness factor: {} ({dist})", args.burstiness);
    match args.max_concurrency {
        Some(c) => eprintln!("Maximum request concurrency: {c}"),
        None => eprintln!("Maximum request concurrency: None"),
    }
}
