//! Clicks on tracked links and fetches of the open-tracking pixel: recorded against the
//! delivery they were sent in, counted for the campaign page (people apart from machines),
//! forgotten with the subscriber. The org's switches are its settings
//! (`db::settings::click_tracking`, `db::settings::open_tracking`).

use sqlx::{PgConnection, PgPool};

use crate::model::{LinkClicks, Opens};

/// The select of a click's or an open's row from delivery `$1` (campaign or automation mail,
/// the bulk mail that is tracked): its org, campaign or automation, job id and subscriber (nobody's once the subscriber was erased: a message read
/// after the erasure still counts, for no one), then `scanner` — the request's own say (`$2`)
/// or within `$3` seconds of delivery — then `extra` columns.
fn from_delivery(extra: &str) -> String {
    let erased = crate::domain::ERASED_PREFIX;
    format!(
        "select d.org_id, d.campaign_id, d.automation_id,
                case when starts_with(d.email_lower, '{erased}') then null else d.job_id end,
                case when starts_with(d.email_lower, '{erased}') then null else d.subscriber_id end,
                $2 or coalesce(d.finished_at > now() - make_interval(secs => $3), false){extra}
         from deliveries d where d.job_id = $1 and d.kind in ('campaign', 'automation')"
    )
}

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
    let n = sqlx::query(&format!(
        "insert into link_clicks (org_id, campaign_id, automation_id, job_id, subscriber_id, scanner, url) {}",
        from_delivery(", $4")
    ))
    .bind(job_id)
    .bind(scanner)
    .bind(scanner_seconds)
    .bind(url)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(n == 1)
}

/// Records a fetch of delivery `job_id`'s pixel, machines' apart as for [`record`]. `false`:
/// no such campaign or automation delivery, nothing recorded.
pub async fn record_open(
    pool: &PgPool,
    job_id: &str,
    scanner: bool,
    scanner_seconds: f64,
) -> sqlx::Result<bool> {
    let n = sqlx::query(&format!(
        "insert into message_opens (org_id, campaign_id, automation_id, job_id, subscriber_id, scanner) {}",
        from_delivery("")
    ))
    .bind(job_id)
    .bind(scanner)
    .bind(scanner_seconds)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(n == 1)
}

/// A campaign's opens: people's fetches of the pixel, distinct people, and machines'.
pub async fn opens(conn: &mut PgConnection, org_id: i64, campaign_id: i64) -> sqlx::Result<Opens> {
    sqlx::query_as(
        "select count(*) filter (where not scanner) as opens,
                count(distinct coalesce(subscriber_id::text, 'erased:' || id))
                    filter (where not scanner) as people,
                count(*) filter (where scanner) as machines
         from message_opens where org_id = $1 and campaign_id = $2",
    )
    .bind(org_id)
    .bind(campaign_id)
    .fetch_one(conn)
    .await
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

/// Erasure: the clicks and opens stay counted, nobody's. A link personalised with the
/// address (`?e={{ email }}`, as written or percent-encoded) keeps only what does not name
/// it: its query and fragment go, and if its path names the address too, all but its origin.
pub async fn forget(
    conn: &mut PgConnection,
    org_id: i64,
    subscribers: &[i64],
    email_lower: &str,
) -> sqlx::Result<u64> {
    sqlx::query_scalar::<_, i64>(
        "with a as (select $3::text as raw, replace($3::text, '@', '%40') as encoded),
         c as (update link_clicks set subscriber_id = null, job_id = null,
                   url = case
                       when strpos(lower(url), a.raw) = 0 and strpos(lower(url), a.encoded) = 0
                           then url
                       when strpos(lower(regexp_replace(url, '[?#].*$', '')), a.raw) = 0
                            and strpos(lower(regexp_replace(url, '[?#].*$', '')), a.encoded) = 0
                           then regexp_replace(url, '[?#].*$', '')
                       else coalesce(substring(url from '^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*'), '')
                   end
               from a
               where org_id = $1 and subscriber_id = any($2) returning 1),
         o as (update message_opens set subscriber_id = null, job_id = null
               where org_id = $1 and subscriber_id = any($2) returning 1)
         select (select count(*) from c) + (select count(*) from o)",
    )
    .bind(org_id)
    .bind(subscribers)
    .bind(email_lower)
    .fetch_one(conn)
    .await
    .map(i64::unsigned_abs)
}
