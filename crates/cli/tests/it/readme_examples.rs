//! Commands the README and the guide show run as written (at quick scale and in virtual time, so
//! they are fast), read from README.md and docs/**/*.md themselves so the test follows the text.

#![allow(clippy::unwrap_used)]

use servebench_sim::args::split_shell_words;

use crate::common::{bin, documented_lines, tempdir, text, workspace_root};

/// The documented command lines (README.md and the guide, each distinct line once) that start
/// with `prefix`, without their trailing `# comment`.
pub(crate) fn readme_commands(prefix: &str) -> Vec<Vec<String>> {
    documented_lines()
        .iter()
        .filter(|l| l.starts_with(prefix))
        .map(|l| {
            let mut words = split_shell_words(l).unwrap();
            if let Some(comment) = words.iter().position(|w| w.starts_with('#')) {
                words.truncate(comment);
            }
            words
        })
        .collect()
}

#[test]
fn readme_matrix_example_with_a_70b_sim_on_two_h100s_runs_as_written() {
    let commands =
        readme_commands("servebench matrix --matrix examples/matrix.toml --sim \"llama-3.1-70b");
    assert_eq!(commands.len(), 1, "the guide's 70B matrix example");
    let dir = tempdir("readme", "matrix-70b");
    let out = bin()
        .current_dir(workspace_root())
        .args(&commands[0][1..])
        .args(["--scale", "quick", "--virtual-time", "--results-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{:?}\n{}", commands[0], text(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The guide's `latency` and `throughput` examples that need no server (the simulator in
/// virtual time), run as written in a scratch directory.
#[test]
fn readme_latency_and_throughput_examples_run_as_written() {
    let mut commands = readme_commands("servebench latency ");
    commands.extend(readme_commands("servebench throughput "));
    let local: Vec<_> = commands
        .into_iter()
        .filter(|c| !c.iter().any(|w| w == "--base-url"))
        .collect();
    assert!(local.len() >= 3, "the guide's local examples: {local:?}");
    let dir = tempdir("readme", "latency-throughput");
    for c in &local {
        let out = bin().current_dir(&dir).args(&c[1..]).output().unwrap();
        assert!(out.status.success(), "{c:?}\n{}", text(&out));
    }
    assert!(dir.join("latency.json").is_file());
    assert!(dir.join("throughput.json").is_file());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The guide's reasoning-model example runs as written (virtual time, fewer prompts) and its
/// summary shows time to first answer token.
#[test]
fn readme_reasoning_example_runs_as_written() {
    let commands =
        readme_commands("servebench run --virtual-time --sim \"llama-3.1-8b --reasoning-tokens");
    assert_eq!(commands.len(), 1, "the guide's reasoning example");
    let dir = tempdir("readme", "reasoning");
    let mut args = commands[0][1..].to_vec();
    if let Some(i) = args.iter().position(|w| w == "--num-prompts") {
        args[i + 1] = "4".into();
    }
    let out = bin()
        .current_dir(&dir)
        .args(&args)
        .args(["--disable-tqdm", "--output-dir", "out"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}\n{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("TTFAT (first answer)"), "{stdout}");
    assert!(
        stdout.contains("Reasoning share of output (%):"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
