//! `--server-cmd` on `matrix` and the frontier `sweep`: one server for the whole experiment,
//! started (and checked ready) before the first run and stopped after the last; the runs
//! measure it as they would any `--base-url`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;

use super::{resolve_self, split_words, Lifecycle, ServerProcess};
use crate::matrix::bench::TargetArgs;

/// The server an experiment starts and stops itself.
#[derive(Debug, Clone, Default, Args)]
pub struct ServerCmdArgs {
    /// Start this server for the experiment and stop it afterwards (`vllm serve …`,
    /// `llama-server …`); `{port}` takes a free port, else `--port N` is appended unless it
    /// names one. The runs go to it as to --base-url.
    #[arg(long, value_name = "CMD", help_heading = "Server lifecycle")]
    pub server_cmd: Option<String>,
    /// Seconds the server may take to become ready (/health 200 and a model in /v1/models).
    #[arg(
        long,
        default_value_t = 300,
        value_name = "SECS",
        help_heading = "Server lifecycle"
    )]
    pub server_ready_timeout: u64,
    /// The server's stdout and stderr [default: RESULTS_DIR/server-<start time>.log].
    #[arg(long, value_name = "FILE", help_heading = "Server lifecycle")]
    pub server_log: Option<PathBuf>,
}

/// Starts the `--server-cmd` server, if one is given, and points `target` at it.
pub async fn start(
    args: &ServerCmdArgs,
    target: &mut TargetArgs,
    results_dir: &Path,
) -> Result<Option<ServerProcess>> {
    let Some(cmd) = &args.server_cmd else {
        return Ok(None);
    };
    if target.base_url.is_some() || target.sim.is_some() || target.virtual_time {
        bail!("--server-cmd starts the server the runs measure: drop --base-url, --sim and --virtual-time");
    }
    let argv = resolve_self(split_words(cmd)?);
    let log = args.server_log.clone().unwrap_or_else(|| {
        results_dir.join(format!(
            "server-{}.log",
            chrono::Local::now().format("%Y%m%d-%H%M%S")
        ))
    });
    let how = Lifecycle {
        ready_timeout: Duration::from_secs(args.server_ready_timeout),
        api_key: target.api_key.clone(),
        ..Lifecycle::default()
    };
    let server = ServerProcess::start(&argv, &log, &how).await?;
    eprintln!("Server log: {}", log.display());
    target.base_url = Some(server.base_url());
    Ok(Some(server))
}

/// Stops the server; one that exited during the experiment is an error quoting its log.
pub async fn stop(server: Option<ServerProcess>) -> Result<()> {
    let Some(mut server) = server else {
        return Ok(());
    };
    let died = server.exited();
    server.stop().await;
    if let Some(status) = died {
        bail!(
            "the server exited during the experiment ({status}); its requests after that are recorded as failures; last lines of {}:\n{}",
            server.log.display(),
            server.log_tail()
        );
    }
    Ok(())
}
