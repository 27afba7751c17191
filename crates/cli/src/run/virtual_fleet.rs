//! `--virtual-time` against a simulated fleet (`--sim "... --replicas N"` or `--pool`): the
//! workload runs through every engine of the fleet at once, and each record says which pool
//! and replica served it; a request the pool's rate limit refused is the 429 a gateway sends.

use servebench_metrics::{Failure, FailureKind, RequestRecord, ServedBy};
use servebench_sim::fleet::{FleetDriver, FleetRun, ResolvedFleet, Served};
use servebench_sim::virtual_time::{VirtualArrival, VirtualWorkload};

/// Runs the workload through the fleet, after `num_warmups` copies of its first request (as a
/// single engine's virtual run does); `cold` resets every prefix cache after them.
pub fn run(
    fleet: &ResolvedFleet,
    workload: VirtualWorkload,
    num_warmups: usize,
    cold: bool,
    keep_output: bool,
) -> anyhow::Result<FleetRun> {
    let VirtualWorkload {
        arrivals,
        max_concurrency,
    } = workload;
    if num_warmups == 0 {
        return Ok(servebench_sim::fleet::run_fleet_virtual(
            fleet,
            VirtualWorkload {
                arrivals,
                max_concurrency,
            },
            keep_output,
        )?);
    }
    let mut driver = FleetDriver::new(fleet, max_concurrency)?;
    if keep_output {
        driver.keep_output_ids();
    }
    if let Some(first) = arrivals.first() {
        for k in 0..num_warmups {
            let mut request = first.request.clone();
            request.id = u64::MAX - k as u64;
            request.arrival_ns = 0;
            driver.submit(VirtualArrival {
                intended_ns: 0,
                request,
            });
        }
    }
    driver.run_until_idle()?;
    if cold {
        driver.reset_prefix_cache();
    }
    let offset = driver.now_ns();
    // Traces follow submission order (the given one); the driver sends in time order.
    for mut a in arrivals {
        a.intended_ns += offset;
        a.request.arrival_ns += offset;
        driver.submit(a);
    }
    driver.run_until_idle()?;
    let mut out = driver.finish();
    let w = num_warmups.min(out.run.traces.len());
    out.run.traces.drain(..w);
    out.served.drain(..w);
    for t in &mut out.run.traces {
        t.intended_ns -= offset;
        t.sent_ns = t.sent_ns.saturating_sub(offset);
        if let Some(f) = t.first_scheduled_ns.as_mut() {
            *f = f.saturating_sub(offset);
        }
        for x in &mut t.token_times_ns {
            *x = x.saturating_sub(offset);
        }
        if let Some(e) = t.end_ns.as_mut() {
            *e = e.saturating_sub(offset);
        }
    }
    out.run.end_ns = out.run.end_ns.saturating_sub(offset);
    Ok(out)
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
