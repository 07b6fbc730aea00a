//! The Digests page's reads and writes: the org's schedule, its admins' opt-ins, and the
//! history of digests with each recipient's delivery. Every statement is scoped by org.

use sqlx::PgConnection;

use crate::model::HistoryEntry;

#[derive(sqlx::FromRow, Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub weekday: i16,
    pub hour: i16,
    pub timezone: String,
}

pub async fn schedule(conn: &mut PgConnection, org_id: i64) -> sqlx::Result<Schedule> {
    sqlx::query_as(
        "select digest_weekday as weekday, digest_hour as hour, timezone from orgs where id = $1",
    )
    .bind(org_id)
    .fetch_one(conn)
    .await
}

/// Saves the schedule; the time zone is checked against PostgreSQL's list by the orgs trigger
/// (callers check first, for a clear message). Returns the schedule it replaced.
pub async fn save_schedule(
    conn: &mut PgConnection,
    org_id: i64,
    s: &Schedule,
) -> sqlx::Result<Schedule> {
    sqlx::query_as(
        "update orgs o set digest_weekday = $2, digest_hour = $3, timezone = $4
         from (select digest_weekday as weekday, digest_hour as hour, timezone from orgs where id = $1 for update) old
         where o.id = $1
         returning old.weekday, old.hour, old.timezone",
    )
    .bind(org_id)
    .bind(s.weekday)
    .bind(s.hour)
    .bind(&s.timezone)
    .fetch_one(conn)
    .await
}

#[derive(sqlx::FromRow, Debug, Clone, PartialEq, Eq)]
pub struct Admin {
    pub id: i64,
    pub name: String,
    pub email: String,
    pub role: crate::domain::Role,
    pub weekly_digest: bool,
}

/// The org's enabled owners and admins: the people a digest can go to.
pub async fn admins(conn: &mut PgConnection, org_id: i64) -> sqlx::Result<Vec<Admin>> {
    sqlx::query_as(
        "select id, name, email, role, weekly_digest from users
         where org_id = $1 and role in ('owner', 'admin') and not disabled
         order by name, id",
    )
    .bind(org_id)
    .fetch_all(conn)
    .await
}

/// Sets one admin's digest opt-in. `None` when no such admin exists in the org.
pub async fn set_opt_in(
    conn: &mut PgConnection,
    org_id: i64,
    user_id: i64,
    enabled: bool,
) -> sqlx::Result<Option<bool>> {
    sqlx::query_scalar(
        "update users u set weekly_digest = $3
         from (select id, weekly_digest from users where org_id = $1 and id = $2 for update) old
         where u.org_id = $1 and u.id = $2 and u.role in ('owner', 'admin') and not u.disabled
         returning old.weekly_digest",
    )
    .bind(org_id)
    .bind(user_id)
    .bind(enabled)
    .fetch_optional(conn)
    .await
}

/// The org's newest digests (scheduled, manual and skipped).
pub async fn history(
    conn: &mut PgConnection,
    org_id: i64,
    limit: i64,
) -> sqlx::Result<Vec<HistoryEntry>> {
    sqlx::query_as(
        "select d.id, d.week_key, d.kind, d.covers_week,
                to_char(d.scheduled_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as scheduled_at,
                to_char(d.created_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI:SS') as created_at,
                u.name as triggered_by, d.only_me, d.recipient_count
         from digest_sends d
         join orgs o on o.id = d.org_id
         left join users u on u.org_id = d.org_id and u.id = d.triggered_by
         where d.org_id = $1
         order by d.created_at desc, d.id desc
         limit $2",
    )
    .bind(org_id)
    .bind(limit)
    .fetch_all(conn)
    .await
}

#[derive(sqlx::FromRow, Debug, Clone, PartialEq, Eq)]
pub struct RecipientRow {
    pub digest_send_id: i64,
    pub recipient: String,
    pub status: String,
}

/// Each recipient's delivery state for the digests `ids` of the org.
pub async fn recipients(
    conn: &mut PgConnection,
    org_id: i64,
    ids: &[i64],
) -> sqlx::Result<Vec<RecipientRow>> {
    sqlx::query_as(
        "select digest_send_id, recipient, status from deliveries
         where org_id = $1 and digest_send_id = any($2)
         order by digest_send_id, recipient",
    )
    .bind(org_id)
    .bind(ids)
    .fetch_all(conn)
    .await
}
