//! The automation step runner on every replica: claims due enrolments with `SKIP LOCKED` and
//! takes their steps (`db::automation::run_due`), batch after batch while there is work, then
//! polls; and every few minutes enrols the people whose date trigger fires today. Any number
//! of replicas run it side by side; a killed one's batch rolls back and is taken again by the
//! next claim.

use std::time::Duration;

use sqlx::PgPool;

use crate::ops::shutdown::Shutdown;

#[derive(Clone, Debug)]
pub struct Config {
    /// Between polls while nothing is due.
    pub poll: Duration,
    /// Enrolments per claiming transaction.
    pub batch: i64,
    /// A pinned clock (tests only); None is the database's.
    pub now: Option<chrono::DateTime<chrono::Utc>>,
    /// Between scans for date triggers that fire today.
    pub date_scan: Duration,
}

pub async fn run(pool: PgPool, cfg: Config, shutdown: Shutdown) {
    let mut scanned: Option<std::time::Instant> = None;
    loop {
        if scanned.is_none_or(|t| t.elapsed() >= cfg.date_scan) {
            scanned = Some(std::time::Instant::now());
            match app::db::automation::enrol_by_dates(&pool, cfg.now).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(enrolments = n, "date triggers enrolled"),
                Err(e) => tracing::warn!(error = %e, "scanning date triggers failed; will retry"),
            }
        }
        let idle = tokio::select! {
            _ = shutdown.requested() => return,
            r = app::db::automation::run_due(&pool, cfg.now, cfg.batch) => match r {
                Ok(n) => {
                    if n > 0 {
                        tracing::debug!(enrolments = n, "automation steps taken");
                    }
                    (n as i64) < cfg.batch
                }
                Err(e) => {
                    tracing::warn!(error = %e, "taking automation steps failed; will retry");
                    true
                }
            },
        };
        if idle {
            tokio::select! {
                _ = shutdown.requested() => return,
                _ = tokio::time::sleep(cfg.poll) => {}
            }
        }
    }
}
