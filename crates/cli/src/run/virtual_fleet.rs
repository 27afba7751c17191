//! `--virtual-time` against a simulated fleet (`--sim "... --replicas N"` or `--pool`): the
//! workload runs through every engine of the fleet at once, and each record says which pool
//! and replica served it; a request the pool's rate limit refused is the 429 a gateway sends.

use servebench_metrics::{Failure, FailureKind, RequestRecord, ServedBy};
use servebench_sim::fleet::{run_fleet_virtual, FleetDriver, FleetRun, ResolvedFleet, Served};
use servebench_sim::virtual_driver::run_warmed;
use servebench_sim::virtual_time::VirtualWorkload;

/// Runs the workload through the fleet, after `num_warmups` copies of its first request (as a
/// single engine's virtual run does); `cold` resets every prefix cache after them.
pub fn run(
    fleet: &ResolvedFleet,
    workload: VirtualWorkload,
    num_warmups: usize,
    cold: bool,
    keep_output: bool,
) -> anyhow::Result<FleetRun> {
    if num_warmups == 0 {
        return Ok(run_fleet_virtual(fleet, workload, keep_output)?);
    }
    let driver = FleetDriver::new(fleet, workload.max_concurrency)?;
    Ok(run_warmed(
        driver,
        workload.arrivals,
        num_warmups,
        cold,
        keep_output,
    )?)
}

/// Marks a record with where it was served; a rate-limited one becomes an HTTP 429 failure.
pub fn annotate(rec: &mut RequestRecord, served: &Served) {
    if served.pool.is_empty() {
        return;
    }
    rec.served_by = Some(ServedBy {
        pool: served.pool.clone(),
        replica: served.replica.clone(),
    });
    if served.rate_limited {
        rec.failure = Some(Failure {
            kind: FailureKind::HttpStatus,
            status: Some(429),
            message: format!(
                "HTTP 429 Too Many Requests: above the rate limit of pool '{}'",
                served.pool
            ),
        });
        rec.finish_reason = None;
        rec.served_by = Some(ServedBy {
            pool: served.pool.clone(),
            replica: String::new(),
        });
    }
}
