use tokio::sync::watch;

/// One shutdown signal for every task: flips to `true` on SIGTERM or Ctrl-C.
#[derive(Clone)]
pub struct Shutdown(watch::Receiver<bool>);

impl Shutdown {
    /// Listens for SIGTERM and SIGINT in the background.
    pub fn on_signals() -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        let (tx, rx) = watch::channel(false);
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
                _ = int.recv() => tracing::info!("SIGINT: shutting down"),
            }
            let _ = tx.send(true);
        });
        Ok(Shutdown(rx))
    }

    /// A signal flipped by hand (tests, embedding): send `true` to shut down. Dropping the
    /// sender also counts as a shutdown request.
    pub fn manual() -> (watch::Sender<bool>, Self) {
        let (tx, rx) = watch::channel(false);
        (tx, Shutdown(rx))
    }

    /// Resolves once shutdown was requested.
    pub async fn requested(&self) {
        let mut rx = self.0.clone();
        let _ = rx.wait_for(|stop| *stop).await;
    }

    pub fn is_requested(&self) -> bool {
        *self.0.borrow()
    }
}
