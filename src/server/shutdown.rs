//! The shutdown signals: SIGTERM (what orchestrators send) or SIGINT
//! (Ctrl-C). The first starts a graceful stop (drain within the grace
//! period); a second one, of either kind, stops the server at once, as most
//! servers do, for an operator who does not want to wait for the drain.

use tokio::sync::watch;

/// The signals received so far; see [`Signals::received`].
#[derive(Debug, Clone)]
pub struct Signals(watch::Receiver<u32>);

impl Signals {
    /// Starts listening for SIGTERM and SIGINT (on a task of the current
    /// runtime) and logs each signal.
    pub fn listen() -> Signals {
        let (tx, rx) = watch::channel(0u32);
        tokio::spawn(async move {
            let mut source = Source::new();
            let mut n = 0;
            while n < 2 {
                let name = source.next().await;
                n += 1;
                if n == 1 {
                    tracing::info!("received {name}");
                } else {
                    tracing::error!("received {name} again: stopping now, abandoning the calls in flight");
                }
                let _ = tx.send(n);
            }
        });
        Signals(rx)
    }

    /// Completes once `n` signals have been received.
    pub async fn received(&self, n: u32) {
        let mut rx = self.0.clone();
        if rx.wait_for(|&seen| seen >= n).await.is_err() {
            // The listener is gone (runtime shutting down): never.
            std::future::pending::<()>().await;
        }
    }
}

/// Completes when the process receives SIGTERM or SIGINT.
pub async fn signal() {
    Signals::listen().received(1).await;
}

struct Source {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl Source {
    fn new() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let open = |kind: SignalKind, name: &str| match signal(kind) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for {name}");
                    None
                }
            };
            Source {
                term: open(SignalKind::terminate(), "SIGTERM"),
                int: open(SignalKind::interrupt(), "SIGINT"),
            }
        }
        #[cfg(not(unix))]
        Source {}
    }

    async fn next(&mut self) -> &'static str {
        #[cfg(unix)]
        {
            async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
                let got = match s {
                    Some(s) => s.recv().await.is_some(),
                    None => false,
                };
                if !got {
                    std::future::pending::<()>().await;
                }
            }
            tokio::select! {
                () = recv(&mut self.term) => "SIGTERM",
                () = recv(&mut self.int) => "SIGINT",
            }
        }
        #[cfg(not(unix))]
        {
            if let Err(e) = tokio::signal::ctrl_c().await {
                tracing::warn!(error = %e, "cannot listen for Ctrl-C");
                std::future::pending::<()>().await;
            }
            "Ctrl-C"
        }
    }
}
