//! The simulated inference engine (SIMULATOR.md): an engine core that schedules like vLLM V1
//! and takes the time a given GPU and model would take, driven in virtual or real time.

pub mod engine;

/// Errors of the simulator's configuration and server.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("invalid simulator configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Roofline(#[from] servebench_roofline::RooflineError),
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}
