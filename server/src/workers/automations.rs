//! The automation step runner on every replica: claims due enrolments with `SKIP LOCKED` and
//! takes their steps (`db::automation::run_due`), batch after batch while there is work, then
//! polls; every few minutes enrols the people whose date trigger fires today, and every
//! minute those who entered a segment that triggers an automation (and reports who entered or
//! left the segments endpoints want events of). Any number
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
    /// Between segment scans (automation triggers and events out).
    pub segment_scan: Duration,
}

/// Runs `scan` when `every` has passed since `last` (or never ran), logging what it found
/// (enrolments, or segment entries and exits reported).
async fn scan_when_due<F>(
    last: &mut Option<std::time::Instant>,
    every: Duration,
    what: &str,
    scan: F,
) where
    F: std::future::Future<Output = sqlx::Result<u64>>,
{
    if last.is_some_and(|t| t.elapsed() < every) {
        return;
    }
    *last = Some(std::time::Instant::now());
    match scan.await {
        Ok(0) => {}
        Ok(n) => tracing::info!(found = n, scan = what, "scan found changes"),
        Err(e) => tracing::warn!(error = %e, scan = what, "scan failed; will retry"),
    }
}

pub async fn run(pool: PgPool, cfg: Config, shutdown: Shutdown) {
    let (mut dates, mut segments, mut watched) = (None, None, None);
    loop {
        let by_dates = app::db::automation::enrol_by_dates(&pool, cfg.now);
        scan_when_due(&mut dates, cfg.date_scan, "date", by_dates).await;
        let by_segments = app::db::automation::enrol_by_segments(&pool, cfg.now, cfg.segment_scan);
        scan_when_due(
            &mut segments,
            cfg.segment_scan,
            "segment trigger",
            by_segments,
        )
        .await;
        let events = app::db::segment::watch(&pool, cfg.now, cfg.segment_scan);
        scan_when_due(&mut watched, cfg.segment_scan, "segment events", events).await;
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
