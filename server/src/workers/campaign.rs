//! The campaign worker, on every replica: starts due campaigns (compare-and-set, one winner,
//! recipients materialised in the same transaction), hands queued sends to the delivery queue
//! in SKIP LOCKED batches, sweeps cancelled campaigns, and finishes campaigns with nothing
//! left. Each step is one idempotent statement or transaction (guarantees 4–8), so a
//! process killed anywhere leaves nothing half done.

use std::time::Duration;

use anyhow::Context;

use sqlx::postgres::PgListener;
use sqlx::PgPool;

use app::db::campaign::states::OrgCampaign;
use app::domain::{CampaignId, OrgId};

use crate::ops::shutdown::Shutdown;
use crate::workers::progress::Notifier;

#[derive(Clone, Debug)]
pub struct Config {
    /// Between ticks when nothing is sending (an approval wakes the worker at once).
    pub tick: Duration,
    /// Sends claimed per hand-off batch.
    pub batch: i64,
    /// A campaign gets more hand-offs only while it has fewer queued deliveries than this.
    pub watermark: i64,
}

/// While campaigns are sending, the worker looks again this often.
const BUSY_POLL: Duration = Duration::from_millis(200);
/// Campaigns one hand-off batch spreads over.
const CAMPAIGNS_PER_BATCH: i64 = 8;
/// Hand-off batches per round before the round's other steps run.
const BATCHES_PER_ROUND: usize = 50;
/// Cancel-sweep batches (of at least 500 rows) per round.
const SWEEPS_PER_ROUND: usize = 20;

/// What one round did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Round {
    /// The campaigns this worker started.
    pub started: Vec<Started>,
    pub handed_off: i64,
    pub suppressed: i64,
    pub cancelled: i64,
    pub finished: Vec<CampaignId>,
}

/// A campaign a worker started, with its recipients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Started {
    pub campaign: CampaignId,
    pub recipients: i64,
}

/// Starts every due campaign this worker wins: the start compare-and-set and the
/// materialisation commit together, so a crash in between starts nothing. One campaign that
/// cannot start (logged, retried next round) does not hold back the others.
pub async fn start_due(pool: &PgPool) -> sqlx::Result<Vec<Started>> {
    let due = {
        let mut conn = pool.acquire().await?;
        app::db::campaign::states::due(&mut conn, 20).await?
    };
    let mut started = Vec::new();
    for OrgCampaign { org_id, id } in due {
        match start_one(pool, org_id, id).await {
            Ok(Some(n)) => {
                tracing::info!(campaign = %id, recipients = n, "campaign started");
                started.push(Started {
                    campaign: id,
                    recipients: n,
                });
            }
            Ok(None) => {} // another worker won it, or is starting it now
            Err(e) => {
                tracing::warn!(campaign = %id, error = %e, "cannot start campaign; will retry")
            }
        }
    }
    Ok(started)
}

/// The start and the materialisation in one transaction: `Some(recipients)` if this worker won.
async fn start_one(pool: &PgPool, org_id: OrgId, id: CampaignId) -> sqlx::Result<Option<i64>> {
    let mut tx = pool.begin().await?;
    if !app::db::campaign::states::start(&mut tx, id).await? {
        return Ok(None);
    }
    let n = app::db::campaign::sends::materialise(&mut tx, org_id, id).await?;
    app::db::campaign::states::materialized(&mut tx, id, n).await?;
    tx.commit().await?;
    Ok(Some(n))
}

/// One round: start, hand off (up to [`BATCHES_PER_ROUND`] batches), sweep cancelled, finish.
#[tracing::instrument(name = "campaign_round", skip_all, fields(batch = cfg.batch))]
pub async fn round(pool: &PgPool, cfg: &Config, notifier: &Notifier) -> anyhow::Result<Round> {
    let mut r = Round {
        started: start_due(pool).await.context("starting due campaigns")?,
        ..Round::default()
    };
    let started: Vec<CampaignId> = r.started.iter().map(|s| s.campaign).collect();
    notifier.touch(&started);
    for _ in 0..BATCHES_PER_ROUND {
        let h =
            app::db::campaign::sends::hand_off(pool, cfg.batch, cfg.watermark, CAMPAIGNS_PER_BATCH)
                .await
                .context("handing recipients to the delivery queue")?;
        notifier.touch(&h.campaigns);
        r.handed_off += h.handed_off;
        r.suppressed += h.suppressed;
        if h.handed_off + h.suppressed == 0 {
            break;
        }
    }
    // Bounded per round, so a million-recipient cancel never stalls this replica's hand-offs.
    for _ in 0..SWEEPS_PER_ROUND {
        let n = app::db::campaign::sends::sweep_cancelled(pool, cfg.batch.max(500))
            .await
            .context("sweeping cancelled campaigns")?;
        r.cancelled += n;
        if n == 0 {
            break;
        }
    }
    let mut conn = pool.acquire().await?;
    r.finished = app::db::campaign::states::finish_done(&mut conn)
        .await
        .context("finishing sent campaigns")?;
    for id in &r.finished {
        tracing::info!(campaign = %id, "campaign sent");
    }
    notifier.touch(&r.finished);
    Ok(r)
}

/// Runs rounds until shutdown: back to back while work moves, every [`BUSY_POLL`] while
/// campaigns are sending, else every tick or when an approval is notified.
pub async fn run(pool: PgPool, cfg: Config, notifier: Notifier, shutdown: Shutdown) {
    let mut listener = match PgListener::connect_with(&pool).await {
        Ok(mut l) => match l.listen("mailroom_campaign_approved").await {
            Ok(()) => Some(l),
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for approvals; relying on the tick");
                None
            }
        },
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for approvals; relying on the tick");
            None
        }
    };
    loop {
        let wait = match round(&pool, &cfg, &notifier).await {
            Ok(r) if r.handed_off + r.suppressed + r.cancelled > 0 => Duration::ZERO,
            Ok(_) => match sending_exists(&pool).await {
                true => BUSY_POLL,
                false => cfg.tick,
            },
            Err(e) => {
                tracing::warn!(error = %format_args!("{e:#}"), "campaign round failed; retrying");
                Duration::from_secs(1)
            }
        };
        if wait.is_zero() {
            if shutdown.is_requested() {
                return;
            }
            continue;
        }
        tokio::select! {
            _ = shutdown.requested() => return,
            _ = tokio::time::sleep(wait) => {}
            n = recv(&mut listener) => {
                if let Some(id) = n {
                    tracing::debug!(campaign = %id, "approval notified");
                }
            }
        }
    }
}

/// The next approval notification (never, without a listener).
async fn recv(listener: &mut Option<PgListener>) -> Option<String> {
    match listener {
        Some(l) => match l.recv().await {
            Ok(n) => Some(n.payload().to_owned()),
            Err(e) => {
                tracing::warn!(error = %e, "approval listener lost its connection; reconnecting");
                tokio::time::sleep(Duration::from_secs(1)).await;
                None
            }
        },
        None => std::future::pending().await,
    }
}

async fn sending_exists(pool: &PgPool) -> bool {
    match pool.acquire().await {
        Ok(mut conn) => app::db::campaign::states::any_sending(&mut conn)
            .await
            .unwrap_or(true),
        Err(_) => true,
    }
}
