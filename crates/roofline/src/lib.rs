//! GPU and model catalog, FLOP/byte counts, bandwidth math and the step-time model
//! (SIMULATOR.md §3–§5). Pure functions.
//!
//! API skeleton; the implementation fills these in.

/// Errors of catalog loading and deployment resolution.
#[derive(Debug, thiserror::Error)]
pub enum RooflineError {
    #[error("{0}")]
    Invalid(String),
}

/// The work of one planned request in a step (SIMULATOR.md §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqWork {
    /// New tokens computed in this step (`q_i`).
    pub new_tokens: u32,
    /// Tokens whose KV already exists (`c_i`).
    pub context: u32,
    /// Does this request sample a token at the end of the step?
    pub samples: bool,
}

/// A step's duration and its parts, in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StepTime {
    pub total: f64,
    pub t_c: f64,
    pub t_m: f64,
    pub t_gpu: f64,
    pub t_ar: f64,
    pub t_ovh: f64,
    pub t_req: f64,
    pub flops: f64,
    pub bytes: f64,
}

/// A resolved GPU × model × dtype × tensor-parallel deployment with its efficiency and
/// overhead parameters: everything `step_time` needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Deployment {}

impl Deployment {
    /// Time of one engine step for this plan (before jitter).
    pub fn step_time(&self, _plan: &[SeqWork]) -> StepTime {
        StepTime::default()
    }
}
