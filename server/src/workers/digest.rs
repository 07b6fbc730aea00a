//! The digest ticker: on every replica, every `--digest-tick-seconds`, one tick over all orgs
//! (no leader needed: the unique key on `digest_sends` is the arbiter).

use std::time::Duration;

use sqlx::PgPool;

use crate::ops::shutdown::Shutdown;
use app::digest::{tick, Templates, CHUNK};

/// Ticks until shutdown. A tick in progress is dropped on shutdown: its open chunk rolls back
/// and claims nothing, so the next tick (on any replica) does that chunk's work. `now` pins the
/// clock every tick reads (tests only); None is the database's.
pub async fn run(
    pool: PgPool,
    every: Duration,
    now: Option<chrono::DateTime<chrono::Utc>>,
    shutdown: Shutdown,
) {
    let mut interval = tokio::time::interval(every.max(Duration::from_secs(1)));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.requested() => return,
            _ = interval.tick() => {}
        }
        tokio::select! {
            _ = shutdown.requested() => return,
            report = tick(&pool, now, CHUNK, Templates::builtin()) => match report {
                Ok(r) if r.claimed + r.skipped > 0 || !r.failed_orgs.is_empty() => {
                    tracing::info!(claimed = r.claimed, skipped = r.skipped, recipients = r.recipients,
                        failed_orgs = r.failed_orgs.len(), "digest tick");
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "digest tick failed; the next one retries"),
            },
        }
    }
}
