//! Renderers only: terminal summary, vLLM-compatible JSON, servebench's own JSON.
//! Nothing here measures or decides; it formats what it is given.

mod model;
pub mod pools;
pub mod pyjson;
pub mod render;
pub mod terminal;
pub mod verdict;
mod vllm;
pub mod vllm_pooling;

pub use model::{
    ExperimentKind, ExperimentReport, RowReport, RunData, SweepPointReport, SweepReport,
};
pub use pyjson::{to_python_json, OrderedObject};
/// The result files' types, owned by `servebench-metrics` and re-exported for renderers.
pub use servebench_metrics::result;
pub use vllm::{vllm_result, VllmRunInfo, PERCENTILE_METRICS};
