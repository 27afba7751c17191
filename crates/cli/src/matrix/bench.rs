//! The target of a whole experiment: one server (external, or the simulator started
//! in-process once for every row, or the engine core in virtual time), and one measured run
//! against it.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};
use servebench_loadgen::{ApiKind, StopSignal, Target};
use servebench_sim::ShutdownHandle;

use crate::run::http_run::HttpTarget;
use crate::run::overrides::{Override, RunBase};
use crate::run::plan::RunPlan;
use crate::run::target::{resolve_sim, SimInfo};
use crate::run::virtual_run::VirtualTarget;
use crate::run::{execute, RunOutcome, RunTarget};

/// Where an experiment's runs go (shared by `matrix` and `sweep`).
#[derive(Debug, Clone, Default, Args)]
pub struct TargetArgs {
    /// Server base URL (e.g. http://gpu-host:8000). Without it the simulator runs in-process.
    #[arg(long, help_heading = "Target")]
    pub base_url: Option<String>,
    /// Model name; default: the server's first model.
    #[arg(long, help_heading = "Target")]
    pub model: Option<String>,
    /// API key (Bearer); also read from OPENAI_API_KEY. Never written anywhere.
    #[arg(
        long,
        env = "OPENAI_API_KEY",
        hide_env_values = true,
        help_heading = "Target"
    )]
    pub api_key: Option<String>,
    /// Simulator to start in-process when no --base-url is given (`servebench sim` arguments
    /// as one string) [default: "llama-3.1-8b --gpu h100"].
    #[arg(long, value_name = "SPEC", help_heading = "Target")]
    pub sim: Option<String>,
    /// Run the simulator's engine core in virtual time (no server, no sleeping).
    #[arg(long, help_heading = "Target")]
    pub virtual_time: bool,
    /// Tokenizer (as `servebench run --tokenizer`) [default: built-in].
    #[arg(long, help_heading = "Target")]
    pub tokenizer: Option<String>,
    #[command(flatten)]
    pub tls: super::tls_flags::TlsFlags,
}

/// The target, resolved and (for the in-process simulator) started.
pub struct Bench {
    /// What `execute` measures.
    pub target: RunTarget,
    guard: Option<ShutdownHandle>,
    /// The model id results are filed under.
    pub model: String,
    /// A directory-safe name of the hardware or server (`sim-h100`, `gpu-host-8000`).
    pub hardware: String,
    /// `servebench run` flags naming the target (recorded in each run's command line).
    pub target_flags: Vec<String>,
    api_key: Option<String>,
    /// The environment: target kind and clock, server answers, simulator config.
    pub environment: Value,
}

impl Bench {
    /// Resolves the target; starts the simulator in-process when no server is given.
    pub async fn start(t: &TargetArgs) -> Result<Bench> {
        let mut target_flags = Vec::new();
        if let Some(m) = &t.model {
            target_flags.extend(["--model".to_owned(), m.clone()]);
        }
        if let Some(tok) = &t.tokenizer {
            target_flags.extend(["--tokenizer".to_owned(), tok.clone()]);
        }
        if let Some(url) = &t.base_url {
            if t.virtual_time {
                bail!("--virtual-time runs the simulator's engine core without a server: drop --base-url");
            }
            if t.sim.is_some() {
                bail!("--sim starts a simulator in-process; it cannot be combined with --base-url");
            }
            let url = servebench_loadgen::target::normalize_base_url(url);
            servebench_loadgen::target::parse_uri(&url)?;
            let mut probe = probe_target(&url, t.api_key.clone());
            probe.transport = t.tls.transport(&url)?;
            target_flags.extend(t.tls.run_flags());
            let timeout = Duration::from_secs(10);
            let version = servebench_loadgen::probe::get_json(&probe, "/version", timeout)
                .await
                .ok();
            let models = servebench_loadgen::probe::get_json(&probe, "/v1/models", timeout)
                .await
                .ok();
            let model = match &t.model {
                Some(m) => m.clone(),
                None => servebench_loadgen::probe::first_model(&probe, Duration::from_secs(30))
                    .await
                    .context("asking the server for its model (pass --model)")?,
            };
            let shown = servebench_loadgen::target::redact_url(&url);
            target_flags.extend(["--base-url".to_owned(), url.clone()]);
            eprintln!("Target: {shown} (model {model})");
            return Ok(Bench {
                hardware: dir_name(
                    shown
                        .trim_start_matches("http://")
                        .trim_start_matches("https://"),
                ),
                target: RunTarget::Http(HttpTarget {
                    base_url: url.clone(),
                    sim: None,
                }),
                guard: None,
                model,
                target_flags,
                api_key: t.api_key.clone(),
                environment: json!({
                    "kind": "server", "clock": "real", "base_url": shown,
                    "server_version": version, "server_models": models,
                }),
            });
        }
        if t.tls.given() {
            bail!("--ca-cert, --insecure, --client-cert, --client-key and --http2 apply to a --base-url server, not the simulator started in-process");
        }
        let (spec, resolved) = resolve_sim(t.sim.as_deref())?;
        let config = resolved.config_json.clone();
        let hardware = sim_hardware(&config);
        let model = t
            .model
            .clone()
            .unwrap_or_else(|| resolved.served_model_name.clone());
        target_flags.extend(["--sim".to_owned(), spec.clone()]);
        if t.virtual_time {
            target_flags.push("--virtual-time".to_owned());
            eprintln!("Target: simulator in virtual time ({spec})");
            return Ok(Bench {
                target: RunTarget::Virtual(VirtualTarget {
                    sim: Box::new(resolved),
                    spec: spec.clone(),
                }),
                guard: None,
                model,
                hardware,
                target_flags,
                api_key: t.api_key.clone(),
                environment: json!({
                    "kind": "simulator", "clock": "virtual", "sim_spec": spec, "sim_config": config,
                    "server_version": null, "server_models": null,
                }),
            });
        }
        let (addr, guard) = servebench_sim::spawn_in_process(resolved)
            .await
            .context("starting the in-process simulator")?;
        let url = format!("http://{addr}");
        eprintln!("Target: in-process simulator ({spec}) at {url} — pass --base-url to measure a real server");
        let probe = probe_target(&url, None);
        let timeout = Duration::from_secs(5);
        let version = servebench_loadgen::probe::get_json(&probe, "/version", timeout)
            .await
            .ok();
        let models = servebench_loadgen::probe::get_json(&probe, "/v1/models", timeout)
            .await
            .ok();
        Ok(Bench {
            target: RunTarget::Http(HttpTarget {
                base_url: url,
                sim: Some(SimInfo {
                    spec: spec.clone(),
                    config: config.clone(),
                }),
            }),
            guard: Some(guard),
            model,
            hardware,
            target_flags,
            api_key: t.api_key.clone(),
            environment: json!({
                "kind": "simulator", "clock": "real", "sim_spec": spec, "sim_config": config,
                "server_version": version, "server_models": models,
            }),
        })
    }

    /// Whether runs go to the simulator's engine core in virtual time.
    pub fn is_virtual(&self) -> bool {
        self.target.is_virtual()
    }

    /// The user's flags of a row: the target's, `common` (defaults for every row), then
    /// `row_flags` (which win over the row's own values). Parsed once.
    pub fn base(&self, common: &[String], row_flags: &[String]) -> Result<RunBase> {
        let mut flags = self.target_flags.clone();
        flags.extend(common.iter().cloned());
        RunBase::parse(&flags, row_flags)
    }

    /// The plan of one run and the command line recorded with it (API key masked; the key
    /// itself is set on the plan, never written in flags).
    pub fn plan(
        &self,
        base: &RunBase,
        workload: &[Override],
        run: &[Override],
        output_dir: &Path,
    ) -> Result<(RunPlan, Vec<String>)> {
        let (mut plan, flags) = base.plan(workload, run, output_dir, self.api_key.as_deref())?;
        plan.report.progress = base.shows_progress();
        let mut command_line = vec!["servebench".to_owned(), "run".to_owned()];
        command_line.extend(crate::redact_argv(&flags));
        Ok((plan, command_line))
    }

    /// One measured run of `plan`.
    pub async fn measure(
        &self,
        plan: &RunPlan,
        command_line: Vec<String>,
        stop: &StopSignal,
    ) -> Result<RunOutcome> {
        execute(plan, &self.target, command_line, stop, false).await
    }

    /// Stops the in-process simulator, if one was started.
    pub async fn shutdown(self) {
        if let Some(g) = self.guard {
            if let Err(e) = g.shutdown().await {
                tracing::warn!("stopping the in-process simulator: {e}");
            }
        }
    }
}

fn probe_target(base_url: &str, api_key: Option<String>) -> Target {
    Target {
        base_url: base_url.to_owned(),
        endpoint: "/v1/completions".to_owned(),
        api: ApiKind::Completions,
        model: String::new(),
        headers: Vec::new(),
        api_key,
        extra_body: serde_json::Map::new(),
        ignore_eos: false,
        transport: Default::default(),
    }
}

/// `sim-h100`, `sim-h100-tp2`.
fn sim_hardware(config: &Value) -> String {
    let gpu = config.get("gpu").and_then(Value::as_str).unwrap_or("gpu");
    let tp = config
        .get("tensor_parallel_size")
        .and_then(Value::as_u64)
        .unwrap_or(1);
    let name = if tp > 1 {
        format!("sim-{gpu}-tp{tp}")
    } else {
        format!("sim-{gpu}")
    };
    dir_name(&name)
}

/// A single path component: letters, digits, '.', '_' and '-' kept, the rest '-'.
pub fn dir_name(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let out = out.trim_matches(|c| c == '-' || c == '.').to_owned();
    if out.is_empty() {
        "unnamed".to_owned()
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_names_are_single_safe_components() {
        assert_eq!(
            dir_name("meta-llama/Llama-3.1-8B"),
            "meta-llama-Llama-3.1-8B"
        );
        assert_eq!(dir_name("gpu-host:8000/"), "gpu-host-8000");
        assert_eq!(dir_name(".."), "unnamed");
        assert_eq!(
            sim_hardware(&json!({"gpu": "h100", "tensor_parallel_size": 2})),
            "sim-h100-tp2"
        );
    }
}
