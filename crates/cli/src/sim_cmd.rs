//! `servebench sim`: serve the simulated engine until Ctrl-C or SIGTERM; `sim fidelity` and
//! `sim calibrate` check and fit its cost model.

use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use servebench_sim::args::SimArgs;

use crate::calibrate_cmd::CalibrateArgs;
use crate::sim_fidelity_cmd::FidelityArgs;

/// `servebench sim [MODEL] [FLAGS]` serves; `servebench sim fidelity|calibrate ...` runs one of
/// the model's checks instead. The server's MODEL is a positional with a default, so clap
/// must know that a subcommand's name is not a model: a subcommand, when given, stands alone
/// (no server flags before it), and the server's arguments are then not required.
#[derive(Debug, Args)]
#[command(subcommand_negates_reqs = true, args_conflicts_with_subcommands = true)]
pub struct SimCmd {
    #[command(subcommand)]
    pub command: Option<SimCommand>,
    #[command(flatten)]
    pub serve: SimArgs,
}

#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Compare the simulator with published real-GPU figures: every published point run in
    /// virtual time, as a table of published, simulated and error.
    Fidelity(FidelityArgs),
    /// Fit the simulator's efficiencies and overheads to measured runs and write a
    /// calibration profile (for `sim --calibration FILE`).
    Calibrate(Box<CalibrateArgs>),
}

/// Runs `servebench sim`: the server, or the subcommand given.
pub async fn sim(cmd: SimCmd) -> Result<ExitCode> {
    match cmd.command {
        Some(SimCommand::Fidelity(args)) => crate::sim_fidelity_cmd::fidelity(&args),
        Some(SimCommand::Calibrate(args)) => crate::calibrate_cmd::run(&args),
        None => serve(cmd.serve).await,
    }
}

async fn serve(args: SimArgs) -> Result<ExitCode> {
    let host = args.host.clone();
    let port = args.port;
    let resolved = args.resolve()?;
    let listener = tokio::net::TcpListener::bind((host.as_str(), port))
        .await
        .with_context(|| format!("cannot listen on {host}:{port}"))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    let banner: Vec<String> = resolved
        .banner_lines()
        .into_iter()
        .chain(resolved.fleet_banner_lines())
        .collect();
    let scheme = if resolved.args.tls_cert.is_some() {
        "https"
    } else {
        "http"
    };
    // Announced only once the server accepted its configuration (TLS files, limits): a
    // "Serving on" line is never followed by a configuration error.
    servebench_sim::server::serve_announced(
        listener,
        resolved,
        servebench_sim::server::stop_requested(),
        move || {
            for line in &banner {
                eprintln!("{line}");
            }
            eprintln!("Serving on {scheme}://{addr} (Ctrl-C to stop)");
        },
    )
    .await?;
    eprintln!("Simulator stopped.");
    Ok(ExitCode::SUCCESS)
}
