//! Interpretation of measurements and models: what the GPU and model should deliver
//! ([`predict`]), how many GPUs a daily load needs and what it costs ([`capacity`]), where a
//! sweep's throughput–latency frontier bends and saturates ([`frontier`]), whether two
//! runs differ ([`compare`]), whether measured TPOT sits at the bandwidth limit
//! ([`bandwidth`]), which regime a matrix or sweep shows ([`diagnose`]), and which
//! configuration meets a latency contract at the lowest cost ([`decision`]). Pure functions
//! over plain data; callers do the I/O.
//!
//! The diagnosis is layered one way: borrowed results (`view`) → each group's figures
//! (`figures`) → the bandwidth check ([`bandwidth`]) → the rules (`rules`, with every
//! threshold in [`thresholds`]) → the diagnosis and its report ([`diagnose`]).

pub mod bandwidth;
pub mod capacity;
pub mod compare;
pub mod decision;
pub mod diagnose;
mod error;
mod explained;
mod figures;
pub mod frontier;
pub mod predict;
mod rules;
pub mod saturation_watch;
pub mod search;
mod stats;
pub mod thresholds;
mod view;

pub use error::AnalysisError;
pub use explained::{format_quantity, Explained, Input};
