//! One experiment's diagnosis: the groups' figures, the bandwidth check per group and every
//! rule's findings.

use serde::Serialize;
use servebench_roofline::Deployment;

use crate::bandwidth::{bandwidth_check, BandwidthCheck};
use crate::figures::RowFigures;
use crate::rules::{self, Finding, RuleCheck};
use crate::view::ExperimentView;

/// The GPU and model the predictions are for, and where that came from.
#[derive(Debug, Clone)]
pub struct KnownTarget {
    /// The deployment.
    pub deployment: Deployment,
    /// `the simulator's configuration` or `--gpu h100 --model-preset llama-3.1-8b`.
    pub source: String,
}

/// The diagnosis of one experiment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnosis {
    /// The experiment's title.
    pub title: String,
    /// `matrix`, `sweep` or `single`.
    pub kind: String,
    /// Numbers from a shortened run.
    pub quick: bool,
    /// The figures of every group, in order.
    pub rows: Vec<RowFigures>,
    /// Findings, most consequential first.
    pub findings: Vec<Finding>,
    /// What each rule examined.
    pub checks: Vec<RuleCheck>,
    /// Measured TPOT against the roofline, per group (empty without a known target).
    pub bandwidth: Vec<(String, BandwidthCheck)>,
    /// Where the predictions come from, or why there are none.
    pub target_note: String,
    /// Caveats.
    pub notes: Vec<String>,
}

/// Runs every rule over the experiment's groups.
pub fn diagnose(view: &ExperimentView<'_>, target: Option<&KnownTarget>) -> Diagnosis {
    let groups = view.groups();
    let mut notes = Vec::new();
    let mut rows = Vec::new();
    let mut records = Vec::new();
    for g in &groups {
        match RowFigures::from_group(g) {
            Some(f) => {
                rows.push(f);
                records.push(g.runs.iter().map(|r| r.records).collect::<Vec<_>>());
            }
            None => notes.push(format!(
                "{} completed no request and was left out of the diagnosis",
                g.label
            )),
        }
    }
    if view.quick {
        notes.push("quick run: few requests per row, so tail percentiles are rough and the confidence of every finding is lower than stated".into());
    }
    let deployment = target.map(|t| &t.deployment);
    let bandwidth: Vec<(String, BandwidthCheck)> = match deployment {
        Some(d) => rows
            .iter()
            .filter_map(|r| bandwidth_check(r, d).map(|c| (r.label.clone(), c)))
            .collect(),
        None => Vec::new(),
    };
    let target_note = match target {
        Some(t) => format!(
            "predictions for {} on {} (tp {}) from {}",
            t.deployment.model().id,
            t.deployment.gpu().id,
            t.deployment.tp(),
            t.source
        ),
        None => "no GPU and model known (not a simulator run, and no --gpu/--model-preset given): TPOT and throughput are not judged against the bandwidth prediction".into(),
    };
    let ctx = rules::Ctx {
        rows: &rows,
        records: &records,
        deployment,
    };
    let (findings, checks) = rules::run_all(&ctx);
    Diagnosis {
        title: view.title.clone(),
        kind: view.kind.clone(),
        quick: view.quick,
        rows,
        findings,
        checks,
        bandwidth,
        target_note,
        notes,
    }
}
