//! Simulated fleets (docs/simulator.md "Fleets, routers and P/D"): several engines behind one
//! endpoint, in named pools, with a router per pool, routing rules by request shape, a rate
//! limit per pool, and prefill/decode disaggregation as a pool kind.

pub mod args;
pub(crate) mod metrics;
pub mod realtime_fleet;
pub mod router;
pub mod rules;
pub(crate) mod server_hooks;
pub mod spec;
pub mod virtual_fleet;

pub use args::{FleetArgs, RouterPolicy};
pub use spec::{resolve, PdSpec, PoolSpec, ResolvedFleet};
pub use virtual_fleet::{run_fleet_virtual, FleetDriver, FleetRun, Served};

use crate::{ResolvedSim, SimError};

impl ResolvedSim {
    /// Resolves the fleet flags on top of the single-engine configuration, recording the
    /// fleet in the effective configuration.
    pub(crate) fn with_fleet(mut self) -> Result<Self, SimError> {
        if let Some(f) = spec::resolve(&self.args, &self.engine)? {
            if let Some(base) = self.config_json.as_object_mut() {
                base.insert("fleet".into(), f.to_json());
            }
            self.fleet = Some(std::sync::Arc::new(f));
        }
        Ok(self)
    }
}
