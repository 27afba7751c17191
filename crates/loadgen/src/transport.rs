//! How the client reaches a server: plain HTTP or TLS (rustls on the ring provider), and which
//! HTTP version it speaks.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

use crate::LoadgenError;

/// `--http2`: which HTTP version the client speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Http2Mode {
    /// HTTP/2 where the server offers it through ALPN (https only); HTTP/1.1 otherwise.
    #[default]
    Auto,
    /// HTTP/1.1 only.
    Off,
    /// HTTP/2 only: by ALPN over https, with prior knowledge (h2c) over http.
    On,
}

/// TLS and HTTP-version settings of a target (`--ca-cert`, `--insecure`, `--client-cert`,
/// `--client-key`, `--http2`). The default is what a plain run has always done.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transport {
    pub http2: Http2Mode,
    /// Trust only this PEM bundle instead of the platform's roots.
    pub ca_cert: Option<PathBuf>,
    /// Skip certificate verification (vLLM's `--insecure`).
    pub insecure: bool,
    /// PEM client certificate chain and its key, for gateways that ask for mTLS.
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
}

impl Transport {
    /// The ALPN protocols offered in the TLS handshake.
    pub(crate) fn alpn(&self) -> Vec<Vec<u8>> {
        match self.http2 {
            Http2Mode::Auto => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            Http2Mode::Off => vec![b"http/1.1".to_vec()],
            Http2Mode::On => vec![b"h2".to_vec()],
        }
    }

    /// The rustls client configuration: roots (the `--ca-cert` bundle, else the platform's,
    /// which honours `SSL_CERT_FILE`/`SSL_CERT_DIR`), the client certificate and the ALPN list.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, LoadgenError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| LoadgenError::Config(format!("TLS setup failed: {e}")))?;
        let builder = if self.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
        } else {
            builder.with_root_certificates(self.roots()?)
        };
        let mut config = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => {
                let chain = read_certs(cert, "--client-cert")?;
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                    LoadgenError::Config(format!(
                        "--client-key {}: no usable PEM private key ({e})",
                        key.display()
                    ))
                })?;
                builder.with_client_auth_cert(chain, key).map_err(|e| {
                    LoadgenError::Config(format!(
                        "--client-cert {} with --client-key: {e}",
                        cert.display()
                    ))
                })?
            }
            (None, None) => builder.with_no_client_auth(),
            (Some(_), None) => {
                return Err(LoadgenError::Config(
                    "--client-cert needs --client-key (the certificate's private key)".into(),
                ))
            }
            (None, Some(_)) => {
                return Err(LoadgenError::Config(
                    "--client-key needs --client-cert (the certificate it belongs to)".into(),
                ))
            }
        };
        config.alpn_protocols = self.alpn();
        Ok(Arc::new(config))
    }

    fn roots(&self) -> Result<RootCertStore, LoadgenError> {
        let mut roots = RootCertStore::empty();
        if let Some(path) = &self.ca_cert {
            for cert in read_certs(path, "--ca-cert")? {
                roots.add(cert).map_err(|e| {
                    LoadgenError::Config(format!("--ca-cert {}: {e}", path.display()))
                })?;
            }
            return Ok(roots);
        }
        let found = rustls_native_certs::load_native_certs();
        for cert in found.certs {
            // One unparsable system certificate must not stop the others.
            let _ = roots.add(cert);
        }
        if roots.is_empty() {
            let why = found
                .errors
                .first()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default();
            return Err(LoadgenError::Config(format!(
                "no root certificates found on this system{why}; pass --ca-cert FILE, or --insecure to skip verification"
            )));
        }
        Ok(roots)
    }
}

/// The certificates of a PEM file; an empty or unreadable file is an error naming the flag.
fn read_certs(path: &Path, flag: &str) -> Result<Vec<CertificateDer<'static>>, LoadgenError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| LoadgenError::Config(format!("{flag} {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(LoadgenError::Config(format!(
            "{flag} {}: no PEM certificate (-----BEGIN CERTIFICATE-----) in the file",
            path.display()
        )));
    }
    Ok(certs)
}

/// `--insecure`: any certificate is accepted, but the handshake signatures are still checked
/// so the connection is a working TLS connection.
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn alpn_follows_the_http2_mode() {
        let mut t = Transport::default();
        assert_eq!(t.alpn(), vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
        t.http2 = Http2Mode::Off;
        assert_eq!(t.alpn(), vec![b"http/1.1".to_vec()]);
        t.http2 = Http2Mode::On;
        assert_eq!(t.alpn(), vec![b"h2".to_vec()]);
    }

    #[test]
    fn a_client_certificate_without_its_key_is_refused() {
        let t = Transport {
            client_cert: Some("c.pem".into()),
            insecure: true,
            ..Transport::default()
        };
        let err = t.client_config().unwrap_err().to_string();
        assert!(err.contains("--client-key"), "{err}");
    }

    #[test]
    fn a_ca_file_without_certificates_names_the_flag_and_file() {
        let dir = std::env::temp_dir().join(format!("sb-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("empty.pem");
        std::fs::write(&path, "not a certificate\n").unwrap();
        let t = Transport {
            ca_cert: Some(path.clone()),
            ..Transport::default()
        };
        let err = t.client_config().unwrap_err().to_string();
        assert!(
            err.contains("--ca-cert") && err.contains("empty.pem"),
            "{err}"
        );
        let missing = Transport {
            ca_cert: Some(dir.join("missing.pem")),
            ..Transport::default()
        };
        let err = missing.client_config().unwrap_err().to_string();
        assert!(err.contains("missing.pem"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
