//! The frontier on the axes the field now publishes: output tokens per second per GPU (what a
//! deployment costs) against tokens per second per user (how fast each answer streams,
//! 1000 / TPOT), with the TPOT objective drawn as the slowest streaming speed allowed.

use super::charts::point_label;
use super::figures::{sweep_axes, GroupFigures};
use super::format::{load, rate};
use super::svg::{Chart, Series, SeriesKind, VLine};
use crate::model::SweepReport;

/// GPUs behind the sweep's target and whether the count was given (`--gpus`, the
/// simulator's tensor-parallel size) or assumed (1).
pub fn sweep_gpus(sweep: &SweepReport) -> (u32, bool) {
    if let Some(g) = sweep.gpus {
        return (g.max(1), true);
    }
    let sim = sweep
        .points
        .iter()
        .flat_map(|p| p.runs.iter())
        .find_map(|r| r.metadata.target.sim_config.as_ref()?.tensor_parallel_size);
    match sim {
        Some(g) => (g.max(1), true),
        None => (1, false),
    }
}

/// Output tok/s per GPU (y) against tok/s per user (x), one point per sweep point; the TPOT
/// objective, when the contract has one, as a vertical line (points right of it stream fast
/// enough). Per-user speed is read at the objective's percentile (the slow users), else at
/// the median.
pub fn interactivity_chart(sweep: &SweepReport) -> Chart {
    let (gpus, known) = sweep_gpus(sweep);
    let tpot_axis = sweep_axes(sweep).into_iter().find(|a| a.metric == "tpot");
    let pct = tpot_axis.as_ref().map_or(50.0, |a| a.percentile);
    let pct_label = if pct == 50.0 {
        "median".to_owned()
    } else {
        format!("p{}", load(pct))
    };
    let mut points = Vec::new();
    let mut tooltips = Vec::new();
    for p in &sweep.points {
        let f = GroupFigures::of(&p.runs);
        let tpot = f.latency("tpot", pct).value.unwrap_or(f64::NAN);
        let per_user = if tpot > 0.0 { 1000.0 / tpot } else { f64::NAN };
        let per_gpu = f.output_throughput.value.unwrap_or(f64::NAN) / f64::from(gpus);
        points.push((per_user, per_gpu));
        tooltips.push(format!(
            "{}: {} tok/s per user ({pct_label} TPOT), {} output tok/s per GPU",
            point_label(sweep, p.value),
            rate(per_user),
            rate(per_gpu)
        ));
    }
    let v_lines = tpot_axis
        .iter()
        .flat_map(|a| a.slo_ms.iter())
        .filter(|&&ms| ms > 0.0)
        .map(|&ms| VLine {
            x: 1000.0 / ms,
            label: format!(
                "SLO {pct_label} TPOT < {} ms: ≥ {} tok/s per user",
                load(ms),
                rate(1000.0 / ms)
            ),
            class: "slo".into(),
        })
        .collect();
    let front = pareto_front(&points);
    let front_tips = front
        .iter()
        .map(|&(x, y)| {
            format!(
                "on the Pareto front: {} tok/s per user, {} output tok/s per GPU",
                rate(x),
                rate(y)
            )
        })
        .collect();
    Chart {
        id: "frontier-per-gpu".into(),
        title: "Output tok/s per GPU against tok/s per user (interactivity)".into(),
        x_label: format!("tok/s per user (1000 / {pct_label} TPOT)"),
        y_label: format!(
            "output tok/s per GPU ({gpus} GPU{})",
            if gpus == 1 { "" } else { "s" }
        ),
        series: vec![
            Series {
                id: "frontier-per-gpu-points".into(),
                label: format!("sweep of {} over row {}", sweep.variable, sweep.row),
                points,
                tooltips,
                kind: SeriesKind::LineMarkers,
                color: 0,
            },
            Series {
                id: "frontier-per-gpu-pareto".into(),
                label: "Pareto front (no point both faster per user and more per GPU)".into(),
                points: front,
                tooltips: front_tips,
                kind: SeriesKind::Line,
                color: 2,
            },
        ],
        x_from_zero: true,
        y_from_zero: true,
        note: (!known).then(|| {
            "GPU count not recorded: 1 assumed (give `servebench sweep --gpus N`)".to_owned()
        }),
        v_lines,
        ..Chart::default()
    }
}

/// The points no other point beats on both axes (more tok/s per user and more per GPU), in
/// order of tok/s per user: the trade-off a deployment chooses along.
pub fn pareto_front(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut pts: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    // Fastest per user first; keep a point when it serves more per GPU than every faster one.
    pts.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.total_cmp(&a.1)));
    let mut front: Vec<(f64, f64)> = Vec::new();
    for p in pts {
        if front.last().is_none_or(|last| p.1 > last.1) {
            front.push(p);
        }
    }
    front.reverse();
    front
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pareto_front_keeps_the_points_nothing_beats_on_both_axes() {
        let pts = [
            (100.0, 500.0),
            (80.0, 900.0),
            (90.0, 600.0),
            (60.0, 850.0), // beaten by (80, 900)
            (40.0, 1200.0),
            (f64::NAN, 5000.0),
        ];
        assert_eq!(
            pareto_front(&pts),
            vec![(40.0, 1200.0), (80.0, 900.0), (90.0, 600.0), (100.0, 500.0)]
        );
        assert!(pareto_front(&[]).is_empty());
    }
}
