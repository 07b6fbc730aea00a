//! Relay webhooks over real HTTP on a real PostgreSQL: bodies signed the way each provider
//! signs, delivered many times at once (one event, one suppression), forged, replayed, stale
//! or another org's (4xx, nothing written), the soft-bounce rule under concurrency, unmatched
//! events kept and listed, and the owner-only settings.

use app::api::deliveries::DeliveriesPage;
use app::api::feedback::{
    CreateWebhookEndpoint, FeedbackEvents, FeedbackSettings, RevokeWebhookEndpoint,
    SaveBounceDomain, SaveBouncePolicy,
};
use app::bounce::{generic, mailgun};
use app::domain::{DeliveryStatus, EmailAddress, JobId, Role};
use serde_json::Value;
use sqlx::PgPool;

use crate::support::fixtures::test_mail_in_states;
use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::test_app::{json, spawn_app, TestApp};

/// Request headers, as (name, value).
type Headers = [(&'static str, String)];

/// A request that must be refused: (what, path, headers, body, the status wanted, what the
/// answer says).
type Refused<'a> = (&'a str, String, &'a Headers, &'a [u8], u16, &'a str);

/// An endpoint of the signed-in owner's org: (URL path, secret).
async fn endpoint(
    app: &TestApp,
    owner: &reqwest::Client,
    source: &str,
    key: &str,
) -> (String, String) {
    let create = CreateWebhookEndpoint {
        source: source.into(),
        signing_key: key.into(),
        topic_arn: String::new(),
        certificate: String::new(),
    };
    let (status, body) = app.call_fn(owner, create).await;
    assert_eq!(status, 200, "{body}");
    let v = json(&body);
    let secret = v["secret"].as_str().map_or(key.to_string(), str::to_string);
    (v["path"].as_str().unwrap().to_string(), secret)
}

/// The database's clock, unix seconds (what the server checks signatures against).
async fn db_now(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select extract(epoch from now())::bigint")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// A body and its Standard Webhooks headers.
fn generic_request(
    secret: &str,
    id: &str,
    ts: i64,
    events: Value,
) -> (Vec<u8>, Vec<(&'static str, String)>) {
    let body = serde_json::to_vec(&serde_json::json!({ "events": events })).unwrap();
    let sig = generic::sign(secret, id, ts, &body).unwrap();
    let headers = vec![
        ("webhook-id", id.to_string()),
        ("webhook-timestamp", ts.to_string()),
        ("webhook-signature", sig),
    ];
    (body, headers)
}

async fn post(app: &TestApp, path: &str, headers: &[(&str, String)], body: &[u8]) -> (u16, String) {
    let mut r = reqwest::Client::new().post(format!("{}{path}", app.base));
    for (k, v) in headers {
        r = r.header(*k, v);
    }
    let r = r.body(body.to_vec()).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// (events, suppressions, audit rows, nonces) in the whole database.
async fn counts(pool: &PgPool) -> (i64, i64, i64, i64) {
    sqlx::query_as(
        "select (select count(*) from delivery_events), (select count(*) from suppressions),
                (select count(*) from audit_log), (select count(*) from webhook_nonces)",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

fn mailgun_body(key: &str, ts: i64, token: &str, event: Value) -> Vec<u8> {
    let sig = mailgun::sign(key, &ts.to_string(), token);
    serde_json::to_vec(&serde_json::json!({
        "signature": { "timestamp": ts.to_string(), "token": token, "signature": sig },
        "event-data": event,
    }))
    .unwrap()
}

const MAILGUN_KEY: &str = "key-3ax6xnjp29jd6fds4gc373sgvjxteol0";

/// A SendGrid-style key pair: (the verification key as SendGrid shows it, the signing key).
fn sendgrid_keys() -> (String, openssl::pkey::PKey<openssl::pkey::Private>) {
    use openssl::ec::{EcGroup, EcKey};
    let group = EcGroup::from_curve_name(openssl::nid::Nid::X9_62_PRIME256V1).unwrap();
    let pkey = openssl::pkey::PKey::from_ec_key(EcKey::generate(&group).unwrap()).unwrap();
    use base64::Engine;
    let public =
        base64::engine::general_purpose::STANDARD.encode(pkey.public_key_to_der().unwrap());
    (public, pkey)
}

/// SendGrid's signature headers for `body` at `ts`.
fn sendgrid_headers(
    key: &openssl::pkey::PKey<openssl::pkey::Private>,
    ts: i64,
    body: &[u8],
) -> Vec<(&'static str, String)> {
    use base64::Engine;
    let mut s = openssl::sign::Signer::new(openssl::hash::MessageDigest::sha256(), key).unwrap();
    s.update(ts.to_string().as_bytes()).unwrap();
    s.update(body).unwrap();
    let sig = base64::engine::general_purpose::STANDARD.encode(s.sign_to_vec().unwrap());
    vec![
        ("x-twilio-email-event-webhook-signature", sig),
        ("x-twilio-email-event-webhook-timestamp", ts.to_string()),
    ]
}

#[tokio::test]
async fn the_same_event_posted_five_times_at_once_writes_one_event_and_one_suppression() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let jobs = test_mail_in_states(
        &pool,
        org,
        "example.org",
        &[
            ("gen", DeliveryStatus::Delivered, Some("250 ok")),
            ("gun", DeliveryStatus::Delivered, Some("250 ok")),
            ("mark", DeliveryStatus::Delivered, Some("250 ok")),
            ("grid", DeliveryStatus::Delivered, Some("250 ok")),
        ],
    )
    .await;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let now = db_now(&pool).await;

    // Generic: a hard bounce naming the job by our Message-ID.
    let (g_path, g_secret) = endpoint(&app, &owner, "generic", "").await;
    let job: JobId = jobs[0].parse().unwrap();
    let (g_body, g_headers) = generic_request(
        &g_secret,
        "msg_1",
        now,
        serde_json::json!([{ "id": "ev-1", "type": "hard_bounce", "recipient": "gen@example.org",
            "message_id": job.message_id("m.example"), "status": "5.1.1",
            "diagnostic": "550 5.1.1 no such user" }]),
    );
    // Mailgun: a complaint, one token, the same body five times.
    let (m_path, _) = endpoint(&app, &owner, "mailgun", MAILGUN_KEY).await;
    let m_body = mailgun_body(
        MAILGUN_KEY,
        now,
        &"t".repeat(50),
        serde_json::json!({ "id": "mg-1", "event": "complained", "recipient": "gun@example.org",
            "timestamp": now as f64 }),
    );
    // Postmark: a hard bounce, the secret as basic auth; matched by recipient.
    let (p_path, p_secret) = endpoint(&app, &owner, "postmark", "").await;
    let p_body = serde_json::to_vec(&serde_json::json!({
        "RecordType": "Bounce", "ID": 42, "TypeCode": 1, "Email": "mark@example.org",
        "Details": "smtp;550 5.1.1 unknown user" }))
    .unwrap();
    use base64::Engine;
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("x:{p_secret}"))
    );
    let p_headers = vec![("authorization", basic)];
    // SendGrid: a blocked bounce (soft) and a spam report in one signed batch.
    let (sg_public, sg_private) = sendgrid_keys();
    let (s_path, _) = endpoint(&app, &owner, "sendgrid", &sg_public).await;
    let s_body = format!(
        "{}\r\n",
        serde_json::json!([
            { "email": "grid@example.org", "event": "spamreport", "sg_event_id": "sg-1", "timestamp": now },
            { "email": "grid@example.org", "event": "delivered", "sg_event_id": "sg-2", "timestamp": now },
        ])
    )
    .into_bytes();
    let s_headers = sendgrid_headers(&sg_private, now, &s_body);

    let requests: [(&str, &Headers, &[u8]); 4] = [
        (&g_path, &g_headers, &g_body),
        (&m_path, &[], &m_body),
        (&p_path, &p_headers, &p_body),
        (&s_path, &s_headers, &s_body),
    ];
    for (path, headers, body) in requests {
        let answers =
            futures::future::join_all((0..5).map(|_| post(&app, path, headers, body))).await;
        let mut new = 0;
        for (status, text) in &answers {
            assert_eq!(*status, 200, "{path}: {text}");
            new += json(text)["new"].as_i64().unwrap();
        }
        assert_eq!(
            new, 1,
            "{path}: exactly one answer recorded it: {answers:?}"
        );
    }
    let rows: Vec<(String, String, Option<String>, String, String)> = sqlx::query_as(
        "select source, kind, job_id, matched_by, effect from delivery_events order by source",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        vec![
            (
                "generic".into(),
                "hard_bounce".into(),
                Some(jobs[0].clone()),
                "message_id".into(),
                "suppressed".into()
            ),
            (
                "mailgun".into(),
                "complaint".into(),
                Some(jobs[1].clone()),
                "recipient".into(),
                "suppressed".into()
            ),
            (
                "postmark".into(),
                "hard_bounce".into(),
                Some(jobs[2].clone()),
                "recipient".into(),
                "suppressed".into()
            ),
            (
                "sendgrid".into(),
                "complaint".into(),
                Some(jobs[3].clone()),
                "recipient".into(),
                "suppressed".into()
            ),
        ]
    );
    let suppressed: Vec<(String, String, String)> = sqlx::query_as(
        "select email_lower, reason, source from suppressions where org_id = $1 order by 1",
    )
    .bind(org)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        suppressed,
        vec![
            (
                "gen@example.org".into(),
                "hard_bounce".into(),
                "generic 5.1.1".into()
            ),
            (
                "grid@example.org".into(),
                "complaint".into(),
                "sendgrid complaint".into()
            ),
            (
                "gun@example.org".into(),
                "complaint".into(),
                "mailgun complaint".into()
            ),
            (
                "mark@example.org".into(),
                "hard_bounce".into(),
                "postmark hard_bounce".into()
            ),
        ]
    );
    // The Deliveries page says what happened after "delivered", with the raw diagnostic.
    let query = DeliveriesPage {
        status: None,
        kind: None,
        recipient: Some("gen@".into()),
        after: None,
    };
    let (_, page) = app.call_fn(&owner, query).await;
    let row = &json(&page)["rows"][0];
    assert_eq!(row["status"], "delivered", "{page}");
    let what = row["reported"][0].as_str().unwrap();
    assert!(
        what.starts_with("hard_bounce 5.1.1 at ") && what.ends_with(" via generic"),
        "{what}"
    );
    assert_eq!(row["reported"][1], "550 5.1.1 no such user");
    // A retry a day later (here: after the fact) is answered 200 and changes nothing.
    let before = counts(&pool).await;
    let (status, text) = post(&app, &m_path, &[], &m_body).await;
    assert_eq!(
        (status, json(&text)["new"].as_i64()),
        (200, Some(0)),
        "{text}"
    );
    assert_eq!(counts(&pool).await, before);
}

#[tokio::test]
async fn forged_stale_replayed_revoked_or_other_org_events_are_refused_and_write_nothing() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let other = TestOrg::with_roles(&pool, "other", &[Role::Owner]).await;
    let other_org = other.id.0;
    let theirs = test_mail_in_states(
        &pool,
        other_org,
        "their.example",
        &[("victim", DeliveryStatus::Delivered, Some("250 ok"))],
    )
    .await;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let (g_path, g_secret) = endpoint(&app, &owner, "generic", "").await;
    let (m_path, _) = endpoint(&app, &owner, "mailgun", MAILGUN_KEY).await;
    let (p_path, p_secret) = endpoint(&app, &owner, "postmark", "").await;
    let (sg_public, _) = sendgrid_keys();
    let (s_path, _) = endpoint(&app, &owner, "sendgrid", &sg_public).await;
    let before = counts(&pool).await;
    let now = db_now(&pool).await;
    let bounce = |to: &str| serde_json::json!([{ "id": format!("ev-{to}"), "type": "hard_bounce", "recipient": to }]);

    let (body, headers) = generic_request(&g_secret, "m1", now, bounce("a@example.org"));
    let mut tampered = body.clone();
    let at = tampered.len() - 10;
    tampered[at] = b'x';
    let (_, stale) = generic_request(&g_secret, "m1", now - 301, bounce("a@example.org"));
    let (_, wrong_key) = generic_request(
        "whsec_AAAAAAAAAAAAAAAAAAAAAAAA",
        "m1",
        now,
        bounce("a@example.org"),
    );
    let (other_org_body, other_org_headers) = generic_request(
        &g_secret,
        "m2",
        now,
        serde_json::json!([{ "id": "ev-x", "type": "complaint", "recipient": "victim@their.example",
            "message_id": theirs[0].parse::<JobId>().unwrap().message_id("m.example") }]),
    );
    let token = "r".repeat(50);
    let first = mailgun_body(
        MAILGUN_KEY,
        now,
        &token,
        serde_json::json!({ "id": "mg-2",
        "event": "failed", "severity": "permanent", "recipient": "b@example.org", "timestamp": now as f64 }),
    );
    let replay = mailgun_body(
        MAILGUN_KEY,
        now,
        &token,
        serde_json::json!({ "id": "mg-3",
        "event": "failed", "severity": "permanent", "recipient": "c@example.org", "timestamp": now as f64 }),
    );
    let stale_mailgun = mailgun_body(
        MAILGUN_KEY,
        now - 3601,
        &"s".repeat(50),
        serde_json::json!({ "id": "mg-4",
        "event": "complained", "recipient": "d@example.org", "timestamp": now as f64 }),
    );
    let postmark = serde_json::to_vec(&serde_json::json!({
        "RecordType": "SpamComplaint", "ID": 7, "Email": "e@example.org" }))
    .unwrap();

    let none: Vec<(&str, String)> = Vec::new();
    let sendgrid_body = br#"[{"email":"g@example.org","event":"bounce","sg_event_id":"x1"}]"#;
    let (_, impostor) = sendgrid_keys();
    let forged_sendgrid = sendgrid_headers(&impostor, now, sendgrid_body);
    let cases: Vec<Refused> = vec![
        (
            "tampered body",
            g_path.clone(),
            &headers,
            &tampered,
            401,
            "does not match",
        ),
        (
            "stale timestamp",
            g_path.clone(),
            &stale,
            &body,
            401,
            "away from the server's clock",
        ),
        (
            "another key",
            g_path.clone(),
            &wrong_key,
            &body,
            401,
            "does not match",
        ),
        ("unsigned", g_path.clone(), &none, &body, 401, "not signed"),
        (
            "another org's message",
            g_path.clone(),
            &other_org_headers,
            &other_org_body,
            409,
            "did not send",
        ),
        (
            "stale Mailgun timestamp",
            m_path.clone(),
            &none,
            &stale_mailgun,
            401,
            "an hour",
        ),
        (
            "Postmark without its secret",
            p_path.clone(),
            &none,
            &postmark,
            401,
            "secret",
        ),
        (
            "Postmark with a wrong secret",
            format!("{p_path}/not-{p_secret}"),
            &none,
            &postmark,
            401,
            "secret",
        ),
        (
            "SendGrid signed by another key",
            s_path.clone(),
            &forged_sendgrid,
            sendgrid_body,
            401,
            "does not match",
        ),
        (
            "no such endpoint",
            "/hooks/v1/generic/AAAAAAAAAAAAAAAAAAAAAAAA".into(),
            &headers,
            &body,
            404,
            "No such",
        ),
        (
            "the endpoint under another source",
            g_path.replace("generic", "mailgun"),
            &none,
            &first,
            404,
            "No such",
        ),
    ];
    for (what, path, headers, body, want, says) in cases {
        let (status, text) = post(&app, &path, headers, body).await;
        assert_eq!(status, want, "{what}: {text}");
        assert!(text.contains(says), "{what}: {text}");
        assert!(
            !text.contains("sqlx") && !text.contains("SELECT"),
            "{what} leaks: {text}"
        );
        assert_eq!(counts(&pool).await, before, "{what} wrote something");
    }
    // Mailgun: the first use of a token is taken, another body with it is a replay.
    assert_eq!(post(&app, &m_path, &none, &first).await.0, 200);
    let taken = counts(&pool).await;
    let (status, text) = post(&app, &m_path, &none, &replay).await;
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("replay"), "{text}");
    assert_eq!(counts(&pool).await, taken);
    // A revoked endpoint is gone at once.
    let id = g_path.rsplit('/').next().unwrap().to_string();
    let (status, body_text) = app.call_fn(&owner, RevokeWebhookEndpoint { id }).await;
    assert_eq!(status, 200, "{body_text}");
    let (fresh_body, fresh_headers) = generic_request(
        &g_secret,
        "m3",
        db_now(&pool).await,
        bounce("f@example.org"),
    );
    assert_eq!(
        post(&app, &g_path, &fresh_headers, &fresh_body).await.0,
        404
    );
    let victim: i64 = sqlx::query_scalar("select count(*) from suppressions where org_id = $1")
        .bind(other_org)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(victim, 0, "nothing reached the other org");
}

#[tokio::test]
async fn soft_bounces_arriving_at_once_suppress_exactly_at_the_threshold() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let (path, secret) = endpoint(&app, &owner, "generic", "").await;
    for round in 0..3 {
        let to = format!("full{round}@example.org");
        let now = db_now(&pool).await;
        // Three distinct soft bounces (the default threshold) in three requests at once.
        let requests: Vec<_> = (0..3)
            .map(|k| {
                generic_request(
                    &secret,
                    &format!("m{round}{k}"),
                    now,
                    serde_json::json!([{ "id": format!("soft-{round}-{k}"), "type": "soft_bounce",
                        "recipient": to, "status": "4.2.2", "diagnostic": "mailbox full" }]),
                )
            })
            .collect();
        let answers = futures::future::join_all(
            requests
                .iter()
                .map(|(body, headers)| post(&app, &path, headers, body)),
        )
        .await;
        assert!(answers.iter().all(|a| a.0 == 200), "{answers:?}");
        let effects: Vec<String> = sqlx::query_scalar(
            "select effect from delivery_events where email_lower = $1 order by effect",
        )
        .bind(&to)
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(
            effects,
            ["counted", "counted", "suppressed"],
            "round {round}"
        );
        let reason: String = sqlx::query_scalar(
            "select reason from suppressions where org_id = $1 and email_lower = $2",
        )
        .bind(org)
        .bind(&to)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(reason, "soft_bounce");
    }
    // A soft-bounce suppression stops campaigns, not digests (the existing rule).
    assert!(!app::domain::SuppressionReason::SoftBounce.stops_all_mail());
}

#[tokio::test]
async fn unmatched_events_are_kept_and_listed_and_the_policy_is_the_owners() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner, Role::Viewer]).await;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let viewer = acme.users[1].signed_in(&app).await;
    let (path, secret) = endpoint(&app, &owner, "generic", "").await;
    let (body, headers) = generic_request(
        &secret,
        "m1",
        db_now(&pool).await,
        serde_json::json!([{ "id": "lost-1", "type": "hard_bounce", "recipient": "Nobody@Example.org",
            "message_id": "<0100018c@email.amazonses.com>", "status": "5.1.1" }]),
    );
    assert_eq!(post(&app, &path, &headers, &body).await.0, 200);
    let (status, listed) = app
        .call_fn(&viewer, FeedbackEvents { unmatched: true })
        .await;
    assert_eq!(status, 200, "{listed}");
    let rows = json(&listed);
    assert_eq!(rows.as_array().unwrap().len(), 1, "{rows}");
    assert_eq!(
        (
            rows[0]["recipient"].as_str(),
            rows[0]["job_id"].as_str(),
            rows[0]["effect"].as_str()
        ),
        (Some("nobody@example.org"), None, Some("suppressed")),
        "an unmatched hard bounce still suppresses the address"
    );
    assert!(EmailAddress::parse("nobody@example.org").is_ok());

    // The policy: owners only, audited, bad values named.
    let save = |t: i32, d: i32| SaveBouncePolicy {
        soft_threshold: t,
        soft_days: d,
        pause_bounce_pct: 4.0,
        pause_complaint_pct: 0.2,
        pause_min_delivered: 300,
    };
    let (status, body) = app.call_fn(&viewer, save(5, 10)).await;
    assert_eq!(
        (status.as_u16(), json(&body)),
        (403, Value::from("Forbidden"))
    );
    let (status, body) = app.call_fn(&owner, save(0, 10)).await;
    assert_eq!(status, 422);
    assert!(body.contains("between 1 and 100"), "{body}");
    let (status, body) = app.call_fn(&owner, save(5, 10)).await;
    assert_eq!(status, 200, "{body}");
    let (_, body) = app.call_fn(&viewer, FeedbackSettings {}).await;
    let s = json(&body);
    assert_eq!(
        (
            s["policy"]["soft_threshold"].as_i64(),
            s["policy"]["soft_days"].as_i64(),
            s["policy"]["pause_bounce_pct"].as_f64(),
            s["policy"]["pause_complaint_pct"].as_f64(),
            s["policy"]["pause_min_delivered"].as_i64(),
            s["can_manage"].as_bool()
        ),
        (
            Some(5),
            Some(10),
            Some(4.0),
            Some(0.2),
            Some(300),
            Some(false)
        )
    );
    assert_eq!(s["endpoints"].as_array().unwrap().len(), 1);
    assert!(!body.contains(&secret), "the secret is never shown again");
    let audited: Vec<String> =
        sqlx::query_scalar("select action from audit_log where action like 'settings.bounce%' or action like 'webhook.%' order by id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(audited, ["webhook.create", "settings.bounce_policy"]);

    // The bounce domain: owners only, a DNS name, one org's, audited.
    let domain = |d: &str| SaveBounceDomain { domain: d.into() };
    let (status, _) = app.call_fn(&viewer, domain("bounce.acme.test")).await;
    assert_eq!(status, 403);
    let (status, body) = app.call_fn(&owner, domain("not a domain")).await;
    assert_eq!(status, 422);
    assert!(body.contains("Bounce domain"), "{body}");
    let (status, body) = app.call_fn(&owner, domain("Bounce.Acme.TEST.")).await;
    assert_eq!(status, 200, "{body}");
    let (_, body) = app.call_fn(&viewer, FeedbackSettings {}).await;
    assert_eq!(json(&body)["bounce_domain"], "bounce.acme.test");
    let globex = TestOrg::with_roles(&pool, "globex", &[Role::Owner]).await;
    let other = globex.id.0;
    let mut conn = pool.acquire().await.unwrap();
    let taken =
        app::db::reports::save_bounce_domain(&mut conn, other, Some("bounce.acme.test")).await;
    assert!(matches!(taken, Err(app::db::reports::DomainError::Taken)));
    drop(conn);
    let (status, _) = app.call_fn(&owner, domain("")).await;
    assert_eq!(status, 200);
    let changes: Vec<serde_json::Value> = sqlx::query_scalar(
        "select after from audit_log where action = 'settings.bounce_domain' order by id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        changes,
        vec![
            serde_json::json!({ "bounce_domain": "bounce.acme.test" }),
            serde_json::json!({ "bounce_domain": null })
        ]
    );
    // Viewers create no endpoints; a Mailgun endpoint needs its signing key.
    let create = |source: &str, key: &str| CreateWebhookEndpoint {
        source: source.into(),
        signing_key: key.into(),
        topic_arn: String::new(),
        certificate: String::new(),
    };
    let (status, _) = app.call_fn(&viewer, create("generic", "")).await;
    assert_eq!(status, 403);
    let (status, body) = app.call_fn(&owner, create("mailgun", "")).await;
    assert_eq!(status, 422);
    assert!(body.contains("Mailgun signing key"), "{body}");
    let (status, body) = app.call_fn(&owner, create("sparkpost", "")).await;
    assert_eq!(status, 422);
    assert!(body.contains("sparkpost"), "{body}");
}

/// SES through SNS: the owner pins the topic and the signing certificate; the subscription's
/// confirmation becomes a link in Settings (nothing is fetched), a notification a suppression.
#[tokio::test]
async fn ses_through_sns_keeps_the_confirmation_link_and_records_a_pinned_bounce() {
    use openssl::asn1::Asn1Time;
    use openssl::pkey::PKey;
    use openssl::x509::X509Builder;
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let jobs = test_mail_in_states(
        &pool,
        org,
        "example.com",
        &[("jane", DeliveryStatus::Delivered, Some("250 ok"))],
    )
    .await;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let key = PKey::from_rsa(openssl::rsa::Rsa::generate(2048).unwrap()).unwrap();
    let mut b = X509Builder::new().unwrap();
    b.set_pubkey(&key).unwrap();
    b.set_not_before(&Asn1Time::days_from_now(0).unwrap())
        .unwrap();
    b.set_not_after(&Asn1Time::days_from_now(1).unwrap())
        .unwrap();
    b.sign(&key, openssl::hash::MessageDigest::sha256())
        .unwrap();
    let pem = String::from_utf8(b.build().to_pem().unwrap()).unwrap();
    let topic = "arn:aws:sns:eu-west-1:123456789012:ses-events";
    let create = |topic_arn: &str, certificate: &str| CreateWebhookEndpoint {
        source: "ses".into(),
        signing_key: String::new(),
        topic_arn: topic_arn.into(),
        certificate: certificate.into(),
    };
    let (status, body) = app
        .call_fn(&owner, create(topic, "not a certificate"))
        .await;
    assert_eq!(status, 422);
    assert!(body.contains("SNS signing certificate"), "{body}");
    let (status, body) = app.call_fn(&owner, create(topic, &pem)).await;
    assert_eq!(status, 200, "{body}");
    let path = json(&body)["path"].as_str().unwrap().to_string();

    let stamp = chrono::DateTime::from_timestamp(db_now(&pool).await, 0)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let sns = |kind: &str, message: String, extra: Value| {
        let mut m = serde_json::json!({
            "Type": kind, "MessageId": format!("sns-{kind}"), "TopicArn": topic, "Message": message,
            "Timestamp": stamp, "SignatureVersion": "2", "Signature": "",
            "SigningCertURL": "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-test.pem",
        });
        for (k, v) in extra.as_object().unwrap() {
            m[k] = v.clone();
        }
        let sig = app::bounce::ses::sign(&key, &serde_json::to_vec(&m).unwrap()).unwrap();
        m["Signature"] = sig.into();
        serde_json::to_vec(&m).unwrap()
    };
    let confirm_url = "https://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription&Token=abc";
    let confirm = sns(
        "SubscriptionConfirmation",
        "You have chosen to subscribe".into(),
        serde_json::json!({ "Token": "abc", "SubscribeURL": confirm_url }),
    );
    let text_plain = [("content-type", "text/plain; charset=UTF-8".to_string())];
    let (status, text) = post(&app, &path, &text_plain, &confirm).await;
    assert_eq!(status, 200, "{text}");
    let (_, settings) = app.call_fn(&owner, FeedbackSettings {}).await;
    assert_eq!(
        json(&settings)["endpoints"][0]["subscribe_url"],
        confirm_url
    );

    let job: JobId = jobs[0].parse().unwrap();
    let bounce = serde_json::json!({
        "notificationType": "Bounce",
        "bounce": { "bounceType": "Permanent", "bounceSubType": "General", "feedbackId": "0100-fb",
            "bouncedRecipients": [{ "emailAddress": "jane@example.com", "status": "5.1.1",
                "diagnosticCode": "smtp; 550 5.1.1 user unknown" }] },
        "mail": { "messageId": "0100018c-000000", "commonHeaders": { "messageId": job.message_id("m.example") } },
    })
    .to_string();
    let note = sns("Notification", bounce, serde_json::json!({}));
    for _ in 0..2 {
        let (status, text) = post(&app, &path, &text_plain, &note).await;
        assert_eq!(status, 200, "{text}");
    }
    let recorded: Vec<(String, Option<String>, String)> =
        sqlx::query_as("select provider_event_id, job_id, effect from delivery_events")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        recorded,
        [(
            "0100-fb:jane@example.com".into(),
            Some(jobs[0].clone()),
            "suppressed".into()
        )]
    );
    // Another topic, even signed by the pinned key, is refused.
    let mut foreign: Value =
        serde_json::from_slice(&sns("Notification", "{}".into(), serde_json::json!({}))).unwrap();
    foreign["TopicArn"] = "arn:aws:sns:eu-west-1:999999999999:other".into();
    let (status, text) = post(
        &app,
        &path,
        &text_plain,
        &serde_json::to_vec(&foreign).unwrap(),
    )
    .await;
    assert_eq!(status, 401, "{text}");
}

/// A relay's event ids and Mailgun's tokens are unique within the relay, not per customer: org
/// B posting, with its own keys to its own endpoints, the id of org A's next event and the
/// token of A's next Mailgun request must not make A's genuine ones answer "seen before".
#[tokio::test]
async fn another_orgs_event_id_or_token_never_pre_empts_this_orgs_event() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let a = acme.id.0;
    let globex = TestOrg::with_roles(&pool, "globex", &[Role::Owner]).await;
    let b = globex.id.0;
    let app = spawn_app(pool.clone()).await;
    let owner_a = acme.owner().signed_in(&app).await;
    let owner_b = globex.owner().signed_in(&app).await;
    let (ga_path, ga_secret) = endpoint(&app, &owner_a, "generic", "").await;
    let (gb_path, gb_secret) = endpoint(&app, &owner_b, "generic", "").await;
    const KEY_B: &str = "key-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    let (ma_path, _) = endpoint(&app, &owner_a, "mailgun", MAILGUN_KEY).await;
    let (mb_path, _) = endpoint(&app, &owner_b, "mailgun", KEY_B).await;
    let now = db_now(&pool).await;
    let bounce =
        |to: &str| serde_json::json!([{ "id": "ev-next", "type": "hard_bounce", "recipient": to }]);
    let token = "n".repeat(50);
    let mailgun = |key: &str, id: &str, to: &str| {
        mailgun_body(
            key,
            now,
            &token,
            serde_json::json!({ "id": id, "event": "failed", "severity": "permanent",
                "recipient": to, "timestamp": now as f64 }),
        )
    };

    // B first: its own events, recorded for B.
    let (body, headers) = generic_request(&gb_secret, "b-1", now, bounce("decoy@globex.test"));
    let (status, text) = post(&app, &gb_path, &headers, &body).await;
    assert_eq!(
        (status, json(&text)["new"].as_i64()),
        (200, Some(1)),
        "{text}"
    );
    let body = mailgun(KEY_B, "mg-next", "decoy2@globex.test");
    let (status, text) = post(&app, &mb_path, &[], &body).await;
    assert_eq!(
        (status, json(&text)["new"].as_i64()),
        (200, Some(1)),
        "{text}"
    );

    // Then A's genuine events with the same id and the same token: new, and they suppress.
    let (body, headers) = generic_request(&ga_secret, "a-1", now, bounce("victim@acme.test"));
    let (status, text) = post(&app, &ga_path, &headers, &body).await;
    assert_eq!(
        (status, json(&text)["new"].as_i64()),
        (200, Some(1)),
        "{text}"
    );
    let body = mailgun(MAILGUN_KEY, "mg-next", "victim2@acme.test");
    let (status, text) = post(&app, &ma_path, &[], &body).await;
    assert_eq!(
        (status, json(&text)["new"].as_i64()),
        (200, Some(1)),
        "{text}"
    );
    // A's Mailgun token is still taken once within A: the same token with another body is a replay.
    let replay = mailgun(MAILGUN_KEY, "mg-other", "victim3@acme.test");
    assert_eq!(post(&app, &ma_path, &[], &replay).await.0, 409);

    for (org, want) in [
        (a, vec!["victim2@acme.test", "victim@acme.test"]),
        (b, vec!["decoy2@globex.test", "decoy@globex.test"]),
    ] {
        let suppressed: Vec<String> = sqlx::query_scalar(
            "select email_lower from suppressions where org_id = $1 order by email_lower",
        )
        .bind(org)
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(suppressed, want, "org {org}");
    }
}

/// An event about an erased person, matched by their address after erasure, is kept under the
/// address's hash without its diagnostic (which quotes the address): erasure is not undone by
/// a late bounce.
#[tokio::test]
async fn an_event_about_an_erased_address_keeps_only_its_hash() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let (_, jobs) =
        crate::support::bounces::delivered_campaign(&pool, org, acme.owner().id.0, "sent", 1).await;
    let (job, to) = &jobs[0];
    let JobId::Campaign { subscriber_id, .. } = job else {
        unreachable!("a campaign job")
    };
    let mut conn = pool.acquire().await.unwrap();
    app::db::subscribers::erase(&mut conn, org, *subscriber_id)
        .await
        .unwrap()
        .expect("erased");
    let hashed: String = sqlx::query_scalar("select email_lower from subscribers where id = $1")
        .bind(subscriber_id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        hashed,
        EmailAddress::parse(to).unwrap().erased_form(),
        "one erasure rule, in SQL and in Rust"
    );
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let (p_path, p_secret) = endpoint(&app, &owner, "postmark", "").await;
    let body = serde_json::to_vec(&serde_json::json!({
        "RecordType": "Bounce", "ID": 4242, "TypeCode": 1, "Email": to.to_uppercase(),
        "Details": format!("smtp;550 5.1.1 <{to}> unknown user") }))
    .unwrap();
    let (status, text) = post(&app, &format!("{p_path}/{p_secret}"), &[], &body).await;
    assert_eq!(
        (status, json(&text)["new"].as_i64()),
        (200, Some(1)),
        "{text}"
    );
    let kept: Vec<(String, Option<String>, Option<String>)> = sqlx::query_as(
        "select email_lower, diagnostic, job_id from delivery_events where org_id = $1",
    )
    .bind(org)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(kept, vec![(hashed.clone(), None, Some(job.to_string()))]);

    // The person comes back (added again, their address's suppression lifted by an admin):
    // from then on a bounce about them is theirs again, in clear, and suppresses them.
    sqlx::query(
        "insert into subscribers (org_id, email, email_lower, name) values ($1, $2, $2, 'Back')",
    )
    .bind(org)
    .bind(to)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("delete from suppressions where org_id = $1 and email_lower = $2")
        .bind(org)
        .bind(to)
        .execute(&pool)
        .await
        .unwrap();
    let body = serde_json::to_vec(&serde_json::json!({
        "RecordType": "Bounce", "ID": 4243, "TypeCode": 1, "Email": to,
        "Details": "smtp;550 5.1.1 unknown user" }))
    .unwrap();
    let (status, text) = post(&app, &format!("{p_path}/{p_secret}"), &[], &body).await;
    assert_eq!(
        (status, json(&text)["new"].as_i64()),
        (200, Some(1)),
        "{text}"
    );
    let reason: Option<String> = sqlx::query_scalar(
        "select reason from suppressions where org_id = $1 and email_lower = $2",
    )
    .bind(org)
    .bind(to)
    .fetch_optional(&pool)
    .await
    .unwrap();
    assert_eq!(reason.as_deref(), Some("hard_bounce"));
}
