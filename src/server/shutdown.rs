//! The shutdown signal: SIGTERM (what orchestrators send) or SIGINT (Ctrl-C).

/// Completes when the process receives SIGTERM or SIGINT.
pub async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!("received SIGTERM"),
                    _ = ctrl_c() => tracing::info!("received SIGINT"),
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only SIGINT stops the server");
                ctrl_c().await;
                tracing::info!("received SIGINT");
            }
        }
    }
    #[cfg(not(unix))]
    {
        ctrl_c().await;
        tracing::info!("received Ctrl-C");
    }
}

async fn ctrl_c() {
    if let Err(e) = tokio::signal::ctrl_c().await {
        tracing::warn!(error = %e, "cannot listen for SIGINT");
        std::future::pending::<()>().await;
    }
}
