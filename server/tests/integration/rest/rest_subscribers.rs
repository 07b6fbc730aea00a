//! Subscribers through the REST API on a real PostgreSQL: upsert by address, read, update,
//! delete and erase, keyset pages that never repeat or skip, bulk upserts of 10,000 rows with
//! an answer per refused row, concurrent bulk requests over the same addresses, and list
//! membership.

use app::domain::{ApiScope, Role};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::rest::{call, send, token};
use crate::support::test_app::{spawn_app, TestApp};

async fn setup() -> (sqlx::PgPool, i64, TestApp, String) {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let t = token(
        &app,
        &owner,
        "crm",
        &[ApiScope::SubscribersRead, ApiScope::SubscribersWrite],
    )
    .await;
    (pool, org, app, t)
}

async fn list(pool: &sqlx::PgPool, org: i64, name: &str) -> i64 {
    sqlx::query_scalar("insert into lists (org_id, name) values ($1, $2) returning id")
        .bind(org)
        .bind(name)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_subscriber_is_upserted_by_address_read_changed_deleted_and_erased() {
    let (pool, org, app, t) = setup().await;
    let news = list(&pool, org, "News").await;
    let offers = list(&pool, org, "Offers").await;
    let post = |body: Value| {
        let (app, t) = (&app, &t);
        async move { send(app, "POST", "/api/v1/subscribers", Some(t), Some(&body)).await }
    };

    let (s, _, ann) = post(json!({
        "email": "Ann@Example.com", "name": "Ann", "attributes": {"plan": "pro"}, "list_ids": [news],
    }))
    .await;
    assert_eq!(s, StatusCode::CREATED, "{ann}");
    let id = ann["id"].as_i64().unwrap();
    assert_eq!(
        (&ann["email"], &ann["status"], &ann["list_ids"]),
        (
            &json!("Ann@Example.com"),
            &json!("confirmed"),
            &json!([news])
        )
    );
    // The same address again: an update, attributes merged, lists added to, name kept.
    let (s, _, again) = post(json!({
        "email": "Ann@Example.com", "attributes": {"seats": 3}, "list_ids": [offers],
    }))
    .await;
    assert_eq!(s, StatusCode::OK, "{again}");
    assert_eq!(again["id"], id);
    assert_eq!(again["name"], "Ann");
    assert_eq!(again["attributes"], json!({"plan": "pro", "seats": 3}));
    assert_eq!(again["list_ids"], json!([news, offers]));

    let (s, _, got) = call(&app, "GET", &format!("/api/v1/subscribers/{id}"), Some(&t)).await;
    assert_eq!((s, &got), (StatusCode::OK, &again));
    let (s, _, found) = call(
        &app,
        "GET",
        "/api/v1/subscribers?email=ANN@example.com",
        Some(&t),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(found["data"][0]["id"], id, "{found}");

    let path = format!("/api/v1/subscribers/{id}");
    let (s, _, patched) = send(
        &app,
        "PATCH",
        &path,
        Some(&t),
        Some(&json!({"name": "Ann B.", "status": "unconfirmed", "list_ids": [offers]})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{patched}");
    assert_eq!(
        (&patched["name"], &patched["status"], &patched["list_ids"]),
        (&json!("Ann B."), &json!("unconfirmed"), &json!([offers]))
    );

    // Membership on its own.
    let member = format!("/api/v1/lists/{news}/members/{id}");
    assert_eq!(
        call(&app, "PUT", &member, Some(&t)).await.0,
        StatusCode::CREATED
    );
    assert_eq!(call(&app, "PUT", &member, Some(&t)).await.0, StatusCode::OK);
    assert_eq!(
        call(&app, "DELETE", &member, Some(&t)).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        call(&app, "DELETE", &member, Some(&t)).await.0,
        StatusCode::NOT_FOUND
    );
    let (s, _, lists) = call(&app, "GET", "/api/v1/lists", Some(&t)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        lists,
        json!([{"id": news, "name": "News", "members": 0}, {"id": offers, "name": "Offers", "members": 1}])
    );

    // Erasure: the address is gone everywhere, the subscriber stays as a hash, and suppressed.
    let (s, _, erased) = call(&app, "POST", &format!("{path}/erase"), Some(&t)).await;
    assert_eq!((s, &erased), (StatusCode::OK, &json!({"subscribers": 1})));
    let (_, _, gone) = call(&app, "GET", &path, Some(&t)).await;
    assert_eq!(gone["erased"], true);
    assert!(!gone.to_string().contains("Ann"), "{gone}");
    let (s, _, _) = call(&app, "POST", &format!("{path}/erase"), Some(&t)).await;
    assert_eq!(s, StatusCode::CONFLICT);
    let (s, _, _) = send(&app, "PATCH", &path, Some(&t), Some(&json!({"name": "x"}))).await;
    assert_eq!(s, StatusCode::CONFLICT);

    // Deletion of a subscriber nobody mailed.
    let (_, _, bob) = post(json!({"email": "bob@example.com"})).await;
    let bob = format!("/api/v1/subscribers/{}", bob["id"]);
    assert_eq!(
        call(&app, "DELETE", &bob, Some(&t)).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        call(&app, "GET", &bob, Some(&t)).await.0,
        StatusCode::NOT_FOUND
    );

    let actions: Vec<String> = sqlx::query_scalar(
        "select action from audit_log where org_id = $1 and api_token_id is not null order by id",
    )
    .bind(org)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        actions,
        [
            "subscriber.add",
            "subscriber.edit",
            "subscriber.edit",
            "subscriber.join",
            "subscriber.leave",
            "subscriber.erase",
            "subscriber.add",
            "subscriber.remove"
        ]
    );
}

#[tokio::test]
async fn bad_input_is_a_problem_document_naming_the_field_and_writes_nothing() {
    let (pool, org, app, t) = setup().await;
    let theirs = {
        let globex = TestOrg::with_roles(&pool, "globex", &[Role::Owner]).await;
        let other = globex.id.0;
        list(&pool, other, "Theirs").await
    };
    for (body, status, pointer, says) in [
        (json!({"email": "not an address"}), 422, "#/email", "email:"),
        (
            json!({"email": "a@example.com", "name": "a\u{202E}b"}),
            422,
            "#/name",
            "name:",
        ),
        (
            json!({"email": "a@example.com", "attributes": [1, 2]}),
            422,
            "#/attributes",
            "JSON object",
        ),
        (
            json!({"email": "a@example.com", "list_ids": [theirs]}),
            422,
            "#/list_ids",
            "no list",
        ),
        (
            json!({"email": "a@example.com", "status": "vip"}),
            422,
            "#/",
            "vip",
        ),
        (
            json!({"email": "a@example.com", "colour": "red"}),
            422,
            "#/",
            "colour",
        ),
        (json!({"name": "No Address"}), 422, "#/", "email"),
    ] {
        let (s, h, answer) = send(&app, "POST", "/api/v1/subscribers", Some(&t), Some(&body)).await;
        assert_eq!(s.as_u16(), status, "{body}: {answer}");
        assert_eq!(h["content-type"], "application/problem+json");
        assert_eq!(answer["errors"][0]["pointer"], pointer, "{answer}");
        assert!(
            answer["detail"].as_str().unwrap().contains(says),
            "{answer}"
        );
    }
    // Not JSON, and JSON without saying so.
    let c = reqwest::Client::new();
    let url = format!("{}/api/v1/subscribers", app.base);
    let r = c
        .post(&url)
        .bearer_auth(&t)
        .header("content-type", "application/json")
        .body("{\"email\":")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = c
        .post(&url)
        .bearer_auth(&t)
        .body("{\"email\":\"a@example.com\"}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    // Ids that are not ids name nothing; a page size out of range is named.
    assert_eq!(
        call(&app, "GET", "/api/v1/subscribers/x1", Some(&t))
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    let (s, _, answer) = call(&app, "GET", "/api/v1/subscribers?limit=0", Some(&t)).await;
    assert_eq!(
        (s, &answer["errors"][0]["pointer"]),
        (StatusCode::UNPROCESSABLE_ENTITY, &json!("limit"))
    );
    let (s, _, _) = call(&app, "GET", "/api/v1/subscribers?after=soon", Some(&t)).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);

    let written: i64 = sqlx::query_scalar("select count(*) from subscribers where org_id = $1")
        .bind(org)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(written, 0);
}

#[tokio::test]
async fn pages_follow_the_id_keyset_and_never_repeat_or_skip_while_subscribers_arrive() {
    let (_pool, _org, app, t) = setup().await;
    let rows: Vec<Value> = (0..25)
        .map(|i| json!({"email": format!("p{i:02}@example.com")}))
        .collect();
    let (s, _, _) = send(
        &app,
        "POST",
        "/api/v1/subscribers/bulk",
        Some(&t),
        Some(&json!({ "subscribers": rows })),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let mut seen = Vec::new();
    let mut after = 0;
    let mut pages = 0;
    loop {
        let (s, _, page) = call(
            &app,
            "GET",
            &format!("/api/v1/subscribers?limit=10&after={after}"),
            Some(&t),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{page}");
        pages += 1;
        for r in page["data"].as_array().unwrap() {
            seen.push(r["email"].as_str().unwrap().to_string());
        }
        if pages == 1 {
            // A subscriber arriving mid-way lands after the keyset, on a later page.
            send(
                &app,
                "POST",
                "/api/v1/subscribers",
                Some(&t),
                Some(&json!({"email": "late@example.com"})),
            )
            .await;
        }
        match page["next_after"].as_i64() {
            Some(n) => after = n,
            None => break,
        }
    }
    let mut expected: Vec<String> = (0..25).map(|i| format!("p{i:02}@example.com")).collect();
    expected.push("late@example.com".into());
    assert_eq!(seen, expected);
    assert_eq!(pages, 3);
}

#[tokio::test]
async fn a_bulk_upsert_of_ten_thousand_writes_the_good_rows_and_names_each_bad_one() {
    let (pool, org, app, t) = setup().await;
    let news = list(&pool, org, "News").await;
    let mut rows: Vec<Value> = (0..10_000)
        .map(|i| {
            json!({
                "email": format!("s{i:05}@example.com"), "name": format!("S {i}"),
                "attributes": {"n": i}, "list_ids": if i % 2 == 0 { vec![news] } else { vec![] },
            })
        })
        .collect();
    rows[5] = json!({"email": "five at example.com"});
    rows[7] = json!({"email": "s00001@example.com"});
    rows[9] = json!({"email": "nine@example.com", "attributes": "x"});
    rows[11] = json!({"email": "eleven@example.com", "list_ids": [news + 1000]});
    let (s, _, answer) = send(
        &app,
        "POST",
        "/api/v1/subscribers/bulk",
        Some(&t),
        Some(&json!({ "subscribers": rows })),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{answer}");
    assert_eq!(
        (answer["created"].as_u64(), answer["updated"].as_u64()),
        (Some(9_996), Some(0))
    );
    let pointers: Vec<&str> = answer["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["pointer"].as_str().unwrap())
        .collect();
    assert_eq!(
        pointers,
        [
            "#/subscribers/5/email",
            "#/subscribers/7/email",
            "#/subscribers/9/attributes",
            "#/subscribers/11/list_ids"
        ]
    );
    assert!(answer["errors"][1]["detail"]
        .as_str()
        .unwrap()
        .contains("also row 1"));
    let ids = answer["ids"].as_array().unwrap();
    assert_eq!(ids.len(), 10_000);
    assert!(ids[5].is_null() && ids[11].is_null() && ids[12].is_i64());
    let (count, members): (i64, i64) = sqlx::query_as(
        "select (select count(*) from subscribers where org_id = $1),
                (select count(*) from list_members where list_id = $2)",
    )
    .bind(org)
    .bind(news)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((count, members), (9_996, 5_000));
    let (name, n): (String, i64) =
        sqlx::query_as("select name, (attributes->>'n')::bigint from subscribers where id = $1")
            .bind(ids[12].as_i64().unwrap())
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!((name.as_str(), n), ("S 12", 12));

    // Over the limit: refused whole, nothing written.
    let too_many: Vec<Value> = (0..10_001)
        .map(|i| json!({"email": format!("x{i}@example.com")}))
        .collect();
    let (s, _, answer) = send(
        &app,
        "POST",
        "/api/v1/subscribers/bulk",
        Some(&t),
        Some(&json!({ "subscribers": too_many })),
    )
    .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert_eq!(answer["errors"][0]["pointer"], "#/subscribers");
    let count: i64 = sqlx::query_scalar("select count(*) from subscribers where org_id = $1")
        .bind(org)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(count, 9_996);
}

/// Four bulk requests at once over the same 2,000 addresses, each in its own order: no
/// deadlock, no duplicate, every address once, each created exactly once over the four.
#[tokio::test]
async fn concurrent_bulk_upserts_of_the_same_addresses_create_each_once() {
    let (pool, org, app, t) = setup().await;
    let answers = futures::future::join_all((0..4).map(|k| {
        let (app, t) = (&app, &t);
        async move {
            let mut rows: Vec<Value> = (0..2_000)
                .map(|i| json!({"email": format!("c{i:04}@example.com"), "attributes": {format!("k{k}"): true}}))
                .collect();
            if k % 2 == 1 {
                rows.reverse();
            }
            send(
                app,
                "POST",
                "/api/v1/subscribers/bulk",
                Some(t),
                Some(&json!({ "subscribers": rows })),
            )
            .await
        }
    }))
    .await;
    let mut created = 0;
    for (s, _, a) in &answers {
        assert_eq!(*s, StatusCode::OK, "{a}");
        assert_eq!(a["errors"], json!([]));
        created += a["created"].as_u64().unwrap();
    }
    assert_eq!(created, 2_000);
    let (count, merged): (i64, i64) = sqlx::query_as(
        "select count(*), count(*) filter (where attributes ?& array['k0','k1','k2','k3'])
         from subscribers where org_id = $1",
    )
    .bind(org)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((count, merged), (2_000, 2_000));
}
