//! `experiment.json`: an experiment directory's index of rows, sweep points and run files.

use serde::{Deserialize, Deserializer, Serialize};

/// `experiment.json` (schema [`super::EXPERIMENT_SCHEMA`]). Written by `matrix` and `sweep`,
/// read by `report`, `diagnose`, `decide` and `compare`; files written by hand may leave out
/// everything but `kind`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExperimentFile {
    /// Always [`super::EXPERIMENT_SCHEMA`] when written.
    #[serde(default)]
    pub schema: String,
    /// `matrix`, `sweep` or `single`.
    pub kind: String,
    /// Numbers from a quick (shortened) run.
    #[serde(default)]
    pub quick: bool,
    /// Report title.
    #[serde(default)]
    pub title: String,
    /// Rows in order (a sweep has its one row here too, with every point's runs).
    #[serde(default)]
    pub rows: Vec<RowEntry>,
    /// The sweep, for a sweep experiment.
    #[serde(default)]
    pub sweep: Option<SweepEntry>,
    /// Runs per row or point.
    #[serde(default = "one")]
    pub repeat: usize,
    /// Things a reader should know (skipped rows, interruptions, quick run).
    #[serde(default)]
    pub notes: Vec<String>,
}

fn one() -> usize {
    1
}

/// One row of `experiment.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RowEntry {
    /// Row id.
    pub id: String,
    /// Row name.
    #[serde(default)]
    pub name: String,
    /// The question the row answers.
    #[serde(default)]
    pub hypothesis: String,
    /// `*.servebench.json` files of the row's runs, relative to the experiment directory.
    #[serde(default)]
    pub runs: Vec<String>,
    /// `repeat.json` (mean ± std across runs), when the row was repeated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat_summary: Option<String>,
}

/// The `sweep` object of `experiment.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepEntry {
    /// The swept row's id.
    #[serde(default)]
    pub row: String,
    /// `request_rate` or `max_concurrency`.
    pub variable: String,
    /// SLOs as given (`ttft:p99:500`).
    #[serde(default)]
    pub slos: Vec<String>,
    /// The latency percentile of the frontier (`ttft:p99`); empty when not recorded.
    #[serde(default, deserialize_with = "null_as_default")]
    pub latency_metric: String,
    /// Points in sweep order.
    #[serde(default)]
    pub points: Vec<PointEntry>,
    /// Whether the sweep stopped before its last planned point.
    #[serde(default)]
    pub stopped_early: bool,
    /// Why it stopped early (empty when it did not).
    #[serde(default, deserialize_with = "null_as_default")]
    pub stop_reason: String,
    /// Index into `points` of the frontier's knee; recomputed by readers when absent.
    #[serde(default)]
    pub knee: Option<usize>,
    /// Indices into `points` on the throughput–latency frontier, by latency.
    #[serde(default)]
    pub frontier: Vec<usize>,
    /// Index of the first saturated point.
    #[serde(default)]
    pub saturation: Option<usize>,
    /// Index of the highest-throughput point meeting every SLO.
    #[serde(default)]
    pub best_under_slo: Option<usize>,
    /// The one-sentence answer under the SLOs; recomputed by readers when absent.
    #[serde(default)]
    pub headline: Option<String>,
    /// The closed-loop probe that found the saturation rate (`--request-rate auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeEntry>,
    /// `--search`: the operating-point search that chose the points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<SearchEntry>,
    /// GPUs serving the target (`--gpus`, or the simulator's), for per-GPU throughput.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
}

/// `sweep.search` of `experiment.json`: the points a `--search` measured, in the order it
/// measured them, and its answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SearchEntry {
    /// Relative width of the final bracket (`--search-tolerance`).
    pub tolerance: f64,
    /// The first load tried and the highest allowed.
    pub start: f64,
    pub cap: f64,
    /// Each load measured, in search order.
    pub tried: Vec<SearchPointEntry>,
    /// The highest load that met the contract.
    pub answer: Option<f64>,
    /// The lowest load that did not.
    pub first_failing: Option<f64>,
    /// Output tok/s at the answer: mean over its runs and the 95 % interval of that mean.
    pub throughput: Option<[f64; 3]>,
    /// The sentence: "X tok/s at p99 TTFT < Y ms ...".
    pub headline: String,
}

/// One load a search measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SearchPointEntry {
    pub value: f64,
    /// Index into `sweep.points`.
    pub point: usize,
    pub passed: bool,
    /// Why it failed (the SLO bound broken, over-saturation, client overload).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The over-saturation test fired: when, and what it saw.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub over_saturated: Option<String>,
    /// Each SLO's percentile: mean over runs and the 95 % interval of that mean, ms.
    pub slo_values: Vec<(String, [f64; 3])>,
    /// A run at this load stopped itself as over-saturated: "stopped early: REASON at X s
    /// of Y s".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_early: Option<String>,
    /// Repeats not run because a run at this load stopped early (the load had failed).
    #[serde(skip_serializing_if = "is_zero")]
    pub skipped_runs: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One sweep point of `experiment.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointEntry {
    /// The swept variable's value; an unlimited rate is written `null` (JSON has no infinity)
    /// and read from `null`, `"inf"` or a number.
    #[serde(serialize_with = "inf_as_null", deserialize_with = "load_value")]
    pub value: f64,
    /// Runs at this point, relative paths.
    #[serde(default)]
    pub runs: Vec<String>,
    /// `repeat.json` when repeated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat_summary: Option<String>,
}

/// The auto sweep's probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeEntry {
    /// Concurrency cap of the closed-loop probe.
    pub max_concurrency: usize,
    /// Requests per second it sustained.
    pub request_throughput: f64,
    /// Its result file.
    pub run: String,
}

fn inf_as_null<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() {
        s.serialize_f64(*v)
    } else {
        s.serialize_none()
    }
}

fn null_as_default<'de, D: Deserializer<'de>, T: Default + Deserialize<'de>>(
    d: D,
) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

fn load_value<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Load {
        Number(f64),
        Text(String),
    }
    match Option::<Load>::deserialize(d)? {
        None => Ok(f64::INFINITY),
        Some(Load::Number(v)) => Ok(v),
        Some(Load::Text(s)) if matches!(s.trim(), "inf" | "Infinity" | "unlimited") => {
            Ok(f64::INFINITY)
        }
        Some(Load::Text(s)) => s
            .trim()
            .parse()
            .map_err(|_| serde::de::Error::custom(format!("sweep value '{s}' is not a number"))),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_hand_written_experiment_file_loads_with_defaults() {
        let f: ExperimentFile = serde_json::from_str(
            r#"{"kind": "matrix", "rows": [{"id": "A", "runs": ["a.servebench.json"]}],
                "sweep": {"variable": "request_rate", "stop_reason": null,
                          "points": [{"value": "inf"}, {"value": null}, {"value": "2.5"}, {"value": 4}]}}"#,
        )
        .unwrap();
        assert_eq!((f.repeat, f.quick, f.rows[0].name.as_str()), (1, false, ""));
        let s = f.sweep.unwrap();
        let values: Vec<f64> = s.points.iter().map(|p| p.value).collect();
        assert_eq!(values, [f64::INFINITY, f64::INFINITY, 2.5, 4.0]);
        assert_eq!((s.stop_reason.as_str(), s.knee), ("", None));
        let bad = serde_json::from_str::<PointEntry>(r#"{"value": "fast"}"#).unwrap_err();
        assert!(bad.to_string().contains("not a number"), "{bad}");
    }
}
