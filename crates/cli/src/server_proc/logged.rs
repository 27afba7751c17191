//! Child processes whose stdout and stderr go to a log file (and, when asked, to ours too),
//! and the tail of such a log for error messages.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result};

/// Spawns `argv` with its output appended to `log`. With `echo` the output is also copied to
/// our stderr, so the user watches it while the file keeps it. With `new_group` the child leads
/// a process group of its own, so a signal reaches every process it starts.
pub fn spawn(argv: &[String], log: &Path, echo: bool, new_group: bool) -> Result<Child> {
    use std::os::unix::process::CommandExt;

    let (program, args) = argv.split_first().context("empty command")?;
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("cannot open log {}", log.display()))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        // vLLM serves its cache-reset endpoints only in development mode.
        .env("VLLM_SERVER_DEV_MODE", "1");
    if new_group {
        cmd.process_group(0);
    }
    if echo {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    } else {
        let err = file
            .try_clone()
            .with_context(|| format!("cannot open log {}", log.display()))?;
        cmd.stdout(Stdio::from(file.try_clone()?))
            .stderr(Stdio::from(err));
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {program:?}"))?;
    if echo {
        if let Some(out) = child.stdout.take() {
            tee(out, file.try_clone()?);
        }
        if let Some(err) = child.stderr.take() {
            tee(err, file);
        }
    }
    Ok(child)
}

/// Copies a child's stream line by line to the log and to our stderr, until it closes.
fn tee(stream: impl Read + Send + 'static, mut log: File) {
    std::thread::spawn(move || {
        let reader = BufReader::new(stream);
        for line in reader.split(b'\n') {
            let Ok(mut line) = line else { break };
            line.push(b'\n');
            let _ = log.write_all(&line);
            let _ = std::io::stderr().write_all(&line);
        }
    });
}

/// The last `n` lines of a log file (lossy UTF-8); empty when it cannot be read.
pub fn tail(log: &Path, n: usize) -> String {
    let Ok(bytes) = std::fs::read(log) else {
        return String::new();
    };
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_lands_in_the_log_and_the_tail_keeps_the_last_lines() {
        let dir = std::env::temp_dir().join(format!("servebench-logged-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let log = dir.join("x.log");
        let _ = std::fs::remove_file(&log);
        let argv: Vec<String> = [
            "sh",
            "-c",
            "for i in 1 2 3 4 5; do echo line$i; done; echo oops >&2",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut child = spawn(&argv, &log, false, true).expect("spawn");
        assert!(child.wait().expect("wait").success());
        let t = tail(&log, 2);
        assert_eq!(t, "line5\noops");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
