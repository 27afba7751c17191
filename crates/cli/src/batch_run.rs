//! One batch of requests released at once, against a server (the HTTP load generator) or the
//! simulator's engine core in virtual time: what `servebench latency` repeats and
//! `servebench throughput` runs once. Flags, plan and executors are `run`'s.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;
use servebench_loadgen::{run_load, BackendClient, LoadSpec, Progress, StopSignal};
use servebench_metrics::RequestRecord;
use servebench_report::pyjson::OrderedObject;
use servebench_sim::engine::NewRequest;
use servebench_sim::virtual_time::{VirtualArrival, VirtualDriver};
use servebench_sim::ResolvedSim;
use servebench_tokenizer::Tokenizer;
use servebench_workload::RequestSpec;

use crate::run::args::{Backend, RunArgs};
use crate::run::plan::{RunPlan, TargetChoice};
use crate::run::{http_run, target, virtual_run};

/// Where `latency` and `throughput` send their batches: `run`'s target flags.
#[derive(Debug, Clone, Args)]
pub struct BatchTargetArgs {
    /// Backend / API flavour: openai and vllm speak /v1/completions, openai-chat
    /// /v1/chat/completions.
    #[arg(long, value_enum, default_value = "openai", help_heading = "Target")]
    pub backend: Backend,
    /// Server base URL (e.g. http://gpu-host:8000); overrides --host/--port. Without
    /// --base-url/--host/--port the simulator runs in-process in virtual time.
    #[arg(long, help_heading = "Target")]
    pub base_url: Option<String>,
    /// Server host (without --base-url).
    #[arg(long, help_heading = "Target")]
    pub host: Option<String>,
    /// Server port [default: 8000 with --host].
    #[arg(long, help_heading = "Target")]
    pub port: Option<u16>,
    /// API endpoint [default: /v1/completions, or /v1/chat/completions for openai-chat].
    #[arg(long, help_heading = "Target")]
    pub endpoint: Option<String>,
    /// Model name; default: the first id from /v1/models.
    #[arg(long, help_heading = "Target")]
    pub model: Option<String>,
    /// Name sent as `model` in requests, when it differs from --model.
    #[arg(long, help_heading = "Target")]
    pub served_model_name: Option<String>,
    /// HTTP headers for every request (KEY=VALUE ...).
    #[arg(long, num_args = 0.., value_name = "KEY=VALUE", help_heading = "Target")]
    pub header: Vec<String>,
    /// API key (Bearer); also read from OPENAI_API_KEY. Never written anywhere.
    #[arg(
        long,
        env = "OPENAI_API_KEY",
        hide_env_values = true,
        help_heading = "Target"
    )]
    pub api_key: Option<String>,
    /// Per-request timeout in seconds (whole request, send to end of stream).
    #[arg(long, value_name = "SECS", value_parser = servebench_metrics::units::positive_secs, help_heading = "Target")]
    pub request_timeout: Option<f64>,
    /// Run the simulator's engine core in virtual time, as `run --virtual-time`: what these
    /// commands do anyway without --base-url/--host/--port, accepted so that one command line
    /// serves `run`, `latency` and `throughput` alike.
    #[arg(long, help_heading = "Target")]
    pub virtual_time: bool,
    /// The simulator to run in virtual time when no server is given: the arguments of
    /// `servebench sim` as one string, e.g. "llama-3.1-70b --gpu h100 --tensor-parallel-size 4".
    #[arg(long, value_name = "SPEC", help_heading = "Target")]
    pub sim: Option<String>,
    /// Name or path of a HuggingFace tokenizer (tokenizer.json file, directory, or model id in
    /// the local HF cache) prompts are counted with; default: built-in o200k_base.
    #[arg(long, help_heading = "Target")]
    pub tokenizer: Option<String>,
    /// Every completed answer must match this regex (as `run --expect-regex`); a miss is a
    /// failed request of kind invalid_output. Repeatable.
    #[arg(long, value_name = "RE", help_heading = "Answer checks")]
    pub expect_regex: Vec<String>,
    /// Every completed answer must validate against this JSON schema file (as
    /// `run --expect-json-schema`). Repeatable.
    #[arg(long, value_name = "FILE", help_heading = "Answer checks")]
    pub expect_json_schema: Vec<PathBuf>,
    /// vLLM's engine arguments: they configure the simulator where they map.
    #[command(flatten)]
    pub engine: crate::engine_args::EngineArgs,
}

impl BatchTargetArgs {
    /// `run`'s flags for this target (every other flag at `run`'s default): the target lands in
    /// a `RunPlan` validated exactly as `run` validates it. No server means virtual time.
    pub fn to_run_args(&self) -> Result<RunArgs> {
        let mut a = RunArgs::from_flags::<&str>(&[]).map_err(anyhow::Error::msg)?;
        let external = self.base_url.is_some() || self.host.is_some() || self.port.is_some();
        if external && self.sim.is_some() {
            bail!("--sim runs the simulator in virtual time; it cannot be combined with --base-url/--host/--port");
        }
        if external && self.virtual_time {
            bail!("--virtual-time runs the simulator's engine core without a server: drop --base-url/--host/--port");
        }
        a.backend = self.backend;
        a.base_url = self.base_url.clone();
        a.host = self.host.clone();
        a.port = self.port;
        a.endpoint = self.endpoint.clone();
        a.model = self.model.clone();
        a.served_model_name = self.served_model_name.clone();
        a.header = self.header.clone();
        a.api_key = self.api_key.clone();
        a.request_timeout = self.request_timeout;
        self.engine.check()?;
        a.sim = if external {
            if let Some(note) = self.engine.server_note() {
                eprintln!("{note}");
            }
            None
        } else {
            self.sim_spec()?
        };
        a.virtual_time = !external;
        a.tokenizer = self.tokenizer.clone();
        a.expect_regex = self.expect_regex.clone();
        a.expect_json_schema = self.expect_json_schema.clone();
        // vLLM's offline benchmarks always ignore EOS: every request generates its full length.
        a.ignore_eos = true;
        a.disable_tqdm = true;
        Ok(a)
    }
}

impl BatchTargetArgs {
    /// The simulator to run in virtual time: `--sim` as given, else vLLM's `--model` (when the
    /// catalog knows it) with the engine arguments that map; `None` keeps the default.
    fn sim_spec(&self) -> Result<Option<String>> {
        let mapping = self.engine.sim_mapping()?;
        if let Some(note) = crate::engine_args::ignored_note(&mapping.ignored) {
            eprintln!("{note}");
        }
        if let Some(spec) = &self.sim {
            if !mapping.spec_words.is_empty() {
                eprintln!(
                    "note: {} ignored: --sim gives the simulator's whole configuration",
                    mapping.spec_words.join(" ")
                );
            }
            return Ok(Some(spec.clone()));
        }
        let catalog = servebench_roofline::Catalog::builtin();
        let model = match self.model.as_deref() {
            Some(m) if catalog.model(m).is_ok() => Some(m.to_owned()),
            Some(m) => {
                eprintln!(
                    "note: the simulator's catalog has no model '{m}'; simulating its default \
                     ({}) instead (give --sim \"MODEL --gpu GPU\" for another)",
                    crate::run::target::DEFAULT_SIM_SPEC
                );
                None
            }
            None => None,
        };
        if model.is_none() && mapping.spec_words.is_empty() {
            return Ok(None);
        }
        let mut spec = match model {
            Some(m) => format!("'{m}' --gpu h100"),
            None => crate::run::target::DEFAULT_SIM_SPEC.to_owned(),
        };
        for w in mapping.spec_words {
            spec.push(' ');
            spec.push_str(&w);
        }
        Ok(Some(spec))
    }
}

/// What one batch produced.
pub struct Batch {
    /// One record per request, in request order.
    pub records: Vec<RequestRecord>,
    /// From the release of the batch to the end of its last request.
    pub elapsed_ns: u64,
}

impl Batch {
    pub fn elapsed_s(&self) -> f64 {
        self.elapsed_ns as f64 / 1e9
    }

    /// A batch with a failed request has no figure vLLM would report: it is an error.
    pub fn check_all_succeeded(&self) -> Result<()> {
        let failed: Vec<&RequestRecord> = self.records.iter().filter(|r| !r.is_success()).collect();
        if let Some(first) = failed.first() {
            let why = first
                .failure
                .as_ref()
                .map(|f| format!("{}: {}", f.kind.as_str(), f.message))
                .unwrap_or_else(|| "no output".to_owned());
            bail!(
                "{} of {} requests failed (first: request {}, {why}); a batch with failures has no latency or throughput to report",
                failed.len(),
                self.records.len(),
                first.id
            );
        }
        Ok(())
    }
}

/// A target that takes whole batches.
pub enum BatchTarget {
    /// A server, through `run`'s HTTP client and dispatcher.
    Http {
        client: Arc<BackendClient>,
        model_id: String,
    },
    /// The simulator's engine core in virtual time. One engine serves every batch in turn, as
    /// one server would.
    Virtual {
        sim: Box<ResolvedSim>,
        spec: String,
        driver: Box<VirtualDriver>,
        /// Engine request ids must stay unique across batches.
        next_id: u64,
    },
}

impl BatchTarget {
    /// The target a plan names (a server, or the simulator in virtual time).
    pub async fn connect(plan: &RunPlan, tokenizer: &Tokenizer) -> Result<BatchTarget> {
        match &plan.target {
            TargetChoice::Server { base_url } => {
                eprintln!(
                    "Target: {}",
                    servebench_loadgen::target::redact_url(base_url)
                );
                let (client, model_id) = http_run::connect(base_url, plan, tokenizer, true).await?;
                Ok(BatchTarget::Http { client, model_id })
            }
            TargetChoice::VirtualTime { spec } | TargetChoice::Simulator { spec } => {
                let (spec, sim) = target::resolve_sim(spec.as_deref())?;
                eprintln!("Target: simulator in virtual time ({spec})");
                if sim.fleet.is_some() {
                    bail!("latency and throughput runs in virtual time use one engine: drop the fleet flags (--replicas, --pool, --route, --rate-limit, --prefill-replicas) from --sim");
                }
                let mut driver = VirtualDriver::new(sim.engine.clone(), None)
                    .context("starting the simulator's engine core")?;
                if !plan.answer.checks.is_empty() {
                    driver.keep_output_ids();
                }
                Ok(BatchTarget::Virtual {
                    sim: Box::new(sim),
                    spec,
                    driver: Box::new(driver),
                    next_id: 0,
                })
            }
        }
    }

    pub fn is_virtual(&self) -> bool {
        matches!(self, BatchTarget::Virtual { .. })
    }

    /// The simulator behind the target, when it is one.
    pub fn sim(&self) -> Option<&ResolvedSim> {
        match self {
            BatchTarget::Virtual { sim, .. } => Some(sim),
            BatchTarget::Http { .. } => None,
        }
    }

    /// What results call the target.
    pub fn describe(&self) -> String {
        match self {
            BatchTarget::Http { model_id, .. } => model_id.clone(),
            BatchTarget::Virtual { spec, .. } => format!("simulator ({spec})"),
        }
    }

    /// Release every prompt `n` times at once (vLLM's `--n`; the copies of a prompt are
    /// consecutive requests) and wait for all of them. `seed` picks the simulated prompts'
    /// token ids (a fresh seed per batch keeps batches from hitting the prefix cache).
    /// `progress` labels live progress on stderr while a server answers.
    pub async fn run_batch(
        &mut self,
        plan: &RunPlan,
        prompts: &[RequestSpec],
        n: usize,
        seed: u64,
        progress: Option<&str>,
        stop: &StopSignal,
    ) -> Result<Batch> {
        let n = n.max(1);
        let requests = &with_copies(prompts, n)[..];
        match self {
            BatchTarget::Http { client, .. } => {
                let prepared: Vec<_> = requests
                    .iter()
                    .map(|r| client.prepare_spec(r.id, r))
                    .collect();
                let prepared = match &plan.lora {
                    Some(l) => crate::run::lora::apply(l, seed, prepared)?,
                    None => prepared,
                };
                let spec = LoadSpec {
                    schedule: vec![0; requests.len()],
                    max_concurrency: None,
                    progress: progress.map(|label| Progress {
                        total: Some(requests.len()),
                        label: label.to_owned(),
                        ui: servebench_loadgen::Ui::Auto,
                    }),
                    scrape_every: None,
                    start_at: None,
                };
                crate::run::measuring_begins();
                let outcome =
                    run_load(Arc::clone(client), prepared, spec, None, stop.clone()).await?;
                if outcome.not_dispatched > 0 || stop.dispatch_stopped() {
                    bail!("interrupted before the batch finished");
                }
                Ok(Batch {
                    records: outcome.records,
                    elapsed_ns: outcome.duration_ns,
                })
            }
            BatchTarget::Virtual {
                sim,
                driver,
                next_id,
                ..
            } => {
                let t0 = driver.now_ns();
                // The copies of a prompt carry the same token ids, as they carry the same text.
                let ids = virtual_run::prompt_ids(sim, prompts, seed)
                    .into_iter()
                    .flat_map(|ids| std::iter::repeat_n(ids, n));
                let first_trace = driver.traces().len();
                let assigned = plan
                    .lora
                    .as_ref()
                    .map(|l| (l, l.assign(requests.len(), seed)));
                let lora = crate::run::lora::engine_ids(sim, assigned.as_ref(), requests)?;
                for ((r, prompt), lora) in requests.iter().zip(ids).zip(lora) {
                    driver.submit(VirtualArrival {
                        intended_ns: t0,
                        request: NewRequest {
                            lora,
                            id: *next_id,
                            prompt,
                            max_tokens: r
                                .max_tokens
                                .map(|m| m.min(u64::from(u32::MAX)) as u32)
                                .unwrap_or(16),
                            min_tokens: 0,
                            ignore_eos: plan.ignore_eos(),
                            seed: None,
                            cache_salt: None,
                            arrival_ns: t0,
                        },
                    });
                    *next_id += 1;
                }
                driver
                    .run_until_idle()
                    .context("simulating the batch in virtual time")?;
                let chat = plan.endpoint.api == servebench_loadgen::ApiKind::Chat;
                let checks = &plan.answer.checks;
                let answers = (!checks.is_empty()).then(|| virtual_run::SimulatedAnswers::new(sim));
                let records: Vec<RequestRecord> = driver.traces()[first_trace..]
                    .iter()
                    .zip(requests)
                    .map(|(t, spec)| {
                        let mut t = t.clone();
                        shift_trace(&mut t, t0);
                        let mut rec = virtual_run::record(&t, spec, chat);
                        if chat {
                            virtual_run::split_output(&mut rec, &t, sim.reasoning);
                        }
                        if let Some(a) = &answers {
                            a.check(&mut rec, &t, checks, None);
                        }
                        rec
                    })
                    .collect();
                let elapsed_ns = records
                    .iter()
                    .filter_map(|r| r.done.or(r.end))
                    .max()
                    .unwrap_or(0);
                Ok(Batch {
                    records,
                    elapsed_ns,
                })
            }
        }
    }
}

/// `--profile` against a server: POST the profiler endpoint `path` (a refusal is one line).
pub async fn profile(target: &BatchTarget, on: bool, path: &str) {
    if let (true, BatchTarget::Http { client, .. }) = (on, target) {
        let timeout = std::time::Duration::from_secs(30);
        if let Some(w) = crate::run::vllm_probe::profile(client, path, timeout).await {
            eprintln!("{w}");
        }
    }
}

/// Counts the prompt tokens of the requests' images for the target's model (as `run` does):
/// the simulator's vision encoder, else the catalog's for --model; against a server whose
/// model the catalog does not know, the images are left uncounted (the server's usage counts
/// them), with a note.
pub fn count_images(
    plan: &RunPlan,
    target: &BatchTarget,
    mut requests: Vec<RequestSpec>,
) -> Result<Vec<RequestSpec>> {
    if requests.iter().all(|r| r.images.is_empty()) {
        return Ok(requests);
    }
    if plan.endpoint.flavor != crate::run::plan::ApiFlavor::OpenaiChat {
        bail!(
            "the dataset's requests carry images, which go in chat messages: use --backend \
             vllm-chat (vLLM's multimodal backend for offline benchmarks)"
        );
    }
    let catalog = servebench_roofline::Catalog::builtin();
    let vision = match target.sim() {
        Some(sim) => Some(sim.vision.clone().with_context(|| {
            format!(
                "images need a vision-language model, and the simulated model '{}' has none \
                 (simulate one, e.g. --sim \"Qwen/Qwen2.5-VL-7B-Instruct --gpu h100\")",
                sim.args.model
            )
        })?),
        None => plan
            .model
            .as_deref()
            .and_then(|m| catalog.vision(m))
            .cloned(),
    };
    match vision {
        Some(v) => {
            for r in &mut requests {
                r.count_image_tokens(|w, h| v.image_tokens(w, h));
            }
        }
        None => eprintln!(
            "note: image tokens are not counted in the client's expected prompt lengths (the \
             server's usage reports them)"
        ),
    }
    Ok(requests)
}

/// Times of a trace measured from `t0` (the batch's release) instead of the engine's start.
fn shift_trace(t: &mut servebench_sim::virtual_time::RequestTrace, t0: u64) {
    t.intended_ns = t.intended_ns.saturating_sub(t0);
    t.sent_ns = t.sent_ns.saturating_sub(t0);
    if let Some(f) = t.first_scheduled_ns.as_mut() {
        *f = f.saturating_sub(t0);
    }
    for x in &mut t.token_times_ns {
        *x = x.saturating_sub(t0);
    }
    if let Some(e) = t.end_ns.as_mut() {
        *e = e.saturating_sub(t0);
    }
}

/// Each request `n` times in a row (vLLM's `--n`: sequences per prompt), ids renumbered from 0.
pub fn with_copies(requests: &[RequestSpec], n: usize) -> Vec<RequestSpec> {
    requests
        .iter()
        .flat_map(|r| std::iter::repeat_n(r, n.max(1)))
        .enumerate()
        .map(|(i, r)| RequestSpec {
            id: i as u64,
            ..r.clone()
        })
        .collect()
}

/// Writes `value` as vLLM's `json.dump(results, f, indent=4)` does (Python's float repr).
pub fn write_python_json(path: &Path, value: &OrderedObject) -> Result<()> {
    let out = servebench_report::pyjson::to_python_json_indented(value, 4);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the directory of {}", path.display()))?;
    }
    std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))
}

/// Checks that `--output-json` can be written before a single request is sent.
pub fn check_output_json(path: Option<&PathBuf>) -> Result<()> {
    let Some(path) = path else { return Ok(()) };
    if path.is_dir() {
        bail!("--output-json {} is a directory", path.display());
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| {
            format!(
                "--output-json {}: cannot create its directory",
                path.display()
            )
        })?;
    }
    Ok(())
}

/// Refuse flags of a `vllm bench` command that servebench does not support, with the reason:
/// never silently ignored.
pub fn refuse_flags(
    command: &str,
    args: &[String],
    unsupported: &[(&str, &str)],
) -> Result<(), String> {
    for a in args {
        let name = a.split('=').next().unwrap_or(a);
        if let Some((flag, what)) = unsupported.iter().find(|(f, _)| *f == name) {
            return Err(format!(
                "{flag} is a `vllm bench {command}` flag that servebench does not support ({what}); remove it to run"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn spec(id: u64) -> RequestSpec {
        RequestSpec {
            images: Vec::new(),
            id,
            prompt: format!("p{id}"),
            prompt_tokens: 3,
            max_tokens: Some(4),
            prefix_tokens: 0,
        }
    }

    #[test]
    fn copies_keep_prompts_together_and_renumber() {
        let out = with_copies(&[spec(7), spec(9)], 2);
        let got: Vec<(u64, &str)> = out.iter().map(|r| (r.id, r.prompt.as_str())).collect();
        assert_eq!(got, vec![(0, "p7"), (1, "p7"), (2, "p9"), (3, "p9")]);
    }

    #[test]
    fn no_server_means_virtual_time_and_sim_with_a_server_is_refused() {
        let mut a = BatchTargetArgs {
            backend: Backend::Openai,
            base_url: None,
            host: None,
            port: None,
            endpoint: None,
            model: None,
            served_model_name: None,
            header: vec![],
            api_key: None,
            request_timeout: None,
            virtual_time: false,
            sim: Some("llama-3.1-8b --gpu a100".into()),
            tokenizer: None,
            expect_regex: vec![],
            expect_json_schema: vec![],
            engine: Default::default(),
        };
        let plan = RunPlan::from_args(&a.to_run_args().unwrap()).unwrap();
        assert!(plan.is_virtual());
        assert!(plan.ignore_eos());
        a.port = Some(8000);
        let err = a.to_run_args().unwrap_err().to_string();
        assert!(err.contains("cannot be combined"), "{err}");
    }

    #[test]
    fn refused_flags_name_the_command_and_reason() {
        let err = refuse_flags(
            "latency",
            &["--x".into(), "--profile=1".into()],
            &[("--profile", "profiling")],
        )
        .unwrap_err();
        assert!(
            err.contains("--profile is a `vllm bench latency` flag"),
            "{err}"
        );
        assert!(refuse_flags("latency", &["--y".into()], &[("--profile", "p")]).is_ok());
    }
}
