//! A campaign's recipients (`sends`, the campaign worker's real queue): built once when the
//! campaign starts, then handed to the delivery queue in batches (guarantees 5–8): each
//! statement here is idempotent and set-based, so a worker killed anywhere leaves nothing half
//! done and a rerun creates nothing twice.

use sqlx::{PgConnection, PgPool};

use super::audience;
use super::slots::slot;
use crate::domain::{campaign_job_sql, CampaignId, OrgId};

/// Builds the recipient list of a campaign that just started, in the start's transaction: one
/// send per address (`DISTINCT ON (email_lower)`, the oldest subscriber row wins) over its
/// audience (`audience`: lists and segments, minus exclusions; confirmed, never erased, never
/// suppressed), the segments evaluated in this transaction. The unique keys `(campaign_id,
/// subscriber_id)` and `(campaign_id, email_lower)` make a rerun add nothing for an address
/// that already has a send. Counts the new sends as `queued` progress. Returns how many it
/// added.
pub async fn materialise(
    conn: &mut PgConnection,
    org_id: OrgId,
    campaign_id: CampaignId,
) -> sqlx::Result<i64> {
    let targets = audience::targets(conn, org_id, campaign_id).await?;
    let clock = crate::db::segment::clock(conn, org_id, None).await?;
    let mut qb = sqlx::QueryBuilder::new("with k as (select ");
    qb.push_bind(org_id);
    qb.push("::bigint as org, ");
    qb.push_bind(campaign_id);
    qb.push(concat!(
        "::bigint as campaign),
         added as (
             insert into sends (org_id, campaign_id, subscriber_id, email_lower, job_id)
             select distinct on (s.email_lower) s.org_id, (select campaign from k), s.id,
                    s.email_lower, ",
        campaign_job_sql!("(select campaign from k)", "s.id")
    ));
    audience::push_from(&mut qb, org_id, &targets, &clock);
    qb.push(concat!(
        "
             order by s.email_lower, s.created_at, s.id
             on conflict do nothing
             returning 1
         ),
         n as (select count(*) as n from added),
         bump as (
             insert into progress_slots as p (org_id, campaign_id, slot, queued)
             select (select org from k), (select campaign from k), ",
        slot!(),
        ", n from n where n > 0
             on conflict (campaign_id, slot) do update set queued = p.queued + excluded.queued
         )
         select n from n"
    ));
    let mut tx = crate::db::segment::roomy(conn).await?;
    let n = qb
        .build_query_scalar()
        .persistent(false)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(n)
}

/// What one hand-off did.
#[derive(Debug, Default, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct HandOff {
    pub handed_off: i64,
    pub suppressed: i64,
    /// The campaigns whose progress moved.
    pub campaigns: Vec<CampaignId>,
}

/// Guarantees 6–8 in one transaction and one commit: claims up to `batch` queued sends of
/// `sending` campaigns (`FOR UPDATE SKIP LOCKED`, so racing workers take disjoint batches and
/// never wait), at most `campaigns` campaigns at a time picked at random (they take turns),
/// and only from campaigns with fewer than `watermark` queued deliveries (0: no limit), so
/// `sends` stays the real queue. Recipients now suppressed, unsubscribed or erased become `suppressed`; the
/// rest become `handed_off` and their deliveries are enqueued by job id (`ON CONFLICT DO
/// NOTHING`), with the content version frozen at approval. Progress slots move in the same
/// transaction.
pub async fn hand_off(
    pool: &PgPool,
    batch: i64,
    watermark: i64,
    campaigns: i64,
) -> sqlx::Result<HandOff> {
    let mut tx = pool.begin().await?;
    // Roll back explicitly on every path that does not commit: a dropped transaction's rollback
    // is deferred, and until it runs the claimed rows stay locked (SKIP LOCKED would skip them).
    match hand_off_in(&mut tx, batch, watermark, campaigns).await {
        Ok(Some(done)) => {
            tx.commit().await?;
            Ok(done)
        }
        Ok(None) => {
            tx.rollback().await?;
            Ok(HandOff::default())
        }
        Err(e) => {
            let _ = tx.rollback().await;
            Err(e)
        }
    }
}

async fn hand_off_in(
    tx: &mut PgConnection,
    batch: i64,
    watermark: i64,
    campaigns: i64,
) -> sqlx::Result<Option<HandOff>> {
    // Claim first, on `sends_claim` only: the row-value range on (campaign_id, id) can be served
    // by that index alone, so the planner cannot walk the primary key past another campaign's
    // rows (it assumes rows are spread evenly; a campaign's rows are one contiguous run).
    let ids: Vec<i64> = sqlx::query_scalar(
        "with ready as (
             select c.id from campaigns c
             where c.status = 'sending'
               and (select 1 from sends s
                    where (s.campaign_id, s.id) > (c.id, 0) and (s.campaign_id, s.id) < (c.id + 1, 0)
                      and s.status = 'queued'
                    order by s.campaign_id, s.id limit 1) is not null
               and ($2 <= 0 or (select count(*) from (select 1 from deliveries d
                                          where d.campaign_id = c.id and d.status = 'queued' limit $2) w) < $2)
             order by random() limit $3
         ),
         share as (select greatest(1, ceil($1::float8 / nullif(count(*), 0)))::int as n from ready)
         select s.id from ready r cross join share
         cross join lateral (
             select s.id from sends s
             where (s.campaign_id, s.id) > (r.id, 0) and (s.campaign_id, s.id) < (r.id + 1, 0)
               and s.status = 'queued'
             order by s.campaign_id, s.id limit share.n
             for update of s skip locked) s",
    )
    .bind(batch)
    .bind(watermark)
    .bind(campaigns)
    .fetch_all(&mut *tx)
    .await?;
    if ids.is_empty() {
        return Ok(None);
    }
    // Then one statement keyed by those ids (primary-key lookups throughout).
    let done: HandOff = sqlx::query_as(
        concat!(
        "with picked as (
             select s.id, s.org_id, s.campaign_id, s.subscriber_id, s.email_lower, s.job_id, c.approved_version
             from sends s join campaigns c on c.id = s.campaign_id
             where s.id = any($1) and s.status = 'queued'
         ),
         checked as (
             select p.*, sub.email,
                    (sub.status <> 'confirmed' or sub.erased_at is not null
                     or exists (select 1 from suppressions x where x.org_id = p.org_id and x.email_lower = p.email_lower
                                offset 0)) as blocked
             -- One index lookup per row, here and above (offset 0 keeps the planner from a
             -- whole-table join: a long suppression list would be read for every batch).
             from picked p cross join lateral (
                 select x.email, x.status, x.erased_at from subscribers x
                 where x.org_id = p.org_id and x.id = p.subscriber_id offset 0) sub
         ),
         marked as (
             update sends s set status = case when c.blocked then 'suppressed' else 'handed_off' end, updated_at = now()
             from checked c where s.id = any($1) and s.id = c.id
             returning s.org_id, s.campaign_id, s.status
         ),
         queued as (
             insert into deliveries (job_id, org_id, kind, priority, recipient, email_lower,
                                     campaign_id, content_version, subscriber_id)
             select c.job_id, c.org_id, 'campaign', 2, c.email, c.email_lower,
                    c.campaign_id, c.approved_version, c.subscriber_id
             from checked c where not c.blocked
             on conflict (job_id) do nothing
         ),
         bump as (
             insert into progress_slots as p (org_id, campaign_id, slot, queued, handed_off, suppressed)
             select org_id, campaign_id, ",
        slot!(),
        ", -count(*),
                    count(*) filter (where status = 'handed_off'), count(*) filter (where status = 'suppressed')
             from marked group by org_id, campaign_id
             order by campaign_id
             on conflict (campaign_id, slot) do update
             set queued = p.queued + excluded.queued, handed_off = p.handed_off + excluded.handed_off,
                 suppressed = p.suppressed + excluded.suppressed
         )
         select count(*) filter (where status = 'handed_off') as handed_off,
                count(*) filter (where status = 'suppressed') as suppressed,
                coalesce(array_agg(distinct campaign_id), '{}') as campaigns
         from marked"
    ),
    )
    .bind(&ids)
    .fetch_one(&mut *tx)
    .await?;
    Ok(Some(done))
}

/// Sweeps up to `batch` queued sends and queued deliveries of cancelled campaigns to
/// `cancelled` (in batches: never a million-row update in one statement), counting them in the
/// progress slots. Returns how many rows it changed; 0 means nothing is left.
pub async fn sweep_cancelled(pool: &PgPool, batch: i64) -> sqlx::Result<i64> {
    sqlx::query_scalar(concat!(
        "with s_ids as (
             select s.id from sends s join campaigns c on c.id = s.campaign_id
             where c.status = 'cancelled' and s.status = 'queued'
             limit $1 for update of s skip locked
         ),
         s_done as (
             update sends s set status = 'cancelled', updated_at = now()
             from s_ids where s.id = s_ids.id
             returning s.org_id, s.campaign_id, 1 as from_queue
         ),
         -- Only what is still in the queue: a message in flight is given back by its mark
         -- (the campaign stopped) and swept by a later pass, or finishes with its outcome.
         d_ids as (
             select q.job_id from delivery_queue q
             where q.job_id in (
                 select d.job_id from deliveries d join campaigns c on c.id = d.campaign_id
                 where c.status = 'cancelled' and d.status = 'queued'
                   and exists (select 1 from delivery_queue x where x.job_id = d.job_id)
                 limit $1)
             for update of q skip locked
         ),
         d_taken as (delete from delivery_queue q using d_ids where q.job_id = d_ids.job_id),
         d_done as (
             update deliveries d set status = 'cancelled', finished_at = now(), updated_at = now()
             from d_ids where d.job_id = d_ids.job_id and d.status = 'queued'
             returning d.org_id, d.campaign_id, 0 as from_queue
         ),
         done as (select * from s_done union all select * from d_done),
         bump as (
             insert into progress_slots as p (org_id, campaign_id, slot, queued, cancelled)
             select org_id, campaign_id, ",
        slot!(),
        ", -sum(from_queue), count(*)
             from done group by org_id, campaign_id
             order by campaign_id
             on conflict (campaign_id, slot) do update
             set queued = p.queued + excluded.queued, cancelled = p.cancelled + excluded.cancelled
         )
         select count(*) from done"
    ))
    .bind(batch)
    .fetch_one(pool)
    .await
}
