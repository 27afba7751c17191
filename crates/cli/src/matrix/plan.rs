//! The matrix file (`--matrix FILE`, and the `plan.toml` every experiment saves): rows of
//! workloads with their hypotheses, plus matrix-wide target and default tables.
//!
//! ```toml
//! title = "My matrix"
//! [target]            # optional: where the rows run (command-line flags win)
//! sim = "llama-3.1-8b --gpu h100"
//! [defaults]          # optional: applies to every row
//! seed = 0
//! num_warmups = 2
//! [[row]]
//! id = "A"
//! name = "interactive"
//! hypothesis = "..."
//! input_len = 256      # whole prompt, shared prefix included
//! output_len = 128
//! max_concurrency = 1
//! request_rate = 1.0   # or "inf"
//! num_prompts = 100
//! ```

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use servebench_workload::PrefixMode;

use crate::run::overrides::Override;

/// A whole matrix: what to run, where, and with which defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatrixPlan {
    /// Report title.
    #[serde(default = "default_title")]
    pub title: String,
    /// Where the rows run.
    #[serde(default)]
    pub target: TargetTable,
    /// Settings every row shares.
    #[serde(default)]
    pub defaults: Defaults,
    /// The workload rows, in order.
    #[serde(default, rename = "row")]
    pub rows: Vec<RowSpec>,
}

fn default_title() -> String {
    "Workload matrix".to_owned()
}

/// `[target]`: the server the rows measure. Absent fields mean the embedded simulator.
/// API keys never belong here: pass `--api-key` or set `OPENAI_API_KEY`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetTable {
    /// An external server (`http://gpu-host:8000`); none: the embedded simulator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The simulator to start in-process (`servebench sim` arguments as one string).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sim: Option<String>,
    /// Run the simulator's engine core in virtual time.
    #[serde(default)]
    pub virtual_time: bool,
    /// Model name; default: the server's first model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Tokenizer (as `servebench run --tokenizer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<String>,
}

/// `[defaults]`: settings every row shares unless the row overrides them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    /// Base seed; each run derives its own from it (see [`run_seed`]).
    #[serde(default)]
    pub seed: u64,
    /// Warm-up requests before each measured run (outside the measured window).
    #[serde(default = "default_warmups")]
    pub num_warmups: usize,
    /// Runs per row.
    #[serde(default = "one")]
    pub repeat: usize,
    /// `full` or `quick` (request counts divided by ten).
    #[serde(default)]
    pub scale: Scale,
    /// `servebench run` flags added to every row (before the row's own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
}

fn default_warmups() -> usize {
    2
}

fn one() -> usize {
    1
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            seed: 0,
            num_warmups: default_warmups(),
            repeat: 1,
            scale: Scale::Full,
            flags: Vec::new(),
        }
    }
}

/// How many requests each row sends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// The row's own `num_prompts`.
    #[default]
    Full,
    /// A tenth of them (at least 4 and at least the row's concurrency):
    /// a fast look whose percentiles are rough.
    Quick,
}

/// The fewest requests a quick row sends.
pub const QUICK_MIN_PROMPTS: usize = 4;

impl Scale {
    /// Requests a row of `num_prompts` at `concurrency` sends at this scale.
    pub fn prompts(self, num_prompts: usize, concurrency: Option<usize>) -> usize {
        match self {
            Scale::Full => num_prompts,
            Scale::Quick => {
                let floor = QUICK_MIN_PROMPTS.max(concurrency.unwrap_or(0));
                num_prompts.div_ceil(10).max(floor).min(num_prompts.max(1))
            }
        }
    }

    /// Warm-up requests per run at this scale: a quick run keeps one (a warm-up of a long
    /// single-stream row costs as much as a measured request).
    pub fn warmups(self, num_warmups: usize) -> usize {
        match self {
            Scale::Full => num_warmups,
            Scale::Quick => num_warmups.min(1),
        }
    }

    /// `full` / `quick`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scale::Full => "full",
            Scale::Quick => "quick",
        }
    }
}

/// Whether a row's prompts share a prefix the server may already hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum PrefixReuse {
    /// Every request has its own prompt (and its own random prefix): nothing is reusable.
    #[default]
    Cold,
    /// All requests share one prefix of `prefix_len` tokens, primed before measuring.
    Warm,
}

/// A request rate: a number of requests per second, or `"inf"` (all at once).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate(pub f64);

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_infinite() {
            f.write_str("inf")
        } else {
            write!(f, "{}", self.0)
        }
    }
}

impl Serialize for Rate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.is_infinite() {
            s.serialize_str("inf")
        } else {
            s.serialize_f64(self.0)
        }
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(i64),
            Num(f64),
            Text(String),
        }
        let v = match Raw::deserialize(d)? {
            Raw::Int(i) => i as f64,
            Raw::Num(x) => x,
            Raw::Text(t) => match t.trim().to_ascii_lowercase().as_str() {
                "inf" | "unlimited" => f64::INFINITY,
                other => other.parse().map_err(|_| {
                    serde::de::Error::custom(format!(
                        "request_rate {t:?}: expected a number or \"inf\""
                    ))
                })?,
            },
        };
        if v.is_nan() || v <= 0.0 {
            return Err(serde::de::Error::custom(format!(
                "request_rate must be positive or \"inf\", got {v}"
            )));
        }
        Ok(Rate(v))
    }
}

impl std::str::FromStr for Rate {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        let v = if t == "inf" || t == "unlimited" {
            f64::INFINITY
        } else {
            t.parse::<f64>()
                .map_err(|_| format!("{s:?} is not a request rate (a number or inf)"))?
        };
        if v.is_nan() || v <= 0.0 {
            return Err(format!("request rate must be positive or inf, got {s}"));
        }
        Ok(Rate(v))
    }
}

/// One workload row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowSpec {
    /// Short id (`A`), used for the row's directory.
    pub id: String,
    /// Short name.
    #[serde(default)]
    pub name: String,
    /// The question the row answers, shown beside its numbers.
    #[serde(default)]
    pub hypothesis: String,
    /// Prompt tokens, the shared prefix included.
    #[serde(default = "default_input_len")]
    pub input_len: u64,
    /// Output tokens per request.
    #[serde(default = "default_output_len")]
    pub output_len: u64,
    /// Client concurrency cap; none: unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<usize>,
    /// Requests per second, or `"inf"`.
    #[serde(default = "inf")]
    pub request_rate: Rate,
    /// Requests at full scale.
    #[serde(default = "default_prompts")]
    pub num_prompts: usize,
    /// Leading prompt tokens that are a prefix (shared when `prefix = "warm"`).
    #[serde(default)]
    pub prefix_len: u64,
    /// `cold` or `warm`.
    #[serde(default)]
    pub prefix: PrefixReuse,
    /// A production trace to replay (row F): its lengths, prefix blocks and mean arrival
    /// rate replace `input_len`, `output_len`, `prefix_len` and (unless given) the rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<PathBuf>,
    /// More `servebench run` flags for this row (`["--ignore-eos"]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
}

fn default_input_len() -> u64 {
    1024
}
fn default_output_len() -> u64 {
    128
}
fn inf() -> Rate {
    Rate(f64::INFINITY)
}
fn default_prompts() -> usize {
    100
}

impl RowSpec {
    /// Checks that need no I/O.
    pub fn validate(&self) -> Result<()> {
        let id = &self.id;
        if id.is_empty()
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            bail!(
                "row id {id:?} must be letters, digits, '-' or '_' (it names the row's directory)"
            );
        }
        if self.num_prompts == 0 {
            bail!("row {id}: num_prompts must be at least 1");
        }
        if self.max_concurrency == Some(0) {
            bail!("row {id}: max_concurrency must be at least 1");
        }
        if self.trace.is_none() {
            if self.input_len <= self.prefix_len {
                bail!(
                    "row {id}: input_len ({}) counts the whole prompt and must exceed prefix_len ({})",
                    self.input_len,
                    self.prefix_len
                );
            }
            if self.prefix == PrefixReuse::Warm && self.prefix_len == 0 {
                bail!("row {id}: a warm row needs prefix_len > 0 (the prefix it shares)");
            }
        }
        Ok(())
    }

    /// What this row sets on its runs (dataset, traffic), without the target, seed,
    /// warm-ups or output directory. `num_prompts` is the scaled count.
    pub fn workload(&self, num_prompts: usize) -> Vec<Override> {
        let mut w = Vec::new();
        if self.trace.is_none() {
            w.extend([
                Override::RandomInputLen(self.input_len - self.prefix_len),
                Override::RandomOutputLen(self.output_len),
                Override::RandomPrefixLen(self.prefix_len),
                Override::RandomPrefixMode(match self.prefix {
                    PrefixReuse::Cold => PrefixMode::PerRequest,
                    PrefixReuse::Warm => PrefixMode::Shared,
                }),
            ]);
        }
        w.push(Override::NumPrompts(num_prompts));
        w.push(Override::RequestRate(self.request_rate.0));
        if let Some(c) = self.max_concurrency {
            w.push(Override::MaxConcurrency(c));
        }
        w
    }

    /// The row's workload as `servebench run` flags, its own `flags` last (they win).
    pub fn workload_flags(&self, num_prompts: usize) -> Vec<String> {
        let mut f: Vec<String> = self
            .workload(num_prompts)
            .iter()
            .flat_map(Override::flags)
            .collect();
        f.extend(self.flags.iter().cloned());
        f
    }

    /// The prompt shown in tables: `4096 (3072 shared) → 256`.
    pub fn shape(&self) -> String {
        if let Some(t) = &self.trace {
            return format!("trace {}", t.display());
        }
        let prefix = match (self.prefix, self.prefix_len) {
            (_, 0) => String::new(),
            (PrefixReuse::Warm, p) => format!(" ({p} shared)"),
            (PrefixReuse::Cold, p) => format!(" ({p} cold prefix)"),
        };
        format!("{}{prefix} → {}", self.input_len, self.output_len)
    }
}

/// The seed of one run: the base seed moved by the row's position and the repeat, so no two
/// runs of an experiment send the same prompts (a server's prefix cache would otherwise
/// carry one row's prompts into another's measurement).
pub fn run_seed(base: u64, row_index: usize, repeat: usize) -> u64 {
    base.wrapping_add(row_index as u64 * 1_000)
        .wrapping_add(repeat as u64)
}

impl MatrixPlan {
    /// Reads and checks a matrix file.
    pub fn load(path: &Path) -> Result<MatrixPlan> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading matrix file {}", path.display()))?;
        let mut plan: MatrixPlan = toml::from_str(&text)
            .with_context(|| format!("parsing matrix file {}", path.display()))?;
        // A trace path in a file is relative to the file.
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        for row in &mut plan.rows {
            if let Some(t) = &row.trace {
                if t.is_relative() && !base.as_os_str().is_empty() {
                    row.trace = Some(base.join(t));
                }
            }
        }
        plan.validate()
            .with_context(|| format!("matrix file {}", path.display()))?;
        Ok(plan)
    }

    /// Checks the rows and the defaults.
    pub fn validate(&self) -> Result<()> {
        if self.rows.is_empty() {
            bail!("the matrix has no [[row]]");
        }
        if self.defaults.repeat == 0 {
            bail!("[defaults] repeat must be at least 1");
        }
        let mut seen = std::collections::HashSet::new();
        for r in &self.rows {
            r.validate()?;
            if !seen.insert(r.id.as_str()) {
                bail!("row id {} appears twice", r.id);
            }
        }
        Ok(())
    }

    /// Keeps the rows named in `ids` (in the matrix's order); an unknown id is an error.
    pub fn select(&mut self, ids: &[String]) -> Result<()> {
        for id in ids {
            if !self.rows.iter().any(|r| r.id.eq_ignore_ascii_case(id)) {
                let known: Vec<&str> = self.rows.iter().map(|r| r.id.as_str()).collect();
                bail!(
                    "--rows: no row {id:?} in the matrix (rows: {})",
                    known.join(", ")
                );
            }
        }
        self.rows
            .retain(|r| ids.iter().any(|id| r.id.eq_ignore_ascii_case(id)));
        Ok(())
    }

    /// The plan as TOML (the experiment's `plan.toml`).
    pub fn to_toml(&self) -> Result<String> {
        let body = toml::to_string_pretty(self).context("writing the plan as TOML")?;
        Ok(format!(
            "# servebench matrix plan: re-run with `servebench matrix --matrix plan.toml`.\n\
             # API keys are never saved: pass --api-key or set OPENAI_API_KEY.\n\n{body}"
        ))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const FILE: &str = r#"
title = "t"
[target]
sim = "llama-3.1-8b --gpu h100"
[defaults]
seed = 7
[[row]]
id = "A"
hypothesis = "h"
input_len = 300
prefix_len = 100
prefix = "warm"
request_rate = "inf"
max_concurrency = 4
flags = ["--ignore-eos"]
[[row]]
id = "B"
request_rate = 2
"#;

    #[test]
    fn parses_rows_rates_and_defaults() {
        let p: MatrixPlan = toml::from_str(FILE).unwrap();
        p.validate().unwrap();
        assert_eq!(p.defaults.seed, 7);
        assert_eq!(p.defaults.num_warmups, 2);
        assert_eq!(p.rows.len(), 2);
        assert!(p.rows[0].request_rate.0.is_infinite());
        assert_eq!(p.rows[1].request_rate, Rate(2.0));
        let flags = p.rows[0].workload_flags(10);
        let s = flags.join(" ");
        assert!(s.contains("--random-input-len 200"), "{s}");
        assert!(
            s.contains("--random-prefix-len 100 --random-prefix-mode shared"),
            "{s}"
        );
        assert!(
            s.contains("--request-rate inf --max-concurrency 4 --ignore-eos"),
            "{s}"
        );
    }

    #[test]
    fn round_trips_through_toml() {
        let p: MatrixPlan = toml::from_str(FILE).unwrap();
        let text = p.to_toml().unwrap();
        let back: MatrixPlan = toml::from_str(&text).unwrap();
        assert_eq!(p, back);
    }

    #[test]
    fn refuses_bad_rows() {
        let bad = |s: &str| {
            toml::from_str::<MatrixPlan>(s)
                .map_err(|e| e.to_string())
                .and_then(|p| p.validate().map_err(|e| e.to_string()))
        };
        assert!(bad("[[row]]\nid = \"A\"\nrequest_rate = 0")
            .unwrap_err()
            .contains("positive"));
        assert!(bad("[[row]]\nid = \"A\"\nprefix = \"warm\"")
            .unwrap_err()
            .contains("prefix_len"));
        assert!(bad("[[row]]\nid = \"A\"\n[[row]]\nid = \"A\"")
            .unwrap_err()
            .contains("twice"));
        assert!(bad("[[row]]\nid = \"A\"\nbogus = 1")
            .unwrap_err()
            .contains("bogus"));
        assert!(bad("[[row]]\nid = \"a/b\"")
            .unwrap_err()
            .contains("directory"));
    }

    #[test]
    fn quick_scale_shrinks_but_keeps_slots_filled() {
        assert_eq!(Scale::Quick.prompts(100, Some(1)), 10);
        assert_eq!(Scale::Quick.prompts(100, Some(16)), 16);
        assert_eq!(Scale::Quick.prompts(20, None), 4);
        assert_eq!(Scale::Quick.prompts(2, None), 2);
        assert_eq!(Scale::Full.prompts(100, Some(16)), 100);
        assert_eq!(
            (
                Scale::Quick.warmups(2),
                Scale::Quick.warmups(0),
                Scale::Full.warmups(2)
            ),
            (1, 0, 2)
        );
    }

    #[test]
    fn select_keeps_order_and_refuses_unknown() {
        let mut p: MatrixPlan = toml::from_str(FILE).unwrap();
        p.select(&["b".into()]).unwrap();
        assert_eq!(p.rows.len(), 1);
        assert_eq!(p.rows[0].id, "B");
        assert!(p.select(&["Z".into()]).is_err());
    }

    #[test]
    fn seeds_differ_across_rows_and_repeats() {
        assert_ne!(run_seed(0, 0, 1), run_seed(0, 1, 0));
        assert_ne!(run_seed(0, 0, 0), run_seed(0, 0, 1));
    }
}
