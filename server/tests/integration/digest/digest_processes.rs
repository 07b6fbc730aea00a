//! The digest ticker as separate `mailroom digest-tick` processes: ten racing on one database,
//! and one killed between its claim and its commit.

use sqlx::PgPool;

use crate::support::procs::{wait_until, Proc};

/// 2026-11-30 09:30 UTC, a Monday: every org below (Monday 09:00 UTC) is due.
const NOW: &str = "2026-11-30T09:30:00Z";

/// `n` orgs due at Monday 09:00 UTC, each with an opted-in and an opted-out admin.
async fn due_orgs(pool: &PgPool, n: i64) {
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(
        "insert into orgs (name, slug, timezone, digest_weekday, digest_hour, from_name, from_address)
         select 'Org ' || i, 'org-' || i, 'UTC', 1, 9, 'Org', 'news@example.org' from generate_series(1, $1) i",
    )
    .bind(n)
    .execute(&mut *tx)
    .await
    .unwrap();
    sqlx::query(
        "insert into users (org_id, email, email_lower, name, role, password_hash, weekly_digest)
         select o.id, k || o.id || '@example.org', k || o.id || '@example.org', k, 'admin', 'x', k = 'in'
         from orgs o, (values ('in'), ('out')) v(k)",
    )
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
}

/// Pids of backends waiting for a lock on `table`.
async fn waiting_on(pool: &PgPool, table: &str) -> Vec<i32> {
    sqlx::query_scalar(
        "select l.pid from pg_locks l join pg_class c on c.oid = l.relation
         where c.relname = $1 and not l.granted",
    )
    .bind(table)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// A transaction holding `table` in SHARE mode: every write to it waits until it ends.
async fn hold_writes(pool: &PgPool, table: &str) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(&format!("lock table {table} in share mode"))
        .execute(&mut *tx)
        .await
        .unwrap();
    tx
}

fn tick_output(p: &Proc) -> serde_json::Value {
    let log = p.log_text();
    let line = log
        .lines()
        .find(|l| l.starts_with("{\"claimed\""))
        .unwrap_or_else(|| panic!("no report in:\n{log}"));
    serde_json::from_str(line).unwrap()
}

#[test]
fn ten_racing_ticker_processes_claim_each_org_once_and_queue_one_digest_per_opted_in_admin() {
    const ORGS: i64 = 1000;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (pool, url) = rt.block_on(crate::support::helpers::migrated_db_with_url());
    rt.block_on(due_orgs(&pool, ORGS));
    let dir = crate::support::helpers::data_dir();
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("MAILROOM_ALLOW_FAKE_CLOCK", "1"),
    ];

    // Hold the claims back until all ten are at their first insert, then release them together.
    let gate = rt.block_on(hold_writes(&pool, "digest_sends"));
    let mut procs: Vec<Proc> = (0..10)
        .map(|i| {
            Proc::start_with_env(
                &format!("t{i}"),
                dir.path(),
                &["digest-tick", "--now", NOW],
                &env,
            )
        })
        .collect();
    wait_until("ten tickers waiting at their claim", 60, || {
        rt.block_on(waiting_on(&pool, "digest_sends")).len() == 10
    });
    rt.block_on(gate.rollback()).unwrap();
    for p in &mut procs {
        assert!(p.wait_exit(60).success(), "{}", p.log_text());
    }

    let claimed: u64 = procs
        .iter()
        .map(|p| tick_output(p)["claimed"].as_u64().unwrap())
        .sum();
    let queued: i64 = procs
        .iter()
        .map(|p| tick_output(p)["recipients"].as_i64().unwrap())
        .sum();
    assert_eq!((claimed, queued), (ORGS as u64, ORGS));
    let (weeks, deliveries, distinct_users, opted_out): (i64, i64, i64, i64) = rt.block_on(
        sqlx::query_as(
            "select (select count(*) from digest_sends),
                    (select count(*) from deliveries where kind = 'digest'),
                    (select count(distinct user_id) from deliveries where kind = 'digest'),
                    (select count(*) from deliveries d join users u on u.id = d.user_id where not u.weekly_digest)",
        )
        .fetch_one(&pool),
    )
    .unwrap();
    assert_eq!(
        (weeks, deliveries, distinct_users, opted_out),
        (ORGS, ORGS, ORGS, 0)
    );

    // The tick again, after the race: nothing new.
    let mut again = Proc::start_with_env("again", dir.path(), &["digest-tick", "--now", NOW], &env);
    assert!(again.wait_exit(60).success());
    assert_eq!(tick_output(&again)["claimed"], 0);
}

#[test]
fn a_ticker_killed_between_claim_and_commit_claims_nothing_and_the_next_tick_sends() {
    use nix::sys::signal::Signal;
    const ORGS: i64 = 50;
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (pool, url) = rt.block_on(crate::support::helpers::migrated_db_with_url());
    rt.block_on(due_orgs(&pool, ORGS));
    let dir = crate::support::helpers::data_dir();
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("MAILROOM_ALLOW_FAKE_CLOCK", "1"),
    ];

    // Stop the ticker after its claim, at its enqueue: deliveries are locked against writes.
    let gate = rt.block_on(hold_writes(&pool, "deliveries"));
    let mut victim =
        Proc::start_with_env("victim", dir.path(), &["digest-tick", "--now", NOW], &env);
    wait_until("the ticker blocked at its enqueue", 60, || {
        rt.block_on(waiting_on(&pool, "deliveries")).len() == 1
    });
    let backend = rt.block_on(waiting_on(&pool, "deliveries"))[0];
    // Its claim is made (it holds the insert lock on digest_sends) but not committed.
    let claimed_uncommitted: bool = rt
        .block_on(
            sqlx::query_scalar(
                "select exists (select 1 from pg_locks l join pg_class c on c.oid = l.relation
                 where c.relname = 'digest_sends' and l.pid = $1 and l.granted and l.mode = 'RowExclusiveLock')",
            )
            .bind(backend)
            .fetch_one(&pool),
        )
        .unwrap();
    assert!(claimed_uncommitted);
    victim.signal(Signal::SIGKILL);
    victim.wait_exit(10);
    rt.block_on(gate.rollback()).unwrap();
    // The orphaned backend finds its client gone and rolls back.
    wait_until("the killed ticker's transaction to end", 30, || {
        let alive: bool = rt
            .block_on(
                sqlx::query_scalar("select exists (select 1 from pg_stat_activity where pid = $1)")
                    .bind(backend)
                    .fetch_one(&pool),
            )
            .unwrap();
        !alive
    });
    let (weeks, deliveries): (i64, i64) = rt
        .block_on(
            sqlx::query_as(
                "select (select count(*) from digest_sends), (select count(*) from deliveries)",
            )
            .fetch_one(&pool),
        )
        .unwrap();
    assert_eq!((weeks, deliveries), (0, 0), "nothing was claimed");

    let mut next = Proc::start_with_env("next", dir.path(), &["digest-tick", "--now", NOW], &env);
    assert!(next.wait_exit(60).success(), "{}", next.log_text());
    assert_eq!(tick_output(&next)["claimed"], ORGS);
    let deliveries: i64 = rt
        .block_on(
            sqlx::query_scalar("select count(*) from deliveries where kind = 'digest'")
                .fetch_one(&pool),
        )
        .unwrap();
    assert_eq!(deliveries, ORGS);
}
