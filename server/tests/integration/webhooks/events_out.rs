//! Events out: each committed change an endpoint subscribed to becomes one row in the change's
//! own transaction, and reaches the endpoint at least once under one `webhook-id`, signed so
//! that the reference `standardwebhooks` library accepts it, through failures of every kind.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use app::db::webhooks_out::{self, Limits};
use app::domain::{Backoff, Role, WebhookEventType};
use mailroom::ops::shutdown::Shutdown;
use mailroom::workers::webhooks::{run, Config};
use sqlx::PgPool;

use super::receiver::{verify_independently, Act, Receiver};
use crate::support::helpers::{enqueue_test_mail_to, test_db};
use crate::support::org::TestOrg;

fn config() -> Config {
    Config {
        allow_private: true,
        timeout: Duration::from_millis(800),
        concurrency: 8,
        poll: Duration::from_millis(50),
        limits: Limits::default(),
        backoff: Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_millis(400),
            max_attempts: i32::MAX,
        },
    }
}

/// A webhook sender running in this process until the returned sender is dropped or set.
fn start(
    pool: &PgPool,
    cfg: Config,
    name: &str,
) -> (
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
) {
    let (stop, shutdown) = Shutdown::manual();
    let task = tokio::spawn(run(pool.clone(), cfg, name.to_owned(), shutdown));
    (stop, task)
}

async fn endpoint(
    pool: &PgPool,
    org: &TestOrg,
    url: &str,
    types: &[WebhookEventType],
) -> (i64, String) {
    let secret = app::webhook::new_secret();
    let mut conn = pool.acquire().await.unwrap();
    let id = webhooks_out::create(
        &mut conn,
        org.id.0,
        Some(org.owner().id.0),
        url,
        types,
        &secret,
        app::domain::webhook::WEBHOOK_MAX_IN_FLIGHT,
    )
    .await
    .unwrap();
    (id, secret)
}

/// `n` deliveries of the org, queued.
async fn deliveries(pool: &PgPool, org: i64, marker: &str, n: usize) -> Vec<String> {
    let to: Vec<String> = (0..n)
        .map(|i| format!("{marker}-{i}@example.org"))
        .collect();
    enqueue_test_mail_to(pool, org, marker, &to).await
}

/// The change the delivery engine makes when an outcome is known.
async fn settle(pool: &PgPool, jobs: &[String], status: &str) {
    sqlx::query(
        "update deliveries set status = $2, smtp_reply = '250 2.0.0 queued as X', finished_at = now()
         where job_id = any($1)",
    )
    .bind(jobs)
    .bind(status)
    .execute(pool)
    .await
    .unwrap();
}

async fn counts(pool: &PgPool, endpoint: i64) -> BTreeMap<String, i64> {
    sqlx::query_as::<_, (String, i64)>(
        "select status, count(*) from webhook_out_messages where endpoint_id = $1 group by status",
    )
    .bind(endpoint)
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .collect()
}

/// Every field of the body is in the schema the OpenAPI document publishes for its type.
pub fn assert_documented(body: &serde_json::Value) {
    let doc = serde_json::to_value(mailroom::rest::openapi()).unwrap();
    let t: WebhookEventType = body["type"].as_str().unwrap().parse().unwrap();
    assert!(
        doc["webhooks"][t.as_str()]["post"]["requestBody"].is_object(),
        "{t} is in the document's webhooks"
    );
    let schemas = &doc["components"]["schemas"];
    let resolve = |s: &serde_json::Value| -> serde_json::Value {
        match s["$ref"].as_str() {
            Some(r) => schemas[r.trim_start_matches("#/components/schemas/")].clone(),
            None => s.clone(),
        }
    };
    let event = &schemas[mailroom::rest::webhooks_doc::schema_of(t)];
    for key in body.as_object().unwrap().keys() {
        assert!(
            event["properties"][key].is_object(),
            "{t}: {key} is documented"
        );
    }
    let data = resolve(&event["properties"]["data"]);
    for key in body["data"].as_object().unwrap().keys() {
        assert!(
            data["properties"][key].is_object(),
            "{t}: data.{key} is documented: {data}"
        );
    }
}

async fn wait_for(what: &str, secs: u64, mut done: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while !done().await {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The receiver answers 503, leaves requests hanging past the timeout, hangs up, answers slowly
/// and asks for a pause with 429, for its first thirty requests; then it recovers. Every event
/// arrives, every attempt of one event has its one id and its one body, and the reference
/// library verifies every signature (and refuses a body changed by one byte).
#[tokio::test]
async fn a_flaky_receiver_gets_every_event_under_one_id_verified_by_the_reference_library() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let receiver = Receiver::start(|n, _| match n {
        _ if n >= 30 => Act::ok(),
        _ => match n % 6 {
            0 => Act::status(503),
            1 => Act::Hang(Duration::from_secs(2)),
            2 => Act::HangUp,
            3 => Act::Answer(200, Vec::new(), Duration::from_millis(300)),
            4 => Act::Answer(429, vec![("retry-after", "1".into())], Duration::ZERO),
            _ => Act::status(500),
        },
    })
    .await;
    let (id, secret) = endpoint(
        &pool,
        &acme,
        &receiver.url("/hooks/mailroom"),
        &[
            WebhookEventType::MessageDelivered,
            WebhookEventType::MessageFailed,
            WebhookEventType::MessageUnknown,
        ],
    )
    .await;
    let jobs = deliveries(&pool, acme.id.0, "flaky", 24).await;
    settle(&pool, &jobs[..12], "delivered").await;
    settle(&pool, &jobs[12..18], "failed").await;
    settle(&pool, &jobs[18..], "unknown").await;
    let (stop, task) = start(&pool, config(), "flaky-worker");
    wait_for("every event delivered", 60, async || {
        counts(&pool, id).await.get("delivered") == Some(&24)
    })
    .await;
    stop.send(true).unwrap();
    task.await.unwrap();

    let got = receiver.requests();
    assert!(
        got.len() > 24,
        "failures were retried: {} requests",
        got.len()
    );
    let mut by_id: BTreeMap<&str, Vec<&super::receiver::Got>> = BTreeMap::new();
    for g in &got {
        by_id.entry(g.id()).or_default().push(g);
    }
    assert_eq!(by_id.len(), 24, "one id per event");
    let mut reported = BTreeSet::new();
    for (wid, attempts) in &by_id {
        assert!(wid.starts_with("msg_"), "{wid}");
        assert!(
            attempts.iter().all(|a| a.body == attempts[0].body),
            "{wid}: one body on every attempt"
        );
        assert!(
            attempts
                .iter()
                .any(|a| a.answered.is_some_and(|s| (200..300).contains(&s))),
            "{wid} was answered 2xx"
        );
        let body: serde_json::Value = serde_json::from_str(&attempts[0].body).unwrap();
        assert_documented(&body);
        let job = body["data"]["job_id"].as_str().unwrap().to_owned();
        let status: String = sqlx::query_scalar("select status from deliveries where job_id = $1")
            .bind(&job)
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(body["type"], format!("message.{status}"), "{body}");
        assert!(reported.insert(job));
    }
    assert_eq!(reported.len(), 24, "each delivery reported");
    // A 429's Retry-After (1 s, where the backoff would wait at most 0.4 s) is honoured: that
    // event's next attempt came no sooner.
    let mut honoured = 0;
    for attempts in by_id.values() {
        for w in attempts.windows(2) {
            if w[0].answered == Some(429) {
                assert!(
                    w[1].at >= w[0].at + Duration::from_secs(1),
                    "{}: retried {:?} after a Retry-After of 1 s",
                    w[0].id(),
                    w[1].at - w[0].at
                );
                honoured += 1;
            }
        }
    }
    assert!(honoured > 0, "some events were answered 429 and retried");
    assert!(got.iter().all(|g| g.path == "/hooks/mailroom"));

    let verdicts = verify_independently(&secret, &got);
    for (g, v) in got.iter().zip(&verdicts) {
        assert_eq!(
            v.as_deref(),
            Ok(g.id()),
            "the reference library accepts {}",
            g.id()
        );
    }
    let mut forged = got[0].clone();
    forged.body = forged.body.replacen("message.", "message!", 1);
    let mut other_secret = got[1].clone();
    other_secret.headers.insert(
        "webhook-signature".into(),
        app::webhook::signature(&[&app::webhook::new_secret()], other_secret.id(), 1, b"x"),
    );
    for v in verify_independently(&secret, &[forged, other_secret]) {
        assert!(
            v.is_err(),
            "a changed body or another secret is refused: {v:?}"
        );
    }

    // The attempts are on record for the endpoint's page, newest first.
    let mut conn = pool.acquire().await.unwrap();
    let recorded = webhooks_out::attempts(&mut conn, acme.id.0, id, 1000)
        .await
        .unwrap();
    assert!(recorded.len() >= 24);
    assert!(recorded.iter().any(|a| a.http_status == Some(503)));
    assert!(recorded
        .iter()
        .any(|a| a.http_status.is_none() && a.error.is_some()));
}

/// The event row is part of the change's transaction: rolled back with it, written once however
/// often the same state is written, for enabled endpoints that asked for its type only.
#[tokio::test]
async fn an_event_commits_with_its_change_once_and_only_for_endpoints_that_asked() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let other = TestOrg::with_roles(&pool, "other", &[Role::Owner]).await;
    let (all, _) = endpoint(
        &pool,
        &acme,
        "https://hooks.example.com/all",
        &[
            WebhookEventType::MessageDelivered,
            WebhookEventType::MessageBounced,
        ],
    )
    .await;
    let (failures, _) = endpoint(
        &pool,
        &acme,
        "https://hooks.example.com/failures",
        &[WebhookEventType::MessageFailed],
    )
    .await;
    let (off, _) = endpoint(
        &pool,
        &acme,
        "https://hooks.example.com/off",
        &[WebhookEventType::MessageDelivered],
    )
    .await;
    let mut conn = pool.acquire().await.unwrap();
    webhooks_out::set_enabled(&mut conn, acme.id.0, off, false)
        .await
        .unwrap();
    let (theirs, _) = endpoint(
        &pool,
        &other,
        "https://hooks.example.com/theirs",
        &[WebhookEventType::MessageDelivered],
    )
    .await;

    let jobs = deliveries(&pool, acme.id.0, "once", 3).await;
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("update deliveries set status = 'delivered' where job_id = $1")
        .bind(&jobs[0])
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(
        counts(&pool, all).await.is_empty(),
        "rolled back with the change"
    );

    settle(&pool, &jobs[..1], "delivered").await;
    settle(&pool, &jobs[..1], "delivered").await;
    settle(&pool, &jobs[1..2], "failed").await;
    assert_eq!(
        counts(&pool, all).await.get("pending"),
        Some(&1),
        "the same state twice is one event"
    );
    assert_eq!(counts(&pool, failures).await.get("pending"), Some(&1));
    assert!(
        counts(&pool, off).await.is_empty(),
        "a disabled endpoint gets nothing"
    );
    assert!(
        counts(&pool, theirs).await.is_empty(),
        "another org's endpoint gets nothing"
    );

    // Retried after `unknown`, then delivered: a new attempt is a new event.
    settle(&pool, &jobs[2..], "unknown").await;
    sqlx::query("update deliveries set status = 'queued', attempt = attempt + 1 where job_id = $1")
        .bind(&jobs[2])
        .execute(&pool)
        .await
        .unwrap();
    settle(&pool, &jobs[2..], "delivered").await;
    assert_eq!(counts(&pool, all).await.get("pending"), Some(&2));

    // A relay's bounce report about a delivery.
    let report = app::domain::FeedbackReport {
        id: "bounce-1".into(),
        kind: app::domain::EventKind::HardBounce,
        recipient: Some(app::domain::EmailAddress::parse("once-0@example.org").unwrap()),
        message_id: None,
        relay_id: None,
        envelope_from: None,
        status: Some("5.1.1".into()),
        diagnostic: Some("no such user".into()),
        occurred_at: None,
    };
    let cx = app::feedback::Intake {
        org_id: acme.id.0,
        source: app::domain::EventSource::Generic,
        policy: app::domain::BouncePolicy::default(),
        verp_key: None,
        signed: true,
    };
    for _ in 0..3 {
        let mut tx = pool.begin().await.unwrap();
        app::feedback::record(&mut tx, &cx, &report).await.unwrap();
        tx.commit().await.unwrap();
    }
    let bounced: Vec<serde_json::Value> = sqlx::query_scalar(
        "select payload from webhook_out_messages where endpoint_id = $1 and event_type = 'message.bounced'",
    )
    .bind(all)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(bounced.len(), 1, "one report, one event: {bounced:?}");
    assert_documented(&bounced[0]);
    assert_eq!(bounced[0]["data"]["bounce"], "hard");
    assert_eq!(bounced[0]["data"]["recipient"], "once-0@example.org");
    let effect: String = sqlx::query_scalar("select effect from delivery_events where org_id = $1")
        .bind(acme.id.0)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        bounced[0]["data"]["suppressed"],
        effect == "suppressed",
        "{effect}"
    );
    assert_eq!(
        bounced[0]["data"]["job_id"],
        jobs[0].as_str(),
        "matched to its delivery"
    );

    // A complaint, and a campaign paused, each reported once, as documented.
    let (told, _) = endpoint(
        &pool,
        &acme,
        "https://hooks.example.com/told",
        &[
            WebhookEventType::MessageComplained,
            WebhookEventType::CampaignPaused,
        ],
    )
    .await;
    let complaint = app::domain::FeedbackReport {
        id: "complaint-1".into(),
        kind: app::domain::EventKind::Complaint,
        recipient: Some(app::domain::EmailAddress::parse("once-2@example.org").unwrap()),
        status: None,
        diagnostic: None,
        ..report
    };
    for _ in 0..3 {
        let mut tx = pool.begin().await.unwrap();
        app::feedback::record(&mut tx, &cx, &complaint)
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    let (campaign, _) = crate::support::fixtures::campaign_deliveries(
        &pool,
        acme.id.0,
        acme.owner().id.0,
        "sending",
        &["paused-0@example.org".to_owned()],
    )
    .await;
    let mut c = pool.acquire().await.unwrap();
    app::db::campaign::states::change(
        &mut c,
        acme.id,
        app::domain::CampaignId(campaign),
        app::domain::Transition::Pause,
    )
    .await
    .unwrap();
    let told: Vec<serde_json::Value> = sqlx::query_scalar(
        "select payload from webhook_out_messages where endpoint_id = $1 order by event_type",
    )
    .bind(told)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(told.len(), 2, "{told:?}");
    for e in &told {
        assert_documented(e);
    }
    assert_eq!(told[0]["type"], "campaign.paused");
    assert_eq!(told[0]["data"]["campaign_id"], campaign);
    assert_eq!(told[1]["type"], "message.complained");
    assert_eq!(told[1]["data"]["recipient"], "once-2@example.org");
    assert_eq!(told[1]["data"]["job_id"], jobs[2].as_str());
}

/// Without the operator's flag, neither an address literal nor a name that resolves to
/// loopback is called; the attempt says why.
#[tokio::test]
async fn private_addresses_are_never_called_without_the_operators_flag() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let receiver = Receiver::start(|_, _| Act::ok()).await;
    let port = receiver.addr.port();
    let (literal, _) = endpoint(
        &pool,
        &acme,
        &format!("http://127.0.0.1:{port}/a"),
        &[WebhookEventType::MessageDelivered],
    )
    .await;
    let (named, _) = endpoint(
        &pool,
        &acme,
        &format!("http://localhost:{port}/b"),
        &[WebhookEventType::MessageDelivered],
    )
    .await;
    let jobs = deliveries(&pool, acme.id.0, "private", 2).await;
    settle(&pool, &jobs, "delivered").await;
    let (stop, task) = start(
        &pool,
        Config {
            allow_private: false,
            ..config()
        },
        "guarded",
    );
    let mut conn = pool.acquire().await.unwrap();
    wait_for("attempts at both endpoints", 30, async || {
        !webhooks_out::attempts(&mut conn, acme.id.0, literal, 10)
            .await
            .unwrap()
            .is_empty()
            && !webhooks_out::attempts(&mut conn, acme.id.0, named, 10)
                .await
                .unwrap()
                .is_empty()
    })
    .await;
    stop.send(true).unwrap();
    task.await.unwrap();
    assert!(
        receiver.requests().is_empty(),
        "nothing reached the receiver"
    );
    let a = webhooks_out::attempts(&mut conn, acme.id.0, literal, 10)
        .await
        .unwrap();
    assert!(
        a[0].error
            .as_deref()
            .unwrap_or("")
            .contains("not a public address"),
        "{a:?}"
    );
    assert_eq!(
        counts(&pool, literal).await.get("failed"),
        Some(&2),
        "a literal never changes: failed at once"
    );
    let b = webhooks_out::attempts(&mut conn, acme.id.0, named, 10)
        .await
        .unwrap();
    assert!(
        b[0].error.as_deref().unwrap_or("").contains("not public"),
        "{b:?}"
    );
}

/// Org A's endpoint takes seconds to answer; org B's answers at once. With A's events queued
/// first, every one of B's is delivered before A's first answer: A holds only its own share.
#[tokio::test]
async fn a_slow_endpoint_holds_only_its_own_share() {
    let pool = test_db().await;
    let a = TestOrg::with_roles(&pool, "slowco", &[Role::Owner]).await;
    let b = TestOrg::with_roles(&pool, "fastco", &[Role::Owner]).await;
    let slow =
        Receiver::start(|_, _| Act::Answer(200, Vec::new(), Duration::from_millis(1500))).await;
    let fast = Receiver::start(|_, _| Act::ok()).await;
    // A's owner allows 4 requests at once.
    let ea = {
        let mut conn = pool.acquire().await.unwrap();
        webhooks_out::create(
            &mut conn,
            a.id.0,
            None,
            &slow.url("/a"),
            &[WebhookEventType::MessageDelivered],
            &app::webhook::new_secret(),
            4,
        )
        .await
        .unwrap()
    };
    let (eb, _) = endpoint(
        &pool,
        &b,
        &fast.url("/b"),
        &[WebhookEventType::MessageDelivered],
    )
    .await;
    let ja = deliveries(&pool, a.id.0, "slow", 12).await;
    settle(&pool, &ja, "delivered").await;
    let jb = deliveries(&pool, b.id.0, "fast", 12).await;
    settle(&pool, &jb, "delivered").await;
    let cfg = Config {
        timeout: Duration::from_secs(5),
        ..config()
    };
    let (stop, task) = start(&pool, cfg, "shared");
    wait_for("both endpoints served", 60, async || {
        counts(&pool, ea).await.get("delivered") == Some(&12)
            && counts(&pool, eb).await.get("delivered") == Some(&12)
    })
    .await;
    stop.send(true).unwrap();
    task.await.unwrap();
    let (b_last, a_first): (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>) =
        sqlx::query_as(
            "select (select max(finished_at) from webhook_out_messages where endpoint_id = $2),
                    (select min(finished_at) from webhook_out_messages where endpoint_id = $1)",
        )
        .bind(ea)
        .bind(eb)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(
        b_last < a_first,
        "B's last {b_last} before A's first {a_first}"
    );
    // A never had more than its owner's limit (4) in flight: its requests came in waves.
    let at: Vec<std::time::Instant> = slow.requests().iter().map(|r| r.at).collect();
    let most = at
        .iter()
        .map(|t| {
            at.iter()
                .filter(|u| **u >= *t && **u < *t + Duration::from_millis(1000))
                .count()
        })
        .max()
        .unwrap();
    assert!(most <= 4, "at most 4 of A's requests at once, saw {most}");
}

/// At the default limits (32 requests per process, 16 in flight per endpoint), two slow
/// endpoints with events queued first still leave a process room for a third org's fast one:
/// each endpoint gets at most a quarter of the process's requests.
#[tokio::test]
async fn two_slow_endpoints_at_the_default_limits_leave_room_for_the_rest() {
    let pool = test_db().await;
    let slow =
        Receiver::start(|_, _| Act::Answer(200, Vec::new(), Duration::from_millis(1500))).await;
    let fast = Receiver::start(|_, _| Act::ok()).await;
    let mut slow_endpoints = Vec::new();
    for name in ["slowone", "slowtwo"] {
        let org = TestOrg::with_roles(&pool, name, &[Role::Owner]).await;
        let (e, _) = endpoint(
            &pool,
            &org,
            &slow.url(&format!("/{name}")),
            &[WebhookEventType::MessageDelivered],
        )
        .await;
        let jobs = deliveries(&pool, org.id.0, name, 20).await;
        settle(&pool, &jobs, "delivered").await;
        slow_endpoints.push(e);
    }
    let b = TestOrg::with_roles(&pool, "fastco", &[Role::Owner]).await;
    let (eb, _) = endpoint(
        &pool,
        &b,
        &fast.url("/b"),
        &[WebhookEventType::MessageDelivered],
    )
    .await;
    let jb = deliveries(&pool, b.id.0, "fast", 12).await;
    settle(&pool, &jb, "delivered").await;
    let cfg = Config {
        timeout: Duration::from_secs(5),
        concurrency: Config::default().concurrency,
        ..config()
    };
    let (stop, task) = start(&pool, cfg, "shared");
    wait_for("all three endpoints served", 90, async || {
        let mut done = counts(&pool, eb).await.get("delivered") == Some(&12);
        for e in &slow_endpoints {
            done &= counts(&pool, *e).await.get("delivered") == Some(&20);
        }
        done
    })
    .await;
    stop.send(true).unwrap();
    task.await.unwrap();
    let (b_last, slow_first): (chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>) =
        sqlx::query_as(
            "select (select max(finished_at) from webhook_out_messages where endpoint_id = $2),
                    (select min(finished_at) from webhook_out_messages where endpoint_id = any($1))",
        )
        .bind(&slow_endpoints)
        .bind(eb)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(
        b_last < slow_first,
        "the fast endpoint's last {b_last} before the slow ones' first {slow_first}"
    );
}

/// An event whose endpoint keeps failing is retried until its limit (three days unless the
/// operator chose otherwise), then failed; the endpoint, not failing long enough to be turned
/// off, stays on.
#[tokio::test]
async fn an_event_failing_past_its_retry_limit_is_given_up() {
    assert_eq!(
        Limits::default().give_up_after,
        Duration::from_secs(3 * 86400),
        "three days by default"
    );
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let down = Receiver::start(|_, _| Act::status(503)).await;
    let (e, _) = endpoint(
        &pool,
        &acme,
        &down.url("/down"),
        &[WebhookEventType::MessageDelivered],
    )
    .await;
    let jobs = deliveries(&pool, acme.id.0, "down", 1).await;
    settle(&pool, &jobs, "delivered").await;
    let cfg = Config {
        limits: Limits {
            disable_after: Duration::from_secs(3600),
            give_up_after: Duration::from_secs(2),
        },
        ..config()
    };
    let (stop, task) = start(&pool, cfg, "give-up");
    wait_for("the event given up", 30, async || {
        counts(&pool, e).await.get("failed") == Some(&1)
    })
    .await;
    stop.send(true).unwrap();
    task.await.unwrap();
    let tries = down.requests().len();
    assert!(tries >= 2, "retried before giving up: {tries}");
    let mut conn = pool.acquire().await.unwrap();
    let list = webhooks_out::list(&mut conn, acme.id.0).await.unwrap();
    assert!(list.iter().any(|x| x.id == e && x.enabled), "{list:?}");
}

/// A replay sends a delivered event again under its `webhook-id`, once however often it is
/// asked for while on its way (a second queueing would send it twice); another org's event is
/// not found.
#[tokio::test]
async fn a_replay_sends_an_event_again_under_its_id_once() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let globex = TestOrg::with_roles(&pool, "globex", &[Role::Owner]).await;
    let receiver = Receiver::start(|_, _| Act::ok()).await;
    let (e, _) = endpoint(
        &pool,
        &acme,
        &receiver.url("/r"),
        &[WebhookEventType::MessageDelivered],
    )
    .await;
    let jobs = deliveries(&pool, acme.id.0, "r", 1).await;
    settle(&pool, &jobs, "delivered").await;
    let (stop, task) = start(&pool, config(), "first");
    wait_for("the event delivered", 30, async || {
        counts(&pool, e).await.get("delivered") == Some(&1)
    })
    .await;
    stop.send(true).unwrap();
    task.await.unwrap();
    let id: String =
        sqlx::query_scalar("select id from webhook_out_messages where endpoint_id = $1")
            .bind(e)
            .fetch_one(&pool)
            .await
            .unwrap();
    let mut conn = pool.acquire().await.unwrap();
    assert_eq!(
        webhooks_out::replay(&mut conn, globex.id.0, &id)
            .await
            .unwrap(),
        webhooks_out::Replayed::NotFound
    );
    assert_eq!(
        webhooks_out::replay(&mut conn, acme.id.0, &id)
            .await
            .unwrap(),
        webhooks_out::Replayed::Queued(e)
    );
    // Asked for again, at once and many times, while it waits: it is already on its way.
    let again: Vec<_> = (0..10)
        .map(|_| {
            let (pool, id) = (pool.clone(), id.clone());
            let org = acme.id.0;
            tokio::spawn(async move {
                let mut c = pool.acquire().await.unwrap();
                webhooks_out::replay(&mut c, org, &id).await.unwrap()
            })
        })
        .collect();
    for r in again {
        assert_eq!(r.await.unwrap(), webhooks_out::Replayed::Pending);
    }
    let (stop, task) = start(&pool, config(), "second");
    wait_for("the replay delivered", 30, async || {
        counts(&pool, e).await.get("delivered") == Some(&1) && receiver.requests().len() >= 2
    })
    .await;
    // Long enough for a second queueing to have been sent too.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.send(true).unwrap();
    task.await.unwrap();
    let ids: Vec<String> = receiver
        .requests()
        .iter()
        .map(|r| r.id().to_owned())
        .collect();
    assert_eq!(ids, [id.clone(), id], "sent twice in all, under one id");
}

/// A refusal (410) fails an event at once; an endpoint failing for longer than its limit is
/// turned off with a reason, its owners are mailed an account notice (once each, nobody else),
/// and turning it on sends what waited.
#[tokio::test]
async fn a_refusal_fails_at_once_and_an_endpoint_failing_too_long_is_turned_off() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner, Role::Admin, Role::Owner]).await;
    let gone = Receiver::start(|_, _| Act::status(410)).await;
    let down_until = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let d = down_until.clone();
    let down = Receiver::start(move |_, _| {
        if d.load(std::sync::atomic::Ordering::SeqCst) {
            Act::status(503)
        } else {
            Act::ok()
        }
    })
    .await;
    let (eg, _) = endpoint(
        &pool,
        &acme,
        &gone.url("/gone"),
        &[WebhookEventType::MessageFailed],
    )
    .await;
    let (ed, _) = endpoint(
        &pool,
        &acme,
        &down.url("/down"),
        &[WebhookEventType::MessageDelivered],
    )
    .await;
    let jobs = deliveries(&pool, acme.id.0, "health", 4).await;
    settle(&pool, &jobs[..2], "failed").await;
    settle(&pool, &jobs[2..], "delivered").await;
    let cfg = Config {
        limits: Limits {
            disable_after: Duration::from_secs(2),
            give_up_after: Duration::from_secs(3600),
        },
        ..config()
    };
    let (stop, task) = start(&pool, cfg.clone(), "health");
    let mut conn = pool.acquire().await.unwrap();
    wait_for("the failing endpoint to be turned off", 30, async || {
        let list = webhooks_out::list(&mut conn, acme.id.0).await.unwrap();
        list.iter().any(|e| e.id == ed && !e.enabled)
    })
    .await;
    assert_eq!(counts(&pool, eg).await.get("failed"), Some(&2));
    assert_eq!(gone.requests().len(), 2, "a refusal is not retried");
    let list = webhooks_out::list(&mut conn, acme.id.0).await.unwrap();
    let e = list.iter().find(|e| e.id == ed).unwrap();
    assert!(
        e.disabled_reason
            .as_deref()
            .unwrap_or("")
            .contains("turned it off"),
        "{e:?}"
    );
    assert_eq!(e.pending, 2, "its events wait");
    let overview = app::db::overview::for_org(&pool, acme.id.0).await.unwrap();
    assert_eq!(overview.webhooks_turned_off, 1, "the Overview page says so");

    // The owners are told by mail, each once; the admin is not.
    let notices: Vec<(String, i64, i16)> = sqlx::query_as(
        "select job_id, user_id, priority from deliveries where kind = 'notice' order by user_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let owners: Vec<i64> = vec![
        acme.user(Role::Owner, 0).id.0,
        acme.user(Role::Owner, 1).id.0,
    ];
    assert_eq!(
        notices.iter().map(|n| n.1).collect::<Vec<_>>(),
        owners,
        "{notices:?}"
    );
    assert!(notices.iter().all(|n| n.2 == 0), "account mail goes first");
    let dir = tempfile::tempdir().unwrap();
    let mut worker = mailroom::workers::delivery::Worker::new(
        pool.clone(),
        crate::support::fixtures::config_for_capture(dir.path().into()),
        "notices",
    );
    while worker.drain().await.unwrap() > 0 {}
    for (job, _, _) in &notices {
        let status: String = sqlx::query_scalar("select status from deliveries where job_id = $1")
            .bind(job)
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(status, "delivered", "{job}");
        let mail =
            std::fs::read_to_string(app::capture::path_for(dir.path(), acme.id.0, job)).unwrap();
        assert!(
            mail.contains("Subject: Mailroom turned off an event webhook endpoint"),
            "{mail}"
        );
        assert!(
            mail.contains(&down.url("/down")),
            "it names the endpoint: {mail}"
        );
        assert!(
            mail.contains("http://mailroom.test/settings/webhooks"),
            "it links to the page: {mail}"
        );
    }
    let before = down.requests().len();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        down.requests().len(),
        before,
        "nothing is sent to a disabled endpoint"
    );

    down_until.store(false, std::sync::atomic::Ordering::SeqCst);
    webhooks_out::set_enabled(&mut conn, acme.id.0, ed, true)
        .await
        .unwrap();
    wait_for("what waited to be sent", 30, async || {
        counts(&pool, ed).await.get("delivered") == Some(&2)
    })
    .await;
    let overview = app::db::overview::for_org(&pool, acme.id.0).await.unwrap();
    assert_eq!(overview.webhooks_turned_off, 0);
    stop.send(true).unwrap();
    task.await.unwrap();
}

/// During a rotation both secrets sign: a receiver still on the old one and one already on the
/// new one both verify, with the reference library.
#[tokio::test]
async fn during_a_rotation_the_old_and_the_new_secret_both_verify() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let receiver = Receiver::start(|_, _| Act::ok()).await;
    let (id, old) = endpoint(
        &pool,
        &acme,
        &receiver.url("/r"),
        &[WebhookEventType::WebhookTest],
    )
    .await;
    let new = app::webhook::new_secret();
    let mut conn = pool.acquire().await.unwrap();
    webhooks_out::rotate(&mut conn, acme.id.0, id, &new, Duration::from_secs(3600))
        .await
        .unwrap()
        .unwrap();
    webhooks_out::send_test(&mut conn, acme.id.0, id)
        .await
        .unwrap()
        .unwrap();
    let (stop, task) = start(&pool, config(), "rotation");
    wait_for("the test event", 30, async || {
        !receiver.requests().is_empty()
    })
    .await;
    stop.send(true).unwrap();
    task.await.unwrap();
    let got = receiver.requests();
    assert_eq!(got[0].headers["webhook-signature"].split(' ').count(), 2);
    for secret in [&old, &new] {
        let v = verify_independently(secret, &got[..1]);
        assert!(v[0].is_ok(), "{v:?}");
    }
    let body: serde_json::Value = serde_json::from_str(&got[0].body).unwrap();
    assert_eq!(body["type"], "webhook.test");
    assert_documented(&body);
}

/// An unsubscribe, a suppression, a confirmed sign-up and an erasure are each reported once; the
/// erased address is forgotten in every event already written, and the erasure's own event
/// names only the subscriber's id.
#[tokio::test]
async fn subscriber_changes_are_reported_and_an_erasure_is_forgotten_in_every_event() {
    use app::db::audience;
    use app::domain::{EmailAddress, SuppressionReason};
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let types: Vec<WebhookEventType> = WebhookEventType::ALL
        .into_iter()
        .filter(|t| *t != WebhookEventType::WebhookTest)
        .collect();
    let (id, _) = endpoint(&pool, &acme, "https://hooks.example.com/people", &types).await;
    let org = acme.id.0;
    let mut tx = pool.begin().await.unwrap();
    let alice = EmailAddress::parse("Alice-Waits@example.org").unwrap();
    let bob = EmailAddress::parse("Bob-Leaves@example.org").unwrap();
    let ids = audience::insert_subscribers(
        &mut tx,
        org,
        &[(alice.clone(), "Alice".into()), (bob.clone(), "Bob".into())],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    sqlx::query("update subscribers set status = 'unconfirmed' where id = $1")
        .bind(ids[0])
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("update subscribers set status = 'confirmed', confirmed_at = now() where id = $1")
        .bind(ids[0])
        .execute(&pool)
        .await
        .unwrap();
    let mut conn = pool.acquire().await.unwrap();
    audience::suppress(
        &mut conn,
        org,
        &bob,
        SuppressionReason::Unsubscribed,
        "link",
    )
    .await
    .unwrap();
    let carol = EmailAddress::parse("carol@example.org").unwrap();
    audience::suppress(
        &mut conn,
        org,
        &carol,
        SuppressionReason::HardBounce,
        "relay",
    )
    .await
    .unwrap();
    // A second suppression of the same address changes nothing and reports nothing.
    audience::suppress(&mut conn, org, &carol, SuppressionReason::Manual, "admin")
        .await
        .unwrap();
    let events = |pool: PgPool| async move {
        sqlx::query_as::<_, (String, serde_json::Value)>(
            "select event_type, payload from webhook_out_messages where endpoint_id = $1 order by created_at, id",
        )
        .bind(id)
        .fetch_all(&pool)
        .await
        .unwrap()
    };
    let before = events(pool.clone()).await;
    let kinds: Vec<&str> = before.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == "subscriber.confirmed")
            .count(),
        1,
        "{kinds:?}"
    );
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == "subscriber.unsubscribed")
            .count(),
        1
    );
    assert_eq!(
        kinds
            .iter()
            .filter(|k| **k == "subscriber.suppressed")
            .count(),
        1
    );
    let confirmed = &before
        .iter()
        .find(|(t, _)| t == "subscriber.confirmed")
        .unwrap()
        .1;
    assert_eq!(confirmed["data"]["subscriber_id"], ids[0]);
    assert_eq!(confirmed["data"]["email"], "Alice-Waits@example.org");
    let suppressed = &before
        .iter()
        .find(|(t, _)| t == "subscriber.suppressed")
        .unwrap()
        .1;
    assert_eq!(suppressed["data"]["reason"], "hard_bounce");

    let mut tx = pool.begin().await.unwrap();
    app::db::subscribers::erase(&mut tx, org, ids[1])
        .await
        .unwrap()
        .unwrap();
    tx.commit().await.unwrap();
    let after = events(pool.clone()).await;
    let text = serde_json::to_string(&after).unwrap().to_lowercase();
    assert!(
        !text.contains("bob-leaves"),
        "the erased address is gone from every event: {text}"
    );
    let erased: Vec<&serde_json::Value> = after
        .iter()
        .filter(|(t, _)| t == "subscriber.erased")
        .map(|(_, p)| p)
        .collect();
    assert_eq!(erased.len(), 1, "{after:?}");
    assert_eq!(
        erased[0]["data"],
        serde_json::json!({ "subscriber_id": ids[1] })
    );
    let unsubscribed = &after
        .iter()
        .find(|(t, _)| t == "subscriber.unsubscribed")
        .unwrap()
        .1;
    assert_eq!(unsubscribed["data"]["erased"], true);
    assert!(
        text.contains("alice-waits"),
        "other people's events are untouched"
    );
    for (_, payload) in &after {
        assert_documented(payload);
    }
}

/// Retention: settled events older than the retention go with their attempts, under the
/// leader's fence; pending ones and newer ones stay.
#[tokio::test]
async fn retention_removes_settled_events_under_the_leaders_fence() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let (id, _) = endpoint(
        &pool,
        &acme,
        "https://hooks.example.com/kept",
        &[WebhookEventType::MessageDelivered],
    )
    .await;
    let jobs = deliveries(&pool, acme.id.0, "kept", 3).await;
    settle(&pool, &jobs, "delivered").await;
    // One old and delivered, one new and delivered, one old and still pending.
    sqlx::query(
        "update webhook_out_messages m
         set status = case when d.rn = 3 then 'pending' else 'delivered' end,
             finished_at = case when d.rn = 3 then null
                                when d.rn = 1 then now() - interval '40 days' else now() end,
             created_at = now() - interval '41 days'
         from (select id, row_number() over (order by id) as rn from webhook_out_messages) d
         where d.id = m.id",
    )
    .execute(&pool)
    .await
    .unwrap();
    let lease = app::db::leader::acquire(&pool, "leader", "me", 30.0)
        .await
        .unwrap()
        .unwrap();
    let stale = app::db::leader::Lease {
        epoch: lease.epoch - 1,
        ..lease.clone()
    };
    assert_eq!(
        webhooks_out::trim(&pool, &stale, 30.0, 100).await.unwrap(),
        0,
        "fenced"
    );
    assert_eq!(
        webhooks_out::trim(&pool, &lease, 30.0, 100).await.unwrap(),
        1
    );
    let left = counts(&pool, id).await;
    assert_eq!(
        (left.get("delivered"), left.get("pending")),
        (Some(&1), Some(&1)),
        "{left:?}"
    );
}

/// Segment events: twenty scans at once report each entry and exit once; the first scan (and
/// one after a day without any) only notes who matches; an edit of the segment is reported as
/// the entries and exits it makes; an org without an endpoint that asked is never scanned;
/// the events reach the receiver signed, documented, under one id each.
#[tokio::test]
async fn who_enters_or_leaves_a_watched_segment_is_reported_once_and_signed() {
    use chrono::{DateTime, Duration as Days, Utc};
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let globex = TestOrg::with_roles(&pool, "globex", &[Role::Owner]).await;
    let receiver = Receiver::start(|_, _| Act::ok()).await;
    let (id, secret) = endpoint(
        &pool,
        &acme,
        &receiver.url("/hooks/segments"),
        &[
            WebhookEventType::SegmentEntered,
            WebhookEventType::SegmentLeft,
        ],
    )
    .await;
    let plan = |plans: &[&str]| -> app::domain::segment::Group {
        let children: Vec<serde_json::Value> = plans
            .iter()
            .map(|p| serde_json::json!({"type": "attribute", "name": "plan", "test": {"op": "text_equals", "value": p}}))
            .collect();
        serde_json::from_value(serde_json::json!({"op": "any", "children": children})).unwrap()
    };
    let set_plan = |s: i64, p: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query("update subscribers set attributes = jsonb_build_object('plan', $2::text) where id = $1")
                .bind(s)
                .bind(p)
                .execute(&pool)
                .await
                .unwrap();
        }
    };
    let ids = crate::automations::people(&pool, acme.id, "w", 6).await;
    set_plan(ids[0], "pro").await;
    set_plan(ids[1], "pro").await;
    let (segment, theirs) = {
        let mut c = pool.acquire().await.unwrap();
        let ours = app::db::segment::create(&mut c, acme.id, "Pro", &plan(&["pro"]))
            .await
            .unwrap();
        let theirs = app::db::segment::create(&mut c, globex.id, "Pro", &plan(&["pro"]))
            .await
            .unwrap();
        (ours, theirs)
    };
    let scan = |at: DateTime<Utc>| {
        let pool = pool.clone();
        async move {
            let scans: Vec<_> = (0..20)
                .map(|_| {
                    let pool = pool.clone();
                    tokio::spawn(async move {
                        app::db::segment::watch(&pool, Some(at), std::time::Duration::from_secs(60))
                            .await
                    })
                })
                .collect();
            let mut found = 0;
            for s in scans {
                found += s.await.unwrap().unwrap();
            }
            found
        }
    };
    let reported = || {
        let pool = pool.clone();
        async move {
            sqlx::query_as::<_, (String, i64, i64)>(
                "select event_type, (payload -> 'data' ->> 'subscriber_id')::bigint,
                        (payload -> 'data' ->> 'version')::bigint
                 from webhook_out_messages where endpoint_id = $1
                 order by created_at, event_type, 2",
            )
            .bind(id)
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    };
    let t0: DateTime<Utc> = "2031-01-06T10:00:00Z".parse().unwrap();
    assert_eq!(scan(t0).await, 0, "the first scan only notes who matches");
    set_plan(ids[2], "pro").await;
    set_plan(ids[0], "free").await;
    // Scanned less than half an interval ago (by any replica): not scanned again yet.
    assert_eq!(scan(t0 + Days::seconds(20)).await, 0);
    assert!(reported().await.is_empty());
    assert_eq!(scan(t0 + Days::minutes(1)).await, 2);
    assert_eq!(
        reported().await,
        vec![
            ("segment.entered".to_owned(), ids[2], 1),
            ("segment.left".to_owned(), ids[0], 1)
        ]
    );
    assert_eq!(scan(t0 + Days::minutes(2)).await, 0, "nothing changed");
    // An edit is the entries and exits it makes.
    {
        let mut c = pool.acquire().await.unwrap();
        app::db::segment::update(
            &mut c,
            acme.id,
            segment,
            "Pro",
            &plan(&["pro", "team"]),
            None,
        )
        .await
        .unwrap();
    }
    set_plan(ids[3], "team").await;
    assert_eq!(scan(t0 + Days::minutes(3)).await, 1);
    assert_eq!(
        reported().await.last(),
        Some(&("segment.entered".to_owned(), ids[3], 2))
    );
    // A day without a scan: the next only notes who matches.
    set_plan(ids[4], "pro").await;
    assert_eq!(scan(t0 + Days::days(2)).await, 0);
    assert_eq!(reported().await.len(), 3);
    let scanned: Vec<i64> = sqlx::query_scalar("select segment_id from segment_scans order by 1")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(
        scanned,
        [segment],
        "globex's segment {theirs} is not watched"
    );

    let (stop, task) = start(&pool, config(), "segment-events");
    wait_for("the segment events delivered", 60, async || {
        counts(&pool, id).await.get("delivered") == Some(&3)
    })
    .await;
    stop.send(true).unwrap();
    task.await.unwrap();
    let got = receiver.requests();
    let ids_seen: BTreeSet<&str> = got.iter().map(|g| g.id()).collect();
    assert_eq!(ids_seen.len(), 3, "one id per event");
    for g in &got {
        let body: serde_json::Value = serde_json::from_str(&g.body).unwrap();
        assert_documented(&body);
        assert_eq!(body["data"]["segment_id"], segment);
    }
    for (g, v) in got.iter().zip(verify_independently(&secret, &got)) {
        assert_eq!(v.as_deref(), Ok(g.id()));
    }
}
