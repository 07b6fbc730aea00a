//! Clicks on tracked links: recorded against the delivery the link was sent in, counted per
//! link for the campaign page (people apart from scanners), forgotten with the subscriber. The
//! org's switch is one of its settings (`db::settings::click_tracking`).

use sqlx::{PgConnection, PgPool};

use crate::model::LinkClicks;

/// Records a click on `url` in delivery `job_id`. A machine's click (`scanner`), or one within
/// `scanner_seconds` of the delivery, is kept apart. `false`: no such delivery (purged, or
/// never ours): nothing recorded.
pub async fn record(
    pool: &PgPool,
    job_id: &str,
    url: &str,
    scanner: bool,
    scanner_seconds: f64,
) -> sqlx::Result<bool> {
    let n = sqlx::query(
        "insert into link_clicks (org_id, campaign_id, job_id, subscriber_id, url, scanner)
         select d.org_id, d.campaign_id, d.job_id, d.subscriber_id, $2,
                $3 or coalesce(d.finished_at > now() - make_interval(secs => $4), false)
         from deliveries d where d.job_id = $1 and d.kind = 'campaign'",
    )
    .bind(job_id)
    .bind(url)
    .bind(scanner)
    .bind(scanner_seconds)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(n == 1)
}

/// A campaign's links, most clicked first: clicks, distinct people, and scanners' clicks.
pub async fn per_link(
    conn: &mut PgConnection,
    org_id: i64,
    campaign_id: i64,
) -> sqlx::Result<Vec<LinkClicks>> {
    sqlx::query_as(
        "select url,
                count(*) filter (where not scanner) as clicks,
                count(distinct coalesce(subscriber_id::text, 'erased:' || id))
                    filter (where not scanner) as people,
                count(*) filter (where scanner) as scanners
         from link_clicks where org_id = $1 and campaign_id = $2
         group by url order by 2 desc, 1 limit 200",
    )
    .bind(org_id)
    .bind(campaign_id)
    .fetch_all(conn)
    .await
}

/// Erasure: the clicks stay counted, nobody's.
pub async fn forget(
    conn: &mut PgConnection,
    org_id: i64,
    subscribers: &[i64],
) -> sqlx::Result<u64> {
    sqlx::query(
        "update link_clicks set subscriber_id = null, job_id = null
         where org_id = $1 and subscriber_id = any($2)",
    )
    .bind(org_id)
    .bind(subscribers)
    .execute(conn)
    .await
    .map(|r| r.rows_affected())
}
