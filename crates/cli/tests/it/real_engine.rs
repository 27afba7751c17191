//! End-to-end runs of the `servebench` binary against a real inference engine: llama.cpp's
//! `llama-server` on the CPU with SmolLM2-135M-Instruct, as `scripts/real-engine.sh` builds and
//! starts it.
//!
//! The tests need `REAL_ENGINE_URL` (and take `REAL_ENGINE_MODEL`, `REAL_ENGINE_TOKENIZER` when
//! set); `eval "$(scripts/real-engine.sh env)"` provides all three. Without an engine they print
//! a notice and pass, unless `SERVEBENCH_REQUIRE_REAL_ENGINE=1`, which turns a missing engine
//! into a failure.
//!
//! What is compared, and why the tolerances are what they are:
//! - Token counts are exact. The server's `usage` is the reference; with `ignore_eos` it must
//!   equal the requested `max_tokens`, and the server's own Prometheus counters
//!   (`llamacpp:tokens_predicted_total`) must move by the sum of the recorded counts.
//! - Timings. llama-server keeps, per request, `prompt_ms` (slot start → end of the last prompt
//!   batch) and `predicted_ms` (end of the prompt → the last token sampled), and adds them to
//!   `llamacpp:prompt_seconds_total` and `llamacpp:tokens_predicted_seconds_total`. The first
//!   token comes from the prompt's last logits, so a client's decode time (last token event −
//!   first token event) equals `predicted_ms` less the first token's sampling, and its TTFT
//!   equals `prompt_ms` plus the HTTP and tokenisation work around it. Each test compares
//!   servebench's per-request figures, summed over the run, with the change of those counters
//!   during the run (exact attribution: the tests hold a lock, so nothing else reaches the
//!   server meanwhile). TTFT is compared only at concurrency 1, where the prompt counter is the
//!   sum of the requests' own prompt times; decode time at every concurrency, because the
//!   generation counter adds each request's own interval. A raw-socket client characterises
//!   the same relation for a single request in `raw_stream_timings_match_server_timings`.
//!   Bounds: at most `ABS_SLACK_MS` per request plus `REL_SLACK` of the server's figure. The
//!   loopback round trip and the SSE write take well under a millisecond, but this machine
//!   has two cores shared with compilers, so a thread can wait one or two scheduler slices
//!   (a few ms each) to be run; the bounds leave room for that and still catch a client that
//!   counts the wrong event (the role-only chat chunk, the closing finish-only chunk), times
//!   from the wrong point, or loses token events.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use servebench_metrics::{CountSource, RequestRecord};

/// Per-request allowance for scheduling noise between the server's clock points and the
/// client's (see the module docs).
const ABS_SLACK_MS: f64 = 25.0;
/// Relative allowance on the server's figure, for the same noise growing with the interval.
const REL_SLACK: f64 = 0.10;
/// A whole `servebench run` must finish within this; the runs here take seconds.
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

/// The tests share one server: one at a time, so its counters belong to the test reading them.
static ENGINE_LOCK: Mutex<()> = Mutex::new(());

/// A running llama-server, as `scripts/real-engine.sh env` describes it.
struct Engine {
    url: String,
    model: String,
    tokenizer: Option<PathBuf>,
    _guard: MutexGuard<'static, ()>,
}

/// The engine, or `None` (after a notice) when the environment names none.
fn engine(test: &str) -> Option<Engine> {
    let url = match std::env::var("REAL_ENGINE_URL") {
        Ok(url) if !url.trim().is_empty() => url.trim().trim_end_matches('/').to_owned(),
        _ => {
            let required = std::env::var("SERVEBENCH_REQUIRE_REAL_ENGINE").is_ok_and(|v| v == "1");
            assert!(
                !required,
                "{test}: SERVEBENCH_REQUIRE_REAL_ENGINE=1 but REAL_ENGINE_URL is unset \
                 (run scripts/real-engine.sh build && scripts/real-engine.sh start, then \
                 set -a; eval \"$(scripts/real-engine.sh env)\"; set +a)"
            );
            eprintln!("{test}: skipped, REAL_ENGINE_URL is unset (see scripts/real-engine.sh)");
            return None;
        }
    };
    let guard = ENGINE_LOCK
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let health = http::request(&url, "GET", "/health", None);
    assert_eq!(health.status, 200, "{url}/health: {}", health.text());
    let model = match std::env::var("REAL_ENGINE_MODEL") {
        Ok(m) if !m.is_empty() => m,
        _ => {
            let models = http::request(&url, "GET", "/v1/models", None).json();
            models["data"][0]["id"]
                .as_str()
                .expect("/v1/models lists a model")
                .to_owned()
        }
    };
    let tokenizer = std::env::var_os("REAL_ENGINE_TOKENIZER")
        .map(PathBuf::from)
        .filter(|p| !p.as_os_str().is_empty());
    if let Some(path) = &tokenizer {
        assert!(
            path.is_file(),
            "REAL_ENGINE_TOKENIZER={} is not a file",
            path.display()
        );
    }
    Some(Engine {
        url,
        model,
        tokenizer,
        _guard: guard,
    })
}

// ---------------------------------------------------------------------------------------------
// A minimal HTTP/1.1 client over std sockets: a blocking request, and a streaming one that
// stamps every SSE `data:` line with its receipt time.
// ---------------------------------------------------------------------------------------------
mod http {
    use std::io::{BufRead, BufReader, Write};
    use std::net::TcpStream;
    use std::time::{Duration, Instant};

    use serde_json::Value;

    pub struct Response {
        pub status: u16,
        pub body: Vec<u8>,
    }

    impl Response {
        pub fn text(&self) -> String {
            String::from_utf8_lossy(&self.body).into_owned()
        }

        pub fn json(&self) -> Value {
            serde_json::from_slice(&self.body)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
        }
    }

    /// One received SSE `data:` payload.
    pub struct Event {
        /// Receipt time, from just before the request was written.
        pub at: Duration,
        pub data: String,
    }

    pub struct Stream {
        pub status: u16,
        pub events: Vec<Event>,
        /// The body, when the server answered without SSE (an error).
        pub body: String,
    }

    impl Stream {
        /// The JSON payloads, without the closing `[DONE]`.
        pub fn chunks(&self) -> Vec<(Duration, Value)> {
            self.events
                .iter()
                .filter(|e| e.data != "[DONE]")
                .map(|e| {
                    let v = serde_json::from_str(&e.data)
                        .unwrap_or_else(|err| panic!("chunk not JSON ({err}): {}", e.data));
                    (e.at, v)
                })
                .collect()
        }

        pub fn saw_done(&self) -> bool {
            self.events.last().is_some_and(|e| e.data == "[DONE]")
        }
    }

    fn connect(base: &str) -> TcpStream {
        let authority = base
            .strip_prefix("http://")
            .unwrap_or_else(|| panic!("REAL_ENGINE_URL must be http://HOST:PORT, got {base}"));
        let stream =
            TcpStream::connect(authority).unwrap_or_else(|e| panic!("connect {base}: {e}"));
        stream
            .set_read_timeout(Some(Duration::from_secs(300)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        stream
    }

    fn write_request(
        stream: &mut TcpStream,
        base: &str,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) {
        let host = base.trim_start_matches("http://");
        let payload = body.map(|b| b.to_string()).unwrap_or_default();
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
        if body.is_some() {
            head.push_str("Content-Type: application/json\r\n");
        }
        head.push_str(&format!("Content-Length: {}\r\n\r\n", payload.len()));
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(payload.as_bytes()).unwrap();
        stream.flush().unwrap();
    }

    /// Status and whether the body is chunked; leaves the reader at the body.
    fn read_head(reader: &mut impl BufRead) -> (u16, bool, Option<usize>) {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {line:?}"));
        let (mut chunked, mut length) = (false, None);
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
                if name == "transfer-encoding" && value.eq_ignore_ascii_case("chunked") {
                    chunked = true;
                } else if name == "content-length" {
                    length = value.parse().ok();
                }
            }
        }
        (status, chunked, length)
    }

    /// Calls `sink` with each piece of the body as it arrives.
    fn read_body(
        reader: &mut impl BufRead,
        chunked: bool,
        length: Option<usize>,
        mut sink: impl FnMut(&[u8]),
    ) {
        if chunked {
            let mut line = String::new();
            loop {
                line.clear();
                if reader.read_line(&mut line).unwrap() == 0 {
                    return;
                }
                let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                    .unwrap_or_else(|_| panic!("bad chunk size line {line:?}"));
                if size == 0 {
                    return;
                }
                let mut data = vec![0; size + 2];
                reader.read_exact(&mut data).unwrap();
                sink(&data[..size]);
            }
        } else if let Some(n) = length {
            let mut data = vec![0; n];
            reader.read_exact(&mut data).unwrap();
            sink(&data);
        } else {
            let mut data = Vec::new();
            reader.read_to_end(&mut data).unwrap();
            sink(&data);
        }
    }

    pub fn request(base: &str, method: &str, path: &str, body: Option<&Value>) -> Response {
        let mut stream = connect(base);
        write_request(&mut stream, base, method, path, body);
        let mut reader = BufReader::new(stream);
        let (status, chunked, length) = read_head(&mut reader);
        let mut out = Vec::new();
        read_body(&mut reader, chunked, length, |piece| {
            out.extend_from_slice(piece)
        });
        Response { status, body: out }
    }

    pub fn post(base: &str, path: &str, body: &Value) -> Response {
        request(base, "POST", path, Some(body))
    }

    /// POSTs `body` and collects the SSE events with their receipt times.
    pub fn stream(base: &str, path: &str, body: &Value) -> Stream {
        let mut stream = connect(base);
        let sent = Instant::now();
        write_request(&mut stream, base, "POST", path, Some(body));
        let mut reader = BufReader::new(stream);
        let (status, chunked, length) = read_head(&mut reader);
        let mut pending = Vec::new();
        let mut raw = Vec::new();
        let mut events = Vec::new();
        read_body(&mut reader, chunked, length, |piece| {
            let at = sent.elapsed();
            raw.extend_from_slice(piece);
            pending.extend_from_slice(piece);
            while let Some(pos) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=pos).collect();
                let line = String::from_utf8_lossy(&line);
                if let Some(data) = line.trim_end().strip_prefix("data:") {
                    events.push(Event {
                        at,
                        data: data.trim_start().to_owned(),
                    });
                }
            }
        });
        Stream {
            status,
            events,
            body: String::from_utf8_lossy(&raw).into_owned(),
        }
    }
}

/// The server's Prometheus counters (`llamacpp:*`), by name.
fn scrape(engine: &Engine) -> HashMap<String, f64> {
    let response = http::request(&engine.url, "GET", "/metrics", None);
    assert_eq!(
        response.status,
        200,
        "/metrics (start llama-server with --metrics): {}",
        response.text()
    );
    response
        .text()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.split_once(' ')?;
            Some((name.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

/// How much each counter moved between two scrapes.
fn delta(before: &HashMap<String, f64>, after: &HashMap<String, f64>, name: &str) -> f64 {
    let get = |m: &HashMap<String, f64>| {
        *m.get(name)
            .unwrap_or_else(|| panic!("/metrics has no {name}; it has {:?}", m.keys()))
    };
    get(after) - get(before)
}

// ---------------------------------------------------------------------------------------------
// Running the binary.
// ---------------------------------------------------------------------------------------------

#[path = "../support/child.rs"]
mod child;
#[path = "../support/scratch.rs"]
mod scratch;
use child::wait_or_kill;
use scratch::Scratch;

/// Where a run's prompts come from.
enum Dataset<'a> {
    /// `--dataset-name random` with prompts of this many tokens.
    Random { input_len: u64 },
    /// `--dataset-name custom`: a JSONL file of `{"prompt": ...}` lines.
    Custom { path: &'a Path },
}

/// One workload for `servebench run`.
struct Workload<'a> {
    chat: bool,
    dataset: Dataset<'a>,
    /// `max_tokens` of every request.
    output_len: u64,
    num_prompts: usize,
    concurrency: usize,
    ignore_eos: bool,
    /// Further flags (sampling).
    extra: &'a [&'a str],
}

/// What one `servebench run` left behind.
struct Run {
    /// vLLM's result JSON.
    vllm: Value,
    /// The per-request records, by id.
    records: Vec<RequestRecord>,
    /// Server counters before and after the run.
    before: HashMap<String, f64>,
    after: HashMap<String, f64>,
    stdout: String,
    _scratch: Scratch,
}

impl Run {
    fn delta(&self, name: &str) -> f64 {
        delta(&self.before, &self.after, name)
    }
}

fn servebench(engine: &Engine, name: &str, w: &Workload<'_>) -> Run {
    let scratch = Scratch::new(name);
    let dir = scratch.0.clone();
    let (backend, endpoint) = if w.chat {
        ("openai-chat", "/v1/chat/completions")
    } else {
        ("openai", "/v1/completions")
    };
    let mut args: Vec<String> = [
        "run",
        "--base-url",
        &engine.url,
        "--backend",
        backend,
        "--endpoint",
        endpoint,
        "--model",
        &engine.model,
        "--num-prompts",
        &w.num_prompts.to_string(),
        "--max-concurrency",
        &w.concurrency.to_string(),
        "--request-rate",
        "inf",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        dir.to_str().unwrap(),
        "--result-filename",
        "result.json",
        "--output-dir",
        dir.to_str().unwrap(),
        "--disable-tqdm",
        "--seed",
        "20240611",
        // vLLM's default leaves E2EL out; the checks read its summary too.
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let output_len = w.output_len.to_string();
    match &w.dataset {
        Dataset::Random { input_len } => args.extend(
            [
                "--dataset-name",
                "random",
                "--random-input-len",
                &input_len.to_string(),
                "--random-output-len",
                &output_len,
            ]
            .map(String::from),
        ),
        Dataset::Custom { path } => args.extend(
            [
                "--dataset-name",
                "custom",
                "--dataset-path",
                path.to_str().unwrap(),
                "--custom-output-len",
                &output_len,
            ]
            .map(String::from),
        ),
    }
    if w.ignore_eos {
        args.push("--ignore-eos".into());
    }
    if let Some(tokenizer) = &engine.tokenizer {
        args.push("--tokenizer".into());
        args.push(tokenizer.to_str().unwrap().into());
    }
    args.extend(w.extra.iter().map(|s| s.to_string()));

    let before = scrape(engine);
    let stdout_path = dir.join("stdout.txt");
    let stderr_path = dir.join("stderr.txt");
    let mut child = Command::new(env!("CARGO_BIN_EXE_servebench"))
        .args(&args)
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(fs::File::create(&stdout_path).unwrap())
        .stderr(fs::File::create(&stderr_path).unwrap())
        .spawn()
        .expect("spawn servebench");
    let status = wait_or_kill(&mut child, RUN_TIMEOUT, &format!("servebench run {args:?}"));
    let after = scrape(engine);
    let stdout = fs::read_to_string(&stdout_path).unwrap_or_default();
    let stderr = fs::read_to_string(&stderr_path).unwrap_or_default();
    assert!(
        status.success(),
        "servebench {args:?} exited with {status}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );

    let result = dir.join("result.json");
    let vllm: Value = serde_json::from_str(
        &fs::read_to_string(&result)
            .unwrap_or_else(|e| panic!("{}: {e}\n{stderr}", result.display())),
    )
    .expect("vLLM result JSON parses");
    let jsonl = find_records(&dir)
        .unwrap_or_else(|| panic!("no *.requests.jsonl in {}\n{stderr}", dir.display()));
    let mut records: Vec<RequestRecord> = fs::read_to_string(&jsonl)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("record ({e}): {l}")))
        .collect();
    records.sort_by_key(|r| r.id);
    Run {
        vllm,
        records,
        before,
        after,
        stdout,
        _scratch: scratch,
    }
}

fn find_records(dir: &Path) -> Option<PathBuf> {
    fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_str().is_some_and(|s| s.ends_with(".requests.jsonl")))
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn ttft_ms(r: &RequestRecord) -> f64 {
    ms(r.first_token.expect("first token") - r.sent)
}

fn decode_ms(r: &RequestRecord) -> f64 {
    ms(r.end.expect("end") - r.first_token.expect("first token"))
}

/// `client ≈ server` within the documented allowance for `n` requests.
fn assert_close(what: &str, client_ms: f64, server_ms: f64, n: usize) {
    let allowed = ABS_SLACK_MS * n as f64 + REL_SLACK * server_ms;
    assert!(
        (client_ms - server_ms).abs() <= allowed,
        "{what}: servebench {client_ms:.1} ms vs llama-server {server_ms:.1} ms \
         (allowed ±{allowed:.1} ms for {n} requests)"
    );
}

/// The most requests in flight at once, from the records' `[sent, end)` intervals.
fn peak_in_flight(records: &[RequestRecord]) -> usize {
    let mut edges: Vec<(u64, i32)> = records
        .iter()
        .flat_map(|r| [(r.sent, 1), (r.end.expect("end"), -1)])
        .collect();
    // An end and a start at the same instant do not overlap: ends first.
    edges.sort();
    let (mut now, mut peak) = (0i32, 0i32);
    for (_, step) in edges {
        now += step;
        peak = peak.max(now);
    }
    peak as usize
}

/// Checks shared by every successful run; returns nothing, panics with the evidence.
fn check_run(run: &Run, w: &Workload<'_>) {
    let n = w.num_prompts;
    let v = &run.vllm;
    assert_eq!(
        run.records.len(),
        n,
        "one record per request\n{}",
        run.stdout
    );
    for r in &run.records {
        assert!(
            r.failure.is_none(),
            "request {} failed: {:?}",
            r.id,
            r.failure
        );
        assert!(r.is_success(), "request {} has no first token", r.id);
        assert_eq!(
            r.output_source,
            CountSource::Usage,
            "request {}: output count not from usage",
            r.id
        );
        assert_eq!(
            r.input_source,
            CountSource::Usage,
            "request {}: input count not from usage",
            r.id
        );
        assert!(r.output_tokens >= 1);
        assert!(r.sent <= r.first_token.unwrap() && r.first_token <= r.end);
        assert_eq!(
            r.max_tokens,
            Some(w.output_len),
            "request {}: max_tokens",
            r.id
        );
        // llama.cpp streams one token per event, holding one back only while it ends in an
        // incomplete UTF-8 sequence (or could start a stop string); such a token is sent with
        // the next one, so an event never stands for less than one token. A stop token is
        // counted in usage but never streamed. A non-ASCII character (up to four bytes, an
        // emoji from random prompts) may come as one byte token each: it can hide three
        // tokens in its event.
        let events = r.events.len() as u64;
        let streamed = if r.finish_reason.as_deref() == Some("stop") {
            r.output_tokens - 1
        } else {
            r.output_tokens
        };
        let non_ascii =
            r.text
                .as_deref()
                .map_or(0, |t| t.chars().filter(|c| !c.is_ascii()).count()) as u64;
        assert!(
            events <= streamed && (events + 3 * non_ascii) * 10 >= streamed * 8,
            "request {}: {events} token events for {} tokens ({non_ascii} non-ASCII characters)",
            r.id,
            r.output_tokens
        );
        let first = r.events.first().expect("events").t;
        assert_eq!(Some(first), r.first_token, "first_token is the first event");
        assert_eq!(r.events.last().map(|e| e.t), r.end, "end is the last event");
    }

    // vLLM's result JSON says the same as the records.
    let count = |k: &str| {
        v[k].as_u64()
            .unwrap_or_else(|| panic!("{k} missing in {v}"))
    };
    assert_eq!(count("completed"), n as u64);
    assert_eq!(count("failed"), 0);
    assert_eq!(count("num_prompts"), n as u64);
    assert_eq!(v["max_concurrency"].as_u64(), Some(w.concurrency as u64));
    assert_eq!(v["request_rate"], json!("inf"));
    let total_out: u64 = run.records.iter().map(|r| r.output_tokens).sum();
    let total_in: u64 = run.records.iter().map(|r| r.input_tokens).sum();
    assert_eq!(count("total_output_tokens"), total_out);
    assert_eq!(count("total_input_tokens"), total_in);
    let sorted = |k: &str| {
        let mut xs: Vec<f64> = v[k]
            .as_array()
            .unwrap_or_else(|| panic!("{k} missing"))
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        xs.sort_by(f64::total_cmp);
        xs
    };
    let mut out_lens: Vec<f64> = run.records.iter().map(|r| r.output_tokens as f64).collect();
    out_lens.sort_by(f64::total_cmp);
    assert_eq!(sorted("output_lens"), out_lens);
    let mut in_lens: Vec<f64> = run.records.iter().map(|r| r.input_tokens as f64).collect();
    in_lens.sort_by(f64::total_cmp);
    assert_eq!(sorted("input_lens"), in_lens);
    // The vLLM file follows vLLM's definitions: its clock starts before a pooled connection is
    // taken and a chunk with choices but no token (a chat stream's role chunk, the closing
    // `finish_reason` chunk) is an event. Its figures are the records' vLLM view.
    let views = servebench_metrics::vllm::views(&run.records);
    let mut ttfts: Vec<f64> = views.iter().map(|r| ttft_ms(r) / 1e3).collect();
    ttfts.sort_by(f64::total_cmp);
    for (a, b) in sorted("ttfts").iter().zip(&ttfts) {
        assert!((a - b).abs() < 1e-6, "ttfts {a} vs records {b}");
    }
    let itl_count: usize = v["itls"]
        .as_array()
        .expect("itls")
        .iter()
        .map(|l| l.as_array().map_or(0, Vec::len))
        .sum();
    let gaps: usize = views.iter().map(|r| r.events.len() - 1).sum();
    assert_eq!(itl_count, gaps, "one ITL per gap between events (vLLM's)");
    for key in [
        "mean_ttft_ms",
        "median_ttft_ms",
        "mean_tpot_ms",
        "mean_itl_ms",
        "mean_e2el_ms",
        "p99_ttft_ms",
    ] {
        assert!(
            v[key].as_f64().is_some_and(|x| x > 0.0),
            "{key} = {}",
            v[key]
        );
    }
    let mut sorted_ttft: Vec<f64> = views.iter().map(ttft_ms).collect();
    sorted_ttft.sort_by(f64::total_cmp);
    let mean = sorted_ttft.iter().sum::<f64>() / n as f64;
    assert!(
        (v["mean_ttft_ms"].as_f64().unwrap() - mean).abs() < 1e-3,
        "mean_ttft_ms"
    );

    // The server counted exactly the tokens servebench reports.
    assert_eq!(
        run.delta("llamacpp:tokens_predicted_total") as u64,
        total_out,
        "llama-server generated a different number of tokens than servebench recorded"
    );
    // Decode time: each request's generation interval, summed (see the module docs).
    let client_decode: f64 = run.records.iter().map(decode_ms).sum();
    let server_decode = run.delta("llamacpp:tokens_predicted_seconds_total") * 1e3;
    assert_close(
        "decode time, summed over the run",
        client_decode,
        server_decode,
        n,
    );
    if w.concurrency == 1 {
        assert_eq!(peak_in_flight(&run.records), 1);
        let client_ttft: f64 = run.records.iter().map(ttft_ms).sum();
        let server_prompt = run.delta("llamacpp:prompt_seconds_total") * 1e3;
        assert!(
            client_ttft >= server_prompt,
            "TTFT {client_ttft:.1} ms cannot be shorter than the server's prompt time {server_prompt:.1} ms"
        );
        assert_close(
            "TTFT vs prompt time, summed over the run",
            client_ttft,
            server_prompt,
            n,
        );
    } else {
        assert_eq!(
            peak_in_flight(&run.records),
            w.concurrency.min(n),
            "the concurrency cap was reached"
        );
    }
}

/// Random-dataset prompts under the model's own tokenizer are exactly as long as asked.
fn check_exact_prompts(engine: &Engine, run: &Run, w: &Workload<'_>, input_len: u64) {
    for r in &run.records {
        assert_eq!(r.intended_input_tokens, input_len, "request {}", r.id);
    }
    if engine.tokenizer.is_none() {
        return;
    }
    if w.chat {
        // The chat template wraps each prompt in the same text: a constant overhead.
        let overheads: Vec<i64> = run
            .records
            .iter()
            .map(|r| r.input_tokens as i64 - r.intended_input_tokens as i64)
            .collect();
        assert!(
            overheads.iter().all(|&o| o == overheads[0]) && (1..=64).contains(&overheads[0]),
            "chat template overhead per request: {overheads:?}"
        );
    } else {
        for r in &run.records {
            assert_eq!(
                r.input_tokens, input_len,
                "request {}: server counted the prompt differently",
                r.id
            );
        }
    }
}

fn run_random(name: &str, chat: bool, concurrency: usize, ignore_eos: bool) {
    let Some(engine) = engine(name) else { return };
    // Small on purpose: a run takes seconds on an idle 2-core machine, and still has every
    // request queue behind the cap at concurrency 4.
    let input_len = 128;
    let w = Workload {
        chat,
        dataset: Dataset::Random { input_len },
        output_len: 24,
        num_prompts: 2 * concurrency.max(2),
        concurrency,
        ignore_eos,
        extra: &[],
    };
    let run = servebench(&engine, name, &w);
    check_run(&run, &w);
    check_exact_prompts(&engine, &run, &w, input_len);
    for r in &run.records {
        assert_eq!(
            r.output_tokens, w.output_len,
            "request {}: ignore_eos runs to max_tokens",
            r.id
        );
        assert_eq!(
            r.finish_reason.as_deref(),
            Some("length"),
            "request {}",
            r.id
        );
        // A plain (non-reasoning) chat: the answer starts with the first token, no reasoning.
        if chat {
            assert_eq!(r.ttfat_ns(), r.ttft_ns(), "request {}: TTFAT", r.id);
            assert_eq!(r.reasoning_tokens(), 0, "request {}: reasoning", r.id);
        }
    }
}

#[test]
fn completions_concurrency_1_ignore_eos() {
    let _exclusive = crate::common::exclusive();
    run_random("completions_c1", false, 1, true);
}

#[test]
fn completions_concurrency_4_ignore_eos() {
    let _exclusive = crate::common::exclusive();
    run_random("completions_c4", false, 4, true);
}

#[test]
fn chat_concurrency_1_ignore_eos() {
    let _exclusive = crate::common::exclusive();
    run_random("chat_c1", true, 1, true);
}

#[test]
fn chat_concurrency_4_ignore_eos() {
    let _exclusive = crate::common::exclusive();
    run_random("chat_c4", true, 4, true);
}

/// Without `--ignore-eos` the model may stop on its own: prompts that invite a short answer,
/// greedy decoding, and a generous `max_tokens`.
#[test]
fn chat_without_ignore_eos_stops_at_eos() {
    let _exclusive = crate::common::exclusive();
    let name = "chat_eos";
    let Some(engine) = engine(name) else { return };
    let scratch = Scratch::new("dataset");
    let dataset = scratch.0.join("short-answers.jsonl");
    let prompts = [
        "What is the capital of France? Answer with one word.",
        "Say hello.",
        "What is 2 + 2? Answer with a number only.",
        "Name a primary colour. One word.",
    ];
    let lines: Vec<String> = prompts
        .iter()
        .map(|p| json!({ "prompt": p }).to_string())
        .collect();
    fs::write(&dataset, lines.join("\n") + "\n").unwrap();
    let max_tokens = 200;
    let tokenizer = engine
        .tokenizer
        .as_ref()
        .map(|p| servebench_tokenizer::Tokenizer::from_file(p).expect("tokenizer.json loads"));
    for concurrency in [1, 4] {
        let w = Workload {
            chat: true,
            dataset: Dataset::Custom { path: &dataset },
            output_len: max_tokens,
            num_prompts: prompts.len(),
            concurrency,
            ignore_eos: false,
            extra: &["--temperature", "0"],
        };
        let run = servebench(&engine, name, &w);
        check_run(&run, &w);
        for r in &run.records {
            assert!(
                r.output_tokens < max_tokens && r.finish_reason.as_deref() == Some("stop"),
                "request {}: {} tokens, finish_reason {:?}: the model should stop by itself",
                r.id,
                r.output_tokens,
                r.finish_reason
            );
            // The stop token is counted in usage but never streamed as text.
            let text = r.text.as_deref().unwrap_or("");
            assert!(
                !text.is_empty(),
                "request {}: --save-detailed keeps the text",
                r.id
            );
            assert!(!text.contains("<|im_end|>"), "request {}: {text:?}", r.id);
            if let Some(tokenizer) = &tokenizer {
                assert_eq!(
                    tokenizer.encode(text).len() as u64 + 1,
                    r.output_tokens,
                    "request {}: usage counts the streamed text's tokens plus the stop token ({text:?})",
                    r.id
                );
            }
        }
    }
}

/// The GGUF-derived tokenizer.json that prompts are synthesised with tokenises exactly as the
/// server does.
#[test]
fn tokenizer_matches_server_tokenize() {
    let _exclusive = crate::common::exclusive();
    let Some(engine) = engine("tokenizer") else {
        return;
    };
    let Some(path) = &engine.tokenizer else {
        eprintln!("tokenizer: skipped, REAL_ENGINE_TOKENIZER is unset");
        return;
    };
    let tokenizer = servebench_tokenizer::Tokenizer::from_file(path).expect("tokenizer.json loads");
    let samples = [
        "Hello, world! How are you today?",
        "The year 2024 had 366 days; π ≈ 3.14159.",
        "fn main() {\n    println!(\"{}\", 1 + 2);\n}\n",
        "  leading spaces, trailing tabs\t\t\nand\n\n\nnewlines   ",
        "naïve café — «quotes» and emoji 🚀🔥 and 漢字かな交じり文",
        "don't won't it's we're I'll they've she'd",
        "<|im_start|>user\nspecial tokens are plain text here<|im_end|>",
    ];
    for text in samples {
        let response = http::post(
            &engine.url,
            "/tokenize",
            &json!({ "content": text, "add_special": false }),
        );
        assert_eq!(response.status, 200, "/tokenize: {}", response.text());
        let server: Vec<u32> = response.json()["tokens"]
            .as_array()
            .expect("tokens")
            .iter()
            .map(|t| t.as_u64().expect("token id") as u32)
            .collect();
        assert_eq!(tokenizer.encode(text), server, "token ids of {text:?}");
    }
}

/// A single raw streaming request: the relation between the client's clock points and the
/// server's own `timings`, and the stream's shape, on which the servebench comparisons rest.
#[test]
fn raw_stream_timings_match_server_timings() {
    let _exclusive = crate::common::exclusive();
    let Some(engine) = engine("raw_stream") else {
        return;
    };
    let prompt = "The history of the printing press begins ".repeat(40);
    let body = json!({
        "model": engine.model,
        "prompt": prompt,
        "max_tokens": 48,
        "ignore_eos": true,
        "stream": true,
        "stream_options": { "include_usage": true },
        // Cold prompt: nothing reused from an earlier request, so prompt_ms covers it all.
        "cache_prompt": false,
    });
    let stream = http::stream(&engine.url, "/v1/completions", &body);
    assert_eq!(stream.status, 200, "{}", stream.body);
    assert!(stream.saw_done(), "stream ends with [DONE]");
    let chunks = stream.chunks();
    let with_text: Vec<&(Duration, Value)> = chunks
        .iter()
        .filter(|(_, c)| {
            c["choices"][0]["text"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
        })
        .collect();
    let last = &chunks.last().expect("chunks").1;
    let usage = &last["usage"];
    let timings = &last["timings"];
    assert_eq!(
        usage["completion_tokens"],
        json!(48),
        "usage in the last chunk: {last}"
    );
    assert_eq!(
        timings["predicted_n"],
        json!(48),
        "timings in the last chunk: {last}"
    );
    let prompt_tokens = usage["prompt_tokens"].as_u64().unwrap();
    assert_eq!(
        timings["prompt_n"].as_u64(),
        Some(prompt_tokens),
        "cold prompt fully processed"
    );

    let ttft = with_text.first().expect("text").0.as_secs_f64() * 1e3;
    let decode = (with_text.last().unwrap().0 - with_text.first().unwrap().0).as_secs_f64() * 1e3;
    let prompt_ms = timings["prompt_ms"].as_f64().unwrap();
    let predicted_ms = timings["predicted_ms"].as_f64().unwrap();
    eprintln!(
        "raw stream: ttft {ttft:.2} ms vs prompt_ms {prompt_ms:.2}; decode {decode:.2} ms vs \
         predicted_ms {predicted_ms:.2} ({} text events, {prompt_tokens} prompt tokens)",
        with_text.len()
    );
    assert!(
        ttft >= prompt_ms,
        "TTFT {ttft:.2} ms < prompt_ms {prompt_ms:.2}"
    );
    assert_close("raw TTFT vs prompt_ms", ttft, prompt_ms, 1);
    assert_close("raw decode vs predicted_ms", decode, predicted_ms, 1);
}

// ---------------------------------------------------------------------------------------------
// `servebench latency` and `servebench throughput` against the engine.
// ---------------------------------------------------------------------------------------------

/// Runs `servebench <args>` against the engine (model and tokenizer added) to completion
/// within [`RUN_TIMEOUT`]; returns stdout, failing with the whole output otherwise.
fn bench_command(engine: &Engine, dir: &Path, args: &[&str]) -> String {
    let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    args.extend(["--base-url".into(), engine.url.clone()]);
    args.extend(["--model".into(), engine.model.clone()]);
    if let Some(tokenizer) = &engine.tokenizer {
        args.push("--tokenizer".into());
        args.push(tokenizer.to_str().unwrap().into());
    }
    let stdout_path = dir.join("stdout.txt");
    let stderr_path = dir.join("stderr.txt");
    let mut child = Command::new(env!("CARGO_BIN_EXE_servebench"))
        .args(&args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(fs::File::create(&stdout_path).unwrap())
        .stderr(fs::File::create(&stderr_path).unwrap())
        .spawn()
        .expect("spawn servebench");
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("servebench did not finish within {RUN_TIMEOUT:?}: {args:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = fs::read_to_string(&stdout_path).unwrap_or_default();
    let stderr = fs::read_to_string(&stderr_path).unwrap_or_default();
    assert!(
        status.success(),
        "servebench {args:?} exited with {status}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    stdout
}

#[test]
fn latency_batch_sizes_1_and_4_write_vllms_json() {
    let Some(engine) = engine("latency_batch_sizes_1_and_4_write_vllms_json") else {
        return;
    };
    let scratch = Scratch::new("latency");
    let json = scratch.0.join("latency.json");
    let stdout = bench_command(
        &engine,
        &scratch.0,
        &[
            "latency",
            "--batch-size",
            "1,4",
            "--input-len",
            "32",
            "--output-len",
            "16",
            "--num-iters",
            "3",
            "--num-iters-warmup",
            "1",
            "--output-json",
            json.to_str().unwrap(),
        ],
    );
    let v: Value = serde_json::from_str(&fs::read_to_string(&json).unwrap()).unwrap();
    for b in ["1", "4"] {
        let lat = v[b]["latencies"].as_array().unwrap();
        assert_eq!(lat.len(), 3, "{v}");
        assert!(lat.iter().all(|x| x.as_f64().unwrap() > 0.0), "{v}");
        assert!(v[b]["avg_latency"].as_f64().unwrap() > 0.0);
        assert!(v[b]["std_latency"].as_f64().unwrap() >= 0.0);
        for p in ["10", "25", "50", "75", "90", "99"] {
            assert!(v[b]["percentiles"][p].as_f64().unwrap() > 0.0, "{v}");
        }
    }
    assert!(stdout.contains("TPOT (ms)"), "{stdout}");
}

#[test]
fn throughput_16_prompts_writes_vllms_json() {
    let Some(engine) = engine("throughput_16_prompts_writes_vllms_json") else {
        return;
    };
    let scratch = Scratch::new("throughput");
    let json = scratch.0.join("throughput.json");
    let before = scrape(&engine);
    let stdout = bench_command(
        &engine,
        &scratch.0,
        &[
            "throughput",
            "--num-prompts",
            "16",
            "--input-len",
            "32",
            "--output-len",
            "16",
            "--output-json",
            json.to_str().unwrap(),
        ],
    );
    let after = scrape(&engine);
    let v: Value = serde_json::from_str(&fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["num_requests"], 16, "{v}");
    assert!(v["elapsed_time"].as_f64().unwrap() > 0.0, "{v}");
    // EOS is ignored: every request generates exactly its 16 tokens.
    assert!(stdout.contains("Total num output tokens:  256"), "{stdout}");
    let predicted = delta(&before, &after, "llamacpp:tokens_predicted_total");
    assert_eq!(
        predicted, 256.0,
        "the server's own count of generated tokens"
    );
    let total = v["total_num_tokens"].as_u64().unwrap();
    assert!(total > 256, "{v}");
    let tps = v["tokens_per_second"].as_f64().unwrap();
    let elapsed = v["elapsed_time"].as_f64().unwrap();
    assert!((tps - total as f64 / elapsed).abs() < 1e-6 * tps, "{v}");
}

/// `sweep serve` restarting a real llama-server per combination: `--parallel` 1 and 4 slots
/// (two servers, two pids, each started, ready, measured and stopped), four concurrent
/// requests, and the four-slot server generating faster. The binary and model are the ones
/// the shared engine runs (`REAL_ENGINE_PID`'s executable, `REAL_ENGINE_MODEL_PATH`).
#[test]
fn sweep_serve_restarts_llama_server_per_slot_count() {
    let _exclusive = crate::common::exclusive();
    let Some(engine) = engine("sweep_serve_restarts_llama_server_per_slot_count") else {
        return;
    };
    let server_bin = std::env::var("REAL_ENGINE_PID")
        .ok()
        .and_then(|pid| fs::read_link(format!("/proc/{}/exe", pid.trim())).ok());
    let model_path = std::env::var("REAL_ENGINE_MODEL_PATH").ok();
    let (Some(server_bin), Some(model_path)) = (server_bin, model_path) else {
        eprintln!("sweep serve: skipped, REAL_ENGINE_PID/REAL_ENGINE_MODEL_PATH unset");
        return;
    };
    let scratch = Scratch::new("sweep-serve");
    let dir = &scratch.0;
    fs::write(
        dir.join("serve.json"),
        r#"[{"parallel": 1}, {"parallel": 4}]"#,
    )
    .unwrap();
    let mut bench = format!(
        "vllm bench serve --model {} --num-prompts 16 --random-input-len 64 \
         --random-output-len 32 --max-concurrency 4 --ignore-eos",
        engine.model
    );
    if let Some(t) = &engine.tokenizer {
        bench.push_str(&format!(" --tokenizer {}", t.display()));
    }
    let out = Command::new(env!("CARGO_BIN_EXE_servebench"))
        .current_dir(dir)
        .env_remove("OPENAI_API_KEY")
        .args([
            "sweep",
            "serve",
            "--serve-cmd",
            &format!(
                "{} -m {model_path} --alias {} --host 127.0.0.1 --port {{port}} -c 4096 --parallel 1",
                server_bin.display(),
                engine.model
            ),
            "--bench-cmd",
            &bench,
            "--serve-params",
            "serve.json",
            "--num-runs",
            "1",
            "--server-ready-timeout",
            "120",
            "-e",
            "slots",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let exp = dir.join("results/slots");
    let index: Value =
        serde_json::from_str(&fs::read_to_string(exp.join("sweep_serve.json")).unwrap()).unwrap();
    let combs = index["combinations"].as_array().unwrap();
    assert_eq!(combs.len(), 2, "{index}");
    assert_ne!(combs[0]["server_pid"], combs[1]["server_pid"], "{index}");
    let tput = |slots: u32| {
        let p = exp.join(format!("SERVE--parallel={slots}/run=0.json"));
        let v: Value = serde_json::from_str(&fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(v["completed"], 16, "{v}");
        v["output_throughput"].as_f64().unwrap()
    };
    let (one, four) = (tput(1), tput(4));
    assert!(four > one, "output tok/s: 4 slots {four}, 1 slot {one}");
}

/// A chat request with an image part, sent to a text-only model (SmolLM2, no vision
/// projector): llama-server refuses it, and servebench records the refusal as a failed request
/// with the server's status and message, instead of crashing or dropping it. The client is told
/// it benchmarks a vision model (`--model` names one the catalog knows) served under the
/// engine's name (`--served-model-name`), so the run is not refused before it starts.
#[test]
fn an_image_part_to_a_text_model_is_a_recorded_error() {
    let _exclusive = crate::common::exclusive();
    let Some(engine) = engine("an_image_part_to_a_text_model_is_a_recorded_error") else {
        return;
    };
    let scratch = Scratch::new("image-refused");
    let dir = scratch.0.clone();
    let out = Command::new(env!("CARGO_BIN_EXE_servebench"))
        .args([
            "run",
            "--base-url",
            &engine.url,
            "--backend",
            "openai-chat",
            "--model",
            "Qwen/Qwen2.5-VL-7B-Instruct",
            "--served-model-name",
            &engine.model,
            "--dataset-name",
            "random-mm",
            "--num-prompts",
            "3",
            "--random-input-len",
            "16",
            "--random-output-len",
            "4",
            "--random-mm-bucket-config",
            "{(64, 64, 1): 1}",
            "--output-dir",
            dir.to_str().unwrap(),
            "--disable-tqdm",
        ])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .output()
        .expect("spawn servebench");
    let detail = format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // An orderly exit (results written), not a crash.
    assert!(matches!(out.status.code(), Some(0..=2)), "{detail}");
    let jsonl = find_records(&dir).unwrap_or_else(|| panic!("no records\n{detail}"));
    let records: Vec<RequestRecord> = fs::read_to_string(&jsonl)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 3, "{detail}");
    for r in &records {
        let f = r
            .failure
            .as_ref()
            .unwrap_or_else(|| panic!("{r:?}\n{detail}"));
        assert!(
            matches!(f.status, Some(400..=599)),
            "an HTTP refusal: {f:?}\n{detail}"
        );
        assert_eq!(r.images.map(|i| i.count), Some(1), "{r:?}");
    }
}
