//! Erasure reaches every copy of a person, over real HTTP on a real PostgreSQL: an address
//! added again after its erasure can be erased again; after an erasure no row of the audit log,
//! the subscribers or the sign-ups holds their address, name or IP (a suppression of another
//! address in the same entry stays readable); the captured `.eml` of a message to them is
//! removed, whether the dashboard or the API erased them.

use app::api::subscribers::{AddSubscriber, EraseSubscriber, RemoveSubscriber, SaveSubscriber};
use app::api::suppressions::AddSuppressions;
use app::domain::{ApiScope, Role};
use mailroom::workers::delivery::Worker;
use reqwest::StatusCode;

use crate::support::fixtures::config_for_capture;
use crate::support::helpers::{enqueue_test_mail_to, test_db};
use crate::support::org::TestOrg;
use crate::support::rest::{send, token};
use crate::support::test_app::{api_config, json, spawn_app, spawn_app_with, TestApp};

/// Rows of `table` whose text (every column) contains `needle`, in any case.
async fn rows_naming(pool: &sqlx::PgPool, table: &str, needle: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "select count(*) from {table} t where strpos(lower(t::text), lower($1)) > 0"
    ))
    .bind(needle)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Sends everything queued, capturing it into `dir`.
async fn capture_all(pool: &sqlx::PgPool, dir: &std::path::Path) {
    let mut worker = Worker::new(pool.clone(), config_for_capture(dir.into()), "erasure");
    while worker.drain().await.unwrap() > 0 {}
}

/// Posts a form to `path` as a visitor from `ip` (the app trusts `X-Forwarded-For`).
async fn post_from(app: &TestApp, path: &str, ip: &str, fields: &[(&str, &str)]) -> String {
    let body: String = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields)
        .finish();
    let r = reqwest::Client::new()
        .post(format!("{}{path}", app.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("x-forwarded-for", ip)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{path}");
    r.text().await.unwrap()
}

#[tokio::test]
async fn an_erased_address_added_again_can_be_erased_again() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let app = spawn_app(pool.clone()).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let mut erased = Vec::new();
    for round in 0..3 {
        let add = AddSubscriber {
            email: "Twice.Erased@Example.org".into(),
            name: format!("Round {round}"),
            lists: vec![],
        };
        let (status, body) = app.call_fn(&admin, add).await;
        assert_eq!(status, StatusCode::OK, "round {round}: {body}");
        let id = json(&body).as_i64().expect("a subscriber id");
        let (status, body) = app.call_fn(&admin, EraseSubscriber { id }).await;
        assert_eq!(status, StatusCode::OK, "round {round}: {body}");
        assert!(body.contains("personal data was erased"), "{body}");
        erased.push(id);
    }
    // Three rows, each erased, each with its own erased address; the hash they share is what
    // the suppression and the ledger match by.
    let rows: Vec<(String, String, bool)> = sqlx::query_as(
        "select email, email_lower, erased_at is not null from subscribers where id = any($1) order by id",
    )
    .bind(&erased)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 3);
    let hash: String = sqlx::query_scalar(
        "select 'erased-' || encode(sha256(convert_to('twice.erased@example.org', 'UTF8')), 'hex')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    for (email, lower, was_erased) in &rows {
        assert!(*was_erased);
        assert_eq!(lower, &hash);
        assert!(email.starts_with("erased-"), "{email}");
        assert!(!email.to_lowercase().contains("twice"), "{email}");
    }
    let distinct: std::collections::BTreeSet<&String> = rows.iter().map(|r| &r.0).collect();
    assert_eq!(distinct.len(), 3, "{rows:?}");
    assert_eq!(
        rows_naming(&pool, "suppressions", &hash).await,
        1,
        "the hash stays suppressed"
    );
}

#[tokio::test]
async fn erasure_leaves_no_address_name_or_ip_behind_and_removes_captured_copies() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id.0;
    let (list, key): (i64, String) = sqlx::query_as(
        "insert into lists (org_id, name) values ($1, 'Weekly news') returning id, signup_key",
    )
    .bind(org)
    .fetch_one(&pool)
    .await
    .unwrap();
    let captured = tempfile::tempdir().unwrap();
    let api = app::api::ApiConfig {
        captured_dir: Some(captured.path().into()),
        ..api_config()
    };
    let edge = mailroom::http::Edge {
        trust_proxy: true,
        ..Default::default()
    };
    let app = spawn_app_with(pool.clone(), api, edge).await;
    let (address, name) = ("zed.erase@example.org", "Zedediah");
    let (signup_ip, confirm_ip) = ("198.51.100.23", "198.51.100.24");

    // They sign up from one IP (the form's work done as its script does it) ...
    let form = reqwest::get(format!("{}/s/{key}", app.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let at = form.find("name=\"pow_challenge\" value=\"").unwrap() + 28;
    let challenge = form[at..].split('"').next().unwrap().to_string();
    let answer = app::signup::solve(&challenge);
    let page = post_from(
        &app,
        &format!("/s/{key}"),
        signup_ip,
        &[
            ("email", "Zed.Erase@Example.org"),
            ("name", "Zedediah Quux"),
            ("pow_challenge", &challenge),
            ("pow_answer", &answer),
        ],
    )
    .await;
    assert!(page.contains("Check your inbox"), "{page}");
    // ... their confirmation is captured, and they confirm from another.
    capture_all(&pool, captured.path()).await;
    let job: String = sqlx::query_scalar("select job_id from deliveries where kind = 'confirm'")
        .fetch_one(&pool)
        .await
        .unwrap();
    let eml = app::capture::path_for(captured.path(), org, &job);
    let text = std::fs::read_to_string(&eml).unwrap();
    assert!(text.to_lowercase().contains(address), "{text}");
    let link = text[text.find("/s/confirm/").expect("a confirm link")..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let page = post_from(&app, &link, confirm_ip, &[]).await;
    assert!(page.contains("confirmed"), "{page}");
    let id: i64 =
        sqlx::query_scalar("select id from subscribers where email = 'Zed.Erase@Example.org'")
            .fetch_one(&pool)
            .await
            .unwrap();

    // An admin renames them, adds and removes other spellings, and suppresses the address
    // together with someone else's: all of it audited.
    let admin = acme.admin(0).signed_in(&app).await;
    let save = SaveSubscriber {
        id,
        name: "Zedediah Q.".into(),
        status: "confirmed".into(),
        lists: vec![list],
    };
    assert_eq!(app.call_fn(&admin, save).await.0, StatusCode::OK);
    for (spelling, who, kept) in [
        ("ZED.ERASE@example.org", "Zedediah Variant", true),
        ("zed.Erase@EXAMPLE.org", "Zedediah Removed", false),
    ] {
        let add = AddSubscriber {
            email: spelling.into(),
            name: who.into(),
            lists: vec![list],
        };
        let (status, body) = app.call_fn(&admin, add).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        if !kept {
            let id = json(&body).as_i64().unwrap();
            let (status, body) = app.call_fn(&admin, RemoveSubscriber { id }).await;
            assert_eq!(status, StatusCode::OK, "{body}");
        }
    }
    let suppress = AddSuppressions {
        addresses: "zed.erase@example.org, keep@example.org".into(),
    };
    assert_eq!(app.call_fn(&admin, suppress).await.0, StatusCode::OK);
    // The test means something: every one of them is on record before the erasure.
    for needle in [address, name, signup_ip, confirm_ip] {
        let before = rows_naming(&pool, "audit_log", needle).await
            + rows_naming(&pool, "subscribers", needle).await
            + rows_naming(&pool, "signups", needle).await;
        assert!(before > 0, "{needle} is on record before the erasure");
    }
    assert!(rows_naming(&pool, "audit_log", address).await > 0);
    assert!(rows_naming(&pool, "audit_log", confirm_ip).await > 0);

    let (status, body) = app.call_fn(&admin, EraseSubscriber { id }).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("with 1 other spellings"), "{body}");

    for needle in [address, name, signup_ip, confirm_ip] {
        for table in ["audit_log", "subscribers", "signups", "deliveries"] {
            assert_eq!(
                rows_naming(&pool, table, needle).await,
                0,
                "{table} still holds {needle}"
            );
        }
    }
    // The other address of the suppression entry is untouched, and every entry is still there.
    assert_eq!(rows_naming(&pool, "audit_log", "keep@example.org").await, 1);
    let actions: Vec<String> = sqlx::query_scalar(
        "select action from audit_log where object_type = 'subscriber' order by id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        actions,
        [
            "subscriber.confirm",
            "subscriber.edit",
            "subscriber.add",
            "subscriber.add",
            "subscriber.remove",
            "subscriber.erase"
        ]
    );
    // Their captured confirmation is gone with them.
    assert!(!eml.exists(), "{} is still there", eml.display());
}

#[tokio::test]
async fn the_api_erasure_removes_captured_copies_too() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let captured = tempfile::tempdir().unwrap();
    let api = app::api::ApiConfig {
        captured_dir: Some(captured.path().into()),
        ..api_config()
    };
    let app = spawn_app_with(pool.clone(), api, mailroom::http::Edge::default()).await;
    let owner = acme.owner().signed_in(&app).await;
    let t = token(&app, &owner, "erase", &[ApiScope::SubscribersWrite]).await;
    let jobs = enqueue_test_mail_to(
        &pool,
        org,
        "cap",
        &[
            "API.Erased@example.org".to_string(),
            "kept@example.org".to_string(),
        ],
    )
    .await;
    capture_all(&pool, captured.path()).await;
    let files: Vec<_> = jobs
        .iter()
        .map(|j| app::capture::path_for(captured.path(), org, j))
        .collect();
    assert!(files.iter().all(|f| f.exists()), "{files:?}");
    let body = serde_json::json!({"email": "api.erased@EXAMPLE.org", "name": "Api"});
    let (st, _, created) = send(&app, "POST", "/api/v1/subscribers", Some(&t), Some(&body)).await;
    assert_eq!(st, StatusCode::CREATED, "{created}");
    let id = created["id"].as_i64().unwrap();
    let path = format!("/api/v1/subscribers/{id}/erase");
    let (st, _, erased) = send(&app, "POST", &path, Some(&t), None).await;
    assert_eq!(st, StatusCode::OK, "{erased}");
    assert!(!files[0].exists(), "the erased person's copy is removed");
    assert!(files[1].exists(), "someone else's stays");
}
