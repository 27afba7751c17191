//! An experiment directory's `environment.json`: who measured, where, and against what.

use serde::{Deserialize, Serialize};

use super::TargetInfo;

/// `environment.json` (schema [`super::ENVIRONMENT_SCHEMA`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EnvironmentFile {
    /// Always [`super::ENVIRONMENT_SCHEMA`] when written.
    pub schema: String,
    /// The client version that measured.
    pub servebench_version: String,
    /// Local start time, RFC 3339.
    pub date: String,
    /// The command line, API keys masked.
    pub command_line: Vec<String>,
    /// The client machine.
    pub host: HostInfo,
    /// The model measured.
    pub model: String,
    /// The server or simulator measured.
    pub target: TargetInfo,
}

/// The client machine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct HostInfo {
    pub hostname: String,
    pub os: String,
    pub arch: String,
    pub cpus: u64,
}
