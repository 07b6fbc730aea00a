//! Bounce fixtures the SMTP listener's and the IMAP poller's tests share: the listener, an
//! org's bounce domain, a campaign whose every delivery was delivered, and the tally of what
//! was recorded.

use std::net::SocketAddr;

use app::domain::JobId;
use sqlx::PgPool;

/// The bounce listener (`--bounce-listen`) with `cfg` on a free loopback port, running until
/// the test ends.
pub(crate) async fn listener(
    pool: &PgPool,
    cfg: mailroom::feedback::listener::Config,
) -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (stop, shutdown) = mailroom::ops::shutdown::Shutdown::manual();
    // Dropped with the test's runtime; kept alive until then.
    std::mem::forget(stop);
    tokio::spawn(mailroom::feedback::listener::serve(
        l,
        pool.clone(),
        cfg,
        shutdown,
    ));
    addr
}

pub(crate) async fn set_bounce_domain(pool: &PgPool, org: i64, domain: &str) {
    let mut conn = pool.acquire().await.unwrap();
    app::db::reports::save_bounce_domain(&mut conn, org, Some(domain))
        .await
        .unwrap();
}

/// A campaign of `n` subscribers in `status` whose every delivery was delivered; returns the
/// campaign and its jobs. Seeded in bulk (10,000 rows in well under a second).
pub(crate) async fn delivered_campaign(
    pool: &PgPool,
    org: i64,
    author: i64,
    status: &str,
    n: i64,
) -> (i64, Vec<(JobId, String)>) {
    let mut conn = pool.acquire().await.unwrap();
    let cid = crate::support::helpers::draft(&mut conn, org, author, "Flood").await;
    sqlx::query(
        "update campaigns set status = $2, scheduled_for = now(), approver_id = author_id,
                approved_at = now(), approved_version = 1, self_approved = true, started_at = now()
         where id = $1",
    )
    .bind(cid)
    .bind(status)
    .execute(&mut *conn)
    .await
    .unwrap();
    let rows: Vec<(i64, String)> = sqlx::query_as(
        "with s as (
             insert into subscribers (org_id, email, email_lower, name)
             select $1, 'r' || g || '.c' || $2 || '@remote.test', 'r' || g || '.c' || $2 || '@remote.test', '' from generate_series(1, $3) g
             returning id, email_lower
         ), d as (
             insert into deliveries (job_id, org_id, kind, priority, recipient, email_lower, campaign_id,
                                     content_version, subscriber_id, status, finished_at, attempt)
             select 'campaign:' || $2 || ':' || s.id, $1, 'campaign', 2, s.email_lower, s.email_lower, $2, 1, s.id,
                    'delivered', now(), 1
             from s returning subscriber_id, recipient
         ) select subscriber_id, recipient from d order by subscriber_id",
    )
    .bind(org)
    .bind(cid)
    .bind(n)
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    sqlx::query(
        "insert into progress_slots (org_id, campaign_id, slot, delivered) values ($1, $2, 0, $3)",
    )
    .bind(org)
    .bind(cid)
    .bind(n)
    .execute(&mut *conn)
    .await
    .unwrap();
    let jobs = rows
        .into_iter()
        .map(|(sid, to)| {
            (
                JobId::Campaign {
                    campaign_id: cid,
                    subscriber_id: sid,
                },
                to,
            )
        })
        .collect();
    (cid, jobs)
}

/// (events, distinct jobs among them, verified, suppressions by hard bounce) of the org.
pub(crate) async fn tally(pool: &PgPool, org: i64) -> (i64, i64, i64, i64) {
    sqlx::query_as(
        "select count(*), count(distinct job_id), count(*) filter (where verified),
                (select count(*) from suppressions where org_id = $1 and reason = 'hard_bounce')
         from delivery_events where org_id = $1",
    )
    .bind(org)
    .fetch_one(pool)
    .await
    .unwrap()
}
