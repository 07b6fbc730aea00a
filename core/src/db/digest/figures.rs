//! The figures a digest reports for an org's period: campaigns sent with their outcomes,
//! subscribers gained, addresses suppressed and why, deliveries needing attention, and the
//! bounces and complaints relays reported. Read for a
//! whole chunk of orgs in one statement.

use chrono::{DateTime, NaiveDateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::types::Json;
use sqlx::PgConnection;

/// The most campaigns one digest lists by name; the rest are counted.
pub const CAMPAIGNS_LISTED: i64 = 20;

/// One org's period to report on.
#[derive(Debug, Clone, Copy)]
pub struct Period {
    /// Passed through to the result (the digest send's id), so figures match their digest.
    pub key: i64,
    pub org_id: i64,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CampaignFigures {
    pub name: String,
    pub status: String,
    pub delivered: i64,
    pub failed: i64,
    pub unknown: i64,
    pub suppressed: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuppressedFigures {
    pub reason: String,
    pub count: i64,
}

#[derive(sqlx::FromRow, Debug, Clone)]
pub struct Figures {
    pub key: i64,
    pub org_id: i64,
    pub org_name: String,
    pub timezone: String,
    /// The period's bounds as the org's wall clock shows them.
    pub local_start: NaiveDateTime,
    pub local_end: NaiveDateTime,
    pub campaigns_total: i64,
    pub campaigns: Json<Vec<CampaignFigures>>,
    pub subscribers_gained: i64,
    pub suppressed: Json<Vec<SuppressedFigures>>,
    /// Deliveries that finished `unknown` (may or may not have arrived) in the period.
    pub unknown: i64,
    /// Deliveries that finished `failed` in the period.
    pub failed: i64,
    /// Verified relay reports received in the period, by kind (`hard_bounce`, `complaint`, …).
    pub reported: Json<Vec<ReportedFigures>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportedFigures {
    pub kind: String,
    pub count: i64,
}

/// The figures of every period, in one statement (a chunk of a tick is ~1,000 orgs).
pub async fn figures(conn: &mut PgConnection, periods: &[Period]) -> sqlx::Result<Vec<Figures>> {
    let keys: Vec<i64> = periods.iter().map(|p| p.key).collect();
    let orgs: Vec<i64> = periods.iter().map(|p| p.org_id).collect();
    let starts: Vec<DateTime<Utc>> = periods.iter().map(|p| p.start).collect();
    let ends: Vec<DateTime<Utc>> = periods.iter().map(|p| p.end).collect();
    sqlx::query_as(
        "with p as (select * from unnest($1::bigint[], $2::timestamptz[], $3::timestamptz[], $5::bigint[]) as p(org_id, s, e, key))
         select p.key, p.org_id, o.name as org_name, o.timezone,
                (p.s at time zone o.timezone) as local_start,
                (p.e at time zone o.timezone) as local_end,
                (select count(*) from campaigns c
                  where c.org_id = p.org_id and c.started_at < p.e
                    and (c.finished_at is null or c.finished_at >= p.s)) as campaigns_total,
                coalesce((
                    select jsonb_agg(jsonb_build_object('name', x.name, 'status', x.status,
                               'delivered', x.delivered, 'failed', x.failed, 'unknown', x.unknown,
                               'suppressed', x.suppressed) order by x.started_at, x.id)
                    from (select c.id, c.name, c.status, c.started_at,
                                 coalesce(sum(ps.delivered), 0) as delivered, coalesce(sum(ps.failed), 0) as failed,
                                 coalesce(sum(ps.unknown), 0) as unknown, coalesce(sum(ps.suppressed), 0) as suppressed
                          from campaigns c left join progress_slots ps on ps.campaign_id = c.id
                          where c.org_id = p.org_id and c.started_at < p.e
                            and (c.finished_at is null or c.finished_at >= p.s)
                          group by c.id
                          order by c.started_at, c.id
                          limit $4) x), '[]') as campaigns,
                (select count(*) from subscribers s
                  where s.org_id = p.org_id and s.created_at >= p.s and s.created_at < p.e) as subscribers_gained,
                coalesce((
                    select jsonb_agg(jsonb_build_object('reason', r.reason, 'count', r.n) order by r.reason)
                    from (select reason, count(*) as n from suppressions s
                          where s.org_id = p.org_id and s.created_at >= p.s and s.created_at < p.e
                          group by reason) r), '[]') as suppressed,
                (select count(*) from deliveries d
                  where d.org_id = p.org_id and d.status = 'unknown'
                    and d.finished_at >= p.s and d.finished_at < p.e) as unknown,
                (select count(*) from deliveries d
                  where d.org_id = p.org_id and d.status = 'failed'
                    and d.finished_at >= p.s and d.finished_at < p.e) as failed,
                coalesce((
                    select jsonb_agg(jsonb_build_object('kind', r.kind, 'count', r.n) order by r.kind)
                    from (select kind, count(*) as n from delivery_events e
                          where e.org_id = p.org_id and e.verified
                            and e.received_at >= p.s and e.received_at < p.e
                          group by kind) r), '[]') as reported
         from p join orgs o on o.id = p.org_id",
    )
    .bind(&orgs)
    .bind(&starts)
    .bind(&ends)
    .bind(CAMPAIGNS_LISTED)
    .bind(&keys)
    .fetch_all(conn)
    .await
}
