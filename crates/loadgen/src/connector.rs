//! The client's connector: a TCP connection (stamped, see `crate::stamped`), with TLS on top
//! for `https://`, each new connection's TCP connect and TLS handshake timed apart from the
//! requests that use it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use crate::stamped::{StampedStream, WriteStamp};
use crate::transport::{Http2Mode, Transport};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Bytes decrypted at once (a TLS record holds at most 16 KiB).
const READ_CHUNK: usize = 16 * 1024;

/// One connection the client opened.
#[derive(Debug, Clone, PartialEq)]
pub struct NewConnection {
    pub tcp_connect: Duration,
    /// `None` on plain HTTP.
    pub tls_handshake: Option<Duration>,
    /// `http/1.1`, `h2` (by ALPN) or `h2c` (HTTP/2 with prior knowledge, no TLS).
    pub protocol: &'static str,
    /// `TLSv1.3`, `TLSv1.2`; `None` on plain HTTP.
    pub tls_version: Option<&'static str>,
}

/// The connections a client opened, in order; shared by every clone of its connector.
#[derive(Debug, Clone, Default)]
pub struct ConnectionLog(Arc<Mutex<Vec<NewConnection>>>);

impl ConnectionLog {
    fn push(&self, c: NewConnection) {
        if let Ok(mut v) = self.0.lock() {
            v.push(c);
        }
    }

    /// Every connection opened so far.
    pub fn snapshot(&self) -> Vec<NewConnection> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// Connects to `http://` and `https://` URIs for hyper's pooled client.
#[derive(Debug, Clone)]
pub struct TransportConnector {
    tcp: HttpConnector,
    transport: Transport,
    /// Built on first use (loading the platform's roots takes a while).
    tls: Arc<OnceLock<Result<Arc<ClientConfig>, String>>>,
    log: ConnectionLog,
    /// Connections opened ahead of the requests (to learn the server's protocol, or for the
    /// first burst), handed to the pool as it asks for connections, with when each was opened.
    parked: Arc<Mutex<Vec<(Conn, Instant)>>>,
}

/// A connection opened ahead and not used within this long is closed instead of handed out: a
/// server may drop a connection that carried no request (uvicorn's keep-alive timeout is 5 s),
/// and a request on such a connection would fail as the server's fault.
const PARKED_MAX_AGE: Duration = Duration::from_secs(4);

/// Connections opened ahead at once: a burst's connects would otherwise queue in the accept
/// backlog of the server together.
const OPEN_AHEAD_AT_ONCE: usize = 64;

impl TransportConnector {
    pub fn new(transport: Transport) -> Self {
        let mut tcp = HttpConnector::new();
        tcp.set_nodelay(true);
        tcp.set_keepalive(Some(Duration::from_secs(60)));
        tcp.set_connect_timeout(Some(Duration::from_secs(30)));
        // https URIs reach this connector too; the TLS is added on top.
        tcp.enforce_http(false);
        TransportConnector {
            tcp,
            transport,
            tls: Arc::new(OnceLock::new()),
            log: ConnectionLog::default(),
            parked: Arc::new(Mutex::new(Vec::new())),
        }
    }

    pub fn log(&self) -> &ConnectionLog {
        &self.log
    }

    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// The TLS configuration, built once; an error names the flag or file at fault.
    pub fn tls_config(&self) -> Result<Arc<ClientConfig>, String> {
        self.tls
            .get_or_init(|| self.transport.client_config().map_err(|e| e.to_string()))
            .clone()
    }

    /// Keeps `conn` for the pool's next connect.
    pub(crate) fn park(&self, conn: Conn) {
        if let Ok(mut p) = self.parked.lock() {
            p.push((conn, Instant::now()));
        }
    }

    /// A parked connection young enough to hand out; older ones are dropped (closed).
    fn take_parked(&self) -> Option<Conn> {
        let mut p = self.parked.lock().ok()?;
        while let Some((conn, at)) = p.pop() {
            if at.elapsed() <= PARKED_MAX_AGE {
                return Some(conn);
            }
        }
        None
    }

    /// Connections parked and not yet handed out.
    pub fn parked(&self) -> usize {
        self.parked.lock().map(|p| p.len()).unwrap_or(0)
    }

    /// Opens up to `n` connections to `uri`'s server ahead of the requests that will use
    /// them, `OPEN_AHEAD_AT_ONCE` at a time, and parks them for the pool; returns how many
    /// are parked. A connection that fails to open is left to the request that needs it
    /// (which then meets the failure and records it).
    pub(crate) async fn open_ahead(&self, uri: &Uri, n: usize) -> usize {
        let mut left = n;
        while left > 0 {
            let batch = left.min(OPEN_AHEAD_AT_ONCE);
            left -= batch;
            let mut opens = tokio::task::JoinSet::new();
            for _ in 0..batch {
                let (this, uri) = (self.clone(), uri.clone());
                opens.spawn(async move { this.connect(uri).await });
            }
            let mut failed = false;
            while let Some(r) = opens.join_next().await {
                match r {
                    Ok(Ok(conn)) => self.park(conn),
                    _ => failed = true,
                }
            }
            if failed {
                break;
            }
        }
        self.parked()
    }

    /// Opens a connection to `uri`'s server, or hands out one opened ahead.
    pub(crate) async fn open(&self, uri: Uri) -> Result<Conn, BoxError> {
        if let Some(conn) = self.take_parked() {
            return Ok(conn);
        }
        self.connect(uri).await
    }

    /// Opens a new connection to `uri`'s server.
    async fn connect(&self, uri: Uri) -> Result<Conn, BoxError> {
        let https = uri.scheme_str() == Some("https");
        let authority = uri
            .authority()
            .map(|a| a.as_str().to_owned())
            .unwrap_or_default();
        let host = uri
            .host()
            .unwrap_or_default()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let tls = if https {
            Some(self.tls_config().map_err(|e| -> BoxError { e.into() })?)
        } else {
            None
        };
        let start = Instant::now();
        let tcp = tower_service::Service::<Uri>::call(&mut self.tcp.clone(), uri)
            .await
            .map_err(|e| -> BoxError { format!("{authority}: {}", chain(&e)).into() })?;
        let tcp_connect = start.elapsed();
        let h2c = !https && self.transport.http2 == Http2Mode::On;
        let Some(tls) = tls else {
            let mut stream = StampedStream::new(tcp, false);
            if h2c {
                stream.stop_kernel_stamps();
            }
            stream.stamp().set_opened(tcp_connect, None);
            self.log.push(NewConnection {
                tcp_connect,
                tls_handshake: None,
                protocol: if h2c { "h2c" } else { "http/1.1" },
                tls_version: None,
            });
            return Ok(Conn::Plain {
                stream,
                multiplexed: h2c,
                ready: Instant::now(),
            });
        };
        let name = ServerName::try_from(host.clone()).map_err(|e| -> BoxError {
            format!("{authority}: not a valid TLS server name: {e}").into()
        })?;
        let hs_start = Instant::now();
        let io = TlsConnector::from(tls)
            .connect(name, TokioIo::new(StampedStream::new(tcp, true)))
            .await
            .map_err(|e| -> BoxError {
                crate::tls_errors::handshake_failure(&authority, &e).into()
            })?;
        let tls_handshake = hs_start.elapsed();
        let session = io.get_ref().1;
        let h2 = session.alpn_protocol() == Some(b"h2");
        if self.transport.http2 == Http2Mode::On && !h2 {
            return Err(format!(
                "{authority}: expected HTTP/2 through ALPN (--http2 on), found the server chose {}; use --http2 auto or off",
                match session.alpn_protocol() {
                    Some(p) => String::from_utf8_lossy(p).into_owned(),
                    None => "no protocol (HTTP/1.1)".into(),
                }
            )
            .into());
        }
        let tls_version = session.protocol_version().map(|v| match v {
            rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3",
            rustls::ProtocolVersion::TLSv1_2 => "TLSv1.2",
            _ => "other",
        });
        self.log.push(NewConnection {
            tcp_connect,
            tls_handshake: Some(tls_handshake),
            protocol: if h2 { "h2" } else { "http/1.1" },
            tls_version,
        });
        let conn = TlsConn::new(io, h2);
        if let Some(stamp) = &conn.stamp {
            stamp.set_opened(tcp_connect, Some(tls_handshake));
        }
        Ok(Conn::Tls(Box::new(conn)))
    }
}

impl tower_service::Service<Uri> for TransportConnector {
    type Response = Conn;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Conn, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // HttpConnector is always ready; a clone of it connects.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.open(uri).await })
    }
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        let m = inner.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        src = inner.source();
    }
    s
}

/// A connection handed to hyper: plain or TLS.
#[derive(Debug)]
pub enum Conn {
    Plain {
        stream: StampedStream,
        /// HTTP/2 with prior knowledge: streams share it, so it carries no per-request stamp.
        multiplexed: bool,
        /// When the connection was ready to carry requests.
        ready: Instant,
    },
    Tls(Box<TlsConn>),
}

impl Conn {
    /// Whether the connection speaks HTTP/2.
    pub fn is_h2(&self) -> bool {
        match self {
            Conn::Plain { multiplexed, .. } => *multiplexed,
            Conn::Tls(t) => t.h2,
        }
    }
}

/// A TLS connection over a stamped TCP stream; the request/response stamps are taken on the
/// plaintext here.
#[derive(Debug)]
pub struct TlsConn {
    io: TlsStream<TokioIo<StampedStream>>,
    /// `None` on HTTP/2: its streams share the connection, so a per-connection stamp would
    /// not belong to any one request.
    stamp: Option<WriteStamp>,
    h2: bool,
    /// When the handshake ended and the connection was ready to carry requests.
    ready: Instant,
    scratch: Box<[u8]>,
}

impl TlsConn {
    fn new(mut io: TlsStream<TokioIo<StampedStream>>, h2: bool) -> Self {
        let tcp = io.get_mut().0.inner_mut();
        let stamp = if h2 {
            tcp.stop_kernel_stamps();
            None
        } else {
            Some(tcp.stamp().clone())
        };
        TlsConn {
            io,
            stamp,
            h2,
            ready: Instant::now(),
            scratch: vec![0; READ_CHUNK].into_boxed_slice(),
        }
    }
}

/// On a multiplexed (HTTP/2) connection, which has no per-request write stamp: when it was
/// ready to carry requests. A request cannot go out before it, so the first request of a cold
/// connection counts its connect and handshake as client-side wait, never as TTFT.
#[derive(Debug, Clone, Copy)]
pub struct ConnReady(pub Instant);

impl Connection for Conn {
    fn connected(&self) -> Connected {
        match self {
            Conn::Plain {
                stream,
                multiplexed: false,
                ..
            } => stream.connected(),
            Conn::Plain {
                stream,
                multiplexed: true,
                ready,
            } => stream.tcp_connected().extra(ConnReady(*ready)),
            Conn::Tls(t) => {
                let mut c = t.io.get_ref().0.inner().tcp_connected();
                if t.h2 {
                    c = c.negotiated_h2();
                }
                match &t.stamp {
                    Some(s) => c.extra(s.clone()),
                    None => c.extra(ConnReady(t.ready)),
                }
            }
        }
    }
}

impl Read for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain { stream, .. } => Pin::new(stream).poll_read(cx, buf),
            Conn::Tls(t) => {
                let want = buf.remaining().min(t.scratch.len());
                let mut tbuf = tokio::io::ReadBuf::new(&mut t.scratch[..want]);
                match tokio::io::AsyncRead::poll_read(Pin::new(&mut t.io), cx, &mut tbuf) {
                    Poll::Ready(Ok(())) => {
                        let filled = tbuf.filled();
                        buf.put_slice(filled);
                        if let Some(s) = &t.stamp {
                            s.on_plain_read(filled);
                        }
                        Poll::Ready(Ok(()))
                    }
                    other => other,
                }
            }
        }
    }
}

impl Write for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain { stream, .. } => Pin::new(stream).poll_write(cx, buf),
            Conn::Tls(t) => {
                if let Some(s) = &t.stamp {
                    s.on_write();
                }
                tokio::io::AsyncWrite::poll_write(Pin::new(&mut t.io), cx, buf)
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain { stream, .. } => Pin::new(stream).poll_write_vectored(cx, bufs),
            Conn::Tls(t) => {
                if let Some(s) = &t.stamp {
                    s.on_write();
                }
                tokio::io::AsyncWrite::poll_write_vectored(Pin::new(&mut t.io), cx, bufs)
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Conn::Plain { stream, .. } => stream.is_write_vectored(),
            Conn::Tls(t) => tokio::io::AsyncWrite::is_write_vectored(&t.io),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain { stream, .. } => Pin::new(stream).poll_flush(cx),
            Conn::Tls(t) => tokio::io::AsyncWrite::poll_flush(Pin::new(&mut t.io), cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain { stream, .. } => Pin::new(stream).poll_shutdown(cx),
            Conn::Tls(t) => tokio::io::AsyncWrite::poll_shutdown(Pin::new(&mut t.io), cx),
        }
    }
}
