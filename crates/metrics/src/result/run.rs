//! A run's `*.servebench.json`.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::{ServerTelemetry, SimConfig, RESULT_SCHEMA};
use crate::validity::RunValidity;
use crate::RunSummary;

/// servebench's own result file (`*.servebench.json`, schema [`RESULT_SCHEMA`]).
///
/// Only `summary` is required when reading, so results written by hand (or by older
/// versions) with fewer sections still load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// Always [`RESULT_SCHEMA`] when written.
    #[serde(default)]
    pub schema: String,
    /// The client version that measured.
    #[serde(default)]
    pub servebench_version: String,
    /// Whether the target was servebench's simulated engine.
    #[serde(default)]
    pub simulated: bool,
    /// Who measured what, when.
    #[serde(default)]
    pub metadata: RunMetadata,
    /// The workload as planned.
    #[serde(default)]
    pub plan: Option<PlanSection>,
    /// The measured figures.
    pub summary: RunSummary,
    /// Whether the client kept up.
    #[serde(default)]
    pub client_health: Option<ClientHealth>,
    /// What the server's `/metrics` said during the run (`null` when not scraped).
    #[serde(default)]
    pub server_telemetry: Option<ServerTelemetry>,
    /// The per-request records file, relative to this file.
    #[serde(default)]
    pub records_path: Option<String>,
    /// The validity verdict, offered against achieved load and the warm-up found (absent
    /// from results written before verdicts existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validity: Option<RunValidity>,
    /// Measuring stopped before the schedule ended, or the result was rebuilt from the
    /// records alone (absent otherwise).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// Why, when `interrupted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted_reason: Option<String>,
    /// `--prefix-hit-rate` runs: the target beside the achievable and achieved hit rates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_hit: Option<super::PrefixHitCheck>,
    /// A multi-turn run's figures by turn index (absent for runs without sessions).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_turn: Vec<crate::turns::TurnStats>,
    /// A run over LoRA adapters (`--lora-modules`): its figures by adapter.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_lora: Vec<crate::lora::LoraStats>,
    /// GPU utilization, memory, power and SM clock over the run (`nvidia-smi` or a DCGM
    /// exporter), or the note that there was no source; absent in virtual time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_telemetry: Option<super::GpuTelemetry>,
    /// The run stopped itself before its schedule ended (`--stop-when-saturated`): why, and
    /// when (absent for a run that went to the end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_early: Option<StoppedEarly>,
    /// An agent run (`--dataset-name agentic`): per-session figures, the by-depth table and
    /// every agent as it ran (absent for other runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<crate::sessions_metrics::AgentStats>,
    /// Every statistic per time window (`--slice-duration`); absent when not asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slices: Option<crate::slices::Slices>,
}

/// Why and when a run stopped itself before the end of its schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoppedEarly {
    /// One sentence.
    pub reason: String,
    /// Seconds into the schedule (from its first intended send) when it stopped.
    pub at_s: f64,
    /// Seconds the whole schedule spans.
    pub span_s: f64,
}

impl StoppedEarly {
    /// "stopped early: REASON at X s of Y s".
    pub fn describe(&self) -> String {
        format!(
            "stopped early: {} at {:.1} s of {:.1} s",
            self.reason, self.at_s, self.span_s
        )
    }
}

impl RunResult {
    /// Whether the file says it is a result of another schema (an absent schema is accepted).
    pub fn schema_mismatch(&self) -> Option<&str> {
        (!self.schema.is_empty() && self.schema != RESULT_SCHEMA).then_some(self.schema.as_str())
    }
}

/// The `metadata` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunMetadata {
    /// Local start time (`%Y%m%d-%H%M%S`).
    pub date: String,
    /// The command line, API keys masked.
    pub command_line: Vec<String>,
    /// `--backend`.
    pub backend: String,
    /// `--label`.
    pub label: Option<String>,
    /// The model id requested.
    pub model_id: String,
    /// The tokenizer counting tokens.
    pub tokenizer: String,
    /// `--seed`.
    pub seed: u64,
    /// The client host's name.
    pub host: String,
    /// `--metadata KEY=VALUE` pairs.
    pub user_metadata: BTreeMap<String, String>,
    /// What was measured.
    pub target: TargetInfo,
    /// Where the run's time zero sits on the wall clock (absent in virtual time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_anchor: Option<ClockAnchor>,
    /// The share of a split schedule this run sent (`--shard I/N`), or the shards a merged
    /// result was computed from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardInfo>,
}

/// `metadata.clock_anchor`: records hold ns offsets from the run's time zero on a monotonic
/// clock; the anchor places that zero on the wall clock, so records line up with server logs
/// and with the other shards of a split run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClockAnchor {
    /// Wall-clock time of the run's time zero, ns since the Unix epoch.
    pub unix_ns: u64,
    /// Which clocks: the offsets' and the anchor's.
    pub source: String,
    /// The time zero was fixed in advance (`--start-at`), as the instant given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_at: Option<String>,
}

/// `metadata.shard`: which share of one schedule a run sent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ShardInfo {
    /// This shard's index, `0..count` (absent in a merged result).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// How many shards split the schedule.
    pub count: u32,
    /// Hash of the whole (unsharded) schedule: every shard of one run has the same.
    pub plan_hash: String,
    /// Requests in the whole schedule.
    pub schedule_requests: u64,
    /// A merged result: the spread of the shards' clock anchors (max − min), in ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anchor_spread_ms: Option<f64>,
    /// A merged result: each shard's dispatch lag p99 in ms, by index.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dispatch_lag_p99_ms: Vec<Option<f64>>,
    /// A merged result: warnings about the merge (clock spread above the threshold).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// `metadata.target`: the server measured, or servebench's simulator.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TargetInfo {
    /// `server` or `simulator`.
    pub kind: String,
    /// A simulator's clock: `real` or `virtual`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock: Option<String>,
    /// A simulator's `--sim` spec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sim_spec: Option<String>,
    /// A simulator's configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sim_config: Option<SimConfig>,
    /// An external server's base URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The server's `/version` answer; the key is absent where no server was asked (virtual
    /// time), `null` where it did not answer.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_or_null"
    )]
    pub server_version: Option<Option<ServerReply>>,
    /// The server's `/v1/models` answer, like `server_version`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_or_null"
    )]
    pub server_models: Option<Option<ServerReply>>,
}

impl TargetInfo {
    /// An external server at `base_url`.
    pub fn server(base_url: &str) -> Self {
        TargetInfo {
            kind: "server".into(),
            base_url: Some(base_url.to_owned()),
            ..TargetInfo::default()
        }
    }

    /// servebench's simulator on a `real` or `virtual` clock.
    pub fn simulator(clock: &str, spec: &str, config: SimConfig) -> Self {
        TargetInfo {
            kind: "simulator".into(),
            clock: Some(clock.to_owned()),
            sim_spec: Some(spec.to_owned()),
            sim_config: Some(config),
            ..TargetInfo::default()
        }
    }

    /// Whether the target was servebench's simulated engine.
    pub fn is_simulator(&self) -> bool {
        self.kind.starts_with("sim")
    }

    /// The server's own version string (`/version`), else the simulator's.
    pub fn server_version_text(&self) -> Option<&str> {
        self.server_version
            .as_ref()
            .and_then(Option::as_ref)
            .and_then(ServerReply::version)
            .or_else(|| self.sim_config.as_ref()?.version.as_deref())
    }

    /// The first model id the server listed.
    pub fn first_served_model(&self) -> Option<&str> {
        self.server_models
            .as_ref()?
            .as_ref()?
            .0
            .get("data")?
            .get(0)?
            .get("id")?
            .as_str()
    }
}

fn present_or_null<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// A server's answer recorded verbatim: its shape is the server's (vLLM, SGLang, TGI and
/// llama.cpp differ), so it is kept as the server sent it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ServerReply(pub Value);

impl ServerReply {
    /// A `/version` answer's version: `{"version": "…"}` or a bare string.
    pub fn version(&self) -> Option<&str> {
        self.0
            .get("version")
            .and_then(Value::as_str)
            .or_else(|| self.0.as_str())
    }
}

/// The `plan` section: the workload as the command asked for it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PlanSection {
    /// `random`, `sharegpt`, ...
    pub dataset_name: String,
    pub dataset_path: Option<String>,
    pub num_prompts: u64,
    /// Offered request rate as vLLM prints it (`"4.0"`, `"inf"`).
    pub request_rate: RequestRate,
    pub burstiness: f64,
    pub max_concurrency: Option<u64>,
    /// `(strategy, start qps, end qps)`.
    pub ramp_up: Option<(String, u64, u64)>,
    /// `--duration`, seconds.
    pub duration_s: Option<f64>,
    pub random_input_len: u64,
    pub random_output_len: u64,
    pub random_range_ratio: f64,
    pub random_prefix_len: u64,
    /// `shared` or `per-request`.
    pub random_prefix_mode: String,
    pub num_warmups: u64,
    pub percentile_metrics: Vec<String>,
    pub metric_percentiles: Vec<f64>,
    /// Goodput SLOs as `metric:ms`.
    pub goodput: Vec<String>,
}

impl PlanSection {
    /// Prompt tokens every request shares: 0 with no prefix or a prefix per request.
    pub fn shared_prefix_tokens(&self) -> u64 {
        if self.random_prefix_mode.replace('_', "-") == "per-request" {
            0
        } else {
            self.random_prefix_len
        }
    }
}

/// A request rate written the way vLLM prints it (`"4.0"`, `"inf"`); a number is accepted
/// when reading.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct RequestRate(pub String);

impl<'de> Deserialize<'de> for RequestRate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        rate_text(d).map(RequestRate)
    }
}

impl RequestRate {
    /// Requests per second; infinite when unlimited.
    pub fn per_second(&self) -> Option<f64> {
        let s = self.0.trim();
        if s.eq_ignore_ascii_case("inf") {
            Some(f64::INFINITY)
        } else {
            s.parse().ok()
        }
    }
}

fn rate_text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Rate {
        Text(String),
        Number(f64),
    }
    Ok(match Option::<Rate>::deserialize(d)? {
        Some(Rate::Text(s)) => s,
        Some(Rate::Number(v)) => v.to_string(),
        None => String::new(),
    })
}

/// `client_health`: whether the client kept up with the schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ClientHealth {
    /// A virtual-time run: no client to saturate.
    Virtual {
        /// Always true.
        virtual_time: bool,
    },
    /// A real run's measurements.
    Measured(MeasuredHealth),
}

impl ClientHealth {
    /// The health of a virtual-time run.
    pub fn virtual_time() -> Self {
        ClientHealth::Virtual { virtual_time: true }
    }

    /// A real run's figures, `None` in virtual time.
    pub fn measured(&self) -> Option<&MeasuredHealth> {
        match self {
            ClientHealth::Measured(m) => Some(m),
            ClientHealth::Virtual { .. } => None,
        }
    }
}

/// Client health of a real run: dispatch lag, CPU, and whether the client limited the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MeasuredHealth {
    /// Median lag between intended and actual send, ms.
    pub dispatch_lag_p50_ms: Option<f64>,
    /// p99 of that lag, ms.
    pub dispatch_lag_p99_ms: Option<f64>,
    /// Largest lag, ms.
    pub dispatch_lag_max_ms: Option<f64>,
    /// Client CPU time in user mode, s.
    pub cpu_user_s: f64,
    /// Client CPU time in kernel mode, s.
    pub cpu_system_s: f64,
    /// CPU use over the run's wall time (100 = one core).
    pub cpu_percent: f64,
    /// Cores available to the client.
    pub cpus: u64,
    /// The client, not the server, set the pace.
    pub client_limited: bool,
    /// Arrivals never sent (the run ended first).
    pub not_dispatched: u64,
    /// Requests sent a second time because the first send went out on a reused connection
    /// the server had closed unread (absent when none).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub resent: u64,
    /// The machine's one-minute load average when the run ended (`/proc/loadavg`): late
    /// dispatch with little client CPU means other work held the cores. Absent where the
    /// platform has none and in files written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_average: Option<f64>,
}

impl MeasuredHealth {
    /// Did the client's own CPU use fill the cores it had (rather than others' work)?
    pub fn cpu_saturated(&self) -> bool {
        self.cpu_percent > 90.0 * self.cpus.max(1) as f64
    }
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}
