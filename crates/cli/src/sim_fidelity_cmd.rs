//! `servebench sim fidelity`: run every published real-GPU point in virtual time, in sample and
//! with each source left out (its fitted factors reverted), and print the fidelity table
//! (point, published, simulated, error) and the accuracy table (per source and overall, MAPE
//! in sample next to held out); `--json` prints both as one JSON document; `--write-docs FILE`
//! rewrites the tables between their markers in that document (docs/simulator.md);
//! `--write-baseline` rewrites the held-out baseline the fidelity test gates on.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use servebench_sim::fidelity::heldout::{
    run_loso, FittedFactors, ACCURACY_BEGIN, ACCURACY_END, BASELINE_PATH,
};
use servebench_sim::fidelity::{markdown_table, replace_between, Fixture, TABLE_BEGIN, TABLE_END};

/// Flags of `servebench sim fidelity`.
#[derive(Debug, Args)]
pub struct FidelityArgs {
    /// A fixture of published points (default: the built-in one).
    #[arg(long, value_name = "FILE")]
    pub points: Option<PathBuf>,

    /// Rewrite the tables between the fidelity markers of this Markdown file (the figure table
    /// between `fidelity-table` markers, the accuracy table between `fidelity-accuracy`
    /// markers; a file may hold either or both).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "docs/simulator.md")]
    pub write_docs: Option<PathBuf>,

    /// Rewrite the held-out baseline the fidelity test compares with (default path, relative
    /// to the repository root: crates/sim/tests/fixtures/fidelity_heldout_baseline.json).
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = BASELINE_PATH)]
    pub write_baseline: Option<PathBuf>,

    /// Print every figure, in sample and held out, per-source and overall errors and the
    /// fitted factors as one JSON document instead of the tables.
    #[arg(long)]
    pub json: bool,

    /// Exit 1 when a point is outside its tolerance (in sample).
    #[arg(long)]
    pub check: bool,
}

/// Runs `servebench sim fidelity`.
pub fn fidelity(args: &FidelityArgs) -> Result<ExitCode> {
    let fixture = match &args.points {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            Fixture::parse(&text, &path.display().to_string())?
        }
        None => Fixture::builtin()?,
    };
    let factors = FittedFactors::builtin()?;
    let loso = run_loso(&fixture, &factors)?;
    let table = markdown_table(&loso.in_sample);
    let accuracy = loso.markdown();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&loso.to_json())?);
    } else {
        print!("{table}\n{accuracy}");
    }
    if let Some(doc) = &args.write_docs {
        let mut text = std::fs::read_to_string(doc)
            .with_context(|| format!("cannot read {}", doc.display()))?;
        let mut written = 0;
        for (body, begin, end) in [
            (&table, TABLE_BEGIN, TABLE_END),
            (&accuracy, ACCURACY_BEGIN, ACCURACY_END),
        ] {
            if text.contains(begin) {
                text = replace_between(&text, body, begin, end)
                    .with_context(|| format!("in {}", doc.display()))?;
                written += 1;
            }
        }
        if written == 0 {
            bail!(
                "{} has neither '{TABLE_BEGIN}' nor '{ACCURACY_BEGIN}' markers",
                doc.display()
            );
        }
        std::fs::write(doc, text).with_context(|| format!("cannot write {}", doc.display()))?;
        eprintln!("wrote the fidelity tables into {}", doc.display());
    }
    if let Some(path) = &args.write_baseline {
        std::fs::write(path, loso.baseline().to_json_string())
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!(
            "wrote the held-out baseline ({:.2} % overall) to {}",
            loso.overall_held_out.mape_pct,
            path.display()
        );
    }
    let misses = loso.in_sample.iter().filter(|o| !o.passes()).count();
    if args.check && misses > 0 {
        eprintln!("{misses} point(s) outside their tolerance");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
