//! Fidelity against published real-GPU figures (docs/simulator.md, "Fidelity against published
//! figures"): the fixture of published points, each run in virtual time the way its source
//! ran the real engine, and the table of published against simulated figures. [`heldout`]
//! predicts each source with the factors fitted on it reverted (leave one source out).

pub mod heldout;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;
use servebench_roofline::Catalog;

use crate::engine::NewRequest;
use crate::engine_profile::{EngineKind, ProfileFactors};
use crate::virtual_time::{run_virtual, RequestTrace, VirtualArrival, VirtualWorkload};
use crate::{SimArgs, SimError};

/// The built-in fixture of published points.
pub const PUBLISHED_POINTS: &str = include_str!("../fidelity/published_points.toml");
/// Catalog entries (GPUs, models) only the fixture's points need.
pub const FIDELITY_CATALOG: &str = include_str!("../fidelity/catalog.toml");
/// Relative error a point accepts on each metric unless it states its own.
pub const DEFAULT_TOLERANCE: f64 = 0.15;
/// Markers in docs/simulator.md between which the table is written.
pub const TABLE_BEGIN: &str = "<!-- fidelity-table:begin -->";
pub const TABLE_END: &str = "<!-- fidelity-table:end -->";

/// Where a group of points comes from.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    pub id: String,
    pub title: String,
    #[serde(rename = "where")]
    pub location: String,
    pub date: String,
    pub method: String,
}

/// Figures of one point; each is optional because sources publish different ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Figures {
    pub output_tok_s: Option<f64>,
    pub ttft_mean_ms: Option<f64>,
    pub ttft_median_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub itl_mean_ms: Option<f64>,
    pub e2e_mean_ms: Option<f64>,
    pub batch_ms: Option<f64>,
}

impl Figures {
    /// `(name, value)` of every figure present, in a fixed order.
    pub fn present(&self) -> Vec<(&'static str, f64)> {
        [
            ("output_tok_s", self.output_tok_s),
            ("ttft_mean_ms", self.ttft_mean_ms),
            ("ttft_median_ms", self.ttft_median_ms),
            ("ttft_p99_ms", self.ttft_p99_ms),
            ("itl_mean_ms", self.itl_mean_ms),
            ("e2e_mean_ms", self.e2e_mean_ms),
            ("batch_ms", self.batch_ms),
        ]
        .into_iter()
        .filter_map(|(n, v)| v.map(|v| (n, v)))
        .collect()
    }

    fn get(&self, name: &str) -> Option<f64> {
        self.present()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
    }
}

/// One published measurement and how it is run in the simulator.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Point {
    pub id: String,
    pub source: String,
    pub engine: String,
    pub engine_version: String,
    pub model: String,
    pub gpu: String,
    pub gpus: u32,
    pub tp: u32,
    pub weights_dtype: String,
    pub kv_dtype: String,
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// The load as the source ran it.
    pub load: String,
    /// `servebench sim` flags of the simulated deployment.
    pub sim: String,
    /// Requests simulated, all intended at time 0 unless `request_rate` paces them.
    pub requests: u32,
    /// Client-side cap on requests in flight (none = all at once).
    pub concurrency: Option<u32>,
    /// Mean send rate (requests/s) of a source that paced its requests (`--request-rate`):
    /// request `i` is intended at `i / request_rate`. The source's Poisson draw cannot be
    /// reproduced, so the sends are evenly spaced at its mean rate; absent = all at time 0.
    pub request_rate: Option<f64>,
    /// Mean output tokens per request when the source let requests stop naturally (no
    /// `--ignore-eos`): the requests then stop at a log-normal natural length (the simulator's
    /// `--eos-len-sigma`) whose median is solved so the mean of `min(length, output_tokens)`
    /// is this; absent = every request generates exactly `output_tokens`.
    pub output_mean_tokens: Option<f64>,
    pub published: Figures,
    pub tolerance: Option<f64>,
    /// Per-figure bounds that replace `tolerance` for one metric (a known, explained miss).
    #[serde(default)]
    pub tolerances: std::collections::BTreeMap<String, f64>,
    pub note: Option<String>,
}

/// The whole fixture.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fixture {
    #[serde(rename = "source")]
    pub sources: Vec<Source>,
    #[serde(rename = "point")]
    pub points: Vec<Point>,
}

impl Fixture {
    /// The built-in fixture.
    pub fn builtin() -> Result<Fixture, SimError> {
        Fixture::parse(PUBLISHED_POINTS, "the built-in published points")
    }

    /// Parses and checks a fixture; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Fixture, SimError> {
        let fixture: Fixture =
            toml::from_str(text).map_err(|e| SimError::Config(format!("in {origin}: {e}")))?;
        let bad =
            |id: &str, what: String| SimError::Config(format!("in {origin}, point '{id}': {what}"));
        for p in &fixture.points {
            if !fixture.sources.iter().any(|s| s.id == p.source) {
                return Err(bad(&p.id, format!("source '{}' is not listed", p.source)));
            }
            if !["vllm", "sglang", "trtllm"].contains(&p.engine.as_str()) {
                return Err(bad(
                    &p.id,
                    format!("engine '{}' is not vllm, sglang or trtllm", p.engine),
                ));
            }
            if p.requests == 0 || p.input_tokens == 0 || p.output_tokens == 0 {
                return Err(bad(
                    &p.id,
                    "requests, input_tokens and output_tokens must be positive".into(),
                ));
            }
            if let Some(mean) = p.output_mean_tokens {
                if !(mean.is_finite() && mean >= 1.0 && mean < f64::from(p.output_tokens)) {
                    return Err(bad(
                        &p.id,
                        format!(
                            "output_mean_tokens must be at least 1 and below output_tokens ({}), got {mean}",
                            p.output_tokens
                        ),
                    ));
                }
            }
            if p.concurrency == Some(0) {
                return Err(bad(&p.id, "concurrency must be positive".into()));
            }
            if let Some(rate) = p.request_rate {
                if !(rate.is_finite() && rate > 0.0) {
                    return Err(bad(
                        &p.id,
                        format!("request_rate must be positive, got {rate}"),
                    ));
                }
            }
            if p.published.present().is_empty() {
                return Err(bad(&p.id, "publishes no figure".into()));
            }
            for t in p.tolerance.iter().chain(p.tolerances.values()) {
                if !(t.is_finite() && *t > 0.0) {
                    return Err(bad(&p.id, format!("tolerance must be positive, got {t}")));
                }
            }
            for metric in p.tolerances.keys() {
                if p.published.get(metric).is_none() {
                    return Err(bad(
                        &p.id,
                        format!("a tolerance names '{metric}', which the point does not publish"),
                    ));
                }
            }
        }
        Ok(fixture)
    }
}

/// One figure compared.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub metric: &'static str,
    pub published: f64,
    pub simulated: f64,
    /// The relative error this figure may have.
    pub tolerance: f64,
}

impl Comparison {
    /// `(simulated − published) / published`.
    pub fn error(&self) -> f64 {
        (self.simulated - self.published) / self.published
    }

    /// Within its tolerance.
    pub fn passes(&self) -> bool {
        self.error().abs() <= self.tolerance
    }
}

/// The outcome of one point.
#[derive(Debug, Clone)]
pub struct PointOutcome {
    pub id: String,
    pub source: String,
    pub engine: String,
    pub comparisons: Vec<Comparison>,
}

impl PointOutcome {
    /// The largest absolute relative error of the point.
    pub fn worst_error(&self) -> f64 {
        self.comparisons
            .iter()
            .map(|c| c.error().abs())
            .fold(0.0, f64::max)
    }

    /// Every figure within its tolerance.
    pub fn passes(&self) -> bool {
        self.comparisons.iter().all(Comparison::passes)
    }
}

/// The catalog the points run against: the built-in one plus the fixture's entries.
pub fn fidelity_catalog() -> Result<Catalog, SimError> {
    let mut catalog = Catalog::builtin();
    catalog.merge_toml_str(FIDELITY_CATALOG, "the fidelity catalog")?;
    Ok(catalog)
}

/// Runs one point in virtual time (jitter off; natural stops off, so every request generates
/// exactly `output_tokens` as the sources' fixed-length benchmarks do, unless the point gives
/// `output_mean_tokens`).
pub fn run_point(point: &Point, catalog: &Catalog) -> Result<PointOutcome, SimError> {
    run_point_with(point, catalog, &[])
}

/// [`run_point`] with `engine_factors` replacing the fitted factors of the named engines'
/// profiles (the held-out runs of [`heldout`]).
pub(crate) fn run_point_with(
    point: &Point,
    catalog: &Catalog,
    engine_factors: &[(EngineKind, ProfileFactors)],
) -> Result<PointOutcome, SimError> {
    let spec = format!("{} --jitter 0", point.sim);
    let mut args = SimArgs::parse_spec(&spec)?;
    if let Some((_, factors)) = engine_factors
        .iter()
        .find(|(kind, _)| Some(*kind) == args.engine)
    {
        args.profile_factors = *factors;
    }
    let natural_stops = point.output_mean_tokens.is_some();
    if let Some(mean) = point.output_mean_tokens {
        args.eos_len_median = median_for_capped_mean(mean, point.output_tokens, args.eos_len_sigma);
    }
    let resolved = args
        .resolve_with(catalog.clone())
        .map_err(|e| SimError::Config(format!("point '{}': {e}", point.id)))?;
    let vocab = resolved.engine.deployment.model().vocab_size;
    let gap_ns = point.request_rate.map_or(0.0, |rate| 1e9 / rate);
    let arrivals = (0..u64::from(point.requests))
        .map(|id| VirtualArrival {
            intended_ns: (id as f64 * gap_ns).round() as u64,
            request: NewRequest {
                id,
                prompt: random_prompt(id, point.input_tokens, vocab),
                max_tokens: point.output_tokens,
                min_tokens: 0,
                ignore_eos: !natural_stops,
                seed: None,
                cache_salt: None,
                arrival_ns: 0,
                lora: None,
            },
        })
        .collect();
    let workload = VirtualWorkload {
        arrivals,
        max_concurrency: point.concurrency.map(|c| c as usize),
    };
    let run = run_virtual(resolved.engine, workload)?;
    let simulated = figures_of(&run.traces);
    let default_tolerance = point.tolerance.unwrap_or(DEFAULT_TOLERANCE);
    let comparisons = point
        .published
        .present()
        .into_iter()
        .filter_map(|(metric, published)| {
            simulated.get(metric).map(|simulated| Comparison {
                metric,
                published,
                simulated,
                tolerance: point
                    .tolerances
                    .get(metric)
                    .copied()
                    .unwrap_or(default_tolerance),
            })
        })
        .collect();
    Ok(PointOutcome {
        id: point.id.clone(),
        source: point.source.clone(),
        engine: point.engine.clone(),
        comparisons,
    })
}

/// Runs every point of `fixture`.
pub fn run_all(fixture: &Fixture) -> Result<Vec<PointOutcome>, SimError> {
    let catalog = fidelity_catalog()?;
    fixture
        .points
        .iter()
        .map(|p| run_point(p, &catalog))
        .collect()
}

/// The median of a log-normal length law of shape `sigma` whose mean, capped at `cap`
/// (`E[min(L, cap)]`), is `mean`. The capped mean grows with the median, so bisection on
/// the log of the median converges; `mean` must be below `cap`.
fn median_for_capped_mean(mean: f64, cap: u32, sigma: f64) -> f64 {
    let cap = f64::from(cap);
    let capped_mean = |median: f64| {
        if sigma <= 0.0 {
            return median.min(cap);
        }
        let z = (cap / median).ln() / sigma;
        median * (sigma * sigma / 2.0).exp() * std_normal_cdf(z - sigma)
            + cap * (1.0 - std_normal_cdf(z))
    };
    let (mut lo, mut hi) = (0.0f64, (cap * 1e3).ln());
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if capped_mean(mid.exp()) < mean {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    ((lo + hi) / 2.0).exp()
}

/// Φ(x), from the complementary error function's Abramowitz–Stegun 7.1.26 form (|error| <
/// 1.5e-7, far below what an output length needs).
fn std_normal_cdf(x: f64) -> f64 {
    let z = x.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * z);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erfc = poly * (-z * z).exp();
    if x >= 0.0 {
        1.0 - erfc / 2.0
    } else {
        erfc / 2.0
    }
}

/// Prompt ids from a per-request stream, so no two prompts share a cached block.
fn random_prompt(key: u64, n: u32, vocab: u32) -> Vec<u32> {
    let mut rng = ChaCha8Rng::seed_from_u64(key ^ 0x5EED_F1DE_117F_0000);
    let top = vocab.clamp(2, 30_000);
    (0..n).map(|_| rng.random_range(1..top)).collect()
}

/// The figures a benchmark client reports, from the traces: latencies from each request's
/// send, throughput over first send → last token.
fn figures_of(traces: &[RequestTrace]) -> Figures {
    let ms = |ns: f64| ns * 1e-6;
    let mut ttft = Vec::new();
    let mut tpot = Vec::new();
    let mut e2e = Vec::new();
    let mut tokens = 0u64;
    let start = traces.iter().map(|t| t.sent_ns).min().unwrap_or(0);
    let mut end = start;
    for t in traces {
        let (Some(&first), Some(&last)) = (t.token_times_ns.first(), t.token_times_ns.last())
        else {
            continue;
        };
        ttft.push(ms(first.saturating_sub(t.sent_ns) as f64));
        e2e.push(ms(last.saturating_sub(t.sent_ns) as f64));
        if let Some(x) = t.tpot_ns() {
            tpot.push(ms(x));
        }
        tokens += t.token_times_ns.len() as u64;
        end = end.max(last);
    }
    let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let duration_s = (end - start) as f64 * 1e-9;
    Figures {
        output_tok_s: (duration_s > 0.0).then(|| tokens as f64 / duration_s),
        ttft_mean_ms: mean(&ttft),
        ttft_median_ms: percentile(&ttft, 50.0),
        ttft_p99_ms: percentile(&ttft, 99.0),
        itl_mean_ms: mean(&tpot),
        e2e_mean_ms: mean(&e2e),
        batch_ms: (end > start).then(|| ms((end - start) as f64)),
    }
}

/// The `p`-th percentile with linear interpolation between closest ranks, as numpy's default
/// (what vLLM's benchmark reports).
fn percentile(v: &[f64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = p / 100.0 * (s.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    Some(s[lo] + (s[hi] - s[lo]) * (rank - lo as f64))
}

/// The fidelity table in Markdown: one row per point and figure.
pub fn markdown_table(outcomes: &[PointOutcome]) -> String {
    let mut out = String::from(
        "| point | engine | metric | published | simulated | error | tolerance |\n\
         |---|---|---|---:|---:|---:|---:|\n",
    );
    for o in outcomes {
        for c in &o.comparisons {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {:+.1} % | ±{:.0} % |\n",
                o.id,
                o.engine,
                c.metric,
                number(c.published),
                number(c.simulated),
                c.error() * 100.0,
                c.tolerance * 100.0
            ));
        }
    }
    let errors: Vec<f64> = outcomes
        .iter()
        .flat_map(|o| o.comparisons.iter().map(|c| c.error().abs()))
        .collect();
    if !errors.is_empty() {
        let within = |t: f64| errors.iter().filter(|&&e| e <= t).count();
        let mean = errors.iter().sum::<f64>() / errors.len() as f64;
        out.push_str(&format!(
            "\n{} figures from {} points: mean |error| {:.1} %, {} within ±10 %, {} within ±15 %.\n",
            errors.len(),
            outcomes.len(),
            mean * 100.0,
            within(0.10),
            within(0.15)
        ));
    }
    out
}

fn number(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// `doc` with the text between the table markers replaced by `table`.
pub fn replace_table(doc: &str, table: &str) -> Result<String, SimError> {
    replace_between(doc, table, TABLE_BEGIN, TABLE_END)
}

/// `doc` with the text between `begin` and `end` replaced by `text`.
pub fn replace_between(doc: &str, text: &str, begin: &str, end: &str) -> Result<String, SimError> {
    let start = doc
        .find(begin)
        .ok_or_else(|| SimError::Config(format!("the document has no '{begin}' marker")))?;
    let after = start + begin.len();
    let stop = doc[after..].find(end).map(|i| after + i).ok_or_else(|| {
        SimError::Config(format!(
            "the document has no '{end}' marker after the begin marker"
        ))
    })?;
    Ok(format!("{}\n{}{}", &doc[..after], text, &doc[stop..]))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_fixture_parses_with_enough_points_and_sources() {
        let f = Fixture::builtin().unwrap();
        assert!(f.points.len() >= 15, "{}", f.points.len());
        let sources: std::collections::BTreeSet<_> = f.points.iter().map(|p| &p.source).collect();
        assert!(sources.len() >= 3);
        for p in &f.points {
            assert!(
                p.sim.contains(&format!("--engine {}", p.engine)),
                "{}: the simulated engine must be the published one",
                p.id
            );
        }
    }

    #[test]
    fn bad_fixtures_name_the_point() {
        let text = PUBLISHED_POINTS.replacen(
            "source = \"trtllm-perf-overview\"\nengine",
            "source = \"nowhere\"\nengine",
            1,
        );
        let err = Fixture::parse(&text, "x.toml").unwrap_err().to_string();
        assert!(err.contains("x.toml") && err.contains("'nowhere'"), "{err}");
    }

    #[test]
    fn a_request_rate_must_be_positive() {
        for bad in ["0.0", "-2.0", "nan"] {
            let text = PUBLISHED_POINTS.replacen(
                "request_rate = 10.0",
                &format!("request_rate = {bad}"),
                1,
            );
            let err = Fixture::parse(&text, "x.toml").unwrap_err().to_string();
            assert!(
                err.contains("request_rate must be positive"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn paced_sends_are_spaced_at_the_rate() {
        let fixture = Fixture::builtin().unwrap();
        let mut point = fixture
            .points
            .into_iter()
            .find(|p| p.request_rate.is_some())
            .unwrap();
        point.requests = 3;
        point.output_tokens = 2;
        point.request_rate = Some(4.0);
        point.published = Figures {
            e2e_mean_ms: Some(1.0),
            ..Figures::default()
        };
        let catalog = fidelity_catalog().unwrap();
        let paced = run_point(&point, &catalog).unwrap();
        point.request_rate = None;
        let at_once = run_point(&point, &catalog).unwrap();
        // Three requests 250 ms apart on an idle engine each take about the same time from
        // their own send, while released together they queue behind each other's prefill.
        let e2e = |o: &PointOutcome| o.comparisons[0].simulated;
        assert!(
            e2e(&paced) < e2e(&at_once),
            "{} vs {}",
            e2e(&paced),
            e2e(&at_once)
        );
    }

    #[test]
    fn the_median_gives_the_capped_mean() {
        // Solved against the closed form independently: median 124.5 with σ 0.8 and a cap
        // of 128 has a capped mean of 100.3.
        let m = median_for_capped_mean(100.3, 128, 0.8);
        assert!((m - 124.5).abs() < 0.2, "{m}");
        assert!((std_normal_cdf(0.0) - 0.5).abs() < 1e-7);
        assert!((std_normal_cdf(1.96) - 0.975).abs() < 1e-4);
        assert!((median_for_capped_mean(50.0, 128, 0.0) - 50.0).abs() < 1e-6);
    }

    #[test]
    fn percentiles_interpolate_between_ranks() {
        let v = [4.0, 1.0, 3.0, 2.0];
        assert_eq!(percentile(&v, 50.0), Some(2.5));
        assert_eq!(percentile(&v, 100.0), Some(4.0));
        assert!((percentile(&v, 99.0).unwrap() - 3.97).abs() < 1e-9);
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn the_table_goes_between_the_markers() {
        let doc = format!("a\n{TABLE_BEGIN}\nold\n{TABLE_END}\nb\n");
        let out = replace_table(&doc, "new\n").unwrap();
        assert_eq!(out, format!("a\n{TABLE_BEGIN}\nnew\n{TABLE_END}\nb\n"));
        assert!(replace_table("no markers", "t").is_err());
    }
}
