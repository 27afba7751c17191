//! Kernel receive timestamps: when the bytes of each socket read arrived, not when the client's
//! task got to read them.
//!
//! Under a burst (a thousand streams answered at once on two cores) a task may read its first
//! token tens of milliseconds after the kernel received it; that wait belongs to the client, not
//! to the server's TTFT. Linux stamps every received packet (`SO_TIMESTAMPNS`, software RX stamp,
//! `CLOCK_REALTIME`) and hands the stamp of the newest packet a `recvmsg` consumed back in a
//! control message. Each read is kept here with its stamp until the response body frame made of
//! its bytes is consumed; the frame then takes the read's stamp.
//!
//! **Conversion to the run clock.** The run clock is monotonic (tokio's `Instant`), the stamp is
//! wall-clock time. A read's stamp is converted once, right after the `recvmsg` that returned
//! it, with a paired reading of both clocks taken then: `t = now_mono − (now_wall − rx_wall)`;
//! every frame of the read then takes that instant (no clock read per frame). Only the age of the
//! bytes (usually well under a second) goes through the wall clock, so the error is half the gap
//! between the clock reads (at most 1 µs: `paired_instant` takes the pair again when a
//! preemption split it) plus the wall clock's slew over that age (NTP slews at most 500 ppm:
//! ≤ 0.05 ms per 100 ms of age; 4 ppm measured on the benchmark machine). A wall-clock step during the age would give an
//! impossible time (before the request was written, or in the future): such a stamp is refused
//! and the frame falls back to the user-time stamp.

use std::collections::VecDeque;

use tokio::time::Instant;

/// Keeps the log of one connection small however its response is consumed (an error body
/// read only in part, a response nobody reads).
const MAX_LOGGED_BYTES: usize = 64 * 1024;

/// One socket read and the kernel's receive time of its bytes, on the monotonic clock.
#[derive(Debug)]
struct RxRead {
    at: Instant,
    bytes: Vec<u8>,
}

/// The recent reads of one connection, oldest first, with the consumer's position.
///
/// Body frames are consumed in the order their bytes were read and every frame is a contiguous
/// run of the bytes of one read (hyper decodes the body from what is buffered and reads the
/// socket again only once its buffer is empty), so a frame is found by searching forward from
/// the end of the previous one; the bytes skipped over are the HTTP framing (head, chunk sizes).
#[derive(Debug, Default)]
pub(crate) struct RxLog {
    reads: VecDeque<RxRead>,
    /// Bytes of `reads[0]` already consumed.
    pos: usize,
    logged: usize,
    /// Buffers of consumed reads, reused so a stream allocates only at its start.
    spare: Vec<Vec<u8>>,
}

impl RxLog {
    /// A read of `data` whose newest byte the kernel received at `at`.
    pub(crate) fn push(&mut self, at: Instant, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        while self.logged + data.len() > MAX_LOGGED_BYTES && !self.reads.is_empty() {
            self.drop_front();
        }
        let mut bytes = self.spare.pop().unwrap_or_default();
        bytes.clear();
        bytes.extend_from_slice(data);
        self.logged += bytes.len();
        self.reads.push_back(RxRead { at, bytes });
    }

    /// A read the kernel gave no stamp for: earlier reads cannot hold later frames, so they go.
    pub(crate) fn unstamped(&mut self) {
        while !self.reads.is_empty() {
            self.drop_front();
        }
    }

    fn drop_front(&mut self) {
        if let Some(r) = self.reads.pop_front() {
            self.logged -= r.bytes.len();
            if self.spare.len() < 2 {
                self.spare.push(r.bytes);
            }
        }
        self.pos = 0;
    }

    /// The kernel receive time of the read that delivered `frame`, consuming the log up to the
    /// frame's end; `None` when no logged read holds it (its read had no stamp).
    pub(crate) fn locate(&mut self, frame: &[u8]) -> Option<Instant> {
        if frame.is_empty() {
            return None;
        }
        let mut found = None;
        for (i, r) in self.reads.iter().enumerate() {
            let start = if i == 0 {
                self.pos.min(r.bytes.len())
            } else {
                0
            };
            if let Some(off) = find_after_framing(&r.bytes[start..], frame) {
                found = Some((i, start + off + frame.len(), r.at));
                break;
            }
        }
        let (i, end, at) = found?;
        for _ in 0..i {
            self.drop_front();
        }
        self.pos = end;
        Some(at)
    }
}

/// Bytes of HTTP framing before a body frame that are searched first (a chunk trailer and size
/// line are a few bytes): almost every frame starts there.
const FRAMING_PROBE: usize = 24;

/// Where `frame` starts in `hay`: almost always right after a few framing bytes.
///
/// Candidates are the positions of the frame's first byte, each checked by direct comparison.
/// A general substring search (`memmem`) would first build a searcher from the whole frame,
/// which for the 16 KiB frames of a fast stream cost more than the rest of its handling; a
/// frame can start past the probe only after a response head, once per response.
#[inline]
fn find_after_framing(hay: &[u8], frame: &[u8]) -> Option<usize> {
    let first = *frame.first()?;
    // Every start at or before `hay.len() - frame.len()` could hold the frame; none after.
    let last_start = hay.len().checked_sub(frame.len())?;
    let probe = &hay[..=last_start.min(FRAMING_PROBE)];
    for off in memchr::memchr_iter(first, probe) {
        if hay[off..].starts_with(frame) {
            return Some(off);
        }
    }
    if last_start <= FRAMING_PROBE {
        return None;
    }
    let rest = &hay[FRAMING_PROBE + 1..=last_start];
    memchr::memchr_iter(first, rest)
        .map(|off| off + FRAMING_PROBE + 1)
        .find(|&off| hay[off..].starts_with(frame))
}

/// The age of bytes the kernel received at `rx_wall_ns` (Unix ns), at `now_wall_ns`; `None`
/// for a stamp from the future (the wall clock stepped back) or the zero stamp.
pub(crate) fn age_ns(rx_wall_ns: u64, now_wall_ns: u64) -> Option<u64> {
    if rx_wall_ns == 0 {
        return None;
    }
    now_wall_ns.checked_sub(rx_wall_ns)
}

/// A kernel stamp (Unix ns) as an instant of the monotonic clock, converted with a paired
/// reading of both clocks taken now: once per read, right after the read returned it.
/// `None` for a stamp from the future (the wall clock stepped back).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn kernel_to_instant(rx_wall_ns: u64) -> Option<Instant> {
    let (now, wall) = paired_instant();
    now.checked_sub(std::time::Duration::from_nanos(age_ns(rx_wall_ns, wall)?))
}

/// A read's receive instant on the run clock, refused when it lies before `floor_run_ns` (when
/// the request started to be written) or before the run itself: a wall-clock step forward
/// during the bytes' age would put it there.
#[inline]
pub(crate) fn instant_to_run(
    clock: &crate::clock::RunClock,
    at: Instant,
    floor_run_ns: u64,
) -> Option<u64> {
    let since = at.checked_duration_since(clock.start())?;
    let t = u64::try_from(since.as_nanos()).unwrap_or(u64::MAX);
    (t >= floor_run_ns).then_some(t)
}

/// Kernel stamps unless `SERVEBENCH_RX_STAMPS=off` (to compare with read-time stamps).
#[cfg(target_os = "linux")]
pub(crate) fn wanted() -> bool {
    static WANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WANTED.get_or_init(|| std::env::var_os("SERVEBENCH_RX_STAMPS").is_none_or(|v| v != "off"))
}

/// The monotonic clock and the wall clock read together: `(now, Unix ns)`. A thread preempted
/// between the two reads would shift every converted stamp by the preemption, so the monotonic
/// clock is read on both sides and the pair is taken again when they lie more than 2 µs apart.
/// If it keeps failing, the wall reading is paired with the later monotonic reading, which can
/// only make a converted stamp later, never earlier than the bytes arrived.
pub(crate) fn paired_instant() -> (Instant, u64) {
    const PAIR_GAP: std::time::Duration = std::time::Duration::from_micros(2);
    let mut pair = None;
    for _ in 0..3 {
        let before = Instant::now();
        let wall = wall_now_ns();
        let after = Instant::now();
        let gap = after.saturating_duration_since(before);
        if gap <= PAIR_GAP {
            return (before + gap / 2, wall);
        }
        pair = Some((after, wall));
    }
    pair.unwrap_or_else(|| (Instant::now(), wall_now_ns()))
}

/// Unix ns now (the clock the kernel stamps with).
pub(crate) fn wall_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(target_os = "linux")]
mod sys {
    use std::io;
    use std::io::IoSliceMut;
    use std::os::fd::AsRawFd;

    use nix::sys::socket::{
        recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, SockaddrStorage,
    };
    use nix::sys::time::TimeSpec;
    use tokio::net::TcpStream;

    /// Asks the kernel to stamp what this socket receives; false where it refuses.
    pub(crate) fn enable(tcp: &TcpStream) -> bool {
        setsockopt(tcp, sockopt::ReceiveTimestampns, &true).is_ok()
    }

    /// Control-message space for one `SCM_TIMESTAMPNS`.
    pub(crate) fn cmsg_buffer() -> Vec<u8> {
        nix::cmsg_space!(TimeSpec)
    }

    /// One non-blocking `recvmsg` into `buf`: the bytes read and the kernel's receive time of
    /// the newest of them (Unix ns) when it gave one.
    pub(crate) fn recv(
        tcp: &TcpStream,
        buf: &mut [u8],
        cmsg: &mut [u8],
    ) -> io::Result<(usize, Option<u64>)> {
        let mut iov = [IoSliceMut::new(buf)];
        let msg = recvmsg::<SockaddrStorage>(
            tcp.as_raw_fd(),
            &mut iov,
            Some(cmsg),
            MsgFlags::MSG_DONTWAIT,
        )
        .map_err(io::Error::from)?;
        let mut stamp = None;
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                if let ControlMessageOwned::ScmTimestampns(ts) = c {
                    stamp = super::timespec_ns(ts.tv_sec(), ts.tv_nsec());
                }
            }
        }
        Ok((msg.bytes, stamp))
    }
}

#[cfg(target_os = "linux")]
pub(crate) use sys::{cmsg_buffer, enable, recv};

/// A `timespec` as Unix ns; `None` for the zero stamp (the kernel had none) or a negative one.
pub(crate) fn timespec_ns(sec: i64, nsec: i64) -> Option<u64> {
    if sec <= 0 || !(0..1_000_000_000).contains(&nsec) {
        return None;
    }
    u64::try_from(sec)
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(u64::try_from(nsec).ok()?)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Instants `n` µs after one origin, standing for the reads' receive times.
    fn at(n: u64) -> Instant {
        static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *ORIGIN.get_or_init(Instant::now) + std::time::Duration::from_micros(n)
    }

    #[test]
    fn frames_take_the_stamp_of_the_read_that_delivered_them() {
        let mut log = RxLog::default();
        log.push(
            at(100),
            b"HTTP/1.1 200 OK\r\n\r\n1a\r\ndata: {\"t\":\"a\"}\n\n\r\n",
        );
        log.push(
            at(200),
            b"1a\r\ndata: {\"t\":\"a\"}\n\n\r\n1a\r\ndata: {\"t\":\"b\"}\n\n\r\n",
        );
        let frame_a = b"data: {\"t\":\"a\"}\n\n";
        let frame_b = b"data: {\"t\":\"b\"}\n\n";
        // The same bytes twice: the second copy is found after the first.
        assert_eq!(log.locate(frame_a), Some(at(100)));
        assert_eq!(log.locate(frame_a), Some(at(200)));
        assert_eq!(log.locate(frame_b), Some(at(200)));
        // Consumed: nothing left that holds it.
        assert_eq!(log.locate(frame_b), None);
    }

    #[test]
    fn frames_are_found_right_after_framing_and_far_into_a_read() {
        assert_eq!(
            find_after_framing(b"\r\n1a\r\ndata: x", b"data: x"),
            Some(6)
        );
        let mut far = vec![b'h'; 300];
        far.extend_from_slice(b"data: x");
        assert_eq!(find_after_framing(&far, b"data: x"), Some(300));
        assert_eq!(find_after_framing(b"data: y", b"data: x"), None);
        assert_eq!(find_after_framing(b"data", b"data: x"), None);
    }

    /// Every start position is found, on both sides of the probed bytes, and a frame is
    /// found at its first occurrence; a frame longer than what is left is not.
    #[test]
    fn frames_are_found_at_every_offset_and_at_their_first_occurrence() {
        let frame = b"data: {\"t\":\"x\"}\n\n";
        for off in 0..80 {
            let mut hay = vec![b'd'; off];
            hay.extend_from_slice(frame);
            hay.extend_from_slice(b"\r\n");
            assert_eq!(find_after_framing(&hay, frame), Some(off), "offset {off}");
            hay.truncate(off + frame.len() - 1);
            assert_eq!(find_after_framing(&hay, frame), None, "cut at {off}");
        }
        let mut twice = b"1a\r\n".to_vec();
        twice.extend_from_slice(frame);
        twice.extend_from_slice(frame);
        assert_eq!(find_after_framing(&twice, frame), Some(4));
        assert_eq!(find_after_framing(frame, frame), Some(0));
        assert_eq!(find_after_framing(b"", frame), None);
        assert_eq!(find_after_framing(frame, b""), None);
        // A 16 KiB frame after a response head.
        let big = vec![b'z'; 16 * 1024];
        let mut hay = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4000\r\n".to_vec();
        let at = hay.len();
        hay.extend_from_slice(&big);
        assert_eq!(find_after_framing(&hay, &big), Some(at));
    }

    #[test]
    fn a_frame_of_an_unstamped_read_is_not_found() {
        let mut log = RxLog::default();
        log.push(at(100), b"xxdata: 1\n\n");
        log.unstamped();
        assert_eq!(log.locate(b"data: 2\n\n"), None);
        assert_eq!(log.locate(b"data: 1\n\n"), None);
    }

    #[test]
    fn the_log_stays_bounded() {
        let mut log = RxLog::default();
        let read = vec![b'x'; 10_000];
        for i in 0..100 {
            log.push(at(i), &read);
        }
        assert!(log.logged <= MAX_LOGGED_BYTES);
        assert!(log.reads.len() <= MAX_LOGGED_BYTES / read.len());
        assert_eq!(log.reads.back().unwrap().at, at(99));
    }

    #[test]
    fn conversion_subtracts_the_age_of_the_bytes() {
        // Received at wall 1_000, read at wall 1_300: 300 ns old.
        assert_eq!(age_ns(1_000, 1_300), Some(300));
        // From the future (the wall clock stepped back): refused.
        assert_eq!(age_ns(1_400, 1_300), None);
        // The zero stamp is no stamp.
        assert_eq!(age_ns(0, 1_300), None);
        // A stamp 5 ms old is an instant 5 ms ago (give or take the pairing of the clocks).
        let before = Instant::now();
        let t = kernel_to_instant(wall_now_ns() - 5_000_000).unwrap();
        let after = Instant::now();
        assert!(t <= after - std::time::Duration::from_micros(4_990));
        assert!(t + std::time::Duration::from_micros(5_010) >= before);
        // From the future: refused.
        assert_eq!(kernel_to_instant(wall_now_ns() + 1_000_000_000), None);
    }

    #[test]
    fn run_clock_stamps_before_the_write_or_the_run_are_refused() {
        let clock = crate::clock::RunClock::starting_at(at(1_000));
        // 4.7 µs into the run.
        assert_eq!(
            instant_to_run(&clock, at(1_004) + std::time::Duration::from_nanos(700), 0),
            Some(4_700)
        );
        // Before the request was written (the wall clock stepped forward): refused.
        assert_eq!(instant_to_run(&clock, at(1_004), 4_800), None);
        // Older than the run itself: refused.
        assert_eq!(instant_to_run(&clock, at(999), 0), None);
    }

    #[test]
    fn timespecs_convert_and_the_zero_stamp_is_none() {
        assert_eq!(timespec_ns(1, 5), Some(1_000_000_005));
        assert_eq!(timespec_ns(0, 0), None);
        assert_eq!(timespec_ns(-1, 0), None);
        assert_eq!(timespec_ns(1, 1_000_000_000), None);
    }

    /// The kernel's stamp is the receive time, not the read time: bytes read 50 ms after they
    /// arrived carry a stamp from before the wait.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn recvmsg_returns_the_kernel_receive_time() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::net::TcpStream::connect(addr).await.unwrap();
        assert!(enable(&client));
        let (mut server, _) = listener.accept().await.unwrap();
        // The kernel turns stamping on for the whole system shortly after the first socket
        // asks (deferred work): packets before that carry none.
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let written = wall_now_ns();
        server.write_all(b"hello").await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        client.readable().await.unwrap();
        let mut buf = [0u8; 16];
        let mut cmsg = cmsg_buffer();
        let (n, stamp) = recv(&client, &mut buf, &mut cmsg).unwrap();
        let read = wall_now_ns();
        assert_eq!(&buf[..n], b"hello");
        let stamp = stamp.expect("a kernel stamp");
        assert!(stamp >= written, "stamp {stamp} before the write {written}");
        assert!(
            read - stamp >= 40_000_000,
            "the stamp is the arrival, ≥ 40 ms before the read: {} ns",
            read - stamp
        );
        assert!(
            stamp - written < 20_000_000,
            "the stamp is ~the write: {} ns later",
            stamp - written
        );
    }
}
