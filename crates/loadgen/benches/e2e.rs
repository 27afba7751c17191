//! End-to-end measurements of the client against the scripted server running as a separate
//! process (so the client's CPU time is its own):
//!
//! - `ingest`: a zero-delay server streams `--tokens` tokens per request to `--streams`
//!   concurrent streams; reports output tokens per second and the client's CPU seconds
//!   (user + system, `getrusage` of the client process during the run) per million tokens.
//! - `accuracy`: the server sends the first token `--first-token-ms` after arrival and one
//!   token every `--itl-ms`; reports the TTFT and ITL error of the client's records against
//!   the server's log of the same requests (joined by `x-request-id`).
//! - `dispatch`: `--rate` (1,000) requests per second for `--seconds` (10) against a server
//!   answering one token at once; reports the dispatch lag (`released − intended`).
//! - `serve`: the server itself (started by the others as a child process).
//!
//! `accuracy` also reports, per token event, how much later the client stamped it than the
//! server wrote it, on the wall clock (the run's clock anchor against the server's), the
//! clocks that stamped the records, and the client's peak resident memory per stream.
//!
//! ```text
//! cargo bench -p servebench-loadgen --bench e2e -- ingest --streams 64 --tokens 1000
//! cargo bench -p servebench-loadgen --bench e2e -- accuracy --streams 1024
//! ```
//! With no mode, runs `ingest` and `accuracy` at 64 and 1,024 streams.
//!
//! `accuracy --cold` skips the warm-up requests: the burst meets no open connection but those
//! the run opens ahead of it (`SERVEBENCH_OPEN_AHEAD=off`: none, each request connects).
//!
//! `--tls` (with `ingest` or `accuracy`) puts TLS between the client and the server: the
//! server process terminates it (rustls, a self-signed certificate the client does not verify)
//! in front of the scripted server, so the client's CPU per token over https can be set against
//! plain HTTP's. Accuracy over TLS includes the server-side hop through the terminator.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::Duration;

use servebench_loadgen::{
    run_load, warm_up, ApiKind, BackendClient, ClientOptions, LoadSpec, StopSignal, Target,
    Transport,
};
use servebench_testserver::{
    compare_to_log, read_log_jsonl, write_log_jsonl, ErrorStats, Script, ScriptedServer,
};

type Flags = HashMap<String, String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let mode = args.first().cloned().unwrap_or_default();
    let flags = parse_flags(args.get(1..).unwrap_or_default());
    // `--realtime-priority N`: the client's threads under SCHED_FIFO, as `run` offers it.
    if mode != "serve" {
        if let Some(p) = flags.get("realtime-priority") {
            let p: u8 = p.parse().expect("--realtime-priority takes 1 to 99");
            if let Err(e) = servebench_loadgen::realtime::enable(p) {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
            servebench_loadgen::realtime::apply_to_current_thread();
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_start(servebench_loadgen::realtime::apply_to_current_thread)
        .build()
        .unwrap();
    match mode.as_str() {
        "serve" => rt.block_on(serve(&flags)),
        "ingest" => rt.block_on(ingest(&flags)),
        "accuracy" => rt.block_on(accuracy(&flags)),
        "dispatch" => rt.block_on(dispatch(&flags)),
        "" => {
            rt.block_on(ingest(&flags));
            for streams in ["64", "1024"] {
                let mut f = flags.clone();
                f.insert("streams".into(), streams.into());
                rt.block_on(accuracy(&f));
            }
        }
        other => {
            eprintln!("unknown mode {other:?}: use ingest, accuracy or serve");
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}

fn parse_flags(args: &[String]) -> Flags {
    let mut flags = Flags::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if let Some(name) = a.strip_prefix("--") {
            if name == "tls" || name == "cold" {
                flags.insert(name.to_owned(), String::new());
                continue;
            }
            let value = it.next().cloned().unwrap_or_default();
            flags.insert(name.to_owned(), value);
        }
    }
    flags
}

fn num(flags: &Flags, name: &str, default: u64) -> u64 {
    flags
        .get(name)
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("--{name} {v:?} is not a number"))
        })
        .unwrap_or(default)
}

/// The server child: serves until its stdin closes, then writes its log.
async fn serve(flags: &Flags) {
    let script = Script::new()
        .first_token_delay(Duration::from_millis(num(flags, "first-token-ms", 0)))
        .inter_token_interval(Duration::from_millis(num(flags, "itl-ms", 0)))
        .tokens_from_request(num(flags, "tokens", 16))
        .log_events(flags.contains_key("log"));
    let server = ScriptedServer::start(script).await.unwrap();
    if flags.contains_key("tls") {
        println!("{}", tls_front(server.base_url()).await);
    } else {
        println!("{}", server.base_url());
    }
    // The parent closes our stdin to stop us (portable, and lets us write the log first).
    let _ = tokio::task::spawn_blocking(|| std::io::stdin().read_to_end(&mut Vec::new())).await;
    let log = server.shutdown().await;
    let cpu = servebench_loadgen::health::process_cpu_times();
    eprintln!(
        "  (server process CPU {:.3} s: user {:.3}, sys {:.3})",
        cpu.total(),
        cpu.user_s,
        cpu.system_s
    );
    if let Some(path) = flags.get("log") {
        write_log_jsonl(
            &log,
            std::io::BufWriter::new(std::fs::File::create(path).unwrap()),
        )
        .unwrap();
    }
}

/// A TLS terminator in front of `upstream` (`http://host:port`): its `https://` URL.
async fn tls_front(upstream: String) -> String {
    let upstream = upstream.trim_start_matches("http://").to_owned();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let _ = tcp.set_nodelay(true);
            let (acceptor, upstream) = (acceptor.clone(), upstream.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut up) = tokio::net::TcpStream::connect(upstream.as_str()).await else {
                    return;
                };
                let _ = up.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
            });
        }
    });
    format!("https://{addr}")
}

struct ServerChild {
    child: Child,
    url: String,
}

fn spawn_server(args: &[&str], tls: bool) -> ServerChild {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .arg("serve")
        .args(args)
        .args(tls.then_some("--tls"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    ServerChild {
        child,
        url: line.trim().to_owned(),
    }
}

impl ServerChild {
    fn stop(mut self) {
        drop(self.child.stdin.take());
        self.child.wait().unwrap();
    }
}

fn client(url: &str) -> Arc<BackendClient> {
    let target = Target {
        base_url: url.to_owned(),
        endpoint: "/v1/completions".into(),
        api: ApiKind::Completions,
        model: "scripted-model".into(),
        headers: vec![],
        api_key: None,
        extra_body: serde_json::Map::new(),
        ignore_eos: true,
        transport: Transport {
            insecure: url.starts_with("https://"),
            ..Transport::default()
        },
    };
    Arc::new(BackendClient::new(target, ClientOptions::default()).unwrap())
}

/// A realistic prompt: ~256 words.
fn prompt() -> String {
    "The quick brown fox jumps over the lazy dog. ".repeat(28)
}

async fn ingest(flags: &Flags) {
    let streams = num(flags, "streams", 64);
    let tokens = num(flags, "tokens", 1000);
    let requests = num(flags, "requests", streams * 24);
    let tls = flags.contains_key("tls");
    let server = spawn_server(&["--tokens", &tokens.to_string()], tls);
    let client = client(&server.url);
    // Open the connections first, as a warm-up would.
    let warm = client.prepare(u64::MAX, "warm up", 2, Some(1));
    warm_up(
        Arc::clone(&client),
        warm,
        streams as usize,
        Some(streams as usize),
        &StopSignal::never(),
    )
    .await;

    let prompt = prompt();
    let reqs = (0..requests)
        .map(|i| client.prepare(i, &prompt, 256, Some(tokens)))
        .collect();
    let spec = LoadSpec {
        schedule: vec![0; requests as usize],
        max_concurrency: Some(streams as usize),
        progress: None,
        scrape_every: None,
        start_at: None,
    };
    let out = run_load(client, reqs, spec, None, StopSignal::never())
        .await
        .unwrap();
    server.stop();

    let failed = out.records.iter().filter(|r| !r.is_success()).count();
    let total_tokens: u64 = out.records.iter().map(|r| r.output_tokens).sum();
    let events: usize = out.records.iter().map(|r| r.events.len()).sum();
    let secs = out.duration_ns as f64 / 1e9;
    let cpu = out.cpu.total();
    let over = if tls { " over TLS" } else { "" };
    println!(
        "ingest{over}: {streams} streams, {requests} requests x {tokens} tokens, {failed} failed"
    );
    println!("  output tokens      {total_tokens} ({events} token events)");
    println!("  duration           {secs:.3} s");
    println!(
        "  output throughput  {:.0} tok/s",
        total_tokens as f64 / secs
    );
    println!(
        "  client CPU         {cpu:.3} s (user {:.3}, sys {:.3}) = {:.3} CPU-s per million tokens",
        out.cpu.user_s,
        out.cpu.system_s,
        cpu / (total_tokens as f64 / 1e6)
    );
}

async fn accuracy(flags: &Flags) {
    let streams = num(flags, "streams", 64);
    let first_ms = num(flags, "first-token-ms", 50);
    let itl_ms = num(flags, "itl-ms", 20);
    let tokens = num(flags, "tokens", 128);
    let waves = num(flags, "waves", if streams >= 1024 { 1 } else { 4 });
    // Spread the sends of each wave over this many ms (0: each wave is one burst).
    let spread_ms = num(flags, "spread-ms", 0);
    let requests = streams * waves;
    let log_path =
        std::env::temp_dir().join(format!("servebench-accuracy-{}.jsonl", std::process::id()));
    let log_arg = log_path.display().to_string();
    let server = spawn_server(
        &[
            "--first-token-ms",
            &first_ms.to_string(),
            "--itl-ms",
            &itl_ms.to_string(),
            "--tokens",
            &tokens.to_string(),
            "--log",
            &log_arg,
        ],
        flags.contains_key("tls"),
    );
    let client = client(&server.url);
    let rss_before = rss_kib("VmRSS");
    // `--cold`: no warm-up requests; the run opens its connections itself (ahead of the first
    // burst unless SERVEBENCH_OPEN_AHEAD=off).
    if !flags.contains_key("cold") {
        let warm = client.prepare(u64::MAX, "warm up", 2, Some(1));
        warm_up(
            Arc::clone(&client),
            warm,
            streams as usize,
            Some(streams as usize),
            &StopSignal::never(),
        )
        .await;
    }

    let prompt = prompt();
    let reqs = (0..requests)
        .map(|i| client.prepare(i, &prompt, 256, Some(tokens)))
        .collect();
    let schedule = (0..requests)
        .map(|i| (i % streams) * spread_ms * 1_000_000 / streams)
        .collect();
    let spec = LoadSpec {
        schedule,
        max_concurrency: Some(streams as usize),
        progress: None,
        scrape_every: None,
        start_at: None,
    };
    let out = run_load(client, reqs, spec, None, StopSignal::never())
        .await
        .unwrap();
    server.stop();
    let log = read_log_jsonl(&std::fs::read_to_string(&log_path).unwrap()).unwrap();
    let _ = std::fs::remove_file(&log_path);

    let failed = out.records.iter().filter(|r| !r.is_success()).count();
    let acc = compare_to_log(&out.records, &log);
    // How late the server itself was against its script (not part of the client's error).
    let mut late: Vec<i64> = Vec::new();
    for e in log
        .iter()
        .filter(|e| e.record_id().is_some_and(|id| id < requests))
    {
        for (k, t) in e.events_ns.iter().enumerate() {
            let due = (first_ms + k as u64 * itl_ms) * 1_000_000;
            late.push(*t as i64 - due as i64);
        }
    }
    // The TTFT error has two legs: the request's (sent → arrival) and the first event's
    // (write → receipt). Client and server clocks have different origins, so the request leg
    // is shown relative to the fastest request of the run.
    let by_id: HashMap<u64, &servebench_testserver::RequestLog> = log
        .iter()
        .filter_map(|e| Some((e.record_id()?, e)))
        .collect();
    let legs: Vec<i64> = out
        .records
        .iter()
        .filter_map(|r| Some(by_id.get(&r.id)?.arrival_ns as i64 - r.sent as i64))
        .collect();
    let fastest = legs.iter().copied().min().unwrap_or(0);
    let request_leg: Vec<i64> = legs.iter().map(|d| d - fastest).collect();
    println!(
        "accuracy: {streams} streams, {requests} requests (each wave sent over {spread_ms} ms), first token {first_ms} ms, ITL {itl_ms} ms, {tokens} tokens, {failed} failed"
    );
    println!(
        "  joined {} records ({} unmatched, {} with differing event counts); client CPU {:.2} s over {:.2} s",
        acc.matched,
        acc.unmatched,
        acc.event_count_mismatches,
        out.cpu.total(),
        out.duration_ns as f64 / 1e9
    );
    print_stats("TTFT error", acc.ttft);
    print_stats("ITL error ", acc.itl);
    print_stats(
        "request leg beyond the fastest",
        ErrorStats::from_errors_ns(&request_leg),
    );
    print_stats(
        "server lateness vs script",
        ErrorStats::from_errors_ns(&late),
    );
    // The client's own wait before a request's first byte went out (connect, CPU, socket).
    let client_wait: Vec<i64> = out
        .records
        .iter()
        .map(|r| r.sent as i64 - r.intended as i64)
        .collect();
    print_stats(
        "client wait (intended -> sent)",
        ErrorStats::from_errors_ns(&client_wait),
    );
    // Per token event: the client's stamp against the server's write, both on the wall clock.
    let anchor = out
        .started_at
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let mut stamped_late: Vec<i64> = Vec::new();
    for r in &out.records {
        let Some(e) = by_id.get(&r.id) else { continue };
        let Some(arrival_wall) = e.arrival_wall_ns else {
            continue;
        };
        for (ev, w) in r.events.iter().zip(&e.events_ns) {
            stamped_late.push(anchor + ev.t as i64 - (arrival_wall + w) as i64);
        }
    }
    print_stats(
        "token stamped after the server wrote it",
        ErrorStats::from_errors_ns(&stamped_late),
    );
    let mut clocks: std::collections::BTreeMap<&str, usize> = Default::default();
    for r in &out.records {
        *clocks
            .entry(r.stamp_clock.map_or("none", |c| c.as_str()))
            .or_default() += 1;
    }
    println!("  records by stamping clock: {clocks:?}");
    if let (Some(before), Some(peak)) = (rss_before, rss_kib("VmHWM")) {
        println!(
            "  client RSS {:.1} MiB before, peak {:.1} MiB: {:.1} KiB per stream",
            before as f64 / 1024.0,
            peak as f64 / 1024.0,
            (peak.saturating_sub(before)) as f64 / streams as f64
        );
    }
}

/// A `/proc/self/status` memory line (`VmRSS`, `VmHWM`) in KiB.
fn rss_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

async fn dispatch(flags: &Flags) {
    let rate = num(flags, "rate", 1000);
    let seconds = num(flags, "seconds", 10);
    let requests = rate * seconds;
    let server = spawn_server(&["--tokens", "1"], false);
    let client = client(&server.url);
    let warm = client.prepare(u64::MAX, "warm up", 2, Some(1));
    warm_up(
        Arc::clone(&client),
        warm,
        64,
        Some(64),
        &StopSignal::never(),
    )
    .await;
    let reqs = (0..requests)
        .map(|i| client.prepare(i, "hello", 1, Some(1)))
        .collect();
    let schedule = (0..requests).map(|i| i * 1_000_000_000 / rate).collect();
    let spec = LoadSpec {
        schedule,
        max_concurrency: None,
        progress: None,
        scrape_every: None,
        start_at: None,
    };
    let out = run_load(client, reqs, spec, None, StopSignal::never())
        .await
        .unwrap();
    server.stop();
    let lag: Vec<i64> = out
        .records
        .iter()
        .map(|r| r.released as i64 - r.intended as i64)
        .collect();
    let failed = out.records.iter().filter(|r| !r.is_success()).count();
    println!(
        "dispatch: {requests} requests at {rate}/s, {failed} failed; client CPU {:.2} s over {:.2} s",
        out.cpu.total(),
        out.duration_ns as f64 / 1e9
    );
    print_stats("dispatch lag", ErrorStats::from_errors_ns(&lag));
}

fn print_stats(name: &str, s: Option<ErrorStats>) {
    match s {
        Some(s) => println!(
            "  {name}: n={} mean {:.3} ms  p50 {:.3} ms  p99 {:.3} ms  max {:.3} ms  (mean signed {:+.3} ms)",
            s.count, s.mean_ms, s.p50_ms, s.p99_ms, s.max_ms, s.mean_signed_ms
        ),
        None => println!("  {name}: no samples"),
    }
}
