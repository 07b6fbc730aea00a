//! The weekly digest's arbiter (guarantees 1–3): claiming an org's week *is* inserting its
//! `digest_sends` row; `UNIQUE (org_id, week_key)` decides, the `NOT EXISTS` only avoids needless
//! conflicts. Due-ness and the week key are computed here, in SQL, from the database clock (or
//! an injected `now` in tests) in each org's time zone. The claim, the stored content and the
//! enqueued deliveries commit in the caller's one transaction.

/// The Digests page: opt-outs, schedule, history, manual resends.
pub mod admin;
/// The digest's figures for an org's week.
pub mod figures;

use crate::domain::digest_job_sql;
use crate::domain::WeekKey;
use chrono::{DateTime, Utc};
use sqlx::PgConnection;

/// A week (or a forced resend) claimed in this transaction.
#[derive(sqlx::FromRow, Debug, Clone, PartialEq, Eq)]
pub struct ClaimedWeek {
    pub id: i64,
    pub org_id: i64,
    pub week_key: String,
    pub kind: crate::domain::DigestKind,
    pub scheduled_at: DateTime<Utc>,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
}

/// An org whose digest is due, and where a tick's walk stands after it.
#[derive(sqlx::FromRow, Debug, Clone, Copy, PartialEq, Eq)]
pub struct DueOrg {
    pub due_at: DateTime<Utc>,
    pub id: i64,
}

/// Up to `limit` orgs whose digest is due at `now` (the database clock when `None`), after
/// `after` in the order of their due time (then id): one chunk of a tick. An org is due once
/// its next weekly slot has passed since a tick last looked at it ([`claim_due_weeks`] moves it
/// on), or when it is new or its schedule changed. The walk follows the index on the due time,
/// so a tick costs what is due, whatever the statistics say, and an org left behind by a
/// failed chunk is not met again in the same tick.
pub async fn org_chunk(
    conn: &mut PgConnection,
    now: Option<DateTime<Utc>>,
    after: Option<DueOrg>,
    limit: i64,
) -> sqlx::Result<Vec<DueOrg>> {
    sqlx::query_as(
        "select digest_due_at as due_at, id from orgs
         where digest_due_at <= coalesce($1::timestamptz, now())
           and (digest_due_at, id) > (coalesce($2::timestamptz, '-infinity'), $3)
         order by digest_due_at, id limit $4",
    )
    .bind(now)
    .bind(after.map(|a| a.due_at))
    .bind(after.map_or(i64::MIN, |a| a.id))
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// Claims, for the orgs in `org_ids`, every week whose scheduled time has come and that is not
/// claimed yet: the org's digest weekday and hour in its own time zone. The latest slot is this
/// ISO week's once its *instant* has passed, else last week's; instants, not local wall-clock
/// times, are compared, so a tick inside an autumn clock change's doubled hour picks the right
/// week. Within 24 hours of its slot a week is claimed as `scheduled`; later it is recorded as
/// `skipped` (never sent days late), and after an outage of several weeks each missed week since
/// the org's last claimed one gets its own `skipped` row (at most 52 rows in all, the latest
/// week's included; an org with no claimed week yet starts at its latest slot). A week already
/// claimed (by any replica, any tick) is not returned again. The period covered is the 7 local
/// days before the slot.
///
/// The same statement moves each org's due time ([`org_chunk`]) to its next slot after `now`,
/// after its claims (so racing ticks meet at the unique key first, as before), and only while
/// the org's schedule is still the one it used: a schedule saved meanwhile has made the org due
/// again, and that stands. A chunk that fails rolls the due time back with its claims, so the
/// next tick looks again.
pub async fn claim_due_weeks(
    conn: &mut PgConnection,
    now: Option<DateTime<Utc>>,
    org_ids: &[i64],
) -> sqlx::Result<Vec<ClaimedWeek>> {
    sqlx::query_as(
        "with clock as (select coalesce($1::timestamptz, now()) as now),
         slots as (
             select o.id as org_id, o.timezone, o.digest_weekday, o.digest_hour, c.now,
                    date_trunc('week', c.now at time zone o.timezone)
                      + (o.digest_weekday - 1) * interval '1 day' + o.digest_hour * interval '1 hour' as this_slot
             from orgs o, clock c
             where o.id = any($2)
         ),
         latest as materialized (
             select s.org_id, s.timezone, s.digest_weekday, s.digest_hour, s.now, p.slot,
                    p.slot at time zone s.timezone as slot_at,
                    (select d.scheduled_at from digest_sends d
                     where d.org_id = s.org_id and d.kind <> 'manual'
                     order by d.scheduled_at desc limit 1) as last_claimed
             from slots s
             cross join lateral (
                 select case when s.now >= (s.this_slot at time zone s.timezone) then s.this_slot
                             else s.this_slot - interval '7 days' end as slot
             ) p
         ),
         -- The slot after the latest one. Not read below, so run after the insert: rows of
         -- orgs are locked only once this statement's claims are made.
         -- Racing ticks lock the chunk's org rows in id order, so they queue instead of
         -- deadlocking (each took them in its own plan's order before).
         ordered as materialized (
             select o.id from orgs o where o.id = any($2) order by o.id for no key update
         ),
         moved as (
             update orgs o
             set digest_due_at = (l.slot + interval '7 days') at time zone l.timezone
             from latest l join ordered r on r.id = l.org_id
             where o.id = l.org_id and o.timezone = l.timezone
               and o.digest_weekday = l.digest_weekday and o.digest_hour = l.digest_hour
               and o.digest_due_at is distinct from (l.slot + interval '7 days') at time zone l.timezone
         ),
         due as (
             select l.org_id, l.now, l.timezone, w.slot, w.scheduled_at, w.week_key
             from latest l
             cross join lateral (
                 -- The latest slot, and the older ones back to the last claimed week (one more
                 -- than whole weeks fit, for clock changes), each not claimed yet: at most 52
                 -- slots in all, k = 0 (the latest) to 51.
                 select x.slot, x.scheduled_at, x.week_key
                 from (select l.slot - k * interval '7 days' as slot,
                              (l.slot - k * interval '7 days') at time zone l.timezone as scheduled_at,
                              to_char(l.slot - k * interval '7 days', 'IYYY-\"W\"IW') as week_key
                       from generate_series(0, case when l.last_claimed is null then 0
                           else least(51, ceil(extract(epoch from l.slot_at - l.last_claimed) / 604800))::int
                           end) k) x
                 where (l.last_claimed is null or x.scheduled_at > l.last_claimed)
                   -- A scalar probe of the unique index per candidate (a NOT EXISTS would be
                   -- planned as a hash anti join over the whole table at every tick).
                   and (select true from digest_sends s
                        where s.org_id = l.org_id and s.week_key = x.week_key limit 1) is null
             ) w
         )
         insert into digest_sends (org_id, week_key, kind, covers_week, scheduled_at, period_start, period_end)
         select d.org_id, d.week_key,
                case when d.now < d.scheduled_at + interval '24 hours' then 'scheduled' else 'skipped' end,
                d.week_key, d.scheduled_at,
                (d.slot - interval '7 days') at time zone d.timezone, d.scheduled_at
         from due d
         where d.now >= d.scheduled_at
         order by d.org_id, d.scheduled_at
         on conflict (org_id, week_key) do nothing
         returning id, org_id, week_key, kind, scheduled_at, period_start, period_end",
    )
    .bind(now)
    .bind(org_ids)
    .fetch_all(conn)
    .await
}

/// What a forced-resend claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManualClaim {
    Claimed(ClaimedWeek),
    /// This dialog's key was already used by the same admin with the same choice: the resend
    /// it asked for exists.
    AlreadySent {
        id: i64,
    },
    /// The same dialog was submitted before with the other "only me" choice: that one counts.
    TakenByAnother,
    /// The key is more than `max_age_seconds` old by the database clock.
    Expired,
    /// The key is from the future by the database clock (the clock went back).
    Future,
}

/// A forced resend to claim.
#[derive(Debug, Clone)]
pub struct ManualRequest {
    pub org_id: i64,
    /// The dialog's key (`manual-<unix seconds>-<nonce>`), issued when the server rendered it.
    pub key: WeekKey,
    pub max_age_seconds: i64,
    pub triggered_by: i64,
    pub only_me: bool,
    /// Replaces the database clock in tests.
    pub now: Option<DateTime<Utc>>,
}

/// Claims a forced resend under its dialog's key (`manual-<unix seconds>-<nonce>`, issued when
/// the server rendered the dialog). It covers the 7 days up to now and records the org's current
/// local ISO week, so it can neither collide with nor block any scheduled week.
pub async fn claim_manual(conn: &mut PgConnection, r: ManualRequest) -> sqlx::Result<ManualClaim> {
    let WeekKey::Manual { unix_seconds, .. } = r.key else {
        return Err(sqlx::Error::Protocol(format!(
            "{} is not a manual week key",
            r.key
        )));
    };
    let key = r.key.to_string();
    let claimed: Option<ClaimedWeek> = sqlx::query_as(
        "with clock as (select coalesce($6::timestamptz, now()) as now)
         insert into digest_sends (org_id, week_key, kind, covers_week, triggered_by, only_me,
                                   scheduled_at, period_start, period_end)
         select o.id, $2, 'manual', to_char(c.now at time zone o.timezone, 'IYYY-\"W\"IW'),
                $4, $5, c.now, c.now - interval '7 days', c.now
         from orgs o, clock c
         where o.id = $1
           and $7 <= extract(epoch from c.now)
           and $7 >= extract(epoch from c.now) - $3
         on conflict (org_id, week_key) do nothing
         returning id, org_id, week_key, kind, scheduled_at, period_start, period_end",
    )
    .bind(r.org_id)
    .bind(&key)
    .bind(r.max_age_seconds)
    .bind(r.triggered_by)
    .bind(r.only_me)
    .bind(r.now)
    .bind(unix_seconds)
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(c) = claimed {
        return Ok(ManualClaim::Claimed(c));
    }
    let existing: Option<(i64, Option<i64>, bool)> = sqlx::query_as(
        "select id, triggered_by, only_me from digest_sends where org_id = $1 and week_key = $2",
    )
    .bind(r.org_id)
    .bind(&key)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(match existing {
        Some((id, by, only_me)) if by == Some(r.triggered_by) && only_me == r.only_me => {
            ManualClaim::AlreadySent { id }
        }
        Some(_) => ManualClaim::TakenByAnother,
        None => {
            let now: i64 = sqlx::query_scalar(
                "select floor(extract(epoch from coalesce($1::timestamptz, now())))::bigint",
            )
            .bind(r.now)
            .fetch_one(conn)
            .await?;
            if unix_seconds > now {
                ManualClaim::Future
            } else {
                ManualClaim::Expired
            }
        }
    })
}

/// A digest's rendered content, as stored on its row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredContent {
    pub id: i64,
    pub subject: String,
    pub html: String,
    pub text: String,
}

/// Stores each claimed digest's content on its row: one statement for the chunk.
pub async fn store_contents(
    conn: &mut PgConnection,
    contents: &[StoredContent],
) -> sqlx::Result<()> {
    if contents.is_empty() {
        return Ok(());
    }
    let ids: Vec<i64> = contents.iter().map(|c| c.id).collect();
    let subjects: Vec<&str> = contents.iter().map(|c| c.subject.as_str()).collect();
    let htmls: Vec<&str> = contents.iter().map(|c| c.html.as_str()).collect();
    let texts: Vec<&str> = contents.iter().map(|c| c.text.as_str()).collect();
    sqlx::query(
        "update digest_sends d set subject = c.subject, content_html = c.html, content_text = c.text
         from unnest($1::bigint[], $2::text[], $3::text[], $4::text[]) as c(id, subject, html, text)
         where d.id = c.id",
    )
    .bind(&ids)
    .bind(&subjects)
    .bind(&htmls)
    .bind(&texts)
    .execute(conn)
    .await?;
    Ok(())
}

/// Enqueues one delivery per recipient of each digest in `ids` and records the count on its
/// row, in one statement. The opt-out filter is the recipient query's own `WHERE` (guarantee
/// 3): opted-in, enabled owners and admins; for an "only me" resend, just the admin who asked.
/// The job id is `digest:<org>:<week key>:<user>` (`JobId::Digest`); enqueueing is
/// `ON CONFLICT DO NOTHING` like every enqueue. Returns the number of deliveries queued.
pub async fn enqueue_recipients(conn: &mut PgConnection, ids: &[i64]) -> sqlx::Result<i64> {
    if ids.is_empty() {
        return Ok(0);
    }
    sqlx::query_scalar(
        concat!(
        "with recipients as (
             select ds.id as digest_send_id, ds.org_id, ds.week_key, u.id as user_id, u.email, u.email_lower
             from digest_sends ds
             join users u on u.org_id = ds.org_id
             where ds.id = any($1)
               and not u.disabled
               and case when ds.only_me then u.id = ds.triggered_by
                        else u.weekly_digest and u.role in ('owner', 'admin') end
         ),
         queued as (
             insert into deliveries (job_id, org_id, kind, priority, recipient, email_lower, digest_send_id, user_id)
             select ",
        digest_job_sql!("org_id", "week_key", "user_id"),
        ", org_id, 'digest', 1,
                    email, email_lower, digest_send_id, user_id
             from recipients
             on conflict (job_id) do nothing
             returning digest_send_id
         ),
         counted as (
             update digest_sends d set recipient_count = n.n
             from (select digest_send_id, count(*) as n from queued group by digest_send_id) n
             where d.id = n.digest_send_id
             returning n.n
         )
         select coalesce(sum(n), 0)::bigint from counted"
    ),
    )
    .bind(ids)
    .fetch_one(conn)
    .await
}

/// The content the delivery worker wraps into each digest message, for a batch.
#[derive(sqlx::FromRow, Debug, Clone)]
pub struct Content {
    pub id: i64,
    pub subject: String,
    pub content_html: String,
    pub content_text: String,
}

/// The stored content of the digests `refs` (org id, digest send id), in one query.
pub async fn contents(conn: &mut PgConnection, refs: &[(i64, i64)]) -> sqlx::Result<Vec<Content>> {
    let (orgs, ids): (Vec<i64>, Vec<i64>) = refs.iter().copied().unzip();
    sqlx::query_as(
        "select d.id, d.subject, d.content_html, d.content_text
         from digest_sends d join unnest($1::bigint[], $2::bigint[]) as r(org_id, id)
           on d.org_id = r.org_id and d.id = r.id
         where d.subject is not null and d.content_html is not null and d.content_text is not null",
    )
    .bind(&orgs)
    .bind(&ids)
    .fetch_all(conn)
    .await
}

/// This week's scheduled digest of an org, as the dashboard shows it: the slot, the period it
/// covers, and whether it was claimed (`scheduled`, `skipped`) or not yet (`None`).
#[derive(sqlx::FromRow, Debug, Clone, PartialEq, Eq)]
pub struct ThisWeek {
    pub week_key: String,
    pub scheduled_at: DateTime<Utc>,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    /// The slot on the org's wall clock, e.g. `Mon 30 Nov 2026 09:00`.
    pub scheduled_local: String,
    pub claimed_as: Option<crate::domain::DigestKind>,
}

pub async fn this_week(conn: &mut PgConnection, org_id: i64) -> sqlx::Result<Option<ThisWeek>> {
    sqlx::query_as(
        "with s as (
             select o.id, o.timezone,
                    date_trunc('week', now() at time zone o.timezone)
                      + (o.digest_weekday - 1) * interval '1 day' + o.digest_hour * interval '1 hour' as slot
             from orgs o where o.id = $1
         )
         select to_char(s.slot, 'IYYY-\"W\"IW') as week_key,
                s.slot at time zone s.timezone as scheduled_at,
                (s.slot - interval '7 days') at time zone s.timezone as period_start,
                s.slot at time zone s.timezone as period_end,
                to_char(s.slot, 'Dy FMDD Mon YYYY HH24:MI') as scheduled_local,
                (select d.kind from digest_sends d
                  where d.org_id = s.id and d.week_key = to_char(s.slot, 'IYYY-\"W\"IW')) as claimed_as
         from s",
    )
    .bind(org_id)
    .fetch_optional(conn)
    .await
}

/// A forced-resend key: the database clock's unix seconds when the dialog is rendered.
pub async fn issue_manual_key(conn: &mut PgConnection) -> sqlx::Result<i64> {
    sqlx::query_scalar("select floor(extract(epoch from now()))::bigint")
        .fetch_one(conn)
        .await
}
