//! The live view under a pseudo-terminal (`script` gives the run one): the dashboard takes the
//! screen, `q` stops the run as Ctrl-C does (exit 130, results kept), and the terminal is given
//! back. Piped, the same run prints plain lines.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{self, text};

fn has_script() -> bool {
    Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn q_stops_a_run_under_a_terminal_and_gives_the_terminal_back() {
    if !has_script() {
        eprintln!("skipped: no `script` (util-linux) to give the run a terminal");
        return;
    }
    let _serial = common::exclusive();
    let dir = common::tempdir("live", "pty");
    let cmd = format!(
        "stty cols 100 rows 30; exec {} run --num-prompts 2000 --request-rate 20 --ui dashboard --output-dir {}",
        env!("CARGO_BIN_EXE_servebench"),
        dir.display()
    );
    let mut child = Command::new("script")
        .args(["-qfec", &cmd, "/dev/null"])
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn script");
    // Let requests finish, then press q.
    std::thread::sleep(Duration::from_secs(6));
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"q").expect("press q");
    stdin.flush().expect("flush");
    let started = Instant::now();
    let out = loop {
        if child.try_wait().expect("wait").is_some() {
            break child.wait_with_output().expect("output");
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "q did not stop the run"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    drop(stdin);
    let screen = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out));
    assert!(
        screen.contains("\x1b[?1049h"),
        "the view took the alternate screen"
    );
    assert!(screen.contains("\x1b[?1049l"), "and gave it back");
    for shown in [
        "servebench · run",
        "Latency (completed requests)",
        "TTFT",
        "p99",
    ] {
        assert!(screen.contains(shown), "the view shows {shown:?}");
    }
    assert!(screen.contains("INTERRUPTED"), "{screen}");
    // The results of what was measured are kept.
    let kept = std::fs::read_dir(&dir)
        .expect("read dir")
        .filter_map(|e| e.ok())
        .any(|e| e.path().to_string_lossy().ends_with(".servebench.json"));
    assert!(kept, "a result file is written");
}

#[test]
fn piped_the_dashboard_falls_back_to_plain_lines() {
    let dir = common::tempdir("live", "piped");
    let out = common::bin()
        .args([
            "run",
            "--num-prompts",
            "60",
            "--request-rate",
            "20",
            "--ui",
            "dashboard",
            "--output-dir",
        ])
        .arg(&dir)
        .output()
        .expect("spawn servebench");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!err.contains("\x1b[?1049h"), "no screen taken when piped");
    assert!(err.contains("run 100% 60/60 requests"), "{err}");
}
