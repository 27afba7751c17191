//! Which server a run measures: an external one, the simulator started in-process, or the
//! simulator's engine core in virtual time.

use anyhow::{bail, Context, Result};
use serde_json::Value;
use servebench_sim::args::SimArgs;
use servebench_sim::server::{spawn_in_process, ShutdownHandle};
use servebench_sim::ResolvedSim;

use super::args::RunArgs;

/// The default simulator when `--sim` is absent.
pub const DEFAULT_SIM_SPEC: &str = "llama-3.1-8b --gpu h100";

pub enum TargetMode {
    External(String),
    InProcess {
        url: String,
        info: SimInfo,
        guard: ShutdownHandle,
    },
    Virtual(Box<ResolvedSim>),
}

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

pub async fn resolve_target(args: &RunArgs) -> Result<TargetMode> {
    let external = args.base_url.is_some() || args.host.is_some() || args.port.is_some();
    if args.virtual_time {
        if external {
            bail!("--virtual-time runs the simulator's engine core without a server: drop --base-url/--host/--port");
        }
        let (spec, resolved) = resolve_sim(args.sim.as_deref())?;
        eprintln!("Target: simulator in virtual time ({spec})");
        return Ok(TargetMode::Virtual(Box::new(resolved)));
    }
    if external {
        if args.sim.is_some() {
            bail!("--sim starts a simulator in-process; it cannot be combined with --base-url/--host/--port");
        }
        let url = match &args.base_url {
            Some(u) => servebench_loadgen::target::normalize_base_url(u),
            None => format!(
                "http://{}:{}",
                args.host.as_deref().unwrap_or("127.0.0.1"),
                args.port.unwrap_or(8000)
            ),
        };
        servebench_loadgen::target::parse_uri(&url)?;
        return Ok(TargetMode::External(url));
    }
    let (spec, resolved) = resolve_sim(args.sim.as_deref())?;
    let config = resolved.config_json.clone();
    let (addr, guard) = spawn_in_process(resolved)
        .await
        .context("starting the in-process simulator")?;
    let url = format!("http://{addr}");
    eprintln!(
        "Target: in-process simulator ({spec}) at {url} — pass --base-url to measure a real server"
    );
    Ok(TargetMode::InProcess {
        url,
        info: SimInfo { spec, config },
        guard,
    })
}
