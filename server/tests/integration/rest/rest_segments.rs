//! Segments through the REST API: saved and versioned, counted and paged, every fault named
//! by its pointer, another organisation's list inside a tree a 404 naming the node.

use app::domain::{ApiScope, Role};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::rest::{call, send, token};
use crate::support::test_app::spawn_app;

fn plan_is(plan: &str) -> Value {
    json!({"op": "all", "children": [
        {"type": "attribute", "name": "plan", "test": {"op": "text_equals", "value": plan}},
    ]})
}

#[tokio::test]
async fn a_segment_is_saved_versioned_counted_paged_and_deleted() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let t = token(
        &app,
        &owner,
        "crm",
        &[
            ApiScope::SegmentsRead,
            ApiScope::SegmentsWrite,
            ApiScope::SubscribersWrite,
        ],
    )
    .await;
    let rows: Vec<Value> = (0..25)
        .map(|i| json!({"email": format!("p{i:02}@ex.org"), "attributes": {"plan": if i % 5 == 0 { "pro" } else { "free" }}}))
        .collect();
    let (s, _, b) = send(
        &app,
        "POST",
        "/api/v1/subscribers/bulk",
        Some(&t),
        Some(&json!({"subscribers": rows})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{b}");

    let (s, _, seg) = send(
        &app,
        "POST",
        "/api/v1/segments",
        Some(&t),
        Some(&json!({"name": "Pro", "definition": plan_is("pro")})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{seg}");
    assert_eq!(seg["version"], 1);
    assert_eq!(seg["definition"], plan_is("pro"));
    let id = seg["id"].as_i64().unwrap();
    let (s, _, c) = call(
        &app,
        "GET",
        &format!("/api/v1/segments/{id}/count"),
        Some(&t),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(c, json!({"count": 5, "version": 1}));

    // Renaming keeps the version; a new definition is a new version.
    let (s, _, r) = send(
        &app,
        "PUT",
        &format!("/api/v1/segments/{id}"),
        Some(&t),
        Some(&json!({"name": "Pro plan", "definition": plan_is("pro"), "version": 1})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["version"], 1);
    let (s, _, r) = send(
        &app,
        "PUT",
        &format!("/api/v1/segments/{id}"),
        Some(&t),
        Some(&json!({"name": "Free plan", "definition": plan_is("free"), "version": 1})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["version"], 2);
    // A writer holding version 1 is told it moved.
    let (s, _, p) = send(
        &app,
        "PUT",
        &format!("/api/v1/segments/{id}"),
        Some(&t),
        Some(&json!({"name": "Stale", "definition": plan_is("pro"), "version": 1})),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT, "{p}");
    assert_eq!(p["errors"][0]["pointer"], "#/version");

    // Members, a page at a time, never repeating or skipping.
    let mut seen = Vec::new();
    let mut after = 0;
    loop {
        let (s, _, page) = call(
            &app,
            "GET",
            &format!("/api/v1/segments/{id}/members?limit=7&after={after}"),
            Some(&t),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{page}");
        for m in page["data"].as_array().unwrap() {
            seen.push(m["email"].as_str().unwrap().to_string());
        }
        match page["next_after"].as_i64() {
            Some(n) => after = n,
            None => break,
        }
    }
    assert_eq!(seen.len(), 20);
    assert!(!seen.contains(&"p00@ex.org".to_string()) && seen.contains(&"p01@ex.org".to_string()));

    // Names are unique in the org (whatever their case).
    let (s, _, p) = send(
        &app,
        "POST",
        "/api/v1/segments",
        Some(&t),
        Some(&json!({"name": "FREE PLAN", "definition": plan_is("x")})),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT, "{p}");
    assert_eq!(p["errors"][0]["pointer"], "#/name");

    let (s, _, list) = call(&app, "GET", "/api/v1/segments", Some(&t)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(list["data"].as_array().unwrap().len(), 1);
    let (s, _, _) = call(&app, "DELETE", &format!("/api/v1/segments/{id}"), Some(&t)).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let (s, _, _) = call(&app, "GET", &format!("/api/v1/segments/{id}"), Some(&t)).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // Its name is free again.
    let (s, _, _) = send(
        &app,
        "POST",
        "/api/v1/segments",
        Some(&t),
        Some(&json!({"name": "Free plan", "definition": plan_is("free")})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
}

#[tokio::test]
async fn a_bad_tree_is_named_by_its_pointer_and_another_orgs_list_inside_it_is_a_404() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let globex = TestOrg::with_roles(&pool, "globex", &[Role::Owner]).await;
    let theirs = globex.list("Theirs").await;
    let ours = acme.list("Ours").await;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let t = token(
        &app,
        &owner,
        "crm",
        &[ApiScope::SegmentsRead, ApiScope::SegmentsWrite],
    )
    .await;
    let post = |body: Value| {
        let (app, t) = (&app, &t);
        async move { send(app, "POST", "/api/v1/segments", Some(t), Some(&body)).await }
    };
    let nested = |leaf: Value| {
        json!({"name": "S", "definition": {"op": "any", "children": [
            {"type": "status", "status": "confirmed"},
            {"type": "group", "op": "none", "children": [{"type": "list", "list_id": ours}, leaf]},
        ]}})
    };
    let cases = [
        (
            json!({"type": "attribute", "name": "", "test": {"op": "exists"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "#/definition/children/1/children/1/name",
        ),
        (
            json!({"type": "event", "name": "x", "within_days": 0}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "#/definition/children/1/children/1/within_days",
        ),
        (
            json!({"type": "attribute", "name": "n", "test": {"op": "text_in", "values": []}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "#/definition/children/1/children/1/test/values",
        ),
        (
            json!({"type": "list", "list_id": theirs}),
            StatusCode::NOT_FOUND,
            "#/definition/children/1/children/1/list_id",
        ),
        (
            json!({"type": "engagement", "what": "received", "campaign_id": 999999, "within_days": null}),
            StatusCode::NOT_FOUND,
            "#/definition/children/1/children/1/campaign_id",
        ),
        (
            json!({"type": "nonsense"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "#/definition",
        ),
    ];
    for (leaf, status, pointer) in cases {
        let (s, _, p) = post(nested(leaf.clone())).await;
        assert_eq!(s, status, "{leaf}: {p}");
        assert_eq!(p["errors"][0]["pointer"], pointer, "{leaf}: {p}");
    }
    let (s, _, p) = post(json!({"name": " ", "definition": {"op": "all"}})).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{p}");
    assert_eq!(p["errors"][0]["pointer"], "#/name");
    let stored: i64 = sqlx::query_scalar("select count(*) from segments")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(stored, 0, "nothing half-written");
}
