//! Which server a run measures: an external one, the simulator started in-process, or the
//! simulator's engine core in virtual time.

use anyhow::{Context, Result};
use serde_json::Value;
use servebench_sim::args::SimArgs;
use servebench_sim::server::{spawn_in_process, ShutdownHandle};
use servebench_sim::ResolvedSim;

use super::http_run::HttpTarget;
use super::plan::TargetChoice;
use super::virtual_run::VirtualTarget;
use super::RunTarget;

/// The default simulator when `--sim` is absent.
pub const DEFAULT_SIM_SPEC: &str = "llama-3.1-8b --gpu h100";

/// What a result says about the simulator it measured.
#[derive(Debug, Clone)]
pub struct SimInfo {
    pub spec: String,
    pub config: Value,
}

pub fn resolve_sim(spec: Option<&str>) -> Result<(String, ResolvedSim)> {
    let spec = spec.unwrap_or(DEFAULT_SIM_SPEC).to_owned();
    let args = SimArgs::parse_spec(&spec).with_context(|| format!("--sim {spec:?}"))?;
    let resolved = args.resolve().with_context(|| format!("--sim {spec:?}"))?;
    Ok((spec, resolved))
}

/// The target a plan names, started when it is the in-process simulator (the handle stops
/// it).
pub async fn resolve_target(choice: &TargetChoice) -> Result<(RunTarget, Option<ShutdownHandle>)> {
    match choice {
        TargetChoice::VirtualTime { spec } => {
            let (spec, resolved) = resolve_sim(spec.as_deref())?;
            eprintln!("Target: simulator in virtual time ({spec})");
            Ok((
                RunTarget::Virtual(VirtualTarget {
                    sim: Box::new(resolved),
                    spec,
                }),
                None,
            ))
        }
        TargetChoice::Server { base_url } => Ok((
            RunTarget::Http(HttpTarget {
                base_url: base_url.clone(),
                sim: None,
            }),
            None,
        )),
        TargetChoice::Simulator { spec } => {
            let (spec, resolved) = resolve_sim(spec.as_deref())?;
            let config = resolved.config_json.clone();
            let (addr, guard) = spawn_in_process(resolved)
                .await
                .context("starting the in-process simulator")?;
            let url = format!("http://{addr}");
            eprintln!(
                "Target: in-process simulator ({spec}) at {url} — pass --base-url to measure a real server"
            );
            Ok((
                RunTarget::Http(HttpTarget {
                    base_url: url,
                    sim: Some(SimInfo { spec, config }),
                }),
                Some(guard),
            ))
        }
    }
}
