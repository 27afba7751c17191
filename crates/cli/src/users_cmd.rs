//! `servebench users` (docs/agents.md): the most concurrent users of an agent workload that
//! still meet each SLO tier. Each probe is a `run --dataset-name agentic --num-users N` (its
//! sessions `N × --sessions-per-user`, its files in `--output-dir/users-N/`); the count doubles
//! until a tier is missed, then each tier's boundary is bisected, reusing every probe.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;

use crate::run::args::RunArgs;
use crate::run::plan::{DatasetChoice, RunPlan};

/// The default tiers: TTFT and TPOT at p90, ms.
pub const DEFAULT_TIERS: &[&str] = &[
    "interactive:ttft=500,tpot=50",
    "standard:ttft=2000,tpot=100",
    "batch:ttft=10000,tpot=250",
];

/// Arguments of `servebench users`.
#[derive(Debug, Clone, Args)]
pub struct UsersArgs {
    #[command(flatten)]
    pub run: Box<RunArgs>,
    /// An SLO tier: NAME:KEY=MS[,KEY=MS…][,p=PCT] with KEY in ttft, tpot, itl, e2el, each a
    /// bound on that percentile of the run's requests (p90 unless p is given). Repeatable
    /// [default: interactive:ttft=500,tpot=50 standard:ttft=2000,tpot=100
    /// batch:ttft=10000,tpot=250].
    #[arg(long = "tier", value_name = "SPEC", help_heading = "Users search")]
    pub tiers: Vec<String>,
    /// The most users the search tries.
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=100_000), help_heading = "Users search")]
    pub max_users: u64,
    /// Sessions each user runs in a probe (a probe runs N × this many sessions).
    #[arg(long, value_name = "K", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=1000), help_heading = "Users search")]
    pub sessions_per_user: u64,
    /// Most failed requests a passing probe may have, as a share of all.
    #[arg(
        long,
        value_name = "SHARE",
        default_value_t = 0.01,
        help_heading = "Users search"
    )]
    pub max_failed_share: f64,
}

/// One tier's bounds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tier {
    pub name: String,
    /// The percentile every bound is on.
    pub percentile: f64,
    /// (metric, bound ms).
    pub bounds: Vec<(String, f64)>,
}

impl Tier {
    pub fn describe(&self) -> String {
        let b: Vec<String> = self
            .bounds
            .iter()
            .map(|(k, v)| format!("{k} ≤ {v} ms"))
            .collect();
        format!("p{} {}", self.percentile, b.join(", "))
    }
}

/// `NAME:ttft=500,tpot=50,p=90`.
pub fn parse_tier(spec: &str) -> Result<Tier> {
    let (name, rest) = spec
        .split_once(':')
        .with_context(|| format!("--tier {spec:?}: expected NAME:KEY=MS[,KEY=MS…]"))?;
    if name.is_empty() {
        bail!("--tier {spec:?}: the tier needs a name");
    }
    let mut percentile = 90.0;
    let mut bounds = Vec::new();
    for part in rest.split(',').filter(|p| !p.trim().is_empty()) {
        let (k, v) = part
            .split_once('=')
            .with_context(|| format!("--tier {spec:?}: {part:?} is not KEY=VALUE"))?;
        let v: f64 = v
            .trim()
            .parse()
            .with_context(|| format!("--tier {spec:?}: {v:?} is not a number"))?;
        match k.trim() {
            "p" => {
                if !(v > 0.0 && v < 100.0) {
                    bail!("--tier {spec:?}: p {v} is out of range (allowed: above 0, below 100)");
                }
                percentile = v;
            }
            key @ ("ttft" | "tpot" | "itl" | "e2el") => {
                if !(v.is_finite() && v > 0.0) {
                    bail!("--tier {spec:?}: {key} {v} is out of range (allowed: a positive number of ms)");
                }
                bounds.push((key.to_owned(), v));
            }
            other => bail!(
                "--tier {spec:?}: unknown metric {other:?}; allowed: ttft, tpot, itl, e2el, p"
            ),
        }
    }
    if bounds.is_empty() {
        bail!("--tier {spec:?}: give at least one bound (ttft, tpot, itl or e2el)");
    }
    Ok(Tier {
        name: name.to_owned(),
        percentile,
        bounds,
    })
}

/// What one probe measured.
#[derive(Debug, Clone, Serialize)]
pub struct Probe {
    pub users: usize,
    pub sessions: usize,
    pub completed: u64,
    pub failed: u64,
    /// Each tier's metrics at its percentile, ms, and whether the probe met the tier.
    pub tiers: Vec<ProbeTier>,
    pub result: PathBuf,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProbeTier {
    pub name: String,
    pub values_ms: BTreeMap<String, Option<f64>>,
    pub met: bool,
}

fn judge(summary: &servebench_metrics::RunSummary, tier: &Tier, max_failed: f64) -> ProbeTier {
    let total = summary.completed + summary.failed;
    let failed_ok = total > 0 && (summary.failed as f64) <= max_failed * total as f64;
    let mut met = failed_ok && summary.completed > 0;
    let mut values = BTreeMap::new();
    for (k, bound) in &tier.bounds {
        let m = match k.as_str() {
            "ttft" => &summary.ttft,
            "tpot" => &summary.tpot,
            "itl" => &summary.itl,
            _ => &summary.e2el,
        };
        let v = m.percentile(tier.percentile).map(|s| s.value);
        met &= v.is_some_and(|v| v <= *bound);
        values.insert(k.clone(), v);
    }
    ProbeTier {
        name: tier.name.clone(),
        values_ms: values,
        met,
    }
}

/// The search's answer for one tier.
#[derive(Debug, Clone, Serialize)]
pub struct TierAnswer {
    pub tier: Tier,
    /// The most users that met it (0: not even one).
    pub users: usize,
    /// Every probe up to `--max-users` met it: the answer is a floor.
    pub at_least: bool,
}

/// The search over probes: `probe(n)` for each tier's boundary, each count probed once.
pub async fn search<F, Fut>(
    tiers: &[Tier],
    max_users: usize,
    mut probe: F,
) -> Result<(Vec<TierAnswer>, BTreeMap<usize, Vec<bool>>)>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<bool>>>,
{
    let mut seen: BTreeMap<usize, Vec<bool>> = BTreeMap::new();
    macro_rules! at {
        ($n:expr) => {{
            let n = $n;
            if !seen.contains_key(&n) {
                let r = probe(n).await?;
                seen.insert(n, r);
            }
            seen[&n].clone()
        }};
    }
    // Double while any tier still passes.
    let mut n = 1;
    loop {
        let r = at!(n);
        if !r.iter().any(|&m| m) || n >= max_users {
            break;
        }
        n = (n * 2).min(max_users);
    }
    let mut answers = Vec::with_capacity(tiers.len());
    for (t, tier) in tiers.iter().enumerate() {
        // The largest passing count known, and the smallest failing one above it.
        let lo = seen
            .iter()
            .filter(|(_, r)| r[t])
            .map(|(n, _)| *n)
            .max()
            .unwrap_or(0);
        let mut hi = seen
            .iter()
            .filter(|(n, r)| **n > lo && !r[t])
            .map(|(n, _)| *n)
            .min();
        let mut lo = lo;
        if let Some(mut h) = hi {
            while h - lo > 1 {
                let mid = lo + (h - lo) / 2;
                if at!(mid)[t] {
                    lo = mid;
                } else {
                    h = mid;
                }
            }
            hi = Some(h);
        }
        answers.push(TierAnswer {
            tier: tier.clone(),
            users: lo,
            at_least: hi.is_none() && lo >= max_users,
        });
    }
    Ok((answers, seen))
}

/// `servebench users`.
pub async fn users(args: UsersArgs, command_line: Vec<String>) -> Result<ExitCode> {
    let plan = RunPlan::from_args(&args.run)?;
    let DatasetChoice::Agentic(agents) = &plan.dataset else {
        bail!("servebench users searches agent workloads: add --dataset-name agentic (and --backend openai-chat)");
    };
    if agents.num_users.is_some() {
        bail!("servebench users sets --num-users itself, probe by probe: drop it");
    }
    if plan.traffic.max_concurrency.is_some() || plan.traffic.request_rate.is_finite() {
        bail!("servebench users runs closed populations of users: drop --max-concurrency and --request-rate");
    }
    if !(0.0..=1.0).contains(&args.max_failed_share) {
        bail!(
            "--max-failed-share {} is out of range (allowed: 0 to 1)",
            args.max_failed_share
        );
    }
    let specs: Vec<String> = if args.tiers.is_empty() {
        DEFAULT_TIERS.iter().map(|s| (*s).to_owned()).collect()
    } else {
        args.tiers.clone()
    };
    let tiers = specs
        .iter()
        .map(|s| parse_tier(s))
        .collect::<Result<Vec<_>>>()?;
    let (target, _guard) = crate::run::target::resolve_target(&plan.target).await?;
    let stop = crate::run::interrupt_on_ctrl_c();
    let out_dir = plan.report.output_dir.clone();
    let per_user = usize::try_from(args.sessions_per_user).unwrap_or(usize::MAX);
    let max_users = usize::try_from(args.max_users).unwrap_or(usize::MAX);
    let probes: std::cell::RefCell<BTreeMap<usize, Probe>> = Default::default();
    let max_failed = args.max_failed_share;
    eprintln!(
        "Searching the most users meeting {} tier(s), up to {max_users} users, {per_user} sessions each",
        tiers.len()
    );
    let (answers, _) = {
        let probes = &probes;
        let out_dir = &out_dir;
        let tiers = &tiers;
        let target = &target;
        let stop = &stop;
        let plan = &plan;
        let command_line = &command_line;
        search(tiers, max_users, |n| async move {
            let mut p = plan.clone();
            let sessions = n.saturating_mul(per_user);
            p.num_prompts = sessions;
            if let DatasetChoice::Agentic(a) = &mut p.dataset {
                a.num_users = Some(n);
                a.flags.num_users = Some(n as u64);
            }
            p.report.output_dir = out_dir.join(format!("users-{n}"));
            p.report.progress = false;
            let out = crate::run::execute(&p, target, command_line.clone(), stop, false).await?;
            let judged: Vec<ProbeTier> = tiers
                .iter()
                .map(|t| judge(&out.summary, t, max_failed))
                .collect();
            let line: Vec<String> = judged
                .iter()
                .map(|j| {
                    let v: Vec<String> = j
                        .values_ms
                        .iter()
                        .map(|(k, v)| {
                            format!("{k} {}", v.map_or("-".into(), |v| format!("{v:.0}")))
                        })
                        .collect();
                    format!(
                        "{} {} ({})",
                        j.name,
                        if j.met { "met" } else { "missed" },
                        v.join(", ")
                    )
                })
                .collect();
            eprintln!("  {n:>6} users: {}", line.join("; "));
            let met = judged.iter().map(|j| j.met).collect();
            probes.borrow_mut().insert(
                n,
                Probe {
                    users: n,
                    sessions,
                    completed: out.summary.completed,
                    failed: out.summary.failed,
                    tiers: judged,
                    result: out.native_path,
                },
            );
            if stop.dispatch_stopped() {
                bail!("interrupted");
            }
            Ok(met)
        })
        .await?
    };
    println!("{:-^60}", " Most users per SLO tier ");
    println!("{:<14}{:<34}{:>12}", "Tier", "SLO", "Users");
    for a in &answers {
        let users = if a.at_least {
            format!("≥ {}", a.users)
        } else {
            a.users.to_string()
        };
        println!("{:<14}{:<34}{:>12}", a.tier.name, a.tier.describe(), users);
    }
    std::fs::create_dir_all(&out_dir)
        .with_context(|| format!("cannot create --output-dir {}", out_dir.display()))?;
    let path = out_dir.join("users.json");
    let text = serde_json::to_vec_pretty(&serde_json::json!({
        "schema": "servebench.users/v1",
        "max_users": max_users,
        "sessions_per_user": per_user,
        "tiers": answers,
        "probes": probes.borrow().values().cloned().collect::<Vec<_>>(),
    }))
    .context("serializing the users search")?;
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("users search: {}", path.display());
    Ok(crate::run::final_exit(ExitCode::SUCCESS))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn tiers_parse_and_refuse_what_they_cannot_judge() {
        let t = parse_tier("interactive:ttft=500,tpot=50,p=99").unwrap();
        assert_eq!(t.percentile, 99.0);
        assert_eq!(t.bounds, [("ttft".into(), 500.0), ("tpot".into(), 50.0)]);
        assert_eq!(t.describe(), "p99 ttft ≤ 500 ms, tpot ≤ 50 ms");
        for bad in [
            "x",
            ":ttft=1",
            "a:ttft=-1",
            "a:foo=1",
            "a:p=100,ttft=1",
            "a:p=50",
            "a:ttft=nan",
        ] {
            assert!(parse_tier(bad).is_err(), "{bad}");
        }
        for d in DEFAULT_TIERS {
            parse_tier(d).unwrap();
        }
    }

    #[tokio::test]
    async fn the_search_finds_each_boundary_and_probes_each_count_once() {
        let tiers: Vec<Tier> = ["a:ttft=1", "b:ttft=1", "c:ttft=1"]
            .iter()
            .map(|s| parse_tier(s).unwrap())
            .collect();
        // Tier a holds up to 5 users, b up to 37, c never.
        let limits = [5usize, 37, 0];
        let mut calls = Vec::new();
        let (answers, seen) = search(&tiers, 100, |n| {
            calls.push(n);
            let r = limits.iter().map(|&l| n <= l).collect();
            async move { Ok(r) }
        })
        .await
        .unwrap();
        let got: Vec<(usize, bool)> = answers.iter().map(|a| (a.users, a.at_least)).collect();
        assert_eq!(got, [(5, false), (37, false), (0, false)]);
        let mut sorted = calls.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), calls.len(), "each count once: {calls:?}");
        assert_eq!(seen.len(), calls.len());
        // Everything passes up to the cap: a floor.
        let (answers, _) = search(&tiers[..1], 8, |_| async { Ok(vec![true]) })
            .await
            .unwrap();
        assert_eq!((answers[0].users, answers[0].at_least), (8, true));
    }
}
