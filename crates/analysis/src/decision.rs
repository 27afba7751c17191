//! The decision record: which configuration meets the latency contract with the most output,
//! which were rejected and on which figures, what it costs, and why the search stopped.
//!
//! Each input directory is one configuration. A sweep's configuration is judged at its best
//! load: the highest output throughput among the loads that meet every objective (the load
//! is part of the accepted configuration). A matrix's configuration must meet the contract on
//! every row, because a deployment serves all of its workloads; it is ranked by its mean
//! output throughput over the rows. Objectives compare a percentile with a threshold
//! strictly (`p99 TTFT < 500 ms`), as the sweep's headline does.

mod cost;
mod layout;
mod markdown;
mod request_filter;

pub use cost::{
    accepted_tokens_per_s, cost_section_markdown, format_usd, run_cost, CostParams, RunCost,
};
pub use layout::{layout_of, pool_figures, Layout, PoolFigures};
pub use markdown::decision_markdown;
pub use request_filter::{RequestField, RequestFilter};

use serde::Serialize;
use servebench_metrics::result::{EnvironmentFile, RunMetadata, SimConfig};
use servebench_metrics::{stats, RequestRecord};

use crate::diagnose::{ExperimentView, GroupView, RowFigures, Stat};
use crate::format_quantity;
use crate::frontier::{LatencyMetric, LoadKind, Slo, SloStat};
use crate::AnalysisError;

/// One configuration to judge: an experiment directory, loaded.
#[derive(Debug, Clone)]
pub struct CandidateInput<'a> {
    /// The directory as the user named it.
    pub dir: String,
    /// Its results.
    pub view: ExperimentView<'a>,
    /// Its `environment.json`, when present.
    pub environment: Option<&'a EnvironmentFile>,
}

/// What to decide against.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecideOptions {
    /// The latency contract.
    pub contract: Vec<Slo>,
    /// Where the contract came from (`--slo`, or a sweep's `experiment.json`).
    pub contract_source: String,
    /// Price basis for cost figures.
    pub cost: Option<CostParams>,
    /// The version of servebench making the decision.
    pub tool_version: String,
    /// The contract is judged on these requests only (e.g. the chats of a mixed workload);
    /// `None`: on every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<RequestFilter>,
}

/// One objective at one point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SloCheck {
    /// The objective.
    pub slo: Slo,
    /// The measured percentile, ms (mean over repeats); `None` when unmeasured.
    pub measured_ms: Option<f64>,
    /// The measured percentile meets the objective ([`Slo::admits`]: at most the threshold).
    pub met: bool,
}

impl SloCheck {
    /// `p99 TTFT 612 ms ≥ 500 ms` or `p99 TTFT 120 ms < 500 ms` (`≤` when exactly at the
    /// threshold, which meets it).
    pub fn describe(&self) -> String {
        let threshold = format_quantity(self.slo.threshold_ms / 1e3, "s");
        match self.measured_ms {
            Some(v) => format!(
                "{} {} {} {threshold}",
                self.slo.stat(),
                format_quantity(v / 1e3, "s"),
                match (self.met, v < self.slo.threshold_ms) {
                    (true, true) => "<",
                    (true, false) => "≤",
                    (false, _) => "≥",
                }
            ),
            None => format!("{} unmeasured (needs < {threshold})", self.slo.stat()),
        }
    }
}

/// One operating point (a sweep load or a matrix row) judged against the contract.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PointEval {
    /// Group id.
    pub id: String,
    /// Group label.
    pub label: String,
    /// The swept variable's value, for a sweep point.
    pub load: Option<f64>,
    /// Each objective.
    pub checks: Vec<SloCheck>,
    /// Every objective met.
    pub meets: bool,
    /// Output tokens per second.
    pub output_throughput: f64,
    /// Requests per second.
    pub request_throughput: f64,
    /// Output tokens per second of requests within every threshold (goodput), when records
    /// were kept.
    pub accepted_tokens_per_s: Option<f64>,
    /// Completed and failed requests.
    pub completed: u64,
    /// Failed requests.
    pub failed: u64,
    /// Measured latency statistics: TTFT, TPOT, ITL, E2EL.
    pub latencies: Vec<(String, Stat)>,
    /// Cost, when priced.
    pub cost: Option<RunCost>,
    /// The first run's command line.
    pub command_line: Option<String>,
    /// Result files of the point's runs.
    pub runs: Vec<String>,
    /// GPUs of the candidate's layout, when known (a simulated engine or fleet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
    /// Each pool's latency, for a fleet (from the records' `served_by`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pools: Vec<PoolFigures>,
}

impl PointEval {
    /// Output tokens per second per GPU of the layout, when its GPU count is known.
    pub fn output_per_gpu(&self) -> Option<f64> {
        self.gpus
            .filter(|g| *g > 0)
            .map(|g| self.output_throughput / f64::from(g))
    }

    /// The objectives it missed, described.
    pub fn failures(&self) -> Vec<String> {
        self.checks
            .iter()
            .filter(|c| !c.met)
            .map(SloCheck::describe)
            .collect()
    }
}

/// Why a configuration stands where it does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Chosen.
    Accepted,
    /// No operating point meets the contract.
    FailsContract,
    /// Meets the contract, with less output than the accepted one.
    LessThroughput,
}

/// One configuration, judged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CandidateEval {
    /// The directory.
    pub dir: String,
    /// The experiment's title.
    pub title: String,
    /// `matrix`, `sweep` or `single`.
    pub kind: String,
    /// Short name: the settings that set it apart from the other candidates, else its title.
    pub label: String,
    /// Server settings that differ between candidates (`max_num_seqs = 8`).
    pub distinguishing: Vec<(String, String)>,
    /// How the server was started (the simulator's arguments), or what it reported.
    pub server: String,
    /// Versions: servebench that measured, the server or engine.
    pub versions: Vec<(String, String)>,
    /// The workload, in words.
    pub workload: String,
    /// The swept variable, for a sweep.
    pub sweep_variable: Option<String>,
    /// Every point.
    pub points: Vec<PointEval>,
    /// The configuration meets the contract.
    pub meets: bool,
    /// For a sweep: the index of the best point that meets the contract.
    pub operating: Option<usize>,
    /// What it is ranked by: output tok/s at the operating point (sweep) or averaged over
    /// rows (matrix); `None` when it fails the contract.
    pub score: Option<f64>,
    /// Why the experiment stopped.
    pub stop_reason: String,
    /// Where it stands.
    pub verdict: Verdict,
    /// The verdict with its figures.
    pub reason: String,
    /// The simulated hardware it ran on, when the simulator recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<Layout>,
}

impl CandidateEval {
    /// The points that stand for the configuration: the operating point of a sweep, every
    /// row of a matrix.
    pub fn operating_points(&self) -> Vec<&PointEval> {
        match self.operating {
            Some(i) => self.points.get(i).into_iter().collect(),
            None if self.sweep_variable.is_none() => self.points.iter().collect(),
            None => Vec::new(),
        }
    }
}

/// The decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// What it was decided against.
    pub options: DecideOptions,
    /// Every configuration, in input order.
    pub candidates: Vec<CandidateEval>,
    /// Index of the accepted configuration, if any meets the contract.
    pub accepted: Option<usize>,
    /// The decision in one sentence.
    pub headline: String,
    /// Candidates are ranked by output per GPU: fleet layouts of different GPU counts.
    pub per_gpu: bool,
    /// What the GPU counts of fleet layouts mean for the comparison, when fleets are compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_note: Option<String>,
}

/// Judges every configuration against the contract and picks the one with the most output.
pub fn decide(
    inputs: &[CandidateInput<'_>],
    options: &DecideOptions,
) -> Result<Decision, AnalysisError> {
    if inputs.is_empty() {
        return Err(AnalysisError::Invalid(
            "no configuration to decide between".into(),
        ));
    }
    if options.contract.is_empty() {
        return Err(AnalysisError::Invalid(
            "no latency contract: give SLOs such as ttft:p99:500 tpot:p95:40".into(),
        ));
    }
    let settings: Vec<Vec<(String, String)>> = inputs.iter().map(server_settings).collect();
    let distinguishing = distinguishing_settings(&settings);
    let mut candidates = Vec::with_capacity(inputs.len());
    for (i, input) in inputs.iter().enumerate() {
        candidates.push(evaluate(input, options, distinguishing[i].clone())?);
    }
    let (per_gpu, gpu_note) = gpu_basis(&candidates);
    if per_gpu {
        for c in &mut candidates {
            let gpus = c.layout.as_ref().map_or(1, |l| l.gpus.max(1));
            c.score = c.score.map(|s| s / f64::from(gpus));
        }
    }
    let unit = if per_gpu { "tok/s per GPU" } else { "tok/s" };
    let accepted = candidates
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.score.map(|s| (i, s)))
        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|(i, _)| i);
    let conditions = options
        .contract
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(" and ");
    let best_score = accepted.and_then(|i| candidates[i].score);
    for (i, c) in candidates.iter_mut().enumerate() {
        if Some(i) == accepted {
            c.verdict = Verdict::Accepted;
            c.reason = format!("accepted: {}", meets_description(c));
        } else if c.meets {
            c.verdict = Verdict::LessThroughput;
            c.reason = format!(
                "rejected: meets the contract ({}), but with {} against the accepted {}",
                meets_description(c),
                format_quantity(c.score.unwrap_or(0.0), unit),
                format_quantity(best_score.unwrap_or(0.0), unit),
            );
        } else {
            c.verdict = Verdict::FailsContract;
            c.reason = format!("rejected: {}", failure_description(c));
        }
    }
    let headline = match accepted {
        Some(i) => {
            let c = &candidates[i];
            format!("Accept {} ({}): {}", c.label, c.dir, meets_description(c))
        }
        None => format!("No configuration meets {conditions}"),
    };
    Ok(Decision {
        options: options.clone(),
        candidates,
        accepted,
        headline,
        per_gpu,
        gpu_note,
    })
}

/// Whether fleet layouts are ranked per GPU (their GPU counts differ), and the line that says
/// what was compared. Without a fleet among the candidates nothing changes.
fn gpu_basis(candidates: &[CandidateEval]) -> (bool, Option<String>) {
    if !candidates
        .iter()
        .any(|c| c.layout.as_ref().is_some_and(|l| l.fleet))
    {
        return (false, None);
    }
    let counts: Option<Vec<u32>> = candidates
        .iter()
        .map(|c| c.layout.as_ref().map(|l| l.gpus))
        .collect();
    let Some(counts) = counts else {
        return (
            false,
            Some(
                "some configurations ran on a server of unknown GPU count: totals are compared, not per-GPU figures"
                    .into(),
            ),
        );
    };
    let gpus = |n: u32| format!("{n} GPU{}", if n == 1 { "" } else { "s" });
    if counts.iter().all(|n| *n == counts[0]) {
        return (
            false,
            Some(format!(
                "every layout has {}: totals are compared",
                gpus(counts[0])
            )),
        );
    }
    let mut distinct = counts.clone();
    distinct.sort_unstable();
    distinct.dedup();
    let others: Vec<String> = distinct[1..].iter().map(u32::to_string).collect();
    let others = match others.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    };
    (
        true,
        Some(format!(
            "comparing {} with {others}: per-GPU figures are used",
            gpus(distinct[0])
        )),
    )
}

fn meets_description(c: &CandidateEval) -> String {
    match (c.operating, &c.sweep_variable) {
        (Some(i), Some(var)) => {
            let p = &c.points[i];
            format!(
                "{} output tok/s at {} ({})",
                format_quantity(p.output_throughput.round(), ""),
                describe_load(var, p.load),
                p.checks
                    .iter()
                    .map(SloCheck::describe)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
        _ => format!(
            "every row meets the contract, {} output tok/s on average",
            format_quantity(c.score.unwrap_or(0.0).round(), "")
        ),
    }
}

fn failure_description(c: &CandidateEval) -> String {
    if c.sweep_variable.is_some() {
        let lightest = c.points.iter().min_by(|a, b| {
            a.load
                .unwrap_or(f64::INFINITY)
                .total_cmp(&b.load.unwrap_or(f64::INFINITY))
        });
        match lightest {
            Some(p) => format!(
                "no load meets the contract; even the lightest ({}) has {}",
                p.label,
                p.failures().join(", ")
            ),
            None => "no load was measured".into(),
        }
    } else {
        let failing: Vec<String> = c
            .points
            .iter()
            .filter(|p| !p.meets)
            .map(|p| format!("{}: {}", p.label, p.failures().join(", ")))
            .collect();
        if failing.is_empty() {
            "no row was measured".into()
        } else {
            format!("fails the contract on {}", failing.join("; "))
        }
    }
}

fn describe_load(variable: &str, load: Option<f64>) -> String {
    let Some(v) = load else {
        return "its load".into();
    };
    if variable == "max_concurrency" {
        LoadKind::Concurrency.describe(v)
    } else {
        LoadKind::RequestRate.describe(v)
    }
}

fn evaluate(
    input: &CandidateInput<'_>,
    options: &DecideOptions,
    distinguishing: Vec<(String, String)>,
) -> Result<CandidateEval, AnalysisError> {
    let view = &input.view;
    let (groups, sweep_variable): (Vec<&GroupView<'_>>, Option<String>) = match &view.sweep {
        Some(s) => (s.points.iter().collect(), Some(s.variable.clone())),
        None => (view.groups(), None),
    };
    let layout = view.first_metadata().and_then(layout_of);
    let points: Vec<PointEval> = groups
        .iter()
        .filter_map(|g| evaluate_point(g, options, layout.as_ref()))
        .collect();
    if points.is_empty() {
        return Err(AnalysisError::Result(format!(
            "{}: no row or sweep point completed a request",
            input.dir
        )));
    }
    let (meets, operating, score) = if sweep_variable.is_some() {
        let best = points
            .iter()
            .enumerate()
            .filter(|(_, p)| p.meets)
            .max_by(|a, b| {
                a.1.output_throughput
                    .total_cmp(&b.1.output_throughput)
                    .then(b.0.cmp(&a.0))
            })
            .map(|(i, _)| i);
        (
            best.is_some(),
            best,
            best.map(|i| points[i].output_throughput),
        )
    } else {
        let all = points.iter().all(|p| p.meets);
        let mean = points.iter().map(|p| p.output_throughput).sum::<f64>() / points.len() as f64;
        (all, None, all.then_some(mean))
    };
    let metadata = groups
        .iter()
        .flat_map(|g| g.runs.iter())
        .map(|r| r.metadata)
        .next();
    let label = if distinguishing.is_empty() {
        view.title.clone()
    } else {
        distinguishing
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Ok(CandidateEval {
        dir: input.dir.clone(),
        title: view.title.clone(),
        kind: view.kind.clone(),
        label,
        distinguishing,
        server: metadata.map(server_description).unwrap_or_default(),
        versions: versions(input.environment, metadata),
        workload: workload_description(&groups, view),
        sweep_variable,
        meets,
        operating,
        score,
        stop_reason: stop_reason(view, &points),
        verdict: Verdict::FailsContract,
        reason: String::new(),
        points,
        layout,
    })
}

fn evaluate_point(
    g: &GroupView<'_>,
    options: &DecideOptions,
    layout: Option<&Layout>,
) -> Option<PointEval> {
    let f = RowFigures::from_group(g)?;
    let checks: Vec<SloCheck> = options
        .contract
        .iter()
        .map(|slo| {
            let measured_ms = measured_percentile(g, slo, options.requests.as_ref());
            SloCheck {
                slo: *slo,
                measured_ms,
                met: measured_ms.is_some_and(|v| slo.admits(v)),
            }
        })
        .collect();
    let accepted: Vec<f64> = g
        .runs
        .iter()
        .filter_map(|r| accepted_tokens_per_s(r.records, &options.contract, r.summary.duration_s))
        .collect();
    let accepted_tokens_per_s = (accepted.len() == g.runs.len() && !accepted.is_empty())
        .then(|| accepted.iter().sum::<f64>() / accepted.len() as f64);
    Some(PointEval {
        id: g.id.clone(),
        label: g.label.clone(),
        load: g.load,
        meets: checks.iter().all(|c| c.met),
        checks,
        output_throughput: f.output_throughput,
        request_throughput: f.request_throughput,
        accepted_tokens_per_s,
        completed: f.completed,
        failed: f.failed,
        latencies: vec![
            ("TTFT".into(), f.ttft),
            ("TPOT".into(), f.tpot),
            ("ITL".into(), f.itl),
            ("E2EL".into(), f.e2el),
        ],
        cost: options.cost.map(|p| {
            // A fleet's price is that of all its GPUs, whatever --gpus says.
            let p = match layout.filter(|l| l.fleet) {
                Some(l) => CostParams {
                    gpus: f64::from(l.gpus.max(1)),
                    ..p
                },
                None => p,
            };
            run_cost(f.output_throughput, accepted_tokens_per_s, p)
        }),
        command_line: g.runs.first().and_then(|r| {
            let argv = &r.metadata.command_line;
            (!argv.is_empty()).then(|| markdown::shell_join(argv))
        }),
        runs: g.runs.iter().map(|r| r.path.to_owned()).collect(),
        gpus: layout.map(|l| l.gpus),
        pools: if layout.is_some_and(|l| l.fleet) {
            pool_figures(&g.runs.iter().map(|r| r.records).collect::<Vec<_>>())
        } else {
            Vec::new()
        },
    })
}

/// The percentile an objective names, averaged over the group's runs: from the saved summary
/// when it holds that percentile, else from the records; from the records the filter admits
/// when the contract is on some requests only.
fn measured_percentile(
    g: &GroupView<'_>,
    slo: &Slo,
    requests: Option<&RequestFilter>,
) -> Option<f64> {
    let stat = slo.stat();
    let p = stat.percentile;
    if let Some(filter) = requests {
        let values: Vec<f64> = g
            .runs
            .iter()
            .filter_map(|r| {
                let kept = r.records.iter().filter(|rec| filter.admits(rec));
                percentile_from_records(kept, stat.metric, p)
            })
            .collect();
        return (values.len() == g.runs.len() && !values.is_empty())
            .then(|| values.iter().sum::<f64>() / values.len() as f64);
    }
    let values: Vec<f64> = g
        .runs
        .iter()
        .filter_map(|r| {
            let m = r.summary.metric(stat.metric.as_str())?;
            let saved = if (p - 50.0).abs() < 1e-9 {
                m.median
            } else {
                m.percentiles
                    .iter()
                    .find(|s| (s.p - p).abs() < 1e-9)
                    .map(|s| s.value)
            };
            saved.or_else(|| percentile_from_records(r.records, stat.metric, p))
        })
        .collect();
    (values.len() == g.runs.len() && !values.is_empty())
        .then(|| values.iter().sum::<f64>() / values.len() as f64)
}

/// The percentile an objective names over the successful records `requests` admits (every
/// record without a filter), ms; `None` without a sample.
pub fn slo_percentile_ms(
    records: &[RequestRecord],
    slo: &Slo,
    requests: Option<&RequestFilter>,
) -> Option<f64> {
    let stat = slo.stat();
    let kept = records
        .iter()
        .filter(|r| requests.is_none_or(|f| f.admits(r)));
    percentile_from_records(kept, stat.metric, stat.percentile)
}

fn percentile_from_records<'r>(
    records: impl IntoIterator<Item = &'r RequestRecord>,
    metric: LatencyMetric,
    p: f64,
) -> Option<f64> {
    let ok = records.into_iter().filter(|r| r.is_success());
    let ns: Vec<f64> = match metric {
        LatencyMetric::Ttft => ok.filter_map(|r| r.ttft_ns()).map(|v| v as f64).collect(),
        LatencyMetric::E2el => ok.filter_map(|r| r.e2el_ns()).map(|v| v as f64).collect(),
        LatencyMetric::Tpot => ok.filter_map(|r| r.tpot_ns()).collect(),
        LatencyMetric::Itl => ok.flat_map(|r| r.itls_ns()).map(|v| v as f64).collect(),
    };
    stats::percentile(&ns, p).map(|v| v / 1e6)
}

/// The simulator's settings (flattened `sim_config`, derived figures left out), or the
/// server's version: what may tell candidates apart.
fn server_settings(input: &CandidateInput<'_>) -> Vec<(String, String)> {
    let Some(meta) = input.view.first_metadata() else {
        return Vec::new();
    };
    let Some(cfg) = meta.target.sim_config.as_ref() else {
        return Vec::new();
    };
    let mut settings = sim_settings(cfg);
    // A fleet's recorded layout is nested JSON; one readable line names it instead.
    if let Some(layout) = layout_of(meta).filter(|l| l.fleet) {
        settings.retain(|(k, _)| !k.starts_with("fleet."));
        settings.push((
            "layout".into(),
            format!("{} ({} GPUs)", layout.description, layout.gpus),
        ));
    }
    settings
}

/// The simulator's settings as `dotted.key = value`, derived figures left out.
fn sim_settings(cfg: &SimConfig) -> Vec<(String, String)> {
    cfg.settings()
        .into_iter()
        .filter(|(k, _)| {
            let top = k.split('.').next().unwrap_or(k);
            !DERIVED_KEYS.contains(&top)
        })
        .collect()
}

/// Derived or bookkeeping keys of `sim_config` that differ as a consequence of other settings.
const DERIVED_KEYS: [&str; 5] = [
    "derived",
    "kv_capacity",
    "roofline",
    "num_gpu_blocks",
    "version",
];

/// For each candidate, the settings whose value is not the same for all candidates.
fn distinguishing_settings(all: &[Vec<(String, String)>]) -> Vec<Vec<(String, String)>> {
    if all.len() < 2 {
        return vec![Vec::new(); all.len()];
    }
    let value = |set: &[(String, String)], key: &str| {
        set.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    };
    let mut keys: Vec<&String> = all.iter().flat_map(|s| s.iter().map(|(k, _)| k)).collect();
    keys.sort();
    keys.dedup();
    let differing: Vec<&String> = keys
        .into_iter()
        .filter(|k| {
            let first = value(&all[0], k);
            all.iter().any(|s| value(s, k) != first)
        })
        .collect();
    all.iter()
        .map(|s| {
            differing
                .iter()
                .map(|k| ((*k).clone(), value(s, k).unwrap_or_else(|| "unset".into())))
                .collect()
        })
        .collect()
}

fn server_description(meta: &RunMetadata) -> String {
    let t = &meta.target;
    match t.kind.as_str() {
        "simulator" => format!(
            "servebench sim {} ({} clock)",
            t.sim_spec.as_deref().unwrap_or(""),
            t.clock.as_deref().unwrap_or("real")
        )
        .replace("  ", " "),
        _ => {
            let url = t
                .base_url
                .as_deref()
                .unwrap_or("an OpenAI-compatible server");
            let model = t
                .first_served_model()
                .or_else(|| (!meta.model_id.is_empty()).then_some(meta.model_id.as_str()));
            match model {
                Some(m) => format!("{url} serving {m}"),
                None => url.to_owned(),
            }
        }
    }
}

fn versions(
    environment: Option<&EnvironmentFile>,
    meta: Option<&RunMetadata>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(env) = environment.filter(|e| !e.servebench_version.is_empty()) {
        out.push((
            "servebench (measured)".into(),
            env.servebench_version.clone(),
        ));
    }
    if let Some(meta) = meta {
        let t = &meta.target;
        if let Some(v) = t.server_version_text() {
            let engine = t
                .sim_config
                .as_ref()
                .and_then(|c| c.engine.as_deref())
                .unwrap_or("server");
            out.push((engine.to_owned(), v.to_owned()));
        }
        if !meta.tokenizer.is_empty() {
            out.push(("tokenizer".into(), meta.tokenizer.clone()));
        }
    }
    out
}

fn workload_description(groups: &[&GroupView<'_>], view: &ExperimentView<'_>) -> String {
    let figures: Vec<RowFigures> = groups
        .iter()
        .filter_map(|g| RowFigures::from_group(g))
        .collect();
    let Some(f) = figures.first() else {
        return "no completed requests".into();
    };
    let mut text = format!(
        "{} prompt and {} output tokens per request (measured means)",
        format_quantity(f.mean_input_tokens.round(), ""),
        format_quantity(f.mean_output_tokens.round(), "")
    );
    if f.planned.shared_prefix_tokens > 0 {
        text.push_str(&format!(
            ", a shared {}-token prefix",
            f.planned.shared_prefix_tokens
        ));
    }
    match &view.sweep {
        Some(s) => {
            let loads: Vec<String> = s
                .points
                .iter()
                .map(|p| describe_load(&s.variable, p.load))
                .collect();
            text.push_str(&format!(
                "; row {} swept over {}: {}",
                s.row,
                s.variable,
                loads.join(", ")
            ));
        }
        None if figures.len() > 1 => {
            text = format!(
                "{} workload rows: {}",
                figures.len(),
                figures
                    .iter()
                    .map(|f| format!(
                        "{} ({}/{} tokens)",
                        f.label,
                        format_quantity(f.mean_input_tokens.round(), ""),
                        format_quantity(f.mean_output_tokens.round(), "")
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        None => {}
    }
    text
}

fn stop_reason(view: &ExperimentView<'_>, points: &[PointEval]) -> String {
    match &view.sweep {
        Some(s) => match (&s.stop_reason, s.stopped_early) {
            (Some(r), _) if !r.trim().is_empty() => r.clone(),
            (_, true) => "the sweep stopped early (no reason recorded)".into(),
            (_, false) => format!("the sweep ran all {} planned loads", s.points.len()),
        },
        None => format!(
            "a {} runs every row ({} measured); nothing stops it early",
            view.kind,
            points.len()
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_settings_that_differ_tell_candidates_apart() {
        let settings = |v| sim_settings(&serde_json::from_value::<SimConfig>(v).unwrap());
        let a = settings(
            json!({"gpu": "h100", "max_num_seqs": 8, "derived": {"x": 1}, "efficiency": {"mbu": 0.78}}),
        );
        let b = settings(
            json!({"gpu": "h100", "max_num_seqs": 256, "derived": {"x": 2}, "efficiency": {"mbu": 0.78}}),
        );
        assert!(a.contains(&("efficiency.mbu".into(), "0.78".into())));
        assert!(!a.iter().any(|(k, _)| k.starts_with("derived")));
        let d = distinguishing_settings(&[a, b]);
        assert_eq!(d[0], vec![("max_num_seqs".to_string(), "8".to_string())]);
        assert_eq!(d[1], vec![("max_num_seqs".to_string(), "256".to_string())]);
        assert_eq!(distinguishing_settings(&[Vec::new()]), vec![Vec::new()]);
    }

    fn candidate(layout: Option<(u32, bool)>) -> CandidateEval {
        CandidateEval {
            dir: "d".into(),
            title: "t".into(),
            kind: "sweep".into(),
            label: "l".into(),
            distinguishing: Vec::new(),
            server: String::new(),
            versions: Vec::new(),
            workload: String::new(),
            sweep_variable: None,
            points: Vec::new(),
            meets: false,
            operating: None,
            score: None,
            stop_reason: String::new(),
            verdict: Verdict::FailsContract,
            reason: String::new(),
            layout: layout.map(|(gpus, fleet)| Layout {
                description: "x".into(),
                gpus,
                fleet,
            }),
        }
    }

    #[test]
    fn fleet_layouts_of_different_gpu_counts_are_compared_per_gpu() {
        let (per_gpu, note) = gpu_basis(&[
            candidate(Some((4, true))),
            candidate(Some((5, true))),
            candidate(Some((8, true))),
        ]);
        assert!(per_gpu);
        assert_eq!(
            note.as_deref(),
            Some("comparing 4 GPUs with 5 and 8: per-GPU figures are used")
        );
        let (per_gpu, note) = gpu_basis(&[candidate(Some((4, true))), candidate(Some((5, true)))]);
        assert!(per_gpu);
        assert_eq!(
            note.as_deref(),
            Some("comparing 4 GPUs with 5: per-GPU figures are used")
        );
        let (per_gpu, note) = gpu_basis(&[candidate(Some((4, true))), candidate(Some((4, true)))]);
        assert!(!per_gpu);
        assert_eq!(
            note.as_deref(),
            Some("every layout has 4 GPUs: totals are compared")
        );
        // A server of unknown size: totals, said so.
        let (per_gpu, note) = gpu_basis(&[candidate(Some((4, true))), candidate(None)]);
        assert!(!per_gpu && note.unwrap().contains("unknown GPU count"));
        // No fleet at all: nothing changes (single engines of different TP stay totals).
        assert_eq!(
            gpu_basis(&[candidate(Some((1, false))), candidate(Some((2, false)))]),
            (false, None)
        );
    }

    #[test]
    fn a_percentile_exactly_at_the_threshold_meets_it() {
        let slo = crate::frontier::parse_slos("ttft:p99:500").unwrap()[0];
        assert!(slo.admits(500.0) && !slo.admits(500.5));
        let at = SloCheck {
            slo,
            measured_ms: Some(500.0),
            met: slo.admits(500.0),
        };
        assert_eq!(at.describe(), "p99 TTFT 500 ms ≤ 500 ms");
    }

    #[test]
    fn objectives_describe_themselves_with_figures() {
        let slo = crate::frontier::parse_slos("ttft:p99:500").unwrap()[0];
        let miss = SloCheck {
            slo,
            measured_ms: Some(612.0),
            met: false,
        };
        assert_eq!(miss.describe(), "p99 TTFT 612 ms ≥ 500 ms");
        let none = SloCheck {
            slo,
            measured_ms: None,
            met: false,
        };
        assert_eq!(none.describe(), "p99 TTFT unmeasured (needs < 500 ms)");
    }
}
