//! The org's suppression list as admins see it: search, add, remove. Writing an opt-out from
//! mail (unsubscribe, bounce) is `audience::suppress`; this is the manual side.

use sqlx::PgConnection;

#[derive(sqlx::FromRow, Debug, Clone)]
pub struct Row {
    pub email: String,
    pub reason: crate::domain::SuppressionReason,
    pub source: String,
    pub created: String,
    /// Keyset of this row: `<created_at, UTC, to the µs>|<email>`.
    pub cursor: String,
}

/// One page, newest first.
pub async fn page(
    conn: &mut PgConnection,
    org_id: i64,
    search: Option<&str>,
    after: Option<(&str, &str)>,
    limit: i64,
) -> sqlx::Result<crate::db::Page<Row, String>> {
    let (after_at, after_email) = after.unzip();
    let rows: Vec<Row> = sqlx::query_as(
        "select x.email_lower as email, x.reason, x.source,
                to_char(x.created_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as created,
                to_char(x.created_at at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US') || '|' || x.email_lower as cursor
         from suppressions x join orgs o on o.id = x.org_id
         where x.org_id = $1
           and ($2::text is null or strpos(x.email_lower, $2) > 0)
           and not starts_with(x.email_lower, $6)
           and ($3::timestamp is null
                or (x.created_at, x.email_lower) < ($3::timestamp at time zone 'UTC', $4::text))
         order by x.created_at desc, x.email_lower desc
         limit $5",
    )
    .bind(org_id)
    .bind(search)
    .bind(after_at)
    .bind(after_email)
    .bind(limit + 1)
    .bind(crate::domain::ERASED_PREFIX)
    .fetch_all(conn)
    .await?;
    Ok(crate::db::Page::of(rows, limit, |r| r.cursor.clone()))
}

/// Removes a suppression: the address may be mailed again. Returns its reason, or `None` when
/// it was not suppressed.
pub async fn remove(
    conn: &mut PgConnection,
    org_id: i64,
    email_lower: &str,
) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar(
        "delete from suppressions where org_id = $1 and email_lower = $2 returning reason",
    )
    .bind(org_id)
    .bind(email_lower)
    .fetch_optional(conn)
    .await
}

/// Which of `emails_lower` the org suppresses, with the reason, in the order given.
pub async fn suppressed_among(
    conn: &mut PgConnection,
    org_id: i64,
    emails_lower: &[&str],
) -> sqlx::Result<Vec<(String, String)>> {
    sqlx::query_as(
        "select x.email_lower, x.reason
         from unnest($2::text[]) with ordinality as e(email_lower, n)
         join suppressions x on x.org_id = $1 and x.email_lower = e.email_lower
         order by e.n",
    )
    .bind(org_id)
    .bind(emails_lower)
    .fetch_all(conn)
    .await
}

/// One address's suppression, if it has one: (reason, source, since as RFC 3339).
pub async fn one(
    conn: &mut PgConnection,
    org_id: i64,
    email_lower: &str,
) -> sqlx::Result<Option<(String, String, String)>> {
    sqlx::query_as(
        "select reason, source,
                to_char(created_at at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')
         from suppressions where org_id = $1 and email_lower = $2",
    )
    .bind(org_id)
    .bind(email_lower)
    .fetch_optional(conn)
    .await
}
