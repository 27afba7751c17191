//! An inference server this process starts and stops (`sweep serve`, `--server-cmd`): its
//! own process group, a free port, output kept in a log file, ready when `/health` answers 200
//! and `/v1/models` lists a model, stopped by SIGTERM then SIGKILL to the whole group, and its
//! port confirmed free before the next server starts.

pub mod logged;
pub mod managed;
pub mod port;

use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use servebench_loadgen::{ApiKind, Target};

pub use port::Addressed;

/// Lines of the server log quoted in an error.
pub const TAIL_LINES: usize = 30;

/// How a server is started and stopped.
#[derive(Clone)]
pub struct Lifecycle {
    /// How long the server may take to become ready.
    pub ready_timeout: Duration,
    /// How long SIGTERM has before SIGKILL.
    pub grace: Duration,
    /// Copy the server's output to our stderr as well as its log.
    pub echo: bool,
    /// The runs' API key: a server that demands one (`vllm serve --api-key`) answers the
    /// readiness checks and the prefix-cache reset only with it.
    pub api_key: Option<String>,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            ready_timeout: Duration::from_secs(300),
            grace: Duration::from_secs(10),
            echo: false,
            api_key: None,
        }
    }
}

impl std::fmt::Debug for Lifecycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key stays out of every log line.
        f.debug_struct("Lifecycle")
            .field("ready_timeout", &self.ready_timeout)
            .field("grace", &self.grace)
            .field("echo", &self.echo)
            .field("api_key", &self.api_key.as_ref().map(|_| "***"))
            .finish()
    }
}

/// A running server.
pub struct ServerProcess {
    child: Child,
    /// The command as started (port settled).
    pub addressed: Addressed,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
    grace: Duration,
    exit: Option<ExitStatus>,
    api_key: Option<String>,
}

impl std::fmt::Debug for ServerProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerProcess")
            .field("pid", &self.pid())
            .field("argv", &self.addressed.argv)
            .field("log", &self.log)
            .finish()
    }
}

impl ServerProcess {
    /// Starts `argv` (with `{port}` settled) in its own process group, output to `log`, and
    /// waits until it is ready. A server that exits first, or is not ready in time, is an error
    /// quoting its exit status and the tail of its log (and is stopped).
    pub async fn start(argv: &[String], log: &Path, how: &Lifecycle) -> Result<ServerProcess> {
        let addressed = port::address(argv)?;
        if port::in_use(addressed.port) {
            bail!(
                "port {} is already in use before the server starts ({})",
                addressed.port,
                shell_words(&crate::redact_argv(&addressed.argv))
            );
        }
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let child = logged::spawn(&addressed.argv, log, how.echo, true)?;
        let mut server = ServerProcess {
            child,
            addressed,
            log: log.to_path_buf(),
            grace: how.grace,
            exit: None,
            api_key: how.api_key.clone(),
        };
        eprintln!(
            "Server started (pid {}): {}",
            server.pid(),
            shell_words(&crate::redact_argv(&server.addressed.argv))
        );
        if let Err(e) = server.wait_ready(how.ready_timeout).await {
            server.stop().await;
            return Err(e);
        }
        Ok(server)
    }

    /// The process id of the server (and of its process group).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `http://host:port` of the server.
    pub fn base_url(&self) -> String {
        self.addressed.base_url()
    }

    /// The exit status, once the server has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().ok().flatten();
        }
        self.exit
    }

    /// The last lines of the server's log.
    pub fn log_tail(&self) -> String {
        logged::tail(&self.log, TAIL_LINES)
    }

    fn probe(&self) -> Target {
        Target {
            base_url: self.base_url(),
            endpoint: "/v1/completions".to_owned(),
            api: ApiKind::Completions,
            model: String::new(),
            headers: Vec::new(),
            api_key: self.api_key.clone(),
            extra_body: serde_json::Map::new(),
            ignore_eos: false,
            transport: Default::default(),
        }
    }

    async fn ready_now(&self) -> bool {
        let probe = self.probe();
        let t = Duration::from_secs(2);
        let healthy = servebench_loadgen::probe::get_text(&probe, "/health", t)
            .await
            .is_ok();
        healthy
            && servebench_loadgen::probe::first_model(&probe, t)
                .await
                .is_ok()
    }

    async fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.exited() {
                bail!(
                    "the server exited before it was ready ({status}); last lines of {}:\n{}",
                    self.log.display(),
                    self.log_tail()
                );
            }
            if self.ready_now().await {
                eprintln!(
                    "Server ready at {} after {:.1} s",
                    self.base_url(),
                    start.elapsed().as_secs_f64()
                );
                return Ok(());
            }
            if start.elapsed() > timeout {
                bail!(
                    "the server was not ready within {:.0} s (/health 200 and a model in /v1/models); last lines of {}:\n{}",
                    timeout.as_secs_f64(),
                    self.log.display(),
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Empties the server's prefix cache where it offers to (vLLM's `POST
    /// /reset_prefix_cache`), so one run's prompts do not speed up the next; a server without
    /// the endpoint is fine.
    pub async fn reset_prefix_cache(&self) {
        let r = servebench_loadgen::probe::post_status(
            &self.probe(),
            "/reset_prefix_cache",
            Duration::from_secs(10),
        )
        .await;
        match r {
            Ok(s) if (200..300).contains(&s) => {}
            Ok(404 | 405) => {}
            Ok(s) => tracing::warn!("POST /reset_prefix_cache answered HTTP {s}"),
            Err(e) => tracing::warn!("POST /reset_prefix_cache: {e}"),
        }
    }

    /// SIGTERM to the process group, SIGKILL after the grace period, then waits until the
    /// port accepts no connection. Problems are reported, not returned: a stop must finish.
    pub async fn stop(&mut self) {
        let group = Pid::from_raw(self.child.id() as i32);
        let _ = killpg(group, Signal::SIGTERM);
        let start = Instant::now();
        while self.exited().is_none() && start.elapsed() < self.grace {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The leader may be gone while workers it started still hold the GPU or the port.
        let _ = killpg(group, Signal::SIGKILL);
        if self.exited().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if let Err(e) = port::wait_free(self.addressed.port, Duration::from_secs(30)).await {
            eprintln!("warning: {e}");
        }
        eprintln!("Server stopped (pid {})", self.pid());
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // A server must not outlive the command that started it, even on an error path.
        if self.exited().is_none() {
            let _ = killpg(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

/// `argv` with a leading `servebench` (as the guide writes server commands) run as this very
/// binary, so the server is the same version as the client whether or not one is on PATH.
pub fn resolve_self(mut argv: Vec<String>) -> Vec<String> {
    if argv.first().is_some_and(|a| a == "servebench") {
        if let Ok(exe) = std::env::current_exe() {
            argv[0] = exe.display().to_string();
        }
    }
    argv
}

/// A command as a shell would read it back (words with spaces or quotes quoted).
pub fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./:=,{}@%+".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn shell_words_quote_what_needs_it() {
        assert_eq!(
            shell_words(&argv(&["sh", "-c", "echo 'a b'", "--port", "{port}"])),
            "sh -c 'echo '\\''a b'\\''' --port {port}"
        );
    }

    #[tokio::test]
    async fn an_early_exit_is_reported_with_its_status_and_log() {
        let dir = std::env::temp_dir().join(format!("servebench-srv-exit-{}", std::process::id()));
        let log = dir.join("server.log");
        let how = Lifecycle {
            ready_timeout: Duration::from_secs(20),
            ..Lifecycle::default()
        };
        let start = Instant::now();
        let e = ServerProcess::start(
            &argv(&["sh", "-c", "echo cannot load model; exit 3", "x", "{port}"]),
            &log,
            &how,
        )
        .await
        .expect_err("exits");
        let msg = format!("{e:#}");
        assert!(msg.contains("exit status: 3"), "{msg}");
        assert!(msg.contains("cannot load model"), "{msg}");
        assert!(start.elapsed() < Duration::from_secs(10));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_server_never_ready_times_out_and_is_stopped() {
        let dir = std::env::temp_dir().join(format!("servebench-srv-slow-{}", std::process::id()));
        let log = dir.join("server.log");
        let how = Lifecycle {
            ready_timeout: Duration::from_millis(600),
            grace: Duration::from_secs(2),
            echo: false,
            api_key: None,
        };
        let e = ServerProcess::start(
            &argv(&[
                "sh",
                "-c",
                "echo loading weights; exec sleep 30",
                "x",
                "{port}",
            ]),
            &log,
            &how,
        )
        .await
        .expect_err("never ready");
        let msg = format!("{e:#}");
        assert!(msg.contains("not ready within"), "{msg}");
        assert!(msg.contains("loading weights"), "{msg}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Splits a command line as a POSIX shell would (quotes and backslashes; no expansion), as
/// vLLM's `shlex.split` reads `--serve-cmd`.
pub fn split_words(line: &str) -> Result<Vec<String>> {
    servebench_sim::args::split_shell_words(line).map_err(|e| anyhow::anyhow!("{e}"))
}

/// A server that answers only with `Authorization: Bearer <key>`, as `vllm serve --api-key`
/// guards its routes: 401 otherwise. It listens on `port` once `delay` has passed (so that
/// the lifecycle's check that the port is free comes first), for `lifetime` (a stop waits for
/// the port to be free), and records every request's path and whether it carried the key.
#[cfg(test)]
mod auth_tests {
    use std::sync::{Arc, Mutex};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    type Seen = Arc<Mutex<Vec<(String, bool)>>>;

    fn guarded_server(port: u16, key: &'static str, delay: Duration, lifetime: Duration) -> Seen {
        let seen: Seen = Arc::default();
        let log = seen.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
                .await
                .expect("the test port");
            let until = tokio::time::Instant::now() + lifetime;
            loop {
                let accepted = tokio::time::timeout_at(until, listener.accept()).await;
                let Ok(accepted) = accepted else {
                    return;
                };
                let Ok((mut sock, _)) = accepted else {
                    return;
                };
                let log = log.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 1024];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&buf).to_string();
                    let path = head.split_whitespace().nth(1).unwrap_or("").to_owned();
                    let authorized = head.lines().any(|l| {
                        l.to_ascii_lowercase().starts_with("authorization:")
                            && l.trim_end().ends_with(&format!("Bearer {key}"))
                    });
                    log.lock().expect("log").push((path.clone(), authorized));
                    let (status, body) = match (authorized, path.as_str()) {
                        (false, _) => ("401 Unauthorized", r#"{"error":"Unauthorized"}"#),
                        (true, "/v1/models") => (
                            "200 OK",
                            r#"{"object":"list","data":[{"id":"m","object":"model"}]}"#,
                        ),
                        (true, _) => ("200 OK", "{}"),
                    };
                    let reply = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = sock.write_all(reply.as_bytes()).await;
                });
            }
        });
        seen
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port")
    }

    fn placeholder(port: u16) -> Vec<String> {
        ["sh", "-c", "exec sleep 30", "x", "--port"]
            .iter()
            .map(|s| s.to_string())
            .chain([port.to_string()])
            .collect()
    }

    #[tokio::test]
    async fn ready_checks_and_the_cache_reset_send_the_api_key() {
        let dir = std::env::temp_dir().join(format!("servebench-srv-auth-{}", std::process::id()));
        let port = free_port();
        let seen = guarded_server(
            port,
            "sk-test",
            Duration::from_millis(300),
            // Long enough for the checks and the reset on a loaded machine; the stop then
            // waits until the port is free.
            Duration::from_secs(5),
        );
        let how = Lifecycle {
            ready_timeout: Duration::from_secs(20),
            grace: Duration::from_secs(2),
            api_key: Some("sk-test".to_owned()),
            ..Lifecycle::default()
        };
        assert!(!format!("{how:?}").contains("sk-test"), "{how:?}");
        let mut server = ServerProcess::start(&placeholder(port), &dir.join("server.log"), &how)
            .await
            .expect("ready with the key");
        assert!(!format!("{server:?}").contains("sk-test"));
        server.reset_prefix_cache().await;
        server.stop().await;
        let seen = seen.lock().expect("log").clone();
        for path in ["/health", "/v1/models", "/reset_prefix_cache"] {
            assert!(seen.contains(&(path.to_owned(), true)), "{path}: {seen:?}");
        }
        assert!(seen.iter().all(|(_, authorized)| *authorized), "{seen:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn without_the_key_a_guarded_server_is_never_ready() {
        let dir =
            std::env::temp_dir().join(format!("servebench-srv-noauth-{}", std::process::id()));
        let port = free_port();
        let seen = guarded_server(
            port,
            "sk-test",
            Duration::from_millis(100),
            Duration::from_secs(1),
        );
        let how = Lifecycle {
            ready_timeout: Duration::from_millis(1500),
            grace: Duration::from_secs(2),
            ..Lifecycle::default()
        };
        let e = ServerProcess::start(&placeholder(port), &dir.join("server.log"), &how)
            .await
            .expect_err("401 is not ready");
        assert!(format!("{e:#}").contains("not ready within"), "{e:#}");
        assert!(seen.lock().expect("log").iter().any(|(_, a)| !a));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[cfg(test)]
mod split_tests {
    use super::*;

    #[test]
    fn words_split_as_a_shell_splits_them() {
        assert_eq!(
            split_words(r#"vllm serve 'my model' --x "a \"b\"" c\ d '' "#).expect("ok"),
            vec!["vllm", "serve", "my model", "--x", "a \"b\"", "c d", ""]
        );
        assert!(split_words("a 'b").is_err());
    }
}
