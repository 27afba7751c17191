//! Runs that commands build themselves (matrix rows, sweep points): a base of the user's
//! own `servebench run` flags, parsed once, plus typed overrides for what the row or point
//! sets. The result is a `RunPlan`, and beside it the equivalent `servebench run`
//! command line for the record, so a recorded run can be re-run by hand.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{bail, Result};
use servebench_workload::PrefixMode;

use super::args::{PrefixModeArg, RunArgs};
use super::plan::RunPlan;

/// One value a row or point sets on its base.
#[derive(Debug, Clone, PartialEq)]
pub enum Override {
    /// Tokens after the prefix.
    RandomInputLen(u64),
    RandomOutputLen(u64),
    RandomPrefixLen(u64),
    RandomPrefixMode(PrefixMode),
    /// A trace prepared as a custom dataset, each request at its own output length.
    TraceDataset(std::path::PathBuf),
    /// A trace replayed on its own clock (`timed_trace`, self-timed), in this format.
    TimedTrace(std::path::PathBuf, servebench_workload::TraceFormat),
    NumPrompts(usize),
    /// Requests per second (infinite: all at once).
    RequestRate(f64),
    MaxConcurrency(usize),
    /// Comma-separated percentiles, as `--metric-percentiles`.
    MetricPercentiles(String),
    Seed(u64),
    NumWarmups(usize),
    Label(String),
}

impl Override {
    /// The `servebench run` fields (clap ids) it sets.
    fn ids(&self) -> &'static [&'static str] {
        match self {
            Override::RandomInputLen(_) => &["random_input_len"],
            Override::RandomOutputLen(_) => &["random_output_len"],
            Override::RandomPrefixLen(_) => &["random_prefix_len"],
            Override::RandomPrefixMode(_) => &["random_prefix_mode"],
            Override::TraceDataset(_) => &["dataset_name", "dataset_path", "custom_output_len"],
            Override::TimedTrace(..) => &["dataset_name", "dataset_path", "trace_format"],
            Override::NumPrompts(_) => &["num_prompts"],
            Override::RequestRate(_) => &["request_rate"],
            Override::MaxConcurrency(_) => &["max_concurrency"],
            Override::MetricPercentiles(_) => &["metric_percentiles"],
            Override::Seed(_) => &["seed"],
            Override::NumWarmups(_) => &["num_warmups"],
            Override::Label(_) => &["label"],
        }
    }

    fn apply(&self, a: &mut RunArgs) {
        match self {
            Override::RandomInputLen(v) => a.random_input_len = *v,
            Override::RandomOutputLen(v) => a.random_output_len = *v,
            Override::RandomPrefixLen(v) => a.random_prefix_len = *v,
            Override::RandomPrefixMode(m) => {
                a.random_prefix_mode = match m {
                    PrefixMode::Shared => PrefixModeArg::Shared,
                    PrefixMode::PerRequest => PrefixModeArg::PerRequest,
                }
            }
            Override::TraceDataset(path) => {
                a.dataset_name = super::args::DatasetName::Custom;
                a.dataset_path = Some(path.clone());
                a.custom_output_len = -1;
            }
            Override::TimedTrace(path, format) => {
                a.dataset_name = super::args::DatasetName::TimedTrace;
                a.dataset_path = Some(path.clone());
                a.trace_format = Some(super::args::TraceFormatArg::from_format(*format));
            }
            Override::NumPrompts(v) => a.num_prompts = *v,
            Override::RequestRate(v) => a.request_rate = *v,
            Override::MaxConcurrency(v) => a.max_concurrency = Some(*v),
            Override::MetricPercentiles(v) => a.metric_percentiles = v.clone(),
            Override::Seed(v) => a.seed = *v,
            Override::NumWarmups(v) => a.num_warmups = *v,
            Override::Label(v) => a.label = Some(v.clone()),
        }
    }

    /// The same setting as `servebench run` flags.
    pub fn flags(&self) -> Vec<String> {
        let pair = |k: &str, v: String| vec![k.to_owned(), v];
        match self {
            Override::RandomInputLen(v) => pair("--random-input-len", v.to_string()),
            Override::RandomOutputLen(v) => pair("--random-output-len", v.to_string()),
            Override::RandomPrefixLen(v) => pair("--random-prefix-len", v.to_string()),
            Override::RandomPrefixMode(m) => pair(
                "--random-prefix-mode",
                match m {
                    PrefixMode::Shared => "shared",
                    PrefixMode::PerRequest => "per-request",
                }
                .to_owned(),
            ),
            Override::TraceDataset(path) => vec![
                "--dataset-name".into(),
                "custom".into(),
                "--dataset-path".into(),
                path.display().to_string(),
                "--custom-output-len".into(),
                "-1".into(),
            ],
            Override::TimedTrace(path, format) => vec![
                "--dataset-name".into(),
                "timed_trace".into(),
                "--dataset-path".into(),
                path.display().to_string(),
                "--trace-format".into(),
                servebench_workload::trace::inspect::format_name(*format).to_owned(),
            ],
            Override::NumPrompts(v) => pair("--num-prompts", v.to_string()),
            Override::RequestRate(v) => pair(
                "--request-rate",
                if v.is_infinite() {
                    "inf".to_owned()
                } else {
                    v.to_string()
                },
            ),
            Override::MaxConcurrency(v) => pair("--max-concurrency", v.to_string()),
            Override::MetricPercentiles(v) => pair("--metric-percentiles", v.clone()),
            Override::Seed(v) => pair("--seed", v.to_string()),
            Override::NumWarmups(v) => pair("--num-warmups", v.to_string()),
            Override::Label(v) => pair("--label", v.clone()),
        }
    }
}

/// Fields every built run sets itself (`--output-dir DIR`). Its `--disable-tqdm` is no clash:
/// a user's own one says the same (and also turns off the progress the matrix or sweep shows).
const RUN_IDS: [&str; 1] = ["output_dir"];

/// The user's flags of a row or point (target and defaults, then the row's own), parsed once.
#[derive(Debug, Clone)]
pub struct RunBase {
    args: RunArgs,
    /// Fields the user's flags set: an override of one of them is refused, as a flag given
    /// twice is.
    given: BTreeSet<String>,
    flags: Vec<String>,
    row_flags: Vec<String>,
}

impl RunBase {
    /// Unsupported vLLM flags are refused as on the command line.
    pub fn parse(flags: &[String], row_flags: &[String]) -> Result<RunBase> {
        let all: Vec<String> = flags.iter().chain(row_flags).cloned().collect();
        let args = RunArgs::from_flags(&all).map_err(anyhow::Error::msg)?;
        let given = RunArgs::given_ids(&all).map_err(anyhow::Error::msg)?;
        Ok(RunBase {
            args,
            given,
            flags: flags.to_vec(),
            row_flags: row_flags.to_vec(),
        })
    }

    /// Whether the user wants live progress (no `--disable-tqdm` among their flags). A built
    /// run's own recorded flags always turn it off, so re-running one alone stays quiet in a
    /// script; the matrix or sweep shows progress around it instead.
    pub fn shows_progress(&self) -> bool {
        !self.args.disable_tqdm && self.args.ui != super::args::UiArg::None
    }

    /// The plan of one run: the row's `workload`, then `run` (seed, warm-ups, label),
    /// progress off and files in `output_dir`. Returns the plan and its `servebench run`
    /// flags.
    pub fn plan(
        &self,
        workload: &[Override],
        run: &[Override],
        output_dir: &Path,
        api_key: Option<&str>,
    ) -> Result<(RunPlan, Vec<String>)> {
        let mut flags = self.flags.clone();
        flags.extend(workload.iter().flat_map(Override::flags));
        flags.extend(self.row_flags.iter().cloned());
        flags.extend(run.iter().flat_map(Override::flags));
        if !self.given.contains("disable_tqdm") {
            flags.push("--disable-tqdm".to_owned());
        }
        flags.extend(["--output-dir".to_owned(), output_dir.display().to_string()]);
        let set = workload.iter().chain(run).flat_map(Override::ids);
        let mut clash: Vec<String> = set
            .chain(RUN_IDS.iter())
            .filter(|id| self.given.contains(**id))
            .map(|id| format!("--{}", id.replace('_', "-")))
            .collect();
        clash.dedup();
        if !clash.is_empty() {
            // A repeated flag would keep its last value (vLLM's rule), silently dropping the
            // user's: which one was meant is not ours to guess.
            bail!(
                "{} given by the row's own flags and also set by the matrix or sweep: give it in one place",
                clash.join(", ")
            );
        }
        let mut a = self.args.clone();
        for o in workload.iter().chain(run) {
            o.apply(&mut a);
        }
        a.disable_tqdm = true;
        a.output_dir = output_dir.to_owned();
        // The flags also read OPENAI_API_KEY; the experiment's own key wins.
        if let Some(k) = api_key {
            a.api_key = Some(k.to_owned());
        }
        Ok((RunPlan::from_args(&a)?, flags))
    }
}

impl RunArgs {
    /// The fields `flags` set on the command line (clap ids).
    pub fn given_ids<S: AsRef<str>>(flags: &[S]) -> Result<BTreeSet<String>, String> {
        let m = RunArgs::matches(flags)?;
        Ok(m.ids()
            .filter(|id| {
                m.value_source(id.as_str()) == Some(clap::parser::ValueSource::CommandLine)
            })
            .map(|id| id.as_str().to_owned())
            .collect())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn overrides_equal_the_same_flags_parsed() {
        let base = RunBase::parse(&s(&["--virtual-time", "--burstiness", "0.5"]), &[]).unwrap();
        let workload = [
            Override::RandomInputLen(200),
            Override::RandomOutputLen(30),
            Override::RandomPrefixLen(56),
            Override::RandomPrefixMode(PrefixMode::PerRequest),
            Override::NumPrompts(12),
            Override::RequestRate(2.5),
            Override::MaxConcurrency(3),
        ];
        let run = [
            Override::MetricPercentiles("50,99.9".into()),
            Override::Seed(7),
            Override::NumWarmups(2),
            Override::Label("row-A".into()),
        ];
        let (plan, flags) = base.plan(&workload, &run, Path::new("out"), None).unwrap();
        let parsed = RunPlan::from_args(&RunArgs::from_flags(&flags).unwrap()).unwrap();
        assert_eq!(format!("{plan:?}"), format!("{parsed:?}"));
        assert_eq!(plan.random.input_len, 200);
        assert_eq!(plan.report.label.as_deref(), Some("row-A"));
        assert!(!plan.report.progress);
        let inf = Override::RequestRate(f64::INFINITY).flags();
        assert_eq!(inf, s(&["--request-rate", "inf"]));
    }

    /// `--disable-tqdm` among the user's flags of a matrix or sweep turns its progress off;
    /// the built run's flags keep it once (clap refuses a repeated switch).
    #[test]
    fn the_users_disable_tqdm_is_no_clash_and_turns_progress_off() {
        let loud = RunBase::parse(&s(&["--virtual-time"]), &[]).unwrap();
        assert!(loud.shows_progress());
        let quiet = RunBase::parse(&s(&["--virtual-time", "--disable-tqdm"]), &[]).unwrap();
        assert!(!quiet.shows_progress());
        let (plan, flags) = quiet.plan(&[], &[], Path::new("o"), None).unwrap();
        assert!(!plan.report.progress);
        assert_eq!(flags.iter().filter(|f| *f == "--disable-tqdm").count(), 1);
        RunArgs::from_flags(&flags).unwrap();
    }

    #[test]
    fn a_row_flag_the_row_also_sets_is_refused_as_a_repeated_flag() {
        let base = RunBase::parse(
            &s(&["--random-output-len", "5"]),
            &s(&["--ignore-eos", "--goodput", "ttft:5"]),
        )
        .unwrap();
        let err = base
            .plan(&[Override::RandomOutputLen(30)], &[], Path::new("o"), None)
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("--random-output-len given by the row's own flags and also set"),
            "{err}"
        );
        let (plan, flags) = base
            .plan(
                &[Override::RandomInputLen(40)],
                &[Override::Seed(3)],
                Path::new("o"),
                Some("k"),
            )
            .unwrap();
        assert_eq!((plan.random.output_len, plan.random.input_len), (5, 40));
        assert!(plan.ignore_eos_flag);
        assert_eq!((plan.seed, plan.report.goodput.len()), (3, 1));
        assert_eq!(plan.api_key.as_deref(), Some("k"));
        let parsed = RunPlan::from_args(&RunArgs::from_flags(&flags).unwrap()).unwrap();
        assert_eq!(
            (
                parsed.random.output_len,
                parsed.random.input_len,
                parsed.seed
            ),
            (5, 40, 3)
        );
        let own = RunBase::parse(&s(&["--output-dir", "x"]), &[]).unwrap();
        assert!(own.plan(&[], &[], Path::new("o"), None).is_err());
    }

    #[test]
    fn trace_rows_become_a_custom_dataset() {
        let base = RunBase::parse(&[], &[]).unwrap();
        let (plan, _) = base
            .plan(
                &[Override::TraceDataset("t.jsonl".into())],
                &[],
                Path::new("o"),
                None,
            )
            .unwrap();
        assert_eq!(
            plan.dataset,
            super::super::plan::DatasetChoice::Custom {
                path: "t.jsonl".into(),
                output_len: -1
            }
        );
    }
}
