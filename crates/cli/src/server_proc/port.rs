//! Which address a server command listens on: the port it names, or a free one put in its
//! `{port}` placeholder (or appended as `--port N`), and whether a port is free again.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// The placeholder a command (server or benchmark) may hold for the chosen port.
pub const PLACEHOLDER: &str = "{port}";

/// A command with its address settled.
#[derive(Debug, Clone, PartialEq)]
pub struct Addressed {
    pub argv: Vec<String>,
    pub host: String,
    pub port: u16,
}

impl Addressed {
    /// `http://host:port`; a wildcard listen address is reached on the loopback.
    pub fn base_url(&self) -> String {
        let host = match self.host.as_str() {
            "0.0.0.0" | "::" | "" => "127.0.0.1",
            h => h,
        };
        format!("http://{host}:{}", self.port)
    }
}

/// The value after `flag` (`--port 8000` or `--port=8000`), if the command names it.
pub fn flag_value<'a>(argv: &'a [String], flags: &[&str]) -> Option<&'a str> {
    for (i, a) in argv.iter().enumerate() {
        for f in flags {
            if a == f {
                return argv.get(i + 1).map(String::as_str);
            }
            if let Some(v) = a.strip_prefix(f).and_then(|r| r.strip_prefix('=')) {
                return Some(v);
            }
        }
    }
    None
}

/// Settles the port of a server command. A port the command names is kept (a `{port}` in its
/// value counts as unnamed); otherwise a free loopback port goes into every `{port}`, or is
/// appended as `--port N` when the command has no placeholder.
pub fn address(argv: &[String]) -> Result<Addressed> {
    if argv.is_empty() {
        bail!("the server command is empty");
    }
    let host = flag_value(argv, &["--host"])
        .unwrap_or("127.0.0.1")
        .to_owned();
    let named = flag_value(argv, &["--port", "-p"]).filter(|v| !v.contains(PLACEHOLDER));
    if let Some(p) = named {
        let port: u16 = p
            .parse()
            .with_context(|| format!("server command: --port {p:?} is not a port number"))?;
        return Ok(Addressed {
            argv: argv.to_vec(),
            host,
            port,
        });
    }
    let port = free_port()?;
    let mut out: Vec<String> = argv
        .iter()
        .map(|a| a.replace(PLACEHOLDER, &port.to_string()))
        .collect();
    if !argv.iter().any(|a| a.contains(PLACEHOLDER)) {
        out.extend(["--port".to_owned(), port.to_string()]);
    }
    Ok(Addressed {
        argv: out,
        host,
        port,
    })
}

/// A loopback port nobody listens on right now (the kernel's pick for port 0).
pub fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").context("finding a free port on 127.0.0.1")?;
    Ok(l.local_addr().context("finding a free port")?.port())
}

/// Whether something accepts connections on the loopback at `port`.
pub fn in_use(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

/// Waits until nothing accepts connections at `port` any more, so the next server can bind
/// it; an error after `limit`.
pub async fn wait_free(port: u16, limit: Duration) -> Result<()> {
    let start = Instant::now();
    loop {
        let busy = tokio::task::spawn_blocking(move || in_use(port))
            .await
            .unwrap_or(false);
        if !busy {
            return Ok(());
        }
        if start.elapsed() > limit {
            bail!(
                "port {port} still accepts connections {:.0} s after the server was stopped",
                limit.as_secs_f64()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn a_named_port_is_kept() {
        let a = address(&argv("vllm serve m --port 8123 --host 0.0.0.0")).expect("ok");
        assert_eq!(a.port, 8123);
        assert_eq!(a.argv, argv("vllm serve m --port 8123 --host 0.0.0.0"));
        assert_eq!(a.base_url(), "http://127.0.0.1:8123");
        let b = address(&argv("llama-server --port=9001")).expect("ok");
        assert_eq!(b.port, 9001);
    }

    #[test]
    fn the_placeholder_takes_a_free_port_everywhere() {
        let a = address(&argv("sim --port {port} --note x{port}")).expect("ok");
        assert_ne!(a.port, 0);
        let p = a.port.to_string();
        assert_eq!(a.argv[2], p);
        assert_eq!(a.argv[4], format!("x{p}"));
        assert_eq!(a.argv.len(), 5);
    }

    #[test]
    fn without_port_or_placeholder_one_is_appended() {
        let a = address(&argv("vllm serve m")).expect("ok");
        assert_eq!(a.argv[3], "--port");
        assert_eq!(a.argv[4], a.port.to_string());
    }

    #[test]
    fn a_bad_port_is_named() {
        let e = address(&argv("x --port eighty")).expect_err("bad port");
        assert!(format!("{e:#}").contains("eighty"), "{e:#}");
    }
}
