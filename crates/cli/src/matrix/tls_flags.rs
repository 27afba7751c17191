//! The TLS and HTTP/2 flags of `matrix` and `sweep`: handed to every run as `servebench run`
//! flags, and used for the experiment's own requests to the server (its version and models).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use servebench_loadgen::Transport;

use crate::run::args::{Http2Arg, RunArgs};
use crate::run::plan::TargetChoice;

#[derive(Debug, Clone, Default, Args)]
pub struct TlsFlags {
    /// PEM CA certificate(s) to trust for an https --base-url (as `servebench run`).
    #[arg(long, value_name = "FILE", help_heading = "TLS and HTTP/2")]
    pub ca_cert: Option<PathBuf>,
    /// Skip TLS certificate verification (vLLM's --insecure).
    #[arg(long, help_heading = "TLS and HTTP/2")]
    pub insecure: bool,
    /// PEM client certificate for mTLS.
    #[arg(long, value_name = "FILE", help_heading = "TLS and HTTP/2")]
    pub client_cert: Option<PathBuf>,
    /// PEM private key of --client-cert.
    #[arg(long, value_name = "FILE", help_heading = "TLS and HTTP/2")]
    pub client_key: Option<PathBuf>,
    /// auto, off or on (as `servebench run --http2`).
    #[arg(long, value_enum, help_heading = "TLS and HTTP/2")]
    pub http2: Option<Http2Arg>,
}

impl TlsFlags {
    /// Whether any flag was given.
    pub fn given(&self) -> bool {
        self.ca_cert.is_some()
            || self.insecure
            || self.client_cert.is_some()
            || self.client_key.is_some()
            || self.http2.is_some()
    }

    /// The flags as `servebench run` takes them.
    pub fn run_flags(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut path = |flag: &str, p: &Option<PathBuf>| {
            if let Some(p) = p {
                out.extend([flag.to_owned(), p.display().to_string()]);
            }
        };
        path("--ca-cert", &self.ca_cert);
        path("--client-cert", &self.client_cert);
        path("--client-key", &self.client_key);
        if self.insecure {
            out.push("--insecure".to_owned());
        }
        if let Some(h) = self.http2 {
            let v = match h {
                Http2Arg::Auto => "auto",
                Http2Arg::Off => "off",
                Http2Arg::On => "on",
            };
            out.extend(["--http2".to_owned(), v.to_owned()]);
        }
        out
    }

    /// The transport for the server at `base_url`, checked as a run checks it.
    pub fn transport(&self, base_url: &str) -> Result<Transport> {
        let args = RunArgs::from_flags(&self.run_flags()).map_err(anyhow::Error::msg)?;
        crate::run::transport_plan::transport(
            &args,
            &TargetChoice::Server {
                base_url: base_url.to_owned(),
            },
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn flags_reach_the_runs_as_given() {
        let f = TlsFlags {
            ca_cert: Some("ca.pem".into()),
            insecure: true,
            http2: Some(Http2Arg::On),
            ..TlsFlags::default()
        };
        assert_eq!(
            f.run_flags(),
            ["--ca-cert", "ca.pem", "--insecure", "--http2", "on"]
        );
        assert!(f.given());
        assert!(!TlsFlags::default().given());
        let t = TlsFlags {
            insecure: true,
            ..TlsFlags::default()
        }
        .transport("https://h:1")
        .unwrap();
        assert!(t.insecure);
    }
}
