//! `servebench <cmd> --help` is written for users: doc comments become help text, so no raw
//! rustdoc link may leak into it, and every flag and argument says what it does.

#![allow(clippy::unwrap_used)]

use crate::common::{ok, servebench};

const SUBCOMMANDS: &[&str] = &[
    "run",
    "latency",
    "throughput",
    "sim",
    "predict",
    "plan",
    "matrix",
    "sweep",
    "report",
    "compare",
    "diagnose",
    "decide",
    "users",
    "trace",
    "merge",
    "k8s",
    "reference",
    "man",
    "completions",
];

/// The subcommands `servebench --help` lists, so a new one cannot escape the checks below.
fn listed_subcommands() -> Vec<String> {
    let help = ok(&servebench(&["--help"]));
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_owned)
        .collect()
}

/// Entries of a long `--help` (options and positional arguments) whose description is empty:
/// nothing but `[default: …]`, `[possible values: …]` or a bare list of values.
fn entries_without_help(help: &str) -> Vec<String> {
    let mut missing = Vec::new();
    let mut in_section = false;
    let lines: Vec<&str> = help.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        // Options:, Arguments: and the headings flags are grouped under (Target:, Sampling:…).
        if !line.starts_with(' ') && !line.is_empty() {
            in_section = line.ends_with(':') && line != "Commands:";
            i += 1;
            continue;
        }
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let is_entry = in_section
            && (2..=6).contains(&indent)
            && (trimmed.starts_with('-') || trimmed.starts_with('<') || trimmed.starts_with('['));
        if !is_entry {
            i += 1;
            continue;
        }
        let entry = trimmed.split("  ").next().unwrap_or(trimmed).to_owned();
        // Help on the entry's own line (short layout) …
        let mut described = trimmed.split_once("  ").is_some_and(|(_, rest)| {
            let rest = rest.trim();
            !rest.is_empty() && !rest.starts_with('[')
        });
        // … or on the indented lines below it, up to the next entry.
        let mut j = i + 1;
        while j < lines.len() {
            let next = lines[j];
            let t = next.trim_start();
            let ind = next.len() - t.len();
            if t.is_empty() || ind < 8 {
                if t.is_empty() && j + 1 < lines.len() {
                    let after = lines[j + 1];
                    let after_ind = after.len() - after.trim_start().len();
                    // A blank line inside a long description.
                    if after_ind >= 8 && !after.trim().is_empty() {
                        j += 1;
                        continue;
                    }
                }
                break;
            }
            if t.starts_with("[default")
                || t.starts_with("[possible values")
                || t.starts_with("[aliases")
                || t.starts_with("[env")
                || t.starts_with("Possible values:")
            {
                break;
            }
            described = true;
            j += 1;
        }
        if !described {
            missing.push(entry);
        }
        i = j.max(i + 1);
    }
    missing
}

#[test]
fn every_subcommand_is_checked() {
    let listed = listed_subcommands();
    for c in &listed {
        assert!(
            SUBCOMMANDS.contains(&c.as_str()),
            "{c} is not in SUBCOMMANDS"
        );
    }
    assert_eq!(listed.len(), SUBCOMMANDS.len(), "{listed:?}");
}

#[test]
fn help_has_no_raw_rustdoc_links() {
    for cmd in SUBCOMMANDS {
        for flag in ["--help", "-h"] {
            let help = ok(&servebench(&[cmd, flag]));
            assert!(
                !help.contains("[`"),
                "servebench {cmd} {flag} shows a raw doc link:\n{help}"
            );
        }
    }
}

#[test]
fn every_flag_of_every_subcommand_has_help_text() {
    let mut missing = Vec::new();
    for cmd in SUBCOMMANDS {
        let help = ok(&servebench(&[cmd, "--help"]));
        for entry in entries_without_help(&help) {
            missing.push(format!("servebench {cmd}: {entry}"));
        }
    }
    assert!(
        missing.is_empty(),
        "flags without help text:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_help_checker_sees_a_flag_without_help() {
    let help = "Usage: x\n\nSampling:\n      --top-p <TOP_P>\n          \n\n      --seed <SEED>\n          Seed of everything\n          \n          [default: 0]\n\n      --mode <MODE>\n          [possible values: a, b]\n\n  -h, --help\n          Print help\n";
    assert_eq!(
        entries_without_help(help),
        vec!["--top-p <TOP_P>".to_owned(), "--mode <MODE>".to_owned()]
    );
}

/// Every command is clap's (issue "house in order", item 3): `sim fidelity`, `sim calibrate`
/// and `plan --fleet` were once routed before clap and missing from every help page.
#[test]
fn help_lists_every_command() {
    let top = ok(&servebench(&["--help"]));
    for cmd in SUBCOMMANDS {
        assert!(
            top.lines()
                .any(|l| l.trim_start().starts_with(&format!("{cmd} "))),
            "servebench --help does not list {cmd}:\n{top}"
        );
    }
    let sim = ok(&servebench(&["sim", "--help"]));
    for sub in ["fidelity", "calibrate"] {
        assert!(
            sim.lines()
                .any(|l| l.trim_start().starts_with(&format!("{sub} "))),
            "servebench sim --help does not list {sub}:\n{sim}"
        );
    }
    for sub in ["fidelity", "calibrate"] {
        let help = ok(&servebench(&["sim", sub, "--help"]));
        assert!(
            help.contains(&format!("Usage: servebench sim {sub}")),
            "{help}"
        );
    }
    let plan = ok(&servebench(&["plan", "--help"]));
    assert!(plan.contains("--fleet <SPEC>"), "{plan}");
    assert!(plan.contains("--slo-requests"), "{plan}");
}

/// `-h` fits a screen; `--help` keeps every flag.
#[test]
fn short_help_fits_a_screen_and_long_help_keeps_every_flag() {
    let short = ok(&servebench(&["run", "-h"]));
    assert!(
        short.lines().count() <= 80,
        "servebench run -h has {} lines:\n{short}",
        short.lines().count()
    );
    assert!(
        short.contains("--base-url") && short.contains("--num-prompts"),
        "{short}"
    );
    let long = ok(&servebench(&["run", "--help"]));
    for flag in [
        "--goodput",
        "--random-prefix-mode",
        "--ramp-up-strategy",
        "--trust-remote-code",
    ] {
        assert!(long.contains(flag), "servebench run --help lacks {flag}");
    }
    for cmd in ["sim", "plan"] {
        let short = ok(&servebench(&[cmd, "-h"]));
        assert!(
            short.lines().count() <= 80,
            "servebench {cmd} -h has {} lines:\n{short}",
            short.lines().count()
        );
    }
}

/// The guide's command reference is generated from the binary (`servebench reference >
/// docs/command-reference.md`); it fails here as soon as a flag or its help changes without
/// the page being regenerated.
#[test]
fn the_committed_command_reference_is_current() {
    let o = crate::common::bin()
        .arg("reference")
        .output()
        .expect("spawn servebench");
    assert!(o.status.success(), "{}", crate::common::text(&o));
    let generated = String::from_utf8(o.stdout).expect("utf-8");
    let page =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/command-reference.md");
    let committed = std::fs::read_to_string(&page).expect("docs/command-reference.md");
    assert!(
        generated == committed,
        "docs/command-reference.md is stale: run `servebench reference > docs/command-reference.md`"
    );
    for cmd in [
        "servebench run",
        "servebench sim fidelity",
        "servebench plan",
        "servebench k8s job",
    ] {
        assert!(generated.contains(&format!("## `{cmd}`")), "{cmd} missing");
    }
}

/// Man pages and shell completions come from the same definitions, by the documented
/// commands.
#[test]
fn man_pages_and_completions_are_generated() {
    let dir = crate::common::tempdir("help", "man");
    let o = crate::common::bin()
        .args(["man", dir.to_str().expect("utf-8")])
        .output()
        .expect("spawn servebench");
    assert!(o.status.success(), "{}", crate::common::text(&o));
    let run = std::fs::read_to_string(dir.join("servebench-run.1")).expect("servebench-run.1");
    assert!(
        run.contains(".TH") && run.contains("num\\-prompts"),
        "{run:.400}"
    );
    assert!(dir.join("servebench-sim-calibrate.1").exists());
    for shell in ["bash", "zsh", "fish"] {
        let o = crate::common::bin()
            .args(["completions", shell])
            .output()
            .expect("spawn servebench");
        let script = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && script.contains("num-prompts"),
            "{shell}: {script:.300}"
        );
    }
}
