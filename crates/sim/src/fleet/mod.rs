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

impl ResolvedSim {
    /// Start-up lines describing the fleet (none for a single engine).
    pub fn fleet_banner_lines(&self) -> Vec<String> {
        let Some(f) = &self.fleet else {
            return Vec::new();
        };
        let mut lines = vec![format!(
            "fleet: {} pool(s), {} GPUs, default pool '{}'",
            f.pools.len(),
            f.gpus(),
            f.pools.get(f.default_pool).map_or("", |p| p.name.as_str())
        )];
        for p in &f.pools {
            let engines = match &p.pd {
                Some(pd) => format!(
                    "{} prefill + {} decode, KV link {:.0} GB/s + {:.0} µs",
                    pd.prefill_replicas,
                    pd.decode_replicas,
                    pd.link_bytes_per_s / 1e9,
                    pd.link_latency_ns as f64 / 1e3
                ),
                None => format!("{} replica(s)", p.replicas),
            };
            let limit = p
                .rate_limit
                .map(|(r, b)| format!(", limit {r} req/s (burst {b})"))
                .unwrap_or_default();
            lines.push(format!(
                "  pool '{}': {} on {} × {}, {engines}, router {}{limit}",
                p.name,
                p.engine.deployment.model().id,
                p.gpus_per_replica,
                p.engine.deployment.gpu().id,
                p.router.as_str()
            ));
        }
        for r in &f.rules {
            lines.push(format!("  route: {}", r.text));
        }
        lines
    }
}
