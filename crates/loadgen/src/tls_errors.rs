//! One line for a connection that failed at the TLS or protocol level: the host, what was
//! expected, what was found, and the flag that helps.

use std::io;

use rustls::{AlertDescription, CertificateError, Error as TlsError};

const TRUST_HINT: &str =
    "pass --ca-cert FILE with the issuing CA, or --insecure to skip verification";

/// What an untrusted certificate is called, whatever the TLS library's reason (an unknown
/// issuer, a self-signed certificate marked as a CA, a signature it cannot check).
pub(crate) const UNTRUSTED: &str = "the server's certificate is not signed by a CA this client trusts: pass --ca-cert FILE, or --insecure to skip verification";

/// A failed TLS handshake with `host`, as one line.
pub(crate) fn handshake_failure(host: &str, e: &io::Error) -> String {
    let tls = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<TlsError>());
    match tls {
        Some(TlsError::InvalidCertificate(c)) => certificate_failure(host, c),
        Some(TlsError::InvalidMessage(_)) => format!(
            "{host}: expected TLS (https://), found a server that does not speak TLS (plain HTTP?); use an http:// URL"
        ),
        Some(TlsError::AlertReceived(alert)) => alert_failure(host, *alert),
        Some(TlsError::NoApplicationProtocol) => format!(
            "{host}: expected the server to accept HTTP/2 through ALPN (--http2 on), found it does not; use --http2 auto or off"
        ),
        Some(other) => format!("{host}: TLS handshake failed: {other}"),
        None if e.kind() == io::ErrorKind::UnexpectedEof => format!(
            "{host}: expected a TLS handshake, found the connection closed (a server that does not speak TLS, or refused this client); use an http:// URL if it serves plain HTTP"
        ),
        None => format!("{host}: TLS handshake failed: {e}"),
    }
}

// rustls still produces the deprecated `UnsupportedSignatureAlgorithm`; it is named here.
#[allow(deprecated)]
fn certificate_failure(host: &str, c: &CertificateError) -> String {
    match c {
        CertificateError::UnknownIssuer
        | CertificateError::BadSignature
        | CertificateError::UnsupportedSignatureAlgorithm
        | CertificateError::UnsupportedSignatureAlgorithmContext { .. }
        | CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext { .. }
        | CertificateError::Other(_) => format!("{host}: {UNTRUSTED}"),
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            let when = match c {
                CertificateError::ExpiredContext { not_after, .. } => {
                    format!(" on {}", unix_date(not_after.as_secs()))
                }
                _ => String::new(),
            };
            format!(
                "{host}: certificate expired: expected one valid now, found one that expired{when}; renew it, or pass --insecure to skip verification"
            )
        }
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => format!(
            "{host}: certificate not valid yet: expected one valid now, found one whose validity starts later (check the clock); or pass --insecure to skip verification"
        ),
        CertificateError::NotValidForName => format!(
            "{host}: wrong host name: expected a certificate for {host}, found one for other names; connect by a name the certificate lists, or pass --insecure to skip verification"
        ),
        CertificateError::NotValidForNameContext { presented, .. } => format!(
            "{host}: wrong host name: expected a certificate for {host}, found one for {}; connect by a name the certificate lists, or pass --insecure to skip verification",
            if presented.is_empty() {
                "no names".to_owned()
            } else {
                presented.join(", ")
            }
        ),
        other => format!("{host}: certificate rejected ({other}); {TRUST_HINT}"),
    }
}

fn alert_failure(host: &str, alert: AlertDescription) -> String {
    match alert {
        AlertDescription::CertificateRequired => format!(
            "{host}: the server requires a client certificate (mTLS), found none sent; pass --client-cert FILE --client-key FILE"
        ),
        AlertDescription::BadCertificate
        | AlertDescription::UnknownCA
        | AlertDescription::CertificateUnknown
        | AlertDescription::AccessDenied => format!(
            "{host}: the server refused this client's certificate ({alert:?}); check --client-cert/--client-key"
        ),
        AlertDescription::NoApplicationProtocol => format!(
            "{host}: expected the server to accept an offered protocol through ALPN, found none accepted; try --http2 auto or off"
        ),
        other => format!("{host}: the server ended the TLS handshake with the alert {other:?}"),
    }
}

/// `YYYY-MM-DD` (UTC) of a Unix time, for an expiry date in a message.
fn unix_date(secs: u64) -> String {
    // Civil-from-days (Howard Hinnant's algorithm), enough for a date in a message.
    let days = (secs / 86_400) as i64;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The first bytes a TLS server sends to a client that spoke plain HTTP to it: an alert or
/// handshake record header.
pub(crate) fn looks_like_tls(first: &[u8]) -> bool {
    matches!(first, [0x15 | 0x16, 0x03, ..])
}

/// What a plain-HTTP connection reports when the server answered with TLS.
pub(crate) fn tls_on_plain_http() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "expected HTTP (http://), found a server that speaks TLS; use an https:// URL",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wrapped(e: TlsError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }

    #[test]
    fn certificate_failures_name_host_expectation_and_flag() {
        let unknown = handshake_failure(
            "h:443",
            &wrapped(TlsError::InvalidCertificate(
                CertificateError::UnknownIssuer,
            )),
        );
        assert_eq!(unknown, format!("h:443: {UNTRUSTED}"));
        let name = handshake_failure(
            "h:443",
            &wrapped(TlsError::InvalidCertificate(
                CertificateError::NotValidForNameContext {
                    expected: rustls_pki_types::ServerName::try_from("h")
                        .map(|n| n.to_owned())
                        .unwrap_or_else(|_| {
                            rustls_pki_types::ServerName::IpAddress(
                                std::net::Ipv4Addr::LOCALHOST.into(),
                            )
                        }),
                    presented: vec!["other.example".into()],
                },
            )),
        );
        assert!(name.contains("found one for other.example"), "{name}");
        let plain = handshake_failure(
            "h:443",
            &wrapped(TlsError::InvalidMessage(
                rustls::InvalidMessage::InvalidContentType,
            )),
        );
        assert!(plain.contains("plain HTTP"), "{plain}");
        let mtls = handshake_failure(
            "h:443",
            &wrapped(TlsError::AlertReceived(
                AlertDescription::CertificateRequired,
            )),
        );
        assert!(mtls.contains("--client-cert"), "{mtls}");
        let eof = handshake_failure("h:443", &io::Error::from(io::ErrorKind::UnexpectedEof));
        assert!(eof.contains("expected a TLS handshake"), "{eof}");
    }

    #[test]
    fn dates_and_tls_records_are_recognised() {
        assert_eq!(unix_date(0), "1970-01-01");
        assert_eq!(unix_date(1_709_251_200), "2024-03-01");
        assert!(looks_like_tls(&[0x15, 0x03, 0x03, 0x00, 0x02]));
        assert!(!looks_like_tls(b"HTTP/1.1 200 OK"));
    }
}
