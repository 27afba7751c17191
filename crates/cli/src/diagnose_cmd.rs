//! `servebench diagnose DIR`: the method's symptom → regime table over a matrix or sweep,
//! the bandwidth check and (with a price) the cost per token, written to `interpretation.md`.
//!
//! Also home of what `diagnose` and `decide` share: loading an experiment with its
//! `environment.json` and sweep state, resolving the GPU and model the predictions are for,
//! and the price flags.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::de::DeserializeOwned;
use servebench_analysis::bandwidth::deployment_from_sim_config;
use servebench_analysis::decision::{
    accepted_tokens_per_s, cost_section_markdown, run_cost, CostParams,
};
use servebench_analysis::diagnose::{
    diagnose as run_rules, interpretation_markdown, ExperimentView, GroupView, KnownTarget,
    RowFigures, RunView, SweepView,
};
use servebench_analysis::frontier::{parse_slos, LoadKind, Slo};
use servebench_metrics::result::{EnvironmentFile, ExperimentFile, RunMetadata};
use servebench_report::{ExperimentReport, RunData};
use servebench_roofline::{Catalog, Deployment, Dtype, KvDtype};

use crate::experiment::load_experiment;

/// The GPU and model to predict for, when the results do not say (or to override them).
#[derive(Debug, Clone, Args)]
pub struct TargetArgs {
    /// GPU id or alias from the catalog the server runs on [default: the simulator's own, when
    /// the results come from it].
    #[arg(long, help_heading = "Prediction target")]
    pub gpu: Option<String>,
    /// Model id or Hugging Face name from the catalog [default: the simulator's own].
    #[arg(long, help_heading = "Prediction target")]
    pub model_preset: Option<String>,
    /// Weight and activation type of the served model: bf16 or fp8.
    #[arg(long, default_value = "bf16", help_heading = "Prediction target")]
    pub dtype: Dtype,
    /// KV-cache type: auto or fp8.
    #[arg(long, default_value = "auto", help_heading = "Prediction target")]
    pub kv_cache_dtype: KvDtype,
    /// Tensor-parallel degree of the server.
    #[arg(long, default_value_t = 1, help_heading = "Prediction target")]
    pub tensor_parallel_size: u32,
    /// TOML file adding or overriding catalog GPUs and models.
    #[arg(long, value_name = "FILE", help_heading = "Prediction target")]
    pub catalog: Option<PathBuf>,
}

impl TargetArgs {
    /// The deployment to predict for: the flags when `--gpu` or `--model-preset` is given
    /// (the other one from the simulator's configuration), else the simulator's own
    /// configuration from the first run's metadata, else none.
    pub fn resolve(&self, metadata: Option<&RunMetadata>) -> Result<Option<KnownTarget>> {
        let mut catalog = Catalog::builtin();
        if let Some(path) = &self.catalog {
            catalog
                .merge_file(path)
                .with_context(|| format!("loading the catalog {}", path.display()))?;
        }
        let sim_config = metadata.and_then(|m| m.target.sim_config.as_ref());
        if self.gpu.is_some() || self.model_preset.is_some() {
            let Some(gpu) = self
                .gpu
                .clone()
                .or_else(|| sim_config.and_then(|c| c.gpu.clone()))
            else {
                bail!("--model-preset needs --gpu too (the results do not name their GPU)");
            };
            let Some(model) = self
                .model_preset
                .clone()
                .or_else(|| sim_config.and_then(|c| c.model.clone()))
            else {
                bail!("--gpu needs --model-preset too (the results do not name their model)");
            };
            let deployment = Deployment::new(
                catalog.gpu(&gpu)?.clone(),
                catalog.model(&model)?.clone(),
                self.dtype,
                self.kv_cache_dtype,
                self.tensor_parallel_size,
            )?;
            return Ok(Some(KnownTarget {
                deployment,
                source: format!(
                    "--gpu {gpu} --model-preset {model} (catalog efficiencies, {} weights, tp {})",
                    self.dtype, self.tensor_parallel_size
                ),
            }));
        }
        let Some(cfg) = sim_config else {
            return Ok(None);
        };
        match deployment_from_sim_config(cfg, &catalog) {
            Ok(deployment) => Ok(Some(KnownTarget {
                deployment,
                source: "the simulator's own configuration (sim_config in the results)".into(),
            })),
            Err(e) => {
                tracing::warn!(
                    "cannot rebuild the simulator's deployment ({e}); pass --gpu and --model-preset"
                );
                Ok(None)
            }
        }
    }
}

/// The price flags.
#[derive(Debug, Clone, Args)]
pub struct CostArgs {
    /// Price of one GPU-hour in USD: adds cost per million output tokens and per million
    /// accepted (SLO-meeting) tokens.
    #[arg(long, value_name = "USD", help_heading = "Cost")]
    pub gpu_hourly_cost: Option<f64>,
    /// GPUs that served the measured traffic (a tensor-parallel replica counts all of them).
    #[arg(long, default_value_t = 1, value_name = "N", help_heading = "Cost")]
    pub gpus: u32,
}

impl CostArgs {
    /// The validated price basis, when a price was given.
    pub fn params(&self) -> Result<Option<CostParams>> {
        self.gpu_hourly_cost
            .map(|c| CostParams::new(c, f64::from(self.gpus)))
            .transpose()
            .map_err(|e| anyhow::anyhow!("--gpu-hourly-cost/--gpus: {e}"))
    }
}

/// Parses `--slo` values (`ttft:p99:500 tpot:p95:40`, one or several arguments).
pub fn parse_contract(slo: &[String]) -> Result<Vec<Slo>> {
    if slo.is_empty() {
        return Ok(Vec::new());
    }
    Ok(parse_slos(&slo.join(" "))?)
}

/// A JSON file of the experiment directory, when it is there.
fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    if !path.is_file() {
        return Ok(None);
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a valid {}", path.display(), file_name(path)))?;
    Ok(Some(value))
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}

/// An experiment loaded with what the rules need beyond the report model.
#[derive(Debug)]
pub struct LoadedExperiment {
    /// The directory (or result file) as given.
    pub path: PathBuf,
    /// The directory the result paths are relative to, and where outputs go.
    pub dir: PathBuf,
    /// The report model.
    pub report: ExperimentReport,
    /// `environment.json`, when present.
    pub environment: Option<EnvironmentFile>,
    /// Whether the sweep recorded an early stop.
    stopped_early: bool,
}

impl LoadedExperiment {
    /// Loads an experiment directory or a single result file.
    pub fn load(path: &Path) -> Result<LoadedExperiment> {
        let resolved = crate::experiment::resolve_experiment_dir(path)?;
        let path = resolved.as_path();
        let report = load_experiment(path)?;
        let dir = if path.is_file() {
            path.parent().unwrap_or(Path::new(".")).to_path_buf()
        } else {
            path.to_path_buf()
        };
        let environment: Option<EnvironmentFile> = read_json(&dir.join("environment.json"))?;
        let stopped_early = read_json::<ExperimentFile>(&dir.join("experiment.json"))?
            .and_then(|e| e.sweep)
            .is_some_and(|s| s.stopped_early);
        Ok(LoadedExperiment {
            path: path.to_path_buf(),
            dir,
            report,
            environment,
            stopped_early,
        })
    }

    fn run_view<'a>(&'a self, run: &'a RunData) -> RunView<'a> {
        RunView {
            path: &run.path,
            summary: &run.summary,
            records: &run.records,
            metadata: &run.metadata,
            plan: run.plan.as_ref(),
            telemetry: run.telemetry.as_ref(),
        }
    }

    /// The borrowed view the analyses read.
    pub fn view(&self) -> ExperimentView<'_> {
        let r = &self.report;
        let rows = r
            .rows
            .iter()
            .map(|row| GroupView {
                id: row.id.clone(),
                label: if row.name.is_empty() || row.name == row.id {
                    row.id.clone()
                } else {
                    format!("{} ({})", row.id, row.name)
                },
                hypothesis: row.hypothesis.clone(),
                load: None,
                runs: row.runs.iter().map(|run| self.run_view(run)).collect(),
            })
            .collect();
        let sweep = r.sweep.as_ref().map(|s| {
            let kind = if s.variable == "max_concurrency" {
                LoadKind::Concurrency
            } else {
                LoadKind::RequestRate
            };
            SweepView {
                row: s.row.clone(),
                variable: s.variable.clone(),
                slos: s.slos.clone(),
                points: s
                    .points
                    .iter()
                    .map(|p| GroupView {
                        id: format!("{}@{}", s.row, trim(p.value)),
                        label: format!("{} at {}", s.row, kind.describe(p.value)),
                        hypothesis: String::new(),
                        load: Some(p.value),
                        runs: p.runs.iter().map(|run| self.run_view(run)).collect(),
                    })
                    .collect(),
                stopped_early: self.stopped_early || s.stop_reason.is_some(),
                stop_reason: s.stop_reason.clone(),
            }
        });
        ExperimentView {
            title: r.title.clone(),
            kind: r.kind.as_str().to_owned(),
            quick: r.quick,
            rows,
            sweep,
        }
    }

    /// The contract stored with the sweep, if any.
    pub fn stored_contract(&self) -> Vec<String> {
        self.report
            .sweep
            .as_ref()
            .map(|s| s.slos.clone())
            .unwrap_or_default()
    }
}

fn trim(v: f64) -> String {
    if v.is_infinite() {
        "inf".into()
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

/// `servebench diagnose` flags.
#[derive(Debug, Clone, Args)]
pub struct DiagnoseArgs {
    /// An experiment directory (matrix or sweep), or one run's *.servebench.json.
    pub dir: PathBuf,
    /// Latency contract for the accepted-token cost (e.g. --slo ttft:p99:500 tpot:p95:40)
    /// [default: the sweep's own].
    #[arg(long, num_args = 1.., value_name = "METRIC:pNN:MS")]
    pub slo: Vec<String>,
    /// Where to write the interpretation [default: DIR/interpretation.md].
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Write nothing; only print.
    #[arg(long)]
    pub no_write: bool,
    /// Print the diagnosis as JSON (findings with rule ids, evidence, checks) instead of the
    /// Markdown; interpretation.md is written all the same.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub cost: CostArgs,
}

/// What `diagnose` produced.
#[derive(Debug)]
pub struct DiagnoseOutcome {
    /// `interpretation.md`'s text.
    pub markdown: String,
    /// Where it was written, unless `--no-write`.
    pub path: Option<PathBuf>,
    /// The diagnosis itself.
    pub diagnosis: servebench_analysis::diagnose::Diagnosis,
}

/// Loads, diagnoses, renders and writes; no printing.
pub fn build(args: &DiagnoseArgs) -> Result<DiagnoseOutcome> {
    let loaded = LoadedExperiment::load(&args.dir)?;
    let view = loaded.view();
    let target = args.target.resolve(view.first_metadata())?;
    let diagnosis = run_rules(&view, target.as_ref());
    let mut extra = Vec::new();
    if let Some(params) = args.cost.params()? {
        let mut contract_text = args.slo.clone();
        if contract_text.is_empty() {
            contract_text = loaded.stored_contract();
        }
        let contract = parse_contract(&contract_text)?;
        let rows: Vec<(String, servebench_analysis::decision::RunCost)> = view
            .groups()
            .into_iter()
            .filter_map(|g| {
                let f = RowFigures::from_group(g)?;
                let accepted = if contract.is_empty() {
                    f.goodput_tokens_per_s
                } else {
                    let v: Vec<f64> = g
                        .runs
                        .iter()
                        .filter_map(|r| {
                            accepted_tokens_per_s(r.records, &contract, r.summary.duration_s)
                        })
                        .collect();
                    (v.len() == g.runs.len() && !v.is_empty())
                        .then(|| v.iter().sum::<f64>() / v.len() as f64)
                };
                Some((f.label, run_cost(f.output_throughput, accepted, params)))
            })
            .collect();
        let mut body = cost_section_markdown(&rows);
        body.push_str(&if contract.is_empty() {
            "\nAccepted tokens are the runs' own --goodput figures (none given: –); pass --slo to judge against a contract.\n".to_string()
        } else {
            format!(
                "\nContract for accepted tokens: {}.\n",
                contract
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(" and ")
            )
        });
        extra.push(("Cost".to_string(), body));
    }
    let markdown = interpretation_markdown(&diagnosis, target.as_ref(), &extra);
    let path = if args.no_write {
        None
    } else {
        let p = args
            .output
            .clone()
            .unwrap_or_else(|| loaded.dir.join("interpretation.md"));
        std::fs::write(&p, &markdown).with_context(|| format!("writing {}", p.display()))?;
        Some(p)
    };
    Ok(DiagnoseOutcome {
        markdown,
        path,
        diagnosis,
    })
}

/// Runs `servebench diagnose`: prints the interpretation and says where it was written.
pub fn diagnose(args: DiagnoseArgs) -> Result<ExitCode> {
    let out = build(&args)?;
    let text = if args.json {
        let mut t =
            serde_json::to_string_pretty(&out.diagnosis).context("serializing the diagnosis")?;
        t.push('\n');
        t
    } else {
        out.markdown.clone()
    };
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .context("printing the interpretation")?;
    if let Some(p) = &out.path {
        eprintln!("interpretation: {}", p.display());
    }
    Ok(ExitCode::SUCCESS)
}
