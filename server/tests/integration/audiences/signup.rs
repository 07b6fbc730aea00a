//! Public sign-up with double opt-in, over real HTTP on a real PostgreSQL and through the
//! delivery engine into a real SMTP sink: a double submit sends one confirmation; the link
//! confirms once (a GET changes nothing); bots without the proof of work, with a spent one, or
//! filling the honeypot record nothing; a suppressed address is re-subscribed only by the
//! confirm click, which is audited; the per-IP limit answers 429; the API's sign-up too.

use app::domain::{ApiScope, Role};
use mailroom::workers::delivery::Worker;
use reqwest::StatusCode;
use testkit::SmtpSink;

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::rest::{send, token};
use crate::support::test_app::{api_config, spawn_app, spawn_app_with, TestApp};

struct Setup {
    pool: sqlx::PgPool,
    org: i64,
    list: i64,
    key: String,
    app: TestApp,
}

async fn setup_with(edge: mailroom::http::Edge) -> Setup {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let (list, key): (i64, String) = sqlx::query_as(
        "insert into lists (org_id, name) values ($1, 'Weekly news') returning id, signup_key",
    )
    .bind(org)
    .fetch_one(&pool)
    .await
    .unwrap();
    let app = spawn_app_with(pool.clone(), api_config(), edge).await;
    Setup {
        pool,
        org,
        list,
        key,
        app,
    }
}

async fn setup() -> Setup {
    setup_with(mailroom::http::Edge::default()).await
}

/// The challenge in a sign-up page's form.
fn challenge_in(page: &str) -> String {
    let at = page
        .find("name=\"pow_challenge\" value=\"")
        .expect("a challenge")
        + 28;
    page[at..].split('"').next().unwrap().to_string()
}

async fn page(s: &Setup, path: &str) -> (StatusCode, String) {
    let r = reqwest::get(format!("{}{path}", s.app.base)).await.unwrap();
    (r.status(), r.text().await.unwrap())
}

async fn post_form(s: &Setup, path: &str, fields: &[(&str, &str)]) -> (StatusCode, String) {
    let body: String = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields)
        .finish();
    let r = reqwest::Client::new()
        .post(format!("{}{path}", s.app.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap();
    (r.status(), r.text().await.unwrap())
}

/// Fetches the form, solves its challenge as the page's script does, and submits.
async fn sign_up(s: &Setup, email: &str, honeypot: &str) -> (StatusCode, String) {
    let (status, form) = page(s, &format!("/s/{}", s.key)).await;
    assert_eq!(status, StatusCode::OK, "{form}");
    let c = challenge_in(&form);
    let answer = app::signup::solve(&c);
    post_form(
        s,
        &format!("/s/{}", s.key),
        &[
            ("email", email),
            ("name", "Ann"),
            ("website", honeypot),
            ("pow_challenge", &c),
            ("pow_answer", &answer),
        ],
    )
    .await
}

async fn count(pool: &sqlx::PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

/// Sends what is queued; answers the confirm link's path in each message sent.
async fn deliver(pool: &sqlx::PgPool) -> Vec<String> {
    let sink = SmtpSink::start();
    let mut worker = Worker::new(pool.clone(), crate::support::fixtures::config(&sink), "t");
    worker.drain().await.unwrap();
    sink.messages()
        .iter()
        .map(|m| {
            let at = m.data.find("/s/confirm/").expect("a confirm link");
            m.data[at..].split_whitespace().next().unwrap().to_string()
        })
        .collect()
}

#[tokio::test]
async fn a_double_submit_sends_one_confirmation_and_its_link_confirms_once() {
    let s = setup().await;
    // A welcome series on the list: it enrols her when she confirms, not when she signs up.
    let welcome = {
        let mut c = s.pool.acquire().await.unwrap();
        let d: app::domain::automation::Definition = serde_json::from_value(serde_json::json!({
            "trigger": {"type": "list_joined", "list_id": s.list},
            "reentry": "once",
            "steps": [{"type": "email", "subject": "Welcome", "body": "Hello"}]
        }))
        .unwrap();
        let owner: i64 = sqlx::query_scalar("select id from users where org_id = $1")
            .bind(s.org)
            .fetch_one(&s.pool)
            .await
            .unwrap();
        let owner = app::domain::UserId(owner);
        let org = app::domain::OrgId(s.org);
        let id = app::db::automation::create(&mut c, org, "Welcome", &d, owner)
            .await
            .unwrap();
        app::db::automation::approve(&mut c, org, id, 1, owner, true)
            .await
            .unwrap();
        id
    };
    let enrolled = || {
        let pool = s.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>("select count(*) from enrolments where automation_id = $1")
                .bind(welcome)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let (status, body) = sign_up(&s, "Ann@Example.com", "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("Check your inbox"), "{body}");
    // Submitted again, four more times at once: still one sign-up and one mail.
    let again = futures::future::join_all((0..4).map(|_| sign_up(&s, "Ann@Example.com", ""))).await;
    assert!(again
        .iter()
        .all(|(st, b)| *st == StatusCode::OK && b.contains("Check your inbox")));
    assert_eq!(count(&s.pool, "select count(*) from signups").await, 1);
    assert_eq!(
        count(
            &s.pool,
            "select count(*) from deliveries where kind = 'confirm'"
        )
        .await,
        1
    );
    let (status, source, ip): (String, String, Option<String>) = sqlx::query_as(
        "select status, optin_source, optin_ip from subscribers where email = 'Ann@Example.com'",
    )
    .fetch_one(&s.pool)
    .await
    .unwrap();
    assert_eq!(
        (status.as_str(), source.as_str()),
        ("unconfirmed", "signup")
    );
    assert_eq!(ip.as_deref(), Some("127.0.0.1"));
    assert_eq!(
        count(&s.pool, "select count(*) from list_members").await,
        0,
        "unconfirmed: on no list, in no audience"
    );
    assert_eq!(enrolled().await, 0, "unconfirmed: in no automation");

    let links = deliver(&s.pool).await;
    assert_eq!(links.len(), 1);
    assert_eq!(deliver(&s.pool).await.len(), 0, "sent once");
    // Opening the link (or a mail scanner following it) changes nothing.
    let (status, body) = page(&s, &links[0]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("Yes, subscribe me"), "{body}");
    assert_eq!(
        count(
            &s.pool,
            "select count(*) from subscribers where status = 'confirmed'"
        )
        .await,
        0
    );
    let (status, body) = post_form(&s, &links[0], &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("confirmed"), "{body}");
    let (status, confirmed_ip, members): (String, Option<String>, i64) = sqlx::query_as(
        "select status, confirmed_ip, (select count(*) from list_members m where m.subscriber_id = s.id and m.list_id = $1)
         from subscribers s where email = 'Ann@Example.com'",
    )
    .bind(s.list)
    .fetch_one(&s.pool)
    .await
    .unwrap();
    assert_eq!(
        (status.as_str(), confirmed_ip.as_deref(), members),
        ("confirmed", Some("127.0.0.1"), 1)
    );
    assert_eq!(enrolled().await, 1, "confirmed: enrolled with the join");
    // The link works once.
    let (status, body) = post_form(&s, &links[0], &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("used already"), "{body}");
    assert_eq!(enrolled().await, 1);
    assert_eq!(
        count(
            &s.pool,
            "select count(*) from audit_log where action = 'subscriber.confirm'"
        )
        .await,
        1
    );
    // A forged link is nothing.
    let forged = links[0].replacen("/s/confirm/", "/s/confirm/9", 1);
    assert_eq!(post_form(&s, &forged, &[]).await.0, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn bots_without_the_proof_of_work_or_filling_the_honeypot_record_nothing() {
    let s = setup().await;
    let path = format!("/s/{}", s.key);
    // No work at all (an embedded form, or a bot): a page that does the work, nothing recorded.
    let (status, body) = post_form(&s, &path, &[("email", "bot@example.com")]).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        body.contains("data-auto=\"1\"") && body.contains("/s/pow.js"),
        "{body}"
    );
    // A challenge not answered, or one made up.
    let (_, form) = page(&s, &path).await;
    let c = challenge_in(&form);
    for (challenge, answer) in [(c.as_str(), "1"), ("1.2.3.4", "5")] {
        let (status, body) = post_form(
            &s,
            &path,
            &[
                ("email", "bot@example.com"),
                ("pow_challenge", challenge),
                ("pow_answer", answer),
            ],
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("data-auto"), "{body}");
    }
    // The honeypot filled: told what people are told, nothing recorded.
    let (status, body) = sign_up(&s, "bot@example.com", "http://spam.example").await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("Check your inbox"));
    assert_eq!(count(&s.pool, "select count(*) from subscribers").await, 0);
    // A solved challenge is spent once: replayed for another address, it records nothing.
    let answer = app::signup::solve(&c);
    let fields = |email| {
        vec![
            ("email", email),
            ("pow_challenge", c.as_str()),
            ("pow_answer", answer.as_str()),
        ]
    };
    let (status, _) = post_form(&s, &path, &fields("ann@example.com")).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = post_form(&s, &path, &fields("bot@example.com")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("data-auto"), "{body}");
    let emails: Vec<String> = sqlx::query_scalar("select email from subscribers")
        .fetch_all(&s.pool)
        .await
        .unwrap();
    assert_eq!(emails, ["ann@example.com"]);
    // A bad address with the work done: the form again, saying what is wrong.
    let (status, body) = sign_up(&s, "not an address", "").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(body.contains("does not work"), "{body}");
    // No such list.
    assert_eq!(page(&s, "/s/nope").await.0, StatusCode::NOT_FOUND);
    let (status, script) = page(&s, "/s/pow.js").await;
    assert_eq!(status, StatusCode::OK);
    assert!(script.contains("crypto.subtle.digest"));
}

#[tokio::test]
async fn a_suppressed_address_is_resubscribed_only_by_the_confirm_click_which_is_recorded() {
    let s = setup().await;
    for (email, reason) in [
        ("left@example.com", "unsubscribed"),
        ("bounced@example.com", "hard_bounce"),
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
        let (status, _) = sign_up(&s, email, "").await;
        assert_eq!(status, StatusCode::OK);
    }
    // Signing up lifts nothing.
    assert_eq!(count(&s.pool, "select count(*) from suppressions").await, 2);
    // Someone who left gets their confirmation; a bounced address gets none.
    let links = deliver(&s.pool).await;
    assert_eq!(links.len(), 1);
    assert_eq!(
        count(
            &s.pool,
            "select count(*) from deliveries where kind = 'confirm' and status = 'suppressed'"
        )
        .await,
        1
    );
    let (status, _) = post_form(&s, &links[0], &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        count(
            &s.pool,
            "select count(*) from suppressions where email_lower = 'left@example.com'"
        )
        .await,
        0,
        "the click re-subscribed them"
    );
    let recorded: Vec<(String, Option<i64>)> = sqlx::query_as(
        "select action, actor_id from audit_log where object_type = 'subscriber' order by id",
    )
    .fetch_all(&s.pool)
    .await
    .unwrap();
    assert_eq!(
        recorded,
        [
            ("subscriber.confirm".to_string(), None),
            ("subscriber.resubscribe".to_string(), None)
        ]
    );
    // They leave again; the old link does not bring them back.
    sqlx::query(
        "insert into suppressions (org_id, email_lower, reason, source) values ($1, 'left@example.com', 'unsubscribed', 'test')",
    )
    .bind(s.org)
    .execute(&s.pool)
    .await
    .unwrap();
    let (_, body) = post_form(&s, &links[0], &[]).await;
    assert!(body.contains("used already"), "{body}");
    assert_eq!(
        count(
            &s.pool,
            "select count(*) from suppressions where email_lower = 'left@example.com'"
        )
        .await,
        1
    );
}

#[tokio::test]
async fn sign_ups_from_one_address_are_limited_and_told_when_to_come_back() {
    let s = setup_with(mailroom::http::Edge {
        signup_limits: mailroom::http::signup::Limits {
            burst: 3.0,
            per_hour: 1.0,
        },
        ..Default::default()
    })
    .await;
    let mut statuses = Vec::new();
    for i in 0..5 {
        statuses.push(sign_up(&s, &format!("p{i}@example.com"), "").await.0);
    }
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    assert_eq!(count(&s.pool, "select count(*) from signups").await, 3);
}

/// `address` with the letters whose bit is set in `mask` in upper case.
fn spelled(address: &str, mask: u32) -> String {
    let mut letter = 0u32;
    address
        .chars()
        .map(|c| {
            if !c.is_ascii_alphabetic() {
                return c;
            }
            let upper = ((mask >> letter) & 1) == 1;
            letter += 1;
            if upper {
                c.to_ascii_uppercase()
            } else {
                c
            }
        })
        .collect()
}

/// [`sign_up`] as a visitor from `ip` (the app trusts `X-Forwarded-For`).
async fn sign_up_from(s: &Setup, email: &str, ip: &str) -> (StatusCode, String) {
    let (status, form) = page(s, &format!("/s/{}", s.key)).await;
    assert_eq!(status, StatusCode::OK, "{form}");
    let c = challenge_in(&form);
    // Off the test's thread: the server runs on it too, and twenty visitors solving at once
    // must not starve it past its header-read timeout.
    let answer = {
        let c = c.clone();
        tokio::task::spawn_blocking(move || app::signup::solve(&c))
            .await
            .unwrap()
    };
    let body: String = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs([
            ("email", email),
            ("name", "Ann"),
            ("pow_challenge", c.as_str()),
            ("pow_answer", answer.as_str()),
        ])
        .finish();
    let r = reqwest::Client::new()
        .post(format!("{}/s/{}", s.app.base, s.key))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("x-forwarded-for", ip)
        .body(body)
        .send()
        .await
        .unwrap();
    (r.status(), r.text().await.unwrap())
}

#[tokio::test]
async fn one_mailbox_signed_up_in_twenty_spellings_gets_one_sign_up_and_one_mail() {
    // Each spelling from its own IP, at once: the per-IP limit is not what stops them.
    let s = setup_with(mailroom::http::Edge {
        trust_proxy: true,
        ..Default::default()
    })
    .await;
    let spellings: Vec<String> = (0..20)
        .map(|m| spelled("ann.case@example.com", m))
        .collect();
    let distinct: std::collections::BTreeSet<&String> = spellings.iter().collect();
    assert_eq!(distinct.len(), 20);
    let setup = &s;
    let answers =
        futures::future::join_all(spellings.iter().enumerate().map(|(i, e)| async move {
            sign_up_from(setup, e, &format!("203.0.113.{}", i + 1)).await
        }))
        .await;
    for (status, body) in &answers {
        assert_eq!(*status, StatusCode::OK, "{body}");
        assert!(body.contains("Check your inbox"), "{body}");
    }
    // One person: one subscriber, one pending sign-up, one confirmation mail.
    assert_eq!(
        count(
            &s.pool,
            "select count(*) from subscribers where email_lower = 'ann.case@example.com'"
        )
        .await,
        1
    );
    assert_eq!(
        count(
            &s.pool,
            "select count(*) from signups where confirmed_at is null"
        )
        .await,
        1
    );
    assert_eq!(
        count(
            &s.pool,
            "select count(*) from deliveries where kind = 'confirm'"
        )
        .await,
        1
    );
    let links = deliver(&s.pool).await;
    assert_eq!(links.len(), 1, "one mail reached the mailbox");
    // Another spelling after the confirmation is still the same person: no second subscriber.
    let (status, _) = post_form(&s, &links[0], &[]).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = sign_up_from(&s, "ANN.CASE@EXAMPLE.COM", "203.0.113.99").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        count(
            &s.pool,
            "select count(*) from subscribers where email_lower = 'ann.case@example.com'"
        )
        .await,
        1
    );
}

#[tokio::test]
async fn the_api_signs_up_with_double_opt_in_once() {
    let pool = test_db().await;
    let initech = TestOrg::with_roles(&pool, "initech", &[Role::Owner]).await;
    let org2 = initech.id.0;
    let app = spawn_app(pool.clone()).await;
    let owner = initech.owner().signed_in(&app).await;
    let t = token(&app, &owner, "signup", &[ApiScope::SubscribersWrite]).await;
    let list: i64 =
        sqlx::query_scalar("insert into lists (org_id, name) values ($1, 'News') returning id")
            .bind(org2)
            .fetch_one(&pool)
            .await
            .unwrap();
    let path = format!("/api/v1/lists/{list}/signups");
    let body = serde_json::json!({"email": "new@example.com", "name": "New"});
    let (st, _, first) = send(&app, "POST", &path, Some(&t), Some(&body)).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{first}");
    assert_eq!(first["queued"], true);
    let (st, _, second) = send(&app, "POST", &path, Some(&t), Some(&body)).await;
    assert_eq!(st, StatusCode::ACCEPTED);
    assert_eq!(
        (second["queued"].clone(), second["signup_id"].clone()),
        (serde_json::json!(false), first["signup_id"].clone())
    );
    let (status, source): (String, String) = sqlx::query_as(
        "select status, optin_source from subscribers where email = 'new@example.com'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((status.as_str(), source.as_str()), ("unconfirmed", "api"));
    assert_eq!(deliver(&pool).await.len(), 1);
    let (st, _, bad) = send(
        &app,
        "POST",
        &path,
        Some(&t),
        Some(&serde_json::json!({"email": "nope"})),
    )
    .await;
    assert_eq!(
        (st, &bad["errors"][0]["pointer"]),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            &serde_json::json!("#/email")
        )
    );
}
