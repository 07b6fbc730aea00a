//! Test sends over HTTP, as the editor posts them: the version shown goes to the addresses typed
//! in through the delivery engine; a double-submitted dialog queues once; a stale version, a bad
//! address or a viewer is refused; the messages render the campaign (Markdown as text + HTML,
//! fields escaped in the HTML) and the campaign's counts are untouched; suppressed addresses
//! get no test, and the editor's preview is never addressed to one.

use app::api::campaign::edit::{CampaignSheet, NewCampaign, SaveCampaign};
use app::api::campaign::test_send::SendTest;
use app::domain::Role;
use mailroom::workers::delivery::Worker;

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::test_app::{json, spawn_app, TestApp};
use testkit::SmtpSink;

#[tokio::test]
async fn a_test_send_goes_once_per_dialog_renders_the_version_shown_and_counts_nothing() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner, Role::Admin, Role::Viewer]).await;
    let (lists, _) = acme.audience(5).await;
    let app = spawn_app(pool.clone()).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let viewer = acme.users[2].signed_in(&app).await;

    let (id, sheet) = draft_with_content(&app, &admin, lists[0]).await;
    let token = sheet["test_token"].as_str().unwrap().to_string();
    assert_eq!(sheet["format"], "markdown");
    let html = sheet["preview"]["Ok"]["html"].as_str().unwrap();
    assert!(html.contains("<h1>News for Person"), "{html}");

    let send = |version: i32, to: &'static str, token: String| {
        let test = SendTest {
            id,
            version,
            token,
            addresses: to.into(),
        };
        let (app, admin) = (&app, &admin);
        async move { app.call_fn(admin, test).await }
    };
    // Bad input is refused naming the address; nothing is queued.
    let (_, body) = send(2, "me@example.com, not-an-address", token.clone()).await;
    assert_eq!(
        json(&body)["Invalid"],
        "“not-an-address” is not a valid e-mail address."
    );
    // A version other than the one saved last is refused.
    let (_, body) = send(1, "me@example.com", token.clone()).await;
    assert!(
        json(&body)["Conflict"]
            .as_str()
            .unwrap()
            .contains("version 2 now, you saw 1"),
        "{body}"
    );
    // A viewer cannot send tests.
    let test = SendTest {
        id,
        version: 2,
        token: token.clone(),
        addresses: "v@example.com".into(),
    };
    let (_, body) = app.call_fn(&viewer, test).await;
    assert_eq!(json(&body), "Forbidden");
    let queued = || async {
        sqlx::query_scalar::<_, String>(
            "select job_id from deliveries where kind = 'test' order by job_id",
        )
        .fetch_all(&pool)
        .await
        .unwrap()
    };
    assert!(queued().await.is_empty());

    // The dialog submitted twice (a double click) queues each message once.
    let (status, body) = send(2, "me@example.com, Boss@Example.com", token.clone()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        json(&body),
        "Test of version 2 queued to me@example.com, Boss@Example.com."
    );
    let (_, body) = send(2, "me@example.com, Boss@Example.com", token.clone()).await;
    assert!(
        json(&body).as_str().unwrap().starts_with("Already sent"),
        "{body}"
    );
    assert_eq!(
        queued().await,
        [
            format!("test:{id}:2:{token}:boss@example.com"),
            format!("test:{id}:2:{token}:me@example.com"),
        ]
    );
    let audits: i64 = sqlx::query_scalar(
        "select count(*) from audit_log where action = 'campaign.test' and object_id = $1",
    )
    .bind(id.to_string())
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(audits, 1);

    // The delivery worker sends them (the campaign is a draft: tests do not wait for sending).
    let sink = SmtpSink::start();
    let mut worker = Worker::new(pool.clone(), crate::support::fixtures::config(&sink), "t");
    worker.drain().await.unwrap();
    let got = sink.messages();
    assert_eq!(got.len(), 2);
    for m in &got {
        assert!(
            m.data.contains("Subject: [Test] Hello Test Recipient"),
            "{}",
            m.data
        );
        assert!(m.data.contains("multipart/alternative"), "{}", m.data);
        assert!(
            m.data.contains("<h1>News for Test Recipient</h1>"),
            "{}",
            m.data
        );
        assert!(m.data.contains("# News for Test Recipient"), "{}", m.data);
    }
    let delivered: i64 = sqlx::query_scalar(
        "select count(*) from deliveries where kind = 'test' and status = 'delivered'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(delivered, 2);
    // The campaign's counts are untouched: no progress slot, no send.
    let counted: i64 = sqlx::query_scalar(
        "select (select count(*) from progress_slots where campaign_id = $1)
              + (select count(*) from sends where campaign_id = $1)",
    )
    .bind(id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(counted, 0);
}

#[tokio::test]
async fn a_test_queued_before_an_edit_fails_with_the_reason_instead_of_sending_other_text() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id.0;
    let app = spawn_app(pool.clone()).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let (_, body) = app
        .call_fn(
            &admin,
            NewCampaign {
                name: "Launch".into(),
            },
        )
        .await;
    let id = json(&body).as_i64().unwrap();
    let test = SendTest {
        id,
        version: 1,
        token: "tok".into(),
        addresses: "me@example.com".into(),
    };
    let (_, body) = app.call_fn(&admin, test).await;
    assert!(json(&body).as_str().unwrap().contains("queued"), "{body}");
    let edit = SaveCampaign {
        id,
        version: 1,
        name: "Launch".into(),
        subject: "Changed".into(),
        body: "<p>x</p>".into(),
        format: "html".into(),
        lists: vec![],
        excluded_lists: vec![],
        segments: vec![],
        excluded_segments: vec![],
        schedule: String::new(),
    };
    let (status, body) = app.call_fn(&admin, edit).await;
    assert_eq!(status, 200, "{body}");
    let _ = org;
    let sink = SmtpSink::start();
    let mut worker = Worker::new(pool.clone(), crate::support::fixtures::config(&sink), "t");
    worker.drain().await.unwrap();
    assert!(sink.messages().is_empty());
    let (status, error): (String, String) = sqlx::query_as(
        "select status, coalesce(last_error, smtp_reply, '') from deliveries where kind = 'test'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(status, "failed");
    assert!(
        error.contains(
            "edited after this test was queued (version 2 now, the test was of version 1)"
        ),
        "{error}"
    );
}

/// A draft of list `list` saved as version 2 with a Markdown body; its id and editor sheet.
async fn draft_with_content(
    app: &TestApp,
    admin: &reqwest::Client,
    list: i64,
) -> (i64, serde_json::Value) {
    let body = "# News for {{ name }}\n\n*Big* day.";
    app.markdown_draft(admin, "Hello {{ name }}", body, vec![list])
        .await
}

/// Someone who unsubscribed never gets the campaign's content through a test: the address is
/// refused when typed (422, named, nothing queued), and a test queued before the unsubscribe is
/// stopped by the worker instead of sent.
#[tokio::test]
async fn a_test_send_never_reaches_a_suppressed_address() {
    use app::domain::EmailAddress;
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id.0;
    let (lists, _) = acme.audience(2).await;
    let app = spawn_app(pool.clone()).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let (id, sheet) = draft_with_content(&app, &admin, lists[0]).await;
    let token = sheet["test_token"].as_str().unwrap().to_string();
    let suppress = |email: &'static str| {
        let pool = pool.clone();
        async move {
            let mut conn = pool.acquire().await.unwrap();
            app::db::audience::suppress(
                &mut conn,
                org,
                &EmailAddress::parse(email).unwrap(),
                app::domain::SuppressionReason::Unsubscribed,
                "link",
            )
            .await
            .unwrap();
        }
    };
    let send = |to: &'static str| {
        let test = SendTest {
            id,
            version: 2,
            token: token.clone(),
            addresses: to.into(),
        };
        let (app, admin) = (&app, &admin);
        async move { app.call_fn(admin, test).await }
    };
    suppress("gone@example.com").await;
    let (status, body) = send("me@example.com, Gone@Example.com").await;
    assert_eq!(status, 422, "{body}");
    let refusal = json(&body)["Invalid"].as_str().unwrap().to_owned();
    assert!(
        refusal.contains("gone@example.com (unsubscribed)") && !refusal.contains("me@example"),
        "{refusal}"
    );
    let queued: i64 = sqlx::query_scalar("select count(*) from deliveries where kind = 'test'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(queued, 0, "nothing is half-queued");

    let (status, body) = send("late@example.com").await;
    assert_eq!(status, 200, "{body}");
    suppress("late@example.com").await;
    let sink = SmtpSink::start();
    let mut worker = Worker::new(pool.clone(), crate::support::fixtures::config(&sink), "t");
    worker.drain().await.unwrap();
    assert!(
        sink.messages().is_empty(),
        "a suppressed address got a test"
    );
    let status: String = sqlx::query_scalar("select status from deliveries where kind = 'test'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(status, "suppressed");
}

/// The editor's preview is addressed to someone the campaign reaches: the first address of its
/// audience, never a suppressed one (the approver must not see it going to a person it skips).
#[tokio::test]
async fn the_preview_never_addresses_a_suppressed_person() {
    use app::domain::EmailAddress;
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id.0;
    // lists[0] holds p0, p10 (as "Variant 10"), p12, p15, p18, p3, p6, p8 and p9, in address order.
    let (lists, _) = acme.audience(20).await;
    let app = spawn_app(pool.clone()).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let (id, sheet) = draft_with_content(&app, &admin, lists[0]).await;
    let html = sheet["preview"]["Ok"]["html"].as_str().unwrap();
    assert!(html.contains("<h1>News for Person 0</h1>"), "{html}");
    assert_eq!(sheet["estimate"], 9, "{sheet}");

    let mut conn = pool.acquire().await.unwrap();
    app::db::audience::suppress(
        &mut conn,
        org,
        &EmailAddress::parse("p0@example.org").unwrap(),
        app::domain::SuppressionReason::Unsubscribed,
        "link",
    )
    .await
    .unwrap();
    let sheet = json(&app.call_fn(&admin, CampaignSheet { id }).await.1);
    let html = sheet["preview"]["Ok"]["html"].as_str().unwrap();
    assert!(html.contains("<h1>News for Variant 10</h1>"), "{html}");
    assert!(!html.contains("Person 0<"), "{html}");
}
