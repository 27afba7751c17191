//! Exports other tools read, built from a run's result file and its per-request records:
//!
//! - [`llmd`]: the llm-d benchmark report, schema v0.2 (llm-d/llm-d-benchmark,
//!   `llmdbenchmark/analysis/benchmark_report/br_v0_2_json_schema.json`), one report per run;
//! - [`pytorch`]: the PyTorch OSS benchmark database records `vllm bench serve` writes beside
//!   its result with `SAVE_TO_PYTORCH_BENCHMARK_FORMAT=1` (vLLM's
//!   `vllm/benchmarks/lib/utils.py`, `convert_to_pytorch_benchmark_format`, called by
//!   `save_to_pytorch_benchmark_format` in `vllm/benchmarks/serve.py`).

pub mod llmd;
pub mod pytorch;

use std::path::{Path, PathBuf};

use servebench_metrics::result::RunResult;
use servebench_metrics::RequestRecord;

use crate::entry::{absolute, Context};
use crate::{Result, ResultsError};

/// A run to export: its result, its records when they are still beside it, and where it
/// sits in an experiment.
#[derive(Debug, Clone)]
pub struct ExportRun {
    /// The `*.servebench.json`, absolute.
    pub path: PathBuf,
    pub result: RunResult,
    /// The per-request records (`records_path`) in request order, or `None` when the file is
    /// gone: the exports then take the figures the result's summary holds.
    pub records: Option<Vec<RequestRecord>>,
    pub context: Context,
}

impl ExportRun {
    /// Reads the result file `path` and, when it is there, its records file.
    pub fn load(path: &Path, context: Context) -> Result<ExportRun> {
        let text = std::fs::read_to_string(path).map_err(|source| ResultsError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let result: RunResult = serde_json::from_str(&text).map_err(|e| ResultsError::Parse {
            path: path.to_path_buf(),
            message: format!("not a servebench result: {e}"),
        })?;
        let path = absolute(path);
        let records = result
            .records_path
            .as_ref()
            .map(|r| path.parent().unwrap_or(Path::new(".")).join(r))
            .and_then(|p| servebench_metrics::read_jsonl(p).ok())
            // Written as they finished; a run's result is computed over them in request order.
            .map(|mut records| {
                records.sort_by_key(|r| r.id);
                records
            });
        Ok(ExportRun {
            path,
            result,
            records,
            context,
        })
    }
}
