//! Token arrivals are stamped with the kernel's receive time of their bytes, not with when the
//! client's task got to read them: a client busy for 100 ms after a token arrived still records
//! the token at its arrival.

#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use servebench_loadgen::{ApiKind, BackendClient, ClientOptions, RunClock, StopSignal, Target};
use servebench_metrics::StampClock;

const HEAD: &str =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
const FIRST: &str =
    "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":null}]}\n\n";
const REST: &str = concat!(
    "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\" b\",\"finish_reason\":\"length\"}]}\n\n",
    "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2,\"total_tokens\":6}}\n\n",
    "data: [DONE]\n\n",
);
/// How long the client's only thread is kept busy right after the first token was written.
const BUSY: Duration = Duration::from_millis(100);

fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn chunk(s: &str) -> String {
    format!("{:x}\r\n{s}\r\n", s.len())
}

/// A blocking one-request server on its own thread: sends the head, waits until the client's
/// thread is busy, writes the first token (returning its wall-clock write time), and the rest
/// once the client is free again.
fn server(
    head_sent: Arc<AtomicBool>,
    client_busy: Arc<AtomicBool>,
) -> (String, std::thread::JoinHandle<u64>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = std::thread::spawn(move || {
        let (mut sock, _) = listener.accept().unwrap();
        sock.set_nodelay(true).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        // The request: headers and a small JSON body ending in '}'.
        while !(got.windows(4).any(|w| w == b"\r\n\r\n") && got.ends_with(b"}")) {
            let n = sock.read(&mut buf).unwrap();
            assert!(n > 0, "the client closed early");
            got.extend_from_slice(&buf[..n]);
        }
        sock.write_all(HEAD.as_bytes()).unwrap();
        head_sent.store(true, Ordering::SeqCst);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !client_busy.load(Ordering::SeqCst) {
            assert!(
                std::time::Instant::now() < deadline,
                "the client never got busy"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(5));
        let written = wall_ns();
        sock.write_all(chunk(FIRST).as_bytes()).unwrap();
        std::thread::sleep(BUSY + Duration::from_millis(50));
        sock.write_all(format!("{}0\r\n\r\n", chunk(REST)).as_bytes())
            .unwrap();
        // Closing after the last bytes is fine: the client reads what was sent before the FIN.
        written
    });
    (format!("http://{addr}"), handle)
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "current_thread")]
async fn a_busy_client_still_stamps_a_token_at_its_arrival() {
    let head_sent = Arc::new(AtomicBool::new(false));
    let client_busy = Arc::new(AtomicBool::new(false));
    let (base, srv) = server(Arc::clone(&head_sent), Arc::clone(&client_busy));
    let target = Target {
        base_url: base,
        endpoint: "/v1/completions".into(),
        api: ApiKind::Completions,
        model: "m".into(),
        headers: vec![],
        api_key: None,
        extra_body: serde_json::Map::new(),
        ignore_eos: true,
        transport: Default::default(),
    };
    let client = BackendClient::new(target, ClientOptions::default()).unwrap();
    let prepared = client.prepare(0, "p", 4, Some(2));
    // A paired reading of the run clock and the wall clock, to put the record on the wall.
    let clock = RunClock::start_now();
    let wall0 = wall_ns();
    // Blocks the runtime's only thread (and so every task reading the response) as soon as
    // the server has answered with its head.
    let blocker = tokio::spawn(async move {
        while !head_sent.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        client_busy.store(true, Ordering::SeqCst);
        std::thread::sleep(BUSY);
    });
    let rec = client
        .execute(&clock, &prepared, 0, 0, false, &StopSignal::never())
        .await;
    blocker.await.unwrap();
    let written = srv.join().unwrap();
    assert!(rec.failure.is_none(), "{:?}", rec.failure);
    assert_eq!(rec.stamp_clock, Some(StampClock::KernelRx));
    let first = wall0 + rec.first_token.unwrap();
    let late_ms = (first as f64 - written as f64) / 1e6;
    // Read no earlier than 95 ms after the write: a read-time stamp would be that late. The
    // bound leaves 65 ms for a loaded machine and the pairing of the clocks (µs).
    assert!(
        late_ms > -5.0 && late_ms < 30.0,
        "first token stamped {late_ms:.3} ms after it was written"
    );
    assert_eq!(rec.events.len(), 2);
    assert!(rec.events[1].t > rec.events[0].t);
}
