//! Ctrl-C and SIGTERM during `sweep serve`: the first one stops the benchmark run the way
//! `servebench run` stops (the signal passed on to it: no new requests, the results so far
//! written), then the server is stopped and the records of what was done are written; a
//! second one stops the run at once.

use std::fmt;

use tokio::sync::watch;

/// What stopped the sweep, shared between the signal watcher and the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signalled {
    /// `SIGINT (Ctrl-C)` or `SIGTERM`.
    pub cause: &'static str,
    /// A second signal came: stop without waiting.
    pub force: bool,
}

/// The sweep's view of the signals.
#[derive(Debug, Clone)]
pub struct Interrupt(watch::Receiver<Option<Signalled>>);

impl Interrupt {
    /// Watches SIGINT and SIGTERM from now on (a library never does this; the command does).
    pub fn watch_signals() -> std::io::Result<Interrupt> {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let (tx, rx) = watch::channel(None);
        tokio::spawn(async move {
            let mut first: Option<&'static str> = None;
            loop {
                let cause = tokio::select! {
                    r = tokio::signal::ctrl_c() => match r {
                        Ok(()) => "SIGINT (Ctrl-C)",
                        Err(_) => return,
                    },
                    _ = term.recv() => "SIGTERM",
                };
                let signalled = Signalled {
                    cause: first.unwrap_or(cause),
                    force: first.is_some(),
                };
                if first.is_none() {
                    eprintln!(
                        "\nInterrupted by {cause}: stopping the current run as `servebench run` stops, then the server (again to stop at once)"
                    );
                }
                first = Some(signalled.cause);
                if tx.send(Some(signalled)).is_err() {
                    return;
                }
            }
        });
        Ok(Interrupt(rx))
    }

    /// An interrupt that never fires (tests, dry runs).
    #[cfg(test)]
    pub fn never() -> (watch::Sender<Option<Signalled>>, Interrupt) {
        let (tx, rx) = watch::channel(None);
        (tx, Interrupt(rx))
    }

    /// The signal, once one came.
    pub fn signalled(&self) -> Option<Signalled> {
        *self.0.borrow()
    }

    /// Resolves when a signal comes (at once if one came already).
    pub async fn wait(&self) -> Signalled {
        let mut rx = self.0.clone();
        loop {
            if let Some(s) = *rx.borrow_and_update() {
                return s;
            }
            if rx.changed().await.is_err() {
                // The watcher is gone: no signal will come.
                std::future::pending::<()>().await;
            }
        }
    }
}

/// The error that unwinds the sweep's loop to its records when a signal stopped it, with the
/// runs of the interrupted combination that finished before it.
#[derive(Debug)]
pub struct Interrupted {
    pub cause: &'static str,
    pub done: Vec<serde_json::Value>,
}

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "interrupted by {}", self.cause)
    }
}

impl std::error::Error for Interrupted {}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiting_sees_a_signal_sent_before_or_after() {
        let (tx, i) = Interrupt::never();
        assert_eq!(i.signalled(), None);
        let s = Signalled {
            cause: "SIGTERM",
            force: false,
        };
        let waiter = tokio::spawn({
            let i = i.clone();
            async move { i.wait().await }
        });
        tx.send(Some(s)).expect("a receiver");
        assert_eq!(waiter.await.expect("joined"), s);
        assert_eq!(i.wait().await, s);
        assert_eq!(i.signalled(), Some(s));
    }
}
