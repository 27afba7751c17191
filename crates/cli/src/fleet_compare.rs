//! `servebench plan --fleet SPEC --fleet SPEC [RUN FLAGS]`: the same workload in virtual time
//! on several simulated fleet layouts (e.g. four mixed replicas vs three chat + one
//! long-prefill pool), tabulated per layout and per pool: p99 TTFT, p99 TPOT, throughput.
//! The run flags describe the workload as for `servebench run` (dataset, rate, count).

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Parser;
use servebench_analysis::decision::{slo_percentile_ms, RequestFilter, SloCheck};
use servebench_metrics::summary::MetricSummary;
use servebench_metrics::RunSummary;
use servebench_sim::SimArgs;

use crate::run::args::RunArgs;
use crate::run::plan::RunPlan;

#[derive(Debug, Parser)]
#[command(name = "servebench plan --fleet", no_binary_name = true)]
struct Workload {
    #[command(flatten)]
    run: RunArgs,
}

/// Whether a `plan` command line asks for a fleet comparison.
pub fn wants(args: &[String]) -> bool {
    args.iter()
        .any(|a| a == "--fleet" || a.starts_with("--fleet="))
}

/// Splits `--fleet SPEC` pairs from the workload's run flags.
fn split(args: &[String]) -> Result<(Vec<String>, Vec<String>)> {
    let mut fleets = Vec::new();
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--fleet" {
            let spec = it.next().context("--fleet needs a simulator spec")?;
            fleets.push(spec.clone());
        } else if let Some(spec) = a.strip_prefix("--fleet=") {
            fleets.push(spec.to_owned());
        } else {
            rest.push(a.clone());
        }
    }
    if fleets.len() < 2 {
        bail!("give at least two --fleet layouts to compare");
    }
    for flag in ["--sim", "--base-url", "--host", "--virtual-time"] {
        if rest
            .iter()
            .any(|a| a == flag || a.starts_with(&format!("{flag}=")))
        {
            bail!("{flag} cannot be combined with --fleet: each layout runs in virtual time on its own simulator");
        }
    }
    Ok((fleets, rest))
}

/// The contract to judge layouts against, taken out of the run flags: `--slo A B ...` (values
/// up to the next flag) and `--slo-requests FILTER`.
struct Contract {
    slo: Vec<String>,
    requests: Option<String>,
}

fn take_contract(words: Vec<String>) -> Result<(Contract, Vec<String>)> {
    let mut contract = Contract {
        slo: Vec::new(),
        requests: None,
    };
    let mut rest = Vec::new();
    let mut it = words.into_iter().peekable();
    while let Some(a) = it.next() {
        if a == "--slo" {
            let before = contract.slo.len();
            while let Some(v) = it.next_if(|v| !v.starts_with("--")) {
                contract.slo.push(v);
            }
            if contract.slo.len() == before {
                bail!("--slo needs objectives, e.g. --slo ttft:p99:500 tpot:p95:40");
            }
        } else if let Some(v) = a.strip_prefix("--slo=") {
            contract.slo.push(v.to_owned());
        } else if a == "--slo-requests" {
            let v = it
                .next()
                .context("--slo-requests needs a filter, e.g. 'prompt_tokens<4096'")?;
            contract.requests = Some(v);
        } else if let Some(v) = a.strip_prefix("--slo-requests=") {
            contract.requests = Some(v.to_owned());
        } else {
            rest.push(a);
        }
    }
    if contract.requests.is_some() && contract.slo.is_empty() {
        bail!("--slo-requests needs --slo: it says which requests the contract is judged on");
    }
    Ok((contract, rest))
}

/// One line per layout: whether it meets the contract, with the figures.
fn judge(
    contract: &Contract,
    records: &[Vec<servebench_metrics::RequestRecord>],
) -> Result<String> {
    let slos = crate::diagnose_cmd::parse_contract(&contract.slo)?;
    let filter = contract
        .requests
        .as_deref()
        .map(RequestFilter::parse)
        .transpose()
        .context("--slo-requests")?;
    let mut out = String::new();
    let on = filter
        .as_ref()
        .map(|f| format!(" on the requests with {f}"))
        .unwrap_or_default();
    let _ = writeln!(out, "\ncontract: {}{on}", contract.slo.join(" "));
    let mut meeting = Vec::new();
    for (k, recs) in records.iter().enumerate() {
        let checks: Vec<SloCheck> = slos
            .iter()
            .map(|slo| {
                let measured_ms = slo_percentile_ms(recs, slo, filter.as_ref());
                SloCheck {
                    slo: *slo,
                    measured_ms,
                    met: measured_ms.is_some_and(|v| slo.admits(v)),
                }
            })
            .collect();
        let meets = checks.iter().all(|c| c.met);
        if meets {
            meeting.push((k + 1).to_string());
        }
        let _ = writeln!(
            out,
            "layout {}: {} ({})",
            k + 1,
            if meets { "meets" } else { "fails" },
            checks
                .iter()
                .map(SloCheck::describe)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let _ = match meeting.as_slice() {
        [] => writeln!(out, "no layout meets the contract"),
        [one] => writeln!(out, "layout {one} meets the contract"),
        many => writeln!(out, "layouts {} meet the contract", many.join(", ")),
    };
    Ok(out)
}

fn p99(m: &MetricSummary) -> String {
    m.percentile(99.0)
        .map_or_else(|| "-".to_owned(), |s| format!("{:.1}", s.value))
}

/// Runs the comparison; `args` are the words after `plan`.
pub async fn compare(args: &[String]) -> Result<ExitCode> {
    let (fleets, rest) = split(args)?;
    let (contract, rest) = take_contract(rest)?;
    if !contract.slo.is_empty() {
        // A bad contract is refused before any layout runs.
        judge(&contract, &[])?;
    }
    crate::run::args::check_unsupported(&rest).map_err(anyhow::Error::msg)?;
    let mut gpus = Vec::new();
    for spec in &fleets {
        let sim = SimArgs::parse_spec(spec)
            .and_then(|a| a.resolve())
            .with_context(|| format!("--fleet {spec:?}"))?;
        gpus.push(match &sim.fleet {
            Some(f) => f.gpus(),
            None => sim.engine.deployment.tp(),
        });
    }
    if gpus.iter().any(|g| *g != gpus[0]) {
        eprintln!(
            "warning: the layouts use different GPU counts ({}); compare at equal count for a fair answer",
            gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
        );
    }
    let stop = crate::run::interrupt_on_ctrl_c();
    let mut rows: Vec<(usize, RunSummary)> = Vec::new();
    let mut records = Vec::new();
    for (k, spec) in fleets.iter().enumerate() {
        let mut words = rest.clone();
        words.extend([
            "--virtual-time".to_owned(),
            "--sim".to_owned(),
            spec.clone(),
        ]);
        let mut run = Workload::try_parse_from(&words)
            .map_err(|e| anyhow::anyhow!("{}", e.render().to_string().trim_end()))?
            .run;
        run.output_dir = run.output_dir.join(format!("layout-{}", k + 1));
        let plan = RunPlan::from_args(&run)?;
        let (target, _guard) = crate::run::target::resolve_target(&plan.target).await?;
        let mut command_line = vec!["servebench".to_owned(), "run".to_owned()];
        command_line.extend(words);
        let out = crate::run::execute(&plan, &target, command_line, &stop, false).await?;
        eprintln!("layout {}: results in {}", k + 1, out.native_path.display());
        if !contract.slo.is_empty() {
            records.push(
                servebench_metrics::read_jsonl(&out.jsonl_path)
                    .with_context(|| format!("reading {}", out.jsonl_path.display()))?,
            );
        }
        rows.push((k, out.summary));
    }
    print!("{}", render(&fleets, &gpus, &rows));
    if !contract.slo.is_empty() {
        print!("{}", judge(&contract, &records)?);
    }
    Ok(ExitCode::SUCCESS)
}

fn render(fleets: &[String], gpus: &[u32], rows: &[(usize, RunSummary)]) -> String {
    let mut out = String::new();
    for (k, spec) in fleets.iter().enumerate() {
        let _ = writeln!(out, "layout {}: {spec} ({} GPUs)", k + 1, gpus[k]);
    }
    let _ = writeln!(
        out,
        "\n{:<8} {:<10} {:>7} {:>14} {:>14} {:>10} {:>12}",
        "layout", "pool", "ok", "p99 TTFT ms", "p99 TPOT ms", "req/s", "out tok/s"
    );
    for (k, s) in rows {
        let _ = writeln!(
            out,
            "{:<8} {:<10} {:>7} {:>14} {:>14} {:>10.2} {:>12.1}",
            k + 1,
            "(all)",
            s.completed,
            p99(&s.ttft),
            p99(&s.tpot),
            s.request_throughput,
            s.output_throughput
        );
        for (name, p) in &s.per_pool {
            let share = if s.completed > 0 {
                p.completed as f64 / s.completed as f64
            } else {
                0.0
            };
            let _ = writeln!(
                out,
                "{:<8} {:<10} {:>7} {:>14} {:>14} {:>10.2} {:>12}",
                k + 1,
                name,
                p.completed,
                p99(&p.ttft),
                p99(&p.tpot),
                s.request_throughput * share,
                "",
            );
        }
    }
    out
}

/// Entry point from `main`: its own runtime, errors printed as every command prints them.
pub fn main(args: &[String]) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(compare(args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", crate::error_text(&e));
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn words(s: &[&str]) -> Vec<String> {
        s.iter().map(|w| (*w).to_owned()).collect()
    }

    #[test]
    fn fleets_are_split_from_the_workload() {
        let (f, rest) = split(&words(&[
            "--fleet",
            "a --replicas 2",
            "--num-prompts",
            "5",
            "--fleet=b",
        ]))
        .unwrap();
        assert_eq!(f, ["a --replicas 2", "b"]);
        assert_eq!(rest, ["--num-prompts", "5"]);
        assert!(split(&words(&["--fleet", "a"])).is_err());
        assert!(split(&words(&["--fleet", "a", "--fleet", "b", "--sim", "c"])).is_err());
        assert!(wants(&words(&["--fleet", "a"])));
    }

    #[test]
    fn the_contract_is_taken_out_of_the_run_flags() {
        let (c, rest) = take_contract(words(&[
            "--slo",
            "ttft:p99:100",
            "tpot:p95:40",
            "--num-prompts",
            "5",
            "--slo-requests=prompt_tokens<4096",
        ]))
        .unwrap();
        assert_eq!(c.slo, ["ttft:p99:100", "tpot:p95:40"]);
        assert_eq!(c.requests.as_deref(), Some("prompt_tokens<4096"));
        assert_eq!(rest, ["--num-prompts", "5"]);
        assert!(take_contract(words(&["--slo", "--num-prompts", "5"])).is_err());
        assert!(take_contract(words(&["--slo-requests", "prompt_tokens<5"])).is_err());
        let (c, _) = take_contract(words(&["--slo", "ttft:p99:nope"])).unwrap();
        assert!(judge(&c, &[]).is_err());
        assert!(!wants(&words(&["--daily-requests", "5"])));
    }
}
