//! The crate's error type.

use servebench_roofline::RooflineError;

/// Errors of the analyses: invalid inputs, unparsable expressions, unreadable result documents.
#[derive(Debug, thiserror::Error)]
pub enum AnalysisError {
    /// A value outside its domain (a negative rate, a zero GPU count, …).
    #[error("{0}")]
    Invalid(String),
    /// A deployment the roofline model cannot describe.
    #[error(transparent)]
    Roofline(#[from] RooflineError),
    /// An SLO list such as `ttft:p99:500 tpot:p95:40` that does not parse.
    #[error("invalid SLO '{input}': {message} (expected METRIC:pNN:MS, e.g. ttft:p99:500; metrics ttft, tpot, itl, e2el)")]
    Slo {
        /// The offending item.
        input: String,
        /// What is wrong.
        message: String,
    },
    /// A `--fail-if` gate such as `p99_ttft_ms>+10%` that does not parse.
    #[error("invalid gate '{input}': {message} (expected METRIC OP VALUE, e.g. p99_ttft_ms>+10%, output_throughput<-5%, mean_tpot_ms>+2)")]
    Gate {
        /// The offending expression.
        input: String,
        /// What is wrong.
        message: String,
    },
    /// A result document without the figures an analysis needs.
    #[error("result document: {0}")]
    Result(String),
}
