//! The fleet flags of `servebench sim` (docs/simulator.md "Fleets"): they sit in [`SimArgs`]
//! so `servebench sim` and `--sim SPEC` accept them alike, and a pool's own spec reuses the
//! same parser.
//!
//! [`SimArgs`]: crate::SimArgs

use clap::{Args, ValueEnum};

/// How a pool spreads its requests over its replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RouterPolicy {
    /// Replicas in turn.
    #[default]
    RoundRobin,
    /// The replica with the fewest requests in flight (ties: the lowest index).
    LeastOutstanding,
    /// Equal prompt prefixes to the same replica (its prefix cache), else least-outstanding.
    PrefixAffinity,
    /// Requests of one session (the same --session-header value) to the same replica, whose
    /// prefix cache holds the session's context; without the header, least-outstanding.
    Session,
}

impl RouterPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            RouterPolicy::RoundRobin => "round-robin",
            RouterPolicy::LeastOutstanding => "least-outstanding",
            RouterPolicy::PrefixAffinity => "prefix-affinity",
            RouterPolicy::Session => "session",
        }
    }
}

/// Fleet flags. With none of them set the simulator is one engine, exactly as before.
#[derive(Debug, Clone, PartialEq, Default, Args)]
pub struct FleetArgs {
    /// Identical engines behind the one endpoint (GPUs = replicas × tensor-parallel size).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub replicas: u32,

    /// A named pool: NAME=SPEC, SPEC being this pool's own sim flags (e.g.
    /// "chat=--model llama-3.1-8b --gpu h100 --replicas 3"). Repeatable; the first is the
    /// default pool unless --default-pool names another.
    #[arg(long = "pool", value_name = "NAME=SPEC")]
    pub pools: Vec<String>,

    /// How each pool spreads requests over its replicas.
    #[arg(long, value_name = "POLICY", default_value = "round-robin")]
    pub router: RouterPolicy,

    /// Routing rule by request shape, e.g. "prompt_tokens>=4096 -> long" (fields:
    /// prompt_tokens, max_tokens; operators >=, >, <=, <, ==). Rules are tried in order;
    /// a request no rule matches goes to the default pool. Repeatable.
    #[arg(long = "route", value_name = "RULE")]
    pub routes: Vec<String>,

    /// The pool of requests no --route matches (default: the first pool).
    #[arg(long, value_name = "NAME")]
    pub default_pool: Option<String>,

    /// Admission rate limit of this pool in requests per second (token bucket); a request
    /// above it is answered 429, as a gateway does. 0 = no limit.
    #[arg(long, value_name = "RPS", default_value_t = 0.0)]
    pub rate_limit: f64,

    /// Bucket size of --rate-limit: how many requests may arrive at once.
    #[arg(long, value_name = "N", default_value_t = 1.0)]
    pub rate_limit_burst: f64,

    /// Prefill/decode disaggregation: this many prefill replicas (needs --decode-replicas).
    #[arg(long, value_name = "N", requires = "decode_replicas")]
    pub prefill_replicas: Option<u32>,

    /// Prefill/decode disaggregation: this many decode replicas (needs --prefill-replicas).
    #[arg(long, value_name = "N", requires = "prefill_replicas")]
    pub decode_replicas: Option<u32>,

    /// Bandwidth of the prefill→decode KV link per GPU, GB/s (default: the GPU's link).
    #[arg(long, value_name = "GBPS")]
    pub kv_link_gbps: Option<f64>,

    /// Fixed latency of one KV hand-off, µs.
    #[arg(long, value_name = "US", default_value_t = 20.0)]
    pub kv_link_latency_us: f64,

    /// The request header whose value names a request's session, for --router session
    /// [default: x-session-id, what `run --session-header` sends].
    #[arg(long, value_name = "NAME")]
    pub session_header: Option<String>,
}

impl FleetArgs {
    /// Whether any flag asks for more than the plain single engine.
    pub fn is_fleet(&self) -> bool {
        self.replicas != 1
            || !self.pools.is_empty()
            || self.prefill_replicas.is_some()
            || self.rate_limit != 0.0
            || !self.routes.is_empty()
    }
}
