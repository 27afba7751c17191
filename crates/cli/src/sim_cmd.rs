//! `servebench sim`: serve the simulated engine until Ctrl-C or SIGTERM.

use std::process::ExitCode;

use anyhow::{Context, Result};
use servebench_sim::args::SimArgs;

pub async fn serve(args: SimArgs) -> Result<ExitCode> {
    let host = args.host.clone();
    let port = args.port;
    let resolved = args.resolve()?;
    let listener = tokio::net::TcpListener::bind((host.as_str(), port))
        .await
        .with_context(|| format!("cannot listen on {host}:{port}"))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    for line in resolved
        .banner_lines()
        .into_iter()
        .chain(resolved.fleet_banner_lines())
    {
        eprintln!("{line}");
    }
    let scheme = if resolved.args.tls_cert.is_some() {
        "https"
    } else {
        "http"
    };
    eprintln!("Serving on {scheme}://{addr} (Ctrl-C to stop)");
    servebench_sim::server::serve(listener, resolved, servebench_sim::server::stop_requested())
        .await?;
    eprintln!("Simulator stopped.");
    Ok(ExitCode::SUCCESS)
}
