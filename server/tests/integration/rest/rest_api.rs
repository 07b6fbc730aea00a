//! The REST API over real HTTP on a real PostgreSQL: tokens made and revoked by an owner in
//! Settings (shown once, audited), every endpoint of the OpenAPI document refused without a
//! token and without its scope and blind to another org's objects, problem documents naming
//! the field, and a per-token rate limit that two replicas share.

use std::collections::BTreeSet;

use app::api::api_tokens::{ApiTokens, CreateApiToken, RevokeApiToken};
use app::domain::{ApiScope, Role};
use reqwest::StatusCode;
use serde_json::Value;

use crate::support::helpers::{draft, enqueue_test_mail_to, test_db};
use crate::support::org::TestOrg;
use crate::support::rest::{call, send, token};
use crate::support::test_app::{api_config, json, spawn_app, spawn_app_with, TestApp};

/// Every operation of the served OpenAPI document: (method, path template, its scope).
async fn operations(app: &TestApp) -> Vec<(String, String, ApiScope)> {
    let (status, _, doc) = call(app, "GET", "/api/v1/openapi.json", None).await;
    assert_eq!(status, 200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"), "{doc}");
    let mut ops = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let scopes: Vec<&str> = op["security"][0]["token"]
                .as_array()
                .unwrap_or_else(|| panic!("{method} {path} names no scope"))
                .iter()
                .map(|s| s.as_str().unwrap())
                .collect();
            assert_eq!(scopes.len(), 1, "{method} {path}: one scope each");
            ops.push((
                method.to_uppercase(),
                path.clone(),
                scopes[0].parse().unwrap(),
            ));
        }
    }
    assert!(!ops.is_empty());
    ops
}

#[tokio::test]
async fn owners_make_and_revoke_tokens_shown_once_and_audited_and_a_revoked_one_is_refused_at_once()
{
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let admin = acme.admin(0).signed_in(&app).await;

    let create = |name: &str, scopes: &[&str]| CreateApiToken {
        name: name.into(),
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
    };
    // Refusals name what was wrong, and write nothing.
    for (who, args, status, says) in [
        (
            &admin,
            create("x", &["suppressions:read"]),
            403,
            "Forbidden",
        ),
        (&owner, create("", &["suppressions:read"]), 422, "Name"),
        (&owner, create("x", &[]), 422, "at least one scope"),
        (
            &owner,
            create("x", &["suppressions:admin"]),
            422,
            "is not an API scope",
        ),
        (
            &owner,
            create("a\u{202E}b", &["suppressions:read"]),
            422,
            "Name",
        ),
    ] {
        let (s, body) = app.call_fn(who, args).await;
        assert_eq!((s.as_u16(), body.contains(says)), (status, true), "{body}");
    }
    let none: i64 = sqlx::query_scalar("select count(*) from api_tokens")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(none, 0);

    let t = token(&app, &owner, "billing", &[ApiScope::SuppressionsRead]).await;
    assert!(t.starts_with("mrk_") && t.len() > 40, "{t}");
    let (s, body) = app.call_fn(&admin, ApiTokens {}).await;
    assert_eq!(s, 200);
    assert!(!body.contains(&t), "the list never shows the token");
    let listed = json(&body);
    let id = listed["tokens"][0]["id"].as_i64().unwrap();
    assert_eq!(listed["tokens"][0]["name"], "billing");
    assert_eq!(listed["tokens"][0]["last_used"], Value::Null);
    assert_eq!(listed["can_manage"], false);
    let stored: Vec<u8> = sqlx::query_scalar("select token_hash from api_tokens where id = $1")
        .bind(id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(stored, app::auth::hash_token(&t), "only the hash is kept");

    let (s, _, body) = call(
        &app,
        "GET",
        "/api/v1/suppressions/ann@example.com",
        Some(&t),
    )
    .await;
    assert_eq!(
        (s, &body["suppressed"]),
        (StatusCode::OK, &Value::Bool(false))
    );
    let (_, body) = app.call_fn(&owner, ApiTokens {}).await;
    assert_ne!(json(&body)["tokens"][0]["last_used"], Value::Null);

    let (s, body) = app.call_fn(&admin, RevokeApiToken { id }).await;
    assert_eq!(s, 403, "{body}");
    let (s, body) = app.call_fn(&owner, RevokeApiToken { id }).await;
    assert_eq!(s, 200, "{body}");
    let (s, h, body) = call(
        &app,
        "GET",
        "/api/v1/suppressions/ann@example.com",
        Some(&t),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(h["content-type"], "application/problem+json");
    assert!(h["www-authenticate"]
        .to_str()
        .unwrap()
        .starts_with("Bearer"));
    assert!(body["detail"].as_str().unwrap().contains("revoked"));
    let (s, _) = app.call_fn(&owner, RevokeApiToken { id }).await;
    assert_eq!(s, 404, "revoked once");

    let actions: Vec<(String, Option<i64>)> = sqlx::query_as(
        "select action, actor_id from audit_log where object_type = 'api_token' order by id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        actions,
        [
            ("api_token.create".to_string(), Some(acme.owner().id.0)),
            ("api_token.revoke".to_string(), Some(acme.owner().id.0)),
        ]
    );
}

/// Every operation in the OpenAPI document: refused without a token (401), with a token
/// lacking its scope (403, naming it), and, with the scope, blind to another org's object.
/// An operation this table has no case for fails the test.
#[tokio::test]
async fn every_endpoint_needs_a_token_and_its_scope_and_never_reaches_another_org() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let globex = TestOrg::with_roles(&pool, "globex", &[Role::Owner]).await;
    let b_org = globex.id.0;
    let app = spawn_app(pool.clone()).await;
    let a = acme.owner().signed_in(&app).await;
    let b = globex.owner().signed_in(&app).await;
    let a_all = token(&app, &a, "all", &ApiScope::ALL).await;
    let b_all = token(&app, &b, "all", &ApiScope::ALL).await;
    // Org B's object: a suppressed address.
    let theirs = "/api/v1/suppressions/bob@globex.example";
    let (s, _, _) = call(&app, "PUT", theirs, Some(&b_all)).await;
    assert_eq!(s, StatusCode::CREATED);
    // And a delivery of each org.
    let b_job = enqueue_test_mail_to(&pool, b_org, "dlg", &["bob@globex.example".into()]).await;
    // A list of B's with a subscriber on it.
    let b_list: i64 =
        sqlx::query_scalar("insert into lists (org_id, name) values ($1, 'B news') returning id")
            .bind(b_org)
            .fetch_one(&pool)
            .await
            .unwrap();
    let (s, _, b_sub) = send(
        &app,
        "POST",
        "/api/v1/subscribers",
        Some(&b_all),
        Some(&serde_json::json!({"email": "bob@globex.example", "name": "Bob", "list_ids": [b_list]})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{b_sub}");
    let b_sub = b_sub["id"].as_i64().unwrap();
    // A template of B's and a message made from it.
    let (status, body) = app
        .call_fn(
            &b,
            app::api::templates::SaveTemplate {
                id: None,
                expected_version: None,
                name: "receipt".into(),
                subject: "Receipt".into(),
                body_text: "Thanks.".into(),
                body_html: String::new(),
                sample_data: String::new(),
            },
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (s, _, b_msg) = send(
        &app,
        "POST",
        "/api/v1/messages",
        Some(&b_all),
        Some(&serde_json::json!({"template": "receipt", "to": "bob@globex.example"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{b_msg}");
    let b_msg = b_msg["id"].as_str().unwrap().to_string();
    let b_campaign = {
        let mut conn = pool.acquire().await.unwrap();
        draft(&mut conn, b_org, globex.owner().id.0, "B's launch").await
    };

    // A segment of B's.
    let b_segment = {
        let mut conn = pool.acquire().await.unwrap();
        let def: app::domain::segment::Group =
            serde_json::from_value(serde_json::json!({"op": "all"})).unwrap();
        app::db::segment::create(&mut conn, globex.id, "B's segment", &def)
            .await
            .unwrap()
    };

    // A live automation of B's.
    let b_automation = {
        let mut conn = pool.acquire().await.unwrap();
        let def: app::domain::automation::Definition = serde_json::from_value(serde_json::json!({
            "trigger": {"type": "api"}, "reentry": "per_trigger",
            "steps": [{"type": "email", "subject": "B's welcome", "body": "x"}]
        }))
        .unwrap();
        let id = app::db::automation::create(
            &mut conn,
            globex.id,
            "B's series",
            &def,
            globex.owner().id,
        )
        .await
        .unwrap();
        app::db::automation::approve(&mut conn, globex.id, id, 1, globex.owner().id, true)
            .await
            .unwrap();
        id
    };

    let ops = operations(&app).await;
    let mut covered = BTreeSet::new();
    for (method, template, scope) in &ops {
        let path = template
            .replace("{email}", "bob@globex.example")
            .replace("{job_id}", &b_job[0])
            .replace("{list_id}", &b_list.to_string())
            .replace("{subscriber_id}", &b_sub.to_string())
            .replace(
                "{id}",
                &if template.starts_with("/api/v1/campaigns") {
                    b_campaign.to_string()
                } else if template.starts_with("/api/v1/segments") {
                    b_segment.to_string()
                } else if template.starts_with("/api/v1/automations") {
                    b_automation.to_string()
                } else if template.starts_with("/api/v1/messages") {
                    b_msg.clone()
                } else {
                    b_sub.to_string()
                },
            );
        // A well-formed body, so that what is refused is the token, the scope or the org.
        let body = match (method.as_str(), template.as_str()) {
            ("POST", "/api/v1/subscribers") => {
                Some(serde_json::json!({"email": "bob@globex.example", "name": "Not Bob"}))
            }
            ("POST", "/api/v1/subscribers/bulk") => Some(serde_json::json!({"subscribers": [
                {"email": "carol@globex.example", "list_ids": [b_list]},
                {"email": "dan@acme.example"},
            ]})),
            ("PATCH", _) => Some(serde_json::json!({"name": "Not Bob", "list_ids": []})),
            ("POST", "/api/v1/messages") => {
                Some(serde_json::json!({"template": "receipt", "to": "bob@globex.example"}))
            }
            ("POST", "/api/v1/lists/{list_id}/signups") => {
                Some(serde_json::json!({"email": "carol@globex.example"}))
            }
            ("POST" | "PUT", "/api/v1/segments" | "/api/v1/segments/{id}") => Some(
                serde_json::json!({"name": "Mine", "definition": {"op": "all", "children": [
                    {"type": "list", "list_id": b_list},
                ]}}),
            ),
            ("POST", "/api/v1/automations/{id}/enrolments") => {
                Some(serde_json::json!({"id": "k1", "subscriber_id": b_sub}))
            }
            ("POST", "/api/v1/events") => Some(serde_json::json!({"events": [
                {"id": "t1", "subscriber_id": b_sub, "name": "logged_in"},
            ]})),
            _ => None,
        };
        let body = body.as_ref();
        let (s, _, answer) = send(&app, method, &path, None, body).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{method} {path}: {answer}");
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{method} {path}: {answer}");
        let others: Vec<ApiScope> = ApiScope::ALL
            .iter()
            .copied()
            .filter(|x| x != scope)
            .collect();
        let lacking = token(&app, &a, &format!("no {scope}"), &others).await;
        let (s, _, answer) = send(&app, method, &path, Some(&lacking), body).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{method} {path}: {answer}");
        assert!(
            answer["detail"].as_str().unwrap().contains(scope.as_str()),
            "{answer}"
        );

        // With the scope, A's token acts on A's org only.
        let (s, _, body) = send(&app, method, &path, Some(&a_all), body).await;
        match (method.as_str(), template.as_str()) {
            (
                "GET",
                "/api/v1/subscribers"
                | "/api/v1/lists"
                | "/api/v1/campaigns"
                | "/api/v1/segments"
                | "/api/v1/automations",
            ) => {
                assert_eq!(s, StatusCode::OK, "{body}");
                let text = body.to_string();
                assert!(
                    !text.contains("globex") && !text.contains("B news") && !text.contains("B's"),
                    "{body}"
                );
            }
            ("GET", "/api/v1/campaigns/{id}" | "/api/v1/messages/{id}") => {
                assert_eq!(s, StatusCode::NOT_FOUND, "{body}");
            }
            ("POST", "/api/v1/messages") => {
                // B's template is not A's.
                assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
                assert_eq!(body["errors"][0]["pointer"], "#/template", "{body}");
            }
            ("POST", "/api/v1/subscribers") => {
                // A's own subscriber with that address, not B's.
                assert_eq!(s, StatusCode::CREATED, "{body}");
                assert_ne!(body["id"].as_i64(), Some(b_sub));
            }
            ("POST", "/api/v1/subscribers/bulk") => {
                assert_eq!(s, StatusCode::OK, "{body}");
                assert_eq!(body["created"], 1, "{body}");
                assert_eq!(
                    body["errors"][0]["pointer"], "#/subscribers/0/list_ids",
                    "{body}"
                );
            }
            ("GET" | "PATCH" | "DELETE", "/api/v1/subscribers/{id}")
            | ("POST", "/api/v1/subscribers/{id}/erase")
            | ("PUT" | "DELETE", "/api/v1/lists/{list_id}/members/{subscriber_id}")
            | ("POST", "/api/v1/lists/{list_id}/signups") => {
                assert_eq!(s, StatusCode::NOT_FOUND, "{body}");
            }
            ("GET", "/api/v1/suppressions/{email}") => {
                assert_eq!(s, StatusCode::OK);
                assert_eq!(
                    body["suppressed"], false,
                    "B's suppression is not A's: {body}"
                );
            }
            ("DELETE", "/api/v1/suppressions/{email}") => {
                assert_eq!(s, StatusCode::NOT_FOUND, "{body}");
            }
            // B's segment is no one's here; B's list inside a tree names nothing.
            ("GET" | "PUT" | "DELETE", "/api/v1/segments/{id}")
            | ("GET", "/api/v1/segments/{id}/count" | "/api/v1/segments/{id}/members")
            | ("POST", "/api/v1/segments") => {
                assert_eq!(s, StatusCode::NOT_FOUND, "{body}");
            }
            ("POST", "/api/v1/events") => {
                // B's subscriber is no one A knows: refused, never attached.
                assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
                assert_eq!(
                    body["errors"][0]["pointer"], "#/events/0/subscriber_id",
                    "{body}"
                );
                let stored: i64 = sqlx::query_scalar("select count(*) from events")
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                assert_eq!(stored, 0);
            }
            ("GET", "/api/v1/deliveries/{job_id}") => {
                assert_eq!(s, StatusCode::NOT_FOUND, "{body}");
            }
            // B's automation is no one's here, and B's subscriber with it.
            ("GET", "/api/v1/automations/{id}")
            | ("POST", "/api/v1/automations/{id}/enrolments")
            | ("DELETE", "/api/v1/automations/{id}/enrolments/{subscriber_id}") => {
                assert_eq!(s, StatusCode::NOT_FOUND, "{body}");
                let enrolled: i64 = sqlx::query_scalar("select count(*) from enrolments")
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                assert_eq!(enrolled, 0);
            }
            ("PUT", "/api/v1/suppressions/{email}") => {
                // A suppression of A's own; B's row is untouched below.
                assert_eq!(s, StatusCode::CREATED, "{body}");
                assert!(
                    body["source"].as_str().unwrap().starts_with("API token"),
                    "{body}"
                );
                let (s, _, _) = call(&app, "DELETE", &path, Some(&a_all)).await;
                assert_eq!(s, StatusCode::NO_CONTENT);
            }
            other => panic!("no tenancy case for {other:?}: add one"),
        }
        covered.insert((method.clone(), template.clone()));
    }
    assert_eq!(covered.len(), ops.len());
    // A's own subscriber into B's automation: still not found.
    let (s, _, ann) = send(
        &app,
        "POST",
        "/api/v1/subscribers",
        Some(&a_all),
        Some(&serde_json::json!({"email": "ann@acme.example", "name": "Ann"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{ann}");
    let (s, _, body) = send(
        &app,
        "POST",
        &format!("/api/v1/automations/{b_automation}/enrolments"),
        Some(&a_all),
        Some(&serde_json::json!({"id": "k2", "subscriber_id": ann["id"]})),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(
        body["detail"].as_str().map(|d| d.contains("automation")),
        Some(true),
        "{body}"
    );
    let enrolled: i64 = sqlx::query_scalar("select count(*) from enrolments")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(enrolled, 0);
    let (name, erased, lists): (String, bool, i64) = sqlx::query_as(
        "select name, erased_at is not null, (select count(*) from list_members where subscriber_id = s.id)
         from subscribers s where id = $1",
    )
    .bind(b_sub)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (name.as_str(), erased, lists),
        ("Bob", false, 1),
        "B's subscriber untouched"
    );
    let (reason, source): (String, String) = sqlx::query_as(
        "select reason, source from suppressions where org_id = $1 and email_lower = 'bob@globex.example'",
    )
    .bind(b_org)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(reason, "manual");
    assert!(source.starts_with("API token"), "{source}");
}

#[tokio::test]
async fn suppressions_through_the_api_are_checked_added_lifted_and_audited_under_the_token() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let t = token(
        &app,
        &owner,
        "crm",
        &[ApiScope::SuppressionsRead, ApiScope::SuppressionsWrite],
    )
    .await;
    let path = "/api/v1/suppressions/Ann@Example.com";

    let (s, _, body) = call(&app, "PUT", path, Some(&t)).await;
    assert_eq!(s, StatusCode::CREATED, "{body}");
    assert_eq!(body["email"], "ann@example.com");
    assert_eq!(
        (body["suppressed"].clone(), body["reason"].clone()),
        (Value::Bool(true), Value::from("manual"))
    );
    let (s, _, _) = call(
        &app,
        "PUT",
        "/api/v1/suppressions/ann@example.com",
        Some(&t),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "suppressed already");
    let (s, _, body) = call(&app, "GET", path, Some(&t)).await;
    assert_eq!(
        (s, body["suppressed"].clone()),
        (StatusCode::OK, Value::Bool(true))
    );
    let (s, _, _) = call(&app, "DELETE", path, Some(&t)).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, h, body) = call(&app, "DELETE", path, Some(&t)).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(h["content-type"], "application/problem+json");
    assert_eq!(body["status"], 404);

    // The caller's mistakes: a problem document naming the field, nothing written.
    let (s, h, body) = call(&app, "PUT", "/api/v1/suppressions/not-an-address", Some(&t)).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(h["content-type"], "application/problem+json");
    assert_eq!(body["errors"][0]["pointer"], "email");
    assert!(
        body["detail"].as_str().unwrap().contains("not-an-address"),
        "{body}"
    );
    let (s, _, body) = call(&app, "GET", "/api/v1/nothing-here", Some(&t)).await;
    assert_eq!(
        (s, body["status"].clone()),
        (StatusCode::NOT_FOUND, Value::from(404))
    );
    let (s, _, _) = call(&app, "GET", path, Some("mrk_not-a-token")).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);

    let audited: Vec<(String, Option<i64>, Option<i64>)> = sqlx::query_as(
        "select action, actor_id, api_token_id from audit_log where org_id = $1 and object_type = 'suppression' order by id",
    )
    .bind(org)
    .fetch_all(&pool)
    .await
    .unwrap();
    let tid: i64 = sqlx::query_scalar("select id from api_tokens where name = 'crm'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        audited,
        [
            ("suppression.add".to_string(), None, Some(tid)),
            ("suppression.remove".to_string(), None, Some(tid)),
        ]
    );
    let page = app.get_html(&owner, "/settings/audit").await;
    assert!(
        page.contains("API token crm"),
        "the audit log names the token"
    );
}

#[tokio::test]
async fn a_delivery_is_looked_up_by_its_job_id() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let t = token(&app, &owner, "status page", &[ApiScope::DeliveriesRead]).await;
    let jobs = enqueue_test_mail_to(&pool, org, "dlg", &["Ann@Example.com".into()]).await;
    let (s, _, body) = call(
        &app,
        "GET",
        &format!("/api/v1/deliveries/{}", jobs[0]),
        Some(&t),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(body["job_id"], jobs[0].as_str());
    assert_eq!(
        (body["kind"].as_str(), body["status"].as_str()),
        (Some("test"), Some("queued"))
    );
    assert_eq!(body["recipient"], "Ann@Example.com");
    let (s, _, body) = call(
        &app,
        "GET",
        "/api/v1/deliveries/campaign:1:999999",
        Some(&t),
    )
    .await;
    assert_eq!(
        (s, body["detail"].as_str()),
        (StatusCode::NOT_FOUND, Some("No such delivery."))
    );
}

/// Two replicas on one database, one token with a burst of 10 and a slow refill: of 30
/// requests at once, spread over both, 10 pass and the rest are told when to come back.
#[tokio::test]
async fn the_rate_limit_per_token_is_shared_by_replicas_and_says_when_to_retry() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let edge = mailroom::http::Edge {
        api_limits: mailroom::rest::Limits {
            per_second: 0.01,
            burst: 10.0,
        },
        ..Default::default()
    };
    let one = spawn_app_with(pool.clone(), api_config(), edge.clone()).await;
    let two = spawn_app_with(pool.clone(), api_config(), edge).await;
    let owner = acme.owner().signed_in(&one).await;
    let t = token(&one, &owner, "busy", &[ApiScope::SuppressionsRead]).await;
    let answers = futures::future::join_all((0..30).map(|i| {
        let app = if i % 2 == 0 { &one } else { &two };
        let t = t.clone();
        async move { call(app, "GET", "/api/v1/suppressions/ann@example.com", Some(&t)).await }
    }))
    .await;
    let ok = answers
        .iter()
        .filter(|(s, _, _)| *s == StatusCode::OK)
        .count();
    let limited: Vec<_> = answers
        .iter()
        .filter(|(s, _, _)| *s == StatusCode::TOO_MANY_REQUESTS)
        .collect();
    assert_eq!((ok, limited.len()), (10, 20));
    for (_, h, body) in limited {
        assert_eq!(h["retry-after"], "100");
        assert!(body["detail"]
            .as_str()
            .unwrap()
            .contains("Too many requests"));
    }
}

#[tokio::test]
async fn campaigns_are_read_with_their_status_and_progress() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let t = token(&app, &owner, "reports", &[ApiScope::CampaignsRead]).await;
    let mut conn = pool.acquire().await.unwrap();
    let first = draft(&mut conn, org, acme.owner().id.0, "Spring").await;
    let second = draft(&mut conn, org, acme.owner().id.0, "Summer").await;
    // The second as if it had been sent to four: three delivered, one failed.
    sqlx::query(
        "update campaigns set status = 'sent', recipients_total = 4, scheduled_for = now(),
                approver_id = author_id, self_approved = true, approved_at = now(),
                approved_version = 1, started_at = now(), finished_at = now() where id = $1",
    )
    .bind(second)
    .execute(&mut *conn)
    .await
    .unwrap();
    sqlx::query(
        "insert into progress_slots (org_id, campaign_id, slot, delivered, failed) values ($1, $2, 3, 3, 1)",
    )
    .bind(org)
    .bind(second)
    .execute(&mut *conn)
    .await
    .unwrap();

    let (s, _, page) = call(&app, "GET", "/api/v1/campaigns?limit=1", Some(&t)).await;
    assert_eq!(s, StatusCode::OK, "{page}");
    assert_eq!(page["data"][0]["id"], first);
    assert_eq!(page["data"][0]["status"], "draft");
    assert_eq!(page["data"][0]["progress"]["total"], Value::Null);
    assert_eq!(page["next_after"], first);
    let (_, _, sent) = call(&app, "GET", "/api/v1/campaigns?status=sent", Some(&t)).await;
    assert_eq!(sent["data"].as_array().unwrap().len(), 1, "{sent}");
    let (s, _, one) = call(
        &app,
        "GET",
        &format!("/api/v1/campaigns/{second}"),
        Some(&t),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(one, sent["data"][0]);
    assert_eq!(
        one["progress"],
        serde_json::json!({"total": 4, "queued": 0, "delivered": 3, "failed": 1, "unknown": 0, "suppressed": 0, "cancelled": 0})
    );
    assert!(one["finished_at"].as_str().unwrap().ends_with('Z'), "{one}");
    let (s, _, bad) = call(&app, "GET", "/api/v1/campaigns?status=done", Some(&t)).await;
    assert_eq!(
        (s, &bad["errors"][0]["pointer"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &Value::from("status"))
    );
}
