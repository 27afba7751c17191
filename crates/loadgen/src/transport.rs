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
        } else if let Some(path) = &self.ca_cert {
            // As curl and Python's ssl do, a certificate given to --ca-cert is trusted when the
            // server presents that very certificate, even one marked CA:TRUE (what `openssl
            // req -x509` makes), which WebPKI alone refuses as a CA used as an end entity.
            let pinned = read_certs(path, "--ca-cert")?;
            let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
                Arc::new(self.roots()?),
                Arc::clone(&provider),
            )
            .build()
            .map_err(|e| LoadgenError::Config(format!("--ca-cert {}: {e}", path.display())))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(PinnedOrWebPki { verifier, pinned }))
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

/// WebPKI verification against the `--ca-cert` roots, and besides it the certificates of
/// that file themselves when the server presents one of them as its own (checked for the
/// server's name and for being valid now).
#[derive(Debug)]
struct PinnedOrWebPki {
    verifier: Arc<rustls::client::WebPkiServerVerifier>,
    pinned: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for PinnedOrWebPki {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let webpki = self.verifier.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        );
        match webpki {
            Ok(v) => Ok(v),
            Err(e)
                if self
                    .pinned
                    .iter()
                    .any(|p| p.as_ref() == end_entity.as_ref()) =>
            {
                let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
                rustls::client::verify_server_name(&parsed, server_name)?;
                match validity(end_entity.as_ref()) {
                    Some((not_before, not_after)) => {
                        let t = now.as_secs();
                        if t > not_after {
                            return Err(rustls::Error::InvalidCertificate(
                                rustls::CertificateError::ExpiredContext {
                                    time: now,
                                    not_after: UnixTime::since_unix_epoch(
                                        std::time::Duration::from_secs(not_after),
                                    ),
                                },
                            ));
                        }
                        if t < not_before {
                            return Err(rustls::Error::InvalidCertificate(
                                rustls::CertificateError::NotValidYet,
                            ));
                        }
                        Ok(ServerCertVerified::assertion())
                    }
                    None => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verifier.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.verifier.supported_verify_schemes()
    }
}

/// One DER element at the start of `b`: its tag, its content and what follows it.
fn der(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = b.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |a, &x| (a << 8) | usize::from(x));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// A certificate's validity (notBefore, notAfter) in Unix seconds.
fn validity(cert: &[u8]) -> Option<(u64, u64)> {
    let (_, certificate, _) = der(cert)?;
    let (_, tbs, _) = der(certificate)?;
    let mut rest = tbs;
    // [0] version (optional), serialNumber, signature, issuer, then validity.
    let (tag, _, after) = der(rest)?;
    if tag == 0xa0 {
        rest = after;
    }
    for _ in 0..3 {
        rest = der(rest)?.2;
    }
    let (_, validity, _) = der(rest)?;
    let (t1, nb, after) = der(validity)?;
    let (t2, na, _) = der(after)?;
    Some((asn1_time(t1, nb)?, asn1_time(t2, na)?))
}

/// UTCTime (YYMMDDHHMMSSZ) or GeneralizedTime (YYYYMMDDHHMMSSZ) in Unix seconds.
fn asn1_time(tag: u8, v: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(v).ok()?.strip_suffix('Z')?;
    let num = |a: usize, b: usize| s.get(a..b)?.parse::<i64>().ok();
    let (year, r) = match tag {
        0x17 => {
            let y = num(0, 2)?;
            (if y >= 50 { 1900 + y } else { 2000 + y }, 2)
        }
        0x18 => (num(0, 4)?, 4),
        _ => return None,
    };
    let (mo, d, h, mi, se) = (
        num(r, r + 2)?,
        num(r + 2, r + 4)?,
        num(r + 4, r + 6)?,
        num(r + 6, r + 8)?,
        num(r + 8, r + 10)?,
    );
    // Days from civil (Howard Hinnant's algorithm).
    let y = if mo <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if mo > 2 { mo - 3 } else { mo + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + h * 3600 + mi * 60 + se).ok()
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
