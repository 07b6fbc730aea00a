//! Campaigns. This module holds the campaign list, a new draft and the frozen content a batch
//! sends; its children hold each step of a campaign's life: editing a draft, the state machine,
//! the recipients (materialised once, handed off in batches), the live progress and its counter
//! slots, and the recycle bin. Who a campaign reaches is defined once, in `audience`.

/// Who a campaign reaches, defined once.
mod audience;
/// The recycle bin: delete, restore, purge.
pub mod bin;
/// A draft's content: read, save, estimate, preview recipient.
pub mod edit;
/// What a campaign page shows live: state, progress, problems.
pub mod live;
/// A campaign's recipients: materialised once, handed off in batches.
pub mod sends;
/// The progress counters: slot rows added to in the same statement.
pub mod slots;
/// The state machine in SQL: compare-and-set transitions, approval.
pub mod states;

use sqlx::PgConnection;

use crate::domain::CampaignStatus;
use crate::model::CampaignSummary;

pub struct NewDraft<'a> {
    pub org_id: i64,
    pub author_id: i64,
    pub name: &'a str,
    pub subject: &'a str,
    pub body: &'a str,
    pub list_ids: &'a [i64],
}

/// Creates a draft campaign and its target lists in the caller's transaction.
pub async fn create_draft(conn: &mut PgConnection, d: NewDraft<'_>) -> sqlx::Result<i64> {
    let id: i64 = sqlx::query_scalar(
        "insert into campaigns (org_id, name, subject, body, author_id, last_editor_id)
         values ($1, $2, $3, $4, $5, $5) returning id",
    )
    .bind(d.org_id)
    .bind(d.name)
    .bind(d.subject)
    .bind(d.body)
    .bind(d.author_id)
    .fetch_one(&mut *conn)
    .await?;
    sqlx::query(
        "insert into campaign_lists (org_id, campaign_id, list_id)
         select $1, $2, l from unnest($3::bigint[]) as l",
    )
    .bind(d.org_id)
    .bind(id)
    .bind(d.list_ids)
    .execute(conn)
    .await?;
    Ok(id)
}

/// The org's campaigns, newest first, optionally in one `status` (soft-deleted ones are in the
/// recycle bin, not here). Progress comes from the counter slots: 16 rows per campaign at most.
pub async fn list(
    conn: &mut PgConnection,
    org_id: i64,
    status: Option<CampaignStatus>,
) -> sqlx::Result<Vec<CampaignSummary>> {
    sqlx::query_as(
        "select c.id, c.name, c.status, c.content_version, u.name as author,
                to_char(c.updated_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as updated,
                coalesce(c.recipients_total, 0) as total,
                coalesce((select sum(p.delivered + p.failed + p.unknown + p.suppressed + p.cancelled)
                          from progress_slots p where p.campaign_id = c.id), 0)::bigint as done
         from campaigns c
         join orgs o on o.id = c.org_id
         join users u on u.org_id = c.org_id and u.id = c.author_id
         where c.org_id = $1 and c.deleted_at is null and ($2::text is null or c.status = $2)
         order by c.id desc limit 200",
    )
    .bind(org_id)
    .bind(status)
    .fetch_all(conn)
    .await
}

/// What a campaign's messages say: its content (frozen from approval on).
#[derive(sqlx::FromRow, Clone, Debug)]
pub struct Content {
    pub id: i64,
    pub org_id: i64,
    pub subject: String,
    pub body: String,
    pub body_format: crate::domain::BodyFormat,
    pub content_version: i32,
}

/// The content of every campaign of a batch, in one query; each id is looked up within its
/// own org.
pub async fn contents(conn: &mut PgConnection, refs: &[(i64, i64)]) -> sqlx::Result<Vec<Content>> {
    let (orgs, ids): (Vec<i64>, Vec<i64>) = refs.iter().copied().unzip();
    sqlx::query_as(
        "select c.id, c.org_id, c.subject, c.body, c.body_format, c.content_version
         from campaigns c join unnest($1::bigint[], $2::bigint[]) as r(org_id, id)
           on c.org_id = r.org_id and c.id = r.id",
    )
    .bind(&orgs)
    .bind(&ids)
    .fetch_all(conn)
    .await
}

/// A campaign as the REST API answers it, with its progress from the counter slots.
#[derive(sqlx::FromRow, Debug, Clone)]
pub struct ApiCampaign {
    pub id: i64,
    pub name: String,
    pub status: CampaignStatus,
    pub content_version: i32,
    pub pause_reason: Option<String>,
    pub recipients_total: Option<i64>,
    pub queued: i64,
    pub delivered: i64,
    pub failed: i64,
    pub unknown: i64,
    pub suppressed: i64,
    pub cancelled: i64,
    /// RFC 3339, UTC.
    pub created_at: String,
    pub scheduled_for: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
}

/// The org's campaigns (the bin left out) in id order after `after`, or the one `id`;
/// `limit + 1` rows are read so the caller knows whether a next page exists.
pub async fn api_page(
    conn: &mut PgConnection,
    org_id: i64,
    after: i64,
    only: Option<i64>,
    status: Option<CampaignStatus>,
    limit: i64,
) -> sqlx::Result<crate::db::Page<ApiCampaign, i64>> {
    let utc = |c: &str| {
        format!("to_char(c.{c} at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') as {c}")
    };
    let sql = format!(
        "select c.id, c.name, c.status, c.content_version,
                coalesce(c.relay_pause_reason, c.pause_reason) as pause_reason, c.recipients_total,
                p.queued + p.handed_off as queued, p.delivered, p.failed, p.unknown, p.suppressed, p.cancelled,
                {created}, {scheduled}, {started}, {finished}
         from campaigns c
         cross join lateral (select {sums} from progress_slots s
                             where s.org_id = c.org_id and s.campaign_id = c.id) p
         where c.org_id = $1 and c.deleted_at is null and c.id > $2
           and ($3::bigint is null or c.id = $3) and ($4::text is null or c.status = $4)
         order by c.id limit $5",
        created = utc("created_at"),
        scheduled = utc("scheduled_for"),
        started = utc("started_at"),
        finished = utc("finished_at"),
        sums = slots::SLOT_SUMS,
    );
    let rows = sqlx::query_as(&sql)
        .bind(org_id)
        .bind(after)
        .bind(only)
        .bind(status)
        .bind(limit + 1)
        .fetch_all(conn)
        .await?;
    Ok(crate::db::Page::of(rows, limit, |r: &ApiCampaign| r.id))
}
