//! Segment events out (`segment.entered`, `segment.left`): a segment is a condition, not an
//! event, so who entered or left it is learnt by comparing scans. For the segments of orgs
//! with an enabled endpoint that asked for them, a scan evaluates the segment as it is now,
//! adds who matches and did not (entered), drops who matched and does not (left), and writes
//! one event per change in the same statement, so the answer it keeps and the events it
//! reports commit together. The first scan of a segment, and one after a day without any
//! (the endpoint was off, say), only notes who matches: a stale answer would report a day of
//! comings and goings as if they had just happened.

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{PgPool, QueryBuilder};

use super::compile::{clock, push_predicate, roomy, Place};
use crate::domain::segment::Group;
use crate::domain::OrgId;

/// Scans every watched segment once (at the database's now, or `pinned`). Any number of
/// replicas may run it at once: a segment's scan state is locked by the one scanning it (the
/// others skip it), and each scan's findings are keyed by its number. Returns how many
/// entries and exits it reported. A segment scanned (by any replica) less than half of
/// `every` ago is not scanned again, so more replicas do not mean more scans.
pub async fn watch(
    pool: &PgPool,
    pinned: Option<DateTime<Utc>>,
    every: std::time::Duration,
) -> sqlx::Result<u64> {
    let watched: Vec<(OrgId, i64, i32, Json<Group>)> = sqlx::query_as(
        "select s.org_id, s.id, s.version, s.definition from segments s
         where s.deleted_at is null
           and exists (select 1 from webhook_out_endpoints e
                       where e.org_id = s.org_id and e.enabled
                         and e.event_types && array['segment.entered', 'segment.left'])
         order by s.id",
    )
    .fetch_all(pool)
    .await?;
    let mut written = 0;
    for (org, segment, version, Json(g)) in watched {
        let scanned = scan(pool, pinned, every, org, segment, version, &g).await;
        written += crate::db::one_of_many("watched segment", segment, scanned)?;
    }
    Ok(written)
}

#[allow(clippy::too_many_arguments)]
async fn scan(
    pool: &PgPool,
    pinned: Option<DateTime<Utc>>,
    every: std::time::Duration,
    org: OrgId,
    segment: i64,
    version: i32,
    g: &Group,
) -> sqlx::Result<u64> {
    let mut tx = pool.begin().await?;
    sqlx::query(
        "insert into segment_scans (segment_id, org_id) values ($1, $2) on conflict do nothing",
    )
    .bind(segment)
    .bind(org)
    .execute(&mut *tx)
    .await?;
    let state: Option<(i64, bool)> = sqlx::query_as(
        "select generation,
                scanned_at is null or scanned_at < coalesce($2, now()) - interval '1 day'
         from segment_scans
         where segment_id = $1
           and (scanned_at is null
                or scanned_at <= coalesce($2, now()) - make_interval(secs => $3 / 2))
         for update skip locked",
    )
    .bind(segment)
    .bind(pinned)
    .bind(every.as_secs_f64())
    .fetch_optional(&mut *tx)
    .await?;
    // Another replica is scanning it, or just did.
    let Some((generation, silent)) = state else {
        return Ok(0);
    };
    let generation = generation + 1;
    let at = clock(&mut tx, org, pinned).await?;
    let mut room = roomy(&mut tx).await?;
    let mut qb = QueryBuilder::new(
        "with now_in as materialized (
             select s.id from subscribers s where s.erased_at is null and s.org_id = ",
    );
    qb.push_bind(org);
    qb.push(" and ");
    push_predicate(&mut qb, org, g, &at, Place::Top);
    qb.push("), gone as (delete from segment_members m where m.segment_id = ");
    qb.push_bind(segment);
    qb.push(
        " and not exists (select 1 from now_in n where n.id = m.subscriber_id)
                     returning m.subscriber_id),
         entered as (insert into segment_members (segment_id, org_id, subscriber_id) select ",
    );
    qb.push_bind(segment);
    qb.push(", ");
    qb.push_bind(org);
    qb.push(
        ", id from now_in order by id on conflict do nothing returning subscriber_id),
         changes as (select 'segment.entered' as kind, subscriber_id from entered
                     union all select 'segment.left', subscriber_id from gone),
         reported as (select webhook_fan_out(coalesce(jsonb_agg(jsonb_build_object(
                          'org_id', ",
    );
    qb.push_bind(org);
    qb.push(", 'type', c.kind, 'key', ");
    qb.push_bind(format!("{segment}:{generation}:"));
    qb.push(" || c.subscriber_id, 'timestamp', webhook_time(coalesce(");
    qb.push_bind(pinned);
    qb.push("::timestamptz, now())), 'data', jsonb_build_object('segment_id', ");
    qb.push_bind(segment);
    qb.push(", 'version', ");
    qb.push_bind(version);
    qb.push(
        ", 'subscriber_id', c.subscriber_id)) order by c.kind, c.subscriber_id), '[]'))
                      from changes c where not ",
    );
    qb.push_bind(silent);
    qb.push(") select (select count(*) from changes where not ");
    qb.push_bind(silent);
    qb.push(")::bigint from reported");
    let changes: i64 = qb
        .build_query_scalar()
        .persistent(false)
        .fetch_one(&mut *room)
        .await?;
    room.commit().await?;
    sqlx::query(
        "update segment_scans set generation = $2, scanned_at = coalesce($3, now())
         where segment_id = $1",
    )
    .bind(segment)
    .bind(generation)
    .bind(pinned)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(u64::try_from(changes).unwrap_or(0))
}
