//! The energy table: per row or sweep point, the mean GPU power over the measured window,
//! the energy per output token and output tokens per joule (`summary.energy` of each run,
//! from `nvidia-smi` or a DCGM exporter). Absent when no run had power readings.

use super::charts::groups;
use super::tables::Table;
use crate::model::ExperimentReport;

/// Mean of the values present, with the count of runs that had one.
fn mean(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let present: Vec<f64> = values.flatten().collect();
    (!present.is_empty()).then(|| present.iter().sum::<f64>() / present.len() as f64)
}

fn cell(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "–".to_owned(), |v| format!("{v:.decimals$}"))
}

/// One line per row or point whose runs have energy; `None` when none has.
pub fn energy_table(report: &ExperimentReport) -> Option<Table> {
    let mut table = Table {
        headers: [
            "row / point",
            "GPUs",
            "mean power (W)",
            "energy (J)",
            "J per output token",
            "output tokens per J",
            "source",
        ]
        .iter()
        .map(|h| (*h).to_owned())
        .collect(),
        numeric: vec![false, true, true, true, true, true, false],
        rows: Vec::new(),
    };
    for g in groups(report) {
        let energies: Vec<_> = g
            .runs
            .iter()
            .filter_map(|r| r.summary.energy.as_ref())
            .collect();
        let Some(first) = energies.first() else {
            continue;
        };
        let label = if energies.len() > 1 {
            format!("{} (mean of {} runs)", g.label, energies.len())
        } else {
            g.label.clone()
        };
        table.rows.push(vec![
            label,
            first.gpus.to_string(),
            cell(mean(energies.iter().map(|e| Some(e.avg_power_w))), 1),
            cell(mean(energies.iter().map(|e| Some(e.energy_j))), 1),
            cell(mean(energies.iter().map(|e| e.joules_per_output_token)), 4),
            cell(mean(energies.iter().map(|e| e.output_tokens_per_joule)), 3),
            first.source.clone(),
        ]);
    }
    (!table.rows.is_empty()).then_some(table)
}

/// The note under the table.
pub const ENERGY_NOTE: &str = "Board power of every GPU the source reported, averaged over the measured window (trapezoid over the readings inside it) and multiplied by its length; output tokens of completed requests.";
