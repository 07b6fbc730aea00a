//! Leader jobs (guarantee 11). Every replica runs an elector; the one holding the lease runs
//! the singleton jobs: the lease reaper and retention. Each job is an idempotent statement
//! fenced by the lease's epoch, and the leader stops acting locally before its lease can expire
//! (a lease counts from before the renewal was asked, less a safety margin), so a stalled leader
//! that wakes up late neither acts on stale belief nor gets a write through.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sqlx::PgPool;

use app::db::leader::{self, Lease};

use crate::ops::shutdown::Shutdown;

/// The lease's name: one leader for all singleton jobs.
pub const NAME: &str = "leader";

#[derive(Clone, Debug)]
pub struct Config {
    pub lease_seconds: f64,
    pub retention_days: f64,
    /// Days a deleted campaign stays in the recycle bin.
    pub bin_days: f64,
}

/// How often retention runs on the leader.
const RETENTION_EVERY: Duration = Duration::from_secs(3600);
/// Rows cleared per retention statement (no huge update in one go).
const RETENTION_BATCH: i64 = 5000;

struct Held {
    lease: Lease,
    /// Local deadline: act only before it (it falls before the lease's database expiry).
    valid_until: Instant,
}

/// Elects, renews and runs the leader jobs until shutdown; gives the lease up on the way out.
pub async fn run(
    pool: PgPool,
    cfg: Config,
    holder: String,
    captured_dir: PathBuf,
    shutdown: Shutdown,
) {
    let ttl = Duration::from_secs_f64(cfg.lease_seconds);
    let mut held: Option<Held> = None;
    let mut last_retention: Option<Instant> = None;
    loop {
        let asked = Instant::now();
        match leader::acquire(&pool, NAME, &holder, cfg.lease_seconds).await {
            Ok(Some(lease)) => {
                if held.as_ref().map(|h| h.lease.epoch) != Some(lease.epoch) {
                    tracing::info!(epoch = lease.epoch, "became leader");
                }
                held = Some(Held {
                    lease,
                    valid_until: asked + ttl.mul_f64(0.8),
                });
            }
            Ok(None) => {
                if let Some(old) = held.take() {
                    tracing::warn!(
                        epoch = old.lease.epoch,
                        "lost leadership to another replica"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot renew the leader lease"),
        }
        if let Some(h) = &held {
            if Instant::now() >= h.valid_until {
                tracing::warn!(
                    epoch = h.lease.epoch,
                    "leader lease not renewed in time: stepping down"
                );
                held = None;
            }
        }
        if let Some(h) = &held {
            let retention_due = last_retention.is_none_or(|t| t.elapsed() >= RETENTION_EVERY);
            jobs(&pool, &cfg, h, &captured_dir, retention_due).await;
            if retention_due {
                last_retention = Some(Instant::now());
            }
        }
        tokio::select! {
            _ = shutdown.requested() => break,
            _ = tokio::time::sleep(ttl / 3) => {}
        }
    }
    if let Some(h) = held {
        if let Err(e) = leader::release(&pool, &h.lease).await {
            tracing::warn!(error = %e, "could not give up the leader lease; it will expire");
        }
    }
}

/// One pass of the singleton jobs. Each checks the local deadline first; the database fence
/// catches whatever slips past it.
async fn jobs(pool: &PgPool, cfg: &Config, h: &Held, captured_dir: &Path, retention: bool) {
    let lease = &h.lease;
    let still = || Instant::now() < h.valid_until;
    if !still() {
        return;
    }
    match app::db::delivery::reap_expired(pool, lease).await {
        Ok(app::db::delivery::TakenBack { requeued, unknown }) => {
            if requeued + unknown > 0 {
                tracing::info!(
                    epoch = lease.epoch,
                    requeued,
                    unknown,
                    "reaped expired delivery leases"
                );
            }
            log(
                pool,
                lease,
                "reap",
                &format!("requeued={requeued} unknown={unknown}"),
            )
            .await;
        }
        Err(e) if app::db::delivery::is_lock_timeout(&e) => tracing::info!(
            "lease reaper yielded to a delivery ledger write on the same rows; retrying next pass"
        ),
        Err(e) => tracing::warn!(error = %e, "lease reaper failed"),
    }
    if still() {
        reconcile_finished(pool, lease).await;
    }
    if still() {
        if let Err(e) = app::db::metrics::fold_counts(pool).await {
            tracing::warn!(error = %e, "folding the delivery counts failed");
        }
    }
    if !retention || !still() {
        return;
    }
    let mut cleared = 0;
    loop {
        match app::db::delivery::trim_details(pool, lease, cfg.retention_days, RETENTION_BATCH)
            .await
        {
            Ok(n) => {
                cleared += n;
                if n < RETENTION_BATCH as u64 || !still() {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "retention of delivery details failed");
                break;
            }
        }
    }
    let mut purged = 0;
    while still() {
        match app::db::campaign::bin::purge(pool, lease, cfg.bin_days, RETENTION_BATCH).await {
            Ok(0) => break,
            Ok(n) => purged += n,
            Err(e) => {
                tracing::warn!(error = %e, "purging the campaign recycle bin failed");
                break;
            }
        }
    }
    let mut events = 0;
    while still() {
        match app::db::events::trim(pool, lease, RETENTION_BATCH).await {
            Ok(n) => {
                events += n;
                if n < RETENTION_BATCH as u64 {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "retention of events failed");
                break;
            }
        }
    }
    let mut hooks = 0;
    while still() {
        match app::db::webhooks_out::trim(pool, lease, cfg.retention_days, RETENTION_BATCH).await {
            Ok(n) => {
                hooks += n;
                if n < RETENTION_BATCH as u64 {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "retention of webhook events failed");
                break;
            }
        }
    }
    let files = trim_captured(captured_dir, cfg.retention_days).await;
    let log_rows = app::db::leader::trim_log(pool, lease, cfg.retention_days)
        .await
        .unwrap_or(0);
    // Outside every signature window: a replay this old is refused by its timestamp.
    let nonces = app::db::reports::forget_nonces(pool).await.unwrap_or(0);
    let buckets = app::db::rate_limit::forget_full(pool).await.unwrap_or(0);
    log(
        pool,
        lease,
        "retention",
        &format!("details={cleared} captured_files={files} leader_log={log_rows} purged_campaign_rows={purged} events={events} webhook_events={hooks} webhook_nonces={nonces} full_rate_buckets={buckets}"),
    )
    .await;
}

/// Replaces each newly finished campaign's progress slots with `count(*)` figures, once.
async fn reconcile_finished(pool: &PgPool, lease: &Lease) {
    let ids = match pool.acquire().await {
        Ok(mut conn) => app::db::campaign::slots::to_reconcile(&mut conn, 20).await,
        Err(e) => Err(e),
    };
    let ids = match ids {
        Ok(ids) => ids,
        Err(e) => return tracing::warn!(error = %e, "cannot list campaigns to reconcile"),
    };
    for id in ids {
        let done = async {
            let mut tx = pool.begin().await?;
            let r = app::db::campaign::slots::reconcile(&mut tx, id, lease).await?;
            tx.commit().await?;
            Ok::<_, sqlx::Error>(r)
        }
        .await;
        match done {
            Ok(Some((before, after))) => {
                if before != after {
                    tracing::warn!(
                        campaign = %id,
                        ?before,
                        ?after,
                        "progress slots differed from count(*); corrected"
                    );
                }
                log(
                    pool,
                    lease,
                    "reconcile",
                    &format!(
                        "campaign={id} slots_differed={} counted={after:?}",
                        before != after
                    ),
                )
                .await;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(campaign = %id, error = %e, "reconciling progress failed; will retry")
            }
        }
    }
}

async fn log(pool: &PgPool, lease: &Lease, action: &str, detail: &str) {
    match leader::log_action(pool, lease, action, detail).await {
        Ok(true) => {}
        Ok(false) => tracing::warn!(
            epoch = lease.epoch,
            action,
            "leader write rejected by the epoch fence"
        ),
        Err(e) => tracing::warn!(error = %e, action, "could not log a leader action"),
    }
}

/// Removes captured `.eml` files older than the retention (their ledger rows stay). File ages
/// come from the local clock: this touches local files only, never shared state.
pub async fn trim_captured(dir: &Path, days: f64) -> u64 {
    let dir = dir.to_path_buf();
    let max_age = Duration::from_secs_f64(days * 86_400.0);
    tokio::task::spawn_blocking(move || {
        let mut removed = 0;
        let Ok(orgs) = std::fs::read_dir(&dir) else {
            return 0;
        };
        for org in orgs.flatten() {
            let Ok(files) = std::fs::read_dir(org.path()) else {
                continue;
            };
            for f in files.flatten() {
                let old = f
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > max_age);
                if old && std::fs::remove_file(f.path()).is_ok() {
                    removed += 1;
                }
            }
        }
        removed
    })
    .await
    .unwrap_or(0)
}
