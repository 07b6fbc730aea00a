//! Subscribers as the REST API sees them: upsert by address (one or up to a bulk request's
//! worth in one statement), read by id, keyset pages in id order, partial updates, list
//! membership. Every statement is scoped by the caller's org. Erasure and deletion are the
//! dashboard's own statements (`db::subscribers`), so both paths forget the same things.

use sqlx::types::Json;
use sqlx::PgConnection;

use crate::domain::{EmailAddress, SubscriberStatus};

/// A subscriber as the API answers it.
#[derive(sqlx::FromRow, Debug, Clone)]
pub struct ApiSubscriber {
    pub id: i64,
    pub email: String,
    pub name: String,
    pub external_id: Option<String>,
    pub status: SubscriberStatus,
    pub attributes: Json<serde_json::Value>,
    pub list_ids: Vec<i64>,
    pub erased: bool,
    /// RFC 3339, UTC.
    pub created_at: String,
    pub updated_at: String,
}

const COLUMNS: &str = "s.id, s.email, s.name, s.external_id, s.status, s.attributes,
    coalesce((select array_agg(m.list_id order by m.list_id) from list_members m
              where m.org_id = s.org_id and m.subscriber_id = s.id), '{}') as list_ids,
    s.erased_at is not null as erased,
    to_char(s.created_at at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') as created_at,
    to_char(s.updated_at at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') as updated_at";

pub async fn get(
    conn: &mut PgConnection,
    org_id: i64,
    id: i64,
) -> sqlx::Result<Option<ApiSubscriber>> {
    sqlx::query_as(&format!(
        "select {COLUMNS} from subscribers s where s.org_id = $1 and s.id = $2"
    ))
    .bind(org_id)
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// Which subscribers a page holds.
pub struct Filter<'a> {
    /// Ids after this one.
    pub after: i64,
    /// Only this list's members.
    pub list_id: Option<i64>,
    /// Only this address, in any spelling.
    pub email_lower: Option<&'a str>,
    /// Only the one with this external id.
    pub external_id: Option<&'a str>,
}

/// A page in id order, filtered; `limit + 1` rows are read so the caller knows whether a next
/// page exists.
pub async fn page(
    conn: &mut PgConnection,
    org_id: i64,
    f: Filter<'_>,
    limit: i64,
) -> sqlx::Result<crate::db::Page<ApiSubscriber, i64>> {
    let rows: Vec<ApiSubscriber> = sqlx::query_as(&format!(
        "select {COLUMNS} from subscribers s
         where s.org_id = $1 and s.id > $2
           and ($3::bigint is null or exists (select 1 from list_members m
                where m.org_id = s.org_id and m.list_id = $3 and m.subscriber_id = s.id))
           and ($4::text is null or s.email_lower = $4)
           and ($6::text is null or s.external_id = $6)
         order by s.id limit $5"
    ))
    .bind(org_id)
    .bind(f.after)
    .bind(f.list_id)
    .bind(f.email_lower)
    .bind(limit + 1)
    .bind(f.external_id)
    .fetch_all(conn)
    .await?;
    Ok(crate::db::Page::of(rows, limit, |r| r.id))
}

/// One row of an upsert. `None` fields keep what an existing subscriber has (a new one gets
/// the column's default); `attributes` are merged into the existing ones, key by key.
pub struct Upsert<'a> {
    pub email: &'a EmailAddress,
    pub name: Option<&'a str>,
    /// Unique in the org: the caller checked that no other subscriber has it.
    pub external_id: Option<&'a str>,
    pub status: Option<SubscriberStatus>,
    pub attributes: Option<&'a serde_json::Value>,
    /// Lists to add the subscriber to (the org's: the caller checked them).
    pub list_ids: &'a [i64],
}

/// What an upsert did to one row, in the order of the input.
#[derive(sqlx::FromRow, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upserted {
    pub id: i64,
    pub created: bool,
}

/// Creates or updates each row's subscriber by address (same spelling: the org's unique key)
/// and adds them to the row's lists, in one statement whatever the number of rows. The
/// addresses must be distinct (one statement cannot change a row twice). Rows are written in
/// address order, so concurrent upserts of overlapping addresses lock them in one order and
/// wait for each other instead of deadlocking. An erased subscriber's address is a hash, so
/// its old address comes back as a new subscriber.
pub async fn upsert(
    conn: &mut PgConnection,
    org_id: i64,
    rows: &[Upsert<'_>],
) -> sqlx::Result<Vec<Upserted>> {
    let emails: Vec<&str> = rows.iter().map(|r| r.email.as_str()).collect();
    let lowers: Vec<&str> = rows.iter().map(|r| r.email.lower()).collect();
    let names: Vec<Option<&str>> = rows.iter().map(|r| r.name).collect();
    let externals: Vec<Option<&str>> = rows.iter().map(|r| r.external_id).collect();
    let statuses: Vec<Option<&str>> = rows
        .iter()
        .map(|r| r.status.map(SubscriberStatus::as_str))
        .collect();
    let attributes: Vec<Option<Json<&serde_json::Value>>> =
        rows.iter().map(|r| r.attributes.map(Json)).collect();
    // What each existing row's update keeps or takes, looked up by address in one jsonb object
    // (a keyed lookup per conflicting row, where a subquery over the input would scan it).
    let given: serde_json::Map<String, serde_json::Value> = rows
        .iter()
        .map(|r| {
            let mut g = serde_json::Map::new();
            if let Some(n) = r.name {
                g.insert("name".into(), n.into());
            }
            if let Some(st) = r.status {
                g.insert("status".into(), st.as_str().into());
            }
            (r.email.as_str().to_owned(), serde_json::Value::Object(g))
        })
        .collect();
    let (member_rows, member_lists): (Vec<i64>, Vec<i64>) = rows
        .iter()
        .enumerate()
        .flat_map(|(i, r)| r.list_ids.iter().map(move |l| (i as i64 + 1, *l)))
        .unzip();
    sqlx::query_as(
        "with input as (
             select * from unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::jsonb[],
                                  $10::text[])
                 with ordinality as t(email, lower, name, status, attributes, external_id, n)
         ),
         written as (
             insert into subscribers as s (org_id, email, email_lower, name, status, attributes,
                                           external_id, optin_source, optin_at)
             select $1, email, lower, coalesce(name, ''), coalesce(status, 'confirmed'),
                    coalesce(attributes, '{}'), external_id, 'api', now()
             from input order by email
             on conflict (org_id, email) do update
             set name = coalesce($9::jsonb -> excluded.email ->> 'name', s.name),
                 status = coalesce($9::jsonb -> excluded.email ->> 'status', s.status),
                 attributes = s.attributes || excluded.attributes,
                 external_id = coalesce(excluded.external_id, s.external_id)
             -- xmax is 0 only on a row this statement inserted.
             returning s.id, s.email, (s.xmax = 0) as created
         ),
         numbered as (select w.id, w.created, i.n from input i join written w on w.email = i.email),
         joined as (
             insert into list_members (org_id, list_id, subscriber_id)
             select $1, m.list_id, w.id
             from unnest($7::bigint[], $8::bigint[]) as m(n, list_id)
             join numbered w on w.n = m.n
             order by 3, 2
             on conflict do nothing
         )
         select id, created from numbered order by n",
    )
    .bind(org_id)
    .bind(&emails)
    .bind(&lowers)
    .bind(&names)
    .bind(&statuses)
    .bind(&attributes)
    .bind(&member_rows)
    .bind(&member_lists)
    .bind(Json(&given))
    .bind(&externals)
    .fetch_all(conn)
    .await
}

/// Which of `list_ids` are not the org's lists.
pub async fn foreign_lists(
    conn: &mut PgConnection,
    org_id: i64,
    list_ids: &[i64],
) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar(
        "select l from unnest($2::bigint[]) as l
         where not exists (select 1 from lists where org_id = $1 and id = l)",
    )
    .bind(org_id)
    .bind(list_ids)
    .fetch_all(conn)
    .await
}

/// What a patch changes; `None` keeps what the subscriber has.
pub struct Change<'a> {
    pub name: Option<&'a str>,
    pub external_id: Option<&'a str>,
    pub status: Option<SubscriberStatus>,
    /// Merged key by key.
    pub attributes: Option<&'a serde_json::Value>,
}

/// The addresses of the `(address, external id)` pairs whose external id another subscriber of
/// the org (not the one with that address, same spelling) already has.
pub async fn external_ids_taken(
    conn: &mut PgConnection,
    org_id: i64,
    pairs: &[(&str, &str)],
) -> sqlx::Result<Vec<String>> {
    if pairs.is_empty() {
        return Ok(Vec::new());
    }
    let (emails, externals): (Vec<&str>, Vec<&str>) = pairs.iter().copied().unzip();
    sqlx::query_scalar(
        "select t.email from unnest($2::text[], $3::text[]) as t(email, external_id)
         join subscribers s on s.org_id = $1 and s.external_id = t.external_id
         where s.email <> t.email",
    )
    .bind(org_id)
    .bind(&emails)
    .bind(&externals)
    .fetch_all(conn)
    .await
}

/// Changes what is given of a subscriber that is not erased; attributes are merged key by
/// key (a key set to null stays null: the caller owns the attribute's meaning). False when
/// there is no such subscriber. An external id another subscriber has fails on the org's
/// unique index (`subscribers_external_id`).
pub async fn patch(
    conn: &mut PgConnection,
    org_id: i64,
    id: i64,
    c: Change<'_>,
) -> sqlx::Result<bool> {
    let r = sqlx::query(
        "update subscribers set name = coalesce($3, name), status = coalesce($4, status),
                attributes = attributes || coalesce($5, '{}'),
                external_id = coalesce($6, external_id)
         where org_id = $1 and id = $2 and erased_at is null",
    )
    .bind(org_id)
    .bind(id)
    .bind(c.name)
    .bind(c.status)
    .bind(c.attributes.map(Json))
    .bind(c.external_id)
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Whether the subscriber is the org's and not erased (locked for the caller's transaction).
pub async fn live(conn: &mut PgConnection, org_id: i64, id: i64) -> sqlx::Result<bool> {
    Ok(sqlx::query_scalar::<_, i64>(
        "select id from subscribers where org_id = $1 and id = $2 and erased_at is null for update",
    )
    .bind(org_id)
    .bind(id)
    .fetch_optional(conn)
    .await?
    .is_some())
}

/// Adds a subscriber to a list; false when they were a member already.
pub async fn join(
    conn: &mut PgConnection,
    org_id: i64,
    list_id: i64,
    subscriber_id: i64,
) -> sqlx::Result<bool> {
    let r = sqlx::query(
        "insert into list_members (org_id, list_id, subscriber_id) values ($1, $2, $3)
         on conflict do nothing",
    )
    .bind(org_id)
    .bind(list_id)
    .bind(subscriber_id)
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Removes a subscriber from a list; false when they were not a member.
pub async fn leave(
    conn: &mut PgConnection,
    org_id: i64,
    list_id: i64,
    subscriber_id: i64,
) -> sqlx::Result<bool> {
    let r = sqlx::query(
        "delete from list_members where org_id = $1 and list_id = $2 and subscriber_id = $3",
    )
    .bind(org_id)
    .bind(list_id)
    .bind(subscriber_id)
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}
