//! `servebench run` flags: `vllm bench serve`'s names, defaults and meaning, plus servebench's own.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

/// vLLM's `--backend` values servebench speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// `/v1/completions` (OpenAI-compatible).
    Openai,
    /// Same as `openai` (vLLM's name for its own server).
    Vllm,
    /// `/v1/chat/completions`.
    #[value(name = "openai-chat")]
    OpenaiChat,
    /// `/v1/embeddings`: batches of inputs, no generation.
    #[value(name = "openai-embeddings")]
    OpenaiEmbeddings,
    /// `/v1/rerank` (or `/rerank`, as vLLM and TEI serve it): a query against documents.
    #[value(name = "vllm-rerank")]
    VllmRerank,
    /// `vllm bench throughput`'s chat backend: `/v1/chat/completions` (as openai-chat), so a
    /// dataset's images go in the chat message.
    #[value(name = "vllm-chat")]
    VllmChat,
    /// The Responses API, `/v1/responses`, streamed (vLLM's openai-responses backend).
    #[value(name = "openai-responses")]
    OpenaiResponses,
    /// vLLM's speech-to-text backend (/v1/audio/transcriptions): refused, servebench sends
    /// no audio.
    #[value(name = "openai-audio")]
    OpenaiAudio,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Openai => "openai",
            Backend::Vllm => "vllm",
            Backend::OpenaiChat => "openai-chat",
            Backend::OpenaiEmbeddings => "openai-embeddings",
            Backend::VllmRerank => "vllm-rerank",
            Backend::VllmChat => "vllm-chat",
            Backend::OpenaiResponses => "openai-responses",
            Backend::OpenaiAudio => "openai-audio",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DatasetName {
    Random,
    Sharegpt,
    Custom,
    Sonnet,
    #[value(name = "prefix_repetition")]
    PrefixRepetition,
    Hf,
    /// vLLM's timed trace (and Azure, BurstGPT, Mooncake traces), on its own clock.
    #[value(name = "timed_trace")]
    TimedTrace,
    /// vLLM's BurstGPT dataset: GPT-4 rows' lengths, arrivals from --request-rate.
    Burstgpt,
    /// vLLM's reranking dataset: one random query, random documents in batches of
    /// --random-batch-size (needs --backend vllm-rerank).
    #[value(name = "random-rerank")]
    RandomRerank,
    /// vLLM's random prompts with synthetic images in the chat message (--random-mm-*).
    #[value(name = "random-mm")]
    RandomMm,
    /// Spec-Bench's question.jsonl: each question's first turn (--spec-bench-*).
    #[value(name = "spec_bench")]
    SpecBench,
    /// vLLM's custom_image: custom JSONL lines with `image_files`, sent in the chat message.
    #[value(name = "custom_image")]
    CustomImage,
    /// vLLM's custom_audio: refused, servebench sends no audio.
    #[value(name = "custom_audio")]
    CustomAudio,
    /// NVIDIA's SPEED-Bench: refused, its prepared files are not read yet.
    #[value(name = "speed_bench")]
    SpeedBench,
    /// Agent sessions (docs/agents.md): synthetic (--agent-preset, --agent-*), or replayed from
    /// --dataset-path (servebench agent-trace JSON lines, or OpenTelemetry GenAI spans).
    Agentic,
}

impl DatasetName {
    /// vLLM's `--dataset-name` value.
    pub fn as_str(self) -> &'static str {
        match self {
            DatasetName::Random => "random",
            DatasetName::Sharegpt => "sharegpt",
            DatasetName::Custom => "custom",
            DatasetName::Sonnet => "sonnet",
            DatasetName::PrefixRepetition => "prefix_repetition",
            DatasetName::Hf => "hf",
            DatasetName::TimedTrace => "timed_trace",
            DatasetName::Burstgpt => "burstgpt",
            DatasetName::RandomRerank => "random-rerank",
            DatasetName::RandomMm => "random-mm",
            DatasetName::SpecBench => "spec_bench",
            DatasetName::CustomImage => "custom_image",
            DatasetName::CustomAudio => "custom_audio",
            DatasetName::SpeedBench => "speed_bench",
            DatasetName::Agentic => "agentic",
        }
    }
}

/// `--trace-format`: a trace file's format when detection should not decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TraceFormatArg {
    /// Azure LLM inference CSV (2023 or 2024).
    Azure,
    /// Mooncake JSON lines: millisecond timestamps, 512-token hash blocks.
    Mooncake,
    /// BurstGPT CSV.
    Burstgpt,
    /// vLLM's timed-trace JSON lines: timestamps in seconds, 16-token hash chunks.
    Vllm,
}

impl From<TraceFormatArg> for servebench_workload::TraceFormat {
    fn from(f: TraceFormatArg) -> Self {
        use servebench_workload::TraceFormat;
        match f {
            TraceFormatArg::Azure => TraceFormat::Azure,
            TraceFormatArg::Mooncake => TraceFormat::Mooncake,
            TraceFormatArg::Burstgpt => TraceFormat::BurstGpt,
            TraceFormatArg::Vllm => TraceFormat::Vllm,
        }
    }
}

impl TraceFormatArg {
    pub fn from_format(f: servebench_workload::TraceFormat) -> Self {
        use servebench_workload::TraceFormat;
        match f {
            TraceFormat::Azure => TraceFormatArg::Azure,
            TraceFormat::Mooncake => TraceFormatArg::Mooncake,
            TraceFormat::BurstGpt => TraceFormatArg::Burstgpt,
            TraceFormat::Vllm => TraceFormatArg::Vllm,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrefixModeArg {
    Shared,
    PerRequest,
}

/// `--steady-state`: whether the detected warm-up is excluded from the window the verdict
/// judges.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum SteadyStateArg {
    /// Exclude the warm-up found by MSER-5.
    #[default]
    Auto,
    /// Exclude nothing; report the warm-up that should have been excluded.
    Off,
}

/// `--ui`: how live progress is shown on stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum UiArg {
    /// The dashboard on a terminal, plain lines when stderr is piped.
    #[default]
    Auto,
    /// The full-screen live view (q or Ctrl-C stops the run).
    Dashboard,
    /// One progress bar line.
    Bar,
    /// Plain progress lines every 10 s.
    Simple,
    /// No live progress (as --disable-tqdm).
    None,
}

impl UiArg {
    /// The load generator's view; `None` for no progress at all.
    pub fn view(self) -> Option<servebench_loadgen::Ui> {
        use servebench_loadgen::Ui;
        match self {
            UiArg::Auto => Some(Ui::Auto),
            UiArg::Dashboard => Some(Ui::Dashboard),
            UiArg::Bar => Some(Ui::Bar),
            UiArg::Simple => Some(Ui::Simple),
            UiArg::None => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RampUp {
    Linear,
    Exponential,
}

/// Arguments of `servebench run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    // ---- target ----
    /// Backend / API flavour.
    #[arg(long, value_enum, default_value = "openai", help_heading = "Target")]
    pub backend: Backend,
    /// Server base URL (e.g. http://gpu-host:8000); overrides --host/--port.
    #[arg(long, help_heading = "Target")]
    pub base_url: Option<String>,
    /// Server host (without --base-url). Without --base-url/--host/--port, servebench starts
    /// its simulator in-process and benchmarks it.
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
    /// Seconds to wait for the endpoint to answer a test request (0 = skip the check).
    #[arg(long, default_value_t = 0, help_heading = "Target")]
    pub ready_check_timeout_sec: u64,
    /// Per-request timeout in seconds (whole request, send to end of stream).
    #[arg(long, value_name = "SECS", value_parser = servebench_metrics::units::positive_secs, help_heading = "Target")]
    pub request_timeout: Option<f64>,
    /// Simulator to start in-process when no server is given: the arguments of
    /// `servebench sim` as one string, e.g. "llama-3.1-70b --gpu h100 --dtype fp8 --tensor-parallel-size 2".
    #[arg(long, value_name = "SPEC", help_heading = "Target")]
    pub sim: Option<String>,
    /// Feed the workload to the simulator's engine core in virtual time: no server, no sleeping.
    #[arg(long, help_heading = "Target")]
    pub virtual_time: bool,

    // ---- dataset ----
    /// Name or path of a HuggingFace tokenizer (tokenizer.json file, directory, or model id in
    /// the local HF cache); default: built-in o200k_base.
    #[arg(long, help_heading = "Dataset")]
    pub tokenizer: Option<String>,
    /// Where prompts come from: random token prompts, groups of prompts sharing a prefix
    /// (prefix_repetition), or a file given with --dataset-path: ShareGPT JSON, custom JSONL,
    /// sonnet poem lines, or a local copy of a Hugging Face dataset (hf).
    #[arg(long, value_enum, default_value = "random", help_heading = "Dataset")]
    pub dataset_name: DatasetName,
    /// Dataset file (sharegpt JSON, custom JSONL, sonnet text), or the folder or file of a
    /// local Hugging Face dataset copy (hf).
    #[arg(long, help_heading = "Dataset")]
    pub dataset_path: Option<PathBuf>,
    /// Number of prompts to process; -1 (vLLM's spelling) or 0: every prompt of a dataset
    /// file once (custom, spec_bench).
    #[arg(
        long,
        default_value_t = 1000,
        allow_negative_numbers = true,
        value_parser = num_prompts_value,
        help_heading = "Dataset"
    )]
    pub num_prompts: usize,
    /// Random seed (dataset and arrivals).
    #[arg(long, default_value_t = 0, help_heading = "Dataset")]
    pub seed: u64,
    /// General input length (maps to --random-input-len).
    #[arg(long, help_heading = "Dataset")]
    pub input_len: Option<u64>,
    /// General output length (maps to the dataset-specific output length).
    #[arg(long, help_heading = "Dataset")]
    pub output_len: Option<i64>,
    /// Prompt tokens of each random request, shared prefix excluded.
    #[arg(long, default_value_t = 1024, help_heading = "Dataset")]
    pub random_input_len: u64,
    /// Output tokens of each random request (max_tokens).
    #[arg(long, default_value_t = 128, help_heading = "Dataset")]
    pub random_output_len: u64,
    /// Range ratio for sampling input/output lengths: uniform in [len·(1−r), len·(1+r)].
    #[arg(long, default_value_t = 0.0, help_heading = "Dataset")]
    pub random_range_ratio: f64,
    /// Shared prefix tokens before each random prompt.
    #[arg(long, default_value_t = 0, help_heading = "Dataset")]
    pub random_prefix_len: u64,
    /// Whether the random prefix is one shared prefix for the whole run (vLLM; a prefix cache
    /// can reuse it) or a fresh prefix per request (nothing reusable).
    #[arg(long, value_enum, default_value = "shared", help_heading = "Dataset")]
    pub random_prefix_mode: PrefixModeArg,
    /// Output length for each ShareGPT request (overrides the dataset's).
    #[arg(long, help_heading = "Dataset")]
    pub sharegpt_output_len: Option<u64>,
    /// Output length for each custom request (-1: the dataset's own).
    #[arg(
        long,
        default_value_t = 256,
        allow_negative_numbers = true,
        help_heading = "Dataset"
    )]
    pub custom_output_len: i64,
    /// Keep the dataset file's order instead of shuffling it with the seed (sharegpt, custom,
    /// hf, prefix_repetition).
    #[arg(long, help_heading = "Dataset")]
    pub disable_shuffle: bool,
    /// When the file has fewer usable prompts than --num-prompts, send fewer instead of
    /// repeating random ones (sharegpt, custom, hf).
    #[arg(long, help_heading = "Dataset")]
    pub no_oversample: bool,
    /// Accepted for vLLM compatibility: servebench never applies a chat template to prompts
    /// (a chat endpoint applies the server's own).
    #[arg(long, help_heading = "Dataset")]
    pub skip_chat_template: bool,
    /// Upper bound of each sonnet prompt's tokens.
    #[arg(long, default_value_t = 550, help_heading = "Dataset")]
    pub sonnet_input_len: u64,
    /// Output tokens of each sonnet request.
    #[arg(long, default_value_t = 150, help_heading = "Dataset")]
    pub sonnet_output_len: u64,
    /// Tokens of the opening every sonnet prompt shares (instruction and first poem lines).
    #[arg(long, default_value_t = 200, help_heading = "Dataset")]
    pub sonnet_prefix_len: u64,
    /// Tokens of each shared prefix (prefix_repetition).
    #[arg(long, default_value_t = 256, help_heading = "Dataset")]
    pub prefix_repetition_prefix_len: u64,
    /// Tokens after the prefix (prefix_repetition); a prompt has prefix + suffix tokens.
    #[arg(long, default_value_t = 256, help_heading = "Dataset")]
    pub prefix_repetition_suffix_len: u64,
    /// Number of distinct prefixes (prefix_repetition); each serves
    /// num-prompts / num-prefixes prompts.
    #[arg(long, default_value_t = 10, help_heading = "Dataset")]
    pub prefix_repetition_num_prefixes: usize,
    /// Output tokens of each prefix_repetition request.
    #[arg(long, default_value_t = 128, help_heading = "Dataset")]
    pub prefix_repetition_output_len: u64,
    /// Subset (configuration) of the Hugging Face dataset: a folder of the local copy.
    #[arg(long, help_heading = "Dataset")]
    pub hf_subset: Option<String>,
    /// Split of the Hugging Face dataset [default: train].
    #[arg(long, help_heading = "Dataset")]
    pub hf_split: Option<String>,
    /// Id of the Hugging Face dataset the local copy holds (e.g. philschmid/mt-bench).
    #[arg(long, help_heading = "Dataset")]
    pub hf_name: Option<String>,
    /// Output tokens of each hf request, replacing the dataset's lengths.
    #[arg(long, help_heading = "Dataset")]
    pub hf_output_len: Option<u64>,

    // ---- timed traces ----
    /// timed_trace: timestamp × this = seconds [default: 1; 0.001 for Mooncake's ms]. Also
    /// speeds a replay up (0.5: twice as fast).
    #[arg(long, value_name = "X", help_heading = "Timed traces")]
    pub timed_trace_sec_multiplier: Option<f64>,
    /// timed_trace: prompt tokens one hash id stands for [default: 16; 512 for Mooncake].
    #[arg(long, value_name = "TOKENS", help_heading = "Timed traces")]
    pub timed_trace_chunk_hash_size: Option<u64>,
    /// timed_trace: JSON field holding each request's timestamp.
    #[arg(long, default_value = "timestamp", help_heading = "Timed traces")]
    pub timed_trace_label_timestamp: String,
    /// timed_trace: JSON field holding each prompt's token count.
    #[arg(long, default_value = "input_length", help_heading = "Timed traces")]
    pub timed_trace_label_input_length: String,
    /// timed_trace: JSON field holding each output's token count.
    #[arg(long, default_value = "output_length", help_heading = "Timed traces")]
    pub timed_trace_label_output_length: String,
    /// timed_trace: JSON field holding each prompt's hash ids.
    #[arg(long, default_value = "hash_ids", help_heading = "Timed traces")]
    pub timed_trace_label_hash_ids: String,
    /// Send each request at its trace time × multiplier (the default for timed_trace).
    #[arg(long, conflicts_with = "no_self_timed", help_heading = "Timed traces")]
    pub self_timed: bool,
    /// Take only the lengths from the trace; arrivals follow --request-rate/--burstiness.
    #[arg(long, help_heading = "Timed traces")]
    pub no_self_timed: bool,
    /// timed_trace: the file's format [default: detected; JSON lines read as vLLM's timed trace].
    #[arg(long, value_enum, help_heading = "Timed traces")]
    pub trace_format: Option<TraceFormatArg>,
    /// timed_trace: replay from this second of the trace (replay clock, after the multiplier);
    /// offsets count from it.
    #[arg(long, value_name = "SECS", help_heading = "Timed traces")]
    pub trace_start: Option<f64>,
    /// timed_trace: replay this many seconds from --trace-start.
    #[arg(long, value_name = "SECS", help_heading = "Timed traces")]
    pub trace_duration: Option<f64>,

    // ---- traffic ----
    /// Requests per second ("inf" sends all at time 0).
    #[arg(long, default_value = "inf", help_heading = "Traffic")]
    pub request_rate: f64,
    /// Gamma shape of inter-arrival times (1 = Poisson; lower = burstier).
    #[arg(long, default_value_t = 1.0, help_heading = "Traffic")]
    pub burstiness: f64,
    /// Maximum concurrent requests (a client-side queue; the wait is recorded as queue time).
    #[arg(long, help_heading = "Traffic")]
    pub max_concurrency: Option<usize>,
    /// Raise the request rate during the run instead of a fixed --request-rate: linearly or
    /// exponentially from --ramp-up-start-rps to --ramp-up-end-rps (both required).
    #[arg(long, value_enum, help_heading = "Traffic")]
    pub ramp_up_strategy: Option<RampUp>,
    /// Request rate (req/s) at the start of a ramp-up (not 0 for an exponential one).
    #[arg(long, help_heading = "Traffic")]
    pub ramp_up_start_rps: Option<u64>,
    /// Request rate (req/s) at the end of a ramp-up.
    #[arg(long, help_heading = "Traffic")]
    pub ramp_up_end_rps: Option<u64>,
    /// Warm-up requests before the measured window (not recorded).
    #[arg(long, default_value_t = 0, help_heading = "Traffic")]
    pub num_warmups: usize,
    /// Run by time: keep arriving (cycling the dataset) for this many seconds.
    #[arg(long, value_name = "SECS", help_heading = "Traffic")]
    pub duration: Option<f64>,

    // ---- sampling ----
    /// Set ignore_eos in each request (default on for the random dataset, as in vLLM).
    #[arg(long, help_heading = "Sampling")]
    pub ignore_eos: bool,
    /// Sampling temperature sent in every request (0: greedy); unset: the server's default.
    #[arg(long, help_heading = "Sampling")]
    pub temperature: Option<f64>,
    /// Nucleus sampling: keep the smallest set of tokens whose probabilities add up to TOP_P;
    /// unset: the server's default.
    #[arg(long, help_heading = "Sampling")]
    pub top_p: Option<f64>,
    /// Sample only among the TOP_K most likely tokens; unset: the server's default.
    #[arg(long, help_heading = "Sampling")]
    pub top_k: Option<i64>,
    /// Drop tokens less likely than MIN_P times the most likely one; unset: the server's default.
    #[arg(long, help_heading = "Sampling")]
    pub min_p: Option<f64>,
    /// Penalise tokens by how often they already appeared; unset: the server's default.
    #[arg(long, help_heading = "Sampling")]
    pub frequency_penalty: Option<f64>,
    /// Penalise tokens that already appeared at all; unset: the server's default.
    #[arg(long, help_heading = "Sampling")]
    pub presence_penalty: Option<f64>,
    /// vLLM's multiplicative penalty on repeated tokens (1: none); unset: the server's
    /// default.
    #[arg(long, help_heading = "Sampling")]
    pub repetition_penalty: Option<f64>,
    /// JSON object merged into every request body.
    #[arg(long, value_name = "JSON", help_heading = "Sampling")]
    pub extra_body: Option<String>,

    // ---- metrics ----
    /// Metrics to report percentiles for: ttft,tpot,itl,e2el and servebench's
    /// queue,user_ttft,user_e2el (vLLM's client_queue_time, e2el_including_client_queue too).
    #[arg(long, help_heading = "Metrics")]
    pub percentile_metrics: Option<String>,
    /// Percentiles to report, comma-separated.
    #[arg(long, default_value = "99", help_heading = "Metrics")]
    pub metric_percentiles: String,
    /// SLOs for goodput: KEY:MS pairs with KEY in ttft, tpot, e2el, itl.
    #[arg(long, num_args = 1.., value_name = "KEY:MS", help_heading = "Metrics")]
    pub goodput: Vec<String>,

    /// Warm-up detection for the validity verdict: `auto` excludes the transient MSER-5
    /// finds, `off` excludes nothing and reports what should have been excluded.
    #[arg(long, value_enum, default_value = "auto", help_heading = "Metrics")]
    pub steady_state: SteadyStateArg,

    // ---- answer checks ----
    /// Every completed answer must match this regex (anywhere in the text; anchor it with
    /// ^…$ for the whole). A miss is a failed request of kind invalid_output. Repeatable:
    /// all must match.
    #[arg(long, value_name = "RE", help_heading = "Answer checks")]
    pub expect_regex: Vec<String>,
    /// Every completed answer must parse as JSON and validate against this JSON schema file
    /// (local; no remote $ref). A miss is a failed request of kind invalid_output.
    /// Repeatable: all must validate.
    #[arg(long, value_name = "FILE", help_heading = "Answer checks")]
    pub expect_json_schema: Vec<PathBuf>,

    // ---- scale-out ----
    /// Start the schedule at this wall-clock instant: RFC 3339 (2026-11-24T18:00:00Z) or Unix
    /// seconds (1795543200.5). Sleeps until then; refused when already past by more than 1 s.
    #[arg(long, value_name = "WHEN", help_heading = "Scale-out")]
    pub start_at: Option<String>,
    /// Send only shard I of N of the schedule: the requests with id % N == I, at their
    /// intended times in the whole schedule (`servebench merge` joins the shards).
    #[arg(
        long,
        value_name = "I/N",
        conflicts_with = "shards",
        help_heading = "Scale-out"
    )]
    pub shard: Option<String>,
    /// Split the schedule into N shards, this process's index taken from JOB_COMPLETION_INDEX
    /// (as a Kubernetes Indexed Job sets it).
    #[arg(long, value_name = "N", help_heading = "Scale-out")]
    pub shards: Option<u32>,
    /// Run the client's runtime and dispatch timer threads under SCHED_FIFO at this priority
    /// (1–99; Linux, needs CAP_SYS_NICE or root). On a machine whose cores are shared with the
    /// server or other work, the kernel otherwise lets a woken dispatcher wait for another
    /// thread's time slice, milliseconds of dispatch lag that are not the client's.
    #[arg(long, value_name = "N", help_heading = "Scale-out")]
    pub realtime_priority: Option<u8>,

    // ---- output ----
    /// Save vLLM's result JSON.
    #[arg(long, help_heading = "Output")]
    pub save_result: bool,
    /// Include per-request arrays in vLLM's result JSON.
    #[arg(long, help_heading = "Output")]
    pub save_detailed: bool,
    /// Append to an existing vLLM result file.
    #[arg(long, help_heading = "Output")]
    pub append_result: bool,
    /// Directory for vLLM's result JSON [default: current directory].
    #[arg(long, help_heading = "Output")]
    pub result_dir: Option<PathBuf>,
    /// File name of vLLM's result JSON.
    #[arg(long, help_heading = "Output")]
    pub result_filename: Option<String>,
    /// KEY=VALUE pairs saved in the result JSON.
    #[arg(long, num_args = 0.., value_name = "KEY=VALUE", help_heading = "Output")]
    pub metadata: Vec<String>,
    /// Label (prefix) of the results [default: the backend].
    #[arg(long, help_heading = "Output")]
    pub label: Option<String>,
    /// No live progress.
    #[arg(long, help_heading = "Output")]
    pub disable_tqdm: bool,
    /// Live progress on stderr: a full-screen dashboard (progress and ETA, in flight,
    /// throughput and TTFT/ITL percentiles over the last seconds, failures by kind, server
    /// telemetry, rows done), one bar line, plain lines, or none. auto: the dashboard on a
    /// terminal, plain lines when piped.
    #[arg(long, value_enum, default_value = "auto", help_heading = "Output")]
    pub ui: UiArg,
    /// Also compute every statistic per time window of this many seconds (TTFT, ITL, TPOT,
    /// E2EL percentiles, throughput, in flight, failures, server telemetry): saved in the
    /// result file (`slices`) and in STEM.slices.csv, drawn over time in the HTML report.
    #[arg(long, value_name = "SECS", value_parser = servebench_metrics::units::positive_secs, help_heading = "Output")]
    pub slice_duration: Option<f64>,
    /// Run the whole measurement N times (each repeat in its own `repeat-K/` folder) and report
    /// each figure as mean ± std across runs, with the per-run values.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..), help_heading = "Output")]
    pub repeat: u32,
    /// Directory for servebench's own files (per-request JSONL, servebench JSON).
    #[arg(long, default_value = "results/runs", help_heading = "Output")]
    pub output_dir: PathBuf,

    /// Share of each random prompt taken from a pool of shared prefixes, in [0, 1): the
    /// first round(R × input len) tokens come from the request's pool member, the rest is
    /// unique. 0 makes every prompt unique from its first token. The first request of each
    /// prefix is a miss, so about R × (1 − pool / num-prompts) is achievable.
    #[arg(
        long,
        value_name = "R",
        allow_negative_numbers = true,
        help_heading = "Dataset"
    )]
    pub prefix_hit_rate: Option<f64>,
    /// Distinct shared prefixes for --prefix-hit-rate; request i uses prefix i mod N
    /// (SGLang's groups × prompts per group) [default: 1].
    #[arg(long, value_name = "N", help_heading = "Dataset")]
    pub prefix_pool: Option<usize>,
    // ---- multi-turn ----
    /// Replay conversations: each session of the sharegpt or custom dataset sends its turns
    /// one after the other, each with the whole history (earlier user turns and the answers
    /// the server returned). --request-rate counts sessions per second, --max-concurrency
    /// active sessions, --num-prompts sessions. Needs --backend openai-chat.
    #[arg(long, help_heading = "Multi-turn")]
    pub multi_turn: bool,
    /// Pause between a turn's answer and the next turn when the session gives none.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 0,
        help_heading = "Multi-turn"
    )]
    pub think_time_ms: u64,

    // ---- pooling (embeddings and rerank) ----
    /// Inputs per request of an embeddings or rerank run (vLLM's flag): --num-prompts
    /// inputs go out in requests of this many (rerank: documents per request, plus the query).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..), help_heading = "Dataset")]
    pub random_batch_size: u64,

    // ---- LoRA adapters ----
    /// LoRA adapters the server was started with (vLLM's flag): each request names one as its
    /// `model`. NAME:WEIGHT gives an adapter that share of the requests (default weight 1).
    #[arg(long, value_name = "NAME[:WEIGHT]", num_args = 1.., help_heading = "LoRA")]
    pub lora_modules: Vec<String>,
    /// How requests are spread over --lora-modules: random (vLLM's way, weighted, from
    /// --seed) or round-robin (in proportion to the weights, interleaved) [default: random].
    #[arg(long, value_enum, help_heading = "LoRA")]
    pub lora_assignment: Option<LoraAssignment>,

    // ---- TLS and HTTP/2 ----
    /// PEM file of the CA certificate(s) to trust for https:// instead of the platform's
    /// roots (which honour SSL_CERT_FILE / SSL_CERT_DIR).
    #[arg(long, value_name = "FILE", help_heading = "TLS and HTTP/2")]
    pub ca_cert: Option<PathBuf>,
    /// Skip TLS certificate verification (vLLM's --insecure); a warning says so.
    #[arg(long, help_heading = "TLS and HTTP/2")]
    pub insecure: bool,
    /// PEM client certificate (chain) for servers that ask for one (mTLS).
    #[arg(long, value_name = "FILE", help_heading = "TLS and HTTP/2")]
    pub client_cert: Option<PathBuf>,
    /// PEM private key of --client-cert.
    #[arg(long, value_name = "FILE", help_heading = "TLS and HTTP/2")]
    pub client_key: Option<PathBuf>,
    /// HTTP/2: auto = when the server offers it through ALPN (https), off = HTTP/1.1 only,
    /// on = HTTP/2 only (ALPN over https, prior knowledge over http).
    #[arg(
        long,
        value_enum,
        default_value = "auto",
        help_heading = "TLS and HTTP/2"
    )]
    pub http2: Http2Arg,
    // ---- images in chat ----
    #[command(flatten)]
    pub random_mm: super::random_mm::RandomMmArgs,
    // ---- agent sessions ----
    #[command(flatten)]
    pub agents: super::agents_plan::AgentArgs,
    // ---- GPU telemetry ----
    /// Read GPU utilization, memory, power and SM clock during the run from a DCGM exporter's
    /// Prometheus endpoint (e.g. http://node:9400/metrics) instead of `nvidia-smi` on PATH.
    #[arg(long, value_name = "URL", help_heading = "Output")]
    pub gpu_metrics_url: Option<String>,
    // ---- stopping an over-saturated run ----
    /// Stop the run as soon as it is clearly over-saturated (requests in flight and the
    /// oldest wait rising linearly without levelling off, judged every second of the
    /// schedule); the result records why and when. Off by default; `sweep --search` sets it.
    #[arg(long, help_heading = "Traffic")]
    pub stop_when_saturated: bool,
    // ---- results database ----
    #[command(flatten)]
    pub db: crate::results_index::DbFlags,
    // ---- the rest of vLLM's flags ----
    #[command(flatten)]
    pub vllm: super::vllm_extras::VllmServeFlags,
}

/// `--num-prompts`: a count, or a negative number (vLLM's `-1`) for "all of the file", kept
/// as 0.
fn num_prompts_value(s: &str) -> Result<usize, String> {
    match s.trim().parse::<i64>() {
        Ok(n) if n < 0 => Ok(0),
        Ok(n) => usize::try_from(n).map_err(|e| e.to_string()),
        Err(e) => Err(format!("{e}: expected a number of prompts")),
    }
}

/// `--lora-assignment`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LoraAssignment {
    Random,
    #[value(name = "round-robin")]
    RoundRobin,
}

/// `--http2`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Http2Arg {
    #[default]
    Auto,
    Off,
    On,
}

/// `vllm bench serve` flags that servebench does not support yet: refused with a message,
/// never silently ignored.
pub const UNSUPPORTED_VLLM_FLAGS: &[(&str, &str)] = &[
    ("--logprobs", "logprobs in requests"),
    ("--use-beam-search", "beam search"),
    (
        "--tokenizer-mode",
        "tokenizer modes other than HuggingFace tokenizer.json",
    ),
    ("--request-id-prefix", "request ids"),
    ("--skip-tokenizer-init", "running without a tokenizer"),
    ("--chat-template-kwargs", "client-side chat templates"),
    ("--no-reranker", "rerank requests to an embedding model"),
];

/// Refuse `vllm bench serve` flags we do not implement, with a clear reason.
pub fn check_unsupported(args: &[String]) -> Result<(), String> {
    for a in args {
        let name = a.split('=').next().unwrap_or(a);
        if let Some((flag, what)) = UNSUPPORTED_VLLM_FLAGS.iter().find(|(f, _)| *f == name) {
            return Err(format!(
                "{flag} is a `vllm bench serve` flag that servebench does not support yet ({what}); remove it to run"
            ));
        }
    }
    Ok(())
}

// The user's flags of rows and points are read as `servebench run` reads its command line:
// vLLM's argument rules (crate::vllm_argv), the last of a repeated flag, the ignored vLLM
// flags accepted.
#[derive(Debug, clap::Parser)]
#[command(no_binary_name = true, args_override_self = true)]
struct RunArgsOnly {
    #[command(flatten)]
    args: RunArgs,
    #[command(flatten)]
    _engine_only: crate::vllm_argv::EngineOnlyFlags,
}

impl RunArgs {
    /// What clap read from `flags` (after vLLM's argument rules and refusing unsupported vLLM
    /// flags), and the warning for a flag given twice.
    fn vllm_matches<S: AsRef<str>>(
        flags: &[S],
    ) -> Result<(clap::ArgMatches, Option<String>), String> {
        let cmd = <RunArgsOnly as clap::CommandFactory>::command();
        let refused: Vec<&str> = UNSUPPORTED_VLLM_FLAGS.iter().map(|(f, _)| *f).collect();
        let words = crate::vllm_argv::FlagSpec::of(&cmd)
            .with_refused(&refused)
            .normalise(flags)
            .map_err(|e| e.to_string())?;
        let flags = words.args();
        check_unsupported(&flags)?;
        let m = cmd
            .try_get_matches_from(&flags)
            .map_err(|e| e.to_string())?;
        Ok((m, words.duplicate_warning()))
    }

    /// What clap read from `flags` (after vLLM's argument rules and refusing unsupported vLLM
    /// flags).
    pub(crate) fn matches<S: AsRef<str>>(flags: &[S]) -> Result<clap::ArgMatches, String> {
        RunArgs::vllm_matches(flags).map(|(m, _)| m)
    }

    /// Parse `servebench run` flags from a list (the user's own flags of matrix rows and sweep
    /// points). Unsupported vLLM flags are refused as on the command line, and a repeated
    /// flag is warned about as there.
    pub fn from_flags<S: AsRef<str>>(flags: &[S]) -> Result<RunArgs, String> {
        let (m, warning) = RunArgs::vllm_matches(flags)?;
        if let Some(w) = warning {
            eprintln!("{w}");
        }
        <RunArgsOnly as clap::FromArgMatches>::from_arg_matches(&m)
            .map(|w| w.args)
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn from_flags_takes_vllm_defaults_and_refuses_unsupported() {
        let a = RunArgs::from_flags(&["--num-prompts", "7", "--request-rate", "2.5"]).unwrap();
        assert_eq!(a.num_prompts, 7);
        assert_eq!(a.request_rate, 2.5);
        assert_eq!(a.random_input_len, 1024);
        assert_eq!(a.metric_percentiles, "99");
        let inf = RunArgs::from_flags::<&str>(&[]).unwrap();
        assert!(inf.request_rate.is_infinite());
        let err = RunArgs::from_flags(&["--use-beam-search"]).unwrap_err();
        assert!(err.contains("does not support yet"), "{err}");
        // A row's flags take vLLM's argument rules (issue 28).
        let a = RunArgs::from_flags(&[
            "--num_prompts",
            "3",
            "--num-prompt=4",
            "--trust-remote-code",
        ])
        .unwrap();
        assert_eq!(a.num_prompts, 4);
    }
}
