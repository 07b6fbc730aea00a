//! The dashboard's view of the delivery queue: counts, the newest-first list, one delivery, and
//! the admin's retry. Every statement is scoped by the caller's org id; the delivery worker's own
//! statements live in `deliveries`.

use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::{PgConnection, Postgres, QueryBuilder};

use crate::db::{audit, campaign};
use crate::domain::{DeliveryCursor, DeliveryKind, DeliveryStatus};

/// Whether the delivery `d` is still in the queue: a `queued` row that is not was taken off it
/// by a claim, and is in flight.
macro_rules! in_queue {
    () => {
        "exists (select 1 from delivery_queue q where q.job_id = d.job_id)"
    };
}

/// The state a delivery `d` shows: `sending` is not stored (a claim does not write the row).
const SHOWN_STATUS: &str = concat!(
    "case when d.status = 'queued' and not ",
    in_queue!(),
    " then 'sending' else d.status end"
);

/// How many deliveries of the org are in each state, every state listed (zeros included).
pub async fn counts(
    conn: &mut PgConnection,
    org_id: i64,
) -> sqlx::Result<Vec<(DeliveryStatus, i64)>> {
    // In flight: the org's `queued` rows less those still in the queue (one snapshot). The
    // queue's index leads with the priority: naming each one lets it seek to the org.
    let rows: Vec<(DeliveryStatus, i64)> = sqlx::query_as(
        "with queue as (
             select count(*) as n from delivery_queue
             where priority = any($2) and org_id = $1
         )
         select status, count(*) from deliveries where org_id = $1 and status <> 'queued' group by status
         union all
         select 'queued', n from queue
         union all
         select 'sending', (select count(*) from deliveries where org_id = $1 and status = 'queued') - n
         from queue",
    )
    .bind(org_id)
    .bind(crate::domain::JobId::PRIORITIES)
    .fetch_all(conn)
    .await?;
    let mut out: Vec<(DeliveryStatus, i64)> =
        DeliveryStatus::ALL.into_iter().map(|s| (s, 0)).collect();
    for (status, n) in rows {
        if let Some(slot) = out.iter_mut().find(|(s, _)| *s == status) {
            slot.1 = n;
        }
    }
    Ok(out)
}

/// What to list: every filter optional; `after` is where the previous page ended.
#[derive(Default)]
pub struct Filter<'a> {
    pub status: Option<DeliveryStatus>,
    pub kind: Option<DeliveryKind>,
    /// Case-insensitive substring of the recipient's address.
    pub recipient: Option<&'a str>,
    pub after: Option<&'a DeliveryCursor>,
}

#[derive(sqlx::FromRow, Clone, Debug)]
pub struct ListRow {
    pub job_id: String,
    pub kind: DeliveryKind,
    pub recipient: String,
    pub status: DeliveryStatus,
    pub attempt: i32,
    pub last_error: Option<String>,
    pub smtp_reply: Option<String>,
    pub created_at: DateTime<Utc>,
    /// `updated_at` in the org's time zone, for display.
    pub updated: String,
    /// The latest bounce or complaint a relay reported for it, if any.
    #[sqlx(flatten)]
    pub reported: Reported,
}

/// A relay's latest report about one delivery (all `None` when there is none).
#[derive(sqlx::FromRow, Clone, Debug, Default)]
pub struct Reported {
    pub event_kind: Option<crate::domain::EventKind>,
    pub event_status: Option<String>,
    pub event_source: Option<crate::domain::EventSource>,
    pub event_at: Option<String>,
    pub event_diagnostic: Option<String>,
}

/// One page of the org's deliveries, newest first by `(created_at, job_id)` (index
/// `deliveries_org_list`). Keyset, not offset: each page costs the same however deep it is.
/// The statement is assembled from the filters given, so the planner sees only real predicates.
pub async fn list(
    conn: &mut PgConnection,
    org_id: i64,
    f: &Filter<'_>,
    page_size: i64,
) -> sqlx::Result<crate::db::Page<ListRow, DeliveryCursor>> {
    let mut q: QueryBuilder<Postgres> = QueryBuilder::new(format!(
        "select d.job_id, d.kind, d.recipient, {SHOWN_STATUS} as status, d.attempt, d.last_error,
                d.smtp_reply, d.created_at,
                to_char(d.updated_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as updated,
                ev.kind as event_kind, ev.status as event_status, ev.source as event_source,
                to_char(ev.received_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as event_at,
                ev.diagnostic as event_diagnostic
         from deliveries d join orgs o on o.id = d.org_id
         left join lateral (
             select e.kind, e.status, e.source, e.received_at, e.diagnostic from delivery_events e
             where e.job_id = d.job_id order by e.received_at desc, e.id desc limit 1
         ) ev on true
         where d.org_id = "
    ));
    q.push_bind(org_id);
    match f.status {
        // Both are stored as `queued`: the queue tells them apart.
        Some(DeliveryStatus::Queued) => {
            q.push(concat!(" and d.status = 'queued' and ", in_queue!()));
        }
        Some(DeliveryStatus::Sending) => {
            q.push(concat!(" and d.status = 'queued' and not ", in_queue!()));
        }
        Some(s) => {
            q.push(" and d.status = ").push_bind(s.as_str());
        }
        None => {}
    }
    if let Some(k) = f.kind {
        q.push(" and d.kind = ").push_bind(k.as_str());
    }
    if let Some(r) = f.recipient.filter(|r| !r.is_empty()) {
        // strpos, not LIKE: the user's '%' and '_' stay literal.
        q.push(" and strpos(d.email_lower, lower(")
            .push_bind(r)
            .push(")) > 0");
    }
    if let Some(c) = f.after {
        q.push(" and (d.created_at, d.job_id) < (")
            .push_bind(c.created_at)
            .push(", ")
            .push_bind(&c.job_id)
            .push(")");
    }
    // One row more than a page tells whether a next page exists.
    q.push(" order by d.created_at desc, d.job_id desc limit ")
        .push_bind(page_size + 1);
    let rows: Vec<ListRow> = q.build_query_as().fetch_all(conn).await?;
    Ok(crate::db::Page::of(rows, page_size, |r| DeliveryCursor {
        created_at: r.created_at,
        job_id: r.job_id.clone(),
    }))
}

#[derive(sqlx::FromRow, Clone, Debug)]
pub struct Found {
    pub job_id: String,
    pub kind: DeliveryKind,
    pub recipient: String,
    pub status: DeliveryStatus,
    pub smtp_reply: Option<String>,
}

/// One delivery of the org, or None (also for another org's job id).
pub async fn find(
    conn: &mut PgConnection,
    org_id: i64,
    job_id: &str,
) -> sqlx::Result<Option<Found>> {
    sqlx::query_as(&format!(
        "select d.job_id, d.kind, d.recipient, {SHOWN_STATUS} as status, d.smtp_reply from deliveries d
         where d.org_id = $1 and d.job_id = $2"
    ))
    .bind(org_id)
    .bind(job_id)
    .fetch_optional(conn)
    .await
}

/// Who retries, for the audit row and the delivery's `last_error`.
pub struct Actor<'a> {
    pub user_id: i64,
    pub name: &'a str,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Retry {
    /// Back in the queue; it was in this state.
    Retried { before: DeliveryStatus },
    /// Left alone: retrying is not allowed from its current state.
    NotRetryable(DeliveryStatus),
    /// No such job in this org.
    NotFound,
}

/// Puts a failed or unknown delivery back in the queue, inside the caller's transaction, with
/// its audit row. A compare-and-set: the row is locked, and changed only if it is still failed
/// or unknown, so two admins retrying at once queue it once. The attempt count is kept (the
/// worker's next claim takes the next number, so a body-start mark of an earlier attempt never
/// counts for the next); the row re-enters the queue by the table's trigger.
pub async fn retry(
    conn: &mut PgConnection,
    org_id: i64,
    job_id: &str,
    actor: Actor<'_>,
) -> sqlx::Result<Retry> {
    let row: Option<(DeliveryStatus, Option<DeliveryStatus>)> = sqlx::query_as(concat!(
        "with target as (
             select job_id, status from deliveries
             where org_id = $1 and job_id = $2
             for update
         ),
         retried as (
             update deliveries d
             set status = 'queued', next_attempt_at = now(), finished_at = null,
                 last_error = $3, updated_at = now()
             from target t
             where d.org_id = $1 and d.job_id = t.job_id and d.status in ('unknown', 'failed')
             returning t.status as before, d.campaign_id
         ),
         -- A campaign's counts no longer hold this one as failed/unknown (same statement).
         unbump as (
             insert into progress_slots as p (org_id, campaign_id, slot, failed, unknown)
             select $1, r.campaign_id, ",
        campaign::slots::slot!(),
        ", -(r.before = 'failed')::int, -(r.before = 'unknown')::int
             from retried r where r.campaign_id is not null
             on conflict (campaign_id, slot) do update
             set failed = p.failed + excluded.failed, unknown = p.unknown + excluded.unknown
         )
         select t.status, r.before from target t left join retried r on true"
    ))
    .bind(org_id)
    .bind(job_id)
    .bind(format!("retried by {}", actor.name))
    .fetch_optional(&mut *conn)
    .await?;
    let Some((current, before)) = row else {
        return Ok(Retry::NotFound);
    };
    let Some(before) = before else {
        return Ok(Retry::NotRetryable(current));
    };
    audit::record(
        conn,
        audit::Entry {
            org_id,
            actor_id: Some(actor.user_id),
            api_token_id: None,
            action: crate::domain::AuditAction::DeliveryRetry,
            object_type: "delivery",
            object_id: Some(job_id.to_owned()),
            before: Some(json!({ "status": before.as_str() })),
            after: Some(json!({ "status": DeliveryStatus::Queued.as_str() })),
        },
    )
    .await?;
    Ok(Retry::Retried { before })
}
