//! The Deliveries page's server functions over real HTTP on a real PostgreSQL: tenancy, keyset
//! paging, the admin's retry (compare-and-set, audited, role-checked) and captured messages.

use app::api::deliveries::{CapturedMessage, DeliveriesPage, DeliveryCounts, RetryDelivery};
use std::collections::HashSet;

use app::db::delivery::admin::Filter;
use app::domain::{DeliveryCursor, DeliveryKind, DeliveryStatus, Role};
use serde_json::Value;
use sqlx::PgPool;

use crate::support::fixtures::test_mail_in_states as seed;
use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::test_app::{json, spawn_app, spawn_app_capturing};

/// The Deliveries page's first page, unfiltered.
fn every_delivery() -> DeliveriesPage {
    DeliveriesPage {
        status: None,
        kind: None,
        recipient: None,
        after: None,
    }
}

/// Every column a retry could touch, to prove a refused retry changed nothing.
async fn snapshot(pool: &PgPool, job: &str) -> String {
    sqlx::query_scalar("select row_to_json(d)::text from deliveries d where job_id = $1")
        .bind(job)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn retry_audits(pool: &PgPool, job: &str) -> i64 {
    sqlx::query_scalar(
        "select count(*) from audit_log where action = 'delivery.retry' and object_id = $1",
    )
    .bind(job)
    .fetch_one(pool)
    .await
    .unwrap()
}

const REJECTED: &str = "550 5.1.1 <x@a.example>: Recipient address rejected";

/// One failed (ben) and one unknown (cy) delivery: the two retryable states.
async fn seed_failed_and_unknown(pool: &PgPool, org: i64) -> Vec<String> {
    seed(
        pool,
        org,
        "a.example",
        &[
            ("ben", DeliveryStatus::Failed, Some(REJECTED)),
            ("cy", DeliveryStatus::Unknown, None),
        ],
    )
    .await
}

#[tokio::test]
async fn counts_list_retry_and_messages_are_scoped_to_the_org() {
    let pool = test_db().await;
    let alpha = TestOrg::with_roles(&pool, "alpha", &[Role::Owner]).await;
    let org_a = alpha.id.0;
    let beta = TestOrg::with_roles(&pool, "beta", &[Role::Owner]).await;
    let org_b = beta.id.0;
    seed(
        &pool,
        org_a,
        "a.example",
        &[
            ("ann", DeliveryStatus::Delivered, Some("250 ok")),
            ("ben", DeliveryStatus::Failed, Some(REJECTED)),
            ("cy", DeliveryStatus::Unknown, None),
        ],
    )
    .await;
    let b_jobs = seed(
        &pool,
        org_b,
        "b.example",
        &[
            ("secret1", DeliveryStatus::Failed, Some("550 no")),
            ("secret2", DeliveryStatus::Failed, Some("550 no")),
            (
                "secret3",
                DeliveryStatus::Delivered,
                Some("captured to file"),
            ),
        ],
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let b_file = app::capture::path_for(dir.path(), org_b, &b_jobs[2]);
    std::fs::create_dir_all(b_file.parent().unwrap()).unwrap();
    std::fs::write(&b_file, "Subject: beta's secret\r\n\r\nhush").unwrap();

    let app = spawn_app_capturing(pool.clone(), Some(dir.path().to_owned())).await;
    let c = alpha.owner().signed_in(&app).await;

    let (status, body) = app.call_fn(&c, DeliveryCounts {}).await;
    assert_eq!(status, 200, "{body}");
    let counts: Vec<(String, i64)> = json(&body)
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["status"].as_str().unwrap().to_owned(),
                c["count"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        counts.len(),
        DeliveryStatus::ALL.len(),
        "every state listed"
    );
    for (s, n) in &counts {
        let expected = match s.as_str() {
            "delivered" | "failed" | "unknown" => 1,
            _ => 0,
        };
        assert_eq!(*n, expected, "{s}: {body}");
    }

    let (status, body) = app.call_fn(&c, every_delivery()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["rows"].as_array().unwrap().len(), 3, "{body}");
    assert!(!body.contains("secret"), "{body}");

    for job in &b_jobs {
        let before = snapshot(&pool, job).await;
        let (status, body) = app
            .call_fn(
                &c,
                RetryDelivery {
                    job_id: job.to_string(),
                },
            )
            .await;
        assert_eq!(status, 404);
        assert_eq!(json(&body), Value::from("NotFound"), "{body}");
        assert_eq!(snapshot(&pool, job).await, before);
        let (_, body) = app
            .call_fn(
                &c,
                CapturedMessage {
                    job_id: job.to_string(),
                },
            )
            .await;
        assert_eq!(json(&body), Value::from("NotFound"), "{body}");
    }
    assert_eq!(retry_audits(&pool, &b_jobs[0]).await, 0);
}

/// A row at its own creation time (pages then cross both parts of the key).
async fn at(pool: &PgPool, job: &str, seconds_ago: i64) {
    sqlx::query(
        "update deliveries set created_at = now() - make_interval(secs => $2) where job_id = $1",
    )
    .bind(job)
    .bind(seconds_ago as f64)
    .execute(pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn keyset_pages_return_every_matching_row_exactly_once() {
    let pool = test_db().await;
    let alpha = TestOrg::with_roles(&pool, "alpha", &[Role::Owner]).await;
    let org_a = alpha.id.0;
    let beta = TestOrg::with_roles(&pool, "beta", &[Role::Owner]).await;
    let org_b = beta.id.0;
    let states = [
        DeliveryStatus::Failed,
        DeliveryStatus::Delivered,
        DeliveryStatus::Unknown,
        DeliveryStatus::Queued,
    ];
    let names: Vec<String> = (0..83)
        .map(|i| format!("{}{i}", if i % 3 == 0 { "Zed" } else { "amy" }))
        .collect();
    let rows: Vec<(&str, DeliveryStatus, Option<&str>)> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), states[i % 4], Some("550 no")))
        .collect();
    let jobs = seed(&pool, org_a, "a.example", &rows).await;
    // Same rows in another org: never on any page of alpha's.
    seed(&pool, org_b, "a.example", &rows).await;
    // Most rows share one created_at (one transaction); some get their own.
    for (i, job) in jobs.iter().enumerate().filter(|(i, _)| i % 5 == 0) {
        at(&pool, job, (i % 7) as i64).await;
    }

    let expected = |f: &dyn Fn(usize, &str) -> bool| -> HashSet<String> {
        jobs.iter()
            .enumerate()
            .filter(|(i, _)| f(*i, &names[*i]))
            .map(|(_, j)| j.clone())
            .collect()
    };
    let cases: Vec<(Filter, HashSet<String>)> = vec![
        (Filter::default(), expected(&|_, _| true)),
        (
            Filter {
                status: Some(DeliveryStatus::Failed),
                ..Filter::default()
            },
            expected(&|i, _| i % 4 == 0),
        ),
        (
            Filter {
                status: Some(DeliveryStatus::Unknown),
                kind: Some(DeliveryKind::Test),
                recipient: Some("ZED"),
                after: None,
            },
            expected(&|i, n| i % 4 == 2 && n.starts_with("Zed")),
        ),
        (
            Filter {
                kind: Some(DeliveryKind::Campaign),
                ..Filter::default()
            },
            HashSet::new(),
        ),
    ];
    let mut conn = pool.acquire().await.unwrap();
    for (filter, want) in cases {
        let mut seen = Vec::new();
        let mut after: Option<DeliveryCursor> = None;
        let mut previous_key = None;
        loop {
            let f = Filter {
                after: after.as_ref(),
                ..filter
            };
            let page = app::db::delivery::admin::list(&mut conn, org_a, &f, 7)
                .await
                .unwrap();
            assert!(page.rows.len() <= 7);
            for r in &page.rows {
                // Newest first, strictly: the key never repeats or goes back up.
                let key = (r.created_at, r.job_id.clone());
                if let Some(p) = &previous_key {
                    assert!(&key < p, "{key:?} after {p:?}");
                }
                previous_key = Some(key);
                seen.push(r.job_id.clone());
            }
            match page.next {
                Some(c) => after = Some(c.to_string().parse().unwrap()),
                None => break,
            }
        }
        let unique: HashSet<String> = seen.iter().cloned().collect();
        assert_eq!(unique.len(), seen.len(), "a row shown twice");
        assert_eq!(unique, want);
    }
}

#[tokio::test]
async fn the_list_pages_over_http_with_the_cursor_it_hands_out() {
    let pool = test_db().await;
    let alpha = TestOrg::with_roles(&pool, "alpha", &[Role::Viewer]).await;
    let org = alpha.id.0;
    let names: Vec<String> = (0..120).map(|i| format!("r{i}")).collect();
    let rows: Vec<_> = names
        .iter()
        .map(|n| (n.as_str(), DeliveryStatus::Failed, Some("550 no")))
        .collect();
    let jobs = seed(&pool, org, "a.example", &rows).await;
    let app = spawn_app(pool).await;
    let c = alpha.users[0].signed_in(&app).await;
    let mut seen = Vec::new();
    let mut after = String::new();
    let mut pages = 0;
    loop {
        let query = DeliveriesPage {
            status: Some("failed".into()),
            kind: Some(String::new()),
            recipient: None,
            after: Some(after.clone()),
        };
        let (status, body) = app.call_fn(&c, query).await;
        assert_eq!(status, 200, "{body}");
        let page = json(&body);
        assert_eq!(page["can_retry"], false, "a viewer sees no retry");
        pages += 1;
        assert!(pages <= 3, "the cursor does not advance");
        for r in page["rows"].as_array().unwrap() {
            seen.push(r["job_id"].as_str().unwrap().to_owned());
            assert_eq!(r["detail"], "550 no", "failed rows carry the SMTP reply");
        }
        match page["next"].as_str() {
            Some(n) => after = n.to_owned(),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    let mut want = jobs.clone();
    want.sort();
    seen.sort();
    assert_eq!(seen, want);

    let lost = DeliveriesPage {
        status: Some("lost".into()),
        kind: None,
        recipient: None,
        after: None,
    };
    let (_, body) = app.call_fn(&c, lost).await;
    // The JSON body escapes the quotes around the value.
    assert!(
        body.contains(r#"\"lost\" is not a delivery status (one of queued"#),
        "{body}"
    );
}

#[tokio::test]
async fn retry_requeues_failed_and_unknown_with_an_audit_row_naming_the_actor() {
    let pool = test_db().await;
    let alpha = TestOrg::with_roles(&pool, "alpha", &[Role::Admin]).await;
    let org = alpha.id.0;
    let jobs = seed_failed_and_unknown(&pool, org).await;
    sqlx::query("update deliveries set attempt = 3")
        .execute(&pool)
        .await
        .unwrap();
    let app = spawn_app(pool.clone()).await;
    let c = alpha.admin(0).signed_in(&app).await;
    for (job, before) in jobs.iter().zip(["failed", "unknown"]) {
        let (status, body) = app
            .call_fn(
                &c,
                RetryDelivery {
                    job_id: job.to_string(),
                },
            )
            .await;
        assert_eq!(status, 200, "{body}");
        let row: (String, i32, bool, bool, bool, Option<String>, bool) = sqlx::query_as(
            "select status, attempt, finished_at is null,
                    exists (select 1 from delivery_queue q where q.job_id = d.job_id),
                    not exists (select 1 from delivery_marks m where m.job_id = d.job_id),
                    last_error, next_attempt_at <= now()
             from deliveries d where job_id = $1",
        )
        .bind(job)
        .fetch_one(&pool)
        .await
        .unwrap();
        let who = format!("retried by {}", alpha.admin(0).email);
        assert_eq!(
            row,
            ("queued".into(), 3, true, true, true, Some(who), true),
            "{job}"
        );
        let audit: (Option<i64>, Value, Value) = sqlx::query_as(
            "select actor_id, before, after from audit_log
             where org_id = $1 and action = 'delivery.retry' and object_type = 'delivery' and object_id = $2",
        )
        .bind(org)
        .bind(job)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!(audit.0, Some(alpha.admin(0).id.0));
        assert_eq!(audit.1, serde_json::json!({ "status": before }));
        assert_eq!(audit.2, serde_json::json!({ "status": "queued" }));
    }
}

#[tokio::test]
async fn retry_of_a_row_in_another_state_is_refused_naming_it_and_changes_nothing() {
    let pool = test_db().await;
    let alpha = TestOrg::with_roles(&pool, "alpha", &[Role::Owner]).await;
    let org = alpha.id.0;
    let jobs = seed(
        &pool,
        org,
        "a.example",
        &[
            ("ann", DeliveryStatus::Delivered, Some("250 ok")),
            ("bob", DeliveryStatus::Queued, None),
            ("cat", DeliveryStatus::Suppressed, None),
        ],
    )
    .await;
    let app = spawn_app(pool.clone()).await;
    let c = alpha.owner().signed_in(&app).await;
    for (job, state) in jobs.iter().zip(["delivered", "queued", "suppressed"]) {
        let before = snapshot(&pool, job).await;
        let (status, body) = app
            .call_fn(
                &c,
                RetryDelivery {
                    job_id: job.to_string(),
                },
            )
            .await;
        assert_eq!(status, 409);
        let msg = json(&body)["Conflict"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            msg.contains(&format!("This delivery is {state} and cannot be retried")),
            "{body}"
        );
        assert_eq!(snapshot(&pool, job).await, before);
        assert_eq!(retry_audits(&pool, job).await, 0);
    }
}

#[tokio::test]
async fn a_second_retry_is_refused_even_when_both_race() {
    let pool = test_db().await;
    let alpha = TestOrg::new(&pool, "alpha").await;
    let org = alpha.id.0;
    let jobs = seed_failed_and_unknown(&pool, org).await;
    let app = spawn_app(pool.clone()).await;
    let owner = alpha.owner().signed_in(&app).await;
    let admin = alpha.admin(0).signed_in(&app).await;

    // One after the other: the second sees the row queued.
    let retry = |job: &str| RetryDelivery {
        job_id: job.to_owned(),
    };
    let (s1, _) = app.call_fn(&owner, retry(&jobs[0])).await;
    let (s2, body) = app.call_fn(&owner, retry(&jobs[0])).await;
    assert_eq!((s1.as_u16(), s2.as_u16()), (200, 409));
    assert!(body.contains("This delivery is queued"), "{body}");
    assert_eq!(retry_audits(&pool, &jobs[0]).await, 1);

    // At once, by two admins: exactly one wins.
    for _ in 0..5 {
        sqlx::query("update deliveries set status = 'unknown' where job_id = $1")
            .bind(&jobs[1])
            .execute(&pool)
            .await
            .unwrap();
        sqlx::query("delete from audit_log where object_id = $1")
            .bind(&jobs[1])
            .execute(&pool)
            .await
            .unwrap();
        let (a, b) = tokio::join!(
            app.call_fn(&owner, retry(&jobs[1])),
            app.call_fn(&admin, retry(&jobs[1])),
        );
        let wins = [a.0, b.0].iter().filter(|s| s.as_u16() == 200).count();
        assert_eq!(wins, 1, "{a:?} {b:?}");
        assert_eq!(retry_audits(&pool, &jobs[1]).await, 1);
    }
}

#[tokio::test]
async fn a_viewer_can_look_but_not_retry() {
    let pool = test_db().await;
    let alpha = TestOrg::with_roles(&pool, "alpha", &[Role::Viewer, Role::Admin]).await;
    let org = alpha.id.0;
    let jobs = seed(
        &pool,
        org,
        "a.example",
        &[("ben", DeliveryStatus::Failed, Some(REJECTED))],
    )
    .await;
    let app = spawn_app(pool.clone()).await;
    let viewer = alpha.users[0].signed_in(&app).await;
    let before = snapshot(&pool, &jobs[0]).await;
    let retry = RetryDelivery {
        job_id: jobs[0].clone(),
    };
    let (status, body) = app.call_fn(&viewer, retry).await;
    assert_eq!(status, 403);
    assert_eq!(json(&body), Value::from("Forbidden"), "{body}");
    assert_eq!(snapshot(&pool, &jobs[0]).await, before);
    let (_, body) = app.call_fn(&viewer, every_delivery()).await;
    assert_eq!(json(&body)["can_retry"], false);
    let admin = alpha.admin(0).signed_in(&app).await;
    let (_, body) = app.call_fn(&admin, every_delivery()).await;
    assert_eq!(json(&body)["can_retry"], true);
}

#[tokio::test]
async fn a_captured_message_is_read_back_from_its_file_with_a_size_cap() {
    let pool = test_db().await;
    let alpha = TestOrg::with_roles(&pool, "alpha", &[Role::Viewer]).await;
    let org = alpha.id.0;
    let jobs = seed(
        &pool,
        org,
        "a.example",
        &[
            ("ann", DeliveryStatus::Delivered, Some("captured to file")),
            ("big", DeliveryStatus::Delivered, Some("captured to file")),
            ("sent", DeliveryStatus::Delivered, Some("250 ok")),
        ],
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let message =
        "From: news@example.org\r\nTo: ann@a.example\r\nSubject: Hello\r\n\r\nHi Ann.\r\n";
    let write = |job: &str, content: &[u8]| {
        let path = app::capture::path_for(dir.path(), org, job);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    };
    write(&jobs[0], message.as_bytes());
    let cap = app::api::deliveries::CAPTURED_SHOW_BYTES as usize;
    write(&jobs[1], &vec![b'x'; cap + 10]);

    let app = spawn_app_capturing(pool.clone(), Some(dir.path().to_owned())).await;
    let c = alpha.users[0].signed_in(&app).await;

    let (status, body) = app
        .call_fn(
            &c,
            CapturedMessage {
                job_id: jobs[0].clone(),
            },
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let m = json(&body);
    assert_eq!(m["text"], message);
    assert_eq!(m["recipient"], "ann@a.example");
    assert_eq!(m["truncated"], false);

    let (_, body) = app
        .call_fn(
            &c,
            CapturedMessage {
                job_id: jobs[1].clone(),
            },
        )
        .await;
    let m = json(&body);
    assert_eq!(m["truncated"], true);
    assert_eq!(m["text"].as_str().unwrap().len(), cap);

    // The page renders it whole on the server, raw in a <pre>.
    let html = c
        .get(format!("{}/deliveries/message", app.base))
        .query(&[("job", &jobs[0])])
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let pre = html
        .split_once("id=\"captured-message\"")
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("no message on the page: {html}"));
    assert!(
        pre.contains("Subject: Hello") && pre.contains("Hi Ann."),
        "{pre}"
    );

    // Sent through SMTP: no file, a clear answer.
    let (_, body) = app
        .call_fn(
            &c,
            CapturedMessage {
                job_id: jobs[2].clone(),
            },
        )
        .await;
    assert!(
        body.contains("No captured copy of this message exists"),
        "{body}"
    );

    // The list marks only captured rows as openable.
    let (_, body) = app.call_fn(&c, every_delivery()).await;
    let openable: HashSet<String> = json(&body)["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["captured"] == true)
        .map(|r| r["job_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(openable, HashSet::from([jobs[0].clone(), jobs[1].clone()]));
}

/// Filters a person could never type (a NUL, a page position centuries away) are refused with
/// a 422 naming the filter, never an internal error from the database.
#[tokio::test]
async fn hostile_filter_values_are_refused_naming_the_filter() {
    let pool = test_db().await;
    let alpha = TestOrg::with_roles(&pool, "alpha", &[Role::Owner]).await;
    let app = spawn_app(pool.clone()).await;
    let c = alpha.owner().signed_in(&app).await;
    for (endpoint, field, value, says) in [
        ("deliveries", "recipient", "a\0b", "Recipient"),
        (
            "deliveries",
            "after",
            "-9223372036854775808~job",
            "page position",
        ),
        (
            "deliveries",
            "after",
            "9223372036854775807~job",
            "page position",
        ),
        ("deliveries", "status", "queued\0", "Status"),
        ("subscribers", "q", "\0", "Search"),
        ("suppressions", "q", "x\0", "Search"),
        ("audit_log", "action", "user.invite\0", "Action"),
        ("audit_log", "actor", "1\0", "user"),
    ] {
        let long = "x".repeat(501);
        for value in [value, long.as_str()] {
            let (status, body) = app.call_with(&c, endpoint, &[(field, value)]).await;
            assert_eq!(status, 422, "{endpoint} {field}={value:?}: {body}");
            let message = json(&body)["Invalid"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let expected = if value == long { "too long" } else { says };
            assert!(message.contains(expected), "{endpoint} {field}: {message}");
        }
    }
}

#[tokio::test]
async fn the_page_says_when_the_relay_is_failing_without_naming_it() {
    let pool = test_db().await;
    let alpha = TestOrg::with_roles(&pool, "alpha", &[Role::Viewer]).await;
    app::db::relay_health::opened(
        &pool,
        "10.1.2.3:2525",
        7,
        0,
        60.0,
        app::domain::relay::RelayFailure::NoReplyAfterBody,
    )
    .await
    .unwrap();
    let app = spawn_app(pool.clone()).await;
    let c = alpha.users[0].signed_in(&app).await;
    let page = |c: reqwest::Client| {
        let url = format!("{}/deliveries", app.base);
        async move { c.get(url).send().await.unwrap().text().await.unwrap() }
    };
    let html = page(c.clone()).await;
    assert!(html.contains(r#"data-state="open""#), "{html}");
    // The suite's cluster has no standby: said quietly, no warning.
    assert!(
        html.contains(r#"data-test="database-durability" data-state="no_standby""#),
        "{html}"
    );
    assert!(html.contains("7 failures in a row"), "{html}");
    assert!(
        html.contains("takes messages without confirming them"),
        "{html}"
    );
    assert!(
        !html.contains("10.1.2.3"),
        "the relay's address stays the operator's"
    );
    app::db::relay_health::healed(&pool, "10.1.2.3:2525")
        .await
        .unwrap();
    let html = page(c).await;
    assert!(html.contains(r#"data-state="healthy""#), "{html}");
    assert!(!html.contains(r#"data-state="open""#));
}
