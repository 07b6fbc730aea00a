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

/// The migration that moved claims off the delivery row takes back every attempt in flight as
/// the reaper would (marked: `unknown`; not marked: back in the queue, its attempt number
/// burned), queues what was queued, and from then on refuses `sending` in the table, so an
/// older binary left running can no longer claim.
#[tokio::test]
async fn the_queue_migration_takes_back_attempts_in_flight_as_a_reaper_would() {
    use sqlx::migrate::Migrate;
    const QUEUE: i64 = 20261212000100;
    // Test messages' job ids, in the order of the rows read back.
    const M: &str = "test:1:1:m:b@example.org";
    const U: &str = "test:1:1:u:c@example.org";
    const W: &str = "test:1:1:w:a@example.org";
    let (pool, _) = empty_db_with_url().await;
    let migrator = app::db::migrate::migrator();
    let mut conn = pool.acquire().await.unwrap();
    conn.ensure_migrations_table().await.unwrap();
    for m in migrator.iter().filter(|m| m.version < QUEUE) {
        conn.apply(m).await.unwrap();
    }
    sqlx::query(
        "insert into orgs (id, name, slug, from_name, from_address)
         overriding system value values (1, 'Acme', 'acme', 'Acme', 'news@acme.example')",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    sqlx::query(
        "insert into deliveries (job_id, org_id, kind, priority, recipient, email_lower, status,
                                 attempt, claimed_by, lease_until)
         values ('test:1:1:w:a@example.org', 1, 'test', 0, 'a@example.org', 'a@example.org', 'queued', 0, null, null),
                ('test:1:1:m:b@example.org', 1, 'test', 0, 'b@example.org', 'b@example.org', 'sending', 1, 'old', now()),
                ('test:1:1:u:c@example.org', 1, 'test', 0, 'c@example.org', 'c@example.org', 'sending', 2, 'old', now())",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    sqlx::query(
        "insert into delivery_mark_groups (job_ids, attempts) values (array['test:1:1:m:b@example.org'], array[1])",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    drop(conn);
    app::db::migrate::run(&pool, true).await.unwrap();

    let rows: Vec<(String, String, i32, bool)> = sqlx::query_as(
        "select job_id, status, attempt,
                exists (select 1 from delivery_queue q where q.job_id = d.job_id)
         from deliveries d order by job_id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        vec![
            (M.into(), "unknown".into(), 1, false),
            (U.into(), "queued".into(), 2, true),
            (W.into(), "queued".into(), 0, true),
        ]
    );
    let refused = sqlx::query(
        "update deliveries set status = 'sending' where job_id = 'test:1:1:w:a@example.org'",
    )
    .execute(&pool)
    .await
    .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("deliveries_never_written_sending"),
        "{refused}"
    );
    let mut claimed: Vec<(String, i32)> = app::db::delivery::claim(&pool, 10, 60.0, "new")
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.job_id(), c.attempt))
        .collect();
    claimed.sort();
    assert_eq!(
        claimed,
        vec![(U.into(), 3), (W.into(), 1)],
        "a new attempt number each"
    );
}

/// Upgrading from before the per-org event ids and path-free captured replies: a Mailgun token
/// taken before stays taken for each org with a Mailgun endpoint (a replay across the upgrade
/// is still one), and replies recorded with the server's directory name the file alone.
#[tokio::test]
async fn the_upgrade_keeps_taken_tokens_per_org_and_drops_paths_from_captured_replies() {
    use sqlx::migrate::Migrate;
    const PER_ORG: i64 = 20261213000100;
    let (pool, _) = empty_db_with_url().await;
    let migrator = app::db::migrate::migrator();
    let mut conn = pool.acquire().await.unwrap();
    conn.ensure_migrations_table().await.unwrap();
    for m in migrator.iter().filter(|m| m.version < PER_ORG) {
        conn.apply(m).await.unwrap();
    }
    sqlx::query(
        "insert into orgs (id, name, slug, from_name, from_address) overriding system value
         values (1, 'Acme', 'acme', 'Acme', 'news@acme.example'),
                (2, 'Globex', 'globex', 'Globex', 'news@globex.example')",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    sqlx::query(
        "insert into webhook_endpoints (id, org_id, source, secret)
         values ('mailgun-endpoint-of-acme', 1, 'mailgun', 'k1'),
                ('mailgun-endpoint-of-globex', 2, 'mailgun', 'k2'),
                ('generic-endpoint-of-globex', 2, 'generic', 'k3')",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    sqlx::query("insert into webhook_nonces (source, nonce, body_sha256) values ('mailgun', 'tok', '\\x00')")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query(
        "insert into deliveries (job_id, org_id, kind, priority, recipient, email_lower, status,
                                 attempt, smtp_reply, last_error)
         values ('test:1:1:d:a@example.org', 1, 'test', 0, 'a@example.org', 'a@example.org',
                 'delivered', 1, 'captured to /var/lib/mailroom/captured/1/test:1:1:d:a@example.org.eml', null),
                ('test:1:1:d:b@example.org', 1, 'test', 0, 'b@example.org', 'b@example.org',
                 'failed', 1, null, 'cannot capture to /var/lib/mailroom/captured/1/b.eml: No space left on device (os error 28)'),
                ('test:1:1:d:c@example.org', 1, 'test', 0, 'c@example.org', 'c@example.org',
                 'delivered', 1, '250 2.0.0 Ok: queued as ABC/123', null)",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    drop(conn);
    app::db::migrate::run(&pool, true).await.unwrap();

    let taken: Vec<(i64, String)> =
        sqlx::query_as("select org_id, nonce from webhook_nonces order by org_id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(taken, vec![(1, "tok".into()), (2, "tok".into())]);
    let replies: Vec<(Option<String>, Option<String>)> =
        sqlx::query_as("select smtp_reply, last_error from deliveries order by job_id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        replies,
        vec![
            (
                Some("captured as test:1:1:d:a@example.org.eml".into()),
                None
            ),
            (
                None,
                Some("cannot capture as b.eml: No space left on device (os error 28)".into())
            ),
            (Some("250 2.0.0 Ok: queued as ABC/123".into()), None),
        ]
    );
}
