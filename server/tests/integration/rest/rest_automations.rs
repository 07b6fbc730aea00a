//! Automations through the REST API: listed with their counts, people enrolled by id, address
//! or external id (the same caller's id is one enrolment, answered 201 then 200), faults named
//! by their pointer, a draft refused, and people taken out.

use app::domain::{ApiScope, Role};
use reqwest::StatusCode;
use serde_json::json;

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::rest::{call, send, token};
use crate::support::test_app::spawn_app;

#[tokio::test]
async fn people_are_enrolled_once_per_id_counted_and_taken_out() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner, Role::Admin]).await;
    let org = acme.id;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let t = token(
        &app,
        &owner,
        "crm",
        &[
            ApiScope::AutomationsRead,
            ApiScope::AutomationsWrite,
            ApiScope::SubscribersWrite,
        ],
    )
    .await;
    let def: app::domain::automation::Definition = serde_json::from_value(json!({
        "trigger": {"type": "api"}, "reentry": "per_trigger",
        "steps": [
            {"type": "email", "subject": "Your order {{ event.order }}", "body": "Thanks"},
            {"type": "wait", "days": 1},
            {"type": "email", "subject": "How was it?", "body": "Tell us"}
        ]
    }))
    .unwrap();
    let mut c = pool.acquire().await.unwrap();
    let id = app::db::automation::create(&mut c, org, "After an order", &def, acme.owner().id)
        .await
        .unwrap();
    let (s, _, sub) = send(
        &app,
        "POST",
        "/api/v1/subscribers",
        Some(&t),
        Some(&json!({"email": "ann@example.org", "external_id": "cus_1"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{sub}");
    let ann = sub["id"].as_i64().unwrap();
    let path = format!("/api/v1/automations/{id}/enrolments");
    // A draft enrols nobody.
    let body = json!({"id": "order-1", "subscriber_id": ann, "properties": {"order": "A-1"}});
    let (s, _, b) = send(&app, "POST", &path, Some(&t), Some(&body)).await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    app::db::automation::approve(&mut c, org, id, 1, acme.admin(0).id, false)
        .await
        .unwrap();
    let (s, _, first) = send(&app, "POST", &path, Some(&t), Some(&body)).await;
    assert_eq!(s, StatusCode::CREATED, "{first}");
    assert_eq!(first["new"], true);
    // The same id again: the same enrolment, 200.
    let (s, _, again) = send(&app, "POST", &path, Some(&t), Some(&body)).await;
    assert_eq!(s, StatusCode::OK, "{again}");
    assert_eq!(again["enrolment_id"], first["enrolment_id"]);
    // Another order, by external id and by address: two more.
    for who in [
        json!({"external_id": "cus_1"}),
        json!({"email": "ANN@example.org"}),
    ] {
        let mut b = who.clone();
        b["id"] = json!(format!("order-{}", rand::random::<u32>()));
        let (s, _, r) = send(&app, "POST", &path, Some(&t), Some(&b)).await;
        assert_eq!(s, StatusCode::CREATED, "{r}");
    }
    // Faults, named.
    for (bad, pointer) in [
        (
            json!({"id": "x", "subscriber_id": ann, "email": "ann@example.org"}),
            "#/subscriber_id",
        ),
        (json!({"id": "has space", "subscriber_id": ann}), "#/id"),
        (json!({"id": "y", "email": "not an address"}), "#/email"),
        (
            json!({"id": "z", "subscriber_id": ann, "properties": [1]}),
            "#/properties",
        ),
    ] {
        let (s, _, r) = send(&app, "POST", &path, Some(&t), Some(&bad)).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {r}");
        assert_eq!(r["errors"][0]["pointer"], pointer, "{r}");
    }
    let (s, _, r) = send(
        &app,
        "POST",
        &path,
        Some(&t),
        Some(&json!({"id": "n", "email": "nobody@example.org"})),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{r}");
    // The list and the detail count them.
    let (s, _, list) = call(&app, "GET", "/api/v1/automations", Some(&t)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(list["data"][0]["active"], 3, "{list}");
    app::db::automation::run_due(&pool, None, 100)
        .await
        .unwrap();
    let (_, _, detail) = call(&app, "GET", &format!("/api/v1/automations/{id}"), Some(&t)).await;
    let sent: i64 = detail["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["outcome"] == "sent")
        .map(|c| c["count"].as_i64().unwrap())
        .sum();
    assert_eq!(sent, 3, "{detail}");
    assert_eq!(detail["definition"]["steps"][1]["days"], 1, "{detail}");
    // Taken out: all three end, and their next mail never comes.
    let (s, _, r) = call(&app, "DELETE", &format!("{path}/{ann}"), Some(&t)).await;
    assert_eq!((s, r["removed"].as_i64()), (StatusCode::OK, Some(3)), "{r}");
    let later = chrono::Utc::now() + chrono::Duration::days(2);
    assert_eq!(
        app::db::automation::run_due(&pool, Some(later), 100)
            .await
            .unwrap(),
        0
    );
    // Their three first mails were still queued (no delivery worker runs here): taken back.
    let mails: Vec<String> = sqlx::query_scalar(
        "select status from deliveries where automation_id = $1 order by job_id",
    )
    .bind(id)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(mails, ["cancelled", "cancelled", "cancelled"]);
}
