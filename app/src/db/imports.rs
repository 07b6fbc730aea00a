//! CSV imports into a list: the `imports` row that reports progress and errors (written on
//! the pool, outside the import's transaction, so the page sees it move), and the batch insert
//! that runs inside that one transaction.

use sqlx::{PgConnection, PgPool};

use crate::domain::EmailAddress;

pub async fn start(
    conn: &mut PgConnection,
    org_id: i64,
    list_id: i64,
    user_id: i64,
    file_name: &str,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "insert into imports (org_id, list_id, user_id, file_name) values ($1, $2, $3, $4) returning id",
    )
    .bind(org_id)
    .bind(list_id)
    .bind(user_id)
    .bind(file_name)
    .fetch_one(conn)
    .await
}

/// Inserts a batch of checked rows: new subscribers are created (an address already there,
/// same spelling, is kept as it was) and every row's subscriber joins the list. Importing the
/// same rows again changes nothing. Returns (subscribers created, memberships added).
pub async fn insert_batch(
    conn: &mut PgConnection,
    org_id: i64,
    list_id: i64,
    rows: &[(EmailAddress, String)],
) -> sqlx::Result<(i64, i64)> {
    let emails: Vec<&str> = rows.iter().map(|(e, _)| e.as_str()).collect();
    let lowers: Vec<&str> = rows.iter().map(|(e, _)| e.lower()).collect();
    let names: Vec<&str> = rows.iter().map(|(_, n)| n.as_str()).collect();
    sqlx::query_as(
        "with input as (select * from unnest($3::text[], $4::text[], $5::text[]) as t(email, lower, name)),
         created as (
             insert into subscribers (org_id, email, email_lower, name)
             select $1, email, lower, name from input
             on conflict (org_id, email) do nothing
             returning id
         ),
         everyone as (
             select id from created
             union all
             select s.id from subscribers s join input i on s.org_id = $1 and s.email = i.email
         ),
         added as (
             insert into list_members (org_id, list_id, subscriber_id)
             select $1, $2, id from everyone
             on conflict do nothing
             returning 1
         )
         select (select count(*) from created), (select count(*) from added)",
    )
    .bind(org_id)
    .bind(list_id)
    .bind(&emails)
    .bind(&lowers)
    .bind(&names)
    .fetch_one(conn)
    .await
}

/// An import's progress so far, and the first errors (`errors` is a JSON array of {row, error}).
pub struct Tally<'a> {
    pub rows_read: i64,
    pub created: i64,
    pub added: i64,
    pub error_count: i64,
    pub errors: &'a serde_json::Value,
}

pub async fn report(pool: &PgPool, id: i64, p: &Tally<'_>) -> sqlx::Result<()> {
    sqlx::query(
        "update imports set rows_read = $2, created_subscribers = $3, added_members = $4,
                error_count = $5, errors = $6, updated_at = now()
         where id = $1 and status = 'running'",
    )
    .bind(id)
    .bind(p.rows_read)
    .bind(p.created)
    .bind(p.added)
    .bind(p.error_count)
    .bind(p.errors)
    .execute(pool)
    .await?;
    Ok(())
}

/// Ends an import: `done` inside the import's own transaction (so it reads done exactly when its
/// rows are there), `failed` with the reason after a rollback.
pub async fn finish(
    conn: &mut PgConnection,
    id: i64,
    p: &Tally<'_>,
    failed: Option<&str>,
) -> sqlx::Result<()> {
    sqlx::query(
        "update imports set rows_read = $2, created_subscribers = $3, added_members = $4,
                error_count = $5, errors = $6, message = $7,
                status = case when $7::text is null then 'done' else 'failed' end,
                finished_at = now(), updated_at = now()
         where id = $1",
    )
    .bind(id)
    .bind(p.rows_read)
    .bind(p.created)
    .bind(p.added)
    .bind(p.error_count)
    .bind(p.errors)
    .bind(failed)
    .execute(conn)
    .await?;
    Ok(())
}

#[derive(sqlx::FromRow, Debug, Clone)]
pub struct Import {
    pub id: i64,
    pub list_id: i64,
    pub list_name: String,
    pub file_name: String,
    pub status: String,
    pub rows_read: i64,
    pub created_subscribers: i64,
    pub added_members: i64,
    pub error_count: i64,
    pub errors: serde_json::Value,
    pub message: Option<String>,
    pub started: String,
    /// Seconds since its progress last moved.
    pub idle_seconds: f64,
}

pub async fn get(conn: &mut PgConnection, org_id: i64, id: i64) -> sqlx::Result<Option<Import>> {
    sqlx::query_as(
        "select i.id, i.list_id, l.name as list_name, i.file_name, i.status, i.rows_read,
                i.created_subscribers, i.added_members, i.error_count, i.errors, i.message,
                to_char(i.started_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as started,
                extract(epoch from now() - i.updated_at)::float8 as idle_seconds
         from imports i join lists l on l.org_id = i.org_id and l.id = i.list_id
         join orgs o on o.id = i.org_id
         where i.org_id = $1 and i.id = $2",
    )
    .bind(org_id)
    .bind(id)
    .fetch_optional(conn)
    .await
}
