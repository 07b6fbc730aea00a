use std::time::Duration;

use sqlx::PgPool;

use crate::cli::WorkerArgs;
use crate::shutdown::Shutdown;

/// Which command hosts the workers (recorded with the heartbeat).
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    Serve,
    Worker,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Serve => "serve",
            Mode::Worker => "worker",
        }
    }
}

/// A name for this process, unique across replicas and restarts.
pub fn process_id() -> String {
    let host = hostname();
    format!(
        "{host}:{}:{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown-host".into())
}

/// Runs the worker host until shutdown: a heartbeat every few seconds (database clock), session
/// housekeeping, and the delivery worker when SMTP is configured. The digest and campaign
/// workers join here in later issues.
pub async fn run(pool: PgPool, args: WorkerArgs, mode: Mode, shutdown: Shutdown) {
    let id = process_id();
    let host = hostname();
    let pid = std::process::id() as i32;
    let version = env!("CARGO_PKG_VERSION");
    let mut tick = tokio::time::interval(Duration::from_secs(args.heartbeat_seconds.max(1)));
    let delivery = match args.delivery() {
        Some(cfg) => {
            tracing::info!(smtp = %format!("{}:{}", cfg.target.host, cfg.target.port), connections = cfg.connections, "delivery worker started");
            Some(tokio::spawn(crate::delivery::run(
                pool.clone(),
                cfg,
                shutdown.clone(),
            )))
        }
        None => {
            tracing::warn!("no SMTP server configured (--smtp-host): mail stays queued");
            None
        }
    };
    tracing::info!(process = %id, mode = mode.as_str(), "worker host started");
    loop {
        tokio::select! {
            _ = shutdown.requested() => break,
            _ = tick.tick() => {
                if let Err(e) = app::db::heartbeat::beat(&pool, &id, &host, pid, mode.as_str(), version).await {
                    tracing::warn!(error = %e, "heartbeat failed; will retry");
                }
                if let Err(e) = app::db::sessions::purge_expired(&pool).await {
                    tracing::warn!(error = %e, "session purge failed");
                }
            }
        }
    }
    if let Some(d) = delivery {
        // Finishes the round in hand (bounded by the SMTP timeouts), claims nothing new.
        let _ = d.await;
    }
    if let Err(e) = app::db::heartbeat::remove(&pool, &id).await {
        tracing::warn!(error = %e, "could not remove the heartbeat row");
    }
    tracing::info!(process = %id, "worker host stopped");
}
