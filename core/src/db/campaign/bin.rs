//! The recycle bin: a draft, sent or cancelled campaign can be deleted (soft: `deleted_at`) and
//! restored; the leader purges what has been in the bin longer than the retention, with its
//! recipients and delivery ledger rows, in batches.

use sqlx::{PgConnection, PgPool};

use crate::db::leader::{self, Lease};
use crate::domain::CampaignStatus;
use crate::domain::{CampaignId, OrgId};
use crate::model::Binned;

#[derive(Debug, thiserror::Error)]
pub enum BinError {
    /// Only draft, sent and cancelled campaigns go to the bin; it is in this state.
    #[error("only a draft, sent or cancelled campaign can be deleted; this one is {0}")]
    NotDeletable(CampaignStatus),
    #[error("no such campaign")]
    NotFound,
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Moves a campaign to the bin (compare-and-set on its state).
pub async fn delete(
    conn: &mut PgConnection,
    org_id: OrgId,
    id: CampaignId,
) -> Result<(), BinError> {
    let done: Option<i64> = sqlx::query_scalar(
        "update campaigns set deleted_at = now()
         where org_id = $1 and id = $2 and deleted_at is null and status = any($3)
         returning id",
    )
    .bind(org_id)
    .bind(id)
    .bind(CampaignStatus::DELETABLE.map(CampaignStatus::as_str))
    .fetch_optional(&mut *conn)
    .await?;
    if done.is_some() {
        return Ok(());
    }
    let status: Option<CampaignStatus> = sqlx::query_scalar(
        "select status from campaigns where org_id = $1 and id = $2 and deleted_at is null",
    )
    .bind(org_id)
    .bind(id)
    .fetch_optional(conn)
    .await?;
    Err(status.map_or(BinError::NotFound, BinError::NotDeletable))
}

/// Takes a campaign out of the bin; `false` if it is not in this org's bin.
pub async fn restore(conn: &mut PgConnection, org_id: OrgId, id: CampaignId) -> sqlx::Result<bool> {
    let done: Option<i64> = sqlx::query_scalar(
        "update campaigns set deleted_at = null
         where org_id = $1 and id = $2 and deleted_at is not null returning id",
    )
    .bind(org_id)
    .bind(id)
    .fetch_optional(conn)
    .await?;
    Ok(done.is_some())
}

/// The org's bin, most recently deleted first.
pub async fn list(conn: &mut PgConnection, org_id: i64, days: f64) -> sqlx::Result<Vec<Binned>> {
    sqlx::query_as(
        "select c.id, c.name, c.status,
                to_char(c.deleted_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as deleted,
                to_char((c.deleted_at + make_interval(secs => $2 * 86400)) at time zone o.timezone,
                        'YYYY-MM-DD HH24:MI') as purged_after
         from campaigns c join orgs o on o.id = c.org_id
         where c.org_id = $1 and c.deleted_at is not null
         order by c.deleted_at desc, c.id desc limit 200",
    )
    .bind(org_id)
    .bind(days)
    .fetch_all(conn)
    .await
}

/// One purge step (a leader job, fenced by its lease): deletes up to `batch` deliveries and
/// `batch` sends of campaigns in the bin for more than `days`, and the campaigns that have none
/// left. Returns the rows deleted; 0 means nothing is left to purge.
pub async fn purge(pool: &PgPool, lease: &Lease, days: f64, batch: i64) -> sqlx::Result<u64> {
    let sql = format!(
        "with old as (
             select id from campaigns
             where deleted_at < now() - make_interval(secs => $4 * 86400) and {fence}
         ),
         d as (
             delete from deliveries where job_id in (
                 select job_id from deliveries where campaign_id in (select id from old) limit $5)
             returning 1
         ),
         s as (
             delete from sends where id in (
                 select id from sends where campaign_id in (select id from old) limit $5)
             returning 1
         ),
         -- Same snapshot: a campaign is deleted only once an earlier step emptied it.
         c as (
             delete from campaigns c where c.id in (select id from old)
               and not exists (select 1 from sends x where x.campaign_id = c.id)
               and not exists (select 1 from deliveries x where x.campaign_id = c.id)
             returning 1
         )
         select (select count(*) from d) + (select count(*) from s) + (select count(*) from c)",
        fence = leader::FENCE
    );
    let mut tx = pool.begin().await?;
    // Their queue rows first, under their lock: every statement that finishes a queued row
    // locks the queue row before the delivery row, so no two of them wait on each other in a
    // circle (the delete below would otherwise lock the delivery, then its trigger the queue).
    let off_queue = format!(
        "delete from delivery_queue q using deliveries d, campaigns c
         where q.job_id = d.job_id and d.campaign_id = c.id
           and c.deleted_at < now() - make_interval(secs => $4 * 86400) and {fence}",
        fence = leader::FENCE
    );
    leader::fenced_rows(&off_queue, lease)
        .bind(days)
        .execute(&mut *tx)
        .await?;
    let n: i64 = leader::fenced::<(i64,)>(&sql, lease)
        .bind(days)
        .bind(batch)
        .fetch_one(&mut *tx)
        .await?
        .0;
    tx.commit().await?;
    Ok(n as u64)
}
