//! `servebench plan --fleet SPEC --fleet SPEC [RUN FLAGS]`: the same workload in virtual time
//! on several simulated fleet layouts (e.g. four mixed replicas vs three chat + one
//! long-prefill pool), tabulated per layout and per pool: p99 TTFT, p99 TPOT, throughput.
//! The run flags describe the workload as for `servebench run` (dataset, rate, count).

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Parser;
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

fn p99(m: &MetricSummary) -> String {
    m.percentile(99.0)
        .map_or_else(|| "-".to_owned(), |s| format!("{:.1}", s.value))
}

/// Runs the comparison; `args` are the words after `plan`.
pub async fn compare(args: &[String]) -> Result<ExitCode> {
    let (fleets, rest) = split(args)?;
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
        rows.push((k, out.summary));
    }
    print!("{}", render(&fleets, &gpus, &rows));
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
        assert!(!wants(&words(&["--daily-requests", "5"])));
    }
}
