//! Where a request's time went: each record carries its connection's clock points (connect,
//! last byte written, the answer's first byte, its headers) in order, with the connect on the
//! connection's first request only and reuse marked on the next.

#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::time::Duration;

use servebench_loadgen::{ApiKind, BackendClient, ClientOptions, RunClock, StopSignal, Target};

const HEAD: &str =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
const BODY: &str = concat!(
    "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"text\":\" b\",\"finish_reason\":\"length\"}]}\n\n",
    "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2,\"total_tokens\":6}}\n\n",
    "data: [DONE]\n\n",
);
/// The server's wait before its head (queue), and between its head and the first token.
const BEFORE_HEAD: Duration = Duration::from_millis(30);
const BEFORE_TOKEN: Duration = Duration::from_millis(40);

fn chunk(s: &str) -> String {
    format!("{:x}\r\n{s}\r\n", s.len())
}

/// A keep-alive server answering `n` requests on its one connection.
fn server(n: usize) -> (String, std::thread::JoinHandle<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = std::thread::spawn(move || {
        let (mut sock, _) = listener.accept().unwrap();
        sock.set_nodelay(true).unwrap();
        let mut buf = [0u8; 4096];
        for _ in 0..n {
            let mut got = Vec::new();
            while !(got.windows(4).any(|w| w == b"\r\n\r\n") && got.ends_with(b"}")) {
                let k = sock.read(&mut buf).unwrap();
                assert!(k > 0, "the client closed early");
                got.extend_from_slice(&buf[..k]);
            }
            std::thread::sleep(BEFORE_HEAD);
            sock.write_all(HEAD.as_bytes()).unwrap();
            std::thread::sleep(BEFORE_TOKEN);
            sock.write_all(format!("{}0\r\n\r\n", chunk(BODY)).as_bytes())
                .unwrap();
        }
    });
    (format!("http://{addr}"), handle)
}

#[tokio::test]
async fn each_record_has_its_phases_in_order_and_the_second_reuses_the_connection() {
    let (base, srv) = server(2);
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
    let clock = RunClock::start_now();
    let mut records = Vec::new();
    for id in 0..2 {
        let p = client.prepare(id, "p", 4, Some(2));
        let rec = client
            .execute(&clock, &p, 0, 0, false, &StopSignal::never())
            .await;
        assert!(rec.failure.is_none(), "{:?}", rec.failure);
        records.push(rec);
    }
    srv.join().unwrap();
    let ms = |ns: u64| ns as f64 / 1e6;
    for (i, r) in records.iter().enumerate() {
        let p = r.phases.expect("phases");
        let first_token = r.first_token.unwrap();
        assert!(r.started.unwrap() <= r.sent, "{i}: {r:?}");
        assert!(r.sent <= p.written, "{i}: {p:?}");
        assert!(p.written < p.first_byte, "{i}: {p:?}");
        assert!(p.first_byte <= p.headers, "{i}: {p:?}");
        assert!(p.headers <= first_token, "{i}: {p:?}");
        // The server's wait before its head lies between the last write and the first byte;
        // its wait before the token, between the headers and the first token.
        assert!(
            ms(p.first_byte - p.written) >= 25.0,
            "{i}: first byte {:.1} ms after the write",
            ms(p.first_byte - p.written)
        );
        assert!(
            ms(first_token - p.headers) >= 30.0,
            "{i}: first token {:.1} ms after the headers",
            ms(first_token - p.headers)
        );
    }
    let (a, b) = (records[0].phases.unwrap(), records[1].phases.unwrap());
    assert_eq!(a.reused, Some(false));
    assert!(a.connect_ns > 0, "{a:?}");
    assert_eq!(a.tls_ns, 0, "plain HTTP: no handshake");
    assert_eq!(b.reused, Some(true));
    assert_eq!(
        b.connect_ns, 0,
        "a reused connection has no connect of its own"
    );

    let s = servebench_metrics::phase_summary(&records).unwrap();
    assert_eq!((s.requests, s.reused, s.new_connections), (2, 1, 1));
    assert_eq!(s.connect.n, 1);
    assert!(s.first_token.p50_ms.unwrap() >= 30.0);
    // The record file keeps them.
    let line = serde_json::to_value(&records[1]).unwrap();
    assert_eq!(line["phases"]["reused"], true);
    assert!(line["phases"].get("connect_ns").is_none());
}
