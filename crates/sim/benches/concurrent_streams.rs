//! 2,000 concurrent streaming clients against an in-process simulator on localhost: how far
//! does the engine fall behind its own schedule while the server writes every token of every
//! stream? Reports the step lateness distribution (`sim:step_lateness_seconds`), the last
//! `sim:engine_lag_seconds`, re-anchors, and client-side throughput.
//!
//! `cargo bench -p servebench-sim --bench concurrent_streams` (options: `--streams N`,
//! `--max-tokens N`, `--prompt-tokens N`, `--precise-timing`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use servebench_sim::{spawn_in_process, SimArgs};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Options {
    streams: usize,
    max_tokens: u32,
    prompt_tokens: u32,
    precise: bool,
}

fn options() -> Options {
    let mut o = Options {
        streams: 2000,
        max_tokens: 128,
        prompt_tokens: 64,
        precise: false,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let next = || args.get(i + 1).and_then(|v| v.parse().ok());
        match args[i].as_str() {
            "--streams" => o.streams = next().unwrap_or(o.streams as u32) as usize,
            "--max-tokens" => o.max_tokens = next().unwrap_or(o.max_tokens),
            "--prompt-tokens" => o.prompt_tokens = next().unwrap_or(o.prompt_tokens),
            "--precise-timing" => {
                o.precise = true;
                i += 1;
                continue;
            }
            // `cargo bench` passes `--bench`; ignore flags this program does not know.
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    o
}

/// One streaming client: sends the request, reads until `[DONE]`, counts SSE events.
async fn client(addr: SocketAddr, body: String, events: Arc<AtomicU64>) -> Result<(), String> {
    let mut s = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut tail: Vec<u8> = Vec::new();
    loop {
        let n = s.read(&mut buf).await.map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("stream ended before [DONE]".into());
        }
        let data = &buf[..n];
        let count = memchr_count(data, b"data: ");
        events.fetch_add(count as u64, Ordering::Relaxed);
        // Keep a short tail so a `[DONE]` split across reads is still seen.
        tail.extend_from_slice(data);
        if tail.windows(12).any(|w| w == b"data: [DONE]") {
            return Ok(());
        }
        let keep = tail.len().saturating_sub(16);
        tail.drain(..keep);
    }
}

fn memchr_count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

/// Linear interpolation inside the cumulative histogram, as Prometheus' histogram_quantile.
fn quantile(buckets: &[(f64, f64)], q: f64) -> f64 {
    let Some(&(_, total)) = buckets.last() else {
        return f64::NAN;
    };
    let rank = q * total;
    let mut prev = (0.0, 0.0);
    for &(le, c) in buckets {
        if c >= rank {
            if le.is_infinite() {
                return prev.0;
            }
            let frac = if c > prev.1 {
                (rank - prev.1) / (c - prev.1)
            } else {
                0.0
            };
            return prev.0 + (le - prev.0) * frac;
        }
        prev = (le, c);
    }
    prev.0
}

fn metric_lines<'a>(page: &'a str, name: &'a str) -> impl Iterator<Item = (&'a str, f64)> + 'a {
    page.lines()
        .filter(move |l| l.starts_with(name))
        .filter_map(|l| {
            let (series, v) = l.rsplit_once(' ')?;
            Some((series, v.parse().ok()?))
        })
}

async fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr)
        .await
        .expect("connect for /metrics");
    let req = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes())
        .await
        .expect("write /metrics request");
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.expect("read /metrics");
    String::from_utf8_lossy(&out).into_owned()
}

fn main() {
    let o = options();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(run(o));
}

async fn run(o: Options) {
    let spec = format!(
        "llama-3.1-8b --gpu h100 --jitter-sigma 0 --eos-len-median 0 --max-model-len 4096 \
         --max-num-seqs {} --seed 1{}",
        o.streams.max(1),
        if o.precise { " --precise-timing" } else { "" }
    );
    let sim = SimArgs::parse_spec(&spec)
        .and_then(|a| a.resolve())
        .expect("simulator configuration");
    for line in sim.banner_lines() {
        println!("{line}");
    }
    let (addr, handle) = spawn_in_process(sim).await.expect("start simulator");
    let events = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(o.streams);
    for i in 0..o.streams {
        // Distinct prompts: no prefix sharing, every stream prefills.
        let prompt: Vec<u32> = (0..o.prompt_tokens)
            .map(|k| 1000 + (i as u32 * 7919 + k * 31) % 150_000)
            .collect();
        let body = serde_json::json!({
            "prompt": prompt, "max_tokens": o.max_tokens, "ignore_eos": true, "stream": true,
        })
        .to_string();
        tasks.push(tokio::spawn(client(addr, body, events.clone())));
        // Stay under the listen backlog while connecting.
        if i % 250 == 249 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let mut failures = 0;
    for t in tasks {
        match t.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                failures += 1;
                if failures <= 5 {
                    eprintln!("client failed: {e}");
                }
            }
            Err(e) => {
                failures += 1;
                eprintln!("client task panicked: {e}");
            }
        }
    }
    let elapsed = start.elapsed();
    let page = scrape(addr).await;
    handle.shutdown().await.expect("shutdown");

    let buckets: Vec<(f64, f64)> = metric_lines(&page, "sim:step_lateness_seconds_bucket")
        .filter_map(|(series, v)| {
            let le = series.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, v))
        })
        .collect();
    let get = |name: &str| {
        metric_lines(&page, name)
            .next()
            .map(|(_, v)| v)
            .unwrap_or(f64::NAN)
    };
    let steps = get("sim:steps_total");
    let tokens = get("vllm:generation_tokens_total");
    println!();
    println!(
        "streams {}  failures {failures}  wall {:.2} s",
        o.streams,
        elapsed.as_secs_f64()
    );
    println!(
        "engine steps {steps}  mean step {:.1} ms  generated tokens {tokens}  ({:.0} tok/s)  SSE events seen {}",
        get("sim:step_duration_seconds_sum") / steps * 1e3,
        tokens / elapsed.as_secs_f64(),
        events.load(Ordering::Relaxed)
    );
    println!(
        "step lateness: p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms  (last sim:engine_lag_seconds {:.3} ms, re-anchors {})",
        quantile(&buckets, 0.50) * 1e3,
        quantile(&buckets, 0.90) * 1e3,
        quantile(&buckets, 0.99) * 1e3,
        get("sim:engine_lag_seconds") * 1e3,
        get("sim:engine_reanchors_total"),
    );
    println!("preemptions {}", get("vllm:num_preemptions_total"));
}
