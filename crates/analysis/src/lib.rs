//! Interpretation of measurements and models: what the GPU and model should deliver
//! ([`predict`]), how many GPUs a daily load needs and what it costs ([`capacity`]), where a
//! sweep's throughput–latency frontier bends and saturates ([`frontier`]), and whether two
//! runs differ ([`compare`]). Pure functions over plain data; callers do the I/O.

pub mod capacity;
pub mod compare;
mod error;
mod explained;
pub mod frontier;
pub mod predict;
mod stats;

pub use error::AnalysisError;
pub use explained::{format_quantity, Explained, Input};
