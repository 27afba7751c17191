//! `servebench plan --fleet SPEC --fleet SPEC [RUN FLAGS]`: the same workload in virtual time
//! on several simulated fleet layouts (e.g. four mixed replicas vs three chat + one
//! long-prefill pool), tabulated per layout and per pool: p99 TTFT, p99 TPOT, throughput.
//! The run flags describe the workload as for `servebench run` (dataset, rate, count).

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Arg, Args};
use servebench_analysis::decision::{slo_percentile_ms, RequestFilter, SloCheck};
use servebench_metrics::summary::MetricSummary;
use servebench_metrics::RunSummary;
use servebench_sim::SimArgs;

use crate::run::args::RunArgs;
use crate::run::plan::RunPlan;

/// Flags of `servebench plan --fleet`: the layouts, the contract they are judged against, and
/// the workload, described with `servebench run`'s flags.
#[derive(Debug, Clone, Args)]
pub struct FleetArgs {
    /// Compare simulated fleet layouts on one workload instead of sizing from a rate: SPEC is
    /// the arguments of `servebench sim` as one string, e.g. "llama-3.1-8b --gpu h100
    /// --replicas 4"; give two or more.
    ///
    /// The workload is given with `servebench run`'s flags (dataset, rate, count; listed
    /// below) and runs in virtual time once per layout, results in --output-dir/layout-K. The
    /// table shows p99 TTFT, p99 TPOT and throughput per layout and per pool.
    #[arg(long, value_name = "SPEC", help_heading = "Fleet comparison")]
    pub fleet: Vec<String>,
    /// With --fleet: the contract every layout is judged against, e.g. ttft:p99:500
    /// tpot:p95:40.
    #[arg(
        long,
        value_name = "OBJECTIVE",
        num_args = 1..,
        help_heading = "Fleet comparison"
    )]
    pub slo: Vec<String>,
    /// With --slo: the requests the contract is judged on, e.g. 'prompt_tokens<4096'.
    #[arg(long, value_name = "FILTER", help_heading = "Fleet comparison")]
    pub slo_requests: Option<String>,
    #[command(flatten)]
    pub workload: RunArgs,
}

/// For `plan`'s arguments: the fleet form's flags (these and the workload's, `run`'s) conflict
/// with the flags `other` (the capacity flags), and need --fleet, so that no flag of one form
/// is silently ignored by the other. (A derived group cannot say it: clap leaves the group of
/// a struct with a flattened member empty.)
pub fn apart_from(other: &'static [&'static str]) -> impl FnMut(Arg) -> Arg {
    let cmd = <FleetArgs as Args>::augment_args(clap::Command::new("fleet"));
    let ours: Vec<clap::Id> = cmd.get_arguments().map(|a| a.get_id().clone()).collect();
    move |a| match a.get_id().as_str() {
        "fleet" => a.conflicts_with_all(other),
        _ if ours.contains(a.get_id()) => a.requires("fleet").conflicts_with_all(other),
        _ => a,
    }
}

/// Refuses what clap cannot say in the user's terms: fewer than two layouts, a target of the
/// workload's own (each layout is its own simulator), a filter without a contract.
fn check(args: &FleetArgs) -> Result<()> {
    if args.fleet.len() < 2 {
        bail!("give at least two --fleet layouts to compare");
    }
    let w = &args.workload;
    for (flag, given) in [
        ("--sim", w.sim.is_some()),
        ("--base-url", w.base_url.is_some()),
        ("--host", w.host.is_some()),
        ("--virtual-time", w.virtual_time),
    ] {
        if given {
            bail!("{flag} cannot be combined with --fleet: each layout runs in virtual time on its own simulator");
        }
    }
    if args.slo_requests.is_some() && args.slo.is_empty() {
        bail!("--slo-requests needs --slo: it says which requests the contract is judged on");
    }
    Ok(())
}

/// The workload's flags as the user wrote them (`words`: after `plan`), without the fleet's
/// own flags: each layout's result records them as a `servebench run` command line.
fn workload_words(words: &[String]) -> Vec<String> {
    let mut rest = Vec::new();
    let mut it = words.iter().peekable();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--fleet" | "--slo-requests" => {
                it.next();
            }
            // clap reads --slo's objectives up to the next flag.
            "--slo" => while it.next_if(|v| !v.starts_with('-')).is_some() {},
            _ if ["--fleet=", "--slo=", "--slo-requests="]
                .iter()
                .any(|p| a.starts_with(p)) => {}
            _ => rest.push(a.clone()),
        }
    }
    rest
}

/// The contract to judge layouts against.
struct Contract {
    slo: Vec<String>,
    requests: Option<String>,
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

/// Runs the comparison. `words`: the command line after `plan` (secrets masked), recorded
/// in each layout's result as the workload's `servebench run` flags.
pub async fn compare(args: FleetArgs, words: &[String]) -> Result<ExitCode> {
    check(&args)?;
    crate::results_index::configure(&args.workload.db);
    let contract = Contract {
        slo: args.slo.clone(),
        requests: args.slo_requests.clone(),
    };
    if !contract.slo.is_empty() {
        // A bad contract is refused before any layout runs.
        judge(&contract, &[])?;
    }
    let fleets = &args.fleet;
    let mut gpus = Vec::new();
    for spec in fleets {
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
    let rest = workload_words(words);
    let stop = crate::run::interrupt_on_ctrl_c();
    let mut rows: Vec<(usize, RunSummary)> = Vec::new();
    let mut records = Vec::new();
    for (k, spec) in fleets.iter().enumerate() {
        let mut run = args.workload.clone();
        run.virtual_time = true;
        run.sim = Some(spec.clone());
        run.output_dir = run.output_dir.join(format!("layout-{}", k + 1));
        let plan = RunPlan::from_args(&run)?;
        let (target, _guard) = crate::run::target::resolve_target(&plan.target).await?;
        let mut command_line = vec!["servebench".to_owned(), "run".to_owned()];
        command_line.extend(rest.iter().cloned());
        command_line.extend([
            "--virtual-time".to_owned(),
            "--sim".to_owned(),
            spec.clone(),
        ]);
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
    print!("{}", render(fleets, &gpus, &rows));
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn words(s: &[&str]) -> Vec<String> {
        s.iter().map(|w| (*w).to_owned()).collect()
    }

    fn parse(line: &[&str]) -> Result<crate::Cli, clap::Error> {
        use clap::Parser;
        crate::Cli::try_parse_from(["servebench", "plan"].iter().chain(line))
    }

    fn fleet(line: &[&str]) -> FleetArgs {
        match parse(line).unwrap().command {
            crate::Command::Plan(p) => p.compare,
            c => panic!("{c:?}"),
        }
    }

    #[test]
    fn fleets_are_read_beside_the_workload() {
        let f = fleet(&[
            "--fleet",
            "a --replicas 2",
            "--num-prompts",
            "5",
            "--fleet=b",
            "--slo",
            "ttft:p99:100",
            "tpot:p95:40",
            "--slo-requests=prompt_tokens<4096",
        ]);
        assert_eq!(f.fleet, ["a --replicas 2", "b"]);
        assert_eq!(f.workload.num_prompts, 5);
        assert_eq!(f.slo, ["ttft:p99:100", "tpot:p95:40"]);
        assert_eq!(f.slo_requests.as_deref(), Some("prompt_tokens<4096"));
        assert!(check(&f).is_ok());
        assert!(check(&fleet(&["--fleet", "a"])).is_err());
        assert!(check(&fleet(&["--fleet", "a", "--fleet", "b", "--sim", "c"])).is_err());
        assert!(check(&fleet(&[
            "--fleet",
            "a",
            "--fleet",
            "b",
            "--slo-requests",
            "x"
        ]))
        .is_err());
    }

    #[test]
    fn clap_refuses_what_does_not_belong_together() {
        // Workload flags without layouts, capacity flags with them, a contract without values.
        assert!(parse(&[
            "--daily-requests",
            "5",
            "--per-gpu-rps",
            "1",
            "--num-prompts",
            "5"
        ])
        .is_err());
        assert!(parse(&["--fleet", "a", "--fleet", "b", "--daily-requests", "5"]).is_err());
        assert!(parse(&["--fleet", "a", "--fleet", "b", "--per-gpu-rps", "1"]).is_err());
        assert!(parse(&["--fleet", "a", "--slo", "--num-prompts", "5"]).is_err());
        assert!(parse(&[
            "--slo",
            "ttft:p99:1",
            "--daily-requests",
            "5",
            "--per-gpu-rps",
            "1"
        ])
        .is_err());
        assert!(parse(&["--daily-requests", "5"]).is_err());
        assert!(parse(&["--daily-requests", "5", "--from", "x.json"]).is_ok());
    }

    #[test]
    fn the_recorded_workload_leaves_out_the_fleet_flags() {
        let w = workload_words(&words(&[
            "--fleet",
            "a",
            "--slo",
            "ttft:p99:100",
            "tpot:p95:40",
            "--num-prompts",
            "5",
            "--fleet=b",
            "--slo-requests",
            "prompt_tokens<5",
            "--seed=3",
        ]));
        assert_eq!(w, ["--num-prompts", "5", "--seed=3"]);
    }

    #[test]
    fn a_bad_contract_is_refused() {
        let c = Contract {
            slo: vec!["ttft:p99:nope".to_owned()],
            requests: None,
        };
        assert!(judge(&c, &[]).is_err());
    }
}
