//! Comparing two runs: whether two latency samples differ (Mann–Whitney U), `--fail-if` gates
//! such as `p99_ttft_ms>+10%` that turn a comparison into an exit code, and the warning when
//! the two sides were timed on different clocks.

mod clock;
mod gate;
mod mann_whitney;
mod welch;

pub use clock::{clock_warning, Clock};
pub use gate::{parse_gates, Gate, GateBound, GateOp, GateOutcome};
pub use mann_whitney::{mann_whitney_u, MannWhitney, PValueMethod, EXACT_MAX_TOTAL};
pub use welch::{prediction_t_test, welch_t_test, Welch};
