//! Held-out accuracy: leave one source out (docs/simulator.md §12.3).
//!
//! The factors fitted on published points are hand-chosen constants, each fitted on one source
//! (`crates/sim/fidelity/fitted_factors.toml`), not the output of a fit routine. Leaving a
//! source out therefore means: predict its points with every factor fitted on it replaced by
//! the value it would have without that source (its `held_out` value), and every other factor
//! as it is. Because each factor comes from exactly one source, "refit on the others" changes
//! only the left-out source's own factors, so this is the leave-one-source-out prediction.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use clap::ValueEnum;
use serde::{Deserialize, Serialize};
use servebench_roofline::{Catalog, GpuSpec};

use super::{fidelity_catalog, run_point_with, Fixture, PointOutcome};
use crate::engine_profile::{EngineKind, EngineProfile, ProfileFactors};
use crate::{SimArgs, SimError};

/// The built-in list of fitted factors.
pub const FITTED_FACTORS: &str = include_str!("../../fidelity/fitted_factors.toml");
/// Markers in a document between which the accuracy table is written.
pub const ACCURACY_BEGIN: &str = "<!-- fidelity-accuracy:begin -->";
pub const ACCURACY_END: &str = "<!-- fidelity-accuracy:end -->";
/// The committed baseline of held-out errors, relative to the repository root.
pub const BASELINE_PATH: &str = "crates/sim/tests/fixtures/fidelity_heldout_baseline.json";
/// The command that rewrites the baseline (run from the repository root).
pub const BASELINE_COMMAND: &str = "servebench sim fidelity --write-baseline";
/// Schema tag of the baseline file.
pub const BASELINE_SCHEMA: &str = "servebench.fidelity-heldout-baseline/v1";
/// How far, in percentage points, the overall held-out MAPE may rise over the baseline.
pub const OVERALL_RISE_PP: f64 = 0.5;
/// How far, in percentage points, one source's held-out MAPE may rise over the baseline.
pub const SOURCE_RISE_PP: f64 = 2.0;

/// GPU fields a factor may name, and whether the field is optional (may be held out unset).
const GPU_FIELDS: [(&str, bool); 6] = [
    ("mfu_bf16", false),
    ("mfu_fp8", true),
    ("mbu", false),
    ("mbu_kv", true),
    ("link_gbps", false),
    ("allreduce_step_us", true),
];
/// Engine-profile fields a factor may name, and whether the field is optional.
const ENGINE_FIELDS: [(&str, bool); 2] = [("fp8_mfu_scale", false), ("mbu_kv", true)];

/// One factor fitted on published points.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FittedFactor {
    /// The source whose points it was fitted on.
    pub source: String,
    /// A catalog GPU id: the factor is a field of that GPU.
    pub gpu: Option<String>,
    /// An engine (`trtllm`, ...): the factor is a field of its profile.
    pub engine: Option<String>,
    pub field: String,
    /// The value in force.
    pub fitted: f64,
    /// The value without its source; absent = the field unset (the layer below supplies it).
    pub held_out: Option<f64>,
    /// Where the held-out value comes from.
    pub held_out_is: String,
    /// Where the fitted value lives.
    pub defined_in: String,
}

/// What a factor is a field of.
#[derive(Debug, Clone, PartialEq)]
enum Target {
    Gpu(String),
    Engine(EngineKind),
}

impl FittedFactor {
    fn target(&self) -> Result<Target, SimError> {
        match (&self.gpu, &self.engine) {
            (Some(gpu), None) => Ok(Target::Gpu(gpu.clone())),
            (None, Some(engine)) => EngineKind::from_str(engine, true)
                .map(Target::Engine)
                .map_err(|_| {
                    SimError::Config(format!(
                        "fitted factor '{}': engine '{engine}' is not vllm, sglang or trtllm",
                        self.name()
                    ))
                }),
            _ => Err(SimError::Config(format!(
                "fitted factor of source '{}' field '{}': give exactly one of gpu or engine",
                self.source, self.field
            ))),
        }
    }

    /// `gpu rtx-4090 mbu`, `engine trtllm fp8_mfu_scale`.
    pub fn name(&self) -> String {
        match (&self.gpu, &self.engine) {
            (Some(gpu), _) => format!("gpu {gpu} {}", self.field),
            (_, Some(engine)) => format!("engine {engine} {}", self.field),
            _ => format!("? {}", self.field),
        }
    }

    /// `0.86 → 0.72`, `0.90 → unset`.
    pub fn change(&self) -> String {
        let held = self
            .held_out
            .map_or("unset".to_string(), |v| format!("{v}"));
        format!("{} → {held}", self.fitted)
    }
}

/// The whole list.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FittedFactors {
    #[serde(rename = "factor", default)]
    pub factors: Vec<FittedFactor>,
}

impl FittedFactors {
    /// The built-in list.
    pub fn builtin() -> Result<FittedFactors, SimError> {
        FittedFactors::parse(FITTED_FACTORS, "the built-in fitted factors")
    }

    /// Parses and checks a list; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<FittedFactors, SimError> {
        let list: FittedFactors =
            toml::from_str(text).map_err(|e| SimError::Config(format!("in {origin}: {e}")))?;
        let mut seen = BTreeSet::new();
        for f in &list.factors {
            let bad = |what: String| SimError::Config(format!("in {origin}, {}: {what}", f.name()));
            let fields: &[(&str, bool)] = match f.target()? {
                Target::Gpu(_) => &GPU_FIELDS,
                Target::Engine(_) => &ENGINE_FIELDS,
            };
            let Some(&(_, optional)) = fields.iter().find(|(n, _)| *n == f.field) else {
                let names: Vec<&str> = fields.iter().map(|(n, _)| *n).collect();
                return Err(bad(format!("field must be one of {}", names.join(", "))));
            };
            if f.held_out.is_none() && !optional {
                return Err(bad("this field cannot be unset: give held_out".into()));
            }
            for v in std::iter::once(f.fitted).chain(f.held_out) {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(bad(format!("values must be finite and ≥ 0, got {v}")));
                }
            }
            // One factor, one source: a second entry for the same field would be a factor
            // fitted on two sources, which has no single held-out value (module docs).
            if !seen.insert(f.name()) {
                return Err(bad("listed twice".into()));
            }
        }
        Ok(list)
    }

    /// The factors fitted on `source`.
    pub fn of_source<'a>(&'a self, source: &'a str) -> impl Iterator<Item = &'a FittedFactor> {
        self.factors.iter().filter(move |f| f.source == source)
    }
}

/// A GPU field's value.
fn gpu_field(gpu: &GpuSpec, field: &str) -> Option<f64> {
    match field {
        "mfu_bf16" => Some(gpu.mfu_bf16),
        "mfu_fp8" => gpu.mfu_fp8,
        "mbu" => Some(gpu.mbu),
        "mbu_kv" => gpu.mbu_kv,
        "link_gbps" => Some(gpu.link_gbps),
        "allreduce_step_us" => gpu.allreduce_step_us,
        _ => None,
    }
}

/// Sets a GPU field (`parse` has checked the name and that required fields get a value).
fn set_gpu_field(gpu: &mut GpuSpec, field: &str, value: Option<f64>) {
    match (field, value) {
        ("mfu_bf16", Some(v)) => gpu.mfu_bf16 = v,
        ("mfu_fp8", v) => gpu.mfu_fp8 = v,
        ("mbu", Some(v)) => gpu.mbu = v,
        ("mbu_kv", v) => gpu.mbu_kv = v,
        ("link_gbps", Some(v)) => gpu.link_gbps = v,
        ("allreduce_step_us", v) => gpu.allreduce_step_us = v,
        _ => {}
    }
}

/// An engine profile field's value.
fn engine_field(profile: &EngineProfile, field: &str) -> Option<f64> {
    match field {
        "fp8_mfu_scale" => Some(profile.fp8_mfu_scale),
        "mbu_kv" => profile.mbu_kv,
        _ => None,
    }
}

/// The value a factor's field carries now: in `catalog` for a GPU, in the profile for an
/// engine (`None` when unset, or when the GPU is not in the catalog).
pub fn live_value(factor: &FittedFactor, catalog: &Catalog) -> Result<Option<f64>, SimError> {
    Ok(match factor.target()? {
        Target::Gpu(id) => catalog
            .gpu(&id)
            .ok()
            .and_then(|g| gpu_field(g, &factor.field)),
        Target::Engine(kind) => engine_field(&EngineProfile::of(kind, 1), &factor.field),
    })
}

/// The catalog and engine factors a source is predicted with when it is left out.
pub struct HeldOutSetup {
    pub catalog: Catalog,
    pub engine_factors: Vec<(EngineKind, ProfileFactors)>,
}

/// `catalog` and the profiles with every factor fitted on `source` at its held-out value.
pub fn held_out_setup(
    factors: &FittedFactors,
    source: &str,
    catalog: &Catalog,
) -> Result<HeldOutSetup, SimError> {
    let mut catalog = catalog.clone();
    let mut engine_factors: Vec<(EngineKind, ProfileFactors)> = Vec::new();
    for f in factors.of_source(source) {
        match f.target()? {
            Target::Gpu(id) => {
                // A GPU the catalog lacks cannot be used by the source's points either.
                let Ok(gpu) = catalog.gpu(&id) else { continue };
                let mut gpu = gpu.clone();
                set_gpu_field(&mut gpu, &f.field, f.held_out);
                catalog.insert_gpu(gpu);
            }
            Target::Engine(kind) => {
                let i = match engine_factors.iter().position(|(k, _)| *k == kind) {
                    Some(i) => i,
                    None => {
                        engine_factors.push((kind, ProfileFactors::default()));
                        engine_factors.len() - 1
                    }
                };
                let pf = &mut engine_factors[i].1;
                match f.field.as_str() {
                    "fp8_mfu_scale" => pf.fp8_mfu_scale = f.held_out,
                    "mbu_kv" => pf.mbu_kv = Some(f.held_out),
                    _ => {}
                }
            }
        }
    }
    Ok(HeldOutSetup {
        catalog,
        engine_factors,
    })
}

/// Error counts of a set of figures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Accuracy {
    pub figures: usize,
    /// Mean absolute relative error, percent.
    pub mape_pct: f64,
    pub within_10pct: usize,
    pub within_25pct: usize,
}

impl Accuracy {
    /// From relative errors (signed fractions).
    pub fn of(errors: impl IntoIterator<Item = f64>) -> Accuracy {
        let abs: Vec<f64> = errors.into_iter().map(f64::abs).collect();
        let n = abs.len();
        Accuracy {
            figures: n,
            mape_pct: if n == 0 {
                0.0
            } else {
                abs.iter().sum::<f64>() / n as f64 * 100.0
            },
            within_10pct: abs.iter().filter(|&&e| e <= 0.10).count(),
            within_25pct: abs.iter().filter(|&&e| e <= 0.25).count(),
        }
    }

    fn of_outcomes<'a>(outcomes: impl IntoIterator<Item = &'a PointOutcome>) -> Accuracy {
        Accuracy::of(
            outcomes
                .into_iter()
                .flat_map(|o| o.comparisons.iter().map(|c| c.error())),
        )
    }
}

/// One source's errors in sample and held out.
#[derive(Debug, Clone, Serialize)]
pub struct SourceAccuracy {
    pub source: String,
    pub in_sample: Accuracy,
    pub held_out: Accuracy,
    /// The factors reverted to predict it (`name: fitted → held out`).
    pub reverted: Vec<String>,
}

/// A fitted factor and the sources whose points use it.
#[derive(Debug, Clone, Serialize)]
pub struct FactorUse {
    pub factor: String,
    pub fitted_on: String,
    pub fitted: f64,
    pub held_out: Option<f64>,
    pub held_out_is: String,
    /// Sources other than its own with a point on its GPU or engine: only those check the
    /// fitted value out of sample.
    pub also_used_by: Vec<String>,
}

/// In-sample and held-out outcomes of every point.
#[derive(Debug, Clone)]
pub struct Loso {
    pub in_sample: Vec<PointOutcome>,
    /// Same order as `in_sample`.
    pub held_out: Vec<PointOutcome>,
    pub sources: Vec<SourceAccuracy>,
    pub overall_in_sample: Accuracy,
    pub overall_held_out: Accuracy,
    pub factors: Vec<FactorUse>,
}

/// Runs every point in sample and, per source, held out.
pub fn run_loso(fixture: &Fixture, factors: &FittedFactors) -> Result<Loso, SimError> {
    let catalog = fidelity_catalog()?;
    let in_sample_setup = HeldOutSetup {
        catalog: catalog.clone(),
        engine_factors: Vec::new(),
    };
    // Every point once with every factor in force, then the points of each source that has
    // factors of its own with those reverted. A source with none is predicted by exactly its
    // in-sample run (the simulator is deterministic), so it is not run twice.
    let mut setups = vec![in_sample_setup];
    let mut jobs: Vec<(usize, usize)> = (0..fixture.points.len()).map(|i| (i, 0)).collect();
    let mut held_out_job = vec![None; fixture.points.len()];
    let mut sources = Vec::new();
    for source in &fixture.sources {
        let reverted: Vec<String> = factors
            .of_source(&source.id)
            .map(|f| format!("{}: {}", f.name(), f.change()))
            .collect();
        if !reverted.is_empty() {
            setups.push(held_out_setup(factors, &source.id, &catalog)?);
            for (i, p) in fixture.points.iter().enumerate() {
                if p.source == source.id {
                    held_out_job[i] = Some(jobs.len());
                    jobs.push((i, setups.len() - 1));
                }
            }
        }
        sources.push((source.id.clone(), reverted));
    }
    let mut results = run_jobs(fixture, &setups, &jobs)?;
    let held_out: Vec<PointOutcome> = held_out_job
        .iter()
        .enumerate()
        .map(|(i, job)| results[job.unwrap_or(i)].clone())
        .collect();
    results.truncate(fixture.points.len());
    let in_sample = results;
    let sources = sources
        .into_iter()
        .map(|(source, reverted)| {
            let of =
                |v: &[PointOutcome]| Accuracy::of_outcomes(v.iter().filter(|o| o.source == source));
            SourceAccuracy {
                in_sample: of(&in_sample),
                held_out: of(&held_out),
                source,
                reverted,
            }
        })
        .collect();
    let factors = factor_uses(fixture, factors, &catalog)?;
    Ok(Loso {
        overall_in_sample: Accuracy::of_outcomes(&in_sample),
        overall_held_out: Accuracy::of_outcomes(&held_out),
        in_sample,
        held_out,
        sources,
        factors,
    })
}

/// Runs `(point, setup)` jobs on every available core (each point is an independent,
/// single-threaded virtual-time run, and the held-out pass doubles the work), results in job
/// order.
fn run_jobs(
    fixture: &Fixture,
    setups: &[HeldOutSetup],
    jobs: &[(usize, usize)],
) -> Result<Vec<PointOutcome>, SimError> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<PointOutcome, SimError>>>> =
        Mutex::new(jobs.iter().map(|_| None).collect());
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(jobs.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let j = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(point, setup)) = jobs.get(j) else {
                    break;
                };
                let setup = &setups[setup];
                let outcome = run_point_with(
                    &fixture.points[point],
                    &setup.catalog,
                    &setup.engine_factors,
                );
                if let Ok(mut r) = results.lock() {
                    r[j] = Some(outcome);
                }
            });
        }
    });
    results
        .into_inner()
        .map_err(|_| SimError::Config("a fidelity worker panicked".into()))?
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(SimError::Config("a fidelity run did not finish".into()))))
        .collect()
}

/// Which sources' points use each factor's GPU or engine.
fn factor_uses(
    fixture: &Fixture,
    factors: &FittedFactors,
    catalog: &Catalog,
) -> Result<Vec<FactorUse>, SimError> {
    let mut users: Vec<(Target, String)> = Vec::new();
    for p in &fixture.points {
        let args = SimArgs::parse_spec(&p.sim)?;
        if args.gpu_spec.is_none() {
            if let Ok(gpu) = catalog.gpu(&args.gpu) {
                users.push((Target::Gpu(gpu.id.clone()), p.source.clone()));
            }
        }
        if let Some(kind) = args.engine {
            users.push((Target::Engine(kind), p.source.clone()));
        }
    }
    factors
        .factors
        .iter()
        .map(|f| {
            let target = f.target()?;
            let also_used_by: BTreeSet<String> = users
                .iter()
                .filter(|(t, s)| *t == target && *s != f.source)
                .map(|(_, s)| s.clone())
                .collect();
            Ok(FactorUse {
                factor: f.name(),
                fitted_on: f.source.clone(),
                fitted: f.fitted,
                held_out: f.held_out,
                held_out_is: f.held_out_is.clone(),
                also_used_by: also_used_by.into_iter().collect(),
            })
        })
        .collect()
}

fn pct(v: f64) -> String {
    format!("{v:.1} %")
}

impl Loso {
    /// The accuracy table (per source and overall) and the factor table, in Markdown.
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| source | figures | in-sample MAPE | held-out MAPE | in-sample within ±10 % / ±25 % | held-out within ±10 % / ±25 % | factors reverted when held out |\n\
             |---|---:|---:|---:|---:|---:|---|\n",
        );
        let row = |name: &str, i: &Accuracy, h: &Accuracy, reverted: &str| {
            format!(
                "| {name} | {} | {} | {} | {} / {} | {} / {} | {reverted} |\n",
                i.figures,
                pct(i.mape_pct),
                pct(h.mape_pct),
                i.within_10pct,
                i.within_25pct,
                h.within_10pct,
                h.within_25pct,
            )
        };
        for s in &self.sources {
            let reverted = if s.reverted.is_empty() {
                "none (nothing fitted on it)".to_string()
            } else {
                s.reverted.join("; ")
            };
            out.push_str(&row(&s.source, &s.in_sample, &s.held_out, &reverted));
        }
        out.push_str(&row(
            "**all**",
            &self.overall_in_sample,
            &self.overall_held_out,
            "",
        ));
        if !self.factors.is_empty() {
            out.push_str(
                "\n| fitted factor | fitted on | fitted | held out | held-out value is | other sources using it |\n\
                 |---|---|---:|---:|---|---|\n",
            );
            for f in &self.factors {
                let users = if f.also_used_by.is_empty() {
                    "none: per-source, not validated out of sample".to_string()
                } else {
                    f.also_used_by.join(", ")
                };
                out.push_str(&format!(
                    "| {} | {} | {} | {} | {} | {users} |\n",
                    f.factor,
                    f.fitted_on,
                    f.fitted,
                    f.held_out.map_or("unset".to_string(), |v| v.to_string()),
                    f.held_out_is,
                ));
            }
        }
        out
    }

    /// Everything as JSON: every figure in sample and held out, per source, overall, factors.
    pub fn to_json(&self) -> serde_json::Value {
        let figures: Vec<serde_json::Value> = self
            .in_sample
            .iter()
            .zip(&self.held_out)
            .flat_map(|(i, h)| {
                i.comparisons.iter().map(move |ci| {
                    // Matched by metric: a held-out run may lack a figure the in-sample one has
                    // (null then), so the two lists need not line up.
                    let ch = h.comparisons.iter().find(|c| c.metric == ci.metric);
                    serde_json::json!({
                        "point": i.id,
                        "source": i.source,
                        "engine": i.engine,
                        "metric": ci.metric,
                        "published": ci.published,
                        "in_sample": ci.simulated,
                        "in_sample_error": ci.error(),
                        "held_out": ch.map(|c| c.simulated),
                        "held_out_error": ch.map(|c| c.error()),
                        "tolerance": ci.tolerance,
                    })
                })
            })
            .collect();
        serde_json::json!({
            "schema": "servebench.fidelity/v1",
            "figures": figures,
            "sources": self.sources,
            "overall": { "in_sample": self.overall_in_sample, "held_out": self.overall_held_out },
            "fitted_factors": self.factors,
        })
    }

    /// The baseline of held-out errors this run gives.
    pub fn baseline(&self) -> Baseline {
        let entry = |i: &Accuracy, h: &Accuracy| BaselineEntry {
            figures: h.figures,
            held_out_mape_pct: h.mape_pct,
            in_sample_mape_pct: i.mape_pct,
        };
        Baseline {
            schema: BASELINE_SCHEMA.to_string(),
            command: BASELINE_COMMAND.to_string(),
            overall: entry(&self.overall_in_sample, &self.overall_held_out),
            sources: self
                .sources
                .iter()
                .map(|s| (s.source.clone(), entry(&s.in_sample, &s.held_out)))
                .collect(),
        }
    }
}

/// Held-out errors committed as the bar later changes must not fall below.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Baseline {
    pub schema: String,
    /// How it was written.
    pub command: String,
    pub overall: BaselineEntry,
    pub sources: BTreeMap<String, BaselineEntry>,
}

/// One line of the baseline. The in-sample MAPE is informational: only held-out is gated.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaselineEntry {
    pub figures: usize,
    pub held_out_mape_pct: f64,
    pub in_sample_mape_pct: f64,
}

impl Baseline {
    /// Parses a baseline file's text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Baseline, SimError> {
        let b: Baseline = serde_json::from_str(text)
            .map_err(|e| SimError::Config(format!("in {origin}: {e}")))?;
        if b.schema != BASELINE_SCHEMA {
            return Err(SimError::Config(format!(
                "in {origin}: schema '{}', expected '{BASELINE_SCHEMA}'",
                b.schema
            )));
        }
        Ok(b)
    }

    /// Pretty JSON with a trailing newline.
    pub fn to_json_string(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_default();
        s.push('\n');
        s
    }
}

/// How a run compares with the baseline.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BaselineCheck {
    /// Held-out errors that rose beyond their allowance.
    pub rises: Vec<String>,
    /// Sources or figure counts that differ: the comparison does not apply until the baseline
    /// is regenerated.
    pub mismatches: Vec<String>,
    /// Held-out errors that fell by more than the allowance (the baseline could be tightened).
    pub falls: Vec<String>,
}

/// Compares `now` with `baseline`: the overall held-out MAPE may rise by at most
/// [`OVERALL_RISE_PP`] points, each source's by at most [`SOURCE_RISE_PP`].
pub fn check_baseline(now: &Baseline, baseline: &Baseline) -> BaselineCheck {
    let mut check = BaselineCheck::default();
    compare_entry(
        &mut check,
        "overall",
        &now.overall,
        &baseline.overall,
        OVERALL_RISE_PP,
    );
    for (source, entry) in &now.sources {
        match baseline.sources.get(source) {
            Some(then) => compare_entry(&mut check, source, entry, then, SOURCE_RISE_PP),
            None => check
                .mismatches
                .push(format!("{source}: not in the baseline")),
        }
    }
    for source in baseline.sources.keys() {
        if !now.sources.contains_key(source) {
            check
                .mismatches
                .push(format!("{source}: in the baseline, not in the fixture"));
        }
    }
    check
}

fn compare_entry(
    check: &mut BaselineCheck,
    name: &str,
    now: &BaselineEntry,
    then: &BaselineEntry,
    allowed: f64,
) {
    if now.figures != then.figures {
        check.mismatches.push(format!(
            "{name}: {} figures, the baseline has {}",
            now.figures, then.figures
        ));
        return;
    }
    let rise = now.held_out_mape_pct - then.held_out_mape_pct;
    let line = format!(
        "{name}: held-out MAPE {:.2} % against {:.2} % in the baseline ({rise:+.2} points, \
         {allowed} allowed); in-sample {:.2} % against {:.2} %",
        now.held_out_mape_pct,
        then.held_out_mape_pct,
        now.in_sample_mape_pct,
        then.in_sample_mape_pct
    );
    if rise > allowed {
        check.rises.push(line);
    } else if rise < -allowed {
        check.falls.push(line);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_factors_name_real_sources_and_hold_the_live_values() {
        let factors = FittedFactors::builtin().unwrap();
        let fixture = Fixture::builtin().unwrap();
        let catalog = fidelity_catalog().unwrap();
        assert!(!factors.factors.is_empty());
        for f in &factors.factors {
            assert!(
                fixture.sources.iter().any(|s| s.id == f.source),
                "{}: source '{}' is not in the fixture",
                f.name(),
                f.source
            );
            // A refit that changes the catalog or a profile must change this list too, or the
            // held-out prediction would revert a value that is no longer in force.
            assert_eq!(
                live_value(f, &catalog).unwrap(),
                Some(f.fitted),
                "{}: fitted_factors.toml says {}, the code carries another value ({})",
                f.name(),
                f.fitted,
                f.defined_in
            );
        }
    }

    #[test]
    fn a_held_out_setup_reverts_only_the_sources_own_factors() {
        let factors = FittedFactors::builtin().unwrap();
        let catalog = fidelity_catalog().unwrap();
        for f in &factors.factors {
            let setup = held_out_setup(&factors, &f.source, &catalog).unwrap();
            match f.target().unwrap() {
                Target::Gpu(_) => {
                    assert_eq!(
                        live_value(f, &setup.catalog).unwrap(),
                        f.held_out,
                        "{}",
                        f.name()
                    )
                }
                Target::Engine(kind) => {
                    let (_, pf) = setup
                        .engine_factors
                        .iter()
                        .find(|(k, _)| *k == kind)
                        .unwrap();
                    let profile = EngineProfile::of(kind, 1).with_factors(*pf);
                    assert_eq!(engine_field(&profile, &f.field), f.held_out, "{}", f.name());
                }
            }
            // Another source's setup leaves this factor as fitted.
            let other = factors
                .factors
                .iter()
                .find(|g| g.source != f.source)
                .unwrap();
            let setup = held_out_setup(&factors, &other.source, &catalog).unwrap();
            if let Target::Gpu(_) = f.target().unwrap() {
                assert_eq!(live_value(f, &setup.catalog).unwrap(), Some(f.fitted));
            }
        }
    }

    #[test]
    fn bad_factor_lists_are_refused() {
        let base = "[[factor]]\nsource = \"s\"\nfield = \"mbu\"\nfitted = 0.5\nheld_out_is = \"x\"\ndefined_in = \"y\"\n";
        let cases = [
            (
                format!("{base}gpu = \"h100\"\nheld_out = 0.4\nengine = \"trtllm\"\n"),
                "exactly one",
            ),
            (format!("{base}gpu = \"h100\"\n"), "cannot be unset"),
            (
                format!("{base}gpu = \"h100\"\nheld_out = 0.4\n").replace("\"mbu\"", "\"bogus\""),
                "field must be one of",
            ),
            (
                format!("{base}engine = \"tgi\"\nheld_out = 1.0\n"),
                "not vllm",
            ),
            (
                format!(
                    "{base}gpu = \"h100\"\nheld_out = 0.4\n{base}gpu = \"h100\"\nheld_out = 0.3\n"
                ),
                "listed twice",
            ),
        ];
        for (text, want) in cases {
            let err = FittedFactors::parse(&text, "f.toml")
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{want}: {err}");
        }
    }

    #[test]
    fn accuracy_counts_bands_and_means_absolute_errors() {
        let a = Accuracy::of([0.05, -0.10, 0.2, -0.5]);
        assert_eq!(a.figures, 4);
        assert!((a.mape_pct - 21.25).abs() < 1e-9, "{}", a.mape_pct);
        assert_eq!((a.within_10pct, a.within_25pct), (2, 3));
        assert_eq!(Accuracy::of([]).mape_pct, 0.0);
    }

    fn baseline(overall: f64, sources: &[(&str, usize, f64)]) -> Baseline {
        let entry = |figures, held: f64| BaselineEntry {
            figures,
            held_out_mape_pct: held,
            in_sample_mape_pct: held / 2.0,
        };
        Baseline {
            schema: BASELINE_SCHEMA.into(),
            command: BASELINE_COMMAND.into(),
            overall: entry(sources.iter().map(|s| s.1).sum(), overall),
            sources: sources
                .iter()
                .map(|&(s, n, h)| (s.to_string(), entry(n, h)))
                .collect(),
        }
    }

    #[test]
    fn the_baseline_gate_allows_half_a_point_overall_and_two_per_source() {
        let then = baseline(10.0, &[("a", 3, 10.0), ("b", 2, 10.0)]);
        let ok = check_baseline(&baseline(10.4, &[("a", 3, 11.9), ("b", 2, 8.5)]), &then);
        assert!(ok.rises.is_empty() && ok.mismatches.is_empty(), "{ok:?}");
        let worse = check_baseline(&baseline(10.6, &[("a", 3, 12.1), ("b", 2, 10.0)]), &then);
        assert_eq!(worse.rises.len(), 2, "{worse:?}");
        assert!(worse.rises[0].starts_with("overall") && worse.rises[1].starts_with("a:"));
        let better = check_baseline(&baseline(7.0, &[("a", 3, 4.0), ("b", 2, 10.0)]), &then);
        assert!(
            better.rises.is_empty() && better.falls.len() == 2,
            "{better:?}"
        );
        let changed = check_baseline(&baseline(10.0, &[("a", 4, 10.0), ("c", 2, 1.0)]), &then);
        assert_eq!(changed.mismatches.len(), 4, "{changed:?}");
    }

    #[test]
    fn a_baseline_round_trips_and_checks_its_schema() {
        let b = baseline(10.0, &[("a", 3, 10.0)]);
        let text = b.to_json_string();
        assert_eq!(Baseline::parse(&text, "b.json").unwrap(), b);
        let other = text.replace(BASELINE_SCHEMA, "something/v0");
        assert!(Baseline::parse(&other, "b.json")
            .unwrap_err()
            .to_string()
            .contains("b.json"));
    }

    #[test]
    fn the_table_goes_between_the_accuracy_markers() {
        let doc = format!("a\n{ACCURACY_BEGIN}\nold\n{ACCURACY_END}\nb\n");
        let out =
            super::super::replace_between(&doc, "new\n", ACCURACY_BEGIN, ACCURACY_END).unwrap();
        assert_eq!(
            out,
            format!("a\n{ACCURACY_BEGIN}\nnew\n{ACCURACY_END}\nb\n")
        );
    }
}
