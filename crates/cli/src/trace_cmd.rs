//! `servebench trace inspect FILE`: what a trace's traffic looks like before it is replayed.

mod html;

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use servebench_workload::trace::inspect::{inspect_file, InspectOptions, Inspection};
use servebench_workload::trace::TraceFormat;

/// Arguments of `servebench trace`.
#[derive(Debug, Clone, Args)]
pub struct TraceArgs {
    #[command(subcommand)]
    pub command: TraceCommand,
}

/// The `trace` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum TraceCommand {
    /// Requests, span, arrival rate (mean, peak 1-s bucket, inter-arrival CV), input/output
    /// length percentiles and, for block-id traces (Mooncake), the ideal prefix-reuse ratio.
    Inspect(InspectArgs),
}

/// Arguments of `servebench trace inspect`.
#[derive(Debug, Clone, Args)]
pub struct InspectArgs {
    /// The trace: Azure LLM inference CSV (2023/2024), Mooncake JSON lines or BurstGPT CSV.
    pub file: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also write a self-contained HTML page with the arrival-rate plot and length histograms.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Tokens one hash id stands for in the prefix-reuse figure (the trace's chunk size)
    /// [default: 512, Mooncake's; 16, vLLM's, with --trace-format vllm].
    #[arg(long, value_name = "TOKENS")]
    pub block_size: Option<u64>,
    /// The trace's format [default: detected from the first line].
    #[arg(long, value_enum)]
    pub trace_format: Option<FormatArg>,
}

/// `--trace-format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    Azure,
    Mooncake,
    Burstgpt,
    /// vLLM's timed-trace JSON lines (timestamps in seconds).
    Vllm,
}

impl From<FormatArg> for TraceFormat {
    fn from(f: FormatArg) -> Self {
        match f {
            FormatArg::Azure => TraceFormat::Azure,
            FormatArg::Mooncake => TraceFormat::Mooncake,
            FormatArg::Burstgpt => TraceFormat::BurstGpt,
            FormatArg::Vllm => TraceFormat::Vllm,
        }
    }
}

/// Runs `servebench trace ...`.
pub fn trace(args: TraceArgs) -> Result<ExitCode> {
    match args.command {
        TraceCommand::Inspect(a) => inspect(a),
    }
}

fn inspect(args: InspectArgs) -> Result<ExitCode> {
    if args.block_size == Some(0) {
        anyhow::bail!("--block-size must be at least 1 token");
    }
    let format = args.trace_format.map(TraceFormat::from);
    let block_size = args.block_size.or_else(|| {
        (format == Some(TraceFormat::Vllm))
            .then_some(servebench_workload::trace::timed::VLLM_CHUNK_HASH_SIZE)
    });
    let opts = InspectOptions { format, block_size };
    // The library's errors already name the file and line.
    let inspection = inspect_file(&args.file, &opts)?;
    let file = args.file.display().to_string();
    let s = &inspection.summary;
    if s.out_of_order > 0 {
        eprintln!(
            "warning: {file}: {} of {} entries arrive before an entry above them; \
             the figures sort them by arrival",
            s.out_of_order, s.requests
        );
    }
    if let Some(path) = &args.html {
        std::fs::write(path, html::render(&file, &inspection))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let text = if args.json {
        let mut j = serde_json::to_string_pretty(s).context("serializing the inspection")?;
        j.push('\n');
        j
    } else {
        render_text(&file, &inspection)
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("writing the inspection")?;
    Ok(ExitCode::SUCCESS)
}

fn opt(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "n/a".to_owned(), |x| format!("{x:.decimals$}"))
}

/// The text report: one figure per line, labels aligned.
fn render_text(file: &str, i: &Inspection) -> String {
    let s = &i.summary;
    let a = &s.arrivals;
    let mut t = String::new();
    let _ = writeln!(t, "trace           {file} ({})", s.format);
    let _ = writeln!(t, "requests        {}", s.requests);
    let _ = writeln!(t, "span            {:.3} s", s.span_s);
    let _ = writeln!(
        t,
        "arrival rate    mean {} req/s, peak {} req/s (1-s bucket at +{} s), inter-arrival CV {}",
        opt(a.mean_per_s, 3),
        a.peak_per_s,
        a.peak_second,
        opt(a.interarrival_cv, 3)
    );
    for (label, l) in [
        ("input tokens", &s.input_tokens),
        ("output tokens", &s.output_tokens),
    ] {
        let _ = writeln!(
            t,
            "{label:<16}p50 {:.1}  p90 {:.1}  p99 {:.1}  max {}  (mean {:.1}, total {})",
            l.p50, l.p90, l.p99, l.max, l.mean, l.total
        );
    }
    if let Some(r) = &s.prefix_reuse {
        let _ = writeln!(
            t,
            "prefix reuse    {:.2} % ideal ({} of {} prompt tokens in blocks seen before; \
             block {} tokens, {} distinct of {} full blocks)",
            r.ratio * 100.0,
            r.reused_tokens,
            r.prompt_tokens,
            r.block_size,
            r.distinct_blocks,
            r.full_blocks
        );
    }
    if s.out_of_order > 0 {
        let _ = writeln!(
            t,
            "out of order    {} entries (sorted by arrival for these figures)",
            s.out_of_order
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use servebench_workload::trace::inspect::inspect_reader;
    use std::path::Path;

    #[test]
    fn text_shows_every_figure() {
        let trace = "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 4, \"hash_ids\": [1, 2]}\n\
                     {\"timestamp\": 500, \"input_length\": 1024, \"output_length\": 2, \"hash_ids\": [1, 3]}\n";
        let i = inspect_reader(
            trace.as_bytes(),
            Path::new("m.jsonl"),
            &InspectOptions::default(),
        )
        .expect("inspect");
        let t = render_text("m.jsonl", &i);
        assert!(t.contains("m.jsonl (mooncake)"), "{t}");
        assert!(t.contains("requests        2"), "{t}");
        assert!(t.contains("mean 2.000 req/s, peak 2 req/s"), "{t}");
        assert!(t.contains("25.00 % ideal (512 of 2048"), "{t}");
        assert!(!t.contains("out of order"), "{t}");
    }
}
