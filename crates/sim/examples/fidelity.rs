//! The fidelity run of `servebench sim fidelity` without building the CLI crate (run from the
//! repository root): `cargo run -p servebench-sim --release --example fidelity -- [FLAGS]`.
//!
//! Flags: `--points FILE` (another fixture), `--write-docs` (the tables of docs/simulator.md),
//! `--write-baseline` (crates/sim/tests/fixtures/fidelity_heldout_baseline.json), `--json`,
//! `--source ID` (print only that source's figures, in sample and held out).
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;

use servebench_sim::fidelity::heldout::{
    run_loso, FittedFactors, ACCURACY_BEGIN, ACCURACY_END, BASELINE_PATH,
};
use servebench_sim::fidelity::{markdown_table, replace_between, Fixture, TABLE_BEGIN, TABLE_END};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1).cloned())
    };
    let fixture = match value("--points") {
        Some(path) => Fixture::parse(&std::fs::read_to_string(&path)?, &path)?,
        None => Fixture::builtin()?,
    };
    let loso = run_loso(&fixture, &FittedFactors::builtin()?)?;
    let table = markdown_table(&loso.in_sample);
    let accuracy = loso.markdown();
    if args.iter().any(|a| a == "--json") {
        println!("{}", serde_json::to_string_pretty(&loso.to_json())?);
    } else if let Some(source) = value("--source") {
        for (i, h) in loso.in_sample.iter().zip(&loso.held_out) {
            if i.source != source {
                continue;
            }
            for c in &i.comparisons {
                let held = h.comparisons.iter().find(|x| x.metric == c.metric);
                println!(
                    "{:<48} {:<14} published {:>10.1} sim {:>10.1} in {:+7.1} % held {:+7.1} %",
                    i.id,
                    c.metric,
                    c.published,
                    c.simulated,
                    c.error() * 100.0,
                    held.map_or(f64::NAN, |x| x.error() * 100.0)
                );
            }
        }
        print!("{accuracy}");
    } else {
        print!("{table}\n{accuracy}");
    }
    if args.iter().any(|a| a == "--write-docs") {
        let doc = "docs/simulator.md";
        let mut text = std::fs::read_to_string(doc)?;
        for (body, begin, end) in [
            (&table, TABLE_BEGIN, TABLE_END),
            (&accuracy, ACCURACY_BEGIN, ACCURACY_END),
        ] {
            if text.contains(begin) {
                text = replace_between(&text, body, begin, end)?;
            }
        }
        std::fs::write(doc, text)?;
        eprintln!("wrote the fidelity tables into {doc}");
    }
    if args.iter().any(|a| a == "--write-baseline") {
        std::fs::write(BASELINE_PATH, loso.baseline().to_json_string())?;
        eprintln!(
            "wrote the held-out baseline ({:.2} % overall) to {BASELINE_PATH}",
            loso.overall_held_out.mape_pct
        );
    }
    Ok(())
}
