//! What the REST API answers around its handlers, over real sockets: the bulk upsert takes its
//! documented 10,000 rows with realistic attributes (its own body limit, 16 MiB, is not
//! overridden by the 2 MiB of every other request), and every error under `/api/v1` is an RFC
//! 9457 problem document, whichever layer answers it: 405 (with its `Allow`), 408, 413 and
//! 415, the last listed in the OpenAPI document for each endpoint that takes a body.

use std::time::Duration;

use app::domain::{ApiScope, Role};
use mailroom::http::{Edge, MAX_REQUEST_BYTES};
use mailroom::rest::subscribers::BULK_MAX_BYTES;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::rest::{call, send, token};
use crate::support::test_app::{api_config, spawn_app_with, TestApp};

/// An org with one list, its app (with `edge`), and a token that may write subscribers and
/// send mail.
async fn setup(edge: Edge) -> (sqlx::PgPool, i64, i64, TestApp, String) {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let list: i64 =
        sqlx::query_scalar("insert into lists (org_id, name) values ($1, 'News') returning id")
            .bind(org)
            .fetch_one(&pool)
            .await
            .unwrap();
    let app = spawn_app_with(pool.clone(), api_config(), edge).await;
    let owner = acme.owner().signed_in(&app).await;
    let t = token(
        &app,
        &owner,
        "crm",
        &[
            ApiScope::SubscribersRead,
            ApiScope::SubscribersWrite,
            ApiScope::MessagesSend,
        ],
    )
    .await;
    (pool, org, list, app, t)
}

/// The JSON size of one row of [`realistic`].
const ROW_BYTES: usize = 480;

/// A subscriber as a shop's CRM sends one: an address, a name, the attributes its templates
/// use (plan, company, place, language, where they came from, tags, order figures) and a note,
/// padded so that the row is [`ROW_BYTES`] of JSON.
fn realistic(i: usize, list: i64) -> Value {
    let plan = ["free", "starter", "pro", "enterprise"][i % 4];
    let mut row = json!({
        "email": format!("customer{i:05}@example-shop.com"),
        "name": format!("Customer Number {i}"),
        "attributes": {
            "plan": plan,
            "company": format!("Company {i} GmbH"),
            "city": "Berlin",
            "country": "DE",
            "language": "de",
            "signup_source": "checkout",
            "utm_campaign": "spring-sale-2026",
            "tags": ["newsletter", "customer", "vip"],
            "orders": i % 37,
            "lifetime_value": 1234.56,
            "last_order_at": "2026-05-14T09:30:00Z",
            "note": "",
        },
        "list_ids": [list],
    });
    let pad = ROW_BYTES - row.to_string().len();
    let note: String = "Prefers mail in the morning; asked about invoices by post. "
        .chars()
        .cycle()
        .take(pad)
        .collect();
    row["attributes"]["note"] = json!(note);
    assert_eq!(row.to_string().len(), ROW_BYTES);
    row
}

#[tokio::test]
async fn a_bulk_upsert_of_ten_thousand_rows_with_realistic_attributes_is_taken_whole() {
    let (pool, org, list, app, t) = setup(Edge::default()).await;
    let rows: Vec<Value> = (0..10_000).map(|i| realistic(i, list)).collect();
    let body = json!({ "subscribers": rows }).to_string();
    // Well over twice what any other request may send, and within the bulk upsert's own limit.
    assert!(
        body.len() > 2 * MAX_REQUEST_BYTES && body.len() < BULK_MAX_BYTES,
        "{} bytes",
        body.len()
    );
    let r = reqwest::Client::new()
        .post(format!("{}/api/v1/subscribers/bulk", app.base))
        .bearer_auth(&t)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, StatusCode::OK, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        (answer["created"].as_u64(), answer["updated"].as_u64()),
        (Some(10_000), Some(0)),
        "{}",
        answer["errors"]
    );
    assert_eq!(answer["errors"], json!([]));
    let (count, members): (i64, i64) = sqlx::query_as(
        "select (select count(*) from subscribers where org_id = $1),
                (select count(*) from list_members where list_id = $2)",
    )
    .bind(org)
    .bind(list)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((count, members), (10_000, 10_000));
    // Every row landed as sent: the last one read back has the attributes it was sent with.
    let (name, attributes): (String, String) = sqlx::query_as(
        "select name, attributes::text from subscribers where org_id = $1 and email = $2",
    )
    .bind(org)
    .bind("customer09999@example-shop.com")
    .fetch_one(&pool)
    .await
    .unwrap();
    let sent = realistic(9_999, list);
    assert_eq!(name, "Customer Number 9999");
    assert_eq!(
        serde_json::from_str::<Value>(&attributes).unwrap(),
        sent["attributes"]
    );
}

/// An answer read off a raw connection: status, headers (lower-case names) and body.
struct Raw {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Raw {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as the problem document it must be (a chunked body's one chunk included).
    fn problem(&self) -> Value {
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{} {:?} {}",
            self.status,
            self.headers,
            self.body
        );
        let (start, end) = (self.body.find('{'), self.body.rfind('}'));
        let json = match (start, end) {
            (Some(s), Some(e)) => &self.body[s..=e],
            _ => panic!("no JSON body: {:?}", self.body),
        };
        let p: Value = serde_json::from_str(json).unwrap();
        assert_eq!(p["status"].as_u64(), Some(u64::from(self.status)), "{p}");
        assert_eq!(p["type"], "about:blank", "{p}");
        assert!(p["title"].is_string() && p["detail"].is_string(), "{p}");
        p
    }
}

/// Sends `head`, then `first` of the body, waits `pause`, and reads the whole answer (the
/// request says `Connection: close`). The rest of a body the server refuses is never sent: a
/// client still writing when the server closes would only see a broken pipe.
async fn raw(app: &TestApp, head: &str, first: &[u8], pause: Duration) -> Raw {
    let mut s = TcpStream::connect(app.base.trim_start_matches("http://"))
        .await
        .unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(first).await.unwrap();
    tokio::time::sleep(pause).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no answer: {answer:?}"));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {answer:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Raw {
        status,
        headers,
        body: body.to_owned(),
    }
}

/// A POST head declaring a JSON body of `length` bytes.
fn post_head(app: &TestApp, path: &str, token: &str, length: usize) -> String {
    let host = app.base.trim_start_matches("http://");
    format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
    )
}

#[tokio::test]
async fn a_body_over_its_endpoints_limit_is_a_413_problem_document() {
    let (pool, org, _, app, t) = setup(Edge::default()).await;
    // The bulk upsert takes up to 16 MiB, every other endpoint 2 MiB; a declared length past
    // the limit is refused from the head alone.
    for (path, limit, says) in [
        ("/api/v1/subscribers/bulk", BULK_MAX_BYTES, "16 MiB"),
        ("/api/v1/subscribers", MAX_REQUEST_BYTES, "2 MiB"),
        ("/api/v1/messages", MAX_REQUEST_BYTES, "2 MiB"),
    ] {
        let answer = raw(
            &app,
            &post_head(&app, path, &t, limit + 1),
            b"",
            Duration::ZERO,
        )
        .await;
        assert_eq!(answer.status, 413, "{path}: {}", answer.body);
        let p = answer.problem();
        assert!(p["detail"].as_str().unwrap().contains(says), "{path}: {p}");
    }
    // The ordinary limit still holds for the other endpoints: 3 MiB, within the bulk upsert's
    // limit, is too much for a single upsert.
    let answer = raw(
        &app,
        &post_head(&app, "/api/v1/subscribers", &t, 3 * 1024 * 1024),
        b"",
        Duration::ZERO,
    )
    .await;
    assert_eq!(answer.status, 413, "{}", answer.body);
    answer.problem();
    let written: i64 = sqlx::query_scalar("select count(*) from subscribers where org_id = $1")
        .bind(org)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(written, 0);
}

/// The org's deliveries, whatever their state.
async fn queued(pool: &sqlx::PgPool, org: i64) -> i64 {
    sqlx::query_scalar("select count(*) from deliveries where org_id = $1")
        .bind(org)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_body_not_sent_as_json_is_a_415_problem_document_and_the_document_says_so() {
    let (pool, org, list, app, t) = setup(Edge::default()).await;
    let (s, _, ann) = send(
        &app,
        "POST",
        "/api/v1/subscribers",
        Some(&t),
        Some(&json!({"email": "ann@example.com"})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{ann}");
    let ann = ann["id"].as_i64().unwrap();
    // Each endpoint that takes a body, with a body it would take as JSON.
    let endpoints = [
        (
            "POST",
            "/api/v1/subscribers",
            "/api/v1/subscribers".to_owned(),
            json!({"email": "bob@example.com"}),
        ),
        (
            "PATCH",
            "/api/v1/subscribers/{id}",
            format!("/api/v1/subscribers/{ann}"),
            json!({"name": "Ann"}),
        ),
        (
            "POST",
            "/api/v1/subscribers/bulk",
            "/api/v1/subscribers/bulk".to_owned(),
            json!({"subscribers": [{"email": "cy@example.com"}]}),
        ),
        (
            "POST",
            "/api/v1/lists/{list_id}/signups",
            format!("/api/v1/lists/{list}/signups"),
            json!({"email": "dee@example.com"}),
        ),
        (
            "POST",
            "/api/v1/messages",
            "/api/v1/messages".to_owned(),
            json!({"template": "receipt", "to": "eve@example.com", "data": {}}),
        ),
    ];
    let queued_before = queued(&pool, org).await;
    let c = reqwest::Client::new();
    for (method, _, path, body) in &endpoints {
        // No content type at all, and one that is not JSON.
        for content_type in [
            None,
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
        ] {
            let mut r = c
                .request(method.parse().unwrap(), format!("{}{path}", app.base))
                .bearer_auth(&t)
                .header("idempotency-key", "media-type")
                .body(body.to_string());
            if let Some(ct) = content_type {
                r = r.header("content-type", ct);
            }
            let r = r.send().await.unwrap();
            let status = r.status();
            let ct = r.headers()["content-type"].to_str().unwrap().to_owned();
            let text = r.text().await.unwrap();
            assert_eq!(
                status,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "{method} {path} ({content_type:?}): {text}"
            );
            assert_eq!(ct, "application/problem+json", "{method} {path}");
            let p: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(p["status"], 415, "{p}");
            assert!(
                p["detail"].as_str().unwrap().contains("application/json"),
                "{p}"
            );
        }
    }
    // Nothing was written: Ann is the only subscriber, still without a name, and nothing was
    // queued.
    let (subscribers, name): (i64, String) = sqlx::query_as(
        "select (select count(*) from subscribers where org_id = $1),
                (select name from subscribers where id = $2)",
    )
    .bind(org)
    .bind(ann)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((subscribers, name.as_str()), (1, ""));
    assert_eq!(queued(&pool, org).await, queued_before);

    // The document lists the 415 (and the 413) of each, as a problem document.
    let (s, _, doc) = call(&app, "GET", "/api/v1/openapi.json", None).await;
    assert_eq!(s, StatusCode::OK);
    for (method, template, _, _) in &endpoints {
        let op = &doc["paths"][template][method.to_lowercase()];
        assert!(op.is_object(), "{method} {template} is not in the document");
        for code in ["413", "415"] {
            assert!(
                op["responses"][code]["content"]["application/problem+json"].is_object(),
                "{method} {template}: no {code} problem in {}",
                op["responses"]
            );
        }
    }
}

#[tokio::test]
async fn a_method_an_endpoint_does_not_take_is_a_405_problem_document_with_allow() {
    let (_pool, _org, _list, app, t) = setup(Edge::default()).await;
    for (method, path, token, allowed) in [
        (
            "PUT",
            "/api/v1/subscribers",
            Some(t.as_str()),
            &["GET", "POST"][..],
        ),
        (
            "DELETE",
            "/api/v1/subscribers/bulk",
            Some(t.as_str()),
            &["POST"][..],
        ),
        ("POST", "/api/v1/openapi.json", None, &["GET"][..]),
        ("PATCH", "/api/v1/messages", Some(t.as_str()), &["POST"][..]),
    ] {
        let (s, h, p) = call(&app, method, path, token).await;
        assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}: {p}");
        assert_eq!(
            h["content-type"], "application/problem+json",
            "{method} {path}"
        );
        assert_eq!(p["status"], 405, "{p}");
        assert!(p["detail"].is_string() && p["title"].is_string(), "{p}");
        let allow = h
            .get("allow")
            .unwrap_or_else(|| panic!("{method} {path}: no Allow header"))
            .to_str()
            .unwrap();
        for m in allowed {
            assert!(allow.contains(m), "{method} {path}: Allow: {allow}");
        }
        assert!(!allow.contains(method), "{method} {path}: Allow: {allow}");
    }
}

#[tokio::test]
async fn a_request_that_outlasts_the_timeout_is_a_408_problem_document() {
    let edge = Edge {
        request_timeout: Duration::from_secs(1),
        ..Edge::default()
    };
    let (_pool, _org, _list, app, t) = setup(edge).await;
    // A body that never finishes arriving.
    let answer = raw(
        &app,
        &post_head(&app, "/api/v1/subscribers", &t, 100),
        b"{\"email\":",
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(answer.status, 408, "{}", answer.body);
    answer.problem();
}
