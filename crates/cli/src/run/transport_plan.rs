//! The TLS and HTTP/2 flags of a run (`--ca-cert`, `--insecure`, `--client-cert`,
//! `--client-key`, `--http2`) as the client's transport, and back.

use std::sync::Once;

use anyhow::{bail, Result};
use servebench_loadgen::{BackendClient, Http2Mode, Transport};
use servebench_metrics::{ConnectionSummary, ConnectionTiming};

use super::args::{Http2Arg, RunArgs};
use super::plan::TargetChoice;

/// The transport the flags ask for; an https target's certificate files are read now so a
/// bad one stops the run before any request.
pub fn transport(a: &RunArgs, target: &TargetChoice) -> Result<Transport> {
    let t = Transport {
        http2: match a.http2 {
            Http2Arg::Auto => Http2Mode::Auto,
            Http2Arg::Off => Http2Mode::Off,
            Http2Arg::On => Http2Mode::On,
        },
        ca_cert: a.ca_cert.clone(),
        insecure: a.insecure,
        client_cert: a.client_cert.clone(),
        client_key: a.client_key.clone(),
    };
    let https =
        matches!(target, TargetChoice::Server { base_url } if base_url.starts_with("https://"));
    if https {
        t.client_config()?;
        if t.insecure {
            warn_insecure();
        }
    } else if t.client_cert.is_some() || t.client_key.is_some() || t.ca_cert.is_some() {
        bail!("--ca-cert, --client-cert and --client-key apply to an https:// --base-url only");
    }
    Ok(t)
}

/// Sets the flags of `t` on `a` (the inverse of [`transport`]).
pub fn set_flags(a: &mut RunArgs, t: &Transport) {
    a.http2 = match t.http2 {
        Http2Mode::Auto => Http2Arg::Auto,
        Http2Mode::Off => Http2Arg::Off,
        Http2Mode::On => Http2Arg::On,
    };
    a.ca_cert = t.ca_cert.clone();
    a.insecure = t.insecure;
    a.client_cert = t.client_cert.clone();
    a.client_key = t.client_key.clone();
}

/// The run's new connections, for the result; `None` for plain HTTP/1.1, whose results stay
/// as they always were.
pub fn connection_summary(client: &BackendClient) -> Option<ConnectionSummary> {
    let conns = client.connections().snapshot();
    let shown = conns
        .iter()
        .any(|c| c.tls_handshake.is_some() || c.protocol != "http/1.1");
    if !shown {
        return None;
    }
    let timings: Vec<ConnectionTiming> = conns
        .iter()
        .map(|c| ConnectionTiming {
            tcp_connect_ms: c.tcp_connect.as_secs_f64() * 1e3,
            tls_handshake_ms: c.tls_handshake.map(|d| d.as_secs_f64() * 1e3),
            protocol: c.protocol.to_owned(),
            tls_version: c.tls_version.map(str::to_owned),
        })
        .collect();
    ConnectionSummary::from_timings(&timings)
}

/// Once per process however many runs a matrix or sweep makes.
fn warn_insecure() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        eprintln!(
            "Warning: --insecure: TLS certificates are not verified; the server's identity is not checked"
        );
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn server(url: &str) -> TargetChoice {
        TargetChoice::Server {
            base_url: url.into(),
        }
    }

    #[test]
    fn flags_go_to_the_transport_and_back() {
        let a = RunArgs::from_flags(&["--http2", "on", "--insecure"]).unwrap();
        let t = transport(&a, &server("https://127.0.0.1:8443")).unwrap();
        assert_eq!(t.http2, Http2Mode::On);
        assert!(t.insecure);
        let mut b = RunArgs::from_flags::<&str>(&[]).unwrap();
        set_flags(&mut b, &t);
        assert_eq!(transport(&b, &server("https://h")).unwrap(), t);
    }

    #[test]
    fn certificate_files_on_plain_http_are_refused() {
        let a = RunArgs::from_flags(&["--ca-cert", "ca.pem"]).unwrap();
        let err = transport(&a, &server("http://127.0.0.1:8000"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("https://"), "{err}");
        let err = transport(&a, &server("https://127.0.0.1:8443"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("--ca-cert ca.pem"), "{err}");
    }
}
