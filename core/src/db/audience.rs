use sqlx::PgConnection;

use crate::domain::{EmailAddress, SuppressionReason};

/// Inserts subscribers in one statement; an address already present (same spelling) is kept as
/// it was. Returns the ids of the rows inserted.
pub async fn insert_subscribers(
    conn: &mut PgConnection,
    org_id: i64,
    people: &[(EmailAddress, String)],
) -> sqlx::Result<Vec<i64>> {
    let emails: Vec<&str> = people.iter().map(|(e, _)| e.as_str()).collect();
    let lowers: Vec<&str> = people.iter().map(|(e, _)| e.lower()).collect();
    let names: Vec<&str> = people.iter().map(|(_, n)| n.as_str()).collect();
    sqlx::query_scalar(
        "insert into subscribers (org_id, email, email_lower, name)
         select $1, e, l, n from unnest($2::text[], $3::text[], $4::text[]) as t(e, l, n)
         on conflict (org_id, email) do nothing
         returning id",
    )
    .bind(org_id)
    .bind(&emails)
    .bind(&lowers)
    .bind(&names)
    .fetch_all(conn)
    .await
}

pub async fn create_list(conn: &mut PgConnection, org_id: i64, name: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar("insert into lists (org_id, name) values ($1, $2) returning id")
        .bind(org_id)
        .bind(name)
        .fetch_one(conn)
        .await
}

/// Adds subscribers to a list; the composite keys refuse another org's list or subscriber.
pub async fn add_members(
    conn: &mut PgConnection,
    org_id: i64,
    list_id: i64,
    subscriber_ids: &[i64],
) -> sqlx::Result<u64> {
    Ok(sqlx::query(
        "insert into list_members (org_id, list_id, subscriber_id)
         select $1, $2, s from unnest($3::bigint[]) as s
         on conflict do nothing",
    )
    .bind(org_id)
    .bind(list_id)
    .bind(subscriber_ids)
    .execute(conn)
    .await?
    .rows_affected())
}

/// Records opt-outs: the one place suppressions are written. An address already suppressed
/// keeps its reason, unless the new reason stops all mail and the old one does not (a hard
/// bounce or complaint replaces an unsubscribe or a manual entry). Returns the addresses written
/// (new, or upgraded), in the order given.
pub async fn suppress_all(
    conn: &mut PgConnection,
    org_id: i64,
    emails_lower: &[&str],
    reason: SuppressionReason,
    source: &str,
) -> sqlx::Result<Vec<String>> {
    // One row per address: an upsert may not touch a row twice in one statement.
    let mut seen = std::collections::HashSet::new();
    let unique: Vec<&str> = emails_lower
        .iter()
        .copied()
        .filter(|e| seen.insert(*e))
        .collect();
    sqlx::query_scalar(
        "insert into suppressions as s (org_id, email_lower, reason, source)
         select $1, l, $3, $4 from unnest($2::text[]) with ordinality as t(l, n) order by n
         on conflict (org_id, email_lower) do update
         set reason = excluded.reason, source = excluded.source, created_at = now()
         where excluded.reason = any($5) and not (s.reason = any($5))
         returning email_lower",
    )
    .bind(org_id)
    .bind(&unique)
    .bind(reason)
    .bind(source)
    .bind(SuppressionReason::stopping_all_mail())
    .fetch_all(conn)
    .await
}

/// Records one opt-out (see [`suppress_all`]). Returns whether a row was written.
pub async fn suppress(
    conn: &mut PgConnection,
    org_id: i64,
    email: &EmailAddress,
    reason: SuppressionReason,
    source: &str,
) -> sqlx::Result<bool> {
    Ok(
        !suppress_all(conn, org_id, &[email.lower()], reason, source)
            .await?
            .is_empty(),
    )
}

/// Suppresses a subscriber's address (an unsubscribe link names the subscriber, not the
/// address). Returns `None` when the subscriber does not exist in the org, else whether a new
/// suppression was written (false: already suppressed).
pub async fn suppress_subscriber(
    conn: &mut PgConnection,
    org_id: i64,
    subscriber_id: i64,
    reason: SuppressionReason,
    source: &str,
) -> sqlx::Result<Option<bool>> {
    let lower: Option<String> =
        sqlx::query_scalar("select email_lower from subscribers where org_id = $1 and id = $2")
            .bind(org_id)
            .bind(subscriber_id)
            .fetch_optional(&mut *conn)
            .await?;
    let Some(lower) = lower else {
        return Ok(None);
    };
    let written = suppress_all(conn, org_id, &[&lower], reason, source).await?;
    Ok(Some(!written.is_empty()))
}

/// Who an unsubscribe link is for: the org's name and the subscriber's address.
pub async fn unsubscribe_target(
    conn: &mut PgConnection,
    org_id: i64,
    subscriber_id: i64,
) -> sqlx::Result<Option<(String, String)>> {
    sqlx::query_as(
        "select o.name, s.email from subscribers s join orgs o on o.id = s.org_id
         where s.org_id = $1 and s.id = $2",
    )
    .bind(org_id)
    .bind(subscriber_id)
    .fetch_optional(conn)
    .await
}

/// The names of the subscribers `refs` (org id, subscriber id), in one query: per-recipient
/// fields of campaign messages.
pub async fn subscriber_names(
    conn: &mut PgConnection,
    refs: &[(i64, i64)],
) -> sqlx::Result<Vec<(i64, String)>> {
    let (orgs, ids): (Vec<i64>, Vec<i64>) = refs.iter().copied().unzip();
    sqlx::query_as(
        "select s.id, s.name from subscribers s
         join unnest($1::bigint[], $2::bigint[]) as r(org_id, id) on s.org_id = r.org_id and s.id = r.id",
    )
    .bind(&orgs)
    .bind(&ids)
    .fetch_all(conn)
    .await
}

/// The lists a subscriber is on: (id, name), by name. The preference page shows them.
pub async fn member_lists(
    conn: &mut PgConnection,
    org_id: i64,
    subscriber_id: i64,
) -> sqlx::Result<Vec<(i64, String)>> {
    sqlx::query_as(
        "select l.id, l.name from list_members m join lists l on l.org_id = m.org_id and l.id = m.list_id
         where m.org_id = $1 and m.subscriber_id = $2 order by l.name, l.id",
    )
    .bind(org_id)
    .bind(subscriber_id)
    .fetch_all(conn)
    .await
}

/// Takes a subscriber off every list except `keep` (never onto one): the preference page.
/// Returns the names of the lists left.
pub async fn leave_lists(
    conn: &mut PgConnection,
    org_id: i64,
    subscriber_id: i64,
    keep: &[i64],
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar(
        "with gone as (
             delete from list_members where org_id = $1 and subscriber_id = $2 and not (list_id = any($3))
             returning list_id
         )
         select l.name from gone join lists l on l.org_id = $1 and l.id = gone.list_id order by l.name",
    )
    .bind(org_id)
    .bind(subscriber_id)
    .bind(keep)
    .fetch_all(conn)
    .await
}

/// Suppresses many addresses by hand in one statement; an address suppressed already keeps its
/// reason (a manual entry never replaces another). Returns the addresses newly suppressed.
pub async fn suppress_many(
    conn: &mut PgConnection,
    org_id: i64,
    emails: &[EmailAddress],
    source: &str,
) -> sqlx::Result<Vec<String>> {
    let lowers: Vec<&str> = emails.iter().map(|e| e.lower()).collect();
    suppress_all(conn, org_id, &lowers, SuppressionReason::Manual, source).await
}
