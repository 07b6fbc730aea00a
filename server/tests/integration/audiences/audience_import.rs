//! CSV import into a list and export, over HTTP as the browser sends them: a form upload that
//! answers with the import's progress page; per-row errors with their lines and the good rows
//! imported; re-importing changes nothing; a file that is not readable as a whole imports
//! nothing; 100,000 rows stream through; the export is the list as CSV.

use app::api::lists::{CreateList, ImportStatus, Lists};
use std::time::Duration;

use app::domain::Role;
use reqwest::StatusCode;
use serde_json::Value;

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::test_app::{json, spawn_app, TestApp};

async fn list(app: &TestApp, c: &reqwest::Client, name: &str) -> i64 {
    let (status, body) = app
        .call_fn(
            c,
            CreateList {
                name: name.to_string(),
            },
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let lists = json(&app.call_fn(c, Lists {}).await.1);
    lists["lists"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == name)
        .unwrap()["id"]
        .as_i64()
        .unwrap()
}

/// Uploads `bytes` as the form does; returns the status and where it sent the browser.
async fn upload(
    app: &TestApp,
    c: &reqwest::Client,
    list: i64,
    bytes: Vec<u8>,
) -> (StatusCode, String) {
    let part = reqwest::multipart::Part::bytes(bytes)
        .file_name("people.csv")
        .mime_str("text/csv")
        .unwrap();
    let form = reqwest::multipart::Form::new().part("file", part);
    let r = c
        .post(format!("{}/api/lists/{list}/import", app.base))
        .multipart(form)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let location = r
        .headers()
        .get("location")
        .map(|l| l.to_str().unwrap().to_string());
    (status, location.unwrap_or(r.text().await.unwrap()))
}

/// Uploads and waits for the import to end; returns its view.
async fn import(app: &TestApp, c: &reqwest::Client, list: i64, bytes: Vec<u8>) -> Value {
    let (status, location) = upload(app, c, list, bytes).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{location}");
    let id: i64 = location.rsplit('/').next().unwrap().parse().unwrap();
    for _ in 0..600 {
        let v = json(&app.call_fn(c, ImportStatus { id }).await.1);
        if v["status"] != "running" {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("import {id} did not end");
}

async fn members(app: &TestApp, list: i64) -> Vec<(String, String)> {
    sqlx::query_as(
        "select s.email, s.name from list_members m join subscribers s on s.id = m.subscriber_id
         where m.list_id = $1 order by s.email",
    )
    .bind(list)
    .fetch_all(&app.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn an_import_reports_each_bad_row_imports_the_good_ones_and_changes_nothing_the_second_time()
{
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let app = spawn_app(pool.clone()).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let news = list(&app, &admin, "News").await;
    let long_name = "n".repeat(1_000_000);
    let mut file = Vec::new();
    file.extend_from_slice(b"Name,Email,Plan\n");
    file.extend_from_slice(b"Ann,ann@example.org,pro\n");
    file.extend_from_slice(b"\"Lee, Bo\",bo@example.org,free\n");
    file.extend_from_slice(b"Nope,not-an-address,free\n");
    file.extend_from_slice(b"Ann again,ANN@example.org,pro\n");
    file.extend_from_slice(b"\xff\xfeBad,latin@example.org,free\n");
    file.extend_from_slice(format!("{long_name},long@example.org,free\n").as_bytes());
    file.extend_from_slice(b"Nul\0,nul@example.org,free\n");
    file.extend_from_slice(b"\n");
    file.extend_from_slice(b"<script>alert(1)</script>,cy@example.org,free\n");
    let v = import(&app, &admin, news, file.clone()).await;
    assert_eq!(v["status"], "done", "{v}");
    assert_eq!(
        (
            v["rows_read"].as_i64(),
            v["created_subscribers"].as_i64(),
            v["added_members"].as_i64(),
            v["error_count"].as_i64()
        ),
        (Some(8), Some(3), Some(3), Some(5)),
        "{v}"
    );
    let errors: Vec<(i64, String)> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["row"].as_i64().unwrap(),
                e["error"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        errors,
        [
            (
                4,
                "“not-an-address” is not a valid e-mail address".to_string()
            ),
            (
                5,
                "ANN@example.org appears earlier in the file (kept once)".to_string()
            ),
            (
                6,
                "the name is not valid UTF-8 (save the file as UTF-8)".to_string()
            ),
            (
                7,
                "the name is too long (at most 200 characters)".to_string()
            ),
            (8, "the name contains a NUL character".to_string()),
        ]
    );
    let imported = vec![
        ("ann@example.org".to_string(), "Ann".to_string()),
        ("bo@example.org".to_string(), "Lee, Bo".to_string()),
        (
            "cy@example.org".to_string(),
            "<script>alert(1)</script>".to_string(),
        ),
    ];
    assert_eq!(members(&app, news).await, imported);

    // The same file again: nothing new, nothing changed.
    let again = import(&app, &admin, news, file).await;
    assert_eq!(
        (
            again["created_subscribers"].as_i64(),
            again["added_members"].as_i64(),
            again["error_count"].as_i64()
        ),
        (Some(0), Some(0), Some(5)),
        "{again}"
    );
    assert_eq!(members(&app, news).await, imported);
    let audited: i64 =
        sqlx::query_scalar("select count(*) from audit_log where action = 'list.import'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(audited, 2);

    // The export is the list, as CSV, with the name exactly as stored.
    let r = admin
        .get(format!("{}/api/audience/export.csv?list={news}", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-disposition"]
        .to_str()
        .unwrap()
        .contains("list-"));
    let text = r.text().await.unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("email,name,status,created"));
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 3, "{text}");
    assert!(
        rows[1].starts_with("bo@example.org,\"Lee, Bo\",confirmed,"),
        "{text}"
    );
}

#[tokio::test]
async fn a_file_that_cannot_be_read_as_a_whole_imports_nothing_and_says_why() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner, Role::Admin, Role::Viewer]).await;
    let app = spawn_app(pool.clone()).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let viewer = acme.users[2].signed_in(&app).await;
    let news = list(&app, &admin, "News").await;

    let v = import(&app, &admin, news, b"mail,name\na@example.org,A\n".to_vec()).await;
    assert_eq!(v["status"], "failed");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("no \"email\" column"),
        "{v}"
    );
    // Good rows before a broken quote at the end are not half-imported.
    let mut broken = b"email,name\n".to_vec();
    for i in 0..2500 {
        broken.extend_from_slice(format!("p{i}@example.org,P{i}\n").as_bytes());
    }
    broken.extend_from_slice(b"\"unterminated@example.org,X\n");
    let v = import(&app, &admin, news, broken).await;
    let subscribers: i64 = sqlx::query_scalar("select count(*) from subscribers")
        .fetch_one(&pool)
        .await
        .unwrap();
    // The csv reader takes an unterminated quote to the end of the file as one field: either
    // the whole file fails or that last row is refused; never a half import.
    match v["status"].as_str() {
        Some("failed") => assert_eq!(subscribers, 0, "{v}"),
        Some("done") => {
            assert_eq!(subscribers, 2500, "{v}");
            assert_eq!(v["error_count"], 1, "{v}");
        }
        other => panic!("{other:?}: {v}"),
    }
    let (status, body) = upload(&app, &admin, news, Vec::new()).await;
    assert_eq!(
        (status, body.as_str()),
        (
            StatusCode::BAD_REQUEST,
            "The file is empty: nothing to import."
        )
    );
    // A viewer cannot import; another org's list (or none) is not found.
    let (status, _) = upload(&app, &viewer, news, b"email\na@example.org\n".to_vec()).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = upload(
        &app,
        &admin,
        news + 1000,
        b"email\na@example.org\n".to_vec(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let anonymous = crate::support::test_app::client(&app);
    let (status, _) = upload(&app, &anonymous, news, b"email\na@example.org\n".to_vec()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let r = anonymous
        .get(format!("{}/api/audience/export.csv", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_hundred_thousand_rows_stream_through_one_import() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let app = spawn_app(pool.clone()).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let big = list(&app, &admin, "Big").await;
    let mut file = b"email,name\n".to_vec();
    for i in 0..100_000 {
        file.extend_from_slice(format!("person{i}@example.org,Person {i}\n").as_bytes());
    }
    let v = import(&app, &admin, big, file).await;
    assert_eq!(v["status"], "done", "{v}");
    assert_eq!(
        (
            v["rows_read"].as_i64(),
            v["created_subscribers"].as_i64(),
            v["added_members"].as_i64()
        ),
        (Some(100_000), Some(100_000), Some(100_000))
    );
    let counts = json(&app.call_fn(&admin, Lists {}).await.1);
    assert_eq!(counts["lists"][0]["members"], 100_000);
    // The export streams them all back.
    let text = admin
        .get(format!("{}/api/audience/export.csv?list={big}", app.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(text.lines().count(), 100_001);
}

/// A value a spreadsheet would run as a formula is exported with a leading `'` (OWASP), and
/// importing the exported file reads back exactly the values that were exported.
#[tokio::test]
async fn formula_cells_are_neutralised_in_the_export_and_read_back_by_the_import() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Admin]).await;
    let beta = TestOrg::with_roles(&pool, "beta", &[Role::Admin]).await;
    let app = spawn_app(pool.clone()).await;
    let admin_a = acme.admin(0).signed_in(&app).await;
    let admin_b = beta.admin(0).signed_in(&app).await;
    let source = list(&app, &admin_a, "Source").await;
    let file = "email,name\n\
                calc@example.org,=cmd|' /C calc'!A0\n\
                -dash@example.org,+1 555\n\
                at@example.org,@SUM(A1)\n\
                quote@example.org,'=already quoted\n\
                plain@example.org,'Twas Ann\n";
    let v = import(&app, &admin_a, source, file.as_bytes().to_vec()).await;
    assert_eq!(v["status"], "done", "{v}");
    let stored = members(&app, source).await;
    assert_eq!(stored.len(), 5, "{stored:?}");
    assert!(stored.contains(&("calc@example.org".into(), "=cmd|' /C calc'!A0".into())));
    assert!(stored.contains(&("quote@example.org".into(), "=already quoted".into())));

    let text = admin_a
        .get(format!(
            "{}/api/audience/export.csv?list={source}",
            app.base
        ))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut cells = csv::Reader::from_reader(text.as_bytes());
    for row in cells.records() {
        let row = row.unwrap();
        for cell in [&row[0], &row[1]] {
            assert!(
                !cell.starts_with(['=', '+', '-', '@', '\t', '\r']),
                "a live formula cell {cell:?} in {text}"
            );
        }
    }
    assert!(text.contains("'-dash@example.org,'+1 555"), "{text}");
    assert!(
        text.contains("calc@example.org,'=cmd|' /C calc'!A0,"),
        "{text}"
    );

    // Another org imports the exported file: the same addresses and names.
    let copy = list(&app, &admin_b, "Copy").await;
    let v = import(&app, &admin_b, copy, text.into_bytes()).await;
    assert_eq!(v["status"], "done", "{v}");
    assert_eq!(v["error_count"].as_i64(), Some(0), "{v}");
    assert_eq!(members(&app, copy).await, stored);
}

#[tokio::test]
async fn an_external_id_column_sets_each_subscribers_id_once_and_refuses_one_another_has() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let app = spawn_app(pool.clone()).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let news = list(&app, &admin, "News").await;
    // Bo is there already without an id; Di already has u-4.
    sqlx::query(
        "insert into subscribers (org_id, email, email_lower, external_id)
         values ($1, 'bo@example.org', 'bo@example.org', null),
                ($1, 'di@example.org', 'di@example.org', 'u-4')",
    )
    .bind(acme.id.0)
    .execute(&pool)
    .await
    .unwrap();
    let file = b"email,external_id\n\
        ann@example.org,u-1\n\
        bo@example.org,u-2\n\
        cy@example.org,u-1\n\
        ed@example.org,u-4\n\
        fay@example.org,\n"
        .to_vec();
    let v = import(&app, &admin, news, file.clone()).await;
    assert_eq!(v["status"], "done", "{v}");
    let errors: Vec<(i64, String)> = v["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["row"].as_i64().unwrap(),
                e["error"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(errors.len(), 2, "{v}");
    assert_eq!(errors[0].0, 4);
    assert!(errors[0].1.contains("appears earlier"), "{errors:?}");
    assert_eq!(errors[1].0, 5);
    assert!(errors[1].1.contains("another subscriber"), "{errors:?}");
    let ids: Vec<(String, Option<String>)> = sqlx::query_as(
        "select email, external_id from subscribers where org_id = $1 order by email",
    )
    .bind(acme.id.0)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        ids,
        vec![
            ("ann@example.org".into(), Some("u-1".into())),
            ("bo@example.org".into(), Some("u-2".into())),
            ("di@example.org".into(), Some("u-4".into())),
            ("fay@example.org".into(), None),
        ]
    );
    // The same file again changes nothing.
    let again = import(&app, &admin, news, file).await;
    assert_eq!(again["created_subscribers"], 0, "{again}");
    let after: Vec<(String, Option<String>)> = sqlx::query_as(
        "select email, external_id from subscribers where org_id = $1 order by email",
    )
    .bind(acme.id.0)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(after, ids);
}
