//! The boundary between the dispatcher and whatever answers requests: the dispatcher decides
//! *when* a request goes out; a `Backend` decides *how* it is sent and measured.

use std::future::Future;

use servebench_metrics::RequestRecord;

use crate::client::{BackendClient, Prepared};
use crate::clock::RunClock;
use crate::stop::StopSignal;
use crate::target::Target;

/// Sends one request and measures it. Never fails: every problem becomes a failed record.
pub trait Backend: Send + Sync + 'static {
    /// One request in the form this backend sends (built before the run starts, so building
    /// it costs nothing on the clock).
    type Request: Clone + Send + Sync + 'static;

    /// Send `request`, released by the dispatcher at `released` for its `intended` time
    /// (both ns on `clock`); `waited_for_slot` says it queued behind the concurrency cap.
    fn execute(
        &self,
        clock: &RunClock,
        request: &Self::Request,
        intended: u64,
        released: u64,
        waited_for_slot: bool,
        stop: &StopSignal,
    ) -> impl Future<Output = RequestRecord> + Send;

    /// A server whose `/metrics` can be scraped during the run, if there is one.
    fn telemetry_target(&self) -> Option<&Target> {
        None
    }

    /// Opens up to `n` connections before the run, for requests released together at its
    /// start; returns how many are ready. Not requests: nothing is sent on them.
    fn open_ahead(&self, n: usize) -> impl Future<Output = usize> + Send {
        let _ = n;
        std::future::ready(0)
    }
}

impl Backend for BackendClient {
    type Request = Prepared;

    fn execute(
        &self,
        clock: &RunClock,
        request: &Prepared,
        intended: u64,
        released: u64,
        waited_for_slot: bool,
        stop: &StopSignal,
    ) -> impl Future<Output = RequestRecord> + Send {
        BackendClient::execute(
            self,
            clock,
            request,
            intended,
            released,
            waited_for_slot,
            stop,
        )
    }

    fn telemetry_target(&self) -> Option<&Target> {
        Some(self.target())
    }

    fn open_ahead(&self, n: usize) -> impl Future<Output = usize> + Send {
        BackendClient::open_ahead(self, n)
    }
}
