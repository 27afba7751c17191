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
#[derive(Debug, Clone)]
pub struct Lifecycle {
    /// How long the server may take to become ready.
    pub ready_timeout: Duration,
    /// How long SIGTERM has before SIGKILL.
    pub grace: Duration,
    /// Copy the server's output to our stderr as well as its log.
    pub echo: bool,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            ready_timeout: Duration::from_secs(300),
            grace: Duration::from_secs(10),
            echo: false,
        }
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
                shell_words(&addressed.argv)
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
        };
        eprintln!(
            "Server started (pid {}): {}",
            server.pid(),
            shell_words(&server.addressed.argv)
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
            api_key: None,
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

/// `argv` with a leading `servebench` (as the README writes server commands) run as this very
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
