//! What a campaign page shows live: its state and its progress, summed over the counter slots
//! (the same cost for 100 or 1,000,000 recipients), stamped with the database clock.

use sqlx::PgConnection;

use super::slots::{SlotSums, SLOT_SUMS};
use crate::domain::{CampaignId, OrgId};
use crate::model::Problem;

#[derive(sqlx::FromRow, Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub id: i64,
    pub name: String,
    pub subject: String,
    pub status: crate::domain::CampaignStatus,
    pub recipients_total: Option<i64>,
    #[sqlx(flatten)]
    pub slots: SlotSums,
    /// Database time of the reading, in milliseconds since the epoch (for rates).
    pub at_ms: i64,
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
    /// The same two in the org's time zone.
    pub started: Option<String>,
    pub finished: Option<String>,
    /// Why it paused itself, if it ever did.
    pub pause_reason: Option<String>,
}

/// The campaign `campaign_id` of `org_id` now, or `None` (missing, deleted, or another org's).
pub async fn snapshot(
    conn: &mut PgConnection,
    org_id: OrgId,
    campaign_id: CampaignId,
) -> sqlx::Result<Option<Snapshot>> {
    sqlx::query_as(&format!(
        "with c as (
             select c.*, o.timezone,
                    -- A cancel stops the send: its end is the cancel (the row's last change).
                    case when c.status = 'cancelled' then coalesce(c.finished_at, c.updated_at)
                         else c.finished_at end as ended_at
             from campaigns c join orgs o on o.id = c.org_id
             where c.org_id = $1 and c.id = $2 and c.deleted_at is null
         )
         select c.id, c.name, c.subject, c.status, c.recipients_total, {SLOT_SUMS},
                (extract(epoch from now()) * 1000)::bigint as at_ms,
                (extract(epoch from c.started_at) * 1000)::bigint as started_ms,
                (extract(epoch from c.ended_at) * 1000)::bigint as finished_ms,
                to_char(c.started_at at time zone c.timezone, 'YYYY-MM-DD HH24:MI') as started,
                to_char(c.ended_at at time zone c.timezone, 'YYYY-MM-DD HH24:MI') as finished,
                coalesce(c.relay_pause_reason, c.pause_reason) as pause_reason
         from c
         left join progress_slots p on p.campaign_id = c.id
         group by c.id, c.name, c.subject, c.status, c.recipients_total, c.started_at, c.ended_at,
                  c.timezone, c.pause_reason, c.relay_pause_reason"
    ))
    .bind(org_id)
    .bind(campaign_id)
    .fetch_optional(conn)
    .await
}

impl Snapshot {
    /// The reading as pages show it.
    pub fn progress(&self) -> crate::domain::progress::Progress {
        crate::domain::progress::Progress {
            status: self.status,
            total: self.recipients_total.unwrap_or(0),
            queued: self.slots.queued,
            delivered: self.slots.delivered,
            failed: self.slots.failed,
            unknown: self.slots.unknown,
            suppressed: self.slots.suppressed,
            cancelled: self.slots.cancelled,
            at_ms: self.at_ms,
            started_ms: self.started_ms,
            finished_ms: self.finished_ms,
            started: self.started.clone(),
            finished: self.finished.clone(),
        }
    }
}

/// The campaign's failed and unknown recipients, newest first (at most `limit`).
pub async fn problems(
    conn: &mut PgConnection,
    org_id: OrgId,
    campaign_id: CampaignId,
    limit: i64,
) -> sqlx::Result<Vec<Problem>> {
    sqlx::query_as(
        "select job_id, recipient, status, coalesce(smtp_reply, last_error, '') as reason
         from deliveries
         where org_id = $1 and campaign_id = $2 and kind = 'campaign' and status in ('failed', 'unknown')
         order by finished_at desc nulls last, job_id limit $3",
    )
    .bind(org_id)
    .bind(campaign_id)
    .bind(limit)
    .fetch_all(conn)
    .await
}
