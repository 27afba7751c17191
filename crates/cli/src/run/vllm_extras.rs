//! `vllm bench serve` flags beyond the core ones that servebench implements with vLLM's
//! meaning: the server's profiler (`--profile`), probe requests beside the workload
//! (`--probe-request-rate`), the Blazedit and Spec-Bench dataset options, vLLM's request
//! timeline (`--plot-timeline`), and the dataset-loading flags that change nothing for a
//! client reading local files (each said once on stderr).

use anyhow::{bail, Result};
use clap::Args;

/// The flags, as `servebench run` reads them.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct VllmServeFlags {
    /// POST the server's /start_profile before the measured requests and /stop_profile
    /// after them (vLLM's profiler; the server needs --profiler-config). A server without
    /// the endpoints is told about in one line and the run goes on.
    #[arg(long, help_heading = "vLLM extras")]
    pub profile: bool,
    /// Send single-token text-only probe requests at this rate (req/s) beside the workload,
    /// outside --max-concurrency, and report their latency apart (vLLM's probe_* keys): how
    /// the workload stalls an unrelated short request. 0: none.
    #[arg(
        long,
        value_name = "RPS",
        default_value_t = 0.0,
        help_heading = "vLLM extras"
    )]
    pub probe_request_rate: f64,
    /// Write vLLM's request timeline (each request's wait, first token and decode, with ITLs
    /// coloured by --timeline-itl-thresholds) as an HTML file beside the result JSON, and
    /// save the result (as vLLM does).
    #[arg(long, help_heading = "vLLM extras")]
    pub plot_timeline: bool,
    /// Two comma-separated ITL thresholds in ms colouring the timeline (green below the
    /// first, orange between, red above the second).
    #[arg(
        long,
        value_name = "MS,MS",
        default_value = "25,50",
        help_heading = "vLLM extras"
    )]
    pub timeline_itl_thresholds: String,
    /// Write the dataset's prompt and output length statistics beside the result JSON (vLLM
    /// draws them with matplotlib; servebench writes the figures as an SVG histogram).
    #[arg(long, help_heading = "vLLM extras")]
    pub plot_dataset_stats: bool,
    /// Blazedit (vdaita/edit_5k_char, edit_10k_char): the least normalised edit distance of
    /// the rows used.
    #[arg(
        long,
        value_name = "D",
        default_value_t = 0.0,
        help_heading = "Dataset"
    )]
    pub blazedit_min_distance: f64,
    /// Blazedit: the largest normalised edit distance of the rows used.
    #[arg(
        long,
        value_name = "D",
        default_value_t = 1.0,
        help_heading = "Dataset"
    )]
    pub blazedit_max_distance: f64,
    /// Output tokens of each spec_bench request.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 256,
        help_heading = "Dataset"
    )]
    pub spec_bench_output_len: u64,
    /// Only this Spec-Bench category (writing, roleplay, reasoning, math, coding, ...).
    #[arg(long, value_name = "NAME", help_heading = "Dataset")]
    pub spec_bench_category: Option<String>,
    /// SPEED-Bench's subset (the dataset itself is refused).
    #[arg(long, value_name = "SUBSET", hide = true)]
    pub speed_bench_dataset_subset: Option<String>,
    /// SPEED-Bench's output length (the dataset itself is refused).
    #[arg(long, value_name = "N", hide = true)]
    pub speed_bench_output_len: Option<u64>,
    /// SPEED-Bench's category (the dataset itself is refused).
    #[arg(long, value_name = "NAME", hide = true)]
    pub speed_bench_category: Option<String>,
    /// BFCL's categories (the dataset itself is refused).
    #[arg(long, value_name = "LIST", hide = true)]
    pub bfcl_categories: Option<String>,
    /// ASR datasets' longest audio (audio is refused).
    #[arg(long, value_name = "SECS", hide = true)]
    pub asr_max_audio_len_sec: Option<f64>,
    /// ASR datasets' shortest audio (audio is refused).
    #[arg(long, value_name = "SECS", hide = true)]
    pub asr_min_audio_len_sec: Option<f64>,
    /// Accepted: vLLM's client loads a Hugging Face dataset without streaming it; servebench
    /// reads local copies whole anyway (no effect on requests or figures).
    #[arg(long, help_heading = "Dataset")]
    pub no_stream: bool,
    /// Accepted: servebench always puts a dataset's images in the chat message, as this flag
    /// asks of vLLM's client.
    #[arg(long, help_heading = "Dataset")]
    pub enable_multimodal_chat: bool,
    /// Accepted: servebench always sends a dataset's images inline (data: URLs), as this
    /// flag asks of vLLM's client.
    #[arg(long, help_heading = "Dataset")]
    pub custom_ensure_client_side_data: bool,
}

impl Default for VllmServeFlags {
    fn default() -> Self {
        VllmServeFlags {
            profile: false,
            probe_request_rate: 0.0,
            plot_timeline: false,
            timeline_itl_thresholds: "25,50".to_owned(),
            plot_dataset_stats: false,
            blazedit_min_distance: 0.0,
            blazedit_max_distance: 1.0,
            spec_bench_output_len: 256,
            spec_bench_category: None,
            speed_bench_dataset_subset: None,
            speed_bench_output_len: None,
            speed_bench_category: None,
            bfcl_categories: None,
            asr_max_audio_len_sec: None,
            asr_min_audio_len_sec: None,
            no_stream: false,
            enable_multimodal_chat: false,
            custom_ensure_client_side_data: false,
        }
    }
}

impl VllmServeFlags {
    /// Checks the values vLLM checks.
    pub fn validate(&self) -> Result<()> {
        if !self.probe_request_rate.is_finite() || self.probe_request_rate < 0.0 {
            bail!(
                "--probe-request-rate must be a non-negative number of requests per second, got {}",
                self.probe_request_rate
            );
        }
        self.itl_thresholds_ms()?;
        for (flag, d) in [
            ("--blazedit-min-distance", self.blazedit_min_distance),
            ("--blazedit-max-distance", self.blazedit_max_distance),
        ] {
            if !(0.0..=1.0).contains(&d) {
                bail!("{flag} must be between 0 and 1, got {d}");
            }
        }
        Ok(())
    }

    /// `--timeline-itl-thresholds` as two numbers (ms), as vLLM parses them.
    pub fn itl_thresholds_ms(&self) -> Result<(f64, f64)> {
        let parts: Vec<&str> = self.timeline_itl_thresholds.split(',').collect();
        let nums: Vec<f64> = parts
            .iter()
            .map(|p| p.trim().parse::<f64>())
            .collect::<Result<_, _>>()
            .map_err(|e| {
                anyhow::anyhow!(
                    "Invalid --timeline-itl-thresholds format: {e} ({})",
                    self.timeline_itl_thresholds
                )
            })?;
        match nums.as_slice() {
            [a, b] if a.is_finite() && b.is_finite() => Ok((*a, *b)),
            _ => bail!(
                "Invalid --timeline-itl-thresholds format: Expected 2 ITL threshold values, got {}",
                nums.len()
            ),
        }
    }

    /// The lines said once on stderr for flags that change nothing here.
    pub fn notes(&self) -> Vec<&'static str> {
        let mut notes = Vec::new();
        if self.no_stream {
            notes.push(
                "note: --no-stream only stops vLLM's client from loading a Hugging Face dataset \
                 in streaming mode; servebench reads local copies whole, so it changes nothing \
                 (requests are streamed either way, as vLLM's are)",
            );
        }
        notes
    }
}
