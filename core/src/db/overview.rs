use sqlx::PgPool;

use crate::model::overview::{Overview, RecentAction};

/// The Overview page of one organisation, in one round trip. Every figure is scoped by org id.
pub async fn for_org(pool: &PgPool, org_id: i64) -> sqlx::Result<Overview> {
    let mut overview: Overview = sqlx::query_as(
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
           (select count(*) from worker_heartbeats h where h.beat_at > now() - interval '30 seconds') as workers_alive,
           (select count(*) from webhook_out_endpoints w where w.org_id = o.id and not w.enabled and w.disabled_reason is not null) as webhooks_turned_off
         from orgs o where o.id = $1",
    )
    .bind(org_id)
    .fetch_one(pool)
    .await?;

    overview.recent = sqlx::query_as::<_, RecentAction>(
        "select a.action, a.object_type, u.name as actor,
                to_char(a.created_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as at
         from audit_log a
         join orgs o on o.id = a.org_id
         left join users u on u.org_id = a.org_id and u.id = a.actor_id
         where a.org_id = $1
         order by a.created_at desc limit 8",
    )
    .bind(org_id)
    .fetch_all(pool)
    .await?;

    Ok(overview)
}
