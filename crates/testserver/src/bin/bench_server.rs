//! `bench-server`: the scripted OpenAI-compatible server in the foreground, so end-to-end
//! benchmarks can run it as a process of its own
//! (`cargo run -p servebench-testserver --bin bench-server -- ...`).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use servebench_sim::server::stop_requested;
use servebench_testserver::{
    write_log_jsonl, ChunkShape, Script, ScriptedServer, DEFAULT_MAX_TOKENS,
};

mod support;

use support::{context, Result};

/// Serve a scripted OpenAI-compatible SSE server for client benchmarks (fixed first-token
/// delay and inter-token interval, a log of every write).
#[derive(Debug, Clone, Parser)]
#[command(name = "bench-server")]
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
    fn script(&self) -> Result<Script> {
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
        return Err(format!(
            "{flag} must be a non-negative number of milliseconds, got {ms}"
        ));
    }
    Ok(Duration::from_secs_f64(ms / 1000.0))
}

/// Serve until Ctrl-C or SIGTERM, then write the log.
async fn bench_server(args: BenchServerArgs) -> Result<ExitCode> {
    let script = args.script()?;
    // Fail before serving, not after a long run, when the log cannot be written.
    let log_file = match &args.log {
        Some(path) => Some(context(std::fs::File::create(path), || {
            format!("cannot create the log file {}", path.display())
        })?),
        None => None,
    };
    let addr = resolve(&args.host, args.port).await?;
    let server = context(ScriptedServer::bind(addr, script).await, || {
        format!("cannot listen on {addr}")
    })?;
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

    stop_requested().await;
    let log = server.shutdown().await;
    eprintln!(
        "Scripted server stopped after {} generation requests.",
        log.len()
    );
    if let (Some(file), Some(path)) = (log_file, &args.log) {
        context(write_log_jsonl(&log, std::io::BufWriter::new(file)), || {
            format!("writing the log to {}", path.display())
        })?;
        eprintln!("Log: {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

async fn resolve(host: &str, port: u16) -> Result<SocketAddr> {
    context(tokio::net::lookup_host((host, port)).await, || {
        format!("cannot resolve {host}")
    })?
    .next()
    .ok_or_else(|| format!("{host} resolves to no address"))
}

fn main() -> ExitCode {
    let args = BenchServerArgs::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build();
    support::exit(
        context(runtime, || "cannot start the async runtime".to_owned())
            .and_then(|rt| rt.block_on(bench_server(args))),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use servebench_testserver::OutputLength;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchServerArgs,
    }

    #[test]
    fn bench_server_flags_build_their_script() {
        let cli = BenchServerArgs::parse_from([
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
        let s = cli.script().unwrap();
        assert_eq!(s.first_token_delay, Duration::from_millis(50));
        assert_eq!(s.inter_token_interval, Duration::from_millis(20));
        assert_eq!(s.output, OutputLength::Fixed(128));
        assert_eq!(s.tokens_per_event, 2);
        assert_eq!(s.shape, ChunkShape::Chat);
        assert!(!s.log_events, "no --log, no per-event instants");
        let default = BenchServerArgs::parse_from(["x"]).script().unwrap();
        assert_eq!(
            default.output,
            OutputLength::FromRequest {
                default: DEFAULT_MAX_TOKENS
            }
        );
    }

    #[test]
    fn negative_delays_are_refused() {
        let cli = BenchServerArgs::parse_from(["x", "--itl-ms=-1"]);
        let err = cli.script().unwrap_err().to_string();
        assert!(err.contains("--itl-ms"), "{err}");
    }
}
