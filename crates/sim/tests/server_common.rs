//! A tiny raw HTTP/1.1 client for the server tests: it records when each HTTP chunk and each
//! SSE event arrived, which a general-purpose client would hide.
#![allow(dead_code)]
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use servebench_sim::{spawn_in_process, ShutdownHandle, SimArgs};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// A running simulator.
pub struct Sim {
    pub addr: SocketAddr,
    pub handle: ShutdownHandle,
}

/// Starts a simulator from a `servebench sim` argument string.
pub async fn start(spec: &str) -> Sim {
    let sim = SimArgs::parse_spec(spec).unwrap().resolve().unwrap();
    let (addr, handle) = spawn_in_process(sim).await.unwrap();
    Sim { addr, handle }
}

/// One SSE event with its arrival time and the HTTP chunk it came in.
#[derive(Debug, Clone)]
pub struct Event {
    pub data: String,
    pub at: Instant,
    pub chunk: usize,
}

impl Event {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("{e}: {}", self.data))
    }
}

/// A complete response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub events: Vec<Event>,
    /// When the request was sent.
    pub sent: Instant,
    /// The connection failed mid-body (an aborted chunked body).
    pub truncated: bool,
}

impl Response {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.text()))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `data:` payloads that are JSON (everything but `[DONE]`).
    pub fn json_events(&self) -> Vec<serde_json::Value> {
        self.events
            .iter()
            .filter(|e| e.data != "[DONE]")
            .map(Event::json)
            .collect()
    }

    pub fn done(&self) -> bool {
        self.events.last().is_some_and(|e| e.data == "[DONE]")
    }
}

/// An open connection whose response is read incrementally.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    pub sent: Instant,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl Conn {
    /// Sends a request (`Connection: close`).
    pub async fn send(addr: SocketAddr, method: &str, path: &str, body: Option<&str>) -> Conn {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        let body = body.unwrap_or("");
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(req.as_bytes()).await.unwrap();
        Conn {
            stream,
            buf: Vec::new(),
            sent: Instant::now(),
        }
    }

    /// Reads more bytes; false at EOF or on a reset connection.
    async fn fill(&mut self) -> bool {
        let mut tmp = [0u8; 16384];
        match self.stream.read(&mut tmp).await {
            Ok(0) | Err(_) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&tmp[..n]);
                true
            }
        }
    }

    /// Reads the status line and headers.
    pub async fn head(&mut self) -> (u16, Vec<(String, String)>) {
        let end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i;
            }
            assert!(self.fill().await, "connection closed before the headers");
        };
        let head = String::from_utf8(self.buf[..end].to_vec()).unwrap();
        self.buf.drain(..end + 4);
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        (status, headers)
    }

    /// Reads the next HTTP chunk of a chunked body; `Err(())` when the connection died first,
    /// `Ok(None)` at the terminating chunk.
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>, ()> {
        loop {
            if let Some(i) = find(&self.buf, b"\r\n") {
                let size_line = String::from_utf8_lossy(&self.buf[..i]).to_string();
                let size =
                    usize::from_str_radix(size_line.split(';').next().unwrap().trim(), 16).unwrap();
                if self.buf.len() >= i + 2 + size + 2 {
                    let data = self.buf[i + 2..i + 2 + size].to_vec();
                    self.buf.drain(..i + 2 + size + 2);
                    return Ok(if size == 0 { None } else { Some(data) });
                }
            }
            if !self.fill().await {
                return Err(());
            }
        }
    }

    /// Reads the whole response, splitting SSE events as they arrive.
    pub async fn finish(mut self) -> Response {
        let (status, headers) = self.head().await;
        let chunked = headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
        let mut body = Vec::new();
        let mut events = Vec::new();
        let mut truncated = false;
        if chunked {
            let mut pending = String::new();
            let mut index = 0;
            loop {
                match self.next_chunk().await {
                    Ok(Some(data)) => {
                        let at = Instant::now();
                        body.extend_from_slice(&data);
                        pending.push_str(&String::from_utf8_lossy(&data));
                        while let Some(i) = pending.find("\n\n") {
                            let ev: String = pending.drain(..i + 2).collect();
                            let data = ev
                                .trim_end()
                                .strip_prefix("data: ")
                                .unwrap_or(ev.trim_end());
                            events.push(Event {
                                data: data.to_string(),
                                at,
                                chunk: index,
                            });
                        }
                        index += 1;
                    }
                    Ok(None) => break,
                    Err(()) => {
                        truncated = true;
                        break;
                    }
                }
            }
        } else {
            while self.fill().await {}
            body = std::mem::take(&mut self.buf);
        }
        Response {
            status,
            headers,
            body,
            events,
            sent: self.sent,
            truncated,
        }
    }
}

/// One request, read to the end.
pub async fn request(addr: SocketAddr, method: &str, path: &str, body: Option<&str>) -> Response {
    tokio::time::timeout(
        Duration::from_secs(60),
        Conn::send(addr, method, path, body).await.finish(),
    )
    .await
    .expect("response within 60 s")
}

pub async fn post(addr: SocketAddr, path: &str, body: &str) -> Response {
    request(addr, "POST", path, Some(body)).await
}

pub async fn get(addr: SocketAddr, path: &str) -> Response {
    request(addr, "GET", path, None).await
}

/// The value of one series on the `/metrics` page; `labels` are `key="value"` pieces that
/// must all appear in the series' label set.
pub fn metric(page: &str, name: &str, labels: &[&str]) -> Option<f64> {
    page.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (series, value) = l.rsplit_once(' ')?;
        let (n, rest) = series.split_once('{').unwrap_or((series, ""));
        (n == name && labels.iter().all(|lab| rest.contains(lab))).then(|| value.parse().unwrap())
    })
}

/// The `/metrics` page.
pub async fn metrics(addr: SocketAddr) -> String {
    get(addr, "/metrics").await.text()
}

/// Polls `/metrics` until `pred` holds (the engine publishes after each step).
pub async fn wait_metrics(addr: SocketAddr, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let page = metrics(addr).await;
        if pred(&page) {
            return page;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; last page:\n{page}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
