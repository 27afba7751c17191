//! Least-squares fit of the step-time model's named factors to observed TTFTs and inter-token
//! gaps (docs/simulator.md "Calibrating to your deployment").
//!
//! Every observation is a sum of engine steps whose work (FLOPs and bytes at peak, planned
//! requests, all-reduce time) is known from the records; only the factors are unknown. A step
//! takes `t_ovh + n_req·t_req + softroof(t_c0/MFU, t_m0/MBU) + t_ar`, so the fit is a small
//! Levenberg–Marquardt on the factors' logarithms (they stay positive), minimising log ratios
//! of predicted to observed so a 100 ms TTFT and a 7 ms gap weigh alike. Step and layer overheads are one
//! per-step constant for one model, so they are fitted together as `t_ovh`.
//!
//! To add a factor: a [`Factor`] variant, its term in [`Factors::step`] and its derivative in
//! [`Factors::step_gradient`], and a hint naming the run that identifies it.

// Small dense linear algebra reads best with explicit indices.
#![allow(clippy::needless_range_loop)]

/// A factor the fit estimates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Factor {
    /// Whole-model MFU.
    Mfu,
    /// Memory-bandwidth utilisation.
    Mbu,
    /// Per-step overhead `t_fixed + L·t_layer` (or the CPU floor), seconds.
    StepOverhead,
    /// Per-planned-request overhead, seconds.
    ReqOverhead,
}

impl Factor {
    /// Every factor, in parameter order.
    pub const ALL: [Factor; 4] = [
        Factor::Mfu,
        Factor::Mbu,
        Factor::StepOverhead,
        Factor::ReqOverhead,
    ];

    /// The name printed and written.
    pub fn name(self) -> &'static str {
        match self {
            Factor::Mfu => "mfu",
            Factor::Mbu => "mbu",
            Factor::StepOverhead => "step overhead (t_fixed + L·t_layer)",
            Factor::ReqOverhead => "request overhead (t_req)",
        }
    }

    /// Which run would carry the information this factor needs.
    pub fn hint(self) -> &'static str {
        match self {
            Factor::Mfu => {
                "add a long-prefill run (matrix row B: 2048 tokens in, concurrency 1), whose TTFT is compute-bound"
            }
            Factor::Mbu => {
                "add a batched decode run with long contexts (matrix row D: 2048 in, 1024 out, concurrency 8), whose steps read the KV cache"
            }
            Factor::StepOverhead => {
                "add a single-stream run with short prompts (matrix row A) beside a long-prefill run (row B), so per-step time separates from compute"
            }
            Factor::ReqOverhead => {
                "add a saturation run (matrix row D, or concurrency 32 or more), where steps carry many requests"
            }
        }
    }
}

/// The work of one engine step, at peak rates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepWork {
    /// FLOPs / peak FLOP/s: the compute time at MFU 1, seconds.
    pub t_c0: f64,
    /// Bytes / peak B/s: the memory time at MBU 1, seconds.
    pub t_m0: f64,
    /// Planned requests.
    pub requests: f64,
    /// All-reduce time (not fitted), seconds.
    pub t_ar: f64,
}

/// Factor values, in [`Factor::ALL`] order: MFU, MBU (fractions), overheads (seconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Factors {
    pub values: [f64; 4],
    /// Soft-roofline exponent (not fitted).
    pub softroof_p: f64,
}

impl Factors {
    /// The value of one factor.
    pub fn get(&self, f: Factor) -> f64 {
        self.values[index(f)]
    }

    /// One step's duration.
    pub fn step(&self, w: &StepWork) -> f64 {
        let [mfu, mbu, ovh, req] = self.values;
        let t_c = w.t_c0 / mfu;
        let t_m = w.t_m0 / mbu;
        ovh + w.requests * req + soft_roofline(t_c, t_m, self.softroof_p) + w.t_ar
    }

    /// `∂ step / ∂ ln(factor)` for every factor.
    pub fn step_gradient(&self, w: &StepWork) -> [f64; 4] {
        let [mfu, mbu, ovh, req] = self.values;
        let t_c = w.t_c0 / mfu;
        let t_m = w.t_m0 / mbu;
        let (dc, dm) = soft_roofline_partials(t_c, t_m, self.softroof_p);
        // t_c = t_c0 / e^φ, so ∂t_c/∂φ = −t_c.
        [-t_c * dc, -t_m * dm, ovh, w.requests * req]
    }
}

fn index(f: Factor) -> usize {
    match f {
        Factor::Mfu => 0,
        Factor::Mbu => 1,
        Factor::StepOverhead => 2,
        Factor::ReqOverhead => 3,
    }
}

/// `(t_c^p + t_m^p)^(1/p)`; `p = ∞` is `max` (the simulator's combiner).
pub fn soft_roofline(t_c: f64, t_m: f64, p: f64) -> f64 {
    let hi = t_c.max(t_m);
    if hi <= 0.0 || p.is_infinite() {
        return hi;
    }
    let lo = t_c.min(t_m);
    hi * (1.0 + (lo / hi).powf(p)).powf(1.0 / p)
}

fn soft_roofline_partials(t_c: f64, t_m: f64, p: f64) -> (f64, f64) {
    let g = soft_roofline(t_c, t_m, p);
    if g <= 0.0 {
        return (0.0, 0.0);
    }
    if p.is_infinite() {
        return if t_c >= t_m { (1.0, 0.0) } else { (0.0, 1.0) };
    }
    ((t_c / g).powf(p - 1.0), (t_m / g).powf(p - 1.0))
}

/// What an observation measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    /// Time to first token: the request's prefill steps.
    Ttft,
    /// One inter-token gap: the decode step(s) between two token events.
    Itl,
}

/// One measured interval and the steps it spans.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    pub metric: Metric,
    /// Index of the run (result file) it came from.
    pub run: usize,
    /// Index of the request within its run.
    pub request: usize,
    /// Measured seconds.
    pub observed: f64,
    /// Steps (indices into [`Dataset::steps`]).
    pub steps: Vec<u32>,
    /// Weight in the fit: 1 over the number of observations spanning the same steps (those
    /// are one measurement); otherwise every observation's relative noise is alike.
    pub weight: f64,
    /// Observations in its (run, metric) class.
    pub class_size: usize,
}

/// Steps and the observations over them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Dataset {
    pub steps: Vec<StepWork>,
    pub observations: Vec<Observation>,
}

impl Dataset {
    /// The predicted duration of one observation.
    pub fn predict(&self, o: &Observation, f: &Factors) -> f64 {
        o.steps
            .iter()
            .map(|&s| f.step(&self.steps[s as usize]))
            .sum()
    }

    /// Sets each observation's weight and records the size of its (run, metric) class.
    ///
    /// Observations over the very same steps share those steps' noise (at saturation, every
    /// request in flight sees the same gap): they are one measurement, so they share one
    /// weight. Counted per observation, one step's jitter in a batch of 64 would pull as hard
    /// as 64 independent steps, and the standard errors would count it 64 times.
    pub fn balance_weights(&mut self) {
        let mut counts = std::collections::HashMap::new();
        let mut spans: std::collections::HashMap<(usize, Metric, &[u32]), usize> =
            std::collections::HashMap::new();
        for o in &self.observations {
            *counts.entry((o.run, o.metric)).or_insert(0usize) += 1;
            *spans.entry((o.run, o.metric, &o.steps)).or_insert(0) += 1;
        }
        let weights: Vec<f64> = self
            .observations
            .iter()
            .map(|o| 1.0 / spans[&(o.run, o.metric, o.steps.as_slice())] as f64)
            .collect();
        for (o, w) in self.observations.iter_mut().zip(weights) {
            o.class_size = counts[&(o.run, o.metric)];
            o.weight = w;
        }
    }

    /// Only the observations of the runs `keep` says yes to (steps shared).
    pub fn subset(&self, keep: impl Fn(usize) -> bool) -> Dataset {
        let mut d = Dataset {
            steps: self.steps.clone(),
            observations: self
                .observations
                .iter()
                .filter(|o| keep(o.run))
                .cloned()
                .collect(),
        };
        d.balance_weights();
        d
    }
}

/// The outcome of a fit.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    pub factors: Factors,
    /// Each factor's relative standard error, assuming a relative noise of [`MIN_NOISE`] on
    /// every observation, in [`Factor::ALL`] order.
    pub relative_se: [f64; 4],
    /// Weighted RMS of the log residuals `ln(pred/obs)` after the fit.
    pub rms_residual: f64,
    /// Fitted factors that ended at a bound of their range (MFU or MBU at 1): the runs ask
    /// for more than the catalog's peak, so the value is a limit, not an estimate.
    pub at_bound: Vec<Factor>,
}

/// The relative noise assumed per observation when judging identifiability: a factor must
/// stand out of the per-cent-level spread real runs have.
pub const MIN_NOISE: f64 = 0.01;
/// Observations of one (run, metric) class count as at most this many independent ones for
/// the standard errors: errors within one run are correlated (one server state, one model
/// mismatch), so thousands of gaps of one run must not make any factor look identified.
pub const MAX_INDEPENDENT_PER_CLASS: f64 = 25.0;
/// Largest relative standard error of an identified factor.
pub const MAX_RELATIVE_SE: f64 = 0.25;

/// Why a fit was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum FitError {
    /// Nothing to fit.
    NoObservations,
    /// Some factors are not identified by the data: each with its relative standard error.
    Unidentified(Vec<(Factor, f64)>),
}

/// Fits every factor, starting from `start`.
#[cfg(test)]
pub fn fit(data: &Dataset, start: &Factors) -> Result<Fit, FitError> {
    fit_holding(data, start, &[])
}

/// Keeps the `held` factors' rows of a normal-equations system out of it: their unknowns come
/// out 0 (no step), and they neither borrow nor lend information.
fn hold(a: &mut Matrix, b: Option<&mut Vec<f64>>, held: &[Factor]) {
    let n = a.len();
    for &f in held {
        let i = index(f);
        for j in 0..n {
            a[i][j] = 0.0;
            a[j][i] = 0.0;
        }
        a[i][i] = 1.0;
    }
    if let Some(b) = b {
        for &f in held {
            b[index(f)] = 0.0;
        }
    }
}

/// Fits every factor but the `held` ones, which stay at their `start` values (a factor no run
/// of the engine can separate from another, as the per-step overhead from the weight reads of
/// a CPU engine whose KV reads are negligible).
pub fn fit_holding(data: &Dataset, start: &Factors, held: &[Factor]) -> Result<Fit, FitError> {
    if data.observations.is_empty() {
        return Err(FitError::NoObservations);
    }
    let n = Factor::ALL.len();
    let at = |phi: &[f64]| Factors {
        values: [phi[0].exp(), phi[1].exp(), phi[2].exp(), phi[3].exp()],
        softroof_p: start.softroof_p,
    };
    let (phi, cost) = global_descent(data, start, &at, held);
    let factors = at(&phi);
    let at_bound: Vec<Factor> = Factor::ALL
        .iter()
        .enumerate()
        .filter(|(i, f)| *i < 2 && !held.contains(f) && phi[*i] >= -BOUND_TOLERANCE)
        .map(|(_, f)| *f)
        .collect();
    let total_weight: f64 = data.observations.iter().map(|o| o.weight).sum();
    let rms_residual = (cost / total_weight.max(1e-300)).sqrt();
    // Identifiability is a property of the runs' design, not of how well this fit went: the
    // same assumed noise is used whatever the residual.
    let noise = MIN_NOISE;
    // Each class counts as its weight (distinct measurements), capped.
    let mut class_weight = std::collections::HashMap::new();
    for o in &data.observations {
        *class_weight.entry((o.run, o.metric)).or_insert(0.0) += o.weight;
    }
    let (mut jtj, _) = normal_equations_with(data, &factors, |o| {
        let total: f64 = class_weight[&(o.run, o.metric)];
        o.weight * total.min(MAX_INDEPENDENT_PER_CLASS) / total.max(1e-300)
    });
    // A whisper of ridge keeps the inverse defined when a factor leaves no trace at all, so
    // the others still get their own standard errors.
    let trace: f64 = (0..n).map(|i| jtj[i][i]).sum();
    for i in 0..n {
        jtj[i][i] += 1e-12 * trace.max(1e-300);
    }
    hold(&mut jtj, None, held);
    let relative_se = match invert(jtj) {
        Some(inv) => {
            let mut se = [0.0; 4];
            for i in 0..n {
                se[i] = noise * inv[i][i].max(0.0).sqrt();
            }
            for &f in held {
                se[index(f)] = 0.0;
            }
            se
        }
        None => [f64::INFINITY; 4],
    };
    let unidentified: Vec<(Factor, f64)> = Factor::ALL
        .iter()
        .zip(relative_se)
        .filter(|(f, _)| !held.contains(f))
        .filter(|(_, se)| se.is_nan() || *se > MAX_RELATIVE_SE)
        .map(|(f, se)| (*f, se))
        .collect();
    if !unidentified.is_empty() {
        return Err(FitError::Unidentified(unidentified));
    }
    Ok(Fit {
        factors,
        relative_se,
        rms_residual,
        at_bound,
    })
}

/// A log-factor this close to 0 (a fraction within 0.1 % of 1) is at its bound.
const BOUND_TOLERANCE: f64 = 1e-3;
/// Log-spaced MFU and MBU values tried as starting points, from 1 % of peak to peak.
const GRID_POINTS: usize = 9;
const GRID_LOW: f64 = 0.01;
/// Descents started from the best grid points (besides the one from `start`).
const GRID_STARTS: usize = 3;

/// The lowest-cost point of several descents: one from `start`, and one from each of the
/// [`GRID_STARTS`] best points of a log grid over MFU × MBU (overheads at `start`).
///
/// The soft roofline makes the cost non-convex in MFU and MBU: a step's time can be explained
/// as compute-bound or as memory-bound, and a descent from the catalog's values can settle in
/// the wrong one with a factor pressed against 1 while a far better fit lies elsewhere.
fn global_descent(
    data: &Dataset,
    start: &Factors,
    at: &impl Fn(&[f64]) -> Factors,
    held: &[Factor],
) -> (Vec<f64>, f64) {
    // MFU and MBU start within their range, or a start above peak that already fits would
    // be returned unchanged.
    let phi0: Vec<f64> = start
        .values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let phi = v.max(1e-12).ln();
            if i < 2 && !held.contains(&Factor::ALL[i]) {
                phi.min(0.0)
            } else {
                phi
            }
        })
        .collect();
    let axis = |f: Factor| -> Vec<f64> {
        if held.contains(&f) {
            return vec![phi0[index(f)]];
        }
        let lo = GRID_LOW.ln();
        (0..GRID_POINTS)
            .map(|k| lo * (1.0 - k as f64 / (GRID_POINTS - 1) as f64))
            .collect()
    };
    let mut grid: Vec<(f64, Vec<f64>)> = Vec::new();
    for &c in &axis(Factor::Mfu) {
        for &m in &axis(Factor::Mbu) {
            let mut phi = phi0.clone();
            phi[index(Factor::Mfu)] = c;
            phi[index(Factor::Mbu)] = m;
            let cost = cost_of(data, &at(&phi));
            if cost.is_finite() {
                grid.push((cost, phi));
            }
        }
    }
    grid.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut best = descend(data, phi0, at, held);
    for (_, phi) in grid.into_iter().take(GRID_STARTS) {
        let candidate = descend(data, phi, at, held);
        if candidate.1 < best.1 {
            best = candidate;
        }
    }
    best
}

/// The smallest log-overhead (e^-30 s: nothing).
const LOG_FLOOR: f64 = -30.0;

/// Levenberg–Marquardt from `phi` (log-factors): the point reached and its cost.
fn descend(
    data: &Dataset,
    mut phi: Vec<f64>,
    at: &impl Fn(&[f64]) -> Factors,
    held: &[Factor],
) -> (Vec<f64>, f64) {
    let n = Factor::ALL.len();
    let mut lambda = 1e-3;
    let mut cost = cost_of(data, &at(&phi));
    let mut converged = false;
    for _ in 0..200 {
        if converged {
            break;
        }
        let (jtj, mut jtr) = normal_equations(data, &at(&phi));
        // A factor at its bound that the descent would push further out is held for this
        // step: clamping it after a joint step would leave the others with a step computed
        // for a move that never happens, and the descent would stall at the bound.
        let mut active: Vec<Factor> = held.to_vec();
        for (i, f) in Factor::ALL.iter().enumerate() {
            let outward = (i < 2 && phi[i] >= -1e-12 && jtr[i] < 0.0)
                || (i >= 2 && phi[i] <= LOG_FLOOR + 1e-12 && jtr[i] > 0.0);
            if outward && !active.contains(f) {
                active.push(*f);
            }
        }
        let mut improved = false;
        for _ in 0..30 {
            let mut a = jtj.clone();
            for i in 0..n {
                a[i][i] += lambda * jtj[i][i].max(1e-12);
            }
            hold(&mut a, Some(&mut jtr), &active);
            let Some(delta) = solve(a, jtr.iter().map(|v| -v).collect()) else {
                lambda *= 10.0;
                continue;
            };
            let trial: Vec<f64> = phi
                .iter()
                .zip(&delta)
                .map(|(p, d)| p + d.clamp(-2.0, 2.0))
                .collect();
            // MFU and MBU are fractions of peak.
            let trial: Vec<f64> = trial
                .iter()
                .enumerate()
                .map(|(i, &v)| if i < 2 { v.min(0.0) } else { v.max(LOG_FLOOR) })
                .collect();
            let c = cost_of(data, &at(&trial));
            if c < cost {
                let step: f64 = trial
                    .iter()
                    .zip(&phi)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f64::max);
                phi = trial;
                converged = (cost - c) <= 1e-12 * cost || step < 1e-9;
                cost = c;
                lambda = (lambda / 10.0).max(1e-12);
                improved = true;
                break;
            }
            lambda *= 10.0;
        }
        if !improved {
            break;
        }
    }
    (phi, cost)
}

/// One observation's residual, `ln(pred/obs)`: relative (a 100 ms TTFT and a 7 ms gap weigh
/// alike) and symmetric. `pred/obs − 1` is not: it can cost at most 1 for a prediction too
/// short but without limit for one too long, so on a real clock, where a few gaps come out
/// far longer than the engine's step (the server descheduled, tokens delivered late), the
/// fit bought those few with predictions too short for every other observation and pressed
/// MFU or MBU against 1.
fn residual(pred: f64, observed: f64) -> f64 {
    (pred.max(1e-300) / observed.max(1e-300)).ln()
}

/// `Σ w·ln(pred/obs)²`.
fn cost_of(data: &Dataset, f: &Factors) -> f64 {
    data.observations
        .iter()
        .map(|o| {
            let r = residual(data.predict(o, f), o.observed);
            o.weight * r * r
        })
        .sum()
}

type Matrix = Vec<Vec<f64>>;

/// `JᵀWJ` and `JᵀWr` over the log-factors.
fn normal_equations(data: &Dataset, f: &Factors) -> (Matrix, Vec<f64>) {
    normal_equations_with(data, f, |o| o.weight)
}

fn normal_equations_with(
    data: &Dataset,
    f: &Factors,
    weight: impl Fn(&Observation) -> f64,
) -> (Matrix, Vec<f64>) {
    let n = Factor::ALL.len();
    let mut jtj = vec![vec![0.0; n]; n];
    let mut jtr = vec![0.0; n];
    for o in &data.observations {
        let mut pred = 0.0;
        let mut grad = [0.0; 4];
        for &s in &o.steps {
            let w = &data.steps[s as usize];
            pred += f.step(w);
            for (g, d) in grad.iter_mut().zip(f.step_gradient(w)) {
                *g += d;
            }
        }
        let r = residual(pred, o.observed);
        let w = weight(o);
        let pred = pred.max(1e-300);
        for i in 0..n {
            let ji = grad[i] / pred;
            jtr[i] += w * ji * r;
            for j in 0..n {
                jtj[i][j] += w * ji * grad[j] / pred;
            }
        }
    }
    (jtj, jtr)
}

/// Gaussian elimination with partial pivoting; `None` when singular.
fn solve(mut a: Matrix, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    let scale = a
        .iter()
        .flat_map(|r| r.iter())
        .fold(0.0f64, |m, v| m.max(v.abs()));
    for col in 0..n {
        let pivot = (col..n).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() <= 1e-13 * scale.max(1e-300) {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        for row in col + 1..n {
            let k = a[row][col] / a[col][col];
            for c in col..n {
                a[row][c] -= k * a[col][c];
            }
            b[row] -= k * b[col];
        }
    }
    let mut x = vec![0.0; n];
    for row in (0..n).rev() {
        let s: f64 = (row + 1..n).map(|c| a[row][c] * x[c]).sum();
        x[row] = (b[row] - s) / a[row][row];
    }
    Some(x)
}

fn invert(a: Matrix) -> Option<Matrix> {
    let n = a.len();
    let mut cols = Vec::with_capacity(n);
    for i in 0..n {
        let mut e = vec![0.0; n];
        e[i] = 1.0;
        cols.push(solve(a.clone(), e)?);
    }
    Some(
        (0..n)
            .map(|r| (0..n).map(|c| cols[c][r]).collect())
            .collect(),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn truth() -> Factors {
        Factors {
            values: [0.45, 0.62, 1.4e-3, 30e-6],
            softroof_p: 1.5,
        }
    }

    /// Synthetic steps of an 8 B model on an H100-like GPU: prefills of `prompt` tokens and
    /// decode steps of `batch` requests on `context` tokens.
    fn prefill(prompt: f64) -> StepWork {
        StepWork {
            t_c0: prompt * 16e9 / 989e12,
            t_m0: (15e9 + prompt * 131_072.0) / 3.35e12,
            requests: 1.0,
            t_ar: 0.0,
        }
    }

    fn decode(batch: f64, context: f64) -> StepWork {
        StepWork {
            t_c0: batch * 16e9 / 989e12,
            t_m0: (15e9 + batch * context * 131_072.0) / 3.35e12,
            requests: batch,
            t_ar: 0.0,
        }
    }

    fn dataset(works: &[(Metric, usize, StepWork)]) -> Dataset {
        let f = truth();
        let mut d = Dataset::default();
        for (i, (metric, run, w)) in works.iter().enumerate() {
            d.steps.push(*w);
            d.observations.push(Observation {
                metric: *metric,
                run: *run,
                request: i,
                observed: f.step(w),
                steps: vec![i as u32],
                weight: 1.0,
                class_size: 1,
            });
        }
        d.balance_weights();
        d
    }

    fn rich() -> Dataset {
        let mut works = Vec::new();
        for p in [128.0, 256.0, 2048.0, 4096.0] {
            works.push((Metric::Ttft, 0, prefill(p)));
        }
        for b in [1.0, 8.0, 32.0, 64.0] {
            for c in [300.0, 1500.0, 3000.0] {
                works.push((Metric::Itl, 1, decode(b, c)));
            }
        }
        dataset(&works)
    }

    fn default_start() -> Factors {
        Factors {
            values: [0.6, 0.78, 1.15e-3, 4e-6],
            softroof_p: 1.5,
        }
    }

    #[test]
    fn recovers_every_factor_from_varied_steps() {
        let fit = fit(&rich(), &default_start()).unwrap();
        for (got, want) in fit.factors.values.iter().zip(truth().values) {
            assert!((got / want - 1.0).abs() < 1e-4, "{got} vs {want}");
        }
        assert!(fit.rms_residual < 1e-6);
    }

    #[test]
    fn batch_one_runs_cannot_identify_the_request_overhead() {
        let mut works = Vec::new();
        for p in [256.0, 2048.0] {
            works.push((Metric::Ttft, 0, prefill(p)));
        }
        for c in [300.0, 800.0, 1200.0] {
            works.push((Metric::Itl, 0, decode(1.0, c)));
        }
        let Err(FitError::Unidentified(list)) = fit(&dataset(&works), &default_start()) else {
            panic!("expected a refusal");
        };
        assert!(
            list.iter().any(|(f, _)| *f == Factor::ReqOverhead),
            "{list:?}"
        );
    }

    #[test]
    fn short_prompts_alone_cannot_identify_mfu() {
        let mut works = Vec::new();
        for _ in 0..4 {
            works.push((Metric::Ttft, 0, prefill(16.0)));
        }
        for b in [1.0, 8.0, 32.0, 64.0] {
            for c in [300.0, 1500.0, 3000.0] {
                works.push((Metric::Itl, 1, decode(b, c)));
            }
        }
        let Err(FitError::Unidentified(list)) = fit(&dataset(&works), &default_start()) else {
            panic!("expected a refusal");
        };
        assert!(list.iter().any(|(f, _)| *f == Factor::Mfu), "{list:?}");
        assert!(Factor::Mfu.hint().contains("row B"));
    }

    #[test]
    fn gradient_matches_finite_differences() {
        let f = truth();
        let w = prefill(700.0);
        let g = f.step_gradient(&w);
        for i in 0..4 {
            let mut up = f;
            up.values[i] *= (1e-6f64).exp();
            let num = (up.step(&w) - f.step(&w)) / 1e-6;
            assert!(
                (num - g[i]).abs() <= 1e-5 * num.abs().max(1e-9),
                "{i}: {num} vs {}",
                g[i]
            );
        }
    }

    /// A dataset whose observations carry a multiplicative error each, as jitter gives.
    fn noisy(copies_of_first: usize) -> Dataset {
        let mut d = rich();
        let noise = [1.03, 0.98, 1.01, 0.97, 1.02, 0.99];
        for (i, o) in d.observations.iter_mut().enumerate() {
            o.observed *= noise[i % noise.len()];
        }
        let first = d.observations[4].clone();
        for _ in 1..copies_of_first {
            d.observations.push(first.clone());
        }
        d.balance_weights();
        d
    }

    #[test]
    fn observations_over_the_same_steps_share_one_weight() {
        let d = noisy(8);
        let span = &d.observations[4].steps;
        let same: Vec<f64> = d
            .observations
            .iter()
            .filter(|o| &o.steps == span)
            .map(|o| o.weight)
            .collect();
        assert_eq!(same.len(), 8);
        assert!(same.iter().all(|w| (w - 0.125).abs() < 1e-12), "{same:?}");
        assert_eq!(d.observations[0].weight, 1.0);
    }

    #[test]
    fn one_step_seen_by_many_requests_pulls_as_one_measurement() {
        // Eight requests reporting one noisy step must not move the factors away from the
        // fit that step gives once.
        let once = fit(&noisy(1), &default_start()).unwrap();
        let many = fit(&noisy(8), &default_start()).unwrap();
        for (a, b) in once.factors.values.iter().zip(many.factors.values) {
            assert!((a / b - 1.0).abs() < 1e-6, "{a} vs {b}");
        }
        for (a, b) in once.relative_se.iter().zip(many.relative_se) {
            assert!((a / b - 1.0).abs() < 1e-9, "{a} vs {b}");
        }
    }

    #[test]
    fn a_held_factor_stays_put_and_the_others_absorb_it() {
        // Batch-1 decodes at one context: the overheads and the weight reads cannot be told
        // apart, so the fit is refused; holding the overheads lets MBU take the rest.
        let mut works = Vec::new();
        for p in [128.0, 2048.0, 4096.0] {
            works.push((Metric::Ttft, 0, prefill(p)));
        }
        for _ in 0..3 {
            works.push((Metric::Itl, 1, decode(1.0, 500.0)));
        }
        let data = dataset(&works);
        let Err(FitError::Unidentified(list)) = fit(&data, &default_start()) else {
            panic!("expected a refusal");
        };
        assert!(
            list.iter().any(|(f, _)| *f == Factor::StepOverhead),
            "{list:?}"
        );
        let held = [Factor::StepOverhead, Factor::ReqOverhead];
        let fitted = fit_holding(&data, &default_start(), &held).unwrap();
        assert_eq!(
            fitted.factors.get(Factor::StepOverhead),
            default_start().get(Factor::StepOverhead)
        );
        assert_eq!(fitted.relative_se[index(Factor::StepOverhead)], 0.0);
        // The decode steps are still predicted: MBU moved to make up the overhead's difference.
        let d = &data.observations[3];
        let got = data.predict(d, &fitted.factors) / d.observed - 1.0;
        assert!(got.abs() < 0.01, "{got}");
        assert!(fitted.factors.get(Factor::Mbu) < truth().get(Factor::Mbu));
    }

    #[test]
    fn a_spread_of_timings_does_not_bias_the_fit_towards_the_shortest() {
        // A real clock on a busy machine: every observation is off by a factor of 2 either
        // way, as often long as short. Relative errors `pred/obs − 1` cost at most 1 for a
        // prediction too short and without limit for one too long, so they fitted the
        // shortest observations and pressed MFU and MBU towards 1; log ratios stay centred.
        let mut d = rich();
        for (i, o) in d.observations.iter_mut().enumerate() {
            o.observed *= if i % 2 == 0 { 2.0 } else { 0.5 };
        }
        let held = [Factor::StepOverhead, Factor::ReqOverhead];
        let fit = fit_holding(&d, &default_start(), &held).unwrap();
        assert!(fit.at_bound.is_empty(), "{:?}", fit.at_bound);
        for f in [Factor::Mfu, Factor::Mbu] {
            let (got, want) = (fit.factors.get(f), truth().get(f));
            assert!((got / want - 1.0).abs() < 0.15, "{f:?}: {got} vs {want}");
        }
    }

    #[test]
    fn a_descent_started_at_the_bounds_reaches_a_far_interior_optimum() {
        // Runs on a slow machine: MFU 2 % and MBU 5 % of the catalog's peaks. A start at the
        // bounds (MFU = MBU = 1), two orders of magnitude away, must still find them.
        let slow = Factors {
            values: [0.02, 0.05, 1.4e-3, 30e-6],
            softroof_p: 1.5,
        };
        let mut d = rich();
        for o in d.observations.iter_mut() {
            o.observed = slow.step(&d.steps[o.steps[0] as usize]);
        }
        let start = Factors {
            values: [1.0, 1.0, 1.15e-3, 4e-6],
            softroof_p: 1.5,
        };
        let held = [Factor::StepOverhead, Factor::ReqOverhead];
        let (phi, _) = descend(&d, start.values.map(f64::ln).to_vec(), &exp_all, &held);
        let fit = fit_holding(&d, &start, &held).unwrap();
        assert!(fit.at_bound.is_empty(), "{:?}", fit.at_bound);
        for f in [Factor::Mfu, Factor::Mbu] {
            let i = index(f);
            let (got, want) = (fit.factors.values[i], slow.values[i]);
            // The overheads held at their (wrong) start leave a small bias, nothing more.
            assert!((got / want - 1.0).abs() < 0.1, "{f:?}: {got} vs {want}");
            // And the plain descent agrees: no factor is left pressed against 1.
            assert!(phi[i] < -1.0, "{f:?} from the bounds: {}", phi[i].exp());
        }
    }

    fn exp_all(phi: &[f64]) -> Factors {
        Factors {
            values: [phi[0].exp(), phi[1].exp(), phi[2].exp(), phi[3].exp()],
            softroof_p: 1.5,
        }
    }

    #[test]
    fn a_factor_the_runs_push_past_peak_is_reported_at_its_bound() {
        // A catalog peak half the machine's: the data want MFU 2, the fit stops at 1 and says so.
        let fast = Factors {
            values: [2.0, 0.62, 1.4e-3, 30e-6],
            softroof_p: 1.5,
        };
        let mut d = rich();
        for o in d.observations.iter_mut() {
            o.observed = fast.step(&d.steps[o.steps[0] as usize]);
        }
        let held = [Factor::StepOverhead, Factor::ReqOverhead];
        let start = Factors {
            values: [0.6, 0.78, 1.4e-3, 30e-6],
            softroof_p: 1.5,
        };
        let fit = fit_holding(&d, &start, &held).unwrap();
        assert_eq!(fit.at_bound, vec![Factor::Mfu]);
        assert_eq!(fit.factors.get(Factor::Mfu), 1.0);
    }

    #[test]
    fn residuals_are_symmetric_in_ratio() {
        assert!((residual(2.0, 1.0) + residual(1.0, 2.0)).abs() < 1e-12);
        assert_eq!(residual(3.0, 3.0), 0.0);
    }

    #[test]
    fn empty_data_is_refused() {
        assert_eq!(
            fit(&Dataset::default(), &default_start()),
            Err(FitError::NoObservations)
        );
    }
}
