//! decision.md's "Run flags" line pastes back into a shell as the command that was run, even
//! when a `--sim` spec holds spaces.

#![allow(clippy::unwrap_used)]

use servebench_sim::args::split_shell_words;

use crate::common::{read_json, servebench, tempdir, text};

#[test]
fn decision_run_flags_line_splits_back_into_the_recorded_command() {
    let root = tempdir("decide", "run-flags");
    let root_s = root.to_string_lossy().into_owned();
    let o = servebench(&[
        "sweep",
        "--virtual-time",
        "--sim",
        "llama-3.1-8b --gpu h100 --max-num-seqs 8",
        "--max-concurrency",
        "2,4",
        "--input-len",
        "128",
        "--output-len",
        "16",
        "--num-prompts",
        "16",
        "--slo",
        "ttft:p99:5000",
        "--results-dir",
        &root_s,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let dir = out
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("experiment: "))
        .unwrap_or_else(|| panic!("{}", text(&o)))
        .to_owned();
    let o = servebench(&["decide", &dir]);
    assert!(o.status.success(), "{}", text(&o));
    let md = std::fs::read_to_string(std::path::Path::new(&dir).join("decision.md")).unwrap();
    let line = md
        .lines()
        .find_map(|l| l.strip_prefix("- Run flags: `"))
        .and_then(|l| l.strip_suffix("`."))
        .unwrap_or_else(|| panic!("no Run flags line in\n{md}"));

    // The line is one point's run; every run's recorded argv holds the spaced --sim spec.
    let exp = read_json(&std::path::Path::new(&dir).join("experiment.json"));
    let recorded: Vec<Vec<String>> = exp["sweep"]["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let run = p["runs"][0].as_str().unwrap();
            let doc = read_json(&std::path::Path::new(&dir).join(run));
            doc["metadata"]["command_line"]
                .as_array()
                .unwrap_or_else(|| panic!("no command_line in {run}"))
                .iter()
                .map(|w| w.as_str().unwrap().to_owned())
                .collect()
        })
        .collect();
    assert!(
        recorded
            .iter()
            .all(|argv| argv.iter().any(|w| w.contains(' '))),
        "each recorded command should hold the spaced --sim spec: {recorded:?}"
    );
    let words = split_shell_words(line).unwrap();
    assert!(
        recorded.contains(&words),
        "{line}\nsplits into {words:?}\nrecorded: {recorded:?}"
    );
    let _ = std::fs::remove_dir_all(&root);
}
