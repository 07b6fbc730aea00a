//! Segment statements are planned for their own values each time: never kept prepared on
//! the connection (a generic plan cannot tell a rare event name from a common one), and
//! without a session setting that would also plan again every foreign-key check their
//! inserts fire (a materialisation fires two per recipient).

use app::db::segment;
use app::domain::segment::Group;
use serde_json::json;
use sqlx::postgres::PgPoolOptions;
use sqlx::Connection;

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;

#[tokio::test]
async fn segment_statements_are_sent_unprepared_and_leave_plan_caching_to_postgresql() {
    let shared = test_db().await;
    let acme = TestOrg::new(&shared, "acme").await;
    let (lists, _) = acme.audience(30).await;
    // One connection: every statement below runs on it.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with((*shared.connect_options()).clone())
        .await
        .unwrap();
    let tree: Group = serde_json::from_value(json!({"op": "all", "children": [
        {"type": "list", "list_id": lists[0]},
        {"type": "event", "name": "login", "did": false},
    ]}))
    .unwrap();
    let quiet = {
        let mut c = pool.acquire().await.unwrap();
        app::segments::save(&mut c, acme.id, None, None, "Quiet", &tree)
            .await
            .unwrap()
            .0
    };
    {
        let mut c = pool.acquire().await.unwrap();
        let clock = segment::clock(&mut c, acme.id, None).await.unwrap();
        for _ in 0..7 {
            let n = segment::count(&mut c, acme.id, &tree, &clock)
                .await
                .unwrap();
            let ids = segment::ids(&mut c, acme.id, &tree, &clock).await.unwrap();
            assert_eq!(n as usize, ids.len());
            assert!(n > 0);
            segment::members(&mut c, acme.id, &tree, &clock, 0, 5)
                .await
                .unwrap();
        }
        // Inside a segment statement's transaction only the hash memory is changed.
        let mut tx = c.begin().await.unwrap();
        let mut roomy = segment::roomy(&mut tx).await.unwrap();
        let (mode, mem): (String, String) = sqlx::query_as(
            "select current_setting('plan_cache_mode'), current_setting('work_mem')",
        )
        .fetch_one(&mut *roomy)
        .await
        .unwrap();
        assert_eq!((mode.as_str(), mem.as_str()), ("auto", "256MB"));
    }
    let id = acme
        .campaign()
        .to(&[])
        .and_segments(&[quiet])
        .approved()
        .await;
    {
        let mut c = pool.acquire().await.unwrap();
        app::db::campaign::edit::estimate(&mut c, acme.id, id)
            .await
            .unwrap();
    }
    let started = mailroom::workers::campaign::start_due(&pool).await.unwrap();
    assert_eq!(started.len(), 1);

    let kept: Vec<String> = sqlx::query_scalar("select statement from pg_prepared_statements")
        .fetch_all(&pool)
        .await
        .unwrap();
    // The check can see what sqlx keeps: the campaign's start is an ordinary statement.
    assert!(
        kept.iter().any(|s| s.contains("set status = 'sending'")),
        "{kept:#?}"
    );
    let segment_statements: Vec<&String> = kept
        .iter()
        .filter(|s| s.contains("from subscribers s") || s.contains("list_members m"))
        .collect();
    assert!(segment_statements.is_empty(), "{segment_statements:#?}");
}
