//! Row F: a production trace replayed as a workload. By default the trace runs on its own
//! clock (`--dataset-name timed_trace`, self-timed): each request at its timestamp, so the
//! bursts that decide p99 stay in. When the row sets its own `request_rate`, the trace's
//! entries become prompts of their exact lengths (Mooncake block ids become shared leading
//! text, so a prefix cache sees the trace's reuse) written as a custom JSONL dataset, sent as
//! Poisson arrivals at that rate.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use servebench_tokenizer::Tokenizer;
use servebench_workload::trace::{load_timed_trace, synthesize, ReplayConfig, TimedTraceConfig};
use servebench_workload::TraceFormat;

use crate::run::overrides::Override;

/// What the trace row runs.
#[derive(Debug, Clone)]
pub struct TraceDataset {
    /// The JSONL dataset written from the trace.
    pub path: PathBuf,
    /// Requests in it.
    pub requests: usize,
    /// The trace's mean arrival rate, requests per second (infinite when every entry
    /// arrives at once).
    pub mean_rate: f64,
    /// Median and p90 prompt and output lengths (for the report).
    pub input_p50: u64,
    pub input_p90: u64,
    pub output_p50: u64,
    pub output_p90: u64,
    /// Replayed on the trace's own clock (`path` is then the trace itself) in this format;
    /// `None`: a prepared custom dataset at a row's rate.
    pub self_timed: Option<TraceFormat>,
}

/// The format row F reads a trace in: as [`servebench_workload::read_trace`] does, JSON
/// lines being Mooncake's (ms timestamps, 512-token blocks).
fn matrix_format(trace: &Path) -> Result<TraceFormat> {
    use std::io::BufRead as _;
    let file =
        std::fs::File::open(trace).with_context(|| format!("reading trace {}", trace.display()))?;
    for line in std::io::BufReader::new(file).lines() {
        let line = line.with_context(|| format!("reading trace {}", trace.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        return TraceFormat::detect(&line).with_context(|| {
            format!(
                "trace {}: unknown format (expected Mooncake JSON lines, an Azure or a BurstGPT CSV)",
                trace.display()
            )
        });
    }
    bail!("trace {} has no requests", trace.display())
}

/// Describes the first `max_requests` entries of `trace` for replay on its own clock.
pub fn self_timed(trace: &Path, max_requests: usize) -> Result<TraceDataset> {
    let format = matrix_format(trace)?;
    let mut cfg = TimedTraceConfig::new(trace);
    cfg.format = Some(format);
    cfg.max_requests = Some(max_requests);
    let t = load_timed_trace(&cfg).with_context(|| format!("reading trace {}", trace.display()))?;
    let mut ins: Vec<u64> = t.entries.iter().map(|e| e.input_tokens.max(1)).collect();
    let mut outs: Vec<u64> = t.entries.iter().map(|e| e.output_tokens.max(1)).collect();
    let offsets = t.offsets_ns();
    let n = offsets.len();
    let span_ns = offsets.last().copied().unwrap_or(0);
    ins.sort_unstable();
    outs.sort_unstable();
    Ok(TraceDataset {
        path: trace.to_path_buf(),
        requests: n,
        mean_rate: if n > 1 && span_ns > 0 {
            (n - 1) as f64 / (span_ns as f64 / 1e9)
        } else {
            f64::INFINITY
        },
        input_p50: nearest_rank(&ins, 50.0),
        input_p90: nearest_rank(&ins, 90.0),
        output_p50: nearest_rank(&outs, 50.0),
        output_p90: nearest_rank(&outs, 90.0),
        self_timed: Some(format),
    })
}

/// Reads `trace`, keeps its first `max_requests` entries and writes them as a custom
/// dataset to `out`.
pub fn prepare(
    trace: &Path,
    max_requests: usize,
    tokenizer: &Tokenizer,
    seed: u64,
    out: &Path,
) -> Result<TraceDataset> {
    let entries = servebench_workload::read_trace(trace)
        .with_context(|| format!("reading trace {}", trace.display()))?;
    if entries.is_empty() {
        bail!("trace {} has no requests", trace.display());
    }
    let cfg = ReplayConfig {
        seed,
        max_requests: Some(max_requests),
        ..ReplayConfig::default()
    };
    let workload = synthesize(&entries, tokenizer, &cfg)
        .with_context(|| format!("replaying trace {}", trace.display()))?;
    let n = workload.requests.len();
    let span_ns = workload.offsets_ns.last().copied().unwrap_or(0)
        - workload.offsets_ns.first().copied().unwrap_or(0);
    let mean_rate = if n > 1 && span_ns > 0 {
        (n - 1) as f64 / (span_ns as f64 / 1e9)
    } else {
        f64::INFINITY
    };

    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let file = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut w = std::io::BufWriter::new(file);
    for r in &workload.requests {
        let line =
            serde_json::json!({ "prompt": r.prompt, "output_tokens": r.max_tokens.unwrap_or(1) });
        serde_json::to_writer(&mut w, &line)
            .with_context(|| format!("writing {}", out.display()))?;
        w.write_all(b"\n")
            .with_context(|| format!("writing {}", out.display()))?;
    }
    w.flush()
        .with_context(|| format!("writing {}", out.display()))?;

    let mut ins: Vec<u64> = workload.requests.iter().map(|r| r.prompt_tokens).collect();
    let mut outs: Vec<u64> = workload
        .requests
        .iter()
        .map(|r| r.max_tokens.unwrap_or(1))
        .collect();
    ins.sort_unstable();
    outs.sort_unstable();
    Ok(TraceDataset {
        path: out.to_path_buf(),
        requests: n,
        mean_rate,
        input_p50: nearest_rank(&ins, 50.0),
        input_p90: nearest_rank(&ins, 90.0),
        output_p50: nearest_rank(&outs, 50.0),
        output_p90: nearest_rank(&outs, 90.0),
        self_timed: None,
    })
}

/// Nearest-rank percentile of sorted values (for describing lengths, not for metrics).
fn nearest_rank(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The trace's prepared file as the run's dataset.
pub fn dataset(d: &TraceDataset) -> Override {
    match d.self_timed {
        Some(format) => Override::TimedTrace(d.path.clone(), format),
        None => Override::TraceDataset(d.path.clone()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_custom_dataset_with_the_trace_rate_and_lengths() {
        let dir = std::env::temp_dir().join(format!("servebench-trace-row-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let trace = dir.join("t.jsonl");
        // Mooncake lines: one request every 500 ms.
        let lines: String = (0..5)
            .map(|i| format!("{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": 8, \"hash_ids\": [1]}}\n", i * 500, 600 + i))
            .collect();
        std::fs::write(&trace, lines).unwrap();
        let d = prepare(&trace, 4, &Tokenizer::builtin(), 0, &dir.join("f.jsonl")).unwrap();
        assert_eq!(d.requests, 4);
        assert!((d.mean_rate - 2.0).abs() < 1e-9, "{}", d.mean_rate);
        assert_eq!((d.output_p50, d.input_p90), (8, 603));
        let text = std::fs::read_to_string(&d.path).unwrap();
        assert_eq!(text.lines().count(), 4);
        assert!(text.contains("\"output_tokens\":8"));
        assert_eq!(dataset(&d), Override::TraceDataset(d.path.clone()));

        let s = self_timed(&trace, 4).unwrap();
        assert_eq!(s.requests, 4);
        assert!((s.mean_rate - 2.0).abs() < 1e-9, "{}", s.mean_rate);
        assert_eq!((s.output_p50, s.input_p90), (8, 603));
        assert_eq!(
            dataset(&s),
            Override::TimedTrace(trace.clone(), TraceFormat::Mooncake)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
