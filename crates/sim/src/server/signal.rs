//! The shutdown future of a server run as a process: Ctrl-C or SIGTERM. The library installs
//! nothing by itself; a binary passes this future to [`serve`](super::serve) (or awaits it
//! before stopping its own server), and the handlers exist only while it is awaited.

/// Resolves on Ctrl-C or, on Unix, SIGTERM.
pub async fn stop_requested() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
