//! The HTML report in a real headless browser (Debian's `chromium`): a quick virtual-time
//! matrix and a sweep are rendered by the binary, loaded from `file://` with the network
//! off, and checked for console messages, the script's completion mark, the charts and
//! their series, and a screenshot.
//!
//! Without chromium the test prints a notice and passes, unless `SERVEBENCH_REQUIRE_BROWSER=1`
//! (CI) makes a missing browser a failure. `SERVEBENCH_CHROMIUM` names another binary.

use crate::common::{self, bin, ok};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn tempdir(name: &str) -> PathBuf {
    common::tempdir("browser", name)
}

fn find_chromium() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("SERVEBENCH_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    [
        "/usr/bin/chromium",
        "/usr/bin/chromium-browser",
        "/snap/bin/chromium",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

/// The browser, or `None` (with a notice) when it is absent and not required.
fn chromium_or_skip() -> Option<PathBuf> {
    let found = find_chromium();
    if found.is_none() {
        let required = std::env::var("SERVEBENCH_REQUIRE_BROWSER").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "SERVEBENCH_REQUIRE_BROWSER=1 but chromium is not installed (apt-get install -y chromium)"
        );
        eprintln!("notice: chromium not found; skipping the headless-browser report test");
    }
    found
}

/// Runs chromium headless on `page` with `mode` (`--dump-dom` or `--screenshot=…`), a fresh
/// profile and no network; kills it after two minutes.
fn chromium(browser: &Path, profile: &Path, page: &Path, mode: &[String]) -> Output {
    let _ = std::fs::remove_dir_all(profile);
    std::fs::create_dir_all(profile).expect("profile dir");
    // Output goes to files: a dumped DOM outgrows a pipe's buffer, and an unread pipe
    // would block the browser while this loop waits for it.
    let stdout_path = profile.with_extension("stdout");
    let stderr_path = profile.with_extension("stderr");
    let stdout = std::fs::File::create(&stdout_path).expect("stdout file");
    let stderr = std::fs::File::create(&stderr_path).expect("stderr file");
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(mode)
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr))
        .spawn()
        .expect("spawn chromium");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait chromium") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: std::fs::read(&stdout_path).expect("chromium stdout"),
        stderr: std::fs::read(&stderr_path).expect("chromium stderr"),
    }
}

/// Console messages of the page (every `console.*` call, uncaught error and CSP violation
/// is logged as `…:CONSOLE…` with `--enable-logging=stderr`).
fn console_lines(stderr: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stderr)
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(str::to_owned)
        .collect()
}

/// The experiment directory the command created under `results`.
fn experiment_dir(results: &Path) -> PathBuf {
    fn walk(d: &Path) -> Option<PathBuf> {
        if d.join("experiment.json").exists() {
            return Some(d.to_path_buf());
        }
        std::fs::read_dir(d)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .find_map(|p| walk(&p))
    }
    walk(results).expect("an experiment directory with experiment.json")
}

/// Loads the report, checks the DOM and the console, and returns the DOM.
fn check_page(browser: &Path, work: &Path, page: &Path, series: &[&str]) -> String {
    let out = chromium(
        browser,
        &work.join("profile-dom"),
        page,
        &["--dump-dom".to_owned()],
    );
    ok(&out);
    let console = console_lines(&out.stderr);
    assert!(console.is_empty(), "console messages: {console:#?}");
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    let charts = dom.matches("<figure class=\"chart\"").count();
    assert!(charts >= 7, "{charts} charts");
    // The script ran to its end and counted every chart's SVG.
    assert!(
        dom.contains(&format!("data-report-ready=\"{charts}\"")),
        "the page script did not finish"
    );
    for id in series {
        assert!(dom.contains(&format!("id=\"{id}\"")), "series {id} missing");
    }
    dom
}

#[test]
fn html_report_renders_in_a_headless_browser() {
    let _exclusive = crate::common::exclusive();
    let Some(browser) = chromium_or_skip() else {
        return;
    };
    let work = tempdir("render");

    // A quick matrix of two rows, in virtual time.
    let results = work.join("matrix-results");
    let out = bin()
        .args([
            "matrix",
            "--virtual-time",
            "--scale",
            "quick",
            "--rows",
            "A,D",
        ])
        .arg("--results-dir")
        .arg(&results)
        .output()
        .expect("spawn matrix");
    ok(&out);
    let matrix = experiment_dir(&results);
    // Re-render with `servebench report`, as a user would after the fact.
    ok(&bin()
        .args(["report", "--print", "none"])
        .arg(&matrix)
        .output()
        .expect("report"));
    let dom = check_page(
        &browser,
        &work,
        &matrix.join("report.html"),
        &[
            "cdf-ttft-A",
            "cdf-ttft-D",
            "cdf-tpot-D",
            "cdf-itl-A",
            "ts-output-A",
            "ts-inflight-D",
            "ts-ttft-D",
            "ts-tpot-A",
        ],
    );
    assert!(dom.contains("id=\"rows-table\""));
    // Each series path was drawn with real coordinates.
    let ttft_a = dom.split("id=\"cdf-ttft-A\"").nth(1).expect("series A");
    assert!(ttft_a
        .split("</g>")
        .next()
        .is_some_and(|g| g.contains("<path d=\"M")));

    // A sweep: the frontier with its knee and SLO lines.
    let results = work.join("sweep-results");
    let out = bin()
        .args([
            "sweep",
            "--row",
            "D",
            "--request-rate",
            "1,2,4,8,16",
            "--max-concurrency",
            "none",
        ])
        .args([
            "--slo",
            "ttft:p99:400",
            "tpot:p99:12",
            "--virtual-time",
            "--scale",
            "quick",
        ])
        .args(["--no-early-stop", "--results-dir"])
        .arg(&results)
        .output()
        .expect("spawn sweep");
    ok(&out);
    let sweep = experiment_dir(&results);
    let page = sweep.join("report.html");
    let dom = check_page(
        &browser,
        &work,
        &page,
        &[
            "frontier-ttft-p99",
            "frontier-ttft-p99-points",
            "frontier-tpot-p99-points",
            "cdf-ttft-point-0",
            "cdf-ttft-point-4",
            "ts-output-point-2",
        ],
    );
    assert!(dom.contains("class=\"ref slo\""), "SLO lines drawn");
    assert!(dom.contains("id=\"headline\""));
    // Each point's timeline is linked and drawn (virtual time: client series only).
    assert!(dom.contains("href=\"#timeline-details-point-4\""));
    for id in ["timeline-point-2-ttft-points", "timeline-point-2-inflight"] {
        assert!(dom.contains(&format!("id=\"{id}\"")), "{id} missing");
    }

    // A real-time run against the in-process simulator with a stand-in nvidia-smi on PATH:
    // its timeline draws the server's /metrics and the GPU beside the client's latency.
    let single = work.join("telemetry-run");
    let bin_dir = single.join("bin");
    crate::gpu_telemetry::stand_in(
        &bin_dir,
        "i=0\nwhile true; do\n  echo \"0, $((40 + i * 7 % 50)), $((30000 + i * 100)), 250.5, 1980\"\n  i=$((i + 1))\n  sleep 0.3\ndone",
    );
    ok(&bin()
        .current_dir(&single)
        .env("PATH", crate::gpu_telemetry::path_with(&bin_dir))
        .args([
            "run",
            "--disable-tqdm",
            "--num-prompts",
            "40",
            "--request-rate",
            "15",
        ])
        .args(["--random-input-len", "256", "--random-output-len", "32"])
        .output()
        .expect("spawn run"));
    let result = std::fs::read_dir(single.join("results/runs"))
        .expect("runs dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".servebench.json"))
        .expect("a result file");
    ok(&bin()
        .args(["report", "--print", "none"])
        .arg(&result)
        .output()
        .expect("report"));
    let page = result.with_file_name(
        result
            .file_name()
            .map(|n| {
                n.to_string_lossy()
                    .replace(".servebench.json", ".report.html")
            })
            .expect("file name"),
    );
    let dom = check_page(
        &browser,
        &work,
        &page,
        &[
            "timeline-run-ttft-points",
            "timeline-run-inflight",
            "timeline-run-running",
            "timeline-run-kv",
            "timeline-run-gpu0-util",
            "timeline-run-gpu0-power",
            "timeline-run-gpu0-memory",
        ],
    );
    // Telemetry beside latency: one timeline block holds the TTFT chart and the telemetry
    // charts, each series drawn with real coordinates.
    let block = dom
        .split("id=\"timeline-run\"")
        .nth(1)
        .and_then(|b| b.split("</details>").next())
        .expect("the run's timeline");
    for chart in [
        "timeline-run-ttft",
        "timeline-run-load",
        "timeline-run-util",
    ] {
        assert!(
            block.contains(&format!("id=\"{chart}\"")),
            "{chart} missing"
        );
    }
    for series in [
        "timeline-run-running",
        "timeline-run-kv",
        "timeline-run-gpu0-util",
    ] {
        let g = block
            .split(&format!("id=\"{series}\""))
            .nth(1)
            .and_then(|g| g.split("</g>").next())
            .unwrap_or_default();
        assert!(g.contains("<path d=\"M"), "{series} not drawn");
    }

    // A screenshot of the sweep report.
    let shot = work.join("report.png");
    let out = chromium(
        &browser,
        &work.join("profile-shot"),
        &page,
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1280,1600".to_owned(),
        ],
    );
    ok(&out);
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(
        png.len() > 20_000,
        "screenshot of {} bytes looks empty",
        png.len()
    );
    eprintln!("screenshot: {}", shot.display());
}
