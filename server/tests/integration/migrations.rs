use crate::support::helpers::{data_dir, empty_db, empty_db_with_url};

#[tokio::test]
async fn replicas_starting_together_apply_each_migration_once() {
    let pool = empty_db().await;
    let runs: Vec<_> = (0..6)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { app::db::migrate::run(&pool, false).await })
        })
        .collect();
    for r in runs {
        r.await.unwrap().expect("every concurrent start succeeds");
    }
    let applied: i64 = sqlx::query_scalar("select count(*) from _sqlx_migrations")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        applied as usize,
        app::db::migrate::migrator().migrations.len()
    );
}

#[tokio::test]
async fn serve_tolerates_a_newer_schema_but_migrate_is_strict() {
    let pool = empty_db().await;
    app::db::migrate::run(&pool, true).await.unwrap();
    // A later release applied a migration this build does not know.
    sqlx::query(
        "insert into _sqlx_migrations (version, description, success, checksum, execution_time)
         values (99990101000000, 'from the future', true, '\\x00', 1)",
    )
    .execute(&pool)
    .await
    .unwrap();
    app::db::migrate::run(&pool, false)
        .await
        .expect("tolerant run accepts it");
    let err = app::db::migrate::run(&pool, true).await.unwrap_err();
    assert!(err.to_string().contains("99990101000000"), "{err}");
}

#[tokio::test]
async fn with_database_url_the_binary_uses_that_database_and_starts_no_cluster() {
    let (pool, url) = empty_db_with_url().await;
    let dir = data_dir();
    let data = dir.path().to_str().unwrap().to_owned();
    let (status, stdout, stderr) = tokio::task::spawn_blocking(move || {
        crate::support::procs::run(&["migrate", "--data-dir", &data], &[("DATABASE_URL", &url)])
    })
    .await
    .unwrap();
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains("migrations are up to date"));
    let applied: i64 = sqlx::query_scalar("select count(*) from _sqlx_migrations")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        applied as usize,
        app::db::migrate::migrator().migrations.len()
    );
    assert!(
        !dir.path().join("postgres").exists(),
        "no embedded cluster was made"
    );
}
