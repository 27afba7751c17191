//! The simulated inference engine (docs/simulator.md): an engine core that schedules like vLLM V1
//! and takes the time a given GPU and model would take, driven in virtual or real time.

pub mod args;
mod calibration;
pub mod engine;
pub mod engine_profile;
mod faults;
pub mod fidelity;
pub mod fleet;
mod lora_args;
mod prometheus;
pub mod realtime;
pub mod reasoning;
mod resolve;
pub mod server;
#[cfg(test)]
mod test_support;
pub mod virtual_driver;
pub mod virtual_time;
pub mod vision;

pub use args::SimArgs;
pub use resolve::{DerivedFigures, ResolvedSim};
pub use server::{router, serve, spawn_in_process, AppState, ShutdownHandle};

/// Errors of the simulator's configuration and server.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A flag value or combination the simulator refuses.
    #[error("invalid simulator configuration: {0}")]
    Config(String),
    /// Catalog, deployment or KV-sizing error.
    #[error(transparent)]
    Roofline(#[from] servebench_roofline::RooflineError),
    /// The tokenizer could not be loaded.
    #[error(transparent)]
    Tokenizer(#[from] servebench_tokenizer::TokenizerError),
    /// Binding, serving or thread creation failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}
