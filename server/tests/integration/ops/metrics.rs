//! `/metrics`: Prometheus text with the figures an operator alerts on.

use app::domain::Role;
use mailroom::workers::delivery::Worker;

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::test_app::spawn_app;
use testkit::SmtpSink;

fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn metrics_report_deliveries_queue_depth_age_latency_and_leader_epoch() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let addresses: Vec<String> = (0..5).map(|i| format!("m{i}@example.org")).collect();
    crate::support::helpers::enqueue_test_mail_to(&pool, org, "m", &addresses).await;
    sqlx::query("update deliveries set created_at = now() - interval '90 seconds', next_attempt_at = now() - interval '90 seconds'")
        .execute(&pool)
        .await
        .unwrap();
    let app = spawn_app(pool.clone()).await;
    let scrape = || async {
        let r = reqwest::get(format!("{}/metrics", app.base)).await.unwrap();
        assert_eq!(r.status(), 200);
        r.text().await.unwrap()
    };
    let before = scrape().await;
    assert_eq!(
        value(&before, r#"mailroom_deliveries{status="queued"}"#),
        5.0
    );
    assert_eq!(
        value(&before, r#"mailroom_delivery_queue_depth{kind="test"}"#),
        5.0
    );
    assert_eq!(
        value(&before, r#"mailroom_delivery_queue_depth{kind="campaign"}"#),
        0.0
    );
    assert_eq!(
        value(&before, r#"mailroom_deliveries{status="sending"}"#),
        0.0
    );
    assert!(value(&before, "mailroom_delivery_oldest_queued_seconds") >= 89.0);
    assert_eq!(value(&before, "mailroom_leader_epoch"), 0.0);

    // Two taken by a worker and not yet sent: in flight, no longer queued.
    app::db::delivery::claim(&pool, 2, 60.0, "elsewhere")
        .await
        .unwrap();
    let flying = scrape().await;
    assert_eq!(
        value(&flying, r#"mailroom_deliveries{status="sending"}"#),
        2.0
    );
    assert_eq!(
        value(&flying, r#"mailroom_deliveries{status="queued"}"#),
        3.0
    );
    assert_eq!(
        value(&flying, r#"mailroom_delivery_queue_depth{kind="test"}"#),
        3.0
    );
    app::db::delivery::release_held(&pool, "elsewhere")
        .await
        .unwrap();

    app::db::leader::acquire(&pool, "leader", "me", 30.0)
        .await
        .unwrap();
    let sink = SmtpSink::start();
    let mut worker = Worker::new(pool.clone(), crate::support::fixtures::config(&sink), "m");
    let sent_before = value(&before, "mailroom_smtp_latency_seconds_count");
    while worker.drain().await.unwrap() > 0 {}
    let after = scrape().await;
    assert_eq!(
        value(&after, r#"mailroom_deliveries{status="delivered"}"#),
        5.0
    );
    assert_eq!(
        value(&after, r#"mailroom_deliveries{status="sending"}"#),
        0.0
    );
    assert_eq!(
        value(&after, r#"mailroom_delivery_queue_depth{kind="test"}"#),
        0.0
    );
    assert_eq!(
        value(&after, "mailroom_delivery_oldest_queued_seconds"),
        0.0
    );
    assert_eq!(value(&after, "mailroom_leader_epoch"), 1.0);
    // Other tests in this process send mail too: at least our five were timed.
    assert!(value(&after, "mailroom_smtp_latency_seconds_count") >= sent_before + 5.0);
}

/// With a metrics token set, a scrape without it (or with another) is refused and changes
/// nothing; with it, the figures come as before.
#[tokio::test]
async fn a_metrics_token_is_required_when_one_is_set() {
    let api = app::api::ApiConfig {
        secure_cookies: false,
        captured_dir: None,
        campaign_bin_days: 30.0,
        public_url: "http://mailroom.test".into(),
    };
    let edge = mailroom::http::Edge {
        metrics_token: Some("scrape-token-123".parse().unwrap()),
        ..mailroom::http::Edge::default()
    };
    let app = crate::support::test_app::spawn_app_with(test_db().await, api, edge).await;
    let c = reqwest::Client::new();
    let url = format!("{}/metrics", app.base);
    for auth in [
        None,
        Some("Bearer wrong"),
        Some("Bearer scrape-token-12"),
        Some("scrape-token-123"),
    ] {
        let mut r = c.get(&url);
        if let Some(a) = auth {
            r = r.header("authorization", a);
        }
        let r = r.send().await.unwrap();
        assert_eq!(r.status(), 401, "{auth:?}");
        assert!(!r.text().await.unwrap().contains("mailroom_deliveries"));
    }
    let r = c
        .get(&url)
        .header("authorization", "Bearer scrape-token-123")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("mailroom_leader_epoch"));
}

async fn counted(pool: &sqlx::PgPool) -> Vec<(String, String, i64)> {
    sqlx::query_as(
        "select kind, status, count(*) from deliveries group by kind, status order by kind, status",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn kept(pool: &sqlx::PgPool) -> Vec<(String, String, i64)> {
    sqlx::query_as(
        "select kind, status, sum(n)::bigint from delivery_counts group by kind, status
         having sum(n) <> 0 order by kind, status",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The counts /metrics serves equal `count(*)` after writers inserting, moving and deleting
/// deliveries race with each other and with folds of the count rows; a fold leaves one row per
/// kind and status.
#[tokio::test]
async fn delivery_counts_stay_exact_under_racing_writers_and_folds() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let mut writers = Vec::new();
    for w in 0..4 {
        let pool = pool.clone();
        writers.push(tokio::spawn(async move {
            for round in 0..15 {
                let addresses: Vec<String> = (0..10)
                    .map(|i| format!("w{w}r{round}i{i}@example.org"))
                    .collect();
                let dialog = format!("w{w}r{round}");
                let jobs = crate::support::helpers::enqueue_test_mail_to(&pool, org, &dialog, &addresses).await;
                sqlx::query("update deliveries set status = 'delivered', finished_at = now() where job_id = any($1) and recipient like '%i1@%'")
                    .bind(&jobs)
                    .execute(&pool)
                    .await
                    .unwrap();
                sqlx::query("update deliveries set status = 'failed', finished_at = now() where job_id = any($1) and recipient like '%i2@%'")
                    .bind(&jobs)
                    .execute(&pool)
                    .await
                    .unwrap();
                sqlx::query("delete from deliveries where job_id = any($1) and recipient like '%i3@%'")
                    .bind(&jobs)
                    .execute(&pool)
                    .await
                    .unwrap();
            }
        }));
    }
    let folder = {
        let pool = pool.clone();
        tokio::spawn(async move {
            let mut folds = 0;
            for _ in 0..40 {
                app::db::metrics::fold_counts(&pool).await.unwrap();
                folds += 1;
                tokio::task::yield_now().await;
            }
            folds
        })
    };
    let second_folder = {
        let pool = pool.clone();
        tokio::spawn(async move {
            for _ in 0..40 {
                app::db::metrics::fold_counts(&pool).await.unwrap();
            }
        })
    };
    for w in writers {
        w.await.unwrap();
    }
    assert_eq!(folder.await.unwrap(), 40);
    second_folder.await.unwrap();
    let truth = counted(&pool).await;
    assert_eq!(
        truth,
        vec![
            ("test".to_string(), "delivered".to_string(), 60),
            ("test".to_string(), "failed".to_string(), 60),
            ("test".to_string(), "queued".to_string(), 420),
        ]
    );
    assert_eq!(kept(&pool).await, truth);
    app::db::metrics::fold_counts(&pool).await.unwrap();
    assert_eq!(kept(&pool).await, truth);
    let rows: (i64,) = sqlx::query_as("select count(*) from delivery_counts")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows.0, 3, "one row per kind and status after a fold");
    let s = app::db::metrics::snapshot(&pool).await.unwrap();
    assert_eq!(s.queued_by_kind, vec![("test".to_string(), 420)]);
    let mut by_status = s.by_status.clone();
    by_status.sort();
    assert_eq!(
        by_status,
        vec![
            ("delivered".to_string(), 60),
            ("failed".to_string(), 60),
            ("queued".to_string(), 420),
            ("sending".to_string(), 0),
        ]
    );
}

/// A scrape reads at most one deliveries row (the first of an index), however many rows
/// the table holds.
#[tokio::test]
async fn a_scrape_does_not_scan_the_deliveries_table() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    sqlx::query(
        "insert into deliveries (job_id, org_id, kind, priority, recipient, email_lower, status, finished_at)
         select 'test:1:1:bulk:b' || i || '@example.org', $1, 'test', 0, 'b' || i || '@example.org', 'b' || i || '@example.org',
                case when i % 2 = 0 then 'queued' else 'delivered' end,
                case when i % 2 = 0 then null else now() end
         from generate_series(1, 20000) i",
    )
    .bind(org)
    .execute(&pool)
    .await
    .unwrap();
    // A worker holds some (in flight: counted from the claims, one probe each).
    for _ in 0..4 {
        app::db::delivery::claim(&pool, 50, 60.0, "w")
            .await
            .unwrap();
    }
    for table in ["deliveries", "delivery_claims"] {
        sqlx::query(&format!("analyze {table}"))
            .execute(&pool)
            .await
            .unwrap();
    }
    for sql in [app::db::metrics::COUNTS, app::db::metrics::OLDEST_AND_EPOCH] {
        let plan: Vec<(String,)> = sqlx::query_as(&format!("explain analyze {sql}"))
            .fetch_all(&pool)
            .await
            .unwrap();
        let plan: Vec<String> = plan.into_iter().map(|(l,)| l).collect();
        assert!(
            !plan.iter().any(|l| l.contains("Seq Scan on deliveries")),
            "{}",
            plan.join("\n")
        );
        for l in plan.iter().filter(|l| l.contains("on deliveries")) {
            // Each probe reads at most one row per loop.
            let rows = l
                .split("actual time=")
                .nth(1)
                .and_then(|a| a.split("rows=").nth(1))
                .and_then(|r| r.split_whitespace().next())
                .and_then(|r| r.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("no actual rows in {l}"));
            assert!(rows <= 1.0, "{}", plan.join("\n"));
        }
    }
    let s = app::db::metrics::snapshot(&pool).await.unwrap();
    assert_eq!(s.queued_by_kind, vec![("test".to_string(), 9800)]);
    assert!(s.by_status.contains(&("sending".to_string(), 200)));
}
