//! CSV imports into a list: the `imports` row that reports progress and errors (written on
//! the pool, outside the import's transaction, so the page sees it move), and the batch insert
//! that runs inside that one transaction.

use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor, PgPool};

use crate::model::{Import, RowError};

use crate::domain::CsvRow;

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
/// same spelling, is kept as it was, but takes the row's external id when it has none) and
/// every row's subscriber joins the list. Importing the same rows again changes nothing. The
/// external ids must not be another subscriber's (the caller checked). Returns (subscribers
/// created, memberships added).
pub async fn insert_batch(
    conn: &mut PgConnection,
    org_id: i64,
    list_id: i64,
    rows: &[CsvRow],
) -> sqlx::Result<(i64, i64)> {
    let emails: Vec<&str> = rows.iter().map(|r| r.email.as_str()).collect();
    let lowers: Vec<&str> = rows.iter().map(|r| r.email.lower()).collect();
    let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    let externals: Vec<Option<&str>> = rows.iter().map(|r| r.external_id.as_deref()).collect();
    let counts: (i64, i64) = sqlx::query_as(
        "with input as (select * from unnest($3::text[], $4::text[], $5::text[], $6::text[])
                          as t(email, lower, name, external_id)),
         created as (
             insert into subscribers (org_id, email, email_lower, name, external_id, optin_source, optin_at)
             select $1, email, lower, name, external_id, 'import', now() from input
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
    .bind(&externals)
    .fetch_one(&mut *conn)
    .await?;
    // Rows there before take the file's external id when they have none (those just created
    // have it). Only the rows that give one are looked up, each through `(org_id, email)`.
    let named: Vec<(&str, &str)> = rows
        .iter()
        .filter_map(|r| r.external_id.as_deref().map(|x| (r.email.as_str(), x)))
        .collect();
    if !named.is_empty() {
        let (emails, ids): (Vec<&str>, Vec<&str>) = named.into_iter().unzip();
        sqlx::query(
            "update subscribers s set external_id = i.external_id
             from unnest($2::text[], $3::text[]) as i(email, external_id)
             where s.org_id = $1 and s.email = i.email and s.external_id is null
               and s.erased_at is null",
        )
        .bind(org_id)
        .bind(&emails)
        .bind(&ids)
        .execute(&mut *conn)
        .await?;
    }
    Ok(counts)
}

/// How many refused rows an import keeps to show.
pub const ERRORS_KEPT: usize = 200;
/// Seconds without progress after which a running import reads as interrupted.
pub const STALLED_AFTER_SECONDS: f64 = 60.0;

/// An import's progress so far, and the first rows it refused.
#[derive(Default)]
pub struct Tally {
    pub rows_read: i64,
    pub created: i64,
    pub added: i64,
    pub error_count: i64,
    pub errors: Vec<RowError>,
}

impl Tally {
    /// Counts a refused row; the first [`ERRORS_KEPT`] are kept to show.
    pub fn refuse(&mut self, row: i64, error: String) {
        self.error_count += 1;
        if self.errors.len() < ERRORS_KEPT {
            self.errors.push(RowError { row, error });
        }
    }

    /// What a rolled-back import reports: the rows it read and refused, nothing written.
    pub fn rolled_back(&self) -> Tally {
        Tally {
            rows_read: self.rows_read,
            error_count: self.error_count,
            ..Tally::default()
        }
    }
}

/// Writes the progress so far, on the pool: the page sees it move while the import runs.
pub async fn report(pool: &PgPool, id: i64, p: &Tally) -> sqlx::Result<()> {
    write(pool, id, p, None).await
}

/// Ends an import: `done` inside the import's own transaction (so it reads done exactly when its
/// rows are there), `failed` with the reason after a rollback.
pub async fn finish(
    conn: &mut PgConnection,
    id: i64,
    p: &Tally,
    failed: Option<&str>,
) -> sqlx::Result<()> {
    write(conn, id, p, Some(failed)).await
}

/// `ending`: None while it runs; Some(None) done, Some(Some(reason)) failed.
async fn write<'c>(
    e: impl PgExecutor<'c>,
    id: i64,
    p: &Tally,
    ending: Option<Option<&str>>,
) -> sqlx::Result<()> {
    sqlx::query(
        "update imports set rows_read = $2, created_subscribers = $3, added_members = $4,
                error_count = $5, errors = $6, updated_at = now(),
                status = case when not $7 then status when $8::text is null then 'done' else 'failed' end,
                message = $8,
                finished_at = case when $7 then now() end
         where id = $1 and status = 'running'",
    )
    .bind(id)
    .bind(p.rows_read)
    .bind(p.created)
    .bind(p.added)
    .bind(p.error_count)
    .bind(Json(&p.errors))
    .bind(ending.is_some())
    .bind(ending.flatten())
    .execute(e)
    .await
    .map(drop)
}

pub async fn get(conn: &mut PgConnection, org_id: i64, id: i64) -> sqlx::Result<Option<Import>> {
    sqlx::query_as(
        "select i.id, i.list_id, l.name as list_name, i.file_name,
                case when i.status = 'running' and now() - i.updated_at > make_interval(secs => $3)
                     then 'interrupted' else i.status end as status,
                i.rows_read,
                i.created_subscribers, i.added_members, i.error_count, i.errors, i.message,
                to_char(i.started_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as started
         from imports i join lists l on l.org_id = i.org_id and l.id = i.list_id
         join orgs o on o.id = i.org_id
         where i.org_id = $1 and i.id = $2",
    )
    .bind(org_id)
    .bind(id)
    .bind(STALLED_AFTER_SECONDS)
    .fetch_optional(conn)
    .await
}
