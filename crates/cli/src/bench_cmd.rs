//! `servebench bench-server`: the scripted OpenAI-compatible server in the foreground, so
//! end-to-end benchmarks can run it as a process of its own; and `servebench accuracy`: how
//! far a run's records are from that server's log of the same requests.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use servebench_loadgen::scripted::{
    compare_to_log, read_log_jsonl, write_log_jsonl, Accuracy, ChunkShape, ErrorStats, Script,
    ScriptedServer, DEFAULT_MAX_TOKENS,
};
use servebench_metrics::RequestRecord;

/// Flags of `servebench bench-server`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchServerArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on; 0 picks a free one (the URL is printed on stdout).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Milliseconds from a request's arrival to its first token.
    #[arg(long, default_value_t = 0.0, value_name = "MS")]
    pub first_token_ms: f64,
    /// Milliseconds between tokens (0 with --first-token-ms 0: as fast as the socket takes).
    #[arg(long, default_value_t = 0.0, value_name = "MS")]
    pub itl_ms: f64,
    /// Tokens per response [default: the request's max_tokens, 16 when it names none].
    #[arg(long, value_name = "N")]
    pub tokens: Option<u64>,
    /// Tokens per SSE event.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub tokens_per_event: u32,
    /// Answer every generation request with chat-completion chunks (by default the shape
    /// follows the endpoint: chat chunks on /v1/chat/completions).
    #[arg(long)]
    pub chat: bool,
    /// The served model name.
    #[arg(long, default_value = "scripted-model")]
    pub model: String,
    /// Write the server's log (one JSON line per request: arrival, x-request-id, the write
    /// instant of every token event) to FILE when it stops (Ctrl-C or SIGTERM).
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
}

impl BenchServerArgs {
    /// The script these flags describe.
    pub fn script(&self) -> Result<Script> {
        let first = millis("--first-token-ms", self.first_token_ms)?;
        let itl = millis("--itl-ms", self.itl_ms)?;
        let script = Script::new()
            .first_token_delay(first)
            .inter_token_interval(itl)
            .tokens_per_event(self.tokens_per_event)
            .shape(if self.chat {
                ChunkShape::Chat
            } else {
                ChunkShape::ByPath
            })
            .model(self.model.clone())
            // Without a log file, per-event instants would only grow memory.
            .log_events(self.log.is_some());
        Ok(match self.tokens {
            Some(n) => script.tokens(n),
            None => script.tokens_from_request(DEFAULT_MAX_TOKENS),
        })
    }
}

fn millis(flag: &str, ms: f64) -> Result<Duration> {
    if !ms.is_finite() || ms < 0.0 {
        bail!("{flag} must be a non-negative number of milliseconds, got {ms}");
    }
    Ok(Duration::from_secs_f64(ms / 1000.0))
}

/// `servebench bench-server`: serve until Ctrl-C or SIGTERM, then write the log.
pub async fn bench_server(args: BenchServerArgs) -> Result<ExitCode> {
    let script = args.script()?;
    // Fail before serving, not after a long run, when the log cannot be written.
    let log_file = match &args.log {
        Some(path) => Some(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create the log file {}", path.display()))?,
        ),
        None => None,
    };
    let addr = resolve(&args.host, args.port).await?;
    let server = ScriptedServer::bind(addr, script)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let tokens = match args.tokens {
        Some(n) => n.to_string(),
        None => format!("the request's max_tokens (default {DEFAULT_MAX_TOKENS})"),
    };
    eprintln!(
        "Scripted server: first token after {} ms, then one every {} ms, {tokens} tokens, {} per event{}",
        args.first_token_ms,
        args.itl_ms,
        args.tokens_per_event,
        if args.chat { ", chat chunks" } else { "" }
    );
    println!("{}", server.base_url());
    let _ = std::io::stdout().flush();
    eprintln!("Serving on {} (Ctrl-C to stop)", server.base_url());

    shutdown_signal().await;
    let log = server.shutdown().await;
    eprintln!(
        "Scripted server stopped after {} generation requests.",
        log.len()
    );
    if let (Some(file), Some(path)) = (log_file, &args.log) {
        write_log_jsonl(&log, std::io::BufWriter::new(file))
            .with_context(|| format!("writing the log to {}", path.display()))?;
        eprintln!("Log: {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

async fn resolve(host: &str, port: u16) -> Result<SocketAddr> {
    tokio::net::lookup_host((host, port))
        .await
        .with_context(|| format!("cannot resolve {host}"))?
        .next()
        .with_context(|| format!("{host} resolves to no address"))
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

/// Flags of `servebench accuracy`.
#[derive(Debug, Clone, clap::Args)]
pub struct AccuracyArgs {
    /// The server's log, as `servebench bench-server --log` writes it.
    #[arg(long, value_name = "FILE")]
    pub server_log: PathBuf,
    /// The run's per-request records (`*.requests.jsonl`).
    #[arg(long, value_name = "FILE")]
    pub requests: PathBuf,
    /// Print the comparison as JSON.
    #[arg(long)]
    pub json: bool,
    /// Exit with status 1 when the mean TTFT or ITL error exceeds this many ms.
    #[arg(long, value_name = "MS")]
    pub max_mean_ms: Option<f64>,
    /// Exit with status 1 when the p99 TTFT or ITL error exceeds this many ms.
    #[arg(long, value_name = "MS")]
    pub max_p99_ms: Option<f64>,
}

/// `servebench accuracy`: join records and log by `x-request-id` and report the client's
/// TTFT and ITL error (mean, p50, p99, max, in ms).
pub async fn accuracy(args: AccuracyArgs) -> Result<ExitCode> {
    let log_text = read(&args.server_log)?;
    let log = read_log_jsonl(&log_text)
        .with_context(|| format!("{} is not a scripted-server log", args.server_log.display()))?;
    let records = read_records(&args.requests)?;
    let acc = compare_to_log(&records, &log);
    if acc.matched == 0 {
        bail!(
            "none of the {} successful records matches a logged request by x-request-id \
             (servebench-<id>); were both files written by the same run?",
            records.iter().filter(|r| r.is_success()).count()
        );
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&acc)?);
    } else {
        print!("{}", render(&acc, records.len(), log.len()));
    }
    let missed = [acc.ttft, acc.itl].into_iter().flatten().any(|s| {
        args.max_mean_ms.is_some_and(|m| s.mean_ms > m)
            || args.max_p99_ms.is_some_and(|m| s.p99_ms > m)
    });
    Ok(if missed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

fn read_records(path: &Path) -> Result<Vec<RequestRecord>> {
    let text = read(path)?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l)
                .with_context(|| format!("{}:{}: not a request record", path.display(), i + 1))
        })
        .collect()
}

/// The comparison as a small table.
pub fn render(acc: &Accuracy, records: usize, logged: usize) -> String {
    let mut out = format!(
        "Client timing error: {} of {records} records joined with {logged} logged requests \
         ({} successful records unmatched, {} with differing event counts)\n",
        acc.matched, acc.unmatched, acc.event_count_mismatches
    );
    out.push_str(&format!(
        "{:<6} {:>8} {:>9} {:>9} {:>9} {:>9} {:>10}\n",
        "", "samples", "mean ms", "p50 ms", "p99 ms", "max ms", "bias ms"
    ));
    for (name, stats) in [("TTFT", acc.ttft), ("ITL", acc.itl)] {
        out.push_str(&row(name, stats));
    }
    out.push_str(
        "Errors are absolute: measured minus the server's logged value for the same event; \
         bias is the mean signed error.\n",
    );
    out
}

fn row(name: &str, stats: Option<ErrorStats>) -> String {
    match stats {
        Some(s) => format!(
            "{name:<6} {:>8} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>+10.3}\n",
            s.count, s.mean_ms, s.p50_ms, s.p99_ms, s.max_ms, s.mean_signed_ms
        ),
        None => format!("{name:<6} {:>8}\n", 0),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::Parser;
    use servebench_loadgen::scripted::{OutputLength, RequestLog};
    use servebench_metrics::{CountSource, TokenEvent};

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchServerArgs,
    }

    #[test]
    fn bench_server_flags_build_their_script() {
        let cli = Cli::parse_from([
            "x",
            "--first-token-ms",
            "50",
            "--itl-ms",
            "20",
            "--tokens",
            "128",
            "--tokens-per-event",
            "2",
            "--chat",
        ]);
        let s = cli.args.script().unwrap();
        assert_eq!(s.first_token_delay, Duration::from_millis(50));
        assert_eq!(s.inter_token_interval, Duration::from_millis(20));
        assert_eq!(s.output, OutputLength::Fixed(128));
        assert_eq!(s.tokens_per_event, 2);
        assert_eq!(s.shape, ChunkShape::Chat);
        assert!(!s.log_events, "no --log, no per-event instants");
        let default = Cli::parse_from(["x"]).args.script().unwrap();
        assert_eq!(
            default.output,
            OutputLength::FromRequest {
                default: DEFAULT_MAX_TOKENS
            }
        );
    }

    #[test]
    fn negative_delays_are_refused() {
        let cli = Cli::parse_from(["x", "--itl-ms=-1"]);
        let err = cli.args.script().unwrap_err().to_string();
        assert!(err.contains("--itl-ms"), "{err}");
    }

    #[tokio::test]
    async fn accuracy_joins_files_by_request_id_and_applies_thresholds() {
        let dir =
            std::env::temp_dir().join(format!("servebench-accuracy-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = RequestLog {
            index: 0,
            request_id: Some("servebench-3".into()),
            path: "/v1/completions".into(),
            status: 200,
            events_ns: vec![50_000_000, 70_000_000, 90_000_000],
            ..RequestLog::default()
        };
        let record = RequestRecord {
            id: 3,
            intended: 0,
            released: 0,
            sent: 1_000_000,
            // 0.5 ms later than the log on the first event, exact gaps afterwards.
            first_token: Some(51_500_000),
            end: Some(91_500_000),
            done: Some(91_500_000),
            waited_for_slot: false,
            events: [51_500_000, 71_500_000, 91_500_000]
                .map(|t| TokenEvent { t, chars: 4 })
                .to_vec(),
            input_tokens: 4,
            input_source: CountSource::Usage,
            output_tokens: 3,
            output_source: CountSource::Usage,
            intended_input_tokens: 4,
            max_tokens: Some(3),
            cached_tokens: None,
            finish_reason: Some("length".into()),
            text: None,
            failure: None,
        };
        let log_path = dir.join("server.jsonl");
        let rec_path = dir.join("run.requests.jsonl");
        write_log_jsonl(&[log], std::fs::File::create(&log_path).unwrap()).unwrap();
        std::fs::write(
            &rec_path,
            format!("{}\n", serde_json::to_string(&record).unwrap()),
        )
        .unwrap();

        let args = |max_mean_ms| AccuracyArgs {
            server_log: log_path.clone(),
            requests: rec_path.clone(),
            json: true,
            max_mean_ms,
            max_p99_ms: None,
        };
        assert_eq!(accuracy(args(Some(1.0))).await.unwrap(), ExitCode::SUCCESS);
        assert_eq!(accuracy(args(Some(0.1))).await.unwrap(), ExitCode::from(1));

        let acc = compare_to_log(
            &[record],
            &read_log_jsonl(&read(&log_path).unwrap()).unwrap(),
        );
        let ttft = acc.ttft.unwrap();
        assert!((ttft.mean_ms - 0.5).abs() < 1e-9, "{ttft:?}");
        assert_eq!(acc.itl.unwrap().max_ms, 0.0);
        let table = render(&acc, 1, 1);
        assert!(table.contains("TTFT") && table.contains("0.500"), "{table}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
