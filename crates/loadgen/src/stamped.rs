//! A connector whose connections note when each request's bytes start going out, so `sent` is
//! taken "just before the request is written to the connection" (docs/metrics.md) rather than before
//! the client had the CPU, the pooled connection or the socket to write it. Under a burst of a
//! thousand simultaneous requests on two cores that difference is tens of milliseconds, and it
//! belongs to the client (queue time), not to the server's TTFT.
//!
//! The same connections read through `recvmsg` where the kernel stamps received bytes
//! (`crate::rxstamp`), so each response body frame can be stamped with when its bytes arrived
//! rather than when the client's task got to them.
//!
//! Under TLS the same stream carries the ciphertext: it keeps only the kernel stamp of its
//! newest read, and the TLS layer above (`crate::connector`) does the request/response
//! stamping on the plaintext, giving each decrypted read the stamp of the newest TCP read
//! that went into it (a TLS record is decrypted only once its last byte arrived).

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::rxstamp::RxLog;

#[derive(Debug, Default)]
struct StampState {
    /// The next write starts a new request (set at connect and by every read).
    armed: bool,
    first_write: Option<Instant>,
    /// Response bytes read on this connection so far.
    read_bytes: u64,
    /// `read_bytes` when the latest request started to be written.
    read_at_write: u64,
    /// Recent reads with their kernel receive times.
    rx: RxLog,
    /// Under TLS: the kernel stamp of the newest TCP read (`None` when it had none).
    latest_rx: Option<Instant>,
    /// Where the latest request's time went (its last write, its answer's first byte), and
    /// what opening the connection cost.
    phases: ConnPhases,
}

/// What a connection knows of its latest request's phases: a few instants and counts, kept
/// in the state every write and read already locks (no allocation, no extra system call).
#[derive(Debug, Default, Clone, Copy)]
pub struct ConnPhases {
    /// Requests begun on this connection, the latest included.
    pub requests: u32,
    /// When the latest request's last write was handed to the socket.
    pub last_write: Option<Instant>,
    /// When the first byte of its answer arrived (the kernel's receive time where stamped).
    pub first_read: Option<Instant>,
    /// The connection's TCP connect and TLS handshake.
    pub connect: Option<std::time::Duration>,
    pub handshake: Option<std::time::Duration>,
}

/// Shared with every response of the connection (through the response extensions).
#[derive(Debug, Clone, Default)]
pub struct WriteStamp(Arc<Mutex<StampState>>);

impl WriteStamp {
    fn new() -> Self {
        WriteStamp(Arc::new(Mutex::new(StampState {
            armed: true,
            first_write: None,
            read_bytes: 0,
            read_at_write: 0,
            rx: RxLog::default(),
            latest_rx: None,
            phases: ConnPhases::default(),
        })))
    }

    /// Notes what opening the connection took (at connect, before any request).
    pub(crate) fn set_opened(
        &self,
        connect: std::time::Duration,
        handshake: Option<std::time::Duration>,
    ) {
        if let Ok(mut s) = self.0.lock() {
            s.phases.connect = Some(connect);
            s.phases.handshake = handshake;
        }
    }

    /// The latest request's first write and phases, read together.
    pub fn phases(&self) -> (Option<Instant>, ConnPhases) {
        self.0
            .lock()
            .map(|s| (s.first_write, s.phases))
            .unwrap_or_default()
    }

    /// When the latest request on this connection started to be written.
    pub fn first_write(&self) -> Option<Instant> {
        self.0.lock().ok().and_then(|s| s.first_write)
    }

    /// Did the latest request go out on a connection that had already answered an earlier
    /// one, and get no byte of its own answer? Only such a request may be sent again: the
    /// server closed a pooled connection it had advertised as reusable, and never read it.
    pub fn reused_and_unanswered(&self) -> bool {
        let Ok(s) = self.0.lock() else {
            return false;
        };
        if s.armed {
            // Nothing of this request was written since the last response bytes.
            s.read_bytes > 0
        } else {
            s.read_at_write > 0 && s.read_bytes == s.read_at_write
        }
    }

    /// The kernel's receive time of the bytes of a response body frame read on this
    /// connection, on the monotonic clock; `None` where the read that delivered them had none.
    /// Frames must be asked for in the order they were received.
    pub fn rx_at(&self, frame: &[u8]) -> Option<Instant> {
        self.0.lock().ok().and_then(|mut s| s.rx.locate(frame))
    }

    pub(crate) fn on_write(&self) {
        if let Ok(mut s) = self.0.lock() {
            let now = Instant::now();
            if s.armed {
                s.armed = false;
                s.first_write = Some(now);
                s.read_at_write = s.read_bytes;
                s.phases.requests = s.phases.requests.saturating_add(1);
                s.phases.first_read = None;
            }
            s.phases.last_write = Some(now);
        }
    }

    /// Under TLS: a TCP read of ciphertext, with its kernel stamp.
    fn on_cipher_read(&self, n: usize, rx: Option<Instant>) {
        if n == 0 {
            return;
        }
        if let Ok(mut s) = self.0.lock() {
            s.latest_rx = rx;
        }
    }

    /// Under TLS: `data` was decrypted; it arrived with the newest TCP read so far.
    pub(crate) fn on_plain_read(&self, data: &[u8]) {
        let rx = self.0.lock().ok().and_then(|s| s.latest_rx);
        self.on_read(data, rx);
    }

    /// `data` was read; the kernel received its newest byte at `rx`.
    fn on_read(&self, data: &[u8], rx: Option<Instant>) {
        // An end of stream (0 bytes) is no answer and does not start a new request.
        if data.is_empty() {
            return;
        }
        if let Ok(mut s) = self.0.lock() {
            if !s.armed && s.phases.first_read.is_none() {
                // The answer's first byte: its kernel stamp, else now (once per request).
                s.phases.first_read = Some(rx.unwrap_or_else(Instant::now));
            }
            s.armed = true;
            s.read_bytes += data.len() as u64;
            match rx {
                Some(at) => s.rx.push(at, data),
                None => s.rx.unstamped(),
            }
        }
    }
}

/// A TCP connection that stamps its writes.
#[derive(Debug)]
pub struct StampedStream {
    inner: TokioIo<TcpStream>,
    stamp: WriteStamp,
    /// Reads land here first so their size is known without unsafe buffer handling.
    scratch: Box<[u8]>,
    /// Control-message space for the kernel's receive stamp; empty where reads are unstamped.
    cmsg: Vec<u8>,
    /// The stream carries TLS: requests and responses are stamped by the layer above.
    under_tls: bool,
    /// Plain HTTP: the first bytes of the answer were checked for a TLS record.
    checked_first: bool,
}

impl StampedStream {
    /// A connected TCP stream, with kernel receive stamps where the platform has them.
    pub(crate) fn new(inner: TokioIo<TcpStream>, under_tls: bool) -> Self {
        let cmsg = kernel_stamps(inner.inner());
        StampedStream {
            inner,
            stamp: WriteStamp::new(),
            scratch: vec![0; READ_CHUNK].into_boxed_slice(),
            cmsg,
            under_tls,
            checked_first: under_tls,
        }
    }

    pub(crate) fn stamp(&self) -> &WriteStamp {
        &self.stamp
    }

    /// Reads go on unstamped (a multiplexed connection's frames cannot be told apart by
    /// request, so the kernel's stamps would go unused).
    pub(crate) fn stop_kernel_stamps(&mut self) {
        self.cmsg = Vec::new();
    }

    /// The socket's own connection info (the pool's view of the peer).
    pub(crate) fn tcp_connected(&self) -> Connected {
        self.inner.connected()
    }

    fn on_read(&mut self, filled: &[u8], rx: Option<Instant>) -> io::Result<()> {
        if self.under_tls {
            self.stamp.on_cipher_read(filled.len(), rx);
            return Ok(());
        }
        if !self.checked_first && !filled.is_empty() {
            self.checked_first = true;
            if crate::tls_errors::looks_like_tls(filled) {
                return Err(crate::tls_errors::tls_on_plain_http());
            }
        }
        self.stamp.on_read(filled, rx);
        Ok(())
    }
}

/// Bytes read from the socket at once (hyper's own read buffer starts at 8 KiB).
const READ_CHUNK: usize = 16 * 1024;

impl Connection for StampedStream {
    fn connected(&self) -> Connected {
        self.inner.connected().extra(self.stamp.clone())
    }
}

impl Read for StampedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let want = buf.remaining().min(this.scratch.len());
        #[cfg(target_os = "linux")]
        if !this.cmsg.is_empty() {
            loop {
                let tcp = this.inner.inner();
                std::task::ready!(tcp.poll_read_ready(cx))?;
                let dst = &mut this.scratch[..want];
                let cmsg = &mut this.cmsg;
                match tcp.try_io(tokio::io::Interest::READABLE, || {
                    crate::rxstamp::recv(tcp, dst, cmsg)
                }) {
                    Ok((n, rx)) => {
                        // Converted here, once per read and before any lock is taken, so a
                        // wait between the two clock readings cannot shift the stamp.
                        let rx = rx.and_then(crate::rxstamp::kernel_to_instant);
                        let mut scratch = std::mem::take(&mut this.scratch);
                        let filled = &scratch[..n];
                        buf.put_slice(filled);
                        let r = this.on_read(filled, rx);
                        std::mem::swap(&mut this.scratch, &mut scratch);
                        return Poll::Ready(r);
                    }
                    // Readiness was stale (`try_io` cleared it) or a signal interrupted.
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                        ) => {}
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
        }
        let mut tbuf = tokio::io::ReadBuf::new(&mut this.scratch[..want]);
        match tokio::io::AsyncRead::poll_read(Pin::new(this.inner.inner_mut()), cx, &mut tbuf) {
            Poll::Ready(Ok(())) => {
                let n = tbuf.filled().len();
                let mut scratch = std::mem::take(&mut this.scratch);
                let filled = &scratch[..n];
                buf.put_slice(filled);
                let r = this.on_read(filled, None);
                std::mem::swap(&mut this.scratch, &mut scratch);
                Poll::Ready(r)
            }
            other => other,
        }
    }
}

impl Write for StampedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !this.under_tls {
            this.stamp.on_write();
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !this.under_tls {
            this.stamp.on_write();
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Turns on the kernel's receive stamps for `tcp`: the control-message space to read them
/// with, or nothing (plain reads, user-time stamps) where the platform has none.
#[cfg(target_os = "linux")]
fn kernel_stamps(tcp: &TcpStream) -> Vec<u8> {
    if crate::rxstamp::wanted() && crate::rxstamp::enable(tcp) {
        crate::rxstamp::cmsg_buffer()
    } else {
        Vec::new()
    }
}

#[cfg(not(target_os = "linux"))]
fn kernel_stamps(_tcp: &TcpStream) -> Vec<u8> {
    Vec::new()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::Full;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn every_response_carries_the_write_time_of_its_own_request() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 4096];
            // Two requests on one keep-alive connection.
            for _ in 0..2 {
                let _ = sock.read(&mut buf).await.unwrap();
                sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    .await
                    .unwrap();
            }
        });
        let client = crate::client::http_client();
        let mut stamps = Vec::new();
        for _ in 0..2 {
            let before = Instant::now();
            let req = http::Request::post(format!("http://{addr}/"))
                .body(Full::new(Bytes::from_static(b"{}")))
                .unwrap();
            let resp = client.request(req).await.unwrap();
            let t = resp
                .extensions()
                .get::<WriteStamp>()
                .and_then(WriteStamp::first_write)
                .unwrap();
            assert!(t >= before && t <= Instant::now());
            stamps.push(t);
            // Let the pooled connection become idle before reusing it.
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(
            stamps[1] > stamps[0],
            "the second request has its own stamp"
        );
    }
}
