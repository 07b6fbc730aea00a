//! Events through the REST API on a real PostgreSQL: one event per event id however many
//! times and however concurrently it is posted, one problem per bad row naming its index and
//! field, unknown subscribers refused or created per request, external ids, retention under
//! the leader's fence, erasure, and the subscriber's timeline in the dashboard.

use app::db::leader;
use app::domain::{ApiScope, Role};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::rest::{send, token};
use crate::support::test_app::{spawn_app, TestApp};

struct Setup {
    pool: sqlx::PgPool,
    org: i64,
    app: TestApp,
    t: String,
    acme: TestOrg,
}

async fn setup() -> Setup {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let t = token(
        &app,
        &owner,
        "crm",
        &[
            ApiScope::SubscribersRead,
            ApiScope::SubscribersWrite,
            ApiScope::EventsWrite,
        ],
    )
    .await;
    Setup {
        pool,
        org,
        app,
        t,
        acme,
    }
}

async fn post_events(s: &Setup, body: &Value) -> (StatusCode, Value) {
    let (status, _, answer) = send(&s.app, "POST", "/api/v1/events", Some(&s.t), Some(body)).await;
    (status, answer)
}

async fn subscriber(s: &Setup, body: Value) -> i64 {
    let (status, _, answer) = send(
        &s.app,
        "POST",
        "/api/v1/subscribers",
        Some(&s.t),
        Some(&body),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    answer["id"].as_i64().unwrap()
}

async fn events_of(pool: &sqlx::PgPool, org: i64) -> Vec<(String, i64, String)> {
    sqlx::query_as("select key, subscriber_id, name from events where org_id = $1 order by key")
        .bind(org)
        .fetch_all(pool)
        .await
        .unwrap()
}

/// An RFC 3339 time `hours` from the database's now (negative: in the past).
async fn at(pool: &sqlx::PgPool, hours: i64) -> String {
    sqlx::query_scalar(
        "select to_char((now() + make_interval(hours => $1)) at time zone 'UTC',
                        'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
    )
    .bind(hours as i32)
    .fetch_one(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn the_same_event_id_posted_fifty_times_at_once_is_one_event() {
    let s = setup().await;
    let ada = subscriber(&s, json!({"email": "ada@example.com"})).await;
    let body = json!({"events": [
        {"id": "evt-1", "subscriber_id": ada, "name": "invited_colleague",
         "properties": {"seats": 3}},
    ]});
    let answers = futures::future::join_all((0..50).map(|_| post_events(&s, &body))).await;
    let mut stored = 0;
    let mut ids = std::collections::BTreeSet::new();
    for (status, a) in &answers {
        assert_eq!(*status, StatusCode::OK, "{a}");
        let r = &a["results"][0];
        match r["status"].as_str().unwrap() {
            "stored" => stored += 1,
            "duplicate" => {}
            other => panic!("{other}: {a}"),
        }
        ids.insert(r["event_id"].as_i64().unwrap());
        assert_eq!(r["subscriber_id"], ada);
    }
    assert_eq!(stored, 1, "exactly one request stored it");
    assert_eq!(ids.len(), 1, "every answer names the one event: {ids:?}");
    assert_eq!(
        events_of(&s.pool, s.org).await,
        vec![("evt-1".into(), ada, "invited_colleague".into())]
    );
    // A day later (or any later), the same id is still the same event.
    let (status, a) = post_events(&s, &body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(a["duplicates"], 1, "{a}");
    assert_eq!(events_of(&s.pool, s.org).await.len(), 1);
}

#[tokio::test]
async fn a_batch_with_bad_rows_names_each_by_index_and_field_and_stores_the_good_rows_once() {
    let s = setup().await;
    let ada = subscriber(&s, json!({"email": "ada@example.com"})).await;
    let (future, ancient, recent) = (
        at(&s.pool, 49).await,
        at(&s.pool, -24 * 401).await,
        at(&s.pool, -2).await,
    );
    let body = json!({"events": [
        {"id": "good-1", "email": "ADA@example.com", "name": "logged_in", "occurred_at": recent},
        {"name": "no_id", "subscriber_id": ada},
        {"id": "bad-time", "subscriber_id": ada, "name": "x", "occurred_at": "yesterday"},
        {"id": "good-2", "subscriber_id": ada, "name": "upgraded", "properties": {"plan": "pro"}},
        {"id": "future", "subscriber_id": ada, "name": "x", "occurred_at": future},
        {"id": "ancient", "subscriber_id": ada, "name": "x", "occurred_at": ancient},
        {"id": "two-refs", "subscriber_id": ada, "email": "ada@example.com", "name": "x"},
        {"id": "nobody", "email": "nobody@example.com", "name": "x"},
        "not an object",
        {"id": "extra", "subscriber_id": ada, "name": "x", "colour": "red"},
        {"id": "nul", "subscriber_id": ada, "name": "x", "properties": {"k": "a\u{0}b"}},
        {"id": "list-props", "subscriber_id": ada, "name": "x", "properties": [1, 2]},
        {"id": "good-1", "subscriber_id": ada, "name": "repeated_in_the_batch"},
        {"id": "bad name", "subscriber_id": ada, "name": "x"},
        {"id": "blank-name", "subscriber_id": ada, "name": "  "},
        {"id": "no-one", "subscriber_id": 0, "name": "x"},
    ]});
    let (status, a) = post_events(&s, &body).await;
    assert_eq!(status, StatusCode::OK, "{a}");
    let expected = [
        (0, "stored", None),
        (1, "rejected", Some("#/events/1/id")),
        (2, "rejected", Some("#/events/2/occurred_at")),
        (3, "stored", None),
        (4, "rejected", Some("#/events/4/occurred_at")),
        (5, "rejected", Some("#/events/5/occurred_at")),
        (6, "rejected", Some("#/events/6/subscriber_id")),
        (7, "rejected", Some("#/events/7/email")),
        (8, "rejected", Some("#/events/8")),
        (9, "rejected", Some("#/events/9")),
        (10, "rejected", Some("#/events/10/properties")),
        (11, "rejected", Some("#/events/11/properties")),
        (12, "duplicate", None),
        (13, "rejected", Some("#/events/13/id")),
        (14, "rejected", Some("#/events/14/name")),
        (15, "rejected", Some("#/events/15/subscriber_id")),
    ];
    let results = a["results"].as_array().unwrap();
    assert_eq!(results.len(), expected.len());
    for (i, fate, pointer) in expected {
        let r = &results[i];
        assert_eq!(r["status"], fate, "row {i}: {r}");
        match pointer {
            Some(p) => {
                assert_eq!(r["error"]["pointer"], p, "row {i}: {r}");
                let detail = r["error"]["detail"].as_str().unwrap();
                assert!(detail.starts_with(&format!("events[{i}]")), "{detail}");
                assert!(
                    !detail.contains('\u{0}'),
                    "a refusal never quotes a NUL back"
                );
            }
            None => assert!(r["error"].is_null(), "row {i}: {r}"),
        }
    }
    assert_eq!(results[12]["event_id"], results[0]["event_id"]);
    assert!(results[5]["error"]["detail"]
        .as_str()
        .unwrap()
        .contains("400 days"));
    assert!(results[7]["error"]["detail"]
        .as_str()
        .unwrap()
        .contains("unknown_subscribers"));
    assert_eq!(
        (
            a["stored"].as_u64(),
            a["duplicates"].as_u64(),
            a["rejected"].as_u64()
        ),
        (Some(2), Some(1), Some(13))
    );
    let stored = events_of(&s.pool, s.org).await;
    assert_eq!(
        stored,
        vec![
            ("good-1".into(), ada, "logged_in".into()),
            ("good-2".into(), ada, "upgraded".into())
        ]
    );

    // The same batch again: the good rows are duplicates, nothing new is stored.
    let (status, again) = post_events(&s, &body).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again["stored"], 0, "{again}");
    assert_eq!(again["duplicates"], 3, "{again}");
    assert_eq!(again["results"][0]["event_id"], a["results"][0]["event_id"]);
    assert_eq!(events_of(&s.pool, s.org).await, stored);

    // A request whose every row is refused is a 422 naming each; none, or too many, too.
    let (status, p) = post_events(
        &s,
        &json!({"events": [{"id": "a", "name": "x"}, {"id": "b", "subscriber_id": ada}]}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{p}");
    let pointers: Vec<&str> = p["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["pointer"].as_str().unwrap())
        .collect();
    assert_eq!(pointers, ["#/events/0/subscriber_id", "#/events/1/name"]);
    let (status, p) = post_events(&s, &json!({"events": []})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{p}");
    let many: Vec<Value> = (0..1_001)
        .map(|i| json!({"id": format!("m{i}"), "subscriber_id": ada, "name": "x"}))
        .collect();
    let (status, p) = post_events(&s, &json!({ "events": many })).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{p}");
    assert!(p["detail"].as_str().unwrap().contains("1001"), "{p}");
    assert_eq!(events_of(&s.pool, s.org).await, stored);
}

#[tokio::test]
async fn unknown_subscribers_are_refused_or_created_unconfirmed_per_request() {
    let s = setup().await;
    let one = |key: &str, email: &str| json!({"id": key, "email": email, "name": "trial_started"});
    let (status, p) = post_events(&s, &json!({"events": [one("r1", "new@example.com")]})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{p}");
    let count = || async {
        sqlx::query_scalar::<_, i64>("select count(*) from subscribers where org_id = $1")
            .bind(s.org)
            .fetch_one(&s.pool)
            .await
            .unwrap()
    };
    assert_eq!(count().await, 0, "refused: no one created");

    // Created, at once by eight requests naming the same person in two spellings: one
    // subscriber, unconfirmed (no campaign reaches them), on no list, from the API.
    let answers = futures::future::join_all((0..8).map(|k| {
        let email = if k % 2 == 0 {
            "new@example.com"
        } else {
            "NEW@example.com"
        };
        let body =
            json!({"unknown_subscribers": "create", "events": [one(&format!("c{k}"), email)]});
        let s = &s;
        async move { post_events(s, &body).await }
    }))
    .await;
    let mut people = std::collections::BTreeSet::new();
    for (status, a) in &answers {
        assert_eq!(*status, StatusCode::OK, "{a}");
        assert_eq!(a["results"][0]["status"], "stored", "{a}");
        people.insert(a["results"][0]["subscriber_id"].as_i64().unwrap());
    }
    assert_eq!(people.len(), 1, "{people:?}");
    let (status, source, lists): (String, String, i64) = sqlx::query_as(
        "select status, optin_source, (select count(*) from list_members m where m.subscriber_id = s.id)
         from subscribers s where org_id = $1",
    )
    .bind(s.org)
    .fetch_one(&s.pool)
    .await
    .unwrap();
    assert_eq!(
        (status.as_str(), source.as_str(), lists),
        ("unconfirmed", "api", 0)
    );
    assert_eq!(events_of(&s.pool, s.org).await.len(), 8);

    // An external id names no one to create: still refused with `create`.
    let (status, p) = post_events(
        &s,
        &json!({"unknown_subscribers": "create",
                "events": [{"id": "x1", "external_id": "u-77", "name": "x"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{p}");
    assert_eq!(p["errors"][0]["pointer"], "#/events/0/external_id");
    assert_eq!(count().await, 1);
}

#[tokio::test]
async fn an_external_id_is_unique_per_org_settable_by_the_api_and_names_the_subscriber_of_events() {
    let s = setup().await;
    let ada = subscriber(
        &s,
        json!({"email": "ada@example.com", "external_id": "u-1"}),
    )
    .await;
    let (status, _, page) = send(
        &s.app,
        "GET",
        "/api/v1/subscribers?external_id=u-1",
        Some(&s.t),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["data"][0]["id"], ada, "{page}");
    assert_eq!(page["data"][0]["external_id"], "u-1");

    // Another person may not take it: one at a time (409) or in bulk (that row, named).
    let (status, _, p) = send(
        &s.app,
        "POST",
        "/api/v1/subscribers",
        Some(&s.t),
        Some(&json!({"email": "bob@example.com", "external_id": "u-1"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{p}");
    assert_eq!(p["errors"][0]["pointer"], "#/external_id");
    let (status, _, b) = send(
        &s.app,
        "POST",
        "/api/v1/subscribers/bulk",
        Some(&s.t),
        Some(&json!({"subscribers": [
            {"email": "bob@example.com", "external_id": "u-1"},
            {"email": "cy@example.com", "external_id": "u-3"},
            {"email": "di@example.com", "external_id": "u-3"},
            {"email": "ada@example.com", "external_id": "u-1", "name": "Ada"},
        ]})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{b}");
    let pointers: Vec<&str> = b["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["pointer"].as_str().unwrap())
        .collect();
    assert_eq!(
        pointers,
        ["#/subscribers/0/external_id", "#/subscribers/2/external_id"],
        "{b}"
    );
    assert_eq!(
        (b["created"].as_u64(), b["updated"].as_u64()),
        (Some(1), Some(1))
    );

    // Events name them by it.
    let (status, a) = post_events(
        &s,
        &json!({"events": [{"id": "e1", "external_id": "u-1", "name": "logged_in"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{a}");
    assert_eq!(a["results"][0]["subscriber_id"], ada);

    // Another org may use the same external id for its own person.
    let globex = TestOrg::with_roles(&s.pool, "globex", &[Role::Owner]).await;
    let g = globex.owner().signed_in(&s.app).await;
    let gt = token(&s.app, &g, "crm", &[ApiScope::SubscribersWrite]).await;
    let (status, _, theirs) = send(
        &s.app,
        "POST",
        "/api/v1/subscribers",
        Some(&gt),
        Some(&json!({"email": "ada@globex.example", "external_id": "u-1"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{theirs}");
    let (_, a) = post_events(
        &s,
        &json!({"events": [{"id": "e2", "external_id": "u-1", "name": "logged_in"}]}),
    )
    .await;
    assert_eq!(
        a["results"][0]["subscriber_id"], ada,
        "still Acme's own: {a}"
    );
}

#[tokio::test]
async fn retention_deletes_events_older_than_the_org_keeps_under_the_leaders_fence() {
    let s = setup().await;
    let ada = subscriber(&s, json!({"email": "ada@example.com"})).await;
    let globex = TestOrg::with_roles(&s.pool, "globex", &[Role::Owner]).await;
    let bob: i64 = sqlx::query_scalar(
        "insert into subscribers (org_id, email, email_lower) values ($1, 'bob@globex.example', 'bob@globex.example') returning id",
    )
    .bind(globex.id.0)
    .fetch_one(&s.pool)
    .await
    .unwrap();
    // Acme keeps 30 days; Globex the default 400. Each has events 10, 40 and 500 days old.
    sqlx::query("update orgs set event_retention_days = 30 where id = $1")
        .bind(s.org)
        .execute(&s.pool)
        .await
        .unwrap();
    for (org, who) in [(s.org, ada), (globex.id.0, bob)] {
        sqlx::query(
            "insert into events (org_id, key, subscriber_id, name, occurred_at)
             select $1, 'k' || d, $2, 'x', now() - make_interval(days => d)
             from unnest(array[10, 40, 500]) d",
        )
        .bind(org)
        .bind(who)
        .execute(&s.pool)
        .await
        .unwrap();
    }
    let overdue = app::db::metrics::snapshot(&s.pool).await.unwrap();
    assert!(
        overdue.events_overdue_seconds > 86_400.0 * 99.0,
        "{overdue:?}"
    );
    let lease = leader::acquire(&s.pool, "leader", "me", 30.0)
        .await
        .unwrap()
        .unwrap();
    let stale = leader::Lease {
        epoch: lease.epoch - 1,
        ..lease.clone()
    };
    assert_eq!(
        app::db::events::trim(&s.pool, &stale, 100).await.unwrap(),
        0,
        "fenced"
    );
    assert_eq!(
        app::db::events::trim(&s.pool, &lease, 1).await.unwrap(),
        1,
        "in batches"
    );
    assert_eq!(
        app::db::events::trim(&s.pool, &lease, 100).await.unwrap(),
        2
    );
    let left: Vec<(i64, String)> =
        sqlx::query_as("select org_id, key from events order by org_id, key")
            .fetch_all(&s.pool)
            .await
            .unwrap();
    assert_eq!(
        left,
        vec![
            (s.org, "k10".into()),
            (globex.id.0, "k10".into()),
            (globex.id.0, "k40".into())
        ]
    );
    let caught_up = app::db::metrics::snapshot(&s.pool).await.unwrap();
    assert_eq!(caught_up.events_overdue_seconds, 0.0);
}

#[tokio::test]
async fn erasing_a_subscriber_forgets_their_events_and_external_id_and_the_page_shows_the_timeline()
{
    let s = setup().await;
    let ada = subscriber(
        &s,
        json!({"email": "ada@example.com", "external_id": "u-1"}),
    )
    .await;
    let (status, a) = post_events(
        &s,
        &json!({"events": [
            {"id": "e1", "subscriber_id": ada, "name": "trial_started", "properties": {"plan": "pro"}},
            {"id": "e2", "external_id": "u-1", "name": "invited_colleague"},
        ]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{a}");
    let owner = s.acme.owner().signed_in(&s.app).await;
    let html = s
        .app
        .get_html(&owner, &format!("/audience/subscribers/{ada}"))
        .await;
    assert_eq!(html.matches("data-test=\"event-row\"").count(), 2, "{html}");
    assert!(html.contains("invited_colleague") && html.contains("trial_started"));
    assert!(html.contains("external id u-1"), "{html}");

    let (status, _, _) = send(
        &s.app,
        "POST",
        &format!("/api/v1/subscribers/{ada}/erase"),
        Some(&s.t),
        Some(&json!({})),
    )
    .await;
    assert!(status.is_success(), "{status}");
    assert!(events_of(&s.pool, s.org).await.is_empty());
    let external: Option<String> =
        sqlx::query_scalar("select external_id from subscribers where id = $1")
            .bind(ada)
            .fetch_one(&s.pool)
            .await
            .unwrap();
    assert_eq!(external, None);
    // An erased person is no one events can name, by id or by their old external id.
    let (status, p) = post_events(
        &s,
        &json!({"events": [{"id": "e3", "subscriber_id": ada, "name": "x"},
                           {"id": "e4", "external_id": "u-1", "name": "x"}]}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{p}");
    let html = s
        .app
        .get_html(&owner, &format!("/audience/subscribers/{ada}"))
        .await;
    assert!(html.contains("data-test=\"no-events\""), "{html}");
}
