//! The simulator's command-line surface (docs/simulator.md §9), with vLLM's flag names where vLLM
//! has the concept. `servebench sim …` flattens [`SimArgs`] into its subcommand, and
//! `servebench run --sim SPEC` parses SPEC with [`SimArgs::parse_spec`], so both use one syntax.

use std::path::PathBuf;

use clap::{Args, Parser};
use servebench_roofline::{Dtype, KvDtype};

use crate::SimError;

/// Every flag of `servebench sim` (docs/simulator.md §9). Optional values left unset take the
/// defaults of the GPU, the model or vLLM (docs/simulator.md §2.5) when resolved.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct SimArgs {
    /// Model preset (catalog id or Hugging Face name), as in `vllm serve MODEL`.
    #[arg(value_name = "MODEL", default_value = "llama-3.1-8b")]
    pub model: String,

    /// GPU preset (catalog id or alias).
    #[arg(long, value_name = "ID", default_value = "h100")]
    pub gpu: String,

    /// Tensor-parallel degree: divides weights, FLOPs and KV heads, adds all-reduces.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub tensor_parallel_size: u32,

    /// Weights and activations data type: bf16 or fp8 (vLLM's `--quantization fp8` is accepted).
    #[arg(
        long,
        alias = "quantization",
        value_name = "DTYPE",
        default_value = "bf16"
    )]
    pub dtype: Dtype,

    /// KV-cache data type: auto (2 bytes) or fp8.
    #[arg(long, value_name = "DTYPE", default_value = "auto")]
    pub kv_cache_dtype: KvDtype,

    /// Maximum number of running sequences (default by GPU class).
    #[arg(long, value_name = "N")]
    pub max_num_seqs: Option<u32>,

    /// Token budget of one engine step (default by GPU class).
    #[arg(long, value_name = "N")]
    pub max_num_batched_tokens: Option<u32>,

    /// Fraction of GPU memory the engine may use.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.9)]
    pub gpu_memory_utilization: f64,

    /// Tokens per KV block.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub block_size: u32,

    /// Maximum prompt + output length (default: the model's max_position_embeddings). `auto`
    /// (or `-1`) takes the model's length if one such request fits the KV cache, else the
    /// largest length that does, as vLLM's `--max-model-len auto`.
    #[arg(long, value_name = "N|auto", allow_hyphen_values = true)]
    pub max_model_len: Option<MaxModelLen>,

    /// Use this many KV blocks instead of sizing the cache from memory.
    #[arg(long, value_name = "N")]
    pub num_gpu_blocks_override: Option<u32>,

    /// Enable automatic prefix caching (the default).
    #[arg(long, overrides_with = "no_enable_prefix_caching")]
    pub enable_prefix_caching: bool,

    /// Disable automatic prefix caching.
    #[arg(long, overrides_with = "enable_prefix_caching")]
    pub no_enable_prefix_caching: bool,

    /// Enable chunked prefill (the default).
    #[arg(long, overrides_with = "no_enable_chunked_prefill")]
    pub enable_chunked_prefill: bool,

    /// Disable chunked prefill: a prompt must be scheduled whole.
    #[arg(long, overrides_with = "enable_chunked_prefill")]
    pub no_enable_chunked_prefill: bool,

    /// Cap on one request's prefill tokens per step (0 = off).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub long_prefill_token_threshold: u32,

    /// Model FLOPs utilisation at BF16 (default per GPU).
    #[arg(long, value_name = "FRACTION")]
    pub mfu: Option<f64>,

    /// Model FLOPs utilisation at FP8 (default per GPU, else 0.7 × the BF16 one).
    #[arg(long, value_name = "FRACTION")]
    pub mfu_fp8: Option<f64>,

    /// Memory-bandwidth utilisation (default per GPU).
    #[arg(long, value_name = "FRACTION")]
    pub mbu: Option<f64>,

    /// Exponent of the soft roofline combining compute and memory time (default 1.5).
    #[arg(long, value_name = "P")]
    pub softroof_p: Option<f64>,

    /// Fixed per-step overhead in µs (default 126).
    #[arg(long, value_name = "US")]
    pub step_overhead_us: Option<f64>,

    /// Per-layer launch overhead in µs (default 32).
    #[arg(long, value_name = "US")]
    pub layer_overhead_us: Option<f64>,

    /// Per-planned-request overhead in µs (default 4).
    #[arg(long, value_name = "US")]
    pub req_overhead_us: Option<f64>,

    /// Minimum per-step CPU time in µs (default 2500 for models under 2 B parameters, else 0).
    #[arg(long, value_name = "US")]
    pub cpu_floor_us: Option<f64>,

    /// Latency of one all-reduce in µs (default 5).
    #[arg(long, value_name = "US")]
    pub allreduce_latency_us: Option<f64>,

    /// Effective all-reduce bandwidth in GB/s (default from the catalog).
    #[arg(long, value_name = "GBPS")]
    pub link_gbps: Option<f64>,

    /// Overlap CPU scheduling with GPU work.
    #[arg(long)]
    pub async_scheduling: bool,

    /// Fraction of KV blocks kept free when admitting (0 = off, as in vLLM).
    #[arg(long, value_name = "FRACTION", default_value_t = 0.0)]
    pub kv_watermark: f64,

    /// Admit a request only if its prompt plus max_tokens fit the free KV blocks.
    #[arg(long)]
    pub full_sequence_must_fit: bool,

    /// A TOML catalog whose entries add to or override the built-in ones.
    #[arg(long, value_name = "FILE")]
    pub catalog: Option<PathBuf>,

    /// A Hugging Face config.json describing the model.
    #[arg(long, alias = "model-config", value_name = "FILE")]
    pub hf_config: Option<PathBuf>,

    /// A custom GPU: bf16_tflops,fp8_tflops,tb_per_s,usable_gib.
    #[arg(long, value_name = "SPEC")]
    pub gpu_spec: Option<String>,

    /// Override the GPU's usable memory in GiB.
    #[arg(long, value_name = "GIB")]
    pub gpu_memory_gib: Option<f64>,

    /// Seed of every random stream (jitter, output lengths, faults).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: u64,

    /// Log-normal step-time jitter σ (0 = exact step times).
    #[arg(long, alias = "jitter", value_name = "SIGMA", default_value_t = 0.02)]
    pub jitter_sigma: f64,

    /// Probability that a step suffers a hiccup.
    #[arg(long, value_name = "P", default_value_t = 0.0)]
    pub hiccup_prob: f64,

    /// Duration a hiccup adds to a step, in ms.
    #[arg(long, value_name = "MS", default_value_t = 5.0)]
    pub hiccup_ms: f64,

    /// Median natural output length in tokens (0 disables natural stops).
    #[arg(long, value_name = "TOKENS", default_value_t = 200.0)]
    pub eos_len_median: f64,

    /// Log-normal σ of the natural output length.
    #[arg(long, value_name = "SIGMA", default_value_t = 0.8)]
    pub eos_len_sigma: f64,

    /// A Hugging Face tokenizer.json to count prompt tokens with (default: built-in).
    #[arg(long, value_name = "PATH")]
    pub tokenizer: Option<PathBuf>,

    /// Divide every duration by this factor (demos).
    #[arg(long, value_name = "K", default_value_t = 1.0)]
    pub time_scale: f64,

    /// Sleep to 1.5 ms before each step end, then yield until it (tens of µs of error).
    #[arg(long)]
    pub precise_timing: bool,

    /// Re-anchor the engine timeline when it falls this far behind, in ms.
    #[arg(long, value_name = "MS", default_value_t = 20.0, value_parser = servebench_metrics::units::non_negative_ms)]
    pub max_lag_ms: f64,

    /// Address to listen on.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    pub host: String,

    /// Port to listen on.
    #[arg(long, value_name = "PORT", default_value_t = 8000)]
    pub port: u16,

    /// Largest request body accepted, in bytes; a larger one is refused with 413.
    #[arg(long, value_name = "BYTES", default_value_t = 8 * 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Seconds a connection may take to send a request head, counted from when it connects or
    /// finished its previous response (so it also closes idle keep-alive connections).
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub header_timeout_secs: f64,

    /// Seconds a request body may take to arrive in full, counted from the end of its head; a
    /// slower body is answered 408 and its connection closed, so clients trickling bodies
    /// cannot hold every connection slot.
    #[arg(long, value_name = "SECS", default_value_t = 30.0, value_parser = servebench_metrics::units::positive_secs)]
    pub body_timeout_secs: f64,

    /// Connections served at once; one more is answered 503 and closed.
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub max_connections: usize,

    /// Model name(s) served by the API; the first is reported, all are accepted.
    #[arg(long, value_name = "NAME", num_args = 1..)]
    pub served_model_name: Vec<String>,

    /// Report cached prompt tokens in usage.prompt_tokens_details (the default).
    #[arg(long, overrides_with = "no_enable_prompt_tokens_details")]
    pub enable_prompt_tokens_details: bool,

    /// Leave prompt_tokens_details out of usage.
    #[arg(long, overrides_with = "enable_prompt_tokens_details")]
    pub no_enable_prompt_tokens_details: bool,

    /// Also export vLLM's deprecated metric names.
    #[arg(long)]
    pub metrics_compat: bool,

    /// Fraction of requests rejected at once with --fault-error-status.
    #[arg(long, value_name = "P", default_value_t = 0.0)]
    pub fault_error_rate: f64,

    /// HTTP status of injected errors.
    #[arg(long, value_name = "STATUS", default_value_t = 500)]
    pub fault_error_status: u16,

    /// Per streamed chunk: probability the handler holds it (and all later ones).
    #[arg(long, value_name = "P", default_value_t = 0.0)]
    pub fault_stall_prob: f64,

    /// Duration of an injected stall, in ms.
    #[arg(long, value_name = "MS", default_value_t = 2000.0, value_parser = servebench_metrics::units::non_negative_ms)]
    pub fault_stall_ms: f64,

    /// Per request: probability the stream is closed after a random token, without `[DONE]`.
    #[arg(long, value_name = "P", default_value_t = 0.0)]
    pub fault_disconnect_prob: f64,

    /// Per request: probability one chunk is sent as truncated JSON.
    #[arg(long, value_name = "P", default_value_t = 0.0)]
    pub fault_malformed_prob: f64,

    /// Act as a reasoning model: the first N output tokens of each chat response are sent as
    /// `reasoning_content` (as vLLM with a reasoning parser), then `content`; usage reports
    /// them in `completion_tokens_details.reasoning_tokens`. Completions are unchanged.
    #[arg(long, value_name = "N", conflicts_with = "reasoning_fraction")]
    pub reasoning_tokens: Option<u32>,

    /// Like --reasoning-tokens, as a share (0 to 1) of each chat response's output tokens.
    #[arg(long, value_name = "F")]
    pub reasoning_fraction: Option<f64>,

    /// Imitate this serving engine's scheduling defaults: vllm (V1, with its CUDA-graph batch
    /// padding), sglang or trtllm (no chunked prefill, whole-sequence admission, 32-token
    /// blocks). Unset: vLLM V1 scheduling without graph padding. Explicit flags still win.
    #[arg(long, value_name = "ENGINE")]
    pub engine: Option<crate::engine_profile::EngineKind>,

    /// Bandwidth utilisation of KV-cache reads by the attention kernels (default: the GPU's
    /// `mbu_kv`, else --mbu).
    #[arg(long, value_name = "FRACTION")]
    pub mbu_kv: Option<f64>,
    /// Run without CUDA graphs, as vLLM's flag does: decode batches are not padded up to a
    /// captured size (an engine profile's graph list is ignored). TensorRT-LLM's C++ engines
    /// (before its PyTorch backend) run so unless CUDA graphs are turned on.
    #[arg(long)]
    pub enforce_eager: bool,
    /// Size the KV cache as TensorRT-LLM does: this fraction of the memory still free after
    /// weights and activation buffers (its `free_gpu_memory_fraction`, `trtllm-bench
    /// --kv_cache_free_gpu_mem_fraction`), instead of --gpu-memory-utilization of the whole GPU.
    /// Default with --engine trtllm: 0.9 (TensorRT-LLM's default).
    #[arg(long, value_name = "FRACTION")]
    pub kv_cache_free_gpu_mem_fraction: Option<f64>,
    /// LoRA adapters served beside the base model (vLLM's flag; `NAME` or `NAME=PATH`, the
    /// path unused): /v1/models lists them and a request may name one as its `model`.
    #[arg(long, value_name = "NAME[=PATH]", num_args = 1.., help_heading = "LoRA")]
    pub lora_modules: Vec<String>,
    /// Distinct adapters in one batch, and adapters resident on the GPU (vLLM's flag).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..), help_heading = "LoRA")]
    pub max_loras: u32,
    /// The rank every adapter is charged for (vLLM's flag): each of its tokens costs about
    /// 2·rank/hidden_size more compute.
    #[arg(long, value_name = "R", default_value_t = 16, help_heading = "LoRA")]
    pub max_lora_rank: u32,
    /// Time to load an adapter that is not resident into a GPU slot.
    #[arg(long, value_name = "MS", default_value_t = 20.0, help_heading = "LoRA")]
    pub lora_load_ms: f64,
    /// Fleet flags: replicas, pools, router, routes, rate limit, prefill/decode split.
    #[command(flatten)]
    pub fleet: crate::fleet::FleetArgs,
    /// Serve https with this PEM certificate chain (needs --tls-key); HTTP/2 and HTTP/1.1
    /// are offered by ALPN.
    #[arg(long, value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE")]
    pub tls_key: Option<PathBuf>,

    /// On plain http, also serve HTTP/2 with prior knowledge (h2c) beside HTTP/1.1.
    #[arg(long)]
    pub h2c: bool,
    /// A calibration profile (`servebench sim calibrate`): fitted efficiencies and overheads
    /// for this model, GPU, tensor-parallel size and dtype; explicit --mfu/--mbu/…-us flags
    /// still win. A profile for another deployment is refused.
    #[arg(long, value_name = "FILE")]
    pub calibration: Option<PathBuf>,
    /// Replacements for the factors `--engine`'s profile carries that were fitted on published
    /// figures. Not a flag: only the fidelity check's held-out runs set it, to predict a
    /// source with the values it would have had without that source (docs/simulator.md §12.3).
    #[arg(skip)]
    pub profile_factors: crate::engine_profile::ProfileFactors,
}

/// `--max-model-len`: a length in tokens, or `auto` to fit the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxModelLen {
    Tokens(u32),
    /// The model's length if it fits the KV cache, else the largest that does.
    Auto,
}

impl std::str::FromStr for MaxModelLen {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        // vLLM spells auto-fit both ways: `--max-model-len auto` writes -1 into its config.
        if s.eq_ignore_ascii_case("auto") || s == "-1" {
            return Ok(MaxModelLen::Auto);
        }
        s.parse::<u32>()
            .map(MaxModelLen::Tokens)
            .map_err(|_| format!("expected a number of tokens or 'auto' (or -1), got '{s}'"))
    }
}

impl std::fmt::Display for MaxModelLen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MaxModelLen::Tokens(n) => write!(f, "{n}"),
            MaxModelLen::Auto => f.write_str("auto"),
        }
    }
}

/// A stand-alone parser for a `--sim SPEC` string: the same flags as `servebench sim`.
#[derive(Debug, Parser)]
#[command(name = "sim", no_binary_name = true, disable_version_flag = true)]
struct SpecParser {
    #[command(flatten)]
    args: SimArgs,
}

impl Default for SimArgs {
    /// The configuration of a bare `servebench sim`.
    fn default() -> Self {
        SpecParser::parse_from(std::iter::empty::<String>()).args
    }
}

impl SimArgs {
    /// Parses a whole `servebench sim` argument string, e.g.
    /// `"llama-3.1-70b --gpu h100 --dtype fp8 --tensor-parallel-size 2"`. Words split as a
    /// POSIX shell would (single and double quotes, backslash escapes), without expansion.
    pub fn parse_spec(spec: &str) -> Result<SimArgs, SimError> {
        let words = split_shell_words(spec)?;
        SpecParser::try_parse_from(words)
            .map(|p| p.args)
            .map_err(|e| {
                SimError::Config(format!(
                    "in simulator spec '{spec}': {}",
                    e.render().to_string().trim_end()
                ))
            })
    }

    /// Whether prefix caching is on (`--no-enable-prefix-caching` turns it off).
    pub fn prefix_caching(&self) -> bool {
        !self.no_enable_prefix_caching
    }

    /// Whether chunked prefill is on (`--no-enable-chunked-prefill` turns it off).
    pub fn chunked_prefill(&self) -> bool {
        !self.no_enable_chunked_prefill
    }

    /// The reasoning split of chat responses, if the simulator acts as a reasoning model.
    pub fn reasoning(&self) -> Option<crate::reasoning::ReasoningSplit> {
        use crate::reasoning::ReasoningSplit;
        match (self.reasoning_tokens, self.reasoning_fraction) {
            (Some(n), _) => Some(ReasoningSplit::Tokens(n)),
            (None, Some(f)) => Some(ReasoningSplit::Fraction(f)),
            (None, None) => None,
        }
    }

    /// Whether usage reports `prompt_tokens_details` (on unless disabled).
    pub fn prompt_tokens_details(&self) -> bool {
        !self.no_enable_prompt_tokens_details
    }
}

/// Splits a command line into words like a POSIX shell: whitespace separates words, single
/// quotes keep everything literally, double quotes allow `\"`, `\\`, `\$` and `` \` ``
/// escapes, and an unquoted backslash escapes the next character.
pub fn split_shell_words(line: &str) -> Result<Vec<String>, SimError> {
    let mut words = Vec::new();
    let mut word = String::new();
    // A word exists once any character or quote pair was seen, so `''` yields an empty word.
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(ch) => word.push(ch),
                        None => return Err(unterminated(line, '\'')),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(ch @ ('"' | '\\' | '$' | '`')) => word.push(ch),
                            Some(ch) => {
                                word.push('\\');
                                word.push(ch);
                            }
                            None => return Err(unterminated(line, '"')),
                        },
                        Some(ch) => word.push(ch),
                        None => return Err(unterminated(line, '"')),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(ch) => word.push(ch),
                    None => {
                        return Err(SimError::Config(format!(
                            "simulator spec '{line}' ends with a lone backslash"
                        )))
                    }
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

fn unterminated(line: &str, quote: char) -> SimError {
    SimError::Config(format!(
        "simulator spec '{line}' has an unterminated {quote} quote"
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_spec_table() {
        let a = SimArgs::default();
        assert_eq!(a.model, "llama-3.1-8b");
        assert_eq!(a.gpu, "h100");
        assert_eq!(a.tensor_parallel_size, 1);
        assert_eq!(a.dtype, Dtype::Bf16);
        assert_eq!(a.kv_cache_dtype, KvDtype::Auto);
        assert_eq!(a.gpu_memory_utilization, 0.9);
        assert_eq!(a.block_size, 16);
        assert!(a.prefix_caching() && a.chunked_prefill() && a.prompt_tokens_details());
        assert_eq!(a.jitter_sigma, 0.02);
        assert_eq!(a.hiccup_ms, 5.0);
        assert_eq!(a.eos_len_median, 200.0);
        assert_eq!(a.eos_len_sigma, 0.8);
        assert_eq!(a.time_scale, 1.0);
        assert_eq!(a.max_lag_ms, 20.0);
        assert_eq!((a.host.as_str(), a.port), ("127.0.0.1", 8000));
        assert_eq!(a.fault_error_status, 500);
        assert_eq!(a.fault_stall_ms, 2000.0);
        assert!(a.max_num_seqs.is_none() && a.max_model_len.is_none());
        assert!(a.served_model_name.is_empty());
    }

    #[test]
    fn max_model_len_takes_tokens_auto_or_minus_one() {
        let len = |spec: &str| SimArgs::parse_spec(spec).map(|a| a.max_model_len);
        assert_eq!(
            len("--max-model-len 4096").unwrap(),
            Some(MaxModelLen::Tokens(4096))
        );
        assert_eq!(
            len("--max-model-len auto").unwrap(),
            Some(MaxModelLen::Auto)
        );
        assert_eq!(len("--max-model-len -1").unwrap(), Some(MaxModelLen::Auto));
        let err = len("--max-model-len lots").unwrap_err().to_string();
        assert!(err.contains("'auto'"), "{err}");
    }

    #[test]
    fn dtypes_parse_into_the_roofline_types_with_their_spellings_and_messages() {
        let a = SimArgs::parse_spec("--dtype bfloat16 --kv-cache-dtype fp8_e5m2").unwrap();
        assert_eq!((a.dtype, a.kv_cache_dtype), (Dtype::Bf16, KvDtype::Fp8));
        let a = SimArgs::parse_spec("--dtype FP8 --kv-cache-dtype bf16").unwrap();
        assert_eq!((a.dtype, a.kv_cache_dtype), (Dtype::Fp8, KvDtype::Auto));
        let err = SimArgs::parse_spec("--dtype int3").unwrap_err().to_string();
        assert!(
            err.contains("unknown dtype 'int3'; expected bf16 (also 'bfloat16', 'auto') or fp8"),
            "{err}"
        );
        let err = SimArgs::parse_spec("--kv-cache-dtype int4")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown KV cache dtype 'int4'; expected auto or fp8"),
            "{err}"
        );
    }

    #[test]
    fn spec_uses_vllm_flag_names_and_aliases() {
        let a = SimArgs::parse_spec(
            "llama-3.1-70b --gpu h100 --quantization fp8 --tensor-parallel-size 2 \
             --max-num-seqs 64 --no-enable-prefix-caching --model-config /tmp/c.json --jitter 0",
        )
        .unwrap();
        assert_eq!(a.model, "llama-3.1-70b");
        assert_eq!(a.dtype, Dtype::Fp8);
        assert_eq!(a.tensor_parallel_size, 2);
        assert_eq!(a.max_num_seqs, Some(64));
        assert!(!a.prefix_caching());
        assert_eq!(a.hf_config, Some(PathBuf::from("/tmp/c.json")));
        assert_eq!(a.jitter_sigma, 0.0);
    }

    #[test]
    fn the_last_of_a_flag_pair_wins() {
        let a =
            SimArgs::parse_spec("--no-enable-chunked-prefill --enable-chunked-prefill").unwrap();
        assert!(a.chunked_prefill());
        let a =
            SimArgs::parse_spec("--enable-chunked-prefill --no-enable-chunked-prefill").unwrap();
        assert!(!a.chunked_prefill());
        let a = SimArgs::parse_spec("--no-enable-prompt-tokens-details").unwrap();
        assert!(!a.prompt_tokens_details());
    }

    #[test]
    fn quoted_words_survive_splitting() {
        let a = SimArgs::parse_spec(r#"--served-model-name "my model" --catalog '/a b/c.toml'"#)
            .unwrap();
        assert_eq!(a.served_model_name, vec!["my model".to_string()]);
        assert_eq!(a.catalog, Some(PathBuf::from("/a b/c.toml")));
    }

    #[test]
    fn shell_splitting_rules() {
        assert_eq!(split_shell_words("  a  b\tc ").unwrap(), ["a", "b", "c"]);
        assert_eq!(
            split_shell_words(r#"a\ b "c\"d" 'e\f' ''"#).unwrap(),
            ["a b", "c\"d", "e\\f", ""]
        );
        assert_eq!(split_shell_words(r#"x"y z"w"#).unwrap(), ["xy zw"]);
        assert!(split_shell_words("'open").is_err());
        assert!(split_shell_words("\"open").is_err());
        assert!(split_shell_words("trailing\\").is_err());
        assert!(split_shell_words("").unwrap().is_empty());
    }

    #[test]
    fn bad_specs_are_config_errors_naming_the_flag() {
        let err = SimArgs::parse_spec("--max-num-seqs lots")
            .unwrap_err()
            .to_string();
        assert!(err.contains("--max-num-seqs"), "{err}");
        let err = SimArgs::parse_spec("--no-such-flag")
            .unwrap_err()
            .to_string();
        assert!(err.contains("--no-such-flag"), "{err}");
    }
}
