//! The accept loop: HTTP/1.1 connections served by hyper with a header read timeout (slow or
//! idle clients are dropped), a cap on open connections (one more gets a short 503 and is
//! closed), and graceful shutdown (no new connections, in-flight responses finish).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use super::error::ApiError;
use crate::args::SimArgs;
use crate::SimError;

/// How long a refused connection is drained after its 503, so that closing it with unread
/// request bytes does not reset the connection before the client has read the answer.
const REFUSED_DRAIN: Duration = Duration::from_secs(1);

/// The connection-level limits of `servebench sim` (`--max-connections`,
/// `--header-timeout-secs`, `--body-timeout-secs`, `--max-body-bytes`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConnectionLimits {
    /// Open connections served at once.
    pub max_connections: usize,
    /// Time allowed for a request head, from connect or from the previous response.
    pub header_timeout: Duration,
    /// Time allowed for a whole request body, from the end of its head.
    pub body_timeout: Duration,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
}

impl ConnectionLimits {
    /// The limits the flags ask for, refusing values that would disable them by accident.
    pub fn from_args(args: &SimArgs) -> Result<Self, SimError> {
        if args.max_connections == 0 {
            return Err(SimError::Config(
                "--max-connections must be at least 1".to_owned(),
            ));
        }
        if args.max_body_bytes == 0 {
            return Err(SimError::Config(
                "--max-body-bytes must be at least 1".to_owned(),
            ));
        }
        let header_timeout = positive_duration("--header-timeout-secs", args.header_timeout_secs)?;
        // clap checks the flag; this catches a value set in code (the in-process simulator).
        let body_timeout = positive_duration("--body-timeout-secs", args.body_timeout_secs)?;
        Ok(ConnectionLimits {
            max_connections: args.max_connections,
            header_timeout,
            body_timeout,
            max_body_bytes: args.max_body_bytes,
        })
    }
}

/// `secs` as a duration: finite, above 0 and at most the flag ceiling of
/// [`servebench_metrics::units::positive_secs`] (so no deadline overflows an `Instant`).
fn positive_duration(flag: &str, secs: f64) -> Result<Duration, SimError> {
    servebench_metrics::units::positive_secs(&secs.to_string())
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            SimError::Config(format!(
                "{flag} must be a positive number of seconds (at most 30 days), got {secs}"
            ))
        })
}

/// Serves `router` on `listener` until `shutdown` resolves, then stops accepting, lets every
/// open connection finish its current response and returns once all have closed. `on_shutdown`
/// runs as soon as `shutdown` resolves (before waiting for the connections).
pub async fn serve_connections(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    secure: Option<super::secure::Secure>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_shutdown: impl FnOnce(),
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .keep_alive(true);
    let (closing_tx, closing_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    let refusal = Arc::new(refusal_response(limits.max_connections));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => {
                let tcp = match accepted {
                    Ok((tcp, _)) => tcp,
                    Err(e) => {
                        if !is_connection_error(&e) {
                            // Out of file descriptors and the like: back off instead of spinning.
                            tracing::warn!("accept failed: {e}");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        continue;
                    }
                };
                // Token chunks are small writes that must leave at once.
                let _ = tcp.set_nodelay(true);
                match permits.clone().try_acquire_owned() {
                    Ok(permit) if secure.is_some() => {
                        let serve = secure.clone().map(|s| s.serve(tcp, router.clone(), closing_rx.clone()));
                        tasks.spawn(async move {
                            let _permit = permit;
                            if let Some(serve) = serve {
                                serve.await;
                            }
                        });
                    }
                    Ok(permit) => {
                        let conn = builder.serve_connection(
                            TokioIo::new(tcp),
                            TowerToHyperService::new(router.clone()),
                        );
                        let mut closing = closing_rx.clone();
                        tasks.spawn(async move {
                            let _permit = permit;
                            tokio::pin!(conn);
                            let closing = async move {
                                // The watch guard must not live across the next await.
                                let _ = closing.wait_for(|c| *c).await.is_ok();
                            };
                            tokio::select! {
                                res = conn.as_mut() => log_conn_error(res),
                                () = closing => {
                                    conn.as_mut().graceful_shutdown();
                                    log_conn_error(conn.await);
                                }
                            }
                        });
                    }
                    Err(_) => {
                        tasks.spawn(refuse(tcp, refusal.clone()));
                    }
                }
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    on_shutdown();
    drop(listener);
    let _ = closing_tx.send(true);
    while tasks.join_next().await.is_some() {}
}

fn log_conn_error(res: Result<(), hyper::Error>) {
    if let Err(e) = res {
        // Timeouts and client resets are routine for a server; not worth more than a trace.
        tracing::debug!("connection ended: {e}");
    }
}

fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

/// The whole HTTP response a refused connection gets: 503 with the JSON error body.
fn refusal_response(max_connections: usize) -> Vec<u8> {
    let err = ApiError::with_status(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "The server is at its connection limit ({max_connections} open connections, \
             --max-connections); retry later."
        ),
    );
    let body = err.json_bytes();
    let mut out = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

/// Answers a connection over the cap and closes it, reading (and discarding) what the client
/// sends for a short while so that the close does not turn into a reset that loses the answer.
async fn refuse(mut tcp: TcpStream, response: Arc<Vec<u8>>) {
    if tcp.write_all(&response).await.is_err() {
        return;
    }
    let _ = tcp.shutdown().await;
    let drain = async {
        let mut sink = [0u8; 4096];
        while matches!(tcp.read(&mut sink).await, Ok(n) if n > 0) {}
    };
    let _ = tokio::time::timeout(REFUSED_DRAIN, drain).await;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn limits_refuse_zero_and_nonsense() {
        let mut a = SimArgs::default();
        let l = ConnectionLimits::from_args(&a).unwrap();
        assert_eq!(l.max_connections, 4096);
        assert_eq!(l.header_timeout, Duration::from_secs(10));
        assert_eq!(l.body_timeout, Duration::from_secs(30));
        assert_eq!(l.max_body_bytes, 8 * 1024 * 1024);
        a.header_timeout_secs = 0.0;
        assert!(ConnectionLimits::from_args(&a).is_err());
        a.header_timeout_secs = f64::NAN;
        assert!(ConnectionLimits::from_args(&a).is_err());
        a.header_timeout_secs = 0.5;
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e30] {
            a.body_timeout_secs = bad;
            assert!(ConnectionLimits::from_args(&a).is_err(), "{bad}");
        }
        a.body_timeout_secs = 1.0;
        assert_eq!(
            ConnectionLimits::from_args(&a).unwrap().body_timeout,
            Duration::from_secs(1)
        );
        a.max_connections = 0;
        assert!(ConnectionLimits::from_args(&a).is_err());
        a.max_connections = 1;
        a.max_body_bytes = 0;
        assert!(ConnectionLimits::from_args(&a).is_err());
    }

    #[test]
    fn refusal_is_a_complete_503_with_the_json_error() {
        let r = String::from_utf8(refusal_response(7)).unwrap();
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 503 "), "{head}");
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], 503);
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("connection limit (7"));
    }
}
