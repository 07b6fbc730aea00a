//! `/metrics`: Prometheus text with the figures an operator alerts on.

use app::domain::Role;
use mailroom::delivery::Worker;

use crate::helpers::{org_with_users, test_db};
use crate::smtp_sink::SmtpSink;
use crate::test_app::spawn_app;

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
    let (org, _) = org_with_users(&pool, "acme", &[Role::Owner]).await;
    let addresses: Vec<String> = (0..5).map(|i| format!("m{i}@example.org")).collect();
    crate::helpers::enqueue_test_mail_to(&pool, org, "m", &addresses).await;
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
    assert!(value(&before, "mailroom_delivery_oldest_queued_seconds") >= 89.0);
    assert_eq!(value(&before, "mailroom_leader_epoch"), 0.0);

    app::db::leader::acquire(&pool, "leader", "me", 30.0)
        .await
        .unwrap();
    let sink = SmtpSink::start();
    let mut worker = Worker::new(pool.clone(), crate::delivery_worker::config(&sink), "m");
    let sent_before = value(&before, "mailroom_smtp_latency_seconds_count");
    while worker.round().await.unwrap() > 0 {}
    let after = scrape().await;
    assert_eq!(
        value(&after, r#"mailroom_deliveries{status="delivered"}"#),
        5.0
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
    };
    let edge = mailroom::http::Edge {
        metrics_token: Some("scrape-token-123".parse().unwrap()),
        ..mailroom::http::Edge::default()
    };
    let app = crate::test_app::spawn_app_with(test_db().await, api, edge).await;
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
