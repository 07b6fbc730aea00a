use sqlx::PgPool;

use crate::api::overview::{Overview, RecentAction};

#[derive(sqlx::FromRow)]
struct Counts {
    org_name: String,
    timezone: String,
    digest_weekday: i16,
    digest_hour: i16,
    subscribers: i64,
    confirmed: i64,
    lists: i64,
    suppressions: i64,
    campaigns_draft: i64,
    campaigns_in_review: i64,
    campaigns_active: i64,
    campaigns_sent: i64,
    delivered_7d: i64,
    failed_7d: i64,
    unknown_open: i64,
    queued_now: i64,
    last_digest: Option<String>,
    workers_alive: i64,
}

/// The Overview page of one organisation, in one round trip. Every figure is scoped by org id.
pub async fn for_org(pool: &PgPool, org_id: i64) -> sqlx::Result<Overview> {
    let c: Counts = sqlx::query_as(
        "select o.name as org_name, o.timezone, o.digest_weekday, o.digest_hour,
           (select count(*) from subscribers s where s.org_id = o.id and s.erased_at is null) as subscribers,
           (select count(*) from subscribers s where s.org_id = o.id and s.status = 'confirmed') as confirmed,
           (select count(*) from lists l where l.org_id = o.id) as lists,
           (select count(*) from suppressions x where x.org_id = o.id) as suppressions,
           (select count(*) from campaigns c where c.org_id = o.id and c.deleted_at is null and c.status = 'draft') as campaigns_draft,
           (select count(*) from campaigns c where c.org_id = o.id and c.status in ('submitted', 'approved')) as campaigns_in_review,
           (select count(*) from campaigns c where c.org_id = o.id and c.status in ('sending', 'paused')) as campaigns_active,
           (select count(*) from campaigns c where c.org_id = o.id and c.deleted_at is null and c.status = 'sent') as campaigns_sent,
           (select count(*) from deliveries d where d.org_id = o.id and d.status = 'delivered' and d.finished_at > now() - interval '7 days') as delivered_7d,
           (select count(*) from deliveries d where d.org_id = o.id and d.status = 'failed' and d.finished_at > now() - interval '7 days') as failed_7d,
           (select count(*) from deliveries d where d.org_id = o.id and d.status = 'unknown') as unknown_open,
           (select count(*) from deliveries d where d.org_id = o.id and d.status in ('queued', 'sending')) as queued_now,
           (select max(week_key) filter (where kind = 'scheduled') from digest_sends g where g.org_id = o.id) as last_digest,
           (select count(*) from worker_heartbeats h where h.beat_at > now() - interval '30 seconds') as workers_alive
         from orgs o where o.id = $1",
    )
    .bind(org_id)
    .fetch_one(pool)
    .await?;

    let recent: Vec<(String, String, Option<String>, String)> = sqlx::query_as(
        "select a.action, a.object_type, u.name, to_char(a.created_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI')
         from audit_log a
         join orgs o on o.id = a.org_id
         left join users u on u.org_id = a.org_id and u.id = a.actor_id
         where a.org_id = $1
         order by a.created_at desc limit 8",
    )
    .bind(org_id)
    .fetch_all(pool)
    .await?;

    Ok(Overview {
        org_name: c.org_name,
        timezone: c.timezone,
        digest_weekday: c.digest_weekday,
        digest_hour: c.digest_hour,
        subscribers: c.subscribers,
        confirmed: c.confirmed,
        lists: c.lists,
        suppressions: c.suppressions,
        campaigns_draft: c.campaigns_draft,
        campaigns_in_review: c.campaigns_in_review,
        campaigns_active: c.campaigns_active,
        campaigns_sent: c.campaigns_sent,
        delivered_7d: c.delivered_7d,
        failed_7d: c.failed_7d,
        unknown_open: c.unknown_open,
        queued_now: c.queued_now,
        last_digest: c.last_digest,
        workers_alive: c.workers_alive,
        recent: recent
            .into_iter()
            .map(|(action, object_type, actor, at)| RecentAction {
                action,
                object_type,
                actor,
                at,
            })
            .collect(),
    })
}
