//! The weekly digest's arbiter (guarantees 1 and 3): claiming an org's week *is* inserting its
//! `digest_sends` row; `UNIQUE (org_id, week_key)` decides, the `NOT EXISTS` only avoids needless
//! conflicts. Due-ness and the week key are computed here, in SQL, from the database clock (or
//! an injected `now` in tests) in each org's time zone.
//!
//! Not wired into the worker yet (issue 4 is under way): the ticker, the digest content and the
//! digest renderer come next.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

/// A week claimed by this tick.
#[derive(sqlx::FromRow, Debug, Clone, PartialEq, Eq)]
pub struct ClaimedWeek {
    pub id: i64,
    pub org_id: i64,
    pub week_key: String,
    /// `scheduled`, or `skipped` when the 24-hour window had already passed.
    pub kind: String,
    pub scheduled_at: DateTime<Utc>,
}

/// The ids of up to `limit` orgs after `after`, in order: one chunk of a tick.
pub async fn org_chunk(conn: &mut PgConnection, after: i64, limit: i64) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar("select id from orgs where id > $1 order by id limit $2")
        .bind(after)
        .bind(limit)
        .fetch_all(conn)
        .await
}

/// Claims, for the orgs with ids in `first..=last`, the week whose scheduled time has come:
/// the org's digest weekday and hour in its own time zone, this ISO week's slot once it has
/// passed, else last week's. Within 24 hours of the slot the week is claimed as `scheduled`;
/// later it is recorded as `skipped` (never sent days late). A week already claimed (by any
/// replica, any tick) is not returned again. Runs in the caller's transaction, which also builds
/// and enqueues the digests, so a crash before commit claims nothing.
pub async fn claim_due_weeks(
    conn: &mut PgConnection,
    now: Option<DateTime<Utc>>,
    first: i64,
    last: i64,
) -> sqlx::Result<Vec<ClaimedWeek>> {
    sqlx::query_as(
        "with clock as (select coalesce($1::timestamptz, now()) as now),
         slots as (
             select o.id as org_id, o.timezone, c.now,
                    (c.now at time zone o.timezone) as local_now,
                    date_trunc('week', c.now at time zone o.timezone)
                      + (o.digest_weekday - 1) * interval '1 day' + o.digest_hour * interval '1 hour' as this_slot
             from orgs o, clock c
             where o.id between $2 and $3
         ),
         due as (
             select org_id, now, timezone, slot,
                    slot at time zone timezone as scheduled_at,
                    to_char(slot, 'IYYY-\"W\"IW') as week_key
             from (select s.*, case when local_now >= this_slot then this_slot
                                    else this_slot - interval '7 days' end as slot
                   from slots s) picked
         )
         insert into digest_sends (org_id, week_key, kind, covers_week, scheduled_at, period_start, period_end)
         select d.org_id, d.week_key,
                case when d.now < d.scheduled_at + interval '24 hours' then 'scheduled' else 'skipped' end,
                d.week_key, d.scheduled_at,
                (d.slot - interval '7 days') at time zone d.timezone, d.scheduled_at
         from due d
         where d.now >= d.scheduled_at
           and not exists (select 1 from digest_sends s where s.org_id = d.org_id and s.week_key = d.week_key)
         order by d.org_id
         on conflict (org_id, week_key) do nothing
         returning id, org_id, week_key, kind, scheduled_at",
    )
    .bind(now)
    .bind(first)
    .bind(last)
    .fetch_all(conn)
    .await
}
