//! `servebench sim fidelity`: run every published real-GPU point in virtual time and print the
//! fidelity table (point, published, simulated, error); `--write-docs FILE` rewrites the table
//! between its markers in that document (docs/simulator.md).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Args;
use servebench_sim::fidelity::{markdown_table, replace_table, run_all, Fixture};

/// Flags of `servebench sim fidelity`.
#[derive(Debug, Args)]
pub struct FidelityArgs {
    /// A fixture of published points (default: the built-in one).
    #[arg(long, value_name = "FILE")]
    pub points: Option<PathBuf>,

    /// Rewrite the table between the fidelity markers of this Markdown file.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "docs/simulator.md")]
    pub write_docs: Option<PathBuf>,

    /// Exit 1 when a point is outside its tolerance.
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
    let outcomes = run_all(&fixture)?;
    let table = markdown_table(&outcomes);
    print!("{table}");
    if let Some(doc) = &args.write_docs {
        let text = std::fs::read_to_string(doc)
            .with_context(|| format!("cannot read {}", doc.display()))?;
        let updated =
            replace_table(&text, &table).with_context(|| format!("in {}", doc.display()))?;
        std::fs::write(doc, updated).with_context(|| format!("cannot write {}", doc.display()))?;
        eprintln!("wrote the fidelity table into {}", doc.display());
    }
    let misses = outcomes.iter().filter(|o| !o.passes()).count();
    if args.check && misses > 0 {
        eprintln!("{misses} point(s) outside their tolerance");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
