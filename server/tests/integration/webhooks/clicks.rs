//! Click tracking through the real engine and the real router: links in campaign HTML become
//! signed redirects only when the org turned tracking on; a genuine link redirects to its own
//! target and is counted (people apart from scanners) and reported; anything forged, altered
//! or spliced is a 404 that records nothing; an erasure keeps the count but not the person.

use app::domain::WebhookEventType;
use reqwest::StatusCode;
use sqlx::PgPool;

use super::events_out::assert_documented;
use crate::support::fixtures::{config, run_to_end};
use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::test_app::spawn_app;
use mailroom::workers::delivery::Worker;
use testkit::SmtpSink;

const PRICING: &str = "https://example.com/pricing?plan=pro&ref=mail";
const DOCS: &str = "https://example.com/docs";
const BROWSER: &str =
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/131.0 Safari/537.36";

/// The tokens under `<public url><path>` in each message, in the order they appear.
fn tokens_at(sink: &SmtpSink, path: &str) -> Vec<Vec<String>> {
    sink.messages()
        .iter()
        .map(|m| {
            // Quoted-printable: soft line breaks out.
            let body = m.data.replace("=\r\n", "");
            body.split(&format!("http://mailroom.test{path}"))
                .skip(1)
                .map(|t| {
                    t.chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c))
                        .collect()
                })
                .collect()
        })
        .collect()
}

/// The tracked links' tokens in each message.
fn tokens(sink: &SmtpSink) -> Vec<Vec<String>> {
    tokens_at(sink, "/c/")
}

/// The pixel tokens in each message.
fn pixels(sink: &SmtpSink) -> Vec<Vec<String>> {
    tokens_at(sink, "/o/")
}

async fn clicks(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from link_clicks")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn tracked_links_lead_only_to_their_own_target_and_count_people_apart_from_scanners() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id.0;
    let (lists, _) = acme.audience(3).await;
    let body = format!(
        "Hi {{{{ name }}}}, see [our prices]({PRICING}) and <{DOCS}>, or [write](mailto:hi@example.com)."
    );

    // Off by default: links go out as written.
    let sink = SmtpSink::start();
    let plain = acme.campaign().to(&lists).body(&body).approved().await;
    run_to_end(&pool, plain.0, &sink).await;
    assert!(
        tokens(&sink).iter().all(Vec::is_empty),
        "nothing tracked while off"
    );

    let mut conn = pool.acquire().await.unwrap();
    assert!(!app::db::settings::set_click_tracking(&mut conn, org, true)
        .await
        .unwrap());
    let (endpoint, _) = {
        let secret = app::webhook::new_secret();
        let id = app::db::webhooks_out::create(
            &mut conn,
            org,
            None,
            "https://hooks.example.com/clicks",
            &[WebhookEventType::LinkClicked],
            &secret,
            app::domain::webhook::WEBHOOK_MAX_IN_FLIGHT,
        )
        .await
        .unwrap();
        (id, secret)
    };
    let sink = SmtpSink::start();
    let tracked = acme.campaign().to(&lists).body(&body).approved().await;
    run_to_end(&pool, tracked.0, &sink).await;
    let per_message = tokens(&sink);
    assert_eq!(per_message.len(), 3);
    assert!(per_message.iter().all(|t| t.len() == 2), "{per_message:?}");
    for m in sink.messages() {
        assert!(
            m.data.contains("mailto:hi@example.com"),
            "a mail link stays"
        );
    }
    // The people read it an hour later (a click within seconds of delivery is a scanner's).
    sqlx::query(
        "update deliveries set finished_at = now() - interval '1 hour' where campaign_id = $1",
    )
    .bind(tracked.0)
    .execute(&pool)
    .await
    .unwrap();

    let app = spawn_app(pool.clone()).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(BROWSER)
        .build()
        .unwrap();
    let follow = |token: String, head: bool, agent: &'static str| {
        let (http, url) = (http.clone(), format!("{}/c/{token}", app.base));
        async move {
            let req = if head {
                http.head(&url)
            } else {
                http.get(&url)
            };
            let r = req.header("user-agent", agent).send().await.unwrap();
            let location = r
                .headers()
                .get("location")
                .map(|l| l.to_str().unwrap().to_owned());
            (r.status(), location)
        }
    };
    let (a, b, c) = (&per_message[0], &per_message[1], &per_message[2]);
    // The first person clicks pricing twice, the second once; the docs link of the third is
    // followed by a HEAD and by a library: scanners.
    for (token, head, agent) in [
        (&a[0], false, BROWSER),
        (&a[0], false, BROWSER),
        (&b[0], false, BROWSER),
        (&c[1], true, BROWSER),
        (&c[1], false, "python-requests/2.31"),
    ] {
        let (status, location) = follow(token.clone(), head, agent).await;
        assert_eq!(status, StatusCode::FOUND);
        let expected = if token == &c[1] { DOCS } else { PRICING };
        assert_eq!(location.as_deref(), Some(expected));
    }
    assert_eq!(clicks(&pool).await, 5);

    // Forged, altered, spliced (one link's target under another's tag), another key's: 404,
    // and nothing recorded.
    let (payload_a, _) = a[0].split_once('.').unwrap();
    let (_, tag_b) = a[1].split_once('.').unwrap();
    let mut altered = a[0].clone().into_bytes();
    altered[3] = if altered[3] == b'A' { b'B' } else { b'A' };
    let foreign = app::click::token(
        b"another key, thirty-two bytes long",
        "x",
        "https://evil.example/",
    );
    for bad in [
        "nonsense".to_owned(),
        String::from_utf8(altered).unwrap(),
        format!("{payload_a}.{tag_b}"),
        foreign,
        format!("{}.", payload_a),
    ] {
        let (status, location) = follow(bad.clone(), false, BROWSER).await;
        assert_eq!((status, location), (StatusCode::NOT_FOUND, None), "{bad}");
    }
    assert_eq!(clicks(&pool).await, 5, "refused links record nothing");

    let links = app::db::clicks::per_link(&mut conn, org, tracked.0)
        .await
        .unwrap();
    let pricing = links.iter().find(|l| l.url == PRICING).unwrap();
    assert_eq!(
        (pricing.clicks, pricing.people, pricing.scanners),
        (3, 2, 0)
    );
    let docs = links.iter().find(|l| l.url == DOCS).unwrap();
    assert_eq!((docs.clicks, docs.people, docs.scanners), (0, 0, 2));
    assert!(app::db::clicks::per_link(&mut conn, org, plain.0)
        .await
        .unwrap()
        .is_empty());

    // People's clicks are reported, each once; scanners' are not.
    let events: Vec<serde_json::Value> = sqlx::query_scalar(
        "select payload from webhook_out_messages where endpoint_id = $1 order by created_at",
    )
    .bind(endpoint)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(events.len(), 3, "{events:?}");
    for e in &events {
        assert_documented(e);
        assert_eq!(e["data"]["url"], PRICING);
        assert_eq!(e["data"]["campaign_id"], tracked.0);
    }

    // Automation mail is tracked as campaign mail is, and its clicks name the automation.
    let welcome = crate::automations::live(
        &pool,
        acme.id,
        "Welcome",
        &crate::automations::definition(serde_json::json!({
            "trigger": {"type": "api"},
            "reentry": "once",
            "steps": [{"type": "email", "subject": "Welcome", "body": format!("See [our prices]({PRICING}).")}]
        })),
        acme.owner().id,
        acme.admin(0).id,
    )
    .await;
    let someone: i64 = sqlx::query_scalar(
        "select id from subscribers where org_id = $1 and status = 'confirmed' order by id limit 1",
    )
    .bind(org)
    .fetch_one(&pool)
    .await
    .unwrap();
    app::db::automation::enrol(
        &mut conn,
        acme.id,
        welcome,
        app::domain::SubscriberId(someone),
        "k1",
        &serde_json::json!({}),
    )
    .await
    .unwrap();
    crate::automations::run_all(&pool, chrono::Utc::now() + chrono::Duration::minutes(1), 1).await;
    let sink = SmtpSink::start();
    Worker::new(pool.clone(), config(&sink), "inproc")
        .drain()
        .await
        .unwrap();
    let sent = tokens(&sink);
    assert_eq!(sent.len(), 1, "the automation's one message");
    assert_eq!(sent[0].len(), 1, "{sent:?}");
    sqlx::query(
        "update deliveries set finished_at = now() - interval '1 hour' where automation_id = $1",
    )
    .bind(welcome)
    .execute(&pool)
    .await
    .unwrap();
    let (status, location) = follow(sent[0][0].clone(), false, BROWSER).await;
    assert_eq!(
        (status, location.as_deref()),
        (StatusCode::FOUND, Some(PRICING))
    );
    let recorded: (Option<i64>, Option<i64>, Option<i64>) = sqlx::query_as(
        "select campaign_id, automation_id, subscriber_id from link_clicks order by id desc limit 1",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(recorded, (None, Some(welcome), Some(someone)));
    let event: serde_json::Value = sqlx::query_scalar(
        "select payload from webhook_out_messages where endpoint_id = $1
         order by created_at desc limit 1",
    )
    .bind(endpoint)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_documented(&event);
    assert_eq!(event["data"]["automation_id"], welcome, "{event}");
    assert_eq!(
        event["data"]["campaign_id"],
        serde_json::Value::Null,
        "{event}"
    );
    // The campaign's counts are the campaign's alone.
    let links = app::db::clicks::per_link(&mut conn, org, tracked.0)
        .await
        .unwrap();
    assert_eq!(links.iter().find(|l| l.url == PRICING).unwrap().clicks, 3);

    // An erasure keeps the clicks counted and forgets whose they were.
    let first: i64 = sqlx::query_scalar(
        "select subscriber_id from link_clicks where campaign_id = $1 and not scanner order by id limit 1",
    )
    .bind(tracked.0)
    .fetch_one(&pool)
    .await
    .unwrap();
    let their_jobs: Vec<String> =
        sqlx::query_scalar("select distinct job_id from link_clicks where subscriber_id = $1")
            .bind(first)
            .fetch_all(&pool)
            .await
            .unwrap();
    assert!(!their_jobs.is_empty());
    // A link personalised with their address, clicked (recorded as the redirect records it).
    let address: String = sqlx::query_scalar("select email from subscribers where id = $1")
        .bind(first)
        .fetch_one(&pool)
        .await
        .unwrap();
    let job: String = sqlx::query_scalar(
        "select job_id from deliveries where campaign_id = $1 and subscriber_id = $2",
    )
    .bind(tracked.0)
    .bind(first)
    .fetch_one(&pool)
    .await
    .unwrap();
    for personal in [
        format!("https://example.com/welcome?e={address}#top"),
        format!(
            "https://example.com/u/{}/prefs",
            address.replace('@', "%40")
        ),
    ] {
        assert!(app::db::clicks::record(&pool, &job, &personal, false, 0.0)
            .await
            .unwrap());
    }
    let mut tx = pool.begin().await.unwrap();
    app::db::subscribers::erase(&mut tx, org, first)
        .await
        .unwrap()
        .unwrap();
    tx.commit().await.unwrap();
    let left: i64 = sqlx::query_scalar(
        "select count(*) from link_clicks where subscriber_id = $1 or job_id = any($2)",
    )
    .bind(first)
    .bind(&their_jobs)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(left, 0, "no click names the erased subscriber");
    let urls: Vec<String> = sqlx::query_scalar(
        "select url from link_clicks where url like 'https://example.com%' and url not like $1",
    )
    .bind(format!("{PRICING}%"))
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(
        urls.contains(&"https://example.com/welcome".to_owned()),
        "{urls:?}"
    );
    assert!(urls.contains(&"https://example.com".to_owned()), "{urls:?}");
    let mentions: i64 = sqlx::query_scalar(
        "select (select count(*) from link_clicks
                 where strpos(lower(url), $1) > 0 or strpos(lower(url), replace($1, '@', '%40')) > 0)
              + (select count(*) from webhook_out_messages
                 where strpos(lower(payload::text), $1) > 0
                    or strpos(lower(payload::text), replace($1, '@', '%40')) > 0)",
    )
    .bind(address.to_lowercase())
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        mentions, 0,
        "neither a click nor an event names the erased address"
    );
    let links = app::db::clicks::per_link(&mut conn, org, tracked.0)
        .await
        .unwrap();
    let pricing = links.iter().find(|l| l.url == PRICING).unwrap();
    assert_eq!(pricing.clicks, 3, "still counted");

    // The campaign page shows the counts.
    let owner = acme.owner().signed_in(&app).await;
    let page = owner
        .get(format!("{}/campaigns/{}", app.base, tracked.0))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("data-test=\"clicks\"")
            && page.contains(PRICING.replace('&', "&amp;").as_str()),
        "{page}"
    );
}

async fn opens(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from message_opens")
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_open_pixel_is_opt_in_counts_people_apart_from_machines_and_refuses_forgeries() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id.0;
    let (lists, _) = acme.audience(3).await;
    let body = format!("Hi {{{{ name }}}}, see [our prices]({PRICING}).");

    // Off by default, and click tracking does not turn it on.
    let mut conn = pool.acquire().await.unwrap();
    app::db::settings::set_click_tracking(&mut conn, org, true)
        .await
        .unwrap();
    let sink = SmtpSink::start();
    let plain = acme.campaign().to(&lists).body(&body).approved().await;
    run_to_end(&pool, plain.0, &sink).await;
    assert!(
        pixels(&sink).iter().all(Vec::is_empty),
        "no pixel while off"
    );

    assert!(!app::db::settings::set_open_tracking(&mut conn, org, true)
        .await
        .unwrap());
    let sink = SmtpSink::start();
    let tracked = acme.campaign().to(&lists).body(&body).approved().await;
    run_to_end(&pool, tracked.0, &sink).await;
    let per_message = pixels(&sink);
    assert_eq!(per_message.len(), 3);
    assert!(per_message.iter().all(|p| p.len() == 1), "{per_message:?}");
    sqlx::query(
        "update deliveries set finished_at = now() - interval '1 hour' where campaign_id = $1",
    )
    .bind(tracked.0)
    .execute(&pool)
    .await
    .unwrap();

    let app = spawn_app(pool.clone()).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let fetch = |path: String, head: bool, agent: &'static str| {
        let (http, url) = (http.clone(), format!("{}{path}", app.base));
        async move {
            let req = if head {
                http.head(&url)
            } else {
                http.get(&url)
            };
            let r = req.header("user-agent", agent).send().await.unwrap();
            let kind = r
                .headers()
                .get("content-type")
                .map(|v| v.to_str().unwrap().to_owned());
            let cache = r
                .headers()
                .get("cache-control")
                .map(|v| v.to_str().unwrap().to_owned());
            (r.status(), kind, cache)
        }
    };
    let (a, b, c) = (&per_message[0][0], &per_message[1][0], &per_message[2][0]);
    // The first person opens twice, the second once; the third's client prefetches (HEAD).
    for (token, head) in [(a, false), (a, false), (b, false), (c, true)] {
        let (status, kind, cache) = fetch(format!("/o/{token}"), head, BROWSER).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(kind.as_deref(), Some("image/gif"));
        assert_eq!(cache.as_deref(), Some("no-store"), "each open is a request");
    }
    assert_eq!(opens(&pool).await, 4);

    // Forged or altered pixels, a link's token as a pixel and a pixel's as a link: 404, and
    // nothing recorded.
    let key = app::signing::Purpose::Click.key(&pool).await.unwrap();
    let (job, _) = app::click::verify(&key, a).unwrap();
    let mut altered = a.clone().into_bytes();
    altered[3] = if altered[3] == b'A' { b'B' } else { b'A' };
    for bad in [
        "/o/nonsense".to_owned(),
        format!("/o/{}", String::from_utf8(altered).unwrap()),
        format!("/o/{}", app::click::token(&key, &job, PRICING)),
        format!("/c/{a}"),
    ] {
        let (status, _, _) = fetch(bad.clone(), false, BROWSER).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{bad}");
    }
    assert_eq!(opens(&pool).await, 4, "refused pixels record nothing");
    assert_eq!(clicks(&pool).await, 0, "a pixel is never a click");

    let counted = app::db::clicks::opens(&mut conn, org, tracked.0)
        .await
        .unwrap();
    assert_eq!((counted.opens, counted.people, counted.machines), (3, 2, 1));
    let none = app::db::clicks::opens(&mut conn, org, plain.0)
        .await
        .unwrap();
    assert_eq!(none, app::model::Opens::default());

    // An erasure keeps the opens counted and forgets whose they were.
    let first: i64 =
        sqlx::query_scalar("select subscriber_id from message_opens where job_id = $1 limit 1")
            .bind(&job)
            .fetch_one(&pool)
            .await
            .unwrap();
    let mut tx = pool.begin().await.unwrap();
    app::db::subscribers::erase(&mut tx, org, first)
        .await
        .unwrap()
        .unwrap();
    tx.commit().await.unwrap();
    let left: i64 = sqlx::query_scalar(
        "select count(*) from message_opens where subscriber_id = $1 or job_id = $2",
    )
    .bind(first)
    .bind(&job)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(left, 0, "no open names the erased subscriber");
    let counted = app::db::clicks::opens(&mut conn, org, tracked.0)
        .await
        .unwrap();
    assert_eq!((counted.opens, counted.machines), (3, 1), "still counted");
    // Their old message opened after the erasure counts, for no one.
    let (status, _, _) = fetch(format!("/o/{a}"), false, BROWSER).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(opens(&pool).await, 5);
    let named: i64 = sqlx::query_scalar(
        "select count(*) from message_opens where subscriber_id = $1 or job_id = $2",
    )
    .bind(first)
    .bind(&job)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(named, 0, "an open after the erasure names nobody");

    // The campaign page shows them, labelled unreliable.
    let owner = acme.owner().signed_in(&app).await;
    let page = owner
        .get(format!("{}/campaigns/{}", app.base, tracked.0))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("data-test=\"opens\"") && page.contains("Opens (unreliable)"),
        "{page}"
    );
}
