use app::db::rate_limit;

use crate::support::helpers::test_db;

#[tokio::test]
async fn racing_replicas_never_take_more_than_the_bucket_holds() {
    let pool = test_db().await;
    // 50 tokens, refilling so slowly that the race cannot earn a whole extra one.
    rate_limit::configure(&pool, "smtp.example:25", 50.0, 0.001)
        .await
        .unwrap();
    let takers: Vec<_> = (0..6)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let mut got = 0;
                for _ in 0..10 {
                    got += rate_limit::take(&pool, "smtp.example:25", 3).await.unwrap();
                }
                got
            })
        })
        .collect();
    let mut total = 0;
    for t in takers {
        total += t.await.unwrap();
    }
    assert_eq!(total, 50);
    assert_eq!(
        rate_limit::take(&pool, "smtp.example:25", 5).await.unwrap(),
        0,
        "empty"
    );
}

#[tokio::test]
async fn the_bucket_refills_by_database_time_up_to_its_capacity() {
    let pool = test_db().await;
    rate_limit::configure(&pool, "relay", 20.0, 2.0)
        .await
        .unwrap();
    assert_eq!(rate_limit::take(&pool, "relay", 100).await.unwrap(), 20);
    // Five seconds pass on the database clock: 10 tokens come back.
    sqlx::query("update rate_buckets set refilled_at = refilled_at - interval '5 seconds'")
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(rate_limit::take(&pool, "relay", 100).await.unwrap(), 10);
    // An hour: only the capacity.
    sqlx::query("update rate_buckets set refilled_at = refilled_at - interval '1 hour'")
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(rate_limit::take(&pool, "relay", 100).await.unwrap(), 20);
    assert_eq!(
        rate_limit::take(&pool, "unknown-server", 5).await.unwrap(),
        0
    );
}

/// The leader forgets API-token and sign-up-IP buckets that are full again (the same as none),
/// and keeps the others: one still refilling, and an SMTP server's.
#[tokio::test]
async fn full_buckets_of_tokens_and_sign_up_addresses_are_forgotten_and_the_others_kept() {
    let pool = test_db().await;
    for key in [
        "signup-ip:192.0.2.1",
        "signup-ip:192.0.2.2",
        "api-token:7",
        "smtp:relay.example:25",
    ] {
        app::db::rate_limit::ensure(&pool, key, 5.0, 0.001)
            .await
            .unwrap();
    }
    assert_eq!(
        app::db::rate_limit::take(&pool, "signup-ip:192.0.2.2", 1)
            .await
            .unwrap(),
        1
    );
    let gone = app::db::rate_limit::forget_full(&pool).await.unwrap();
    assert_eq!(gone, 2);
    let left: Vec<String> = sqlx::query_scalar("select server from rate_buckets order by server")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(left, ["signup-ip:192.0.2.2", "smtp:relay.example:25"]);
}
