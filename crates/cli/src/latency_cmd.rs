//! `servebench latency`: `vllm bench latency` against any server or the simulator in virtual
//! time. Each iteration releases one batch of identical-length requests at once and measures
//! it end to end; warm-up iterations are not measured. A comma list of batch sizes sweeps them.

pub mod prediction;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Result};
use clap::Args;
use servebench_metrics::stats::percentile;
use servebench_report::OrderedObject;

use crate::batch_run::{self, BatchTarget, BatchTargetArgs};
use crate::run::plan::RunPlan;
use crate::run::{dataset, interrupt_on_ctrl_c, load_tokenizer};
use prediction::{BatchPrediction, RooflineTarget};

/// vLLM's latency percentiles, in its order.
pub const PERCENTILES: [u32; 6] = [10, 25, 50, 75, 90, 99];

/// `vllm bench latency` flags servebench refuses, with the reason.
pub const UNSUPPORTED_VLLM_FLAGS: &[(&str, &str)] = &[(
    "--use-beam-search",
    "beam search (its requests do a different amount of work)",
)];

/// Refuse `vllm bench latency` flags servebench does not implement.
pub fn check_unsupported(args: &[String]) -> Result<(), String> {
    batch_run::refuse_flags("latency", args, UNSUPPORTED_VLLM_FLAGS)
}

/// Arguments of `servebench latency`.
#[derive(Debug, Clone, Args)]
pub struct LatencyArgs {
    #[command(flatten)]
    pub target: BatchTargetArgs,
    /// Prompt tokens of each request (random prompts, counted with --tokenizer).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..))]
    pub input_len: u64,
    /// Output tokens of each request (max_tokens, EOS ignored).
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u64).range(1..))]
    pub output_len: u64,
    /// Requests per batch; a comma list (e.g. 1,8,64) measures each size in turn. The table
    /// after the runs gives per batch size the latency, TPOT (the mean over requests of
    /// (E2E − TTFT) / (output tokens − 1)), ITL p50 (the median gap between streamed tokens:
    /// the steady decode step) and, for the simulator or with --gpu/--model, the roofline's
    /// latency and decode step.
    #[arg(long, value_delimiter = ',', default_value = "8", value_parser = clap::value_parser!(u32).range(1..))]
    pub batch_size: Vec<u32>,
    /// Sequences per prompt: each prompt is sent N times in the batch.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub n: u32,
    /// Iterations run before measuring (not measured).
    #[arg(long, default_value_t = 10)]
    pub num_iters_warmup: usize,
    /// Measured iterations.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub num_iters: u64,
    /// Save the results as vLLM does: avg_latency, std_latency, latencies, percentiles (s).
    /// With several batch sizes, one such object per batch size, keyed by the size.
    #[arg(long, value_name = "FILE")]
    pub output_json: Option<PathBuf>,
    /// Ignore EOS so every request generates exactly --output-len tokens. Always on, as in
    /// vLLM's latency benchmark; accepted for scripts that pass it.
    #[arg(long)]
    pub ignore_eos: bool,
    /// GPU (catalog id) of the server measured: prints the roofline's prediction for --model
    /// on it (BF16, one GPU) beside each batch size. The simulator needs no --gpu.
    #[arg(long)]
    pub gpu: Option<String>,
    /// Random seed of the prompts.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// POST the server's /start_profile before the iterations and /stop_profile after them
    /// (vLLM profiles one extra batch instead; in virtual time there is no profiler: noted).
    #[arg(long)]
    pub profile: bool,
    /// Accepted: the simulator does not model detokenization; a server detokenizes what it
    /// streams either way (noted against a server).
    #[arg(long)]
    pub disable_detokenize: bool,
}

/// One batch size's results.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchSizeResult {
    pub batch_size: u32,
    /// Seconds, one per measured iteration.
    pub latencies: Vec<f64>,
    /// Mean TPOT of the measured requests, seconds.
    pub per_token_s: Option<f64>,
    /// Median inter-token gap of the measured requests, seconds: the steady decode step, even
    /// where early requests' decode shared steps with later prompts' prefill.
    pub itl_p50_s: Option<f64>,
    pub prediction: Option<BatchPrediction>,
}

impl BatchSizeResult {
    pub fn avg(&self) -> f64 {
        mean(&self.latencies)
    }

    /// `np.std`: the population standard deviation.
    pub fn std(&self) -> f64 {
        let m = self.avg();
        let n = self.latencies.len().max(1) as f64;
        (self.latencies.iter().map(|x| (x - m).powi(2)).sum::<f64>() / n).sqrt()
    }

    /// vLLM's result object, keys in its order.
    pub fn vllm_json(&self) -> OrderedObject {
        let mut o = OrderedObject::new();
        o.insert("avg_latency", self.avg());
        o.insert("std_latency", self.std());
        o.insert("latencies", self.latencies.clone());
        let mut pct = OrderedObject::new();
        for p in PERCENTILES {
            let v = percentile(&self.latencies, f64::from(p)).unwrap_or(f64::NAN);
            pct.insert(p.to_string(), v);
        }
        o.insert("percentiles", pct);
        o
    }

    /// vLLM's terminal lines.
    pub fn vllm_lines(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "Avg latency: {} seconds", self.avg());
        let _ = writeln!(s, "Std latency: {} seconds", self.std());
        for p in PERCENTILES {
            let v = percentile(&self.latencies, f64::from(p)).unwrap_or(f64::NAN);
            let _ = writeln!(s, "{p}% percentile latency: {v} seconds");
        }
        s
    }
}

fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// Runs `servebench latency`.
pub async fn latency(args: LatencyArgs) -> Result<ExitCode> {
    let plan = plan(&args)?;
    batch_run::check_output_json(args.output_json.as_ref())?;
    let tokenizer = load_tokenizer(plan.tokenizer.as_deref(), true)?;
    // Flag errors first: nothing is sent before the roofline's flags are known to be good.
    let server_roofline = server_roofline(&args, &plan)?;
    let mut target = BatchTarget::connect(&plan, &tokenizer).await?;
    let roofline = match target.sim() {
        Some(sim) => Some(RooflineTarget {
            deployment: sim.engine.deployment.clone(),
            budget: sim.engine.max_num_batched_tokens,
            max_num_seqs: sim.engine.max_num_seqs,
        }),
        None => server_roofline,
    };
    let stop = interrupt_on_ctrl_c();
    let iterations = args.num_iters_warmup + args.num_iters as usize;
    if args.profile && target.is_virtual() {
        eprintln!("note: --profile ignored: the simulator in virtual time has no profiler");
    }
    if args.disable_detokenize && !target.is_virtual() {
        eprintln!("note: --disable-detokenize ignored: a server detokenizes what it streams");
    }
    batch_run::profile(&target, args.profile, "/start_profile").await;
    let mut results = Vec::new();
    for &batch in &args.batch_size {
        let mut p = plan.clone();
        p.num_prompts = batch as usize * iterations;
        let prompts = dataset::build(&p, &tokenizer, target.is_virtual())?;
        if prompts.len() < p.num_prompts {
            bail!(
                "the dataset produced {} prompts, {} needed",
                prompts.len(),
                p.num_prompts
            );
        }
        eprintln!(
            "Batch size {batch}: {} warm-up and {} measured iterations",
            args.num_iters_warmup, args.num_iters
        );
        let mut latencies = Vec::new();
        let mut tpots = Vec::new();
        let mut itls = Vec::new();
        for (k, chunk) in prompts.chunks(batch as usize).take(iterations).enumerate() {
            if stop.dispatch_stopped() {
                return Ok(interrupted());
            }
            let seed = args.seed ^ (u64::from(batch) << 32) ^ k as u64;
            let b = match target
                .run_batch(&p, chunk, args.n as usize, seed, None, &stop)
                .await
            {
                Ok(b) => b,
                Err(_) if stop.dispatch_stopped() => return Ok(interrupted()),
                Err(e) => return Err(e),
            };
            b.check_all_succeeded()?;
            if k >= args.num_iters_warmup {
                latencies.push(b.elapsed_s());
                tpots.extend(b.records.iter().filter_map(|r| r.tpot_ns()));
                itls.extend(b.records.iter().flat_map(|r| r.itls_ns()).map(|x| x as f64));
            }
        }
        let prediction = roofline
            .as_ref()
            .map(|r| {
                r.predict(
                    in_u32(args.input_len),
                    in_u32(args.output_len),
                    batch * args.n,
                )
            })
            .transpose()?;
        let result = BatchSizeResult {
            batch_size: batch,
            latencies,
            per_token_s: (!tpots.is_empty()).then(|| mean(&tpots) / 1e9),
            itl_p50_s: percentile(&itls, 50.0).map(|x| x / 1e9),
            prediction,
        };
        if args.batch_size.len() > 1 {
            println!("== batch size {batch}");
        }
        print!("{}", result.vllm_lines());
        results.push(result);
    }
    batch_run::profile(&target, args.profile, "/stop_profile").await;
    println!();
    print!("{}", table(&results, &target.describe()));
    if let Some(path) = &args.output_json {
        batch_run::write_python_json(path, &output_json(&results))?;
        eprintln!("Results: {}", path.display());
    }
    Ok(crate::run::final_exit(ExitCode::SUCCESS))
}

/// Ctrl-C or SIGTERM stopped the measurement: an unfinished sweep reports nothing.
fn interrupted() -> ExitCode {
    eprintln!("Interrupted: no results written");
    crate::run::final_exit(ExitCode::from(crate::run::EXIT_INTERRUPTED))
}

fn in_u32(v: u64) -> u32 {
    v.min(u64::from(u32::MAX)) as u32
}

/// `run`'s plan for the target and the random dataset at the requested lengths.
pub fn plan(args: &LatencyArgs) -> Result<RunPlan> {
    let mut a = args.target.to_run_args()?;
    a.input_len = Some(args.input_len);
    a.output_len = Some(args.output_len.min(i64::MAX as u64) as i64);
    a.random_range_ratio = 0.0;
    a.random_prefix_len = 0;
    a.seed = args.seed;
    RunPlan::from_args(&a)
}

/// The roofline a server is compared with: `--gpu` and `--model` from the catalog. The
/// simulator brings its own deployment, so `--gpu` is refused there.
fn server_roofline(args: &LatencyArgs, plan: &RunPlan) -> Result<Option<RooflineTarget>> {
    if plan.is_virtual() {
        if args.gpu.is_some() {
            bail!("--gpu names the GPU of a server; the simulator's GPU comes from --sim \"MODEL --gpu G\"");
        }
        return Ok(None);
    }
    match (&args.gpu, &args.target.model) {
        (Some(gpu), Some(model)) => RooflineTarget::from_catalog(gpu, model).map(Some),
        (Some(_), None) => {
            bail!("--gpu needs --model (a catalog model) for the roofline prediction")
        }
        (None, _) => Ok(None),
    }
}

/// The sweep table: measured latency and per-token time, and the roofline's beside them.
pub fn table(results: &[BatchSizeResult], target: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Latency by batch size — {target}");
    let _ = writeln!(
        s,
        "TPOT = mean of (E2E − TTFT) / (output tokens − 1) per request; ITL p50 = median gap between tokens"
    );
    let predicted = results.iter().any(|r| r.prediction.is_some());
    let _ = write!(
        s,
        "{:>6}  {:>12}  {:>12}  {:>10}  {:>13}",
        "batch", "avg (s)", "p99 (s)", "TPOT (ms)", "ITL p50 (ms)"
    );
    if predicted {
        let _ = write!(s, "  {:>12}  {:>18}", "roofline (s)", "roofline step (ms)");
    }
    s.push('\n');
    for r in results {
        let p99 = percentile(&r.latencies, 99.0).unwrap_or(f64::NAN);
        let ms = |v: Option<f64>| {
            v.map(|t| format!("{:.3}", t * 1e3))
                .unwrap_or_else(|| "—".to_owned())
        };
        let _ = write!(
            s,
            "{:>6}  {:>12.4}  {:>12.4}  {:>10}  {:>13}",
            r.batch_size,
            r.avg(),
            p99,
            ms(r.per_token_s),
            ms(r.itl_p50_s)
        );
        if predicted {
            match &r.prediction {
                Some(p) => {
                    let _ = write!(
                        s,
                        "  {:>12.4}  {:>18.3}",
                        p.latency_s,
                        p.decode_step_s * 1e3
                    );
                }
                None => {
                    let _ = write!(s, "  {:>12}  {:>18}", "—", "—");
                }
            }
        }
        s.push('\n');
    }
    s
}

/// The `--output-json` document: vLLM's object for one batch size; with several, one such
/// object per size, keyed by the size in the order measured.
pub fn output_json(results: &[BatchSizeResult]) -> OrderedObject {
    if let [one] = results {
        return one.vllm_json();
    }
    let mut all = OrderedObject::new();
    for r in results {
        all.insert(r.batch_size.to_string(), r.vllm_json());
    }
    all
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn result(batch_size: u32, latencies: Vec<f64>) -> BatchSizeResult {
        BatchSizeResult {
            batch_size,
            latencies,
            per_token_s: Some(0.01),
            itl_p50_s: Some(0.009),
            prediction: None,
        }
    }

    fn pretty(v: &OrderedObject) -> String {
        String::from_utf8(servebench_report::pyjson::to_python_json_indented(v, 4)).unwrap()
    }

    #[test]
    fn statistics_are_numpys() {
        let r = result(8, vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(r.avg(), 2.5);
        // np.std([1, 2, 3, 4]) = sqrt(1.25)
        assert!((r.std() - 1.25f64.sqrt()).abs() < 1e-15);
        let j = r.vllm_json();
        // np.percentile([1, 2, 3, 4], [10, 25, 50, 75, 90, 99])
        let expected = [1.3, 1.75, 2.5, 3.25, 3.7, 3.97];
        let Some(servebench_report::pyjson::PyValue::Object(pct)) = j.get("percentiles") else {
            panic!("percentiles is an object")
        };
        for (p, e) in PERCENTILES.iter().zip(expected) {
            let v = pct.get(&p.to_string()).unwrap().as_f64().unwrap();
            assert!((v - e).abs() < 1e-12, "{p}: {v}");
        }
    }

    #[test]
    fn json_keys_follow_vllm_and_the_sweep_keeps_its_order() {
        let one = pretty(&output_json(&[result(8, vec![0.5])]));
        let keys = ["avg_latency", "std_latency", "latencies", "percentiles"];
        let at: Vec<usize> = keys.iter().map(|k| one.find(k).unwrap()).collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{one}");
        let pct: Vec<usize> = ["\"10\"", "\"25\"", "\"50\"", "\"75\"", "\"90\"", "\"99\""]
            .iter()
            .map(|k| one.find(k).unwrap())
            .collect();
        assert!(pct.windows(2).all(|w| w[0] < w[1]), "{one}");
        assert!(one.starts_with("{\n    \"avg_latency\": 0.5,"), "{one}");
        let sweep = pretty(&output_json(&[
            result(1, vec![0.1]),
            result(8, vec![0.2]),
            result(64, vec![0.3]),
        ]));
        let (a, b, c) = (
            sweep.find("\"1\": {").unwrap(),
            sweep.find("\"8\": {").unwrap(),
            sweep.find("\"64\": {").unwrap(),
        );
        assert!(a < b && b < c, "{sweep}");
    }

    #[test]
    fn the_table_shows_the_roofline_only_when_there_is_one() {
        let mut r = result(8, vec![1.0, 2.0]);
        assert!(!table(&[r.clone()], "x").contains("roofline"));
        r.prediction = Some(BatchPrediction {
            latency_s: 1.5,
            decode_step_s: 0.007,
        });
        let t = table(&[r], "x");
        assert!(t.contains("roofline"), "{t}");
        assert!(t.contains("7.000"), "{t}");
    }
}
