//! Transactional mail through the REST API on a real PostgreSQL and through the delivery
//! engine into a real SMTP sink: 50 concurrent requests with one Idempotency-Key queue one
//! message and get one answer; another payload under that key is a 409; templates are
//! versioned and filled in strictly; a hard bounce or complaint blocks the message and an
//! unsubscribe does not; erasure forgets the message's content.

use app::api::templates::{SaveTemplate, Template};
use app::domain::{ApiScope, Role};
use mailroom::workers::delivery::Worker;
use reqwest::StatusCode;
use serde_json::{json, Value};
use testkit::SmtpSink;

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::rest::{call, token};
use crate::support::test_app::{json as parse, spawn_app, TestApp};

struct Setup {
    pool: sqlx::PgPool,
    org: i64,
    app: TestApp,
    owner: reqwest::Client,
    token: String,
}

async fn setup() -> Setup {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let token = token(&app, &owner, "shop", &[ApiScope::MessagesSend]).await;
    let s = Setup {
        pool,
        org,
        app,
        owner,
        token,
    };
    save_template(
        &s,
        None,
        "Receipt {{ order_id }}",
        "Hi {{ name }}, you paid {{ total }}.",
    )
    .await;
    s
}

/// Saves the `receipt` template (a new one without `id`); answers its id.
async fn save_template(s: &Setup, id: Option<(i64, i32)>, subject: &str, text: &str) -> i64 {
    let (status, body) = s
        .app
        .call_fn(
            &s.owner,
            SaveTemplate {
                id: id.map(|i| i.0),
                expected_version: id.map(|i| i.1),
                name: "receipt".into(),
                subject: subject.into(),
                body_text: text.into(),
                body_html: "<p>Hi {{ name }}</p>".into(),
                sample_data: r#"{"name": "Ann", "order_id": 1, "total": "9 EUR"}"#.into(),
            },
        )
        .await;
    assert_eq!(status, 200, "{body}");
    sqlx::query_scalar("select id from tx_templates where org_id = $1 and name = 'receipt'")
        .bind(s.org)
        .fetch_one(&s.pool)
        .await
        .unwrap()
}

async fn post(
    s: &Setup,
    key: Option<&str>,
    body: &Value,
) -> (StatusCode, reqwest::header::HeaderMap, String) {
    let mut r = reqwest::Client::new()
        .post(format!("{}/api/v1/messages", s.app.base))
        .bearer_auth(&s.token)
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(k) = key {
        r = r.header("idempotency-key", k);
    }
    let r = r.send().await.unwrap();
    let (status, headers) = (r.status(), r.headers().clone());
    (status, headers, r.text().await.unwrap())
}

async fn deliver(pool: &sqlx::PgPool, sink: &SmtpSink) {
    let mut worker = Worker::new(pool.clone(), crate::support::fixtures::config(sink), "t");
    worker.drain().await.unwrap();
}

fn receipt(to: &str, total: &str) -> Value {
    json!({"template": "receipt", "to": to, "data": {"name": "Ann", "order_id": 7, "total": total}})
}

#[tokio::test]
async fn fifty_concurrent_requests_with_one_key_queue_one_message_and_get_one_answer() {
    let s = setup().await;
    let body = receipt("ann@example.com", "12 EUR");
    let answers =
        futures::future::join_all((0..50).map(|_| post(&s, Some("order-7/receipt"), &body))).await;
    let created = answers
        .iter()
        .filter(|(st, _, _)| *st == StatusCode::CREATED)
        .count();
    let repeated = answers
        .iter()
        .filter(|(st, _, _)| *st == StatusCode::OK)
        .count();
    assert_eq!((created, repeated), (1, 49), "{:?}", answers[0]);
    let first = &answers[0].2;
    assert!(
        answers.iter().all(|(_, _, b)| b == first),
        "every answer is the same body"
    );
    let m = parse(first);
    let id = format!("tx:{}:order-7/receipt", s.org);
    assert_eq!(m["id"], id.as_str());
    assert_eq!(
        (m["template"].as_str(), m["template_version"].as_i64()),
        (Some("receipt"), Some(1))
    );

    let (deliveries, messages): (i64, i64) = sqlx::query_as(
        "select (select count(*) from deliveries where kind = 'transactional'),
                (select count(*) from tx_messages)",
    )
    .fetch_one(&s.pool)
    .await
    .unwrap();
    assert_eq!((deliveries, messages), (1, 1));

    // The same key with another payload: refused, nothing new.
    let (st, h, b) = post(
        &s,
        Some("order-7/receipt"),
        &receipt("ann@example.com", "13 EUR"),
    )
    .await;
    assert_eq!(st, StatusCode::CONFLICT, "{b}");
    assert_eq!(h["content-type"], "application/problem+json");
    assert!(
        parse(&b)["detail"]
            .as_str()
            .unwrap()
            .contains("another request"),
        "{b}"
    );
    // The same payload with its keys in another order and other spacing is the same request.
    let reordered = r#"{ "data": {"total": "12 EUR", "order_id": 7, "name": "Ann"}, "to": "ann@example.com", "template": "receipt" }"#;
    let r = reqwest::Client::new()
        .post(format!("{}/api/v1/messages", s.app.base))
        .bearer_auth(&s.token)
        .header("content-type", "application/json")
        .header("idempotency-key", "order-7/receipt")
        .body(reordered)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(&r.text().await.unwrap(), first);

    // One message at the sink, rendered from the request's data.
    let sink = SmtpSink::start();
    deliver(&s.pool, &sink).await;
    deliver(&s.pool, &sink).await;
    let got = sink.messages();
    assert_eq!(got.len(), 1);
    assert!(
        got[0].data.contains("Subject: Receipt 7"),
        "{}",
        got[0].data
    );
    assert!(
        got[0].data.contains("Hi Ann, you paid 12 EUR."),
        "{}",
        got[0].data
    );
    assert!(got[0].data.contains("<p>Hi Ann</p>"), "{}", got[0].data);
    let path = format!("/api/v1/messages/{}", urlencoding(&id));
    let (st, _, state) = call(&s.app, "GET", &path, Some(&s.token)).await;
    assert_eq!(st, StatusCode::OK, "{state}");
    assert_eq!(state["status"], "delivered");
    assert_eq!(state["id"], id.as_str());
    // A day later the same request still answers the same body, and sends nothing.
    sqlx::query("update tx_messages set created_at = created_at - interval '1 day'")
        .execute(&s.pool)
        .await
        .unwrap();
    let (st, _, later) = post(&s, Some("order-7/receipt"), &body).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(parse(&later)["id"], id.as_str());
    deliver(&s.pool, &sink).await;
    assert_eq!(sink.messages().len(), 1);
}

fn urlencoding(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b':' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn bad_requests_name_what_is_wrong_and_queue_nothing() {
    let s = setup().await;
    for (key, body, status, pointer, says) in [
        (
            None,
            receipt("a@example.com", "1"),
            400,
            None,
            "Idempotency-Key",
        ),
        (
            Some("has space"),
            receipt("a@example.com", "1"),
            422,
            Some("Idempotency-Key"),
            "visible ASCII",
        ),
        (
            Some("k1"),
            receipt("not an address", "1"),
            422,
            Some("#/to"),
            "to:",
        ),
        (
            Some("k2"),
            json!({"template": "invoice", "to": "a@example.com"}),
            422,
            Some("#/template"),
            "no template named \"invoice\"",
        ),
        (
            Some("k3"),
            json!({"template": "receipt", "to": "a@example.com", "data": {"name": "Ann"}}),
            422,
            Some("#/data"),
            "missing",
        ),
        (
            Some("k4"),
            json!({"template": "receipt", "to": "a@example.com", "data": [1]}),
            422,
            Some("#/data"),
            "JSON object",
        ),
        (
            Some("k5"),
            json!({"template": "receipt", "to": "a@example.com", "cc": "b@example.com"}),
            422,
            Some("#/"),
            "cc",
        ),
    ] {
        let (st, h, b) = post(&s, key, &body).await;
        assert_eq!(st.as_u16(), status, "{body}: {b}");
        assert_eq!(h["content-type"], "application/problem+json");
        let p = parse(&b);
        if let Some(pointer) = pointer {
            assert_eq!(p["errors"][0]["pointer"], pointer, "{b}");
        }
        assert!(p["detail"].as_str().unwrap().contains(says), "{b}");
    }
    let queued: i64 = sqlx::query_scalar("select count(*) from tx_messages")
        .fetch_one(&s.pool)
        .await
        .unwrap();
    assert_eq!(queued, 0);
    // A key that failed may be used again once the request is right.
    let (st, _, b) = post(&s, Some("k3"), &receipt("a@example.com", "1")).await;
    assert_eq!(st, StatusCode::CREATED, "{b}");
    // Someone else's message, or none, is a 404.
    for id in ["tx:999:k3", "campaign:1:1", "nonsense"] {
        let (st, _, _) = call(
            &s.app,
            "GET",
            &format!("/api/v1/messages/{id}"),
            Some(&s.token),
        )
        .await;
        assert_eq!(st, StatusCode::NOT_FOUND, "{id}");
    }
}

#[tokio::test]
async fn templates_are_versioned_and_a_message_keeps_the_version_it_was_made_from() {
    let s = setup().await;
    let (st, _, first) = post(&s, Some("a"), &receipt("ann@example.com", "1")).await;
    assert_eq!(st, StatusCode::CREATED);
    let id = sqlx::query_scalar::<_, i64>("select id from tx_templates")
        .fetch_one(&s.pool)
        .await
        .unwrap();
    save_template(
        &s,
        Some((id, 1)),
        "Your receipt {{ order_id }}",
        "Thanks {{ name }}: {{ total }}.",
    )
    .await;
    // Editing from a version that is no longer current is refused.
    let (status, body) = s
        .app
        .call_fn(
            &s.owner,
            SaveTemplate {
                id: Some(id),
                expected_version: Some(1),
                name: "receipt".into(),
                subject: "x".into(),
                body_text: "y".into(),
                body_html: String::new(),
                sample_data: String::new(),
            },
        )
        .await;
    assert_eq!(status, 409, "{body}");
    let (st, _, second) = post(&s, Some("b"), &receipt("ann@example.com", "2")).await;
    assert_eq!(st, StatusCode::CREATED);
    assert_eq!(parse(&first)["template_version"], 1);
    assert_eq!(parse(&second)["template_version"], 2);
    let sink = SmtpSink::start();
    deliver(&s.pool, &sink).await;
    let mut subjects: Vec<String> = sink
        .messages()
        .iter()
        .map(|m| {
            m.data
                .lines()
                .find_map(|l| l.strip_prefix("Subject: "))
                .unwrap()
                .to_string()
        })
        .collect();
    subjects.sort();
    assert_eq!(subjects, ["Receipt 7", "Your receipt 7"]);

    // The editor shows the current version and its preview from the sample data.
    let (status, body) = s.app.call_fn(&s.owner, Template { id }).await;
    assert_eq!(status, 200, "{body}");
    let t = parse(&body);
    assert_eq!(t["version"], 2);
    assert_eq!(t["preview"]["Ok"]["subject"], "Your receipt 1", "{t}");
    // A template that does not compile is refused with the part named.
    let (status, body) = s
        .app
        .call_fn(
            &s.owner,
            SaveTemplate {
                id: None,
                expected_version: None,
                name: "broken".into(),
                subject: "{{ x".into(),
                body_text: "y".into(),
                body_html: String::new(),
                sample_data: String::new(),
            },
        )
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("subject"), "{body}");
    let audited: Vec<String> = sqlx::query_scalar(
        "select action from audit_log where object_type = 'template' order by id",
    )
    .fetch_all(&s.pool)
    .await
    .unwrap();
    assert_eq!(audited, ["template.create", "template.save"]);
}

#[tokio::test]
async fn a_hard_bounce_or_complaint_blocks_transactional_mail_and_an_unsubscribe_does_not() {
    let s = setup().await;
    for (email, reason) in [
        ("bounced@example.com", "hard_bounce"),
        ("angry@example.com", "complaint"),
        ("newsless@example.com", "unsubscribed"),
    ] {
        sqlx::query(
            "insert into suppressions (org_id, email_lower, reason, source) values ($1, $2, $3, 'test')",
        )
        .bind(s.org)
        .bind(email)
        .bind(reason)
        .execute(&s.pool)
        .await
        .unwrap();
        let (st, _, b) = post(&s, Some(email), &receipt(email, "1")).await;
        assert_eq!(st, StatusCode::CREATED, "{b}");
    }
    let sink = SmtpSink::start();
    deliver(&s.pool, &sink).await;
    assert_eq!(sink.accepted(), ["newsless@example.com"]);
    let statuses: Vec<(String, String)> = sqlx::query_as(
        "select recipient, status from deliveries where kind = 'transactional' order by recipient",
    )
    .fetch_all(&s.pool)
    .await
    .unwrap();
    assert_eq!(
        statuses,
        [
            ("angry@example.com".into(), "suppressed".into()),
            ("bounced@example.com".into(), "suppressed".into()),
            ("newsless@example.com".into(), "delivered".into()),
        ]
    );
}

#[tokio::test]
async fn erasing_a_subscriber_forgets_their_transactional_mail_and_cancels_what_is_queued() {
    let s = setup().await;
    let sub: i64 = sqlx::query_scalar(
        "insert into subscribers (org_id, email, email_lower) values ($1, 'Ann@Example.com', 'ann@example.com') returning id",
    )
    .bind(s.org)
    .fetch_one(&s.pool)
    .await
    .unwrap();
    let (st, _, _) = post(&s, Some("x"), &receipt("Ann@Example.com", "5 EUR")).await;
    assert_eq!(st, StatusCode::CREATED);
    let (status, body) = s
        .app
        .call_fn(&s.owner, app::api::subscribers::EraseSubscriber { id: sub })
        .await;
    assert_eq!(status, 200, "{body}");
    let (recipient, text, delivery): (String, String, String) = sqlx::query_as(
        "select m.recipient, m.body_text, d.status from tx_messages m
         join deliveries d on d.tx_message_id = m.id",
    )
    .fetch_one(&s.pool)
    .await
    .unwrap();
    assert!(recipient.starts_with("erased-"), "{recipient}");
    assert_eq!((text.as_str(), delivery.as_str()), ("", "cancelled"));
    let leftovers: i64 = sqlx::query_scalar(
        "select count(*) from tx_messages where data::text ilike '%ann%' or subject ilike '%ann%'",
    )
    .fetch_one(&s.pool)
    .await
    .unwrap();
    assert_eq!(leftovers, 0);
}

#[tokio::test]
async fn transactional_mail_is_claimed_after_digests_and_test_mail_and_before_campaigns() {
    let s = setup().await;
    let author: i64 = sqlx::query_scalar("select id from users where org_id = $1")
        .bind(s.org)
        .fetch_one(&s.pool)
        .await
        .unwrap();
    let (_, campaign) = crate::support::fixtures::campaign_deliveries(
        &s.pool,
        s.org,
        author,
        "sending",
        &["reader@example.com".to_string()],
    )
    .await;
    let (st, _, _) = post(&s, Some("k"), &receipt("buyer@example.com", "1")).await;
    assert_eq!(st, StatusCode::CREATED);
    let test = crate::support::helpers::enqueue_test_mail_to(
        &s.pool,
        s.org,
        "dlg",
        &["t@example.com".into()],
    )
    .await;
    let mut order = Vec::new();
    for _ in 0..3 {
        let c = app::db::delivery::claim(&s.pool, 1, 60.0, "t")
            .await
            .unwrap();
        order.push(c[0].job_id());
    }
    assert_eq!(
        order,
        [
            test[0].clone(),
            format!("tx:{}:k", s.org),
            campaign[0].clone()
        ]
    );
}

/// Without an SMTP server the message is written to a file under the data directory; the reply
/// the API shows for it names the file only, never the server's path.
#[tokio::test]
async fn a_captured_message_reply_shows_no_server_path() {
    let s = setup().await;
    let status = token(&s.app, &s.owner, "status", &[ApiScope::DeliveriesRead]).await;
    let (st, _, body) = post(
        &s,
        Some("order-8/receipt"),
        &receipt("ann@example.com", "3"),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{body}");
    let id = format!("tx:{}:order-8/receipt", s.org);

    let dir = tempfile::tempdir().unwrap();
    let cfg = crate::support::fixtures::config_for_capture(dir.path().into());
    let mut worker = Worker::new(s.pool.clone(), cfg, "cap");
    while worker.drain().await.unwrap() > 0 {}
    let file = app::capture::path_for(dir.path(), s.org, &id);
    assert!(file.exists(), "captured to {}", file.display());
    let dir_text = dir.path().display().to_string();

    let paths = [
        (format!("/api/v1/messages/{}", urlencoding(&id)), &s.token),
        (format!("/api/v1/deliveries/{}", urlencoding(&id)), &status),
    ];
    for (path, t) in paths {
        let (st, _, got) = call(&s.app, "GET", &path, Some(t.as_str())).await;
        assert_eq!(st, StatusCode::OK, "{path}: {got}");
        assert_eq!(got["status"], "delivered", "{path}: {got}");
        let reply = got["smtp_reply"].as_str().unwrap_or_default();
        assert!(reply.starts_with("captured"), "{path}: {reply}");
        assert!(!reply.contains(&dir_text), "{path}: {reply}");
        assert!(!reply.contains('/'), "{path}: {reply}");
    }
}
