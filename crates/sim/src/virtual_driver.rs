//! What every virtual-time driver shares, whether it runs one engine
//! ([`crate::virtual_time::VirtualDriver`]) or a fleet ([`crate::fleet::FleetDriver`]): the
//! client's queue of arrivals (intended time, never before the time it was submitted), the
//! trace each request fills, whole-workload submission, and warm-ups before a measured window.
//! A driver implements [`VirtualTarget`] ("accepts requests, advances to the next event");
//! [`run_workload`] and [`run_warmed`] then drive either the same way.

use std::collections::VecDeque;

use crate::virtual_time::{RequestTrace, VirtualArrival, VirtualRun};
use crate::SimError;

/// Something that accepts requests and advances virtual time event by event until idle.
pub trait VirtualTarget: Sized {
    /// What the finished run yields.
    type Run: WarmedRun;

    /// Opens the trace an arrival will fill; returns its index (submission order).
    fn open_trace(&mut self, arrival: &VirtualArrival) -> usize;

    /// Queues an arrival whose trace is open.
    fn queue(&mut self, arrival: VirtualArrival, trace: usize);

    /// Traces keep their requests' generated token ids from now on.
    fn keep_output_ids(&mut self);

    /// Runs events until nothing is pending, in flight or on its way.
    fn run_until_idle(&mut self) -> Result<(), SimError>;

    /// Drops every prefix cache; false while blocks are in use.
    fn reset_prefix_cache(&mut self) -> bool;

    /// Current virtual time.
    fn now_ns(&self) -> u64;

    /// Ends the run.
    fn finish(self) -> Self::Run;

    /// Queues one arrival (one intended before now is sent now; its trace keeps the intended
    /// time).
    fn submit(&mut self, arrival: VirtualArrival) {
        let trace = self.open_trace(&arrival);
        self.queue(arrival, trace);
    }

    /// Queues a whole workload: traces stay in the given order, requests are sent in intended
    /// order (a stable sort keeps the given order among equal times).
    fn submit_workload(&mut self, arrivals: Vec<VirtualArrival>) {
        let mut indexed: Vec<(usize, VirtualArrival)> = arrivals
            .into_iter()
            .map(|a| (self.open_trace(&a), a))
            .collect();
        indexed.sort_by_key(|(_, a)| a.intended_ns);
        for (trace, a) in indexed {
            self.queue(a, trace);
        }
    }
}

/// A finished run whose first traces can be dropped as warm-ups.
pub trait WarmedRun {
    /// Drops the first `n` traces (the warm-ups) and moves every remaining time back by
    /// `offset_ns`, so the measured window starts at 0.
    fn drop_warmups(&mut self, n: usize, offset_ns: u64);
}

impl WarmedRun for VirtualRun {
    fn drop_warmups(&mut self, n: usize, offset_ns: u64) {
        self.traces.drain(..n.min(self.traces.len()));
        for t in &mut self.traces {
            t.shift_back(offset_ns);
        }
        self.end_ns = self.end_ns.saturating_sub(offset_ns);
    }
}

/// Runs a whole workload to completion.
pub fn run_workload<T: VirtualTarget>(
    mut target: T,
    arrivals: Vec<VirtualArrival>,
    keep_output_ids: bool,
) -> Result<T::Run, SimError> {
    if keep_output_ids {
        target.keep_output_ids();
    }
    target.submit_workload(arrivals);
    target.run_until_idle()?;
    Ok(target.finish())
}

/// Warm-ups, as over HTTP: `num_warmups` copies of the first request run to completion first
/// (so a warm prefix is cached before the measured window; `cold` drops it again), then the
/// measured arrivals follow, shifted by the time the warm-ups took; the finished run has the
/// warm-ups' traces removed and its times moved back so the window starts at 0. Engine counters
/// include the warm-ups.
pub fn run_warmed<T: VirtualTarget>(
    mut target: T,
    arrivals: Vec<VirtualArrival>,
    num_warmups: usize,
    cold: bool,
    keep_output_ids: bool,
) -> Result<T::Run, SimError> {
    if keep_output_ids {
        target.keep_output_ids();
    }
    let offset = warm_up(&mut target, arrivals.first(), num_warmups, cold)?;
    submit_after_warm_up(&mut target, arrivals, offset);
    target.run_until_idle()?;
    let mut run = target.finish();
    run.drop_warmups(num_warmups, offset);
    Ok(run)
}

/// The warm-up phase of [`run_warmed`], for a caller that drives the measured window itself:
/// `num_warmups` copies of `first` run to completion (`cold` then drops every prefix cache).
/// Returns the time they took, the offset of the measured window.
pub fn warm_up<T: VirtualTarget>(
    target: &mut T,
    first: Option<&VirtualArrival>,
    num_warmups: usize,
    cold: bool,
) -> Result<u64, SimError> {
    if let Some(first) = first {
        for k in 0..num_warmups {
            let mut request = first.request.clone();
            request.id = u64::MAX - k as u64;
            request.arrival_ns = 0;
            target.submit(VirtualArrival {
                intended_ns: 0,
                request,
            });
        }
    }
    target.run_until_idle()?;
    if cold {
        target.reset_prefix_cache();
    }
    Ok(target.now_ns())
}

/// Submits the measured arrivals `offset_ns` after the run's start (the time [`warm_up`]
/// took). Traces follow submission order (the given one); the driver sends in time order.
pub fn submit_after_warm_up<T: VirtualTarget>(
    target: &mut T,
    arrivals: Vec<VirtualArrival>,
    offset_ns: u64,
) {
    for mut a in arrivals {
        a.intended_ns += offset_ns;
        a.request.arrival_ns += offset_ns;
        target.submit(a);
    }
}

/// An arrival waiting in the client, and the trace it fills.
#[derive(Debug)]
pub(crate) struct Pending {
    pub arrival: VirtualArrival,
    pub trace: usize,
    /// Not before this: the virtual time when it was submitted.
    pub not_before_ns: u64,
}

impl Pending {
    /// When the client may send it.
    pub fn due_ns(&self) -> u64 {
        self.arrival.intended_ns.max(self.not_before_ns)
    }
}

/// The client's arrivals not sent yet, in intended order.
#[derive(Debug, Default)]
pub(crate) struct ClientQueue {
    pending: VecDeque<Pending>,
}

impl ClientQueue {
    /// Queues an arrival submitted at `now_ns`, after every one intended no later.
    pub fn push(&mut self, arrival: VirtualArrival, trace: usize, now_ns: u64) {
        let at = arrival.intended_ns;
        let pos = self
            .pending
            .partition_point(|p| p.arrival.intended_ns <= at);
        let p = Pending {
            arrival,
            trace,
            not_before_ns: now_ns,
        };
        if pos == self.pending.len() {
            self.pending.push_back(p);
        } else {
            self.pending.insert(pos, p);
        }
    }

    /// The next arrival to send.
    pub fn front(&self) -> Option<&Pending> {
        self.pending.front()
    }

    /// Takes the next arrival.
    pub fn pop(&mut self) -> Option<Pending> {
        self.pending.pop_front()
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

impl RequestTrace {
    /// The empty trace of an arrival, before it is sent.
    pub(crate) fn for_arrival(a: &VirtualArrival) -> RequestTrace {
        RequestTrace {
            id: a.request.id,
            intended_ns: a.intended_ns,
            sent_ns: 0,
            first_scheduled_ns: None,
            token_times_ns: Vec::new(),
            prompt_tokens: a.request.prompt.len() as u32,
            completion_tokens: 0,
            cached_tokens: 0,
            finish_reason: None,
            preemptions: 0,
            end_ns: None,
            output_ids: Vec::new(),
        }
    }

    /// Moves every time of the trace back by `offset_ns` (warm-ups before a measured window).
    pub(crate) fn shift_back(&mut self, offset_ns: u64) {
        self.intended_ns -= offset_ns;
        self.sent_ns = self.sent_ns.saturating_sub(offset_ns);
        if let Some(f) = self.first_scheduled_ns.as_mut() {
            *f = f.saturating_sub(offset_ns);
        }
        for x in &mut self.token_times_ns {
            *x = x.saturating_sub(offset_ns);
        }
        if let Some(e) = self.end_ns.as_mut() {
            *e = e.saturating_sub(offset_ns);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::engine::NewRequest;
    use crate::test_support::{arrival, engine_config};
    use crate::virtual_time::VirtualDriver;

    fn at(ms: u64, id: u64) -> VirtualArrival {
        arrival(id, ms, 1)
    }

    #[test]
    fn the_client_queue_keeps_intended_order_and_submission_order_among_equals() {
        let mut q = ClientQueue::default();
        q.push(at(5, 1), 0, 0);
        q.push(at(2, 2), 1, 0);
        q.push(at(5, 3), 2, 7_000_000);
        q.push(at(0, 4), 3, 0);
        let order: Vec<(usize, u64)> = std::iter::from_fn(|| q.pop())
            .map(|p| (p.trace, p.due_ns()))
            .collect();
        // Submitted at 7 ms, the third is due then, not at its intended 5 ms.
        assert_eq!(
            order,
            [(3, 0), (1, 2_000_000), (0, 5_000_000), (2, 7_000_000)]
        );
        assert!(q.is_empty());
    }

    #[test]
    fn warm_ups_are_dropped_and_the_window_starts_at_zero() {
        let arrivals = vec![at(0, 1), at(10, 2)];
        let plain = run_workload(
            VirtualDriver::new(engine_config(), None).unwrap(),
            arrivals.clone(),
            false,
        )
        .unwrap();
        let warmed = run_warmed(
            VirtualDriver::new(engine_config(), None).unwrap(),
            arrivals,
            2,
            true,
            false,
        )
        .unwrap();
        assert_eq!(warmed.traces.len(), 2);
        assert_eq!(warmed.metrics.request_success_length, 4);
        // With the cache dropped after the warm-ups, the window runs as if they never were.
        for (w, p) in warmed.traces.iter().zip(&plain.traces) {
            assert_eq!(
                (w.id, w.intended_ns, w.sent_ns),
                (p.id, p.intended_ns, p.sent_ns)
            );
            assert_eq!(w.token_times_ns, p.token_times_ns);
        }
        assert_eq!(warmed.end_ns, plain.end_ns);
    }

    #[test]
    fn the_measured_window_opens_when_the_warm_ups_end() {
        let mut d = VirtualDriver::new(engine_config(), None).unwrap();
        assert_eq!(warm_up(&mut d, Some(&at(0, 1)), 0, false).unwrap(), 0);
        let offset = warm_up(&mut d, Some(&at(0, 1)), 2, false).unwrap();
        assert!(offset > 0);
        assert_eq!(d.traces().len(), 2);
        // The window opens when the last warm-up ends.
        assert_eq!(
            d.traces().iter().filter_map(|t| t.end_ns).max(),
            Some(offset)
        );
        submit_after_warm_up(&mut d, vec![at(3, 7)], offset);
        assert_eq!(d.traces()[2].intended_ns, offset + 3_000_000);
    }

    #[test]
    fn a_trace_shifts_back_by_the_warm_ups_time() {
        let mut t = RequestTrace::for_arrival(&VirtualArrival {
            intended_ns: 55,
            request: NewRequest {
                prompt: vec![1, 2, 3],
                ..at(0, 9).request
            },
        });
        assert_eq!(t.prompt_tokens, 3);
        t.sent_ns = 60;
        t.token_times_ns = vec![70, 80];
        t.end_ns = Some(80);
        t.shift_back(55);
        assert_eq!(t.intended_ns, 0);
        assert_eq!(
            (t.sent_ns, t.token_times_ns.clone(), t.end_ns),
            (5, vec![15, 25], Some(25))
        );
    }
}
