//! A run-wide stop signal: Ctrl-C stops dispatching; the end of the grace period cancels
//! what is still in flight.

use tokio::sync::watch;

/// Two-stage stop: `stop_dispatch` (no new requests) then `cancel` (abort in-flight ones).
#[derive(Debug, Clone)]
pub struct StopSignal {
    dispatch: watch::Receiver<bool>,
    cancel: watch::Receiver<bool>,
}

/// The sending half of a `StopSignal`.
#[derive(Debug)]
pub struct StopHandle {
    dispatch: watch::Sender<bool>,
    cancel: watch::Sender<bool>,
}

pub fn stop_pair() -> (StopHandle, StopSignal) {
    let (dtx, drx) = watch::channel(false);
    let (ctx, crx) = watch::channel(false);
    (
        StopHandle {
            dispatch: dtx,
            cancel: ctx,
        },
        StopSignal {
            dispatch: drx,
            cancel: crx,
        },
    )
}

impl StopHandle {
    pub fn stop_dispatch(&self) {
        let _ = self.dispatch.send(true);
    }

    pub fn cancel(&self) {
        let _ = self.dispatch.send(true);
        let _ = self.cancel.send(true);
    }
}

impl StopSignal {
    /// A signal that never fires.
    pub fn never() -> Self {
        // The handle is dropped at once; a closed channel means "never" below.
        stop_pair().1
    }

    pub fn dispatch_stopped(&self) -> bool {
        *self.dispatch.borrow()
    }

    pub async fn dispatch_stop(&self) {
        let mut rx = self.dispatch.clone();
        if rx.wait_for(|v| *v).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    pub async fn cancelled(&self) {
        let mut rx = self.cancel.clone();
        if rx.wait_for(|v| *v).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
