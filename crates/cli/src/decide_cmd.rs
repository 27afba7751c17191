//! `servebench decide DIR [DIR ...]`: the decision record. Each directory is one
//! configuration (a sweep or a matrix); the contract comes from `--slo` or the first sweep
//! that stored one. Writes `decision.md`; exit 1 when no configuration meets the contract.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use servebench_analysis::decision::{
    decide as judge, decision_markdown, CandidateInput, DecideOptions, Decision, RequestFilter,
};

use crate::diagnose_cmd::{parse_contract, CostArgs, LoadedExperiment};

/// `servebench decide` flags.
#[derive(Debug, Clone, Args)]
pub struct DecideArgs {
    /// Experiment directories, one per configuration (e.g. two sweeps with different
    /// --max-num-seqs); a single one judges its own loads or rows.
    #[arg(required = true, num_args = 1..)]
    pub dirs: Vec<PathBuf>,
    /// The latency contract (e.g. --slo ttft:p99:500 tpot:p95:40) [default: the one stored
    /// in the first sweep's experiment.json].
    #[arg(long, num_args = 1.., value_name = "METRIC:pNN:MS")]
    pub slo: Vec<String>,
    /// Judge the contract on these requests only, e.g. the chats of a mixed workload:
    /// `prompt_tokens<4096` (fields prompt_tokens, output_tokens; operators >= > <= < ==).
    #[arg(long, value_name = "FILTER")]
    pub slo_requests: Option<String>,
    /// Where to write the record [default: decision.md in the first directory].
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Write nothing; only print.
    #[arg(long)]
    pub no_write: bool,
    #[command(flatten)]
    pub cost: CostArgs,
}

/// What `decide` produced.
#[derive(Debug)]
pub struct DecideOutcome {
    /// The decision.
    pub decision: Decision,
    /// `decision.md`'s text.
    pub markdown: String,
    /// Where it was written, unless `--no-write`.
    pub path: Option<PathBuf>,
}

/// Loads every directory, decides, renders and writes; no printing.
pub fn build(args: &DecideArgs) -> Result<DecideOutcome> {
    let loaded: Vec<LoadedExperiment> = args
        .dirs
        .iter()
        .map(|d| LoadedExperiment::load(d).with_context(|| format!("loading {}", d.display())))
        .collect::<Result<_>>()?;
    let (contract_text, source) = if args.slo.is_empty() {
        match loaded
            .iter()
            .find(|l| !l.stored_contract().is_empty())
        {
            Some(l) => (
                l.stored_contract(),
                format!("the sweep's experiment.json in {}", l.path.display()),
            ),
            None => bail!(
                "no latency contract: pass --slo (e.g. --slo ttft:p99:500 tpot:p95:40); none of the directories is a sweep that stored one"
            ),
        }
    } else {
        (args.slo.clone(), "--slo".to_string())
    };
    let options = DecideOptions {
        contract: parse_contract(&contract_text)?,
        contract_source: format!("{} = {}", source, contract_text.join(" ")),
        cost: args.cost.params()?,
        tool_version: env!("CARGO_PKG_VERSION").to_owned(),
        requests: args
            .slo_requests
            .as_deref()
            .map(RequestFilter::parse)
            .transpose()
            .context("--slo-requests")?,
    };
    let inputs: Vec<CandidateInput<'_>> = loaded
        .iter()
        .map(|l| CandidateInput {
            dir: l.path.display().to_string(),
            view: l.view(),
            environment: l.environment.as_ref(),
        })
        .collect();
    let decision = judge(&inputs, &options)?;
    let markdown = decision_markdown(&decision);
    let path = if args.no_write {
        None
    } else {
        let p = match &args.output {
            Some(p) => p.clone(),
            None => loaded
                .first()
                .map(|l| l.dir.join("decision.md"))
                .unwrap_or_else(|| PathBuf::from("decision.md")),
        };
        std::fs::write(&p, &markdown).with_context(|| format!("writing {}", p.display()))?;
        Some(p)
    };
    Ok(DecideOutcome {
        decision,
        markdown,
        path,
    })
}

/// Runs `servebench decide`: prints the record; exit 1 when nothing meets the contract.
pub fn decide(args: DecideArgs) -> Result<ExitCode> {
    let out = build(&args)?;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(out.markdown.as_bytes())
        .and_then(|()| stdout.flush())
        .context("printing the decision")?;
    if let Some(p) = &out.path {
        eprintln!("decision: {}", p.display());
    }
    Ok(if out.decision.accepted.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
