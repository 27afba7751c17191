//! `servebench sim --tls-cert FILE --tls-key FILE`: https through rustls (ring), HTTP/2 and
//! HTTP/1.1 chosen by ALPN; and `--h2c`: HTTP/2 with prior knowledge beside HTTP/1.1 on plain
//! http. Both serve through hyper-util's auto builder, which tells the versions apart by the
//! connection's first bytes.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use super::connections::ConnectionLimits;
use crate::args::SimArgs;
use crate::SimError;

/// How connections other than plain HTTP/1.1 are served.
#[derive(Clone)]
pub(super) struct Secure {
    /// `None` for `--h2c` without TLS.
    tls: Option<TlsAcceptor>,
    builder: Arc<auto::Builder<TokioExecutor>>,
    handshake_timeout: Duration,
}

impl Secure {
    /// What the flags ask for; `None` for plain HTTP/1.1 (served as it always was).
    pub(super) fn from_args(
        args: &SimArgs,
        limits: &ConnectionLimits,
    ) -> Result<Option<Secure>, SimError> {
        let tls = match (&args.tls_cert, &args.tls_key) {
            (Some(cert), Some(key)) => Some(acceptor(cert, key)?),
            (None, None) => None,
            _ => {
                return Err(SimError::Config(
                    "--tls-cert and --tls-key go together".to_owned(),
                ))
            }
        };
        if tls.is_none() && !args.h2c {
            return Ok(None);
        }
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .keep_alive(true);
        builder.http2().timer(TokioTimer::new());
        Ok(Some(Secure {
            tls,
            builder: Arc::new(builder),
            handshake_timeout: limits.header_timeout,
        }))
    }

    /// Serves one accepted connection until it closes, or gracefully once `closing` is set.
    pub(super) async fn serve(
        self,
        tcp: TcpStream,
        router: Router,
        closing: watch::Receiver<bool>,
    ) {
        match &self.tls {
            Some(acceptor) => {
                let accepted =
                    tokio::time::timeout(self.handshake_timeout, acceptor.accept(tcp)).await;
                match accepted {
                    Ok(Ok(stream)) => {
                        serve_auto(&self.builder, TokioIo::new(stream), router, closing).await
                    }
                    Ok(Err(e)) => tracing::debug!("TLS handshake failed: {e}"),
                    Err(_) => tracing::debug!("TLS handshake timed out"),
                }
            }
            None => serve_auto(&self.builder, TokioIo::new(tcp), router, closing).await,
        }
    }
}

async fn serve_auto<I>(
    builder: &auto::Builder<TokioExecutor>,
    io: I,
    router: Router,
    mut closing: watch::Receiver<bool>,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let conn = builder.serve_connection(io, TowerToHyperService::new(router));
    tokio::pin!(conn);
    let closing = async move {
        // The watch guard must not live across the next await.
        let _ = closing.wait_for(|c| *c).await.is_ok();
    };
    let res = tokio::select! {
        res = conn.as_mut() => res,
        () = closing => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = res {
        tracing::debug!("connection ended: {e}");
    }
}

/// The TLS acceptor of a PEM certificate chain and key, offering h2 and http/1.1 by ALPN.
fn acceptor(cert: &std::path::Path, key: &std::path::Path) -> Result<TlsAcceptor, SimError> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| SimError::Config(format!("--tls-cert {}: {e}", cert.display())))?;
    if chain.is_empty() {
        return Err(SimError::Config(format!(
            "--tls-cert {}: no PEM certificate in the file",
            cert.display()
        )));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        SimError::Config(format!(
            "--tls-key {}: no usable PEM private key ({e})",
            key.display()
        ))
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| SimError::Config(format!("TLS setup failed: {e}")))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| SimError::Config(format!("--tls-cert with --tls-key: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_stays_as_it_was_and_half_a_tls_pair_is_refused() {
        let mut args = SimArgs::default();
        let limits = ConnectionLimits::from_args(&args).unwrap();
        assert!(Secure::from_args(&args, &limits).unwrap().is_none());
        args.h2c = true;
        assert!(Secure::from_args(&args, &limits).unwrap().is_some());
        args.tls_cert = Some("cert.pem".into());
        let err = Secure::from_args(&args, &limits).err().unwrap().to_string();
        assert!(err.contains("--tls-key"), "{err}");
        args.tls_key = Some("missing-key.pem".into());
        let err = Secure::from_args(&args, &limits).err().unwrap().to_string();
        assert!(err.contains("--tls-cert cert.pem"), "{err}");
    }
}
