//! An org's subscribers as the Audience pages see them: a keyset-paginated list with search,
//! one subscriber with their lists and history, and the admin's changes (add, edit, remove,
//! erase). Every statement is scoped by the org.

use sqlx::PgConnection;

use crate::domain::{EmailAddress, SuppressionReason};
use crate::model::{Reached, SubscriberProfile, SubscriberRow};

pub struct Filter<'a> {
    /// Part of the address, lower case.
    pub search: Option<&'a str>,
    pub status: Option<&'a str>,
    pub list_id: Option<i64>,
    /// Ids below this one (the keyset of the previous page).
    pub before: Option<i64>,
}

/// One page, newest first; `next` is the `before` of the next page.
pub async fn page(
    conn: &mut PgConnection,
    org_id: i64,
    f: &Filter<'_>,
    limit: i64,
) -> sqlx::Result<crate::db::Page<SubscriberRow, i64>> {
    let rows: Vec<SubscriberRow> = sqlx::query_as(
        "select s.id, s.email, s.name, s.status, s.erased_at is not null as erased,
                (select x.reason from suppressions x where x.org_id = s.org_id and x.email_lower = s.email_lower) as suppressed,
                (select count(*) from list_members m where m.subscriber_id = s.id) as lists,
                to_char(s.created_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as created
         from subscribers s join orgs o on o.id = s.org_id
         where s.org_id = $1
           and ($2::text is null or strpos(s.email_lower, $2) > 0)
           and ($3::text is null or s.status = $3)
           and ($4::bigint is null or exists (select 1 from list_members m
                where m.list_id = $4 and m.subscriber_id = s.id and m.org_id = s.org_id))
           and ($5::bigint is null or s.id < $5)
         order by s.id desc
         limit $6",
    )
    .bind(org_id)
    .bind(f.search)
    .bind(f.status)
    .bind(f.list_id)
    .bind(f.before)
    .bind(limit + 1)
    .fetch_all(conn)
    .await?;
    Ok(crate::db::Page::of(rows, limit, |r| r.id))
}

pub async fn detail(
    conn: &mut PgConnection,
    org_id: i64,
    id: i64,
) -> sqlx::Result<Option<SubscriberProfile>> {
    sqlx::query_as(
        "select s.id, s.email, s.name, s.external_id, s.status,
                to_char(s.erased_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as erased,
                to_char(s.created_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as created,
                x.reason as suppression, x.source as suppression_source,
                to_char(x.created_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as suppressed_at,
                coalesce((select array_agg(m.list_id order by m.list_id) from list_members m
                          where m.subscriber_id = s.id and m.org_id = s.org_id), '{}') as list_ids,
                s.optin_source, s.optin_ip,
                to_char(s.optin_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI:SS') as optin_at,
                s.confirmed_ip,
                to_char(s.confirmed_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI:SS') as confirmed_at
         from subscribers s join orgs o on o.id = s.org_id
         left join suppressions x on x.org_id = s.org_id and x.email_lower = s.email_lower
         where s.org_id = $1 and s.id = $2",
    )
    .bind(org_id)
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// Which campaigns reached (or tried to reach) a subscriber, and how: newest first.
pub async fn history(
    conn: &mut PgConnection,
    org_id: i64,
    id: i64,
    limit: i64,
) -> sqlx::Result<Vec<Reached>> {
    sqlx::query_as(
        "select c.id as campaign_id, c.name as campaign,
                coalesce(d.status, s.status) as status,
                coalesce(d.smtp_reply, d.last_error) as detail,
                to_char(coalesce(d.updated_at, s.updated_at) at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as at
         from sends s
         join campaigns c on c.org_id = s.org_id and c.id = s.campaign_id
         join orgs o on o.id = s.org_id
         left join deliveries d on d.job_id = s.job_id
         where s.org_id = $1 and s.subscriber_id = $2
         order by s.id desc
         limit $3",
    )
    .bind(org_id)
    .bind(id)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// Adds one subscriber; `None` when the address is there already (same spelling).
pub async fn add(
    conn: &mut PgConnection,
    org_id: i64,
    email: &EmailAddress,
    name: &str,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "insert into subscribers (org_id, email, email_lower, name, optin_source, optin_at)
         values ($1, $2, $3, $4, 'dashboard', now())
         on conflict (org_id, email) do nothing returning id",
    )
    .bind(org_id)
    .bind(email.as_str())
    .bind(email.lower())
    .bind(name)
    .fetch_optional(conn)
    .await
}

/// Changes a subscriber's name and status and sets their lists to exactly `list_ids` (each
/// of the org's). False when no such subscriber (or one that was erased).
pub async fn update(
    conn: &mut PgConnection,
    org_id: i64,
    id: i64,
    name: &str,
    status: &str,
    list_ids: &[i64],
) -> sqlx::Result<bool> {
    let found = sqlx::query(
        "update subscribers set name = $3, status = $4
         where org_id = $1 and id = $2 and erased_at is null",
    )
    .bind(org_id)
    .bind(id)
    .bind(name)
    .bind(status)
    .execute(&mut *conn)
    .await?
    .rows_affected()
        == 1;
    if found {
        set_lists(conn, org_id, id, list_ids).await?;
    }
    Ok(found)
}

/// Sets a subscriber's memberships to exactly `list_ids`; lists of other orgs are ignored.
pub async fn set_lists(
    conn: &mut PgConnection,
    org_id: i64,
    id: i64,
    list_ids: &[i64],
) -> sqlx::Result<()> {
    sqlx::query(
        "with gone as (delete from list_members where org_id = $1 and subscriber_id = $2
                       and not (list_id = any($3)))
         insert into list_members (org_id, list_id, subscriber_id)
         select $1, l.id, $2 from lists l where l.org_id = $1 and l.id = any($3)
         on conflict do nothing",
    )
    .bind(org_id)
    .bind(id)
    .bind(list_ids)
    .execute(conn)
    .await?;
    Ok(())
}

pub enum Removal {
    Removed,
    NotFound,
    /// Campaigns reached them: their history keeps the row (erase the personal data instead).
    HasHistory,
}

pub async fn remove(conn: &mut PgConnection, org_id: i64, id: i64) -> sqlx::Result<Removal> {
    let row: Option<(bool,)> = sqlx::query_as(
        "select exists (select 1 from sends where org_id = $1 and subscriber_id = $2)
             or exists (select 1 from deliveries where org_id = $1 and subscriber_id = $2)
         from subscribers where org_id = $1 and id = $2 for update",
    )
    .bind(org_id)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    match row {
        None => Ok(Removal::NotFound),
        Some((true,)) => Ok(Removal::HasHistory),
        Some((false,)) => {
            sqlx::query("delete from subscribers where org_id = $1 and id = $2")
                .bind(org_id)
                .bind(id)
                .execute(conn)
                .await?;
            Ok(Removal::Removed)
        }
    }
}

/// What an erasure did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Erasure {
    /// The address as the erased subscriber had it (for the answer; stored nowhere).
    pub email: String,
    /// Subscriber rows erased: every spelling of the address.
    pub subscribers: i64,
    /// The job ids of every delivery to the address: the caller removes their captured copies
    /// ([`crate::capture::remove`]) once the erasure is committed.
    pub job_ids: Vec<String>,
}

/// Erases the personal data of a subscriber's address: in every subscriber of the org with
/// that address (case variants are the same person), their sends, every delivery to it and
/// every relay report about it, the address becomes a hash; names and attributes go, memberships end,
/// transactional messages to it lose their content (those still queued are cancelled). The
/// IPs of their opt-in and confirmation (on the subscriber and on each sign-up) go, and so does
/// what the audit log says about them: in the entries about their subscriber rows (or naming
/// the address as a subscriber's), the address becomes the hash, the name is emptied and the
/// IP nulled; in any other entry naming the address (a suppression, a test send) the address
/// becomes the hash. The address stays suppressed (a suppression is written if there was
/// none), so it is never mailed again; the hash is suppressed too, so a send or delivery still
/// queued for them is suppressed when it is claimed, and counted as such, like any other. Each
/// erased subscriber row's address becomes `<hash>-<row id>`, unique per row, so the same
/// address added again can be erased again. Returns what was erased, or `None` when there is
/// no such subscriber or it was erased already.
pub async fn erase(conn: &mut PgConnection, org_id: i64, id: i64) -> sqlx::Result<Option<Erasure>> {
    let found: Option<(String, String)> = sqlx::query_as(
        "select email, email_lower from subscribers
         where org_id = $1 and id = $2 and erased_at is null for update",
    )
    .bind(org_id)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((email, lower)) = found else {
        return Ok(None);
    };
    // The address stays suppressed, in clear until the rows below forget it, then as its hash.
    let hashed = crate::domain::erased_form(&lower);
    crate::db::audience::suppress_all(
        conn,
        org_id,
        &[&lower, &hashed],
        SuppressionReason::Manual,
        "erasure",
    )
    .await?;
    // Every subscriber row of this person: those erased now, and any erased before (whatever
    // an older erasure left behind goes too).
    let rows: Vec<i64> = sqlx::query_scalar(
        "select id from subscribers where org_id = $1 and email_lower in ($2, $3)",
    )
    .bind(org_id)
    .bind(&lower)
    .bind(&hashed)
    .fetch_all(&mut *conn)
    .await?;
    // Where they opted in and confirmed from: the IPs go, the sources and times stay.
    sqlx::query(
        "with signed as (
             update signups set ip = null, confirmed_ip = null
             where org_id = $1 and subscriber_id = any($2)
               and (ip is not null or confirmed_ip is not null)
         )
         update subscribers set optin_ip = null, confirmed_ip = null
         where org_id = $1 and id = any($2) and (optin_ip is not null or confirmed_ip is not null)",
    )
    .bind(org_id)
    .bind(&rows)
    .execute(&mut *conn)
    .await?;
    scrub_audit(conn, org_id, &rows, &lower, &hashed).await?;
    crate::db::events::forget(conn, crate::domain::OrgId(org_id), &rows).await?;
    crate::db::automation::forget(conn, crate::domain::OrgId(org_id), &rows).await?;
    crate::db::webhooks_out::forget(conn, org_id, &lower).await?;
    crate::db::clicks::forget(conn, org_id, &rows, &lower).await?;
    let (erased, job_ids): (i64, Vec<String>) = sqlx::query_as(
        "with hashed as (select $3::text as h),
         members as (
             delete from list_members m using subscribers s
             where m.org_id = $1 and s.org_id = $1 and m.subscriber_id = s.id and s.email_lower = $2
         ),
         sent as (update sends set email_lower = (select h from hashed) where org_id = $1 and email_lower = $2),
         -- Relay reports about them attach to the hash; their diagnostics often quote the address.
         reported as (
             update delivery_events set email_lower = (select h from hashed), diagnostic = null
             where org_id = $1 and email_lower = $2
         ),
         -- Transactional mail keeps no content for them; what is still in the queue is not
         -- sent (taken off it under its lock: a message a claim took is in flight, and its
         -- mark or outcome decides).
         unsent as (
             delete from delivery_queue q using deliveries d
             where q.job_id = d.job_id and d.org_id = $1 and d.email_lower = $2
               and d.kind = 'transactional' and d.status = 'queued'
             returning q.job_id
         ),
         mailed as (
             update deliveries set recipient = (select h from hashed), email_lower = (select h from hashed),
                                   smtp_reply = null, last_error = null,
                                   status = case when job_id in (select job_id from unsent)
                                                 then 'cancelled' else status end,
                                   finished_at = case when job_id in (select job_id from unsent)
                                                      then now() else finished_at end
             where org_id = $1 and email_lower = $2
             returning job_id
         ),
         transactional as (
             update tx_messages set recipient = (select h from hashed), email_lower = (select h from hashed),
                                    data = '{}', subject = '', body_text = '', body_html = null
             where org_id = $1 and email_lower = $2
         ),
         -- The address of each row becomes the hash and the row's id: unique per row, so the
         -- same address added again after an erasure can be erased again.
         people as (
             update subscribers
             set email = (select h from hashed) || '-' || id,
                 email_lower = (select h from hashed),
                 name = '', attributes = '{}', external_id = null, status = 'blocklisted',
                 erased_at = now()
             where org_id = $1 and email_lower = $2 and erased_at is null
             returning 1
         )
         -- Captured copies of the messages to them: those erased now and any erased before.
         select (select count(*) from people),
                array(select job_id from mailed
                      union select job_id from deliveries where org_id = $1 and email_lower = $3)",
    )
    .bind(org_id)
    .bind(&lower)
    .bind(&hashed)
    .fetch_one(conn)
    .await?;
    Ok(Some(Erasure {
        email,
        subscribers: erased,
        job_ids,
    }))
}

/// Scrubs what the org's audit log says about an erased person (subscriber rows `rows`,
/// address `lower`, its hash `hashed`), in the erasure's transaction. An entry about one of
/// their rows, or about a subscriber with their address (a removed spelling), keeps its
/// action, actor and time, but its `email` becomes the hash, its `name` is emptied and its
/// `ip` nulled; every other mention of the address, in any entry (a suppression added or
/// lifted, a test send's recipients, a retried delivery's job id), becomes the hash. The
/// address is matched whole, in any case: `ann@example.com` is not scrubbed out of
/// `joann@example.com`.
async fn scrub_audit(
    conn: &mut PgConnection,
    org_id: i64,
    rows: &[i64],
    lower: &str,
    hashed: &str,
) -> sqlx::Result<()> {
    let ids: Vec<String> = rows.iter().map(i64::to_string).collect();
    sqlx::query(
        "with about as (
             select a.id,
                    coalesce(a.object_type = 'subscriber'
                             and (a.object_id = any($2)
                                  or lower(a.before->>'email') = $5
                                  or lower(a.after->>'email') = $5), false) as theirs
             from audit_log a
             where a.org_id = $1
               and ((a.object_type = 'subscriber' and a.object_id = any($2))
                    or strpos(lower(concat(a.object_id, ' ', a.before::text, ' ', a.after::text)), $5) > 0)
         )
         update audit_log a
         set object_id = regexp_replace(a.object_id, $4, $3, 'gi'),
             before = regexp_replace(
                 (case when x.theirs and jsonb_typeof(a.before) = 'object'
                       then jsonb_set(jsonb_set(jsonb_set(a.before, '{email}', to_jsonb($3::text), false),
                                                '{name}', '\"\"', false),
                                      '{ip}', 'null', false)
                       else a.before end)::text,
                 $4, $3, 'gi')::jsonb,
             after = regexp_replace(
                 (case when x.theirs and jsonb_typeof(a.after) = 'object'
                       then jsonb_set(jsonb_set(jsonb_set(a.after, '{email}', to_jsonb($3::text), false),
                                                '{name}', '\"\"', false),
                                      '{ip}', 'null', false)
                       else a.after end)::text,
                 $4, $3, 'gi')::jsonb
         from about x
         where a.id = x.id",
    )
    .bind(org_id)
    .bind(&ids)
    .bind(hashed)
    .bind(address_pattern(lower))
    .bind(lower)
    .execute(conn)
    .await?;
    Ok(())
}

/// A PostgreSQL regular expression matching `address` as a whole address (with the `i` flag,
/// in any case): not preceded by a character of a local part, not followed by one of a domain
/// (a full stop followed by a letter or digit continues the domain; one at the end does not).
fn address_pattern(address: &str) -> String {
    let mut p = String::from(r"(?<![[:alnum:]!#$%&'*+/=?^_`{|}~.-])");
    for c in address.chars() {
        // Escaped, every ASCII punctuation character is itself; letters, digits and non-ASCII
        // characters are never special.
        if c.is_ascii() && !c.is_ascii_alphanumeric() {
            p.push('\\');
        }
        p.push(c);
    }
    p.push_str(r"(?![[:alnum:]-]|\.[[:alnum:]])");
    p
}

#[derive(sqlx::FromRow, Debug, Clone)]
pub struct Exported {
    pub id: i64,
    pub email: String,
    pub name: String,
    pub status: String,
    pub created: String,
}

/// The next batch of an export, by id (erased subscribers are left out): all the org's
/// subscribers, or one list's members.
pub async fn export_batch(
    conn: &mut PgConnection,
    org_id: i64,
    list_id: Option<i64>,
    after: i64,
    limit: i64,
) -> sqlx::Result<Vec<Exported>> {
    sqlx::query_as(
        "select s.id, s.email, s.name, s.status,
                to_char(s.created_at at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') as created
         from subscribers s
         where s.org_id = $1 and s.id > $3 and s.erased_at is null
           and ($2::bigint is null or exists (select 1 from list_members m
                where m.list_id = $2 and m.subscriber_id = s.id and m.org_id = s.org_id))
         order by s.id limit $4",
    )
    .bind(org_id)
    .bind(list_id)
    .bind(after)
    .bind(limit)
    .fetch_all(conn)
    .await
}
