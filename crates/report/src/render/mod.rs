//! Experiment reports from an [`ExperimentReport`](crate::model::ExperimentReport): a compact
//! terminal table, Markdown for pull requests, CSV for pandas, and one self-contained HTML
//! page with SVG charts. Renderers format what the model holds; figures come from the saved
//! summaries (repeats through `servebench_metrics::aggregate`) and per-request views from
//! the records through `servebench_metrics`' derived metrics.

pub mod agents;
pub mod charts;
pub mod csv;
pub mod figures;
pub mod format;
pub mod html;
pub mod interactivity;
pub mod lora;
pub mod markdown;
mod mdhtml;
pub mod phases;
pub mod slices;
pub mod svg;
pub mod tables;
pub mod text;
pub mod timeline;
pub mod turns;

pub use agents::{agent_block, depth_table};
pub use csv::{csv_columns, render_csv};
pub use figures::{frontier_axes, sweep_axes, FrontierAxis, GroupFigures};
pub use html::render_html;
pub use lora::lora_block;
pub use markdown::render_markdown;
pub use mdhtml::markdown_to_html;
pub use slices::render_slices_csv;
pub use text::render_terminal;
pub use turns::{turn_block, turn_table};
