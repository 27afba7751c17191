//! `RunPlan`: everything one measured run needs, validated once from the `servebench run`
//! flags. Nothing downstream parses a flag again: `run`, `--repeat`, matrix rows and sweep
//! points all hand a `RunPlan` to `execute`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use http::{HeaderName, HeaderValue};
use serde_json::{Map, Value};
use servebench_answer::AnswerChecks;
use servebench_loadgen::ApiKind;
use servebench_metrics::summary::Slo;
use servebench_workload::random::{PrefixHit, DEFAULT_PREFIX_POOL};
use servebench_workload::trace::{TraceLabels, TraceWindow};
use servebench_workload::{PrefixMode, RampUpStrategy, TraceFormat};

use super::args::{self, DatasetName, PrefixModeArg, RampUp as RampArg, RunArgs, TraceFormatArg};
use super::options;
use super::scale_out::ScaleOut;

/// vLLM's `--backend` (the API flavour a run speaks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiFlavor {
    /// `/v1/completions` (OpenAI-compatible).
    Openai,
    /// The same API under vLLM's name.
    Vllm,
    /// `/v1/chat/completions`.
    OpenaiChat,
    /// `/v1/embeddings`.
    OpenaiEmbeddings,
    /// `/v1/rerank` or `/rerank`.
    VllmRerank,
    /// `/v1/responses`, streamed.
    OpenaiResponses,
}

impl ApiFlavor {
    pub fn as_str(self) -> &'static str {
        match self {
            ApiFlavor::Openai => "openai",
            ApiFlavor::Vllm => "vllm",
            ApiFlavor::OpenaiChat => "openai-chat",
            ApiFlavor::OpenaiEmbeddings => "openai-embeddings",
            ApiFlavor::VllmRerank => "vllm-rerank",
            ApiFlavor::OpenaiResponses => "openai-responses",
        }
    }
}

/// Which server a run measures.
#[derive(Debug, Clone, PartialEq)]
pub enum TargetChoice {
    /// A server at this (normalized) base URL.
    Server { base_url: String },
    /// The simulator, started in-process (`None`: the default simulator).
    Simulator { spec: Option<String> },
    /// The simulator's engine core in virtual time.
    VirtualTime { spec: Option<String> },
}

/// The endpoint requests go to and the API it speaks.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    pub flavor: ApiFlavor,
    pub path: String,
    pub api: ApiKind,
}

/// Where prompts come from.
#[derive(Debug, Clone, PartialEq)]
pub enum DatasetChoice {
    /// Synthetic prompts at the lengths of [`RandomShape`].
    Random,
    /// ShareGPT conversations; `output_len` replaces the dataset's lengths.
    ShareGpt {
        path: PathBuf,
        output_len: Option<u64>,
    },
    /// A custom JSONL file; `output_len` −1 keeps the file's own lengths.
    Custom { path: PathBuf, output_len: i64 },
    /// Poem lines from a text file behind a shared opening.
    Sonnet {
        path: PathBuf,
        input_len: u64,
        output_len: u64,
        prefix_len: u64,
    },
    /// Random prompts in groups that share an exact-length prefix.
    PrefixRepetition {
        prefix_len: u64,
        suffix_len: u64,
        num_prefixes: usize,
        output_len: u64,
    },
    /// A local copy of a Hugging Face dataset vLLM knows by name.
    Hf {
        path: PathBuf,
        name: Option<String>,
        subset: Option<String>,
        split: Option<String>,
        output_len: Option<u64>,
    },
    /// A trace file replayed with its lengths and shared chunks (vLLM's timed_trace), on
    /// its own clock when self-timed.
    TimedTrace { path: PathBuf, trace: TraceReplay },
    /// Spec-Bench questions (`--spec-bench-*` in [`RunPlan::vllm`]).
    SpecBench { path: PathBuf },
    /// vLLM's BurstGPT dataset: the CSV's GPT-4 lengths.
    BurstGpt { path: PathBuf },
    /// Random prompts at the lengths of [`RandomShape`] with synthetic images.
    RandomMm(super::random_mm::RandomMmShape),
    /// Agent session trees (docs/agents.md).
    Agentic(Box<super::agents_plan::AgentPlan>),
}

/// How a timed trace is read and replayed (vLLM's `--timed-trace-*` flags and servebench's
/// window).
#[derive(Debug, Clone, PartialEq)]
pub struct TraceReplay {
    /// `None`: detected.
    pub format: Option<TraceFormat>,
    /// `None`: the format's default.
    pub sec_multiplier: Option<f64>,
    /// `None`: the format's default.
    pub chunk_hash_size: Option<u64>,
    pub labels: TraceLabels,
    pub window: TraceWindow,
    /// Arrivals follow the trace (vLLM's `--self-timed`, on by default).
    pub self_timed: bool,
}

impl DatasetChoice {
    /// vLLM's `--dataset-name`.
    pub fn name(&self) -> &'static str {
        match self {
            DatasetChoice::Random => "random",
            DatasetChoice::ShareGpt { .. } => "sharegpt",
            DatasetChoice::Custom { .. } => "custom",
            DatasetChoice::Sonnet { .. } => "sonnet",
            DatasetChoice::PrefixRepetition { .. } => "prefix_repetition",
            DatasetChoice::Hf { .. } => "hf",
            DatasetChoice::TimedTrace { .. } => "timed_trace",
            DatasetChoice::BurstGpt { .. } => "burstgpt",
            DatasetChoice::RandomMm(_) => "random-mm",
            DatasetChoice::SpecBench { .. } => "spec_bench",
            DatasetChoice::Agentic(_) => "agentic",
        }
    }

    pub fn path(&self) -> Option<&PathBuf> {
        match self {
            DatasetChoice::Random
            | DatasetChoice::PrefixRepetition { .. }
            | DatasetChoice::RandomMm(_) => None,
            DatasetChoice::ShareGpt { path, .. }
            | DatasetChoice::Custom { path, .. }
            | DatasetChoice::Sonnet { path, .. }
            | DatasetChoice::Hf { path, .. }
            | DatasetChoice::TimedTrace { path, .. }
            | DatasetChoice::BurstGpt { path }
            | DatasetChoice::SpecBench { path } => Some(path),
            DatasetChoice::Agentic(a) => a.path(),
        }
    }

    /// The replay settings of a timed trace whose arrivals follow the trace.
    pub fn self_timed(&self) -> Option<&TraceReplay> {
        match self {
            DatasetChoice::TimedTrace { trace, .. } if trace.self_timed => Some(trace),
            _ => None,
        }
    }
}

/// The random dataset's lengths (recorded in every result, as vLLM does).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RandomShape {
    /// Tokens after the prefix (`--random-input-len`, or `--input-len`).
    pub input_len: u64,
    pub output_len: u64,
    pub range_ratio: f64,
    pub prefix_len: u64,
    pub prefix_mode: PrefixMode,
    /// `--prefix-hit-rate` with `--prefix-pool`.
    pub prefix_hit: Option<PrefixHit>,
}

/// A rate that grows over the run instead of `--request-rate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RampUpPlan {
    pub strategy: RampUpStrategy,
    pub start_rps: u64,
    pub end_rps: u64,
}

impl RampUpPlan {
    /// The form result files and file names use: `("linear", 1, 10)`.
    pub fn described(&self) -> (String, u64, u64) {
        let name = match self.strategy {
            RampUpStrategy::Linear => "linear",
            RampUpStrategy::Exponential => "exponential",
        };
        (name.to_owned(), self.start_rps, self.end_rps)
    }
}

/// How requests arrive.
#[derive(Debug, Clone, PartialEq)]
pub struct Traffic {
    /// Requests per second; infinite sends everything at time 0.
    pub request_rate: f64,
    pub burstiness: f64,
    pub ramp_up: Option<RampUpPlan>,
    pub max_concurrency: Option<usize>,
    pub num_warmups: usize,
    /// Run by time instead of by count (seconds, as given).
    pub duration_s: Option<f64>,
}

/// What a run reports and where its files go.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportPlan {
    pub percentile_metrics: Vec<String>,
    pub metric_percentiles: Vec<f64>,
    pub goodput: Vec<Slo>,
    pub metadata: Vec<(String, String)>,
    pub save_result: bool,
    pub save_detailed: bool,
    pub append_result: bool,
    pub result_dir: Option<PathBuf>,
    pub result_filename: Option<String>,
    pub label: Option<String>,
    /// Live progress while the load runs.
    pub progress: bool,
    /// What the progress line is called (`run` when `None`; a matrix row or sweep point names
    /// itself). Not a flag: only the commands that build runs set it.
    pub progress_label: Option<String>,
    pub output_dir: PathBuf,
    pub steady_state: args::SteadyStateArg,
    /// `--slice-duration`: window width for metrics over time, s.
    pub slice_duration: Option<f64>,
    /// `--ui`: how live progress is drawn (when `progress`).
    pub ui: args::UiArg,
}

/// One measured run, validated.
#[derive(Debug, Clone)]
pub struct RunPlan {
    pub target: TargetChoice,
    pub endpoint: Endpoint,
    /// `--model`; `None` asks the server for its first model.
    pub model: Option<String>,
    pub served_model_name: Option<String>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub api_key: Option<String>,
    pub ready_check_timeout: Option<Duration>,
    pub request_timeout: Option<Duration>,
    /// `--tokenizer`; `None` is the built-in tokenizer.
    pub tokenizer: Option<String>,
    pub dataset: DatasetChoice,
    pub random: RandomShape,
    pub num_prompts: usize,
    pub seed: u64,
    /// `--disable-shuffle`: file datasets keep their order.
    pub disable_shuffle: bool,
    /// `--no-oversample`: file datasets send fewer prompts rather than repeat some.
    pub no_oversample: bool,
    pub traffic: Traffic,
    /// `--ignore-eos` as given (see [`RunPlan::ignore_eos`]).
    pub ignore_eos_flag: bool,
    /// Sampling flags and `--extra-body`, merged into every request body.
    pub extra_body: Map<String, Value>,
    pub report: ReportPlan,
    /// `--repeat`: how many times the whole measurement runs.
    pub repeat: u32,
    /// `--expect-regex` and `--expect-json-schema`, compiled.
    pub answer: AnswerPlan,
    /// `--start-at` and `--shard`/`--shards`.
    pub scale_out: ScaleOut,
    /// `--multi-turn`: the dataset's sessions, replayed as conversations.
    pub multi_turn: Option<MultiTurn>,
    /// Embeddings or rerank: inputs batched per request, no generation.
    pub pooling: Option<super::pooling::PoolingPlan>,
    /// `--lora-modules`: the adapters requests name, and how they are spread.
    pub lora: Option<super::lora::LoraPlan>,
    /// TLS and HTTP version of the connections.
    pub transport: servebench_loadgen::Transport,
    /// `--gpu-metrics-url`: a DCGM exporter to read GPU telemetry from (else `nvidia-smi`).
    pub gpu_metrics_url: Option<String>,
    /// `--stop-when-saturated`: stop as soon as the live over-saturation test fires.
    pub stop_when_saturated: bool,
    /// The rest of vLLM's flags: profiler, probes, timeline, dataset options.
    pub vllm: super::vllm_extras::VllmServeFlags,
}

/// How conversations are replayed (`--multi-turn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MultiTurn {
    /// `--think-time-ms`: the pause before a turn whose session gives none.
    pub think_time_ms: u64,
}

/// The run-wide answer checks: the flags as given (for the recorded command line) and
/// compiled (so a bad pattern or schema stops the run before any request).
#[derive(Debug, Clone, Default)]
pub struct AnswerPlan {
    pub regexes: Vec<String>,
    pub schemas: Vec<PathBuf>,
    pub checks: AnswerChecks,
}

impl AnswerPlan {
    fn from_args(a: &RunArgs) -> Result<AnswerPlan> {
        Ok(AnswerPlan {
            regexes: a.expect_regex.clone(),
            schemas: a.expect_json_schema.clone(),
            checks: AnswerChecks::new(&a.expect_regex, &a.expect_json_schema)?,
        })
    }
}

impl RunPlan {
    /// Validate `servebench run` flags into a plan. Every flag error surfaces here.
    pub fn from_args(a: &RunArgs) -> Result<RunPlan> {
        let ramp_up = ramp_up(a)?;
        let percentile_metrics = options::percentile_metrics(
            (a.percentile_metrics.as_deref())
                .or(super::pooling::default_percentile_metrics(a.backend)),
        )?;
        let metric_percentiles = options::metric_percentiles(&a.metric_percentiles)?;
        let goodput = options::goodput(&a.goodput)?;
        let metadata = options::key_values("--metadata", &a.metadata)?;
        let headers = options::headers(&a.header)?;
        let extra_body = options::extra_body(a)?;
        let traffic = Traffic {
            request_rate: a.request_rate,
            burstiness: a.burstiness,
            ramp_up,
            max_concurrency: a.max_concurrency,
            num_warmups: a.num_warmups,
            duration_s: a.duration,
        };
        check_traffic(&traffic)?;
        check_sizes(a, &traffic)?;
        let target = target(a)?;
        let vllm = {
            a.vllm.validate()?;
            if matches!(target, TargetChoice::VirtualTime { .. }) {
                if a.vllm.probe_request_rate > 0.0 {
                    bail!(
                        "--probe-request-rate sends probes beside the load in real time; \
                         --virtual-time has no server to send them to (drop --virtual-time \
                         to run against the simulator as a server)"
                    );
                }
                if a.vllm.profile {
                    eprintln!("note: --profile ignored: --virtual-time has no server to profile");
                }
            }
            for n in a.vllm.notes() {
                eprintln!("{n}");
            }
            a.vllm.clone()
        };
        let dataset = dataset(a)?;
        check_self_timed(&dataset, &traffic)?;
        check_duration(&traffic)?;
        let endpoint = endpoint(a, &target)?;
        check_images_backend(&dataset, &endpoint)?;
        let answer = AnswerPlan::from_args(a)?;
        let scale_out = ScaleOut::from_args(a, &target, &traffic)?;
        super::agents_plan::check_run(a, &dataset, &endpoint, &traffic)?;
        let multi_turn = multi_turn(a, &dataset, &endpoint, &traffic)?;
        let pooling = super::pooling::plan(a, &endpoint, &dataset)?;
        let lora = super::lora::plan(a)?;
        let transport = super::transport_plan::transport(a, &target)?;
        Ok(RunPlan {
            target,
            endpoint,
            model: a.model.clone(),
            served_model_name: a.served_model_name.clone(),
            headers,
            api_key: a.api_key.clone(),
            ready_check_timeout: (a.ready_check_timeout_sec > 0)
                .then(|| Duration::from_secs(a.ready_check_timeout_sec)),
            request_timeout: a.request_timeout.map(Duration::from_secs_f64),
            tokenizer: a.tokenizer.clone(),
            dataset,
            random: RandomShape {
                input_len: a.input_len.unwrap_or(a.random_input_len),
                output_len: a
                    .output_len
                    .map(|v| v.max(0) as u64)
                    .unwrap_or(a.random_output_len),
                range_ratio: a.random_range_ratio,
                prefix_len: a.random_prefix_len,
                prefix_mode: match a.random_prefix_mode {
                    PrefixModeArg::Shared => PrefixMode::Shared,
                    PrefixModeArg::PerRequest => PrefixMode::PerRequest,
                },
                prefix_hit: prefix_hit(a)?,
            },
            num_prompts: a.num_prompts,
            seed: a.seed,
            disable_shuffle: a.disable_shuffle,
            no_oversample: a.no_oversample,
            traffic,
            ignore_eos_flag: a.ignore_eos,
            extra_body,
            report: ReportPlan {
                percentile_metrics,
                metric_percentiles,
                goodput,
                metadata,
                save_result: a.save_result,
                save_detailed: a.save_detailed,
                append_result: a.append_result,
                result_dir: a.result_dir.clone(),
                result_filename: a.result_filename.clone(),
                label: a.label.clone(),
                progress: !a.disable_tqdm && a.ui != args::UiArg::None,
                progress_label: None,
                output_dir: a.output_dir.clone(),
                steady_state: a.steady_state,
                slice_duration: a.slice_duration,
                ui: a.ui,
            },
            repeat: a.repeat,
            answer,
            scale_out,
            multi_turn,
            pooling,
            lora,
            transport,
            gpu_metrics_url: super::gpu_telemetry::checked_url(a.gpu_metrics_url.as_ref())?,
            stop_when_saturated: a.stop_when_saturated,
            vllm,
        })
    }

    /// Checks of the values matrix rows and sweep points change after validation (rate,
    /// concurrency cap, ramp-up, duration), with the flags' messages.
    pub fn check(&self) -> Result<()> {
        if self.traffic.ramp_up.is_some() && self.traffic.request_rate.is_finite() {
            bail!("when using ramp-up, do not specify --request-rate: the rate is controlled by the ramp-up parameters");
        }
        check_traffic(&self.traffic)?;
        check_self_timed(&self.dataset, &self.traffic)?;
        check_duration(&self.traffic)
    }

    /// vLLM: the random dataset ignores EOS so generations run to the requested length.
    pub fn ignore_eos(&self) -> bool {
        // Agent sessions too: their contexts grow by the lengths the session gives.
        self.ignore_eos_flag
            || matches!(
                self.dataset,
                DatasetChoice::Random | DatasetChoice::Agentic(_)
            )
    }

    pub fn is_virtual(&self) -> bool {
        matches!(self.target, TargetChoice::VirtualTime { .. })
    }

    /// The plan as `servebench run` flags: the form the result writers read their fields
    /// from. `RunPlan::from_args(&plan.to_args())` gives the plan back.
    pub fn to_args(&self) -> RunArgs {
        let (base_url, sim, virtual_time) = match &self.target {
            TargetChoice::Server { base_url } => (Some(base_url.clone()), None, false),
            TargetChoice::Simulator { spec } => (None, spec.clone(), false),
            TargetChoice::VirtualTime { spec } => (None, spec.clone(), true),
        };
        let (dataset_name, dataset_path, sharegpt_output_len, custom_output_len) =
            match &self.dataset {
                DatasetChoice::Random => (DatasetName::Random, None, None, 256),
                DatasetChoice::ShareGpt { path, output_len } => {
                    (DatasetName::Sharegpt, Some(path.clone()), *output_len, 256)
                }
                DatasetChoice::Custom { path, output_len } => {
                    (DatasetName::Custom, Some(path.clone()), None, *output_len)
                }
                DatasetChoice::Sonnet { path, .. } => {
                    (DatasetName::Sonnet, Some(path.clone()), None, 256)
                }
                DatasetChoice::PrefixRepetition { .. } => {
                    (DatasetName::PrefixRepetition, None, None, 256)
                }
                DatasetChoice::Hf { path, .. } => (DatasetName::Hf, Some(path.clone()), None, 256),
                DatasetChoice::TimedTrace { path, .. } => {
                    (DatasetName::TimedTrace, Some(path.clone()), None, 256)
                }
                DatasetChoice::BurstGpt { path } => {
                    (DatasetName::Burstgpt, Some(path.clone()), None, 256)
                }
                DatasetChoice::RandomMm(_) => (DatasetName::RandomMm, None, None, 256),
                DatasetChoice::SpecBench { path } => {
                    (DatasetName::SpecBench, Some(path.clone()), None, 256)
                }
                DatasetChoice::Agentic(a) => (DatasetName::Agentic, a.path().cloned(), None, 256),
            };
        let replay = match &self.dataset {
            DatasetChoice::TimedTrace { trace, .. } => Some(trace.clone()),
            _ => None,
        };
        let labels = replay
            .as_ref()
            .map(|t| t.labels.clone())
            .unwrap_or_default();
        let mut dataset_flags = DatasetFlags::default();
        dataset_flags.set(&self.dataset);
        let t = &self.traffic;
        let r = &self.report;
        let mut args = RunArgs {
            backend: match self.endpoint.flavor {
                ApiFlavor::Openai => args::Backend::Openai,
                ApiFlavor::Vllm => args::Backend::Vllm,
                ApiFlavor::OpenaiChat => args::Backend::OpenaiChat,
                ApiFlavor::OpenaiEmbeddings => args::Backend::OpenaiEmbeddings,
                ApiFlavor::VllmRerank => args::Backend::VllmRerank,
                ApiFlavor::OpenaiResponses => args::Backend::OpenaiResponses,
            },
            base_url,
            host: None,
            port: None,
            endpoint: Some(self.endpoint.path.clone()),
            model: self.model.clone(),
            served_model_name: self.served_model_name.clone(),
            header: self
                .headers
                .iter()
                .map(|(k, v)| format!("{k}={}", String::from_utf8_lossy(v.as_bytes())))
                .collect(),
            api_key: self.api_key.clone(),
            ready_check_timeout_sec: self.ready_check_timeout.map_or(0, |d| d.as_secs()),
            request_timeout: self.request_timeout.map(|d| d.as_secs_f64()),
            sim,
            virtual_time,
            tokenizer: self.tokenizer.clone(),
            dataset_name: match &self.pooling {
                Some(p) if p.random_rerank => DatasetName::RandomRerank,
                _ => dataset_name,
            },
            dataset_path,
            num_prompts: self.num_prompts,
            seed: self.seed,
            input_len: None,
            output_len: None,
            random_input_len: self.random.input_len,
            random_output_len: self.random.output_len,
            random_range_ratio: self.random.range_ratio,
            random_prefix_len: self.random.prefix_len,
            random_prefix_mode: match self.random.prefix_mode {
                PrefixMode::Shared => PrefixModeArg::Shared,
                PrefixMode::PerRequest => PrefixModeArg::PerRequest,
            },
            sharegpt_output_len,
            custom_output_len,
            disable_shuffle: self.disable_shuffle,
            no_oversample: self.no_oversample,
            skip_chat_template: false,
            sonnet_input_len: dataset_flags.sonnet_input_len,
            sonnet_output_len: dataset_flags.sonnet_output_len,
            sonnet_prefix_len: dataset_flags.sonnet_prefix_len,
            prefix_repetition_prefix_len: dataset_flags.prefix_repetition_prefix_len,
            prefix_repetition_suffix_len: dataset_flags.prefix_repetition_suffix_len,
            prefix_repetition_num_prefixes: dataset_flags.prefix_repetition_num_prefixes,
            prefix_repetition_output_len: dataset_flags.prefix_repetition_output_len,
            hf_subset: dataset_flags.hf_subset,
            hf_split: dataset_flags.hf_split,
            hf_name: dataset_flags.hf_name,
            hf_output_len: dataset_flags.hf_output_len,
            timed_trace_sec_multiplier: replay.as_ref().and_then(|t| t.sec_multiplier),
            timed_trace_chunk_hash_size: replay.as_ref().and_then(|t| t.chunk_hash_size),
            timed_trace_label_timestamp: labels.timestamp,
            timed_trace_label_input_length: labels.input_length,
            timed_trace_label_output_length: labels.output_length,
            timed_trace_label_hash_ids: labels.hash_ids,
            self_timed: replay.as_ref().is_some_and(|t| t.self_timed),
            no_self_timed: replay.as_ref().is_some_and(|t| !t.self_timed),
            trace_format: replay
                .as_ref()
                .and_then(|t| t.format)
                .map(TraceFormatArg::from_format),
            trace_start: replay.as_ref().and_then(|t| t.window.start_s),
            trace_duration: replay.as_ref().and_then(|t| t.window.duration_s),
            request_rate: t.request_rate,
            burstiness: t.burstiness,
            max_concurrency: t.max_concurrency,
            ramp_up_strategy: t.ramp_up.map(|r| match r.strategy {
                RampUpStrategy::Linear => RampArg::Linear,
                RampUpStrategy::Exponential => RampArg::Exponential,
            }),
            ramp_up_start_rps: t.ramp_up.map(|r| r.start_rps),
            ramp_up_end_rps: t.ramp_up.map(|r| r.end_rps),
            num_warmups: t.num_warmups,
            duration: t.duration_s,
            ignore_eos: self.ignore_eos_flag,
            temperature: None,
            top_p: None,
            top_k: None,
            min_p: None,
            frequency_penalty: None,
            presence_penalty: None,
            repetition_penalty: None,
            // The merged body goes back whole through --extra-body (merged last), which
            // reproduces it whatever mix of sampling flags built it.
            extra_body: (!self.extra_body.is_empty())
                .then(|| Value::Object(self.extra_body.clone()).to_string()),
            percentile_metrics: Some(r.percentile_metrics.join(",")),
            metric_percentiles: r
                .metric_percentiles
                .iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(","),
            goodput: r
                .goodput
                .iter()
                .map(|g| format!("{}:{}", g.metric.as_str(), g.threshold_ms))
                .collect(),
            save_result: r.save_result,
            save_detailed: r.save_detailed,
            append_result: r.append_result,
            result_dir: r.result_dir.clone(),
            result_filename: r.result_filename.clone(),
            metadata: r.metadata.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            label: r.label.clone(),
            disable_tqdm: !r.progress,
            repeat: self.repeat,
            output_dir: r.output_dir.clone(),
            steady_state: r.steady_state,
            slice_duration: r.slice_duration,
            ui: if r.progress { r.ui } else { args::UiArg::Auto },
            expect_regex: self.answer.regexes.clone(),
            expect_json_schema: self.answer.schemas.clone(),
            start_at: self.scale_out.start_at.as_ref().map(|s| s.given.clone()),
            shard: self.scale_out.shard.map(|s| s.to_string()),
            shards: None,
            realtime_priority: None,
            prefix_hit_rate: self.random.prefix_hit.map(|h| h.rate),
            prefix_pool: self.random.prefix_hit.map(|h| h.pool),
            multi_turn: self.multi_turn.is_some(),
            think_time_ms: self.multi_turn.map_or(0, |m| m.think_time_ms),
            random_batch_size: self.pooling.as_ref().map_or(1, |p| p.batch_size),
            lora_modules: self.lora.as_ref().map(|l| l.flags()).unwrap_or_default(),
            lora_assignment: self.lora.as_ref().map(|l| l.assignment),
            ca_cert: None,
            insecure: false,
            client_cert: None,
            client_key: None,
            http2: Default::default(),
            random_mm: match &self.dataset {
                DatasetChoice::RandomMm(shape) => shape.flags.clone(),
                _ => Default::default(),
            },
            gpu_metrics_url: self.gpu_metrics_url.clone(),
            stop_when_saturated: self.stop_when_saturated,
            vllm: self.vllm.clone(),
            agents: match &self.dataset {
                DatasetChoice::Agentic(a) => a.flags.clone(),
                _ => Default::default(),
            },
            db: Default::default(),
        };
        super::transport_plan::set_flags(&mut args, &self.transport);
        args
    }
}

/// `--prefix-hit-rate` and `--prefix-pool`, checked against the dataset and the other prefix
/// flags.
fn prefix_hit(a: &RunArgs) -> Result<Option<PrefixHit>> {
    let Some(rate) = a.prefix_hit_rate else {
        if a.prefix_pool.is_some() {
            bail!("--prefix-pool needs --prefix-hit-rate");
        }
        return Ok(None);
    };
    if a.dataset_name != DatasetName::Random {
        bail!(
            "--prefix-hit-rate applies to the random dataset only, not {}; prefix_repetition \
             and sonnet have their own prefix flags",
            a.dataset_name.as_str()
        );
    }
    if a.random_prefix_len > 0 {
        bail!("--prefix-hit-rate cannot be combined with --random-prefix-len: the rate sets the shared share of each prompt itself");
    }
    if a.random_prefix_mode == PrefixModeArg::PerRequest {
        bail!("--prefix-hit-rate cannot be combined with --random-prefix-mode per-request; use --prefix-hit-rate 0 for prompts with nothing to reuse");
    }
    let hit = PrefixHit {
        rate,
        pool: a.prefix_pool.unwrap_or(DEFAULT_PREFIX_POOL),
    };
    hit.validate(a.num_prompts)?;
    Ok(Some(hit))
}

fn ramp_up(a: &RunArgs) -> Result<Option<RampUpPlan>> {
    Ok(
        options::check_ramp_up(a)?.map(|(name, start_rps, end_rps)| RampUpPlan {
            strategy: if name == "exponential" {
                RampUpStrategy::Exponential
            } else {
                RampUpStrategy::Linear
            },
            start_rps,
            end_rps,
        }),
    )
}

/// The most requests one run (or shard) schedules: every request's intended time and plan
/// are held in memory, so `--num-prompts 1000000000000` must be refused before anything is
/// allocated, not ended by the kernel's OOM killer. 100 million is about 28 hours at
/// 1,000 req/s; vLLM's own benchmarks run thousands.
pub const MAX_RUN_REQUESTS: usize = 100_000_000;

/// The lowest finite `--request-rate`: one request a week on average. Below it the gaps
/// between arrivals leave the range of the run's nanosecond clock.
pub const MIN_REQUEST_RATE: f64 = 1.0 / (7.0 * 86_400.0);

fn check_sizes(a: &RunArgs, t: &Traffic) -> Result<()> {
    if a.num_prompts > MAX_RUN_REQUESTS {
        bail!(
            "--num-prompts {} is more than one run holds (allowed: 1 to {MAX_RUN_REQUESTS}); split it with --shard I/N",
            a.num_prompts
        );
    }
    if let Some(secs) = t.duration_s {
        let peak_rate = match &t.ramp_up {
            Some(r) => r.start_rps.max(r.end_rps) as f64,
            None => t.request_rate,
        };
        let expected = peak_rate * secs;
        if expected.is_finite() && expected > MAX_RUN_REQUESTS as f64 {
            bail!(
                "--duration {secs} at {peak_rate} req/s schedules about {expected:.0} requests, more than one run holds (allowed: up to {MAX_RUN_REQUESTS}); shorten it or split it with --shard I/N"
            );
        }
    }
    Ok(())
}

fn check_traffic(t: &Traffic) -> Result<()> {
    if t.max_concurrency == Some(0) {
        bail!("--max-concurrency must be greater than 0");
    }
    if t.burstiness.is_nan() || t.burstiness <= 0.0 {
        bail!(
            "--burstiness must be positive (1 = Poisson), got {}",
            t.burstiness
        );
    }
    if t.request_rate.is_nan() || t.request_rate <= 0.0 {
        bail!(
            "--request-rate must be positive or inf, got {}",
            t.request_rate
        );
    }
    if t.request_rate.is_finite() && t.request_rate < MIN_REQUEST_RATE {
        bail!(
            "--request-rate {} is below the lowest rate a run keeps time for (allowed: {MIN_REQUEST_RATE:.3e} req/s, one a week, or more; inf for all at once)",
            t.request_rate
        );
    }
    Ok(())
}

fn check_duration(t: &Traffic) -> Result<()> {
    if let Some(secs) = t.duration_s {
        let max = servebench_metrics::units::MAX_FLAG_SECS;
        if secs.is_nan() || secs <= 0.0 || !secs.is_finite() || secs > max {
            bail!("--duration must be a positive number of seconds (allowed: greater than 0 and at most {max}, 30 days), got {secs}");
        }
        if t.request_rate.is_infinite() && t.ramp_up.is_none() {
            bail!("--duration needs a finite --request-rate (with an infinite rate every request would arrive at once)");
        }
    }
    Ok(())
}

fn target(a: &RunArgs) -> Result<TargetChoice> {
    let external = a.base_url.is_some() || a.host.is_some() || a.port.is_some();
    if a.virtual_time {
        if external {
            bail!("--virtual-time runs the simulator's engine core without a server: drop --base-url/--host/--port");
        }
        return Ok(TargetChoice::VirtualTime {
            spec: a.sim.clone(),
        });
    }
    if !external {
        return Ok(TargetChoice::Simulator {
            spec: a.sim.clone(),
        });
    }
    if a.sim.is_some() {
        bail!("--sim starts a simulator in-process; it cannot be combined with --base-url/--host/--port");
    }
    let base_url = match &a.base_url {
        Some(u) => servebench_loadgen::target::normalize_base_url(u),
        None => format!(
            "http://{}:{}",
            a.host.as_deref().unwrap_or("127.0.0.1"),
            a.port.unwrap_or(8000)
        ),
    };
    servebench_loadgen::target::parse_uri(&base_url)?;
    Ok(TargetChoice::Server { base_url })
}

/// Images go in chat messages: a run with them needs the chat API, as vLLM's does.
fn check_images_backend(dataset: &DatasetChoice, endpoint: &Endpoint) -> Result<()> {
    if matches!(dataset, DatasetChoice::RandomMm(_)) && endpoint.flavor != ApiFlavor::OpenaiChat {
        bail!(
            "--dataset-name random-mm sends images in chat messages: use --backend openai-chat \
             (endpoint /v1/chat/completions), not --backend {}",
            endpoint.flavor.as_str()
        );
    }
    Ok(())
}

fn dataset(a: &RunArgs) -> Result<DatasetChoice> {
    // vLLM's --output-len replaces the output length flag of random, sharegpt, sonnet and hf.
    check_trace_flags(a)?;
    super::random_mm::check_unused(&a.random_mm, a.dataset_name == DatasetName::RandomMm)?;
    super::agents_plan::check_unused(a)?;
    let general_output_len = || -> Result<Option<u64>> {
        match a.output_len {
            Some(v) if v < 0 => bail!(
                "--output-len must be non-negative for the {} dataset",
                a.dataset_name.as_str()
            ),
            Some(v) => Ok(Some(v as u64)),
            None => Ok(None),
        }
    };
    Ok(match a.dataset_name {
        DatasetName::Random | DatasetName::RandomRerank => {
            if let Some(p) = &a.dataset_path {
                bail!("cannot use the random dataset with --dataset-path {}: pick --dataset-name sharegpt, custom, sonnet or hf", p.display());
            }
            if matches!(a.output_len, Some(v) if v < 0) {
                bail!("--output-len must be non-negative for the random dataset")
            }
            DatasetChoice::Random
        }
        DatasetName::RandomMm => {
            if let Some(p) = &a.dataset_path {
                bail!("cannot use the random-mm dataset with --dataset-path {}: its images are generated", p.display());
            }
            if matches!(a.output_len, Some(v) if v < 0) {
                bail!("--output-len must be non-negative for the random-mm dataset")
            }
            DatasetChoice::RandomMm(super::random_mm::RandomMmShape::from_args(&a.random_mm)?)
        }
        DatasetName::Sharegpt => DatasetChoice::ShareGpt {
            path: a
                .dataset_path
                .clone()
                .context("--dataset-name sharegpt needs --dataset-path FILE.json")?,
            output_len: match a.output_len {
                Some(v) if v >= 0 => Some(v as u64),
                _ => a.sharegpt_output_len,
            },
        },
        DatasetName::Custom | DatasetName::CustomImage => DatasetChoice::Custom {
            path: a.dataset_path.clone().with_context(|| {
                format!(
                    "--dataset-name {} needs --dataset-path FILE.jsonl",
                    a.dataset_name.as_str()
                )
            })?,
            output_len: a.output_len.unwrap_or(a.custom_output_len),
        },
        DatasetName::CustomAudio => bail!(AUDIO_REFUSAL),
        DatasetName::SpeedBench => bail!(
            "--dataset-name speed_bench: servebench does not read SPEED-Bench's prepared files \
             yet (its prompts and categories); measuring other prompts in their place would \
             give other numbers. Spec-Bench (--dataset-name spec_bench) and the hf datasets \
             are read"
        ),
        DatasetName::SpecBench => DatasetChoice::SpecBench {
            path: a.dataset_path.clone().context(
                "--dataset-name spec_bench needs --dataset-path question.jsonl (Spec-Bench's)",
            )?,
        },
        DatasetName::Sonnet => DatasetChoice::Sonnet {
            path: a
                .dataset_path
                .clone()
                .context("--dataset-name sonnet needs --dataset-path FILE.txt (poem lines)")?,
            input_len: a.input_len.unwrap_or(a.sonnet_input_len),
            output_len: general_output_len()?.unwrap_or(a.sonnet_output_len),
            prefix_len: a.sonnet_prefix_len,
        },
        DatasetName::PrefixRepetition => {
            if let Some(p) = &a.dataset_path {
                bail!("the prefix_repetition dataset is synthetic and reads no file: drop --dataset-path {}", p.display());
            }
            if a.prefix_repetition_num_prefixes == 0 {
                bail!("--prefix-repetition-num-prefixes must be at least 1");
            }
            DatasetChoice::PrefixRepetition {
                prefix_len: a.prefix_repetition_prefix_len,
                suffix_len: a.prefix_repetition_suffix_len,
                num_prefixes: a.prefix_repetition_num_prefixes,
                output_len: a.prefix_repetition_output_len,
            }
        }
        DatasetName::Hf => DatasetChoice::Hf {
            path: a.dataset_path.clone().context(
                "--dataset-name hf needs --dataset-path DIR_OR_FILE: a local copy of the dataset (JSONL or Parquet)",
            )?,
            name: a.hf_name.clone(),
            subset: a.hf_subset.clone(),
            split: a.hf_split.clone(),
            output_len: general_output_len()?.or(a.hf_output_len),
        },
        DatasetName::TimedTrace => DatasetChoice::TimedTrace {
            path: a.dataset_path.clone().context(
                "--dataset-name timed_trace needs --dataset-path FILE: vLLM timed-trace or \
                 Mooncake JSON lines, or an Azure or BurstGPT CSV",
            )?,
            trace: trace_replay(a)?,
        },
        DatasetName::Agentic => DatasetChoice::Agentic(Box::new(super::agents_plan::plan(a)?)),
        DatasetName::Burstgpt => DatasetChoice::BurstGpt {
            path: a
                .dataset_path
                .clone()
                .context("--dataset-name burstgpt needs --dataset-path FILE.csv (BurstGPT)")?,
        },
    })
}

/// The timed-trace flags, checked; refused with any other dataset where they would do
/// nothing (the `--timed-trace-*` ones keep vLLM's leniency).
fn trace_replay(a: &RunArgs) -> Result<TraceReplay> {
    if let Some(m) = a.timed_trace_sec_multiplier {
        if !m.is_finite() || m <= 0.0 {
            bail!("--timed-trace-sec-multiplier must be a positive number, got {m}");
        }
    }
    if a.timed_trace_chunk_hash_size == Some(0) {
        bail!("--timed-trace-chunk-hash-size must be at least 1 token");
    }
    if let Some(s) = a.trace_start {
        if !s.is_finite() || s < 0.0 {
            bail!("--trace-start must be a non-negative number of seconds, got {s}");
        }
    }
    if let Some(d) = a.trace_duration {
        if !d.is_finite() || d <= 0.0 {
            bail!("--trace-duration must be a positive number of seconds, got {d}");
        }
    }
    Ok(TraceReplay {
        format: a.trace_format.map(TraceFormat::from),
        sec_multiplier: a.timed_trace_sec_multiplier,
        chunk_hash_size: a.timed_trace_chunk_hash_size,
        labels: TraceLabels {
            timestamp: a.timed_trace_label_timestamp.clone(),
            input_length: a.timed_trace_label_input_length.clone(),
            output_length: a.timed_trace_label_output_length.clone(),
            hash_ids: a.timed_trace_label_hash_ids.clone(),
        },
        window: TraceWindow {
            start_s: a.trace_start,
            duration_s: a.trace_duration,
        },
        self_timed: !a.no_self_timed,
    })
}

/// Trace-only flags with a dataset that is not a trace.
fn check_trace_flags(a: &RunArgs) -> Result<()> {
    if a.dataset_name == DatasetName::TimedTrace {
        return Ok(());
    }
    let given = [
        ("--self-timed", a.self_timed),
        ("--no-self-timed", a.no_self_timed),
        ("--trace-format", a.trace_format.is_some()),
        ("--trace-start", a.trace_start.is_some()),
        ("--trace-duration", a.trace_duration.is_some()),
    ];
    if let Some((flag, _)) = given.iter().find(|(_, on)| *on) {
        bail!(
            "{flag} applies to --dataset-name timed_trace only (the dataset is {})",
            a.dataset_name.as_str()
        );
    }
    Ok(())
}

/// A self-timed trace sets every arrival itself: a rate, burstiness, ramp-up or duration
/// would be silently ignored, so they are refused.
fn check_self_timed(dataset: &DatasetChoice, t: &Traffic) -> Result<()> {
    if dataset.self_timed().is_none() {
        return Ok(());
    }
    let clash = if t.request_rate.is_finite() {
        Some(format!("--request-rate {}", t.request_rate))
    } else if t.burstiness != 1.0 {
        Some(format!("--burstiness {}", t.burstiness))
    } else if t.ramp_up.is_some() {
        Some("--ramp-up-strategy".to_owned())
    } else {
        t.duration_s.map(|d| format!("--duration {d}"))
    };
    if let Some(flag) = clash {
        bail!(
            "{flag} cannot be combined with a self-timed trace: its requests arrive at the \
             trace's own timestamps (× --timed-trace-sec-multiplier). Add --no-self-timed to \
             take only the lengths from the trace and the arrivals from --request-rate and \
             --burstiness"
        );
    }
    Ok(())
}

/// The per-dataset flags of `servebench run` that give back a [`DatasetChoice`] (the
/// others keep their defaults).
struct DatasetFlags {
    sonnet_input_len: u64,
    sonnet_output_len: u64,
    sonnet_prefix_len: u64,
    prefix_repetition_prefix_len: u64,
    prefix_repetition_suffix_len: u64,
    prefix_repetition_num_prefixes: usize,
    prefix_repetition_output_len: u64,
    hf_subset: Option<String>,
    hf_split: Option<String>,
    hf_name: Option<String>,
    hf_output_len: Option<u64>,
}

impl Default for DatasetFlags {
    /// vLLM's defaults.
    fn default() -> Self {
        Self {
            sonnet_input_len: 550,
            sonnet_output_len: 150,
            sonnet_prefix_len: 200,
            prefix_repetition_prefix_len: 256,
            prefix_repetition_suffix_len: 256,
            prefix_repetition_num_prefixes: 10,
            prefix_repetition_output_len: 128,
            hf_subset: None,
            hf_split: None,
            hf_name: None,
            hf_output_len: None,
        }
    }
}

impl DatasetFlags {
    fn set(&mut self, d: &DatasetChoice) {
        match d {
            DatasetChoice::Sonnet {
                input_len,
                output_len,
                prefix_len,
                ..
            } => {
                self.sonnet_input_len = *input_len;
                self.sonnet_output_len = *output_len;
                self.sonnet_prefix_len = *prefix_len;
            }
            DatasetChoice::PrefixRepetition {
                prefix_len,
                suffix_len,
                num_prefixes,
                output_len,
            } => {
                self.prefix_repetition_prefix_len = *prefix_len;
                self.prefix_repetition_suffix_len = *suffix_len;
                self.prefix_repetition_num_prefixes = *num_prefixes;
                self.prefix_repetition_output_len = *output_len;
            }
            DatasetChoice::Hf {
                name,
                subset,
                split,
                output_len,
                ..
            } => {
                self.hf_name = name.clone();
                self.hf_subset = subset.clone();
                self.hf_split = split.clone();
                self.hf_output_len = *output_len;
            }
            DatasetChoice::Random
            | DatasetChoice::ShareGpt { .. }
            | DatasetChoice::Custom { .. }
            | DatasetChoice::TimedTrace { .. }
            | DatasetChoice::BurstGpt { .. }
            | DatasetChoice::SpecBench { .. }
            | DatasetChoice::RandomMm(_)
            | DatasetChoice::Agentic(_) => {}
        }
    }
}

/// Why audio runs are refused.
const AUDIO_REFUSAL: &str = "audio (--backend openai-audio, --dataset-name custom_audio, the \
    ASR hf datasets) is not sent by servebench yet: it sends text and images only, and a \
    transcription benchmark measured with text requests would give another workload's numbers";

fn endpoint(a: &RunArgs, target: &TargetChoice) -> Result<Endpoint> {
    let flavor = match a.backend {
        args::Backend::Openai => ApiFlavor::Openai,
        args::Backend::Vllm => ApiFlavor::Vllm,
        args::Backend::OpenaiChat => ApiFlavor::OpenaiChat,
        args::Backend::OpenaiEmbeddings => ApiFlavor::OpenaiEmbeddings,
        args::Backend::VllmRerank => ApiFlavor::VllmRerank,
        args::Backend::VllmChat => ApiFlavor::OpenaiChat,
        args::Backend::OpenaiResponses => ApiFlavor::OpenaiResponses,
        args::Backend::OpenaiAudio => bail!(AUDIO_REFUSAL),
    };
    let path = a.endpoint.clone().unwrap_or_else(|| match flavor {
        ApiFlavor::OpenaiChat => "/v1/chat/completions".into(),
        ApiFlavor::OpenaiEmbeddings => "/v1/embeddings".into(),
        ApiFlavor::VllmRerank => "/v1/rerank".into(),
        ApiFlavor::OpenaiResponses => "/v1/responses".into(),
        _ => "/v1/completions".into(),
    });
    let api = servebench_loadgen::client::api_for_endpoint(&path);
    // The engine core in virtual time takes token ids, not an API: the endpoint is unused.
    let virtual_time = matches!(target, TargetChoice::VirtualTime { .. });
    if let Some(e) = super::pooling::check_endpoint(flavor, api, &path, virtual_time) {
        bail!(e);
    }
    // In virtual time a pooling run is still a pooling run, whatever the (unused) path says.
    let api = match flavor {
        ApiFlavor::OpenaiEmbeddings => ApiKind::Embeddings,
        ApiFlavor::VllmRerank => ApiKind::Rerank,
        _ => api,
    };
    if !virtual_time && (flavor == ApiFlavor::OpenaiResponses) != (api == ApiKind::Responses) {
        bail!(
            "--backend {} does not match --endpoint {path}: use openai-responses with /v1/responses",
            flavor.as_str()
        );
    }
    if !virtual_time && (flavor == ApiFlavor::OpenaiChat) != (api == ApiKind::Chat) {
        bail!(
            "--backend {} does not match --endpoint {path}: use openai-chat with /v1/chat/completions and openai/vllm with /v1/completions",
            flavor.as_str()
        );
    }
    Ok(Endpoint { flavor, path, api })
}

/// `--multi-turn` and what it needs: the chat endpoint (a conversation is a list of
/// messages), a dataset of sessions, and a run bounded by its sessions.
fn multi_turn(
    a: &RunArgs,
    dataset: &DatasetChoice,
    endpoint: &Endpoint,
    traffic: &Traffic,
) -> Result<Option<MultiTurn>> {
    if !a.multi_turn {
        if a.think_time_ms > 0 {
            bail!("--think-time-ms applies to conversations: add --multi-turn");
        }
        return Ok(None);
    }
    if endpoint.api != ApiKind::Chat || endpoint.flavor != ApiFlavor::OpenaiChat {
        bail!(
            "--multi-turn sends each turn with the conversation so far as chat messages: use --backend openai-chat (endpoint /v1/chat/completions), not --backend {}",
            endpoint.flavor.as_str()
        );
    }
    if !matches!(
        dataset,
        DatasetChoice::ShareGpt { .. } | DatasetChoice::Custom { .. }
    ) {
        bail!("--multi-turn replays the conversations of --dataset-name sharegpt or custom (a JSONL file of sessions)");
    }
    if traffic.duration_s.is_some() || traffic.ramp_up.is_some() {
        bail!("--multi-turn runs its sessions once at --request-rate: --duration and --ramp-up-strategy are not supported with it");
    }
    Ok(Some(MultiTurn {
        think_time_ms: a.think_time_ms,
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn plan(flags: &[&str]) -> Result<RunPlan> {
        RunPlan::from_args(&RunArgs::from_flags(flags).map_err(anyhow::Error::msg)?)
    }

    #[test]
    fn multi_turn_flags_round_trip_and_think_time_needs_them() {
        let p = plan(&[
            "--backend",
            "openai-chat",
            "--multi-turn",
            "--think-time-ms",
            "250",
            "--dataset-name",
            "custom",
            "--dataset-path",
            "s.jsonl",
        ])
        .unwrap();
        assert_eq!(p.multi_turn, Some(MultiTurn { think_time_ms: 250 }));
        let back = RunPlan::from_args(&p.to_args()).unwrap();
        assert_eq!(back.multi_turn, p.multi_turn);
        assert_eq!(plan(&[]).unwrap().multi_turn, None);
        let err = plan(&["--think-time-ms", "5"]).unwrap_err().to_string();
        assert!(err.contains("add --multi-turn"), "{err}");
        let err = plan(&[
            "--backend",
            "openai-chat",
            "--multi-turn",
            "--dataset-name",
            "sharegpt",
            "--dataset-path",
            "s.json",
            "--duration",
            "10",
            "--request-rate",
            "1",
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("--duration"), "{err}");
    }

    #[test]
    fn defaults_are_vllms() {
        let p = plan(&[]).unwrap();
        assert_eq!(p.target, TargetChoice::Simulator { spec: None });
        assert_eq!(p.endpoint.path, "/v1/completions");
        assert_eq!(p.dataset, DatasetChoice::Random);
        assert!(p.ignore_eos());
        assert!(p.traffic.request_rate.is_infinite());
        assert_eq!(p.report.metric_percentiles, vec![99.0]);
        assert_eq!(p.report.percentile_metrics, vec!["ttft", "tpot", "itl"]);
        assert_eq!((p.random.input_len, p.random.output_len), (1024, 128));
    }

    #[test]
    fn errors_keep_the_flag_messages() {
        let msg = |f: &[&str]| plan(f).unwrap_err().to_string();
        assert!(
            msg(&["--max-concurrency", "0"]).contains("--max-concurrency must be greater than 0")
        );
        assert!(msg(&["--request-rate", "0"]).contains("--request-rate must be positive"));
        assert!(msg(&["--virtual-time", "--port", "1"]).contains("--virtual-time runs"));
        assert!(msg(&["--dataset-name", "sharegpt"]).contains("needs --dataset-path"));
        assert!(msg(&["--duration", "5"]).contains("--duration needs a finite --request-rate"));
        assert!(msg(&[
            "--backend",
            "openai-chat",
            "--endpoint",
            "/v1/completions",
            "--base-url",
            "http://h:1"
        ])
        .contains("does not match --endpoint"));
        assert!(msg(&["--output-len=-1"]).contains("non-negative"));
        // The engine core takes no endpoint, so a mismatch does not matter there.
        assert!(plan(&[
            "--backend",
            "openai-chat",
            "--endpoint",
            "/v1/completions",
            "--virtual-time"
        ])
        .is_ok());
    }

    #[test]
    fn to_args_gives_the_same_plan_back() {
        let flags = [
            "--base-url",
            "http://gpu:8000/",
            "--backend",
            "openai-chat",
            "--header",
            "x-a=1",
            "--dataset-name",
            "custom",
            "--dataset-path",
            "d.jsonl",
            "--custom-output-len",
            "-1",
            "--request-rate",
            "2.5",
            "--burstiness",
            "0.5",
            "--max-concurrency",
            "4",
            "--temperature",
            "0",
            "--extra-body",
            "{\"seed\": 3}",
            "--goodput",
            "ttft:500",
            "itl:12.5",
            "--metric-percentiles",
            "50,99.9",
            "--metadata",
            "a=b=c",
            "--percentile-metrics",
            "ttft,e2el",
            "--label",
            "x",
            "--seed",
            "9",
            "--disable-tqdm",
            "--ready-check-timeout-sec",
            "3",
            "--request-timeout",
            "1.5",
        ];
        let p = plan(&flags).unwrap();
        let back = RunPlan::from_args(&p.to_args()).unwrap();
        assert_eq!(format!("{p:?}"), format!("{back:?}"));
        let ramp = plan(&[
            "--ramp-up-strategy",
            "exponential",
            "--ramp-up-start-rps",
            "1",
            "--ramp-up-end-rps",
            "8",
            "--input-len",
            "77",
        ])
        .unwrap();
        let back = RunPlan::from_args(&ramp.to_args()).unwrap();
        assert_eq!(format!("{ramp:?}"), format!("{back:?}"));
        assert_eq!(back.random.input_len, 77);
    }

    #[test]
    fn vllm_offline_datasets_take_vllms_defaults_and_general_lengths() {
        let p = plan(&["--dataset-name", "sonnet", "--dataset-path", "s.txt"]).unwrap();
        assert_eq!(
            p.dataset,
            DatasetChoice::Sonnet {
                path: "s.txt".into(),
                input_len: 550,
                output_len: 150,
                prefix_len: 200
            }
        );
        let p = plan(&[
            "--dataset-name",
            "sonnet",
            "--dataset-path",
            "s.txt",
            "--input-len",
            "300",
            "--output-len",
            "20",
        ])
        .unwrap();
        assert!(matches!(
            p.dataset,
            DatasetChoice::Sonnet {
                input_len: 300,
                output_len: 20,
                ..
            }
        ));
        let p = plan(&["--dataset-name", "prefix_repetition"]).unwrap();
        assert_eq!(
            p.dataset,
            DatasetChoice::PrefixRepetition {
                prefix_len: 256,
                suffix_len: 256,
                num_prefixes: 10,
                output_len: 128
            }
        );
        assert_eq!(p.dataset.name(), "prefix_repetition");
        assert!(!p.ignore_eos());
        let p = plan(&[
            "--dataset-name",
            "hf",
            "--dataset-path",
            "d",
            "--hf-split",
            "test",
        ])
        .unwrap();
        assert_eq!(
            p.dataset,
            DatasetChoice::Hf {
                path: "d".into(),
                name: None,
                subset: None,
                split: Some("test".into()),
                output_len: None
            }
        );
        let msg = |f: &[&str]| plan(f).unwrap_err().to_string();
        assert!(msg(&["--dataset-name", "hf"]).contains("local copy"));
        assert!(
            msg(&["--dataset-name", "prefix_repetition", "--dataset-path", "x"])
                .contains("reads no file")
        );
        assert!(msg(&[
            "--dataset-name",
            "prefix_repetition",
            "--prefix-repetition-num-prefixes",
            "0"
        ])
        .contains("at least 1"));
        assert!(msg(&[
            "--dataset-name",
            "hf",
            "--dataset-path",
            "d",
            "--output-len=-1"
        ])
        .contains("non-negative for the hf dataset"));
    }

    #[test]
    fn to_args_gives_the_new_datasets_back() {
        for flags in [
            &[
                "--dataset-name",
                "sonnet",
                "--dataset-path",
                "s.txt",
                "--sonnet-input-len",
                "300",
                "--sonnet-prefix-len",
                "50",
                "--sonnet-output-len",
                "9",
            ][..],
            &[
                "--dataset-name",
                "prefix_repetition",
                "--prefix-repetition-prefix-len",
                "64",
                "--prefix-repetition-suffix-len",
                "8",
                "--prefix-repetition-num-prefixes",
                "4",
                "--prefix-repetition-output-len",
                "3",
                "--disable-shuffle",
            ][..],
            &[
                "--dataset-name",
                "hf",
                "--dataset-path",
                "d",
                "--hf-name",
                "philschmid/mt-bench",
                "--hf-subset",
                "en",
                "--hf-split",
                "test",
                "--hf-output-len",
                "12",
                "--no-oversample",
            ][..],
        ] {
            let p = plan(flags).unwrap();
            let back = RunPlan::from_args(&p.to_args()).unwrap();
            assert_eq!(format!("{p:?}"), format!("{back:?}"), "{flags:?}");
        }
    }

    #[test]
    fn check_catches_a_rate_set_beside_a_ramp() {
        let mut p = plan(&[
            "--ramp-up-strategy",
            "linear",
            "--ramp-up-start-rps",
            "1",
            "--ramp-up-end-rps",
            "8",
        ])
        .unwrap();
        p.check().unwrap();
        p.traffic.request_rate = 4.0;
        assert!(p
            .check()
            .unwrap_err()
            .to_string()
            .contains("do not specify --request-rate"));
    }
}

/// Every flag of `servebench run` that takes a value, given generated hostile numbers:
/// validating the plan ends in a plan or a clear error, never a panic, and a plan that is
/// accepted never asks for more requests than one run holds.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod hostile_numbers {
    use super::*;
    use clap::CommandFactory;
    use proptest::prelude::*;

    /// The long names of `run`'s flags that take a value.
    fn valued_flags() -> Vec<String> {
        valued_flags_of("run")
    }

    /// The long names of a subcommand's flags that take a value.
    pub(crate) fn valued_flags_of(subcommand: &str) -> Vec<String> {
        <crate::Cli as CommandFactory>::command()
            .find_subcommand(subcommand)
            .map(|cmd| {
                cmd.get_arguments()
                    .filter(|a| a.get_action().takes_values() && !a.is_positional())
                    .filter_map(|a| a.get_long().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Numbers a careless or hostile user might give any numeric flag.
    pub(crate) fn hostile() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("nan".to_owned()),
            Just("inf".to_owned()),
            Just("-inf".to_owned()),
            Just("0".to_owned()),
            Just("-1".to_owned()),
            Just("1e30".to_owned()),
            Just("1e-300".to_owned()),
            Just("18446744073709551616".to_owned()),
            Just("1000000000000".to_owned()),
            any::<f64>().prop_map(|v| v.to_string()),
            any::<u64>().prop_map(|v| v.to_string()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn every_valued_flag_survives_hostile_numbers(
            which in any::<prop::sample::Index>(),
            value in hostile(),
        ) {
            let flags = valued_flags();
            prop_assume!(!flags.is_empty());
            let flag = format!("--{}={value}", flags[which.index(flags.len())]);
            if let Ok(args) = RunArgs::from_flags(&[flag.as_str()]) {
                if let Ok(plan) = RunPlan::from_args(&args) {
                    prop_assert!(plan.num_prompts <= MAX_RUN_REQUESTS);
                    prop_assert!(plan.traffic.duration_s.is_none_or(|d| d.is_finite() && d > 0.0));
                }
            }
        }
    }

    #[test]
    fn the_flags_are_found() {
        let flags = valued_flags();
        for f in [
            "num-prompts",
            "request-rate",
            "request-timeout",
            "duration",
            "temperature",
        ] {
            assert!(flags.iter().any(|x| x == f), "{f} in {flags:?}");
        }
    }
}
