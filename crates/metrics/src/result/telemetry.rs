//! Server telemetry as recorded in a result: `/metrics` scraped during the run.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One scrape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TelemetrySample {
    /// ns from the run start.
    pub t: u64,
    pub running: Option<f64>,
    pub waiting: Option<f64>,
    /// 0–1.
    pub kv_usage: Option<f64>,
    /// Preemptions so far (the server's cumulative counter), when it exposes one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemptions: Option<f64>,
}

/// Everything scraped during one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerTelemetry {
    #[serde(default)]
    pub samples: Vec<TelemetrySample>,
    /// Increase of each known counter from the first to the last scrape.
    #[serde(default)]
    pub counter_increase: BTreeMap<String, f64>,
    #[serde(default)]
    pub max_waiting: Option<f64>,
    #[serde(default)]
    pub max_kv_usage: Option<f64>,
    /// Scrapes that failed (no `/metrics`, or an error).
    #[serde(default)]
    pub failed_scrapes: u64,
}

impl ServerTelemetry {
    /// The increase of counter `name` over the run, when the server exposed it.
    pub fn increase(&self, name: &str) -> Option<f64> {
        self.counter_increase.get(name).copied()
    }
}
