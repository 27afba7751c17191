//! `servebench sim calibrate RESULT...`: fits the simulator's cost-model factors to measured
//! runs and writes a calibration profile (docs/simulator.md "Calibrating to your deployment").

pub mod fit;
mod observe;
mod target;

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use servebench_roofline::{
    CalibrationFactors, CalibrationProfile, CalibrationTarget, Dtype, FitNotes, KvDtype,
    CALIBRATION_SCHEMA,
};

use fit::{Dataset, Factor, Factors, Fit, FitError, Metric};
use target::RunTarget;

/// Flags of `servebench sim calibrate`.
#[derive(Debug, Clone, Args)]
pub struct CalibrateArgs {
    /// Result files (*.servebench.json with their *.requests.jsonl), or directories holding
    /// them (a matrix's experiment directory).
    #[arg(value_name = "RESULT", required = true)]
    pub results: Vec<PathBuf>,
    /// Where to write the profile.
    #[arg(short, long, value_name = "FILE", default_value = "calibration.toml")]
    pub output: PathBuf,
    /// Runs kept out of the fit and predicted with the fitted factors (without it, each run is
    /// left out in turn when there are three or more).
    #[arg(long, value_name = "RESULT", num_args = 1..)]
    pub holdout: Vec<PathBuf>,
    /// Model (catalog id or Hugging Face name) of runs against a real server whose metadata
    /// does not name a catalog model.
    #[arg(long)]
    pub model: Option<String>,
    /// GPU (catalog id) of runs against a real server.
    #[arg(long)]
    pub gpu: Option<String>,
    /// Tensor-parallel degree of runs against a real server.
    #[arg(long, alias = "tensor-parallel-size")]
    pub tp: Option<u32>,
    /// Weight type of runs against a real server.
    #[arg(long)]
    pub dtype: Option<Dtype>,
    /// KV-cache type of runs against a real server.
    #[arg(long)]
    pub kv_cache_dtype: Option<KvDtype>,
    /// Step token budget of runs against a real server [default: by GPU class].
    #[arg(long)]
    pub max_num_batched_tokens: Option<u32>,
    /// A TOML catalog adding GPUs or models (e.g. a CPU described as a "GPU").
    #[arg(long, value_name = "FILE")]
    pub catalog: Option<PathBuf>,
    /// A Hugging Face config.json describing the model of runs against a real server.
    #[arg(long, value_name = "FILE")]
    pub hf_config: Option<PathBuf>,
    /// Factors kept at the catalog's value instead of fitted (repeatable): for an engine where
    /// no run can separate them, as the step overhead from the weight reads on a CPU.
    #[arg(long, value_name = "FACTOR", value_enum)]
    pub fixed: Vec<FixedFactor>,
}

/// A factor `--fixed` can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FixedFactor {
    Mfu,
    Mbu,
    StepOverhead,
    ReqOverhead,
}

impl From<FixedFactor> for Factor {
    fn from(f: FixedFactor) -> Factor {
        match f {
            FixedFactor::Mfu => Factor::Mfu,
            FixedFactor::Mbu => Factor::Mbu,
            FixedFactor::StepOverhead => Factor::StepOverhead,
            FixedFactor::ReqOverhead => Factor::ReqOverhead,
        }
    }
}

/// Runs `servebench sim calibrate`: fits, writes the profile, prints the report.
pub fn run(args: &CalibrateArgs) -> Result<ExitCode> {
    let text = calibrate(args)?;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("writing the calibration report")?;
    Ok(ExitCode::SUCCESS)
}

/// One loaded run, resolved and rebuilt.
struct Loaded {
    label: String,
    target: RunTarget,
}

/// Fits, writes the profile, and returns the report text.
pub fn calibrate(args: &CalibrateArgs) -> Result<String> {
    let fit_paths = expand(&args.results)?;
    let hold_paths = expand(&args.holdout)?;
    let mut loaded = Vec::new();
    for p in fit_paths.iter().chain(&hold_paths) {
        let run = crate::experiment::load_run(p, &p.display().to_string())?;
        if run.records.is_empty() {
            bail!(
                "{} has no per-request records (its *.requests.jsonl is missing): calibration fits per-request TTFT and inter-token gaps",
                p.display()
            );
        }
        let target = target::resolve(&run, args).with_context(|| format!("{}", p.display()))?;
        loaded.push((
            Loaded {
                label: p.display().to_string(),
                target,
            },
            run.records,
        ));
    }
    target::check_same(
        &loaded
            .iter()
            .map(|(l, _)| (l.label.as_str(), &l.target))
            .collect::<Vec<_>>(),
    )?;
    let Some((first, _)) = loaded.first() else {
        bail!("no result files given");
    };
    let deployment = first.target.deployment.clone();

    let mut data = Dataset::default();
    let mut notes = Vec::new();
    for (i, (l, records)) in loaded.iter().enumerate() {
        let rebuilt = observe::add_run(
            &mut data,
            i,
            records,
            &l.target.deployment,
            l.target.budget,
            l.target.tolerance_ns,
        );
        if rebuilt.requests == 0 {
            bail!("{} has no successful request with a first token", l.label);
        }
        if rebuilt.tokens_per_event > 1.2 {
            notes.push(format!(
                "{}: the server sent {:.1} tokens per event on average, so gaps span several steps and the fit is coarser",
                l.label, rebuilt.tokens_per_event
            ));
        }
    }
    let n_fit = fit_paths.len();
    let is_fit_run = |r: usize| r < n_fit;
    let fit_data = data.subset(is_fit_run);
    let start = start_factors(&deployment);
    let fixed: Vec<Factor> = args.fixed.iter().map(|&f| f.into()).collect();
    let fitted = fit::fit_holding(&fit_data, &start, &fixed)
        .map_err(|e| refusal(e, &fit_paths, &fit_data))?;

    for f in &fitted.at_bound {
        notes.push(format!(
            "{} ended at its bound 1.0: the runs ask for more than the catalog's peak, so it is a limit, not an estimate (check the GPU's peak in the catalog, or {})",
            f.name(),
            f.hint()
        ));
    }
    let mut out = String::new();
    let t = &first.target;
    let _ = writeln!(
        out,
        "Calibrating {} on {} (tp {}, {}) from {} run(s), {} observations",
        t.model_id,
        t.gpu_id,
        t.tp,
        t.dtype,
        n_fit,
        fit_data.observations.len()
    );
    let _ = writeln!(
        out,
        "\nFactor                               catalog     fitted   ± (rel. s.e.)"
    );
    for (i, f) in Factor::ALL.iter().enumerate() {
        let se = if fixed.contains(f) {
            "held (--fixed)".to_string()
        } else {
            format!("{:.1} %", fitted.relative_se[i] * 100.0)
        };
        let _ = writeln!(
            out,
            "{:<36} {:>9} {:>10}   {se}",
            f.name(),
            show(*f, start.values[i]),
            show(*f, fitted.factors.values[i]),
        );
    }
    let before = errors(&fit_data, &start);
    let after = errors(&fit_data, &fitted.factors);
    let _ = writeln!(
        out,
        "\nFit error (RMS relative, per observation)   before     after"
    );
    let _ = writeln!(
        out,
        "  TTFT                                     {:>6.1} %  {:>6.1} %",
        before.ttft * 100.0,
        after.ttft * 100.0
    );
    let _ = writeln!(
        out,
        "  inter-token gap                          {:>6.1} %  {:>6.1} %",
        before.itl * 100.0,
        after.itl * 100.0
    );
    let _ = writeln!(
        out,
        "\nPer run: mean TTFT and mean TPOT error   before     after"
    );
    for (i, p) in fit_paths.iter().enumerate() {
        let b = run_means(&fit_data, i, &start);
        let a = run_means(&fit_data, i, &fitted.factors);
        let _ = writeln!(out, "  {}", p.display());
        let _ = writeln!(
            out,
            "    mean TTFT                              {:>+6.1} %  {:>+6.1} %",
            b.ttft_error * 100.0,
            a.ttft_error * 100.0
        );
        let _ = writeln!(
            out,
            "    mean TPOT                              {:>+6.1} %  {:>+6.1} %",
            b.tpot_error * 100.0,
            a.tpot_error * 100.0
        );
    }

    // Hold-out: given runs, or each run left out in turn.
    let mut held: Vec<(String, RunMeans)> = Vec::new();
    if !hold_paths.is_empty() {
        for (k, p) in hold_paths.iter().enumerate() {
            let r = n_fit + k;
            let d = data.subset(|run| run == r);
            held.push((p.display().to_string(), run_means(&d, r, &fitted.factors)));
        }
    } else if n_fit >= 3 {
        for (r, p) in fit_paths.iter().enumerate() {
            let rest = data.subset(|run| run < n_fit && run != r);
            let label = p.display().to_string();
            match fit::fit_holding(&rest, &start, &fixed) {
                Ok(f) => {
                    let d = data.subset(|run| run == r);
                    held.push((label, run_means(&d, r, &f.factors)));
                }
                Err(_) => notes.push(format!(
                    "leave-one-out: without {label} the other runs do not identify every factor, so it has no hold-out figure"
                )),
            }
        }
    }
    if !held.is_empty() {
        let _ = writeln!(
            out,
            "\nHold-out ({}): mean TTFT and mean TPOT predicted vs measured",
            if hold_paths.is_empty() {
                "each run predicted from a fit on the others"
            } else {
                "--holdout runs predicted from the fit"
            }
        );
        for (label, m) in &held {
            let _ = writeln!(
                out,
                "  {label}\n    mean TTFT {:>+6.1} %   mean TPOT {:>+6.1} %",
                m.ttft_error * 100.0,
                m.tpot_error * 100.0
            );
        }
    }
    for n in &notes {
        let _ = writeln!(out, "\nnote: {n}");
    }

    let profile = profile(
        t,
        &deployment,
        &fitted,
        &fit_paths,
        fit_data.observations.len(),
        &before,
        &after,
    );
    let text = profile.to_toml_string()?;
    let header = "# servebench calibration profile (servebench sim calibrate); use with\n\
                  # servebench sim --calibration FILE, run --sim \"... --calibration FILE\", predict --calibration FILE\n";
    std::fs::write(&args.output, format!("{header}{text}"))
        .with_context(|| format!("writing {}", args.output.display()))?;
    let _ = writeln!(out, "\nWrote {}", args.output.display());
    Ok(out)
}

fn show(f: Factor, v: f64) -> String {
    match f {
        Factor::Mfu | Factor::Mbu => format!("{v:.3}"),
        Factor::StepOverhead | Factor::ReqOverhead => format!("{:.1} µs", v * 1e6),
    }
}

/// Why the fit was refused, in terms the user can act on: each factor the runs could not
/// identify, with the run that would identify it — or, when the runs already hold such a run
/// (steps of many requests for the request overhead), that the factor could not be separated
/// from the others, and `--fixed` to hold it.
fn refusal(e: FitError, paths: &[PathBuf], data: &fit::Dataset) -> anyhow::Error {
    let largest_batch = data
        .steps
        .iter()
        .map(|s| s.requests)
        .fold(0.0_f64, f64::max);
    match e {
        FitError::NoObservations => anyhow::anyhow!(
            "the results hold no usable observation (no successful streamed request)"
        ),
        FitError::Unidentified(list) => {
            let mut msg = format!(
                "refusing the fit: {} run(s) ({}) do not carry enough information to identify",
                paths.len(),
                paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            for (f, se) in list {
                let se = if se.is_finite() {
                    format!("relative s.e. {:.0} %", se * 100.0)
                } else {
                    "not determined at all".to_string()
                };
                let fixed = fixed_flag(f);
                let advice = match f {
                    // The run the hint asks for is already here: more of the same would not
                    // help; the factor moves together with the others in these runs.
                    Factor::ReqOverhead if largest_batch >= SATURATION_BATCH => format!(
                        "the runs already hold steps of up to {largest_batch:.0} requests, yet the per-request time could not be told apart from the per-step time and the bandwidth (in these runs they grow together); hold it at the catalog's value with `--fixed {fixed}`, or add a run at a clearly different concurrency"
                    ),
                    _ => format!(
                        "{}; or hold it at the catalog's value with `--fixed {fixed}`",
                        f.hint()
                    ),
                };
                let _ = write!(msg, "\n  - {} ({se}): {advice}", f.name());
            }
            anyhow::anyhow!(msg)
        }
    }
}

/// Requests per step from which a run is a saturation run, as [`Factor::hint`] asks for.
const SATURATION_BATCH: f64 = 32.0;

/// The `--fixed` value that holds `f`.
fn fixed_flag(f: Factor) -> &'static str {
    match f {
        Factor::Mfu => "mfu",
        Factor::Mbu => "mbu",
        Factor::StepOverhead => "step-overhead",
        Factor::ReqOverhead => "req-overhead",
    }
}

/// The deployment's current factors: where the fit starts, and the "before" of the report.
fn start_factors(d: &servebench_roofline::Deployment) -> Factors {
    Factors {
        values: [
            d.mfu_in_effect(),
            d.efficiency().mbu,
            d.t_ovh(),
            d.overheads().req_overhead_us * 1e-6,
        ],
        softroof_p: d.efficiency().softroof_p,
    }
}

/// RMS relative errors by metric.
pub struct Errors {
    pub ttft: f64,
    pub itl: f64,
}

fn errors(data: &Dataset, f: &Factors) -> Errors {
    let rms = |m: Metric| {
        let (mut s, mut w) = (0.0, 0.0);
        for o in data.observations.iter().filter(|o| o.metric == m) {
            let r = data.predict(o, f) / o.observed - 1.0;
            s += o.weight * r * r;
            w += o.weight;
        }
        if w > 0.0 {
            (s / w).sqrt()
        } else {
            0.0
        }
    };
    Errors {
        ttft: rms(Metric::Ttft),
        itl: rms(Metric::Itl),
    }
}

/// A run's mean TTFT and mean TPOT, predicted against measured (relative errors).
#[derive(Debug, Clone, Copy)]
pub struct RunMeans {
    pub ttft_error: f64,
    pub tpot_error: f64,
}

fn run_means(data: &Dataset, run: usize, f: &Factors) -> RunMeans {
    use std::collections::BTreeMap;
    let (mut ttft_obs, mut ttft_pred, mut n_ttft) = (0.0, 0.0, 0usize);
    // Per request: (observed sum of gaps, predicted sum, gaps).
    let mut gaps: BTreeMap<usize, (f64, f64, usize)> = BTreeMap::new();
    for o in data.observations.iter().filter(|o| o.run == run) {
        let p = data.predict(o, f);
        match o.metric {
            Metric::Ttft => {
                ttft_obs += o.observed;
                ttft_pred += p;
                n_ttft += 1;
            }
            Metric::Itl => {
                let e = gaps.entry(o.request).or_insert((0.0, 0.0, 0));
                e.0 += o.observed;
                e.1 += p;
                e.2 += 1;
            }
        }
    }
    let rel = |pred: f64, obs: f64| if obs > 0.0 { pred / obs - 1.0 } else { 0.0 };
    let (mut tpot_obs, mut tpot_pred) = (0.0, 0.0);
    for (o, p, n) in gaps.values() {
        tpot_obs += o / *n as f64;
        tpot_pred += p / *n as f64;
    }
    RunMeans {
        ttft_error: if n_ttft > 0 {
            rel(ttft_pred, ttft_obs)
        } else {
            0.0
        },
        tpot_error: rel(tpot_pred, tpot_obs),
    }
}

fn profile(
    t: &RunTarget,
    d: &servebench_roofline::Deployment,
    fitted: &Fit,
    paths: &[PathBuf],
    observations: usize,
    before: &Errors,
    after: &Errors,
) -> CalibrationProfile {
    let v = |f: Factor| fitted.factors.get(f);
    // Step and layer overheads are one per-step constant for one model: the fitted sum is
    // shared between them in the ratio of the values it started from, and the CPU floor it
    // replaces is set to 0.
    let o = d.overheads();
    let layers = f64::from(d.model().num_hidden_layers);
    let (s0, l0) = (o.step_overhead_us, layers * o.layer_overhead_us);
    let ovh_us = v(Factor::StepOverhead) * 1e6;
    let (step_us, layer_us) = if s0 + l0 > 0.0 {
        (ovh_us * s0 / (s0 + l0), ovh_us * l0 / (s0 + l0) / layers)
    } else {
        (ovh_us, 0.0)
    };
    let round = |x: f64, digits: i32| {
        let k = 10f64.powi(digits);
        (x * k).round() / k
    };
    CalibrationProfile {
        schema: CALIBRATION_SCHEMA.to_string(),
        target: CalibrationTarget {
            model: t.model_id.clone(),
            gpu: t.gpu_id.clone(),
            tensor_parallel_size: t.tp,
            dtype: t.dtype,
        },
        factors: CalibrationFactors {
            mfu: Some(round(v(Factor::Mfu), 5)),
            mbu: Some(round(v(Factor::Mbu), 5)),
            step_overhead_us: Some(round(step_us, 3)),
            layer_overhead_us: Some(round(layer_us, 4)),
            req_overhead_us: Some(round(v(Factor::ReqOverhead) * 1e6, 4)),
            cpu_floor_us: Some(0.0),
        },
        fit: Some(FitNotes {
            results: paths.iter().map(|p| p.display().to_string()).collect(),
            observations: observations as u64,
            ttft_rms_error_before: round(before.ttft, 5),
            ttft_rms_error_after: round(after.ttft, 5),
            itl_rms_error_before: round(before.itl, 5),
            itl_rms_error_after: round(after.itl, 5),
        }),
    }
}

/// Files as given; directories walked for `*.servebench.json`.
fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let before = out.len();
            walk(p, &mut out)?;
            if out.len() == before {
                bail!("{} holds no *.servebench.json result", p.display());
            }
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, out)?;
        } else if p
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".servebench.json"))
        {
            out.push(p);
        }
    }
    Ok(())
}
