//! Two things `vllm bench serve` does around the measured requests: `--profile` (the
//! server's `/start_profile` before them and `/stop_profile` after) and
//! `--probe-request-rate` (single-token text-only requests at a fixed rate beside the
//! workload, outside the concurrency cap, reported apart as vLLM's `probe_*` keys).

use std::sync::Arc;
use std::time::Duration;

use servebench_loadgen::{BackendClient, RunClock, StopSignal};
use servebench_report::OrderedObject;

/// The profiler endpoint calls: POST with an empty JSON body, as vLLM's `/start_profile`
/// and `/stop_profile` take. Returns the line to print when the server refused.
pub async fn profile(client: &BackendClient, path: &str, timeout: Duration) -> Option<String> {
    match servebench_loadgen::probe::post_status(client.target(), path, timeout).await {
        Ok(s) if (200..300).contains(&s) => None,
        Ok(s) => Some(format!(
            "warning: --profile: the server answered {path} with HTTP {s} (vLLM's server needs \
             --profiler-config to profile); the run goes on unprofiled"
        )),
        Err(e) => Some(format!(
            "warning: --profile: {path} failed ({e}); the run goes on unprofiled"
        )),
    }
}

/// Probe requests in flight beside a run.
pub struct Probes {
    task: tokio::task::JoinHandle<Vec<Option<u64>>>,
    done: tokio::sync::watch::Sender<bool>,
}

/// What the probes measured: vLLM's `probe_*` keys.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeStats {
    pub completed: usize,
    pub failed: usize,
    /// End-to-end latencies of the completed probes, ms.
    pub e2el_ms: Vec<f64>,
}

/// The probe's prompt: short, fixed text, one output token.
const PROBE_PROMPT: &str = "Hi";

impl Probes {
    /// Sends a probe every `1 / rate` seconds until [`Probes::finish`]; each goes out at once,
    /// whatever the workload's concurrency cap.
    pub fn start(client: Arc<BackendClient>, rate: f64, stop: &StopSignal) -> Probes {
        let (done, mut done_rx) = tokio::sync::watch::channel(false);
        let stop = stop.clone();
        let interval = Duration::from_secs_f64(1.0 / rate);
        let task = tokio::spawn(async move {
            let clock = RunClock::start_now();
            let mut tasks = tokio::task::JoinSet::new();
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut n: u64 = 0;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = done_rx.changed() => break,
                }
                if stop.dispatch_stopped() {
                    break;
                }
                // Ids far above any workload's: probes are never records of the run.
                let p = client.prepare(u64::MAX / 2 + n, PROBE_PROMPT, 1, Some(1));
                n += 1;
                let client = Arc::clone(&client);
                let stop = stop.clone();
                tasks.spawn(async move {
                    let r = client.execute(&clock, &p, 0, 0, false, &stop).await;
                    if r.failure.is_some() {
                        None
                    } else {
                        r.e2el_ns()
                    }
                });
            }
            let mut out = Vec::new();
            while let Some(r) = tasks.join_next().await {
                out.push(r.ok().flatten());
            }
            out
        });
        Probes { task, done }
    }

    /// Stops sending, waits for the probes in flight, and sums them up.
    pub async fn finish(self) -> ProbeStats {
        let _ = self.done.send(true);
        let results = self.task.await.unwrap_or_default();
        let mut e2el_ms: Vec<f64> = results
            .iter()
            .flatten()
            .map(|ns| *ns as f64 / 1e6)
            .collect();
        e2el_ms.sort_by(f64::total_cmp);
        ProbeStats {
            completed: e2el_ms.len(),
            failed: results.len() - e2el_ms.len(),
            e2el_ms,
        }
    }
}

impl ProbeStats {
    /// vLLM's keys: counts, and the median, p99 and max end-to-end latency in ms (NumPy's
    /// linear-interpolation percentiles; 0 when no probe completed).
    pub fn insert_into(&self, o: &mut OrderedObject) {
        o.insert("probe_completed", self.completed as u64);
        o.insert("probe_failed", self.failed as u64);
        o.insert("probe_median_e2el_ms", self.percentile(50.0));
        o.insert("probe_p99_e2el_ms", self.percentile(99.0));
        o.insert(
            "probe_max_e2el_ms",
            self.e2el_ms.last().copied().unwrap_or(0.0),
        );
    }

    fn percentile(&self, p: f64) -> f64 {
        let v = &self.e2el_ms;
        match v.len() {
            0 => 0.0,
            1 => v[0],
            n => {
                let rank = p / 100.0 * (n - 1) as f64;
                let lo = rank.floor() as usize;
                let hi = rank.ceil() as usize;
                v[lo] + (v[hi] - v[lo]) * (rank - lo as f64)
            }
        }
    }

    /// The lines after vLLM's result block.
    pub fn block(&self) -> String {
        format!(
            "{:-^50}\n{:<40}{:<10}\n{:<40}{:<10}\n{:<40}{:<10.2}\n{:<40}{:<10.2}\n{:<40}{:<10.2}\n",
            "Probe Requests",
            "Probe requests completed:",
            self.completed,
            "Probe requests failed:",
            self.failed,
            "Median probe E2EL (ms):",
            self.percentile(50.0),
            "P99 probe E2EL (ms):",
            self.percentile(99.0),
            "Max probe E2EL (ms):",
            self.e2el_ms.last().copied().unwrap_or(0.0),
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn probe_keys_follow_numpy_percentiles() {
        let s = ProbeStats {
            completed: 4,
            failed: 1,
            e2el_ms: vec![10.0, 20.0, 30.0, 40.0],
        };
        let mut o = OrderedObject::new();
        s.insert_into(&mut o);
        let v: serde_json::Value =
            serde_json::from_slice(&servebench_report::to_python_json(&o)).unwrap();
        assert_eq!(v["probe_completed"], 4);
        assert_eq!(v["probe_failed"], 1);
        assert_eq!(v["probe_median_e2el_ms"], 25.0);
        assert!((v["probe_p99_e2el_ms"].as_f64().unwrap() - 39.7).abs() < 1e-9);
        assert_eq!(v["probe_max_e2el_ms"], 40.0);
        assert!(s.block().contains("Probe requests completed:"));
    }
}
