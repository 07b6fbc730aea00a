//! The SaaS's events about its people: resolving who each is about, storing them exactly once
//! under `unique (org_id, key)`, the subscriber's timeline, and retention. Every statement is
//! scoped by the caller's org; the writes run in the caller's transaction.

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};

use super::leader::{self, Lease};
use crate::domain::event::SubscriberRef;
use crate::domain::{EmailAddress, OrgId, SubscriberId};
use crate::model::TimelineEvent;

/// How many days the org keeps events.
pub async fn retention_days(conn: &mut PgConnection, org: OrgId) -> sqlx::Result<i32> {
    sqlx::query_scalar("select event_retention_days from orgs where id = $1")
        .bind(org)
        .fetch_one(conn)
        .await
}

/// The live (not erased) subscriber each reference names, in order; `None` for a reference
/// that names no one of this org. An address names the oldest row with that address in any
/// spelling (the row a campaign would mail); an id or an external id names its one row.
pub async fn resolve(
    conn: &mut PgConnection,
    org: OrgId,
    refs: &[SubscriberRef],
) -> sqlx::Result<Vec<Option<SubscriberId>>> {
    let mut ids = Vec::with_capacity(refs.len());
    let mut lowers = Vec::with_capacity(refs.len());
    let mut externals = Vec::with_capacity(refs.len());
    for r in refs {
        let (id, lower, external) = match r {
            SubscriberRef::Id(id) => (Some(*id), None, None),
            SubscriberRef::Email(e) => (None, Some(e.lower()), None),
            SubscriberRef::External(x) => (None, None, Some(x.as_str())),
        };
        ids.push(id);
        lowers.push(lower);
        externals.push(external);
    }
    let found: Vec<(Option<SubscriberId>,)> = sqlx::query_as(
        "select case
                  when r.id is not null then
                    (select s.id from subscribers s
                     where s.org_id = $1 and s.id = r.id and s.erased_at is null)
                  when r.lower is not null then
                    (select s.id from subscribers s
                     where s.org_id = $1 and s.email_lower = r.lower and s.erased_at is null
                     order by s.id limit 1)
                  else
                    (select s.id from subscribers s
                     where s.org_id = $1 and s.external_id = r.external and s.erased_at is null)
                end
         from unnest($2::bigint[], $3::text[], $4::text[]) with ordinality as r(id, lower, external, n)
         order by r.n",
    )
    .bind(org)
    .bind(&ids)
    .bind(&lowers)
    .bind(&externals)
    .fetch_all(conn)
    .await?;
    Ok(found.into_iter().map(|(id,)| id).collect())
}

/// Creates a subscriber for each address that has none: unconfirmed (no campaign reaches them
/// until they confirm), on no list, from the API. An address that became a subscriber
/// meanwhile is left as it is: the caller resolves again afterwards. Each mailbox is locked
/// until the caller's transaction ends (in address order, so callers never deadlock), so
/// requests racing to create one person in two spellings create one subscriber: the later
/// sees the earlier's row once it commits.
pub async fn create_unknown(
    conn: &mut PgConnection,
    org: OrgId,
    emails: &[&EmailAddress],
) -> sqlx::Result<u64> {
    let spelled: Vec<&str> = emails.iter().map(|e| e.as_str()).collect();
    let lowers: Vec<&str> = emails.iter().map(|e| e.lower()).collect();
    sqlx::query(
        "select pg_advisory_xact_lock(hashtextextended('subscriber:' || $1::text || ':' || lower, 0))
         from (select distinct lower from unnest($2::text[]) as t(lower) order by lower) m",
    )
    .bind(org)
    .bind(&lowers)
    .execute(&mut *conn)
    .await?;
    // A new statement: its snapshot sees what a request that held the lock before committed.
    let done = sqlx::query(
        "insert into subscribers (org_id, email, email_lower, status, optin_source, optin_at)
         select $1, email, lower, 'unconfirmed', 'api', now()
         from unnest($2::text[], $3::text[]) as t(email, lower)
         where not exists (select 1 from subscribers s
                           where s.org_id = $1 and s.email_lower = t.lower and s.erased_at is null)
         order by email
         on conflict (org_id, email) do nothing",
    )
    .bind(org)
    .bind(&spelled)
    .bind(&lowers)
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// One event to store.
#[derive(Clone)]
pub struct NewEvent<'a> {
    /// The caller's id for it: its identity within the org.
    pub key: &'a str,
    pub subscriber: SubscriberId,
    pub name: &'a str,
    pub properties: &'a serde_json::Value,
    pub occurred_at: DateTime<Utc>,
}

/// What storing one event did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stored {
    pub id: i64,
    /// False: an event with this key was stored before (by this request's retry, or a race);
    /// `id` is that event's, and what this row said is dropped.
    pub new: bool,
}

/// Stores each event unless one with its key is there already; the keys must be distinct.
/// Rows are inserted in key order, so concurrent batches that share keys wait for each other
/// in one order instead of deadlocking. Answers in the order of `rows`.
pub async fn insert(
    conn: &mut PgConnection,
    org: OrgId,
    rows: &[NewEvent<'_>],
) -> sqlx::Result<Vec<Stored>> {
    let keys: Vec<&str> = rows.iter().map(|r| r.key).collect();
    let subscribers: Vec<SubscriberId> = rows.iter().map(|r| r.subscriber).collect();
    let names: Vec<&str> = rows.iter().map(|r| r.name).collect();
    let properties: Vec<Json<&serde_json::Value>> =
        rows.iter().map(|r| Json(r.properties)).collect();
    let times: Vec<DateTime<Utc>> = rows.iter().map(|r| r.occurred_at).collect();
    let inserted: Vec<(String, i64)> = sqlx::query_as(
        "insert into events (org_id, key, subscriber_id, name, properties, occurred_at)
         select $1, key, subscriber_id, name, properties, occurred_at
         from unnest($2::text[], $3::bigint[], $4::text[], $5::jsonb[], $6::timestamptz[])
              as t(key, subscriber_id, name, properties, occurred_at)
         order by key
         on conflict (org_id, key) do nothing
         returning key, id",
    )
    .bind(org)
    .bind(&keys)
    .bind(&subscribers)
    .bind(&names)
    .bind(&properties)
    .bind(&times)
    .fetch_all(&mut *conn)
    .await?;
    let new_ids: Vec<i64> = inserted.iter().map(|(_, id)| *id).collect();
    crate::db::automation::enrol_from_events(conn, org, &new_ids).await?;
    let mut new: std::collections::HashMap<String, i64> = inserted.into_iter().collect();
    let before: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|k| !new.contains_key(*k))
        .collect();
    // A conflicting insert waited for the other transaction to commit; this statement's
    // snapshot, taken after, sees its row.
    let old: std::collections::HashMap<String, i64> = if before.is_empty() {
        Default::default()
    } else {
        sqlx::query_as::<_, (String, i64)>(
            "select key, id from events where org_id = $1 and key = any($2)",
        )
        .bind(org)
        .bind(&before)
        .fetch_all(&mut *conn)
        .await?
        .into_iter()
        .collect()
    };
    Ok(keys
        .iter()
        .map(|k| match new.remove(*k) {
            Some(id) => Stored { id, new: true },
            None => Stored {
                id: old.get(*k).copied().unwrap_or(0),
                new: false,
            },
        })
        .collect())
}

/// A subscriber's latest events, newest first (at most `limit`), times in the org's zone.
pub async fn timeline(
    conn: &mut PgConnection,
    org: OrgId,
    subscriber: SubscriberId,
    limit: i64,
) -> sqlx::Result<Vec<TimelineEvent>> {
    sqlx::query_as(
        "select e.id, e.name, e.properties::text as properties,
                to_char(e.occurred_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI:SS') as at
         from events e join orgs o on o.id = e.org_id
         where e.org_id = $1 and e.subscriber_id = $2
         order by e.occurred_at desc, e.id desc limit $3",
    )
    .bind(org)
    .bind(subscriber)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// Deletes up to `batch` events older than their org keeps them, under the leader's fence.
/// Each org's oldest are found through `(org_id, occurred_at)`, never by a scan.
pub async fn trim(pool: &PgPool, lease: &Lease, batch: i64) -> sqlx::Result<u64> {
    let sql = format!(
        "delete from events where (org_id, id) in (
             select e.org_id, e.id from orgs o
             cross join lateral (
                 select org_id, id from events e
                 where e.org_id = o.id
                   and e.occurred_at < now() - make_interval(days => o.event_retention_days)
                 limit $4) e
             limit $4)
           and {}",
        leader::FENCE
    );
    Ok(leader::fenced_rows(&sql, lease)
        .bind(batch)
        .execute(pool)
        .await?
        .rows_affected())
}

/// Forgets an erased person's events (their properties are theirs).
pub async fn forget(conn: &mut PgConnection, org: OrgId, subscribers: &[i64]) -> sqlx::Result<u64> {
    Ok(
        sqlx::query("delete from events where org_id = $1 and subscriber_id = any($2)")
            .bind(org)
            .bind(subscribers)
            .execute(conn)
            .await?
            .rows_affected(),
    )
}
