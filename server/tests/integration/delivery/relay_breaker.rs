//! The relay's circuit breaker against a relay that takes every body and hangs up without a
//! reply: the worker stops after the policy's failures in a row instead of turning the whole
//! campaign into `unknown`, pauses the campaign with the reason on its page and in the audit log,
//! probes with growing pauses, and when the relay answers again resumes the campaign and sends
//! the rest, each message once.

use std::sync::atomic::Ordering;
use std::time::Duration;

use app::domain::relay::BreakerPolicy;
use app::domain::{Backoff, Role};
use mailroom::ops::shutdown::Shutdown;
use mailroom::workers::delivery::Worker;
use sqlx::PgPool;
use testkit::{SinkOptions, SmtpSink};

use crate::support::fixtures::{campaign_deliveries, config};
use crate::support::helpers::test_db;
use crate::support::org::TestOrg;

const RECIPIENTS: i64 = 40;
const FAILURES: u32 = 3;
const CONNECTIONS: usize = 2;

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

async fn unknown(pool: &PgPool) -> i64 {
    count(
        pool,
        "select count(*) from deliveries where status = 'unknown'",
    )
    .await
}

async fn resumes(pool: &PgPool) -> i64 {
    count(
        pool,
        "select count(*) from audit_log where action = 'campaign.relay_resume'",
    )
    .await
}

/// Polls `sql` (a boolean) until it holds; the deadline only bounds a broken run.
async fn until(pool: &PgPool, sql: &str) {
    for _ in 0..3000 {
        if sqlx::query_scalar::<_, bool>(sql)
            .fetch_one(pool)
            .await
            .unwrap()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let state: Vec<(String, String, i64, Option<String>)> = sqlx::query_as(
        "select 'delivery', status, count(*), max(coalesce(last_error, smtp_reply)) from deliveries group by status
         union all select 'campaign', status, id, relay_pause_reason from campaigns
         union all select 'relay', state, failures, last_error from relay_health",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    panic!("never held: {sql}\n{state:#?}");
}

/// What failures may have cost: the ones that opened the circuit, the other connection's
/// message in flight then, and after each successful probe (the circuit closes on probation)
/// one message per connection before the first failure reopens it.
fn most_unknown(resumes: i64) -> i64 {
    FAILURES as i64 + CONNECTIONS as i64 * (1 + resumes)
}

#[tokio::test]
async fn a_relay_that_hangs_up_after_the_body_stops_the_send_pauses_the_campaign_and_resumes_it() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let emails: Vec<String> = (0..RECIPIENTS)
        .map(|i| format!("r{i}@example.org"))
        .collect();
    let (cid, _) = campaign_deliveries(&pool, org, acme.owner().id.0, "sending", &emails).await;
    let options = SinkOptions::default();
    options.drop_after_body.store(true, Ordering::SeqCst);
    let sink = SmtpSink::start_with(options.clone());
    let mut cfg = config(&sink);
    cfg.connections = CONNECTIONS;
    cfg.batch = 10;
    // Given-back messages come back quickly, and never run out of attempts here.
    cfg.backoff = Backoff {
        base: Duration::from_millis(50),
        cap: Duration::from_millis(200),
        max_attempts: 1000,
    };
    cfg.breaker = BreakerPolicy {
        failures: FAILURES,
        first_pause: Duration::from_millis(100),
        max_pause: Duration::from_millis(800),
        pause_campaigns_after: Duration::ZERO,
    };
    let (stop, shutdown) = Shutdown::manual();
    let worker = tokio::spawn(Worker::new(pool.clone(), cfg, "breaker").run(shutdown));

    // The relay drops every body: the circuit opens and the campaign pauses, saying why.
    // (Evidence that stays: the pause's audit row and the relay's row. A probe connects fine,
    // so the circuit closes on probation and reopens at the next failure meanwhile.)
    until(
        &pool,
        &format!(
            "select exists (select 1 from audit_log where action = 'campaign.relay_pause'
                            and object_id = '{cid}')
                and exists (select 1 from relay_health)"
        ),
    )
    .await;
    let lost = unknown(&pool).await;
    assert!(lost >= FAILURES as i64, "it opened on failures: {lost}");
    let bound = most_unknown(resumes(&pool).await);
    assert!(lost <= bound, "{lost} unknown, at most {bound} expected");
    assert_eq!(sink.accepted_count(), 0, "nothing was taken with a reply");
    let mut conn = pool.acquire().await.unwrap();
    let page = app::db::campaign::live::snapshot(
        &mut conn,
        app::domain::OrgId(org),
        app::domain::CampaignId(cid),
    )
    .await
    .unwrap()
    .unwrap();
    // The reason as the page showed it when it paused (a probe may have resumed it since).
    let reason: String = sqlx::query_scalar(
        "select after->>'reason' from audit_log where action = 'campaign.relay_pause'
         and object_id = $1::text order by id limit 1",
    )
    .bind(cid)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        reason.contains("the mail relay failed") && reason.contains("without confirming"),
        "{reason}"
    );
    if page.status.as_str() == "paused" {
        let shown = page.pause_reason.unwrap_or_default();
        assert!(shown.contains("the mail relay failed"), "{shown}");
    }
    let why: String = sqlx::query_scalar("select last_error from relay_health")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(why, "no_reply_after_body");

    // The relay recovers: a probe succeeds, the campaign resumes and the rest is sent.
    options.drop_after_body.store(false, Ordering::SeqCst);
    until(
        &pool,
        &format!(
            "select not exists (select 1 from deliveries where status in ('queued', 'sending'))
                and exists (select 1 from relay_health where state = 'healthy')
                and exists (select 1 from campaigns where id = {cid} and status = 'sending')"
        ),
    )
    .await;
    let _ = stop.send(true);
    worker.await.unwrap();

    let (delivered, lost_total, other): (i64, i64, i64) = sqlx::query_as(
        "select count(*) filter (where status = 'delivered'), count(*) filter (where status = 'unknown'),
                count(*) filter (where status not in ('delivered', 'unknown'))
         from deliveries where campaign_id = $1",
    )
    .bind(cid)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(other, 0, "nothing failed or was lost");
    assert_eq!(delivered + lost_total, RECIPIENTS);
    let bound = most_unknown(resumes(&pool).await);
    assert!(lost_total <= bound, "{lost_total} unknown, at most {bound}");
    assert_eq!(sink.accepted_count() as i64, delivered);
    assert!(
        sink.ids().values().all(|n| *n == 1),
        "every message arrived once"
    );
    let (status, relay_paused): (String, Option<String>) =
        sqlx::query_as("select status, relay_pause_reason from campaigns where id = $1")
            .bind(cid)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        (status.as_str(), relay_paused),
        ("sending", None),
        "resumed by the probe"
    );
    assert!(resumes(&pool).await >= 1);
    let state: String = sqlx::query_scalar("select state from relay_health")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(state, "healthy");
}

#[tokio::test]
async fn a_worker_started_after_an_outage_resumes_what_the_breaker_left_paused() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let emails: Vec<String> = (0..3).map(|i| format!("r{i}@example.org")).collect();
    let (cid, _) = campaign_deliveries(&pool, org, acme.owner().id.0, "sending", &emails).await;
    let sink = SmtpSink::start();
    // What a process killed mid-outage leaves: the campaign paused by its breaker, the relay
    // shown failing.
    let paused = app::db::relay_health::pause_campaigns(&pool, "Paused by Mailroom: test")
        .await
        .unwrap();
    assert_eq!(
        paused,
        vec![app::db::campaign::states::OrgCampaign {
            org_id: app::domain::OrgId(org),
            id: app::domain::CampaignId(cid)
        }]
    );
    let relay = format!("{}:{}", sink.addr.ip(), sink.addr.port());
    app::db::relay_health::opened(
        &pool,
        &relay,
        10,
        3,
        60.0,
        app::domain::relay::RelayFailure::Unreachable,
    )
    .await
    .unwrap();
    let (stop, shutdown) = Shutdown::manual();
    let worker = tokio::spawn(Worker::new(pool.clone(), config(&sink), "fresh").run(shutdown));
    until(
        &pool,
        &format!(
            "select exists (select 1 from campaigns where id = {cid} and status = 'sending'
                            and relay_pause_reason is null)
                and exists (select 1 from relay_health where state = 'healthy')
                and 3 = (select count(*) from deliveries where status = 'delivered')"
        ),
    )
    .await;
    let _ = stop.send(true);
    worker.await.unwrap();
    assert_eq!(resumes(&pool).await, 1, "audited once");
}
