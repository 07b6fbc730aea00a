//! A campaign's progress counters, the one home of their rules. Every statement that moves a
//! recipient's state adds the change to `progress_slots` in that same statement, so the counts
//! and the rows commit together; the rows of one campaign are spread over 16 slot rows
//! (a slot picked at random per statement and campaign), so concurrent writers rarely wait on
//! each other. Reading sums the slots: the same cost for 100 or 1,000,000 recipients. A leader
//! job reconciles a finished campaign's slots with the rows, once.

use sqlx::PgConnection;

use crate::db::leader::{self, Lease};
use crate::domain::{CampaignId, OrgId};

/// The slot a statement adds to, as SQL: one of 16, picked per row of the insert
/// (each campaign is one row of a bump, so it meets one slot). A macro so that statements
/// built with `concat!` stay compile-time constants.
macro_rules! slot {
    () => {
        "floor(random() * 16)::smallint"
    };
}
pub(crate) use slot;

/// A CTE named `bump` adding the terminal states of the CTE `changed` (org_id, campaign_id,
/// status) to the campaigns' progress slots, in the same statement as the change itself.
macro_rules! bump_changed {
    () => {
        concat!(
            "bump as (
             insert into progress_slots as p (org_id, campaign_id, slot, delivered, failed, unknown, suppressed)
             select org_id, campaign_id, ",
            $crate::db::campaign::slots::slot!(),
            ",
                    count(*) filter (where status = 'delivered'), count(*) filter (where status = 'failed'),
                    count(*) filter (where status = 'unknown'), count(*) filter (where status = 'suppressed')
             from changed where campaign_id is not null and status in ('delivered', 'failed', 'unknown', 'suppressed')
             group by org_id, campaign_id
             order by campaign_id
             on conflict (campaign_id, slot) do update
             set delivered = p.delivered + excluded.delivered, failed = p.failed + excluded.failed,
                 unknown = p.unknown + excluded.unknown, suppressed = p.suppressed + excluded.suppressed
         )"
        )
    };
}
pub(crate) use bump_changed;

/// A campaign's progress, summed over its counter slots: the same cost for 100 or 1,000,000
/// recipients.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct SlotSums {
    pub queued: i64,
    pub handed_off: i64,
    pub delivered: i64,
    pub failed: i64,
    pub unknown: i64,
    pub suppressed: i64,
    pub cancelled: i64,
}

/// The select list summing a campaign's counter slots into [`SlotSums`] columns.
pub(crate) const SLOT_SUMS: &str =
    "coalesce(sum(queued), 0)::bigint as queued, coalesce(sum(handed_off), 0)::bigint as handed_off,
     coalesce(sum(delivered), 0)::bigint as delivered, coalesce(sum(failed), 0)::bigint as failed,
     coalesce(sum(unknown), 0)::bigint as unknown, coalesce(sum(suppressed), 0)::bigint as suppressed,
     coalesce(sum(cancelled), 0)::bigint as cancelled";

pub async fn progress(
    conn: &mut PgConnection,
    org_id: OrgId,
    campaign_id: CampaignId,
) -> sqlx::Result<SlotSums> {
    sqlx::query_as(&format!(
        "select {SLOT_SUMS} from progress_slots where org_id = $1 and campaign_id = $2"
    ))
    .bind(org_id)
    .bind(campaign_id)
    .fetch_one(conn)
    .await
}

/// The progress figures counted from the rows themselves, `c` being the campaign's parameter.
fn counted_sql(c: &str) -> String {
    format!(
        "select (select count(*) from sends where campaign_id = {c} and status = 'queued') as queued,
            (select count(*) from sends where campaign_id = {c} and status = 'handed_off') as handed_off,
            (select count(*) from deliveries where campaign_id = {c} and status = 'delivered') as delivered,
            (select count(*) from deliveries where campaign_id = {c} and status = 'failed') as failed,
            (select count(*) from deliveries where campaign_id = {c} and status = 'unknown') as unknown,
            (select count(*) from sends where campaign_id = {c} and status = 'suppressed')
              + (select count(*) from deliveries where campaign_id = {c} and status = 'suppressed') as suppressed,
            (select count(*) from sends where campaign_id = {c} and status = 'cancelled')
              + (select count(*) from deliveries where campaign_id = {c} and status = 'cancelled') as cancelled"
    )
}

/// The same figures counted from the rows themselves (`count(*)`): what the slots must equal.
pub async fn counted(conn: &mut PgConnection, campaign_id: CampaignId) -> sqlx::Result<SlotSums> {
    sqlx::query_as(&counted_sql("$1"))
        .bind(campaign_id)
        .fetch_one(conn)
        .await
}

/// Finished campaigns whose slots were not reconciled yet (a leader job).
pub async fn to_reconcile(conn: &mut PgConnection, limit: i64) -> sqlx::Result<Vec<CampaignId>> {
    sqlx::query_scalar(
        "select c.id from campaigns c
         where c.progress_reconciled_at is null
           and (c.status = 'sent'
                or (c.status = 'cancelled'
                    and not exists (select 1 from sends s where s.campaign_id = c.id and s.status = 'queued')
                    and not exists (select 1 from deliveries d where d.campaign_id = c.id and d.status in ('queued', 'sending'))))
         order by c.id limit $1",
    )
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// Corrects a finished campaign's slots to the counted figures, once: a leader job, fenced by
/// its lease, guarded by the campaign's row lock and `progress_reconciled_at`. One statement, so
/// the slots and the rows are read from one snapshot, and the difference is *added* to slot 0:
/// a change committed meanwhile (an operator's retry, a retried message's outcome) moves its
/// own slot and is never overwritten. Returns (slots before, counted).
pub async fn reconcile(
    conn: &mut PgConnection,
    campaign_id: CampaignId,
    lease: &Lease,
) -> sqlx::Result<Option<(SlotSums, SlotSums)>> {
    let sql = format!(
        "with target as (
             select org_id from campaigns
             where id = $4 and progress_reconciled_at is null and {fence} for update
         ),
         slots as (select {SLOT_SUMS} from progress_slots where campaign_id = $4),
         counted as ({counted}),
         fix as (
             insert into progress_slots as p (org_id, campaign_id, slot, queued, handed_off, delivered,
                                              failed, unknown, suppressed, cancelled)
             select t.org_id, $4, 0, c.queued - s.queued, c.handed_off - s.handed_off,
                    c.delivered - s.delivered, c.failed - s.failed, c.unknown - s.unknown,
                    c.suppressed - s.suppressed, c.cancelled - s.cancelled
             from target t, slots s, counted c
             on conflict (campaign_id, slot) do update
             set queued = p.queued + excluded.queued, handed_off = p.handed_off + excluded.handed_off,
                 delivered = p.delivered + excluded.delivered, failed = p.failed + excluded.failed,
                 unknown = p.unknown + excluded.unknown, suppressed = p.suppressed + excluded.suppressed,
                 cancelled = p.cancelled + excluded.cancelled
         ),
         done as (
             update campaigns set progress_reconciled_at = now()
             where id = $4 and exists (select 1 from target)
         )
         select 0 as k, s.* from target, slots s
         union all
         select 1, c.* from target, counted c
         order by k",
        fence = leader::FENCE,
        counted = counted_sql("$4"),
    );
    let rows: Vec<SlotSums> = leader::fenced(&sql, lease)
        .bind(campaign_id)
        .fetch_all(conn)
        .await?;
    // No row: not ours to reconcile (already done, or the fence refused).
    Ok(match rows.as_slice() {
        [before, after] => Some((*before, *after)),
        _ => None,
    })
}
